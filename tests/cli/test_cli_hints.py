"""Every hint the CLI prints is a command that runs as printed: each test executes the hint.

No placeholders (``URL``, ``NAME``, ``…``) and no missing required flags: the hint carries the
plan file, the run id, the store and the deployment's flags the command was given.
"""

from __future__ import annotations

import json
import re
import shlex
import sqlite3
import sys
from pathlib import Path

import pytest

from pte import load_pack
from pte.cli import main
from tests._cli_run import make_deployment

PAY = """{"pte_plan": "1", "steps": [
 {"id": "sup", "tool": "get_supplier", "args": {"supplier_id": "S001"}},
 {"id": "pay", "tool": "send_payment", "args": {"iban": {"$ref": "sup/iban"}, "amount": "120.00",
  "currency": "EUR", "reference": "Invoice 7"}}
], "result": {"$ref": "pay/payment_id"}}"""
PLACEHOLDER = re.compile(r"\bURL\b|\bNAME\b|…|\.\.\.|\bLOG\b|\bRUN_ID\b|PLAN_FILE")


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    module = sys.modules[load_pack("backoffice")["get_invoice"].func.__module__]
    path = tmp_path / "ledger.sqlite"
    module.create_sample_ledger(path, overwrite=True)
    monkeypatch.setenv("PTE_LEDGER", str(path))
    monkeypatch.delenv("PTE_STORE", raising=False)
    monkeypatch.delenv("PTE_BROKER", raising=False)
    monkeypatch.chdir(tmp_path)
    return path


def _payments(ledger: Path) -> int:
    with sqlite3.connect(ledger) as conn:
        return int(conn.execute("SELECT count(*) FROM payments_out").fetchone()[0])


def _hint(text: str, after: str) -> str:
    """The command printed after `after` on its line."""
    line = next(line for line in text.splitlines() if after in line)
    command = line[line.index(after) + len(after) :].strip()
    assert command.startswith("pte "), line
    assert not PLACEHOLDER.search(command), command
    return command


def _run(command: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    words = shlex.split(command)
    assert words[0] == "pte"
    code = main(["--quiet", *words[1:]])
    out, err = capsys.readouterr()
    return code, out, err


def test_plan_hints_approve_and_execute_run_as_printed(
    tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    make_deployment(tmp_path, monkeypatch, capsys, "--tools", "backoffice")  # its writes need one
    (tmp_path / "resp.json").write_text(json.dumps([PAY]), encoding="utf-8")
    argv = ["--quiet", "plan", "pay a supplier", "--tools", "backoffice", "-o", "my plan.json"]
    assert main([*argv, "--replay-responses", "resp.json"]) == 0
    out = capsys.readouterr().out
    approve, execute = _hint(out, "needs approval): "), _hint(out, "execute it: ")
    # Executed without the approval, the run waits in the deployment's store (#33: the hint
    # names no log): the approve hint is needed.
    code, out, _ = _run(execute, capsys)
    assert code == 0 and "awaiting_approval" in out and _payments(ledger) == 0
    code, out, err = _run(approve, capsys)
    assert code == 0, err
    # `pte approve`'s own hint: execute the approved plan once.
    code, out, err = _run(_hint(out, "execute it (once) with: "), capsys)
    assert code == 0, err
    assert _payments(ledger) == 1


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
    review, approve, resume = _hint(out, "review: "), _hint(out, "approve: "), _hint(out, "then: ")
    assert "--store" not in resume  # the deployment names its store
    # Resumed before a decision: refused, with the approve command to run.
    code, _, err = _run(resume, capsys)
    assert code == 1
    assert _hint(err, "approve or reject it first: ") == approve
    code, out, _ = _run(review, capsys)
    assert code == 0 and "h1" in out and "send_payment" in out
    assert _run(approve, capsys)[0] == 0
    code, out, err = _run(resume, capsys)
    assert code == 0, err
    assert _payments(ledger) == 1


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
    code, _, err = _run(_hint(capsys.readouterr().out, "continue it with: "), capsys)
    assert code == 0, err
    # (A submitted run's packs came from its job; under a deployment they are the deployment's.)
    assert _payments(ledger) == 1


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
    code, out, err = _run(_hint(capsys.readouterr().out, "approve: "), capsys)
    assert code == 0, err
    assert main(["--quiet", "resume", "e1", *flags]) == 0
    out = capsys.readouterr().out
    review, endorse, resume = _hint(out, "review: "), _hint(out, "endorse: "), _hint(out, "then: ")
    code, out, _ = _run(review, capsys)
    assert code == 0 and "send_payment.iban" in out and _payments(ledger) == 0
    # Resumed before the decision: it waits again, showing the same hints.
    code, out, _ = _run(resume, capsys)
    assert code == 0 and _hint(out, "endorse: ") == endorse and _payments(ledger) == 0
    code, out, err = _run(endorse, capsys)
    assert code == 0 and "(signed)" in out, err
    code, out, err = _run(resume, capsys)
    assert code == 0 and "succeeded" in out, (out, err)
    assert _payments(ledger) == 1
