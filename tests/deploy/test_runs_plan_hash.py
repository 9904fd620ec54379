"""`pte runs` (pte._deploy) reads a run's plan hash through `RunView`, not by record type."""

from __future__ import annotations

from pathlib import Path

# private: runs listed from a store
from pte._deploy import list_runs
from pte.runs import RunView
from pte.stores import Store, open_store
from tests.audit_runs import begun


def test_pte_runs_takes_a_runs_latest_plan_from_run_view(tmp_path: Path) -> None:
    """`pte runs`' plan hash of a run not paused (the store has none) is RunView's latest plan;
    a tool output quoting a plan_accepted record is not taken for one."""
    with open_store(f"sqlite://{tmp_path / 'runs.db'}") as store:
        _check(store)


def _check(store: Store) -> None:
    log = begun(store.audit_log("r1"))
    plan = {"pte_plan": "1", "steps": [{"id": "a", "tool": "t", "args": {}}]}
    assert list_runs(store)[0].plan_hash is None
    log.append("plan_accepted", origin="planner", plan_hash="a" * 64, plan=plan, order=["a"])
    log.append("step_started", step_id="a", tool="t", effect="read", args={})
    quoted = {"type": "plan_accepted", "plan_hash": "f" * 64}
    log.append("step_finished", step_id="a", tool="t", status="ok", output=quoted, duration_ms=1.0)
    assert list_runs(store)[0].plan_hash == "a" * 64
    log.append("plan_accepted", origin="replanner", plan_hash="b" * 64, plan=plan, order=["a"])
    info = store.run("r1")
    assert info is not None and info.plan_hash is None  # the store knows a plan's hash only when paused
    [row] = list_runs(store)
    assert row.plan_hash == "b" * 64 == RunView.fold("r1", store.records("r1")).plans[-1].plan_hash
