"""`pte audit verify STORE` passes a store whose runs wait for approval (#24).

A run paused for a person's approval is not sealed yet, and that is its proper state: the
README's "verify the store regularly" must pass while approvals wait, and still fail on a
run whose records were edited.
"""

from __future__ import annotations

import json
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


@pytest.fixture
def paused_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> str:
    module = sys.modules[load_pack("backoffice")["get_invoice"].func.__module__]
    module.create_sample_ledger(tmp_path / "ledger.sqlite", overwrite=True)
    monkeypatch.setenv("PTE_LEDGER", str(tmp_path / "ledger.sqlite"))
    url = f"sqlite://{tmp_path / 'runs.db'}"
    make_deployment(tmp_path, monkeypatch, capsys, "--tools", "backoffice", "--store", url)  # it pays
    plan = tmp_path / "pay.json"
    plan.write_text(PAY, encoding="utf-8")
    argv = ["--quiet", "execute", str(plan), "--tools", "backoffice", "--store", url, "--run-id", "p1"]
    assert main(argv) == 0
    assert "awaiting_approval: run p1" in capsys.readouterr().out
    return url


def test_a_store_with_a_paused_run_verifies(paused_store: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--quiet", "audit", "verify", paused_store, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["failed"] == 0
    [run] = report["results"]
    assert (run["run_id"], run["status"], run["ok"]) == ("p1", "awaiting_approval", True)
    assert main(["--quiet", "audit", "verify", paused_store]) == 0
    assert "1 of 1 run(s) verified" in capsys.readouterr().out
    assert main(["--quiet", "audit", "verify", paused_store, "--run", "p1"]) == 0


def test_an_edited_paused_run_still_fails(paused_store: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = paused_store.removeprefix("sqlite://")
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE pte_records SET line = replace(line, '120.00', '999.00') WHERE run_id = 'p1'")
    assert main(["--quiet", "audit", "verify", paused_store, "--json"]) == 1
    [run] = json.loads(capsys.readouterr().out)["results"]
    assert run["ok"] is False and run["status"] == "tampered"
