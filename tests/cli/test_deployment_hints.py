"""Hints under a deployment carry no authority, and run as printed (issue 33's critical repros).

Found by the red team on main 29c1bf5: a run started with ``--approval-keys`` paused; ``pte
approve RUN --signing-key … --tools backoffice`` printed ``pte resume RUN --tools backoffice``
without the keys, and run as printed it paid under an earlier *unsigned* approval; the
endorsement pause hint dropped ``--endorsements`` the same way (the run ended LogEnded, stuck
``running``). The fix is at the root: authority comes from the deployment (`pte.Deployment`),
so the next command reads the same keys and stores, and a hint needs no authority flag.
"""

from __future__ import annotations

import getpass
import json
from pathlib import Path

import pytest

from tests._cli_run import (
    PAY,
    PLACEHOLDER,
    approver_keys,
    cli,
    hint,
    ledger,
    make_deployment,
    payments,
    run_hint,
    store_deployment,
)

__all__ = ["ledger"]  # the fixture, used by name

#: Flags that name authority: a hint under a deployment never carries one.
AUTHORITY = ("--approval-keys", "--approvals", "--endorsements", "--policy", "--store", "--manifest")


def _hint(text: str, after: str) -> str:
    """The command printed after `after`: runnable, no placeholder, no authority flag."""
    return hint(text, after, never=AUTHORITY)


