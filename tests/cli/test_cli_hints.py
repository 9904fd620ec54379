"""Every hint the CLI prints is a command that runs as printed: each test executes the hint.

No placeholders (``URL``, ``NAME``, ``…``) and no missing required flags: the hint carries the
plan file, the run id, the store and the deployment's flags the command was given.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pte.cli import main
from tests._cli_run import PAY, hint, ledger, make_deployment, payments, run_hint

__all__ = ["ledger"]  # the fixture, used by name


def test_plan_hints_approve_and_execute_run_as_printed(
    tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    make_deployment(tmp_path, monkeypatch, capsys, "--tools", "backoffice")  # its writes need one
    (tmp_path / "resp.json").write_text(json.dumps([PAY]), encoding="utf-8")
    argv = ["--quiet", "plan", "pay a supplier", "--tools", "backoffice", "-o", "my plan.json"]
    assert main([*argv, "--replay-responses", "resp.json"]) == 0
    out = capsys.readouterr().out
    approve, execute = hint(out, "needs approval): "), hint(out, "execute it: ")
    # Executed without the approval, the run waits in the deployment's store (#33: the hint
    # names no log): the approve hint is needed.
    code, out, _ = run_hint(execute, capsys)
    assert code == 0 and "awaiting_approval" in out and payments(ledger) == 0
    code, out, err = run_hint(approve, capsys)
    assert code == 0, err
    # `pte approve`'s own hint: execute the approved plan once.
    code, out, err = run_hint(hint(out, "execute it (once) with: "), capsys)
    assert code == 0, err
    assert payments(ledger) == 1


@pytest.mark.parametrize("from_env", [False, True], ids=["--store", "PTE_STORE"])
def test_paused_run_hints_review_approve_resume_run_as_printed(
    tmp_path: Path,
    ledger: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    from_env: bool,
) -> None:
    url = f"sqlite:{tmp_path / 'runs.db'}"
    make_deployment(tmp_path, monkeypatch, capsys, "--tools", "backoffice", "--store", url)
    store = [] if from_env else ["--store", url]  # the deployment's own store, repeated
    if from_env:
        monkeypatch.setenv("PTE_STORE", url)
    (tmp_path / "pay.json").write_text(PAY, encoding="utf-8")
    assert main(["--quiet", "execute", "pay.json", "--tools", "backoffice", *store, "--run-id", "h1"]) == 0
    out = capsys.readouterr().out
    review, approve, resume = hint(out, "review: "), hint(out, "approve: "), hint(out, "then: ")
    assert "--store" not in resume  # the deployment names its store
    # Resumed before a decision: refused, with the approve command to run.
    code, _, err = run_hint(resume, capsys)
    assert code == 1
    assert hint(err, "approve or reject it first: ") == approve
    code, out, _ = run_hint(review, capsys)
    assert code == 0 and "h1" in out and "send_payment" in out
    assert run_hint(approve, capsys)[0] == 0
    code, out, err = run_hint(resume, capsys)
    assert code == 0, err
    assert payments(ledger) == 1


def test_approve_run_id_hint_resumes_with_the_deployments_packs(
    tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:{tmp_path / 'runs.db'}"
    make_deployment(tmp_path, monkeypatch, capsys, "--tools", "backoffice", "--store", url)
    (tmp_path / "pay.json").write_text(PAY, encoding="utf-8")
    assert (
        main(["--quiet", "execute", "pay.json", "--tools", "backoffice", "--store", url, "--run-id", "a1"])
        == 0
    )
    capsys.readouterr()
    assert main(["--quiet", "approve", "a1", "--by", "alice", "--store", url, "--tools", "backoffice"]) == 0
    code, _, err = run_hint(hint(capsys.readouterr().out, "continue it with: "), capsys)
    assert code == 0, err
    # (A submitted run's packs came from its job; under a deployment they are the deployment's.)
    assert payments(ledger) == 1


def test_endorsement_pause_hints_in_a_store_run_as_printed(
    tmp_path: Path, ledger: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A store run paused for an endorsement: review, endorse and resume hints run as printed."""
    from pte import SigningKey

    # private: the demo's scenario; the demo's policy
    from pte._cli import BILL_PAYMENT, ENDORSE_POLICY

    signer = SigningKey.generate()
    key, public = tmp_path / "approver.key", tmp_path / "approver.pub"
    key.write_bytes(signer.to_pem())
    key.chmod(0o600)
    public.write_bytes(signer.public_key.to_pem())
    monkeypatch.setenv("PTE_APPROVAL_SIGNING_KEY_FILE", str(key))  # the approver's, as hints assume
    (tmp_path / "bill.json").write_text(BILL_PAYMENT, encoding="utf-8")
    (tmp_path / "policy.json").write_text(json.dumps(ENDORSE_POLICY), encoding="utf-8")
    flags = ["--tools", "backoffice", "--policy", "policy.json", "--approval-keys", str(public)]
    flags += ["--store", f"sqlite:{tmp_path / 'runs.db'}", "--endorsements", "e.jsonl"]
    make_deployment(tmp_path, monkeypatch, capsys, *flags)  # the same flags, repeated, are accepted
    assert main(["--quiet", "execute", "bill.json", *flags, "--run-id", "e1"]) == 0
    code, out, err = run_hint(hint(capsys.readouterr().out, "approve: "), capsys)
    assert code == 0, err
    assert main(["--quiet", "resume", "e1", *flags]) == 0
    out = capsys.readouterr().out
    review, endorse, resume = hint(out, "review: "), hint(out, "endorse: "), hint(out, "then: ")
    code, out, _ = run_hint(review, capsys)
    assert code == 0 and "send_payment.iban" in out and payments(ledger) == 0
    # Resumed before the decision: it waits again, showing the same hints.
    code, out, _ = run_hint(resume, capsys)
    assert code == 0 and hint(out, "endorse: ") == endorse and payments(ledger) == 0
    code, out, err = run_hint(endorse, capsys)
    assert code == 0 and "(signed)" in out, err
    code, out, err = run_hint(resume, capsys)
    assert code == 0 and "succeeded" in out, (out, err)
    assert payments(ledger) == 1
