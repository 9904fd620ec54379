"""Every printed ``pte approve``/``pte endorse`` runs as printed under approver keys (#33).

Under a deployment with approver keys an unsigned decision is refused (it would never count),
so a hint ``pte endorse RUN --by NAME`` ran only when ``$PTE_APPROVAL_SIGNING_KEY_FILE`` named
the approver's key. A hint now carries ``--signing-key PATH``: the key that variable names, or
the approver's key found beside the deployment's approver public keys (``pte keys generate
KEY`` writes ``KEY`` and ``KEY.pub``); when this machine holds no approver's key, the hint
says so. Each hint below is run verbatim.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from tests._cli_run import PAY, cli, hint, ledger, make_deployment, payments, run_hint, store_deployment

__all__ = ["ledger"]  # the fixture, used by name

#: How the approver's key is known: the variable names it, or it lies beside its public key.
KEY_SOURCES = ("variable", "beside")


def _approver(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], source: str
) -> Path:
    """The approver's key pair (`pte keys generate`), known as `source` says; its public key file."""
    monkeypatch.delenv("PTE_APPROVAL_SIGNING_KEY_FILE", raising=False)
    monkeypatch.delenv("PTE_APPROVAL_SIGNING_KEY", raising=False)
    keys = tmp_path / "keys"
    keys.mkdir()
    assert cli(capsys, "keys", "generate", str(keys / "approver.pem"))[0] == 0
    if source == "variable":  # named by the variable, under a name no search would find
        (keys / "approver.pem").rename(keys / "alice-private")
        monkeypatch.setenv("PTE_APPROVAL_SIGNING_KEY_FILE", str(keys / "alice-private"))
    return keys / "approver.pem.pub"


