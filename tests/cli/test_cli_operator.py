"""The operator's commands with the deployment's environment: ``PTE_STORE`` stands for
``--store`` in every command that takes it (docs/operator.md)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from pte.cli import main
from pte.stores import open_store
from tests._cli_run import make_deployment
from tests._ledger import ledger

__all__ = ["ledger"]  # the fixture, used by name

PAY = """{"pte_plan": "1", "steps": [
 {"id": "sup", "tool": "get_supplier", "args": {"supplier_id": "S001"}},
 {"id": "pay", "tool": "send_payment", "args": {"iban": {"$ref": "sup/iban"}, "amount": "120.00",
  "currency": "EUR", "reference": "Invoice 7"}}
], "result": {"$ref": "pay/payment_id"}}"""


def _payments(ledger: Path) -> int:
    with sqlite3.connect(ledger) as conn:
        return int(conn.execute("SELECT count(*) FROM payments_out").fetchone()[0])


def test_pte_store_alone_stands_for_store_in_every_store_command(
    tmp_path: Path, ledger: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite://{tmp_path / 'env.db'}"
    make_deployment(tmp_path, monkeypatch, capsys, "--tools", "backoffice", "--store", url)  # it pays
    monkeypatch.setenv("PTE_STORE", url)  # the deployment's store: accepted
    monkeypatch.delenv("PTE_BROKER", raising=False)
    monkeypatch.chdir(tmp_path)
    plan = tmp_path / "pay.json"
    plan.write_text(PAY, encoding="utf-8")
    q = ["--quiet"]
    for run_id in ("e1", "e2", "e3"):
        assert main([*q, "execute", str(plan), "--tools", "backoffice", "--run-id", run_id]) == 0
        assert f"awaiting_approval: run {run_id}" in capsys.readouterr().out
    assert main([*q, "approvals", "list", "--json"]) == 0
    assert [r["run_id"] for r in json.loads(capsys.readouterr().out)] == ["e1", "e2", "e3"]
    # The README's worker recipe: `pte approve RUN_ID --by alice` with only PTE_STORE set.
    assert main([*q, "approve", "e1", "--by", "alice"]) == 0
    assert "approved: plan" in capsys.readouterr().out
    assert main([*q, "reject", "e2", "--by", "bob"]) == 0
    capsys.readouterr()
    assert main([*q, "resume", "e1", "--tools", "backoffice", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "succeeded"
    assert main([*q, "resume", "e2", "--tools", "backoffice"]) == 1
    assert "approval_rejected" in capsys.readouterr().err
    assert main([*q, "approvals", "expire", "--tools", "backoffice", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []  # e3's deadline is tomorrow
    assert main([*q, "audit", "verify", url, "--run", "e1"]) == 0
    assert _payments(ledger) == 1
    with open_store(url) as store:
        assert store.run("e3").status == "awaiting_approval"  # type: ignore[union-attr]


def test_with_pte_store_set_an_existing_plan_file_is_still_a_plan_file(
    tmp_path: Path, ledger: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PTE_STORE", f"sqlite://{tmp_path / 'env.db'}")
    plan = tmp_path / "pay.json"
    plan.write_text(PAY, encoding="utf-8")
    approvals = tmp_path / "approvals.jsonl"
    argv = ["--quiet", "approve", str(plan), "--by", "alice", "--tools", "backoffice"]
    assert main([*argv, "--approvals", str(approvals)]) == 0
    assert "approved run" in capsys.readouterr().out and approvals.exists()


def test_an_unknown_run_with_pte_store_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PTE_STORE", f"sqlite://{tmp_path / 'env.db'}")
    monkeypatch.chdir(tmp_path)
    assert main(["--quiet", "approve", "nope", "--by", "alice"]) == 1
    assert "not recorded" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(["--quiet", "resume", "nope", "--tools", "backoffice"])
    assert exit_info.value.code == 2


def test_pte_runs_lists_by_status_and_requeue_refuses_what_it_cannot_requeue(
    tmp_path: Path, ledger: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite://{tmp_path / 'runs.db'}"
    make_deployment(tmp_path, monkeypatch, capsys, "--tools", "backoffice", "--store", url)  # it pays
    monkeypatch.setenv("PTE_STORE", url)  # the deployment's store: accepted
    plan = tmp_path / "pay.json"
    plan.write_text(PAY, encoding="utf-8")
    q = ["--quiet"]
    assert main([*q, "execute", str(plan), "--tools", "backoffice", "--run-id", "w1"]) == 0
    assert main([*q, "approve", "w1", "--by", "alice"]) == 0
    assert main([*q, "resume", "w1", "--tools", "backoffice"]) == 0
    assert main([*q, "execute", str(plan), "--tools", "backoffice", "--run-id", "w2"]) == 0
    with open_store(url) as store:
        store.submit("w3", {"mode": "execute", "plan_text": PAY, "tools": ["backoffice"]})
    monkeypatch.setenv("PTE_BROKER", "redis://127.0.0.1:9/0")  # nothing listens: refusals come first
    capsys.readouterr()
    assert main([*q, "runs", "--json"]) == 0
    rows = {r["run_id"]: r for r in json.loads(capsys.readouterr().out)}
    assert {k: v["status"] for k, v in rows.items()} == {
        "w1": "succeeded",
        "w2": "awaiting_approval",
        "w3": "queued",
    }
    assert rows["w1"]["plan_hash"] == rows["w2"]["plan_hash"] and len(rows["w1"]["plan_hash"]) == 64
    assert rows["w3"]["plan_hash"] is None and rows["w3"]["requeues"] == 0
    assert main([*q, "runs", "--status", "queued"]) == 0
    out = capsys.readouterr().out
    assert "w3" in out and "w1" not in out and "1 run(s)" in out
    assert main([*q, "runs", "--status", "running"]) == 0
    assert "no running run" in capsys.readouterr().out
    # Refused with the reason, exit 1, nothing recorded.
    assert main([*q, "runs", "requeue", "w1"]) == 1
    assert "has ended (succeeded)" in capsys.readouterr().err
    assert main([*q, "runs", "requeue", "w2"]) == 1
    assert "waits for a person's decision" in capsys.readouterr().err
    assert main([*q, "runs", "requeue", "nope"]) == 1
    assert "no run 'nope'" in capsys.readouterr().err
    assert main([*q, "runs", "requeue", "w3"]) == 1  # requeueable, but the broker is down
    assert "not requeued" in capsys.readouterr().err
    with open_store(url) as store:
        assert store.requeues("w3") == [] and store.requeues("w1") == []
    with pytest.raises(SystemExit) as exit_info:
        main([*q, "runs", "requeue", "x'; DROP TABLE pte_runs; --"])
    assert exit_info.value.code == 2
