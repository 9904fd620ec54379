"""Issue 33: last round's double payments, with no key exported and no flag.

Last round closed "truncate a paid log before its write and resume it" and "delete the
approval store's ``consumed`` line and execute the approved run again" only with
``$PTE_DEPLOYMENT_KEY_FILE`` exported. Under a deployment found the way git finds a
repository (`pte init` here, nothing exported), the deployment's key anchors every run, so
both are refused as they are with the variable: nothing pays twice.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from tests._cli_run import cli, ledger

__all__ = ["ledger"]  # the fixture, used by name

PAY = """{"pte_plan": "1", "steps": [
 {"id": "sup", "tool": "get_supplier", "args": {"supplier_id": "S001"}},
 {"id": "pay", "tool": "send_payment", "args": {"iban": {"$ref": "sup/iban"}, "amount": "120.00",
  "currency": "EUR", "reference": "Invoice 7"}}
], "result": {"$ref": "pay/payment_id"}}"""

_AUTHORITY_ENV = (
    "PTE_DEPLOYMENT",
    "PTE_DEPLOYMENT_KEY_FILE",
    "PTE_DEPLOYMENT_PUBLIC_KEY_FILE",
    "PTE_ANCHORS_FILE",
    "PTE_ANCHORS_SEEN_FILE",
    "PTE_STORE",
    "PTE_APPROVALS_FILE",
    "PTE_APPROVAL_PUBLIC_KEYS_FILE",
    "PTE_APPROVAL_SIGNING_KEY_FILE",
)


def _payments(ledger: Path) -> int:
    with sqlite3.connect(ledger) as conn:
        return int(conn.execute("SELECT count(*) FROM payments_out").fetchone()[0])


@pytest.fixture
def here(
    tmp_path: Path, ledger: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Path:
    """`pte init` in the working directory (the test's folder), nothing exported."""
    for name in _AUTHORITY_ENV:
        monkeypatch.delenv(name, raising=False)
    code, out, err = cli(capsys, "init", "--tools", "backoffice")
    assert code == 0, out + err
    (tmp_path / "pay.json").write_text(PAY, encoding="utf-8")
    return tmp_path


def _records(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _unconsume(here: Path) -> None:
    """Delete every ``consumed`` line of the deployment's approval store (a writer of that file)."""
    stores = [p for p in here.rglob("*.jsonl") if b'"consumed"' in p.read_bytes()]
    assert stores, "the approval's consumption is recorded in the deployment's approval store"
    for store in stores:
        lines = store.read_text(encoding="utf-8").splitlines(keepends=True)
        store.write_text("".join(ln for ln in lines if '"consumed"' not in ln), encoding="utf-8")


def test_a_paid_log_cut_before_its_write_is_not_resumed_with_nothing_exported(
    here: Path, ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = cli(capsys, "approve", "pay.json", "--by", "alice")
    assert code == 0, out + err
    code, out, err = cli(capsys, "execute", "pay.json", "--audit", "audit.jsonl")
    assert code == 0 and _payments(ledger) == 1, out + err
    log = here / "audit.jsonl"
    lines = log.read_text(encoding="utf-8").splitlines(keepends=True)
    pay = next(
        i for i, r in enumerate(_records(log)) if r["type"] == "step_started" and r.get("step_id") == "pay"
    )
    log.write_text("".join(lines[:pay]), encoding="utf-8")
    _unconsume(here)  # and the writer of the approval store helps: consumption undone
    code, out, err = cli(capsys, "resume", "audit.jsonl")
    assert code == 1, out + err
    assert "falls short of its signed anchor" in err
    assert _payments(ledger) == 1


def test_an_unconsumed_approval_pays_once_with_nothing_exported(
    here: Path, ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = cli(capsys, "approve", "pay.json", "--by", "alice")
    assert code == 0, out + err
    code, out, err = cli(capsys, "execute", "pay.json", "--audit", "first.jsonl")
    assert code == 0 and _payments(ledger) == 1, out + err
    _unconsume(here)
    code, out, err = cli(capsys, "execute", "pay.json", "--audit", "second.jsonl")
    assert code == 1, out + err
    assert "executes its writes once" in out + err
    assert _payments(ledger) == 1