def _endorse_as_printed(out: str, source: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """The endorse hint in `out` names the approver's key and, run as printed, signs; the continue
    hint it prints then ends the run ``succeeded``. The endorse hint."""
    endorse = hint(out, "endorse: ")
    _signed(endorse, source, tmp_path)
    code, out, err = run_hint(endorse, capsys)
    assert code == 0 and "(signed)" in out, out + err
    code, out, err = run_hint(hint(out, "continue with: "), capsys)
    assert code == 0 and "succeeded" in out, out + err
    return endorse


def _signed(command: str, source: str, tmp_path: Path) -> None:
    """The hint names the approver's key (absolute, so it runs from any folder)."""
    words = shlex.split(command)
    assert "--signing-key" in words, command
    named = Path(words[words.index("--signing-key") + 1])
    expected = "alice-private" if source == "variable" else "approver.pem"
    assert named == tmp_path / "keys" / expected, command


@pytest.mark.parametrize("source", KEY_SOURCES)
def test_the_approve_hint_of_a_paused_store_run_signs_and_runs_as_printed(
    tmp_path: Path,
    ledger: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    source: str,
) -> None:
    public = _approver(tmp_path, monkeypatch, capsys, source)
    store_deployment(tmp_path, monkeypatch, capsys, "--approval-keys", str(public))
    code, out, err = cli(capsys, "execute", "pay.json", "--run-id", "r1")
    assert code == 0 and "awaiting_approval" in out, out + err
    approve, resume = hint(out, "approve: "), hint(out, "then: ")
    _signed(approve, source, tmp_path)
    # The resume before a decision prints the approve too: the same signed command.
    code, _, err = run_hint(resume, capsys)
    assert code == 1 and hint(err, "approve or reject it first: ") == approve
    code, out, err = run_hint(approve, capsys)
    assert code == 0 and "approved" in out, out + err
    code, out, err = run_hint(hint(out, "continue it with: "), capsys)
    assert code == 0 and "succeeded" in out, out + err
    assert payments(ledger) == 1


@pytest.mark.parametrize("source", KEY_SOURCES)
def test_the_endorse_hints_of_store_and_log_runs_sign_and_run_as_printed(
    tmp_path: Path,
    ledger: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    source: str,
) -> None:
    # private: the demo's bill payment and endorsement policy, as the other endorsement hints use
    from pte._cli import BILL_PAYMENT, ENDORSE_POLICY

    public = _approver(tmp_path, monkeypatch, capsys, source)
    (tmp_path / "policy.json").write_text(json.dumps(ENDORSE_POLICY), encoding="utf-8")
    store_deployment(tmp_path, monkeypatch, capsys, "--approval-keys", str(public), "--policy", "policy.json")
    (tmp_path / "bill.json").write_text(BILL_PAYMENT, encoding="utf-8")
    # In the store: approve as printed, continue, then the endorsement pause.
    code, out, err = cli(capsys, "execute", "bill.json", "--run-id", "e1")
    assert code == 0, out + err
    code, out, err = run_hint(hint(out, "approve: "), capsys)
    assert code == 0, out + err
    code, out, err = run_hint(hint(out, "continue it with: "), capsys)
    assert code == 0 and "awaiting_endorsement" in out, out + err
    endorse = _endorse_as_printed(out, source, tmp_path, capsys)
    assert payments(ledger) == 1
    # In an audit log: the plan file approved with the key the hints named, then the log's
    # endorsement pause (the plan file's own approve hints are the next test's).
    words = shlex.split(endorse)
    code, out, err = cli(capsys, "approve", "bill.json", *words[words.index("--signing-key") :])
    assert code == 0, out + err
    code, out, err = cli(capsys, "execute", "bill.json", "--audit", "bill.jsonl")
    assert code == 0 and "awaiting_endorsement" in out, out + err
    _endorse_as_printed(out, source, tmp_path, capsys)
    assert payments(ledger) == 2


@pytest.mark.parametrize("source", KEY_SOURCES)
def test_the_plan_and_refusal_approve_hints_sign_and_run_as_printed(
    tmp_path: Path,
    ledger: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    source: str,
) -> None:
    public = _approver(tmp_path, monkeypatch, capsys, source)
    make_deployment(tmp_path, monkeypatch, capsys, "--tools", "backoffice", "--approval-keys", str(public))
    (tmp_path / "resp.json").write_text(json.dumps([PAY]), encoding="utf-8")
    code, out, err = cli(
        capsys, "plan", "pay a supplier", "-o", "pay.json", "--replay-responses", "resp.json"
    )
    assert code == 0, out + err
    approve = hint(out, "needs approval): ")
    _signed(approve, source, tmp_path)
    # Executed into a log before approval: refused, and it prints the approve of the file.
    code, out, err = cli(capsys, "execute", "pay.json", "--audit", "a.jsonl")
    assert code == 1 and payments(ledger) == 0, out + err
    refusal_approve = hint(err, "approve it: ").removesuffix(", then run this command again")
    _signed(refusal_approve, source, tmp_path)
    code, out, err = run_hint(refusal_approve, capsys)
    assert code == 0 and "Ed25519-signed" in out, out + err
    code, out, err = cli(capsys, "execute", "pay.json", "--audit", "b.jsonl")
    assert code == 0 and payments(ledger) == 1, out + err
    # The plan's own approve, as printed, approves it again for a run in the deployment's store:
    # the execute it prints names no log (the deployment's store keeps the run), and runs once.
    code, out, err = run_hint(approve, capsys)
    assert code == 0 and "Ed25519-signed" in out, out + err
    execute = hint(out, "execute it (once) with: ")
    assert execute == "pte execute pay.json"
    code, out, err = run_hint(execute, capsys)
    assert code == 0 and "succeeded" in out and "runs.db run" in out and payments(ledger) == 2, out + err
    code, out, err = run_hint(execute, capsys)  # again: its approval is used, nothing pays twice
    assert code == 1 and payments(ledger) == 2, out + err


@pytest.mark.parametrize("source", KEY_SOURCES)
def test_the_requeue_approve_hint_signs_and_runs_as_printed(
    tmp_path: Path,
    ledger: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    source: str,
) -> None:
    public = _approver(tmp_path, monkeypatch, capsys, source)
    store_deployment(tmp_path, monkeypatch, capsys, "--approval-keys", str(public))
    assert cli(capsys, "execute", "pay.json", "--run-id", "r1")[0] == 0  # paused for approval
    code, out, err = cli(capsys, "runs", "requeue", "r1", "--broker", "redis://127.0.0.1:9/0")
    assert code == 1, out + err
    approve = hint(err, "queues it for a worker): ")
    _signed(approve, source, tmp_path)
    code, out, err = run_hint(approve, capsys)
    assert code == 0 and "approved" in out, out + err
    assert run_hint(hint(out, "continue it with: "), capsys)[0] == 0
    assert payments(ledger) == 1


def test_with_no_approver_key_on_this_machine_the_hint_says_so_and_nothing_pays(
    tmp_path: Path, ledger: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The approver's private key is elsewhere: no command here can sign, and the hint says that
    instead of printing one that would be refused."""
    public = _approver(tmp_path, monkeypatch, capsys, "beside")
    (tmp_path / "keys" / "approver.pem").unlink()
    store_deployment(tmp_path, monkeypatch, capsys, "--approval-keys", str(public))
    code, out, err = cli(capsys, "execute", "pay.json", "--run-id", "r1")
    assert code == 0 and "awaiting_approval" in out, out + err
    assert "--signing-key" not in hint(out, "approve: ")
    assert "holds none of their private keys" in out and str(public) in out
    assert payments(ledger) == 0


def test_a_key_beside_the_public_keys_that_is_not_an_approvers_is_never_suggested(
    tmp_path: Path, ledger: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Tamper: a private key put beside the approver public keys under the expected name, but not
    one of theirs, is not printed as the key to sign with (its decisions would never count)."""
    public = _approver(tmp_path, monkeypatch, capsys, "beside")
    (tmp_path / "keys" / "approver.pem").unlink()
    assert cli(capsys, "keys", "generate", str(tmp_path / "other.pem"))[0] == 0
    (tmp_path / "other.pem").rename(tmp_path / "keys" / "approver.pem")
    store_deployment(tmp_path, monkeypatch, capsys, "--approval-keys", str(public))
    code, out, err = cli(capsys, "execute", "pay.json", "--run-id", "r1")
    assert code == 0 and "--signing-key" not in hint(out, "approve: "), out + err
    assert "holds none of their private keys" in out
