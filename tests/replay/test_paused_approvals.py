"""Approvals that pause a run: stored awaiting approval, decided by a person, resumed as the same run.

The run's plan and hash wait in the store; an approval (bound to the run and the exact
plan hash, signed when a key is configured) lets `resume` continue the same run; a
rejection ends it `failed_closed(approval_rejected)`; no decision by the deadline ends it
`approval_missing`. Every resumed run verifies and replays to the same decisions, and the
payment is made exactly once or not at all.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from pte import Engine, FailedClosed, ReasonCode, SigningKey, TrustedKeys, load_registry

# private: replay's parts, white-box
from pte._replay import replay_run
from pte.cli import main
from pte.deployment import Deployment, PausedRun, decide, pausing_gate, resume_run, run_in_store
from pte.stores import SQLiteStore, Store, StoreError, open_store
from tests._ledger import ledger

__all__ = ["ledger"]  # the fixture, used by name

PAY = """{"pte_plan": "1", "steps": [
 {"id": "sup", "tool": "get_supplier", "args": {"supplier_id": "S001"}},
 {"id": "pay", "tool": "send_payment", "args": {"iban": {"$ref": "sup/iban"}, "amount": "120.00",
  "currency": "EUR", "reference": "Invoice 7"}}
], "result": {"$ref": "pay/payment_id"}}"""

REGISTRY = load_registry(["backoffice", "calculator", "shaping"])


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return open_store(f"sqlite://{tmp_path / 'runs.db'}")


def _payments(ledger: Path) -> int:
    with sqlite3.connect(ledger) as conn:
        return int(conn.execute("SELECT count(*) FROM payments_out").fetchone()[0])


def _start(store: Store, run_id: str, **gate: Any) -> PausedRun:
    result = run_in_store(
        Engine(REGISTRY, approval=pausing_gate(store, REGISTRY, **gate)), store, run_id=run_id, plan_text=PAY
    )
    assert isinstance(result, PausedRun), result
    return result


def _types(store: Store, run_id: str) -> list[str]:
    return [r["type"] for r in store.records(run_id)]


def _replays_the_same(store: Store, run_id: str) -> bool:
    return replay_run(list(enumerate(store.records(run_id), 1)), deployment=Deployment.of()).outcome == "same"


def test_a_run_needing_approval_pauses_with_its_plan_and_hash(store: Store, ledger: Path) -> None:
    paused = _start(store, "p1")
    info = store.run("p1")
    assert info is not None and info.status == "awaiting_approval"
    assert info.plan_hash == paused.plan_hash and info.tools == ["send_payment"]
    assert info.plan is not None and [s["id"] for s in info.plan["steps"]] == ["sup", "pay"]
    assert _types(store, "p1") == ["run_started", "plan_accepted", "run_paused"]
    assert store.verify("p1").intact and _payments(ledger) == 0
    assert [i.run_id for i in store.runs("awaiting_approval")] == ["p1"]


def test_approved_then_resumed_continues_the_same_run(store: Store, ledger: Path) -> None:
    _start(store, "p2")
    decide(store, "p2", by="alice", approve=True)
    result = resume_run(store, "p2", REGISTRY, gate=pausing_gate(store, REGISTRY))
    assert not isinstance(result, PausedRun) and result.ok, result
    assert _types(store, "p2") == [
        "run_started", "plan_accepted", "run_paused", "run_resumed", "approval",
        "step_started", "step_finished", "step_started", "step_finished", "run_finished",
    ]  # fmt: skip
    approval = store.records("p2")[4]
    assert (approval["by"], approval["plan_hash"]) == ("alice", store.records("p2")[1]["plan_hash"])
    assert store.verify("p2").ok and _replays_the_same(store, "p2")
    assert _payments(ledger) == 1
    assert store.run("p2").status == "succeeded"  # type: ignore[union-attr]
    # Resuming again does nothing: the run is sealed.
    with pytest.raises(FailedClosed, match="already finished"):
        resume_run(store, "p2", REGISTRY, gate=pausing_gate(store, REGISTRY))
    assert _payments(ledger) == 1


def test_rejected_ends_failed_closed_approval_rejected(store: Store, ledger: Path) -> None:
    _start(store, "p3")
    decide(store, "p3", by="bob", approve=False, note="wrong supplier")
    result = resume_run(store, "p3", REGISTRY, gate=pausing_gate(store, REGISTRY))
    assert not isinstance(result, PausedRun)
    assert (result.status, result.reason) == ("failed_closed", ReasonCode.APPROVAL_REJECTED)
    assert "bob" in (result.message or "") and "wrong supplier" in (result.message or "")
    assert _types(store, "p3")[-2:] == ["approval_rejected", "run_finished"]
    assert store.verify("p3").ok and _replays_the_same(store, "p3")
    assert _payments(ledger) == 0


def test_no_decision_by_the_deadline_ends_approval_missing(store: Store, ledger: Path) -> None:
    start = datetime(2026, 11, 1, 9, 0, tzinfo=UTC)
    _start(store, "p4", ttl=timedelta(minutes=5), clock=lambda: start)
    info = store.run("p4")
    assert info is not None and info.expires_at == "2026-11-01T09:05:00.000000Z"
    with pytest.raises(StoreError, match=r"deadline .* has passed"):
        decide(store, "p4", by="late", approve=True, now=start + timedelta(minutes=6))
    late = pausing_gate(store, REGISTRY, clock=lambda: start + timedelta(minutes=6))
    result = resume_run(store, "p4", REGISTRY, gate=late)
    assert not isinstance(result, PausedRun)
    assert (result.status, result.reason) == ("failed_closed", ReasonCode.APPROVAL_MISSING)
    assert "deadline" in (result.message or "")
    assert store.verify("p4").ok and _payments(ledger) == 0


def test_resumed_before_a_decision_pauses_again_with_the_same_deadline(store: Store, ledger: Path) -> None:
    first = _start(store, "p5")
    again = resume_run(store, "p5", REGISTRY, gate=pausing_gate(store, REGISTRY))
    assert isinstance(again, PausedRun) and again.expires_at == first.expires_at
    assert store.verify("p5").intact and _payments(ledger) == 0


def test_an_approval_is_bound_to_its_run(store: Store, ledger: Path) -> None:
    _start(store, "a")
    _start(store, "b")  # the very same plan, so the same hash
    decide(store, "a", by="alice", approve=True)
    assert resume_run(store, "a", REGISTRY, gate=pausing_gate(store, REGISTRY)).status == "succeeded"
    assert isinstance(resume_run(store, "b", REGISTRY, gate=pausing_gate(store, REGISTRY)), PausedRun)
    assert _payments(ledger) == 1


def test_a_decision_names_the_plan_the_person_reviewed(store: Store, ledger: Path) -> None:
    _start(store, "p6")
    with pytest.raises(StoreError, match="waits with plan"):
        decide(store, "p6", by="alice", approve=True, plan_hash="0" * 64)
    with pytest.raises(StoreError, match="no run"):
        decide(store, "nobody-such", by="alice", approve=True)
    with pytest.raises(ValueError, match="control characters"):
        decide(store, "p6", by="alice\nbob", approve=True)


def test_with_a_key_an_approval_written_into_the_database_does_not_count(
    store: Store, ledger: Path, tmp_path: Path
) -> None:
    """Authority comes from the deployment's key: a row someone inserts without it is ignored."""
    signer = SigningKey.generate()
    keys = TrustedKeys([signer.public_key])
    paused = _start(store, "p7", keys=keys)
    assert isinstance(store, SQLiteStore)
    with sqlite3.connect(store.path) as conn:
        conn.execute(
            "INSERT INTO pte_approvals (run_id, plan_hash, decision, by_name, at, note, data) "
            "VALUES (?,?,?,?,?,?,?)",
            ("p7", paused.plan_hash, "approved", "mallory", "2026-11-23T00:00:00.000000Z", None,
             json.dumps({"plan_hash": paused.plan_hash, "by": "mallory", "at": "2026-11-23T00:00:00.000000Z",
                         "signature": "0" * 64})),
        )  # fmt: skip
    assert isinstance(
        resume_run(store, "p7", REGISTRY, gate=pausing_gate(store, REGISTRY, keys=keys)), PausedRun
    )
    assert _payments(ledger) == 0
    # Approved without the key (unsigned): does not count either.
    decide(store, "p7", by="eve", approve=True)
    assert isinstance(
        resume_run(store, "p7", REGISTRY, gate=pausing_gate(store, REGISTRY, keys=keys)), PausedRun
    )
    decide(store, "p7", by="alice", approve=True, signing_key=signer)
    result = resume_run(store, "p7", REGISTRY, gate=pausing_gate(store, REGISTRY, keys=keys))
    assert not isinstance(result, PausedRun) and result.ok
    approval = next(r for r in store.records("p7") if r["type"] == "approval")
    assert (approval["by"], approval["signed"]) == ("alice", True)
    assert _payments(ledger) == 1


