"""Safe by default (#33): a command that can call a write does so only under a deployment whose
key this machine holds; without one it says how to make one (`pte init`), exit 2, nothing
appended. Read-only work keeps working with flags alone."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tests._cli_run import approver_keys, cli, ledger, make_deployment

__all__ = ["ledger"]  # the fixture, used by name

PAY = """{"pte_plan": "1", "steps": [
 {"id": "sup", "tool": "get_supplier", "args": {"supplier_id": "S001"}},
 {"id": "pay", "tool": "send_payment", "args": {"iban": {"$ref": "sup/iban"}, "amount": "120.00",
  "currency": "EUR", "reference": "Invoice 7"}}
], "result": {"$ref": "pay/payment_id"}}"""
READ = """{"pte_plan": "1", "steps": [
 {"id": "sup", "tool": "get_supplier", "args": {"supplier_id": "S001"}}
], "result": {"$ref": "sup/iban"}}"""


def _payments(ledger: Path) -> int:
    with sqlite3.connect(ledger) as conn:
        return int(conn.execute("SELECT count(*) FROM payments_out").fetchone()[0])


@pytest.fixture(autouse=True)
def _no_deployment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("PTE_DEPLOYMENT", "PTE_STORE", "PTE_DEPLOYMENT_KEY_FILE"):
        monkeypatch.delenv(name, raising=False)


def test_the_flag_only_repro_cannot_run_a_write_without_a_deployment(
    tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The red team's exact commands with no deployment: a flag given to one command and not
    the next was the bug, so a write is refused until a deployment names keys for every command."""
    _, public = approver_keys(tmp_path)
    (tmp_path / "pay.json").write_text(PAY, encoding="utf-8")
    url = f"sqlite:{tmp_path / 'runs.db'}"
    code, out, err = cli(
        capsys, "execute", "pay.json", "--tools", "backoffice", "--approval-keys", str(public),
        "--store", url, "--run-id", "r1",
    )  # fmt: skip
    assert code == 2, out + err
    assert "send_payment" in err and "pte init --tools PACK" in err
    assert not (tmp_path / "runs.db").exists() and _payments(ledger) == 0
    # The variable that named the keys is refused the same way.
    monkeypatch.setenv("PTE_APPROVAL_PUBLIC_KEYS_FILE", str(public))
    code, out, err = cli(capsys, "execute", "pay.json", "--tools", "backoffice", "--audit", "a.jsonl")
    assert code == 2 and "PTE_APPROVAL_PUBLIC_KEYS_FILE" in err and "pte init" in err, out + err
    assert not (tmp_path / "a.jsonl").exists() and _payments(ledger) == 0


def test_a_plan_of_reads_still_runs_with_flags_alone(
    tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "read.json").write_text(READ, encoding="utf-8")
    code, out, err = cli(capsys, "execute", "read.json", "--tools", "backoffice", "--audit", "a.jsonl")
    assert code == 0 and "DE" in out, err


def test_without_a_deployment_a_write_says_how_to_make_one(
    tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With no approver keys named, a write under flags alone still runs (its hints repeat its
    flags), and says how to make the deployment every command would share."""
    (tmp_path / "pay.json").write_text(PAY, encoding="utf-8")
    code, _, err = cli(capsys, "approve", "pay.json", "--by", "alice", "--tools", "backoffice")
    assert code == 0, err
    code, _, err = cli(capsys, "execute", "pay.json", "--tools", "backoffice", "--audit", "a.jsonl")
    assert code == 0 and "no deployment" in err and "pte init --tools PACK" in err
    assert _payments(ledger) == 1


def test_endorsements_by_flag_need_a_deployment(
    tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # private: the demo's scenario
    from pte._cli import BILL_PAYMENT

    (tmp_path / "bill.json").write_text(BILL_PAYMENT, encoding="utf-8")
    code, _, err = cli(
        capsys,
        "execute",
        "bill.json",
        "--tools",
        "backoffice",
        "--endorsements",
        "e.jsonl",
        "--audit",
        "a.jsonl",
    )
    assert code == 2 and "--endorsements" in err and "pte init" in err
    assert not (tmp_path / "a.jsonl").exists()


def test_resuming_a_write_needs_the_deployment_it_started_under(
    tmp_path: Path, ledger: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    make_deployment(tmp_path, monkeypatch, capsys, "--tools", "backoffice")
    (tmp_path / "pay.json").write_text(PAY, encoding="utf-8")
    assert cli(capsys, "execute", "pay.json", "--run-id", "r1")[0] == 0  # paused for approval
    store = f"sqlite:{tmp_path / 'deployment' / 'runs.db'}"
    monkeypatch.delenv("PTE_DEPLOYMENT")
    code, out, err = cli(capsys, "resume", "r1", "--store", store, "--tools", "backoffice")
    assert code == 2 and "continue it under that deployment" in err, out + err


def test_a_machine_without_the_deployment_key_runs_no_write(
    tmp_path: Path, ledger: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    where = make_deployment(tmp_path, monkeypatch, capsys, "--tools", "backoffice")
    (where / "deployment.key").unlink()  # a verifier's copy: the public key only
    (tmp_path / "pay.json").write_text(PAY, encoding="utf-8")
    code, out, err = cli(capsys, "execute", "pay.json", "--audit", "a.jsonl")
    assert code == 2 and "does not hold the deployment's key" in err, out + err
    assert not (tmp_path / "a.jsonl").exists()
    (tmp_path / "read.json").write_text(READ, encoding="utf-8")
    assert cli(capsys, "validate", "read.json")[0] == 0
