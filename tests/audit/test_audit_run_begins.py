"""A run's first record is ``run_started``, enforced by the writer on every kind of log.

`pte audit verify` refuses a run that does not begin with ``run_started`` (what produced
it: catalogue, policy, prompts, model), and a run has one. The writer used to accept
anything first, so `Executor.run(plan, AuditLog(path))`, called below the engine, wrote
step records no verifier would accept, and reopening that file failed as "format 1". Now
every writer (a file, memory, a run store) refuses a record of a run that has not begun,
and a second ``run_started``, before anything is written or any tool is called.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from pte import AuditLog, Executor, Registry, compile_plan, tool, verify
from pte.audit import read_records
from pte.errors import AuditWriteError
from pte.stores import open_store
from tests.audit_runs import begun

CALLED: list[int] = []


@tool
def note(x: int) -> int:
    """Remembers that it was called."""
    CALLED.append(x)
    return x


REGISTRY = Registry([note])
PLAN = json.dumps({"pte_plan": "1", "steps": [{"id": "a", "tool": "note", "args": {"x": 1}}]})
STEP = {"step_id": "a", "tool": "note", "effect": "read", "args": {"x": 1}, "plan_hash": "0" * 64}


def _file(tmp_path: Path, run_id: str) -> AuditLog:
    return AuditLog(tmp_path / "audit.jsonl", run_id=run_id, durability="none")


def _memory(tmp_path: Path, run_id: str) -> AuditLog:
    return AuditLog(None, run_id=run_id)


def _store(tmp_path: Path, run_id: str) -> AuditLog:
    return open_store(f"sqlite://{tmp_path / 'runs.db'}").audit_log(run_id)


LOGS: dict[str, Callable[[Path, str], AuditLog]] = {"file": _file, "memory": _memory, "store": _store}


@pytest.mark.parametrize("kind", sorted(LOGS))
def test_a_record_before_run_started_is_refused_and_nothing_is_written(kind: str, tmp_path: Path) -> None:
    log = LOGS[kind](tmp_path, "r1")
    with pytest.raises(AuditWriteError, match="has not begun: a run's first record is run_started"):
        log.append("step_started", **STEP)
    assert log.broken and log.next_seq == 0 and log.records == []
    if kind == "file":
        assert (tmp_path / "audit.jsonl").read_bytes() == b""


@pytest.mark.parametrize("kind", sorted(LOGS))
def test_a_run_has_one_run_started(kind: str, tmp_path: Path) -> None:
    log = begun(LOGS[kind](tmp_path, "r1"))
    with pytest.raises(AuditWriteError, match="has begun already"):
        log.append("run_started", mode="run", request=None, tools=[], config={})
    assert log.next_seq == 1


def test_the_executor_calls_no_tool_into_a_log_whose_run_has_not_begun(tmp_path: Path) -> None:
    CALLED.clear()
    path = tmp_path / "audit.jsonl"
    with pytest.raises(AuditWriteError, match="has not begun"):
        Executor(REGISTRY).run(compile_plan(PLAN, REGISTRY), AuditLog(path))
    assert CALLED == [] and path.read_bytes() == b""
    # Begun, the same call runs and what it writes starts a run a verifier reads.
    with begun(AuditLog(path)) as log:
        assert Executor(REGISTRY).run(compile_plan(PLAN, REGISTRY), log).ok
        log.append("run_finished", status="succeeded", result=1)
    assert CALLED == [1]
    report = verify(path, check_schema=False)
    assert report.ok, report


@pytest.mark.parametrize("kind", ["file", "store"])
def test_reopening_continues_this_run_and_no_other_run_takes_it_over(kind: str, tmp_path: Path) -> None:
    log = begun(LOGS[kind](tmp_path, "r1"))
    log.append("step_started", **STEP)
    log.close()
    # The same run, reopened (a crashed or paused run taken up again): it has begun.
    again = LOGS[kind](tmp_path, "r1")
    again.append("step_finished", step_id="a", tool="note", status="ok", output=1, duration_ms=0.1)
    again.close()
    if kind == "file":
        # Another run in the same file must begin with its own run_started.
        other = LOGS[kind](tmp_path, "r2")
        with pytest.raises(AuditWriteError, match="has not begun"):
            other.append("step_started", **STEP)
        assert [r["type"] for r in read_records(tmp_path / "audit.jsonl")] == [
            "run_started",
            "step_started",
            "step_finished",
        ]