def test_a_tampered_paused_run_is_not_resumed(store: Store, ledger: Path) -> None:
    _start(store, "p8")
    decide(store, "p8", by="alice", approve=True)
    assert isinstance(store, SQLiteStore)
    with sqlite3.connect(store.path) as conn:
        conn.execute("UPDATE pte_records SET line = replace(line, '120.00', '999.00') WHERE run_id = 'p8'")
    with pytest.raises(FailedClosed, match="does not verify"):
        resume_run(store, "p8", REGISTRY, gate=pausing_gate(store, REGISTRY))
    assert _payments(ledger) == 0


def test_the_cli_cycle(
    tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests._cli_run import make_deployment

    url = f"sqlite://{tmp_path / 'cli.db'}"
    make_deployment(tmp_path, monkeypatch, capsys, "--tools", "backoffice", "--store", url)
    plan = tmp_path / "pay.json"
    plan.write_text(PAY, encoding="utf-8")
    base = ["--quiet"]
    assert main([*base, "execute", str(plan), "--tools", "backoffice", "--store", url, "--run-id", "c1"]) == 0
    assert "awaiting_approval: run c1" in capsys.readouterr().out
    assert main([*base, "execute", str(plan), "--tools", "backoffice", "--store", url, "--run-id", "c2"]) == 0
    capsys.readouterr()
    assert main([*base, "approvals", "list", "--store", url, "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(r["run_id"], r["status"], r["tools"]) for r in listed] == [
        ("c1", "awaiting_approval", ["send_payment"]),
        ("c2", "awaiting_approval", ["send_payment"]),
    ]
    # Not decided yet: resume refuses (exit 1) and nothing runs.
    assert main([*base, "resume", "c1", "--store", url, "--tools", "backoffice"]) == 1
    assert main([*base, "approve", "c1", "--by", "alice", "--store", url]) == 0
    assert main([*base, "reject", "c2", "--by", "bob", "--note", "duplicate", "--store", url]) == 0
    capsys.readouterr()
    assert main([*base, "resume", "c1", "--store", url, "--tools", "backoffice", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "succeeded"
    assert main([*base, "resume", "c2", "--store", url, "--tools", "backoffice"]) == 1
    assert "failed_closed(approval_rejected)" in capsys.readouterr().err
    assert main([*base, "approve", "c2", "--by", "alice", "--store", url]) == 1  # it ended
    assert main([*base, "audit", "verify", url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["runs"] == 2
    assert main([*base, "replay", url]) == 0
    assert main([*base, "audit", "show", url, "--run", "c1"]) == 0
    out = capsys.readouterr().out
    assert "run_paused" in out and "awaiting approval of plan" in out
    assert _payments(ledger) == 1
    # Bad input: usage errors (exit 2), never a traceback.
    for argv in (
        ["audit", "verify", url, "--run", "x'; DROP TABLE pte_runs; --"],
        ["audit", "verify", url, "--run", "no-such-run"],
        ["resume", "nope", "--store", url, "--tools", "backoffice"],
        ["audit", "verify", "sqlite:///no/such/dir/x.db"],
        ["approvals", "list", "--store", "mysql://x"],
    ):
        with pytest.raises(SystemExit) as exit_info:
            main([*base, *argv])
        assert exit_info.value.code == 2, argv


def test_approvals_expire_ends_overdue_runs(
    tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite://{tmp_path / 'exp.db'}"
    store = open_store(url)
    start = datetime.now(UTC) - timedelta(hours=2)
    _start(store, "old", ttl=timedelta(hours=1), clock=lambda: start)  # deadline an hour ago
    _start(store, "new")  # deadline tomorrow
    packs = "backoffice,calculator,shaping"  # the catalogue the runs were started with
    assert main(["--quiet", "approvals", "expire", "--store", url, "--tools", packs, "--json"]) == 0
    ended = json.loads(capsys.readouterr().out)
    assert ended == [{"run_id": "old", "status": "failed_closed", "reason": "approval_missing"}]
    assert store.run("old").status == "failed_closed"  # type: ignore[union-attr]
    assert store.run("new").status == "awaiting_approval"  # type: ignore[union-attr]
    assert store.verify("old").ok and _payments(ledger) == 0