def test_resume_as_printed_after_a_signed_approval_never_pays_on_an_earlier_unsigned_one(
    tmp_path: Path, ledger: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    private, public = approver_keys(tmp_path)
    monkeypatch.delenv("PTE_APPROVAL_SIGNING_KEY_FILE", raising=False)
    make_deployment(tmp_path, monkeypatch, capsys, "--tools", "backoffice", "--approval-keys", str(public))
    (tmp_path / "pay.json").write_text(PAY, encoding="utf-8")
    code, out, err = cli(capsys, "execute", "pay.json", "--run-id", "r1")
    assert code == 0 and "awaiting_approval" in out, err
    resume = _hint(out, "then: ")
    assert resume == "pte resume r1"
    # An unsigned approval is refused outright: it would never count under approver keys.
    code, out, err = cli(capsys, "approve", "r1", "--by", "mallory")
    assert code == 2 and "signed by its approver keys" in err and "--signing-key" in err
    # One signed by a key that is not the deployment's is refused the same way.
    other, _ = approver_keys(tmp_path, "other")
    code, _, err = cli(capsys, "approve", "r1", "--by", "mallory", "--signing-key", str(other))
    assert code == 2 and "not one of the deployment's approver keys" in err
    assert payments(ledger) == 0
    # Resumed as printed before a decision: refused, nothing paid.
    code, _, err = run_hint(resume, capsys)
    assert code == 1 and payments(ledger) == 0
    # Approved as the issue did (signing key, --tools): the printed resume carries no keys flag,
    # and still runs under the deployment's approver keys.
    code, out, err = cli(
        capsys, "approve", "r1", "--by", "alice", "--signing-key", str(private), "--tools", "backoffice"
    )
    assert code == 0, err
    resume = _hint(out, "continue it with: ")
    code, out, err = run_hint(resume, capsys)
    assert code == 0 and "succeeded" in out, err
    assert payments(ledger) == 1


def test_an_unsigned_approval_recorded_in_the_store_never_counts_under_the_deployments_keys(
    tmp_path: Path, ledger: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's attack: an unsigned approval already in the store (written before the keys were
    configured, or by a writer of the store) is not one the resume may pay on."""
    from pte.stores import open_store

    _, public = approver_keys(tmp_path)
    where = make_deployment(
        tmp_path, monkeypatch, capsys, "--tools", "backoffice", "--approval-keys", str(public)
    )
    (tmp_path / "pay.json").write_text(PAY, encoding="utf-8")
    assert cli(capsys, "execute", "pay.json", "--run-id", "r1")[0] == 0
    from pte.deployment import decide

    with open_store(f"sqlite://{where / 'runs.db'}") as store:
        decide(store, "r1", by="mallory", approve=True)  # unsigned, behind the CLI's back
    code, out, err = cli(capsys, "resume", "r1")
    assert payments(ledger) == 0, (code, out, err)
    assert "awaiting_approval" in out or code == 1


def test_endorsement_pause_hints_in_a_store_run_as_printed_under_a_deployment(
    tmp_path: Path, ledger: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The endorsement pause hint no longer drops the endorsement store: the deployment names it."""
    # private: the demo's scenario; the demo's policy
    from pte._cli import BILL_PAYMENT, ENDORSE_POLICY

    private, public = approver_keys(tmp_path)
    monkeypatch.setenv("PTE_APPROVAL_SIGNING_KEY_FILE", str(private))  # the approver's, as hints assume
    (tmp_path / "bill.json").write_text(BILL_PAYMENT, encoding="utf-8")
    (tmp_path / "policy.json").write_text(json.dumps(ENDORSE_POLICY), encoding="utf-8")
    make_deployment(
        tmp_path, monkeypatch, capsys,
        "--tools", "backoffice", "--policy", "policy.json", "--approval-keys", str(public),
    )  # fmt: skip
    code, out, err = cli(capsys, "execute", "bill.json", "--run-id", "e1")
    assert code == 0, err
    code, out, err = run_hint(_hint(out, "approve: "), capsys)
    assert code == 0, err
    code, out, err = run_hint(_hint(out, "continue it with: "), capsys)
    assert code == 0 and "awaiting_endorsement" in out, out + err
    review, endorse, resume = _hint(out, "review: "), _hint(out, "endorse: "), _hint(out, "then: ")
    assert resume == "pte resume e1"
    code, out, _ = run_hint(review, capsys)
    assert code == 0 and "send_payment.iban" in out and payments(ledger) == 0
    code, out, _ = run_hint(resume, capsys)  # before the decision: it waits again, same hints
    assert code == 0 and _hint(out, "endorse: ") == endorse and payments(ledger) == 0
    code, out, err = run_hint(endorse, capsys)
    assert code == 0 and "(signed)" in out, err
    code, out, err = run_hint(_hint(out, "continue with: "), capsys)
    assert code == 0 and "succeeded" in out, (out, err)
    assert payments(ledger) == 1
    code, out, _ = cli(capsys, "runs")
    assert "e1" in out


def test_endorsement_pause_of_a_log_run_hints_run_as_printed_under_a_deployment(
    tmp_path: Path, ledger: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run kept in an audit log (``--audit``): the pause hints name the log, no placeholder."""
    # private: the demo's scenario; the demo's policy
    from pte._cli import BILL_PAYMENT, ENDORSE_POLICY

    private, public = approver_keys(tmp_path)
    monkeypatch.setenv("PTE_APPROVAL_SIGNING_KEY_FILE", str(private))
    (tmp_path / "bill.json").write_text(BILL_PAYMENT, encoding="utf-8")
    (tmp_path / "policy.json").write_text(json.dumps(ENDORSE_POLICY), encoding="utf-8")
    make_deployment(
        tmp_path, monkeypatch, capsys,
        "--tools", "backoffice", "--policy", "policy.json", "--approval-keys", str(public), "--no-store",
    )  # fmt: skip
    code, out, err = cli(capsys, "approve", "bill.json", "--by", "alice")
    assert code == 0, err
    code, out, err = run_hint(_hint(out, "execute it (once) with: "), capsys)  # no store: into a log
    assert code == 0 and "awaiting_endorsement" in out, out + err
    endorse, resume = _hint(out, "endorse: "), _hint(out, "then: ")
    assert resume == "pte resume pte_audit.jsonl"
    code, out, err = run_hint(endorse, capsys)
    assert code == 0 and "(signed)" in out, err
    code, out, err = run_hint(_hint(out, "continue with: "), capsys)
    assert code == 0 and "succeeded" in out, (out, err)
    assert payments(ledger) == 1


def test_plan_hints_run_as_printed_under_a_deployment_with_keys_endorsements_anchors_and_a_store(
    tmp_path: Path, ledger: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    private, public = approver_keys(tmp_path)
    monkeypatch.setenv("PTE_APPROVAL_SIGNING_KEY_FILE", str(private))  # the approver's, as hints assume
    where = make_deployment(
        tmp_path, monkeypatch, capsys, "--tools", "backoffice", "--approval-keys", str(public)
    )
    (tmp_path / "resp.json").write_text(json.dumps([PAY]), encoding="utf-8")
    code, out, err = cli(
        capsys, "plan", "pay a supplier", "-o", "my plan.json", "--replay-responses", "resp.json"
    )
    assert code == 0, err
    approve, execute = _hint(out, "needs approval): "), _hint(out, "execute it: ")
    code, out, _ = run_hint(execute, capsys)  # not approved yet: it waits in the store, nothing paid
    assert code == 0 and "awaiting_approval" in out and payments(ledger) == 0
    code, out, err = run_hint(approve, capsys)
    assert code == 0 and "Ed25519-signed" in out, err
    code, out, err = run_hint(_hint(out, "execute it (once) with: "), capsys)
    assert code == 0 and "runs.db run" in out, err  # in the deployment's store (#33), not a log
    assert payments(ledger) == 1
    # Anchored with the deployment's key, in its anchors file; the store verifies under it.
    assert (where / "anchors.jsonl").stat().st_size > 0
    assert cli(capsys, "audit", "verify", f"sqlite://{where / 'runs.db'}")[0] == 0


def test_resume_before_a_decision_prints_the_approve_command_which_runs_as_printed(
    tmp_path: Path, ledger: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    private, public = approver_keys(tmp_path)
    monkeypatch.setenv("PTE_APPROVAL_SIGNING_KEY_FILE", str(private))
    make_deployment(tmp_path, monkeypatch, capsys, "--tools", "backoffice", "--approval-keys", str(public))
    (tmp_path / "pay.json").write_text(PAY, encoding="utf-8")
    code, out, _ = cli(capsys, "execute", "pay.json", "--run-id", "b1")
    review, resume = _hint(out, "review: "), _hint(out, "then: ")
    code, _, err = run_hint(resume, capsys)
    assert code == 1 and payments(ledger) == 0
    approve = _hint(err, "approve or reject it first: ")
    code, out, _ = run_hint(review, capsys)
    assert code == 0 and "b1" in out and "send_payment" in out
    code, out, err = run_hint(approve, capsys)
    assert code == 0, err
    code, out, err = run_hint(_hint(out, "continue it with: "), capsys)
    assert code == 0 and "succeeded" in out, err
    assert payments(ledger) == 1
    # Resumed again as printed: the run is sealed, nothing pays twice.
    code, out, err = run_hint(resume, capsys)
    assert payments(ledger) == 1


# --- hints that named placeholders (--by NAME, --endorsements FILE, "the --tools it was started
# with"): each is now a command that runs as printed under the deployment, and ends where it says.


def test_requeue_of_a_run_waiting_for_approval_prints_the_approve_that_runs_as_printed(
    tmp_path: Path, ledger: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    store_deployment(tmp_path, monkeypatch, capsys)
    assert cli(capsys, "execute", "pay.json", "--run-id", "r1")[0] == 0  # paused for approval
    code, out, err = cli(capsys, "runs", "requeue", "r1", "--broker", "redis://127.0.0.1:9/0")
    assert code == 1 and "waits for a person's decision" in err, out + err
    approve = _hint(err, "queues it for a worker): ")
    assert approve == "pte approve r1"  # the deployment names the store; --by is the reader's login
    code, out, err = run_hint(approve, capsys)
    assert code == 0 and f"by {getpass.getuser()}" in out, out + err
    code, out, err = run_hint(_hint(out, "continue it with: "), capsys)
    assert code == 0 and "succeeded" in out, out + err
    assert payments(ledger) == 1


def test_the_paused_records_message_is_a_command_that_runs_as_printed(
    tmp_path: Path, ledger: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`run_paused`'s message (what `pte audit show` and the store say the run waits for)."""
    from pte.stores import open_store

    url = store_deployment(tmp_path, monkeypatch, capsys)
    assert cli(capsys, "execute", "pay.json", "--run-id", "r1")[0] == 0
    with open_store(url) as store:
        paused = [r for r in store.records("r1") if r["type"] == "run_paused"][-1]
    command = paused["message"][paused["message"].index("(pte ") + 1 : paused["message"].index(")")]
    assert command == "pte approve r1" and not PLACEHOLDER.search(command)
    code, out, err = run_hint(command, capsys)
    assert code == 0 and "approved: plan" in out, out + err
    assert run_hint(_hint(out, "continue it with: "), capsys)[0] == 0
    assert payments(ledger) == 1


def test_approving_a_run_that_waits_for_an_endorsement_points_to_the_endorse_that_runs(
    tmp_path: Path, ledger: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # private: the demo's bill payment and endorsement policy, as the other endorsement hints use
    from pte._cli import BILL_PAYMENT, ENDORSE_POLICY

    private, public = approver_keys(tmp_path)
    monkeypatch.setenv("PTE_APPROVAL_SIGNING_KEY_FILE", str(private))
    (tmp_path / "policy.json").write_text(json.dumps(ENDORSE_POLICY), encoding="utf-8")
    store_deployment(tmp_path, monkeypatch, capsys, "--policy", "policy.json", "--approval-keys", str(public))
    (tmp_path / "bill.json").write_text(BILL_PAYMENT, encoding="utf-8")
    assert cli(capsys, "execute", "bill.json", "--run-id", "e1")[0] == 0
    assert run_hint(_hint(cli(capsys, "approve", "e1")[1], "continue it with: "), capsys)[0] == 0
    code, out, err = cli(capsys, "approve", "e1")  # it now waits for an endorsement, not an approval
    assert code == 1 and "awaiting_endorsement" in err, out + err
    review = _hint(err, "review it with: ").rstrip(")")
    assert review == "pte endorse e1"
    code, out, err = run_hint(review, capsys)
    assert code == 0 and "send_payment.iban" in out and payments(ledger) == 0, out + err


def test_approve_and_reject_record_the_readers_login_without_by(
    tmp_path: Path, ledger: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--by` defaults to the login of whoever runs the command (as `pte runs requeue` records it),
    so a hint need not guess a name; an empty one is still refused."""
    store_deployment(tmp_path, monkeypatch, capsys)
    for run_id in ("a1", "r1"):
        assert cli(capsys, "execute", "pay.json", "--run-id", run_id)[0] == 0
    code, out, err = cli(capsys, "approve", "a1", "--by", "")
    assert code == 2, out + err
    code, out, err = cli(capsys, "approve", "a1")
    assert code == 0 and f"by {getpass.getuser()}" in out, out + err
    code, out, err = cli(capsys, "reject", "r1")
    assert code == 0 and f"by {getpass.getuser()}" in out, out + err
    assert payments(ledger) == 0


def test_an_execute_refused_for_want_of_an_approval_prints_the_approve_that_runs(
    tmp_path: Path, ledger: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`failed_closed(approval_missing)` of `pte execute PLAN_FILE`: the engine's message names no
    placeholder, and the command prints the approve of that file, which runs as printed."""
    make_deployment(tmp_path, monkeypatch, capsys, "--tools", "backoffice", "--no-store")
    (tmp_path / "my pay.json").write_text(PAY, encoding="utf-8")
    command = ("execute", "my pay.json", "--tools", "backoffice", "--audit", "a.jsonl")
    code, out, err = cli(capsys, *command)
    assert code == 1 and "approval_missing" in err and not PLACEHOLDER.search(err.replace("--tools", "")), err
    approve = _hint(err, "approve it: ").removesuffix(", then run this command again")
    assert approve == "pte approve 'my pay.json' --tools backoffice"
    code, out, err = run_hint(approve, capsys)
    assert code == 0, out + err
    code, out, err = cli(capsys, *command[:-1], "b.jsonl")
    assert code == 0 and payments(ledger) == 1, out + err
