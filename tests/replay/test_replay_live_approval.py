"""`pte replay --live --allow-writes` under a deployment never pays twice on one approval (#35).

A plan approved once (`pte approve`) pays once when it is executed: the write consumes the
approval before its call, in the deployment's approval store. Replaying that run's log with
``--live --allow-writes`` would re-run the write for real, so the replayed run asks the same
store as ``execute`` does: the approval is spent, the replayed run ends
``failed_closed(approval_consumed)`` before any step runs, and replay reports the divergence
(exit 1). However often the log is replayed live, the ledger holds one payment and the store
one consumption. Under a deployment, ``--live`` takes its tools from it (no ``--tools``).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from tests._cli_run import cli, ledger, make_deployment

__all__ = ["ledger"]  # the fixture, used by name

PAY = """{"pte_plan": "1", "steps": [
 {"id": "supplier", "tool": "get_supplier", "args": {"supplier_id": "S001"}},
 {"id": "pay_invoice", "tool": "send_payment", "args": {"iban": {"$ref": "supplier/iban"},
  "amount": "120.00", "currency": "EUR", "reference": "Invoice 7"}}
], "result": {"$ref": "pay_invoice/payment_id"}}"""


def _payments(ledger: Path) -> int:
    with sqlite3.connect(ledger) as conn:
        return int(conn.execute("SELECT count(*) FROM payments_out").fetchone()[0])


def _consumptions(store: Path) -> list[dict[str, object]]:
    """The consumption entries of a JSON Lines approval store (`pte._policy._approval`)."""
    lines = [json.loads(line) for line in store.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [entry for entry in lines if "step_id" in entry and "run_id" in entry]


def test_a_live_replay_with_writes_never_pays_again_on_the_approval_its_run_consumed(
    tmp_path: Path, ledger: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    where = make_deployment(tmp_path, monkeypatch, capsys, "--tools", "backoffice", "--no-store")
    (tmp_path / "pay.json").write_text(PAY, encoding="utf-8")
    code, out, err = cli(capsys, "approve", "pay.json")
    assert code == 0, out + err
    code, out, err = cli(capsys, "execute", "pay.json", "--audit", "pay.jsonl")
    assert code == 0 and _payments(ledger) == 1, out + err
    store = next(where.glob("*approvals*.jsonl"))
    spent = _consumptions(store)
    assert [entry["step_id"] for entry in spent] == ["pay_invoice"], spent

    # Replayed from the log alone, nothing runs, and the run replays the same.
    code, out, err = cli(capsys, "replay", "pay.jsonl")
    assert code == 0 and "SAME" in out.upper(), out + err

    for _ in range(2):  # a first and a second live replay alike
        code, out, err = cli(capsys, "replay", "pay.jsonl", "--live", "--allow-writes")
        assert code == 1, out + err
        assert "DIVERGED" in out and "approval_consumed" in out, out + err
        assert _payments(ledger) == 1
        assert _consumptions(store) == spent  # nothing consumed again, nothing appended
