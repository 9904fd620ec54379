"""A resumed run's live part runs with the concurrency it is given (#38).

Resume serves the steps its log recorded and runs the rest live, scheduled by the executor as
any live run is: independent live steps run at once (up to `max_concurrency`), and
`serial_writes` keeps a write alone. The records do not depend on it: the finished log
verifies and replays whatever order the calls ended in.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import pte

#: Both live reads must be running at once to pass it (a one-at-a-time resume breaks it).
BARRIER = threading.Barrier(2, timeout=3)
#: (event, step) as the tools start and end, to see what overlapped.
EVENTS: list[tuple[str, str]] = []
LOCK = threading.Lock()


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    BARRIER.reset()
    EVENTS.clear()
    yield
    BARRIER.abort()  # a tool still waiting ends


def _note(event: str, name: str) -> None:
    with LOCK:
        EVENTS.append((event, name))


@pte.tool
def fetch_first() -> dict[str, int]:
    """The step the cut log keeps."""
    return {"n": 1}


@pte.tool
def meet(side: str) -> dict[str, str]:
    """Waits until a second call of it is running too."""
    _note("start", side)
    BARRIER.wait()
    _note("end", side)
    return {"side": side}


@pte.tool
def slow_read(side: str) -> dict[str, str]:
    """A read that takes a while (overlaps whatever runs beside it)."""
    _note("start", side)
    time.sleep(0.3)
    _note("end", side)
    return {"side": side}


@pte.tool(effect="write", idempotent=True)
def slow_write(note: str) -> dict[str, str]:
    """An idempotent write that takes a while."""
    _note("start", "write")
    time.sleep(0.3)
    _note("end", "write")
    return {"note": note}


REGISTRY = pte.Registry([fetch_first, meet, slow_read, slow_write])

MEET_PLAN = """{"pte_plan": "1", "steps": [
 {"id": "first", "tool": "fetch_first", "args": {}},
 {"id": "left", "tool": "meet", "args": {"side": "left"}},
 {"id": "right", "tool": "meet", "args": {"side": "right"}}
], "result": {"left": {"$ref": "left/side"}, "right": {"$ref": "right/side"}}}"""

WRITE_PLAN = """{"pte_plan": "1", "steps": [
 {"id": "first", "tool": "fetch_first", "args": {}},
 {"id": "before", "tool": "slow_read", "args": {"side": "before"}},
 {"id": "save", "tool": "slow_write", "args": {"note": "saved"}},
 {"id": "after", "tool": "slow_read", "args": {"side": "after"}}
], "result": {"$ref": "save/note"}}"""


def _cut_after_first(tmp_path: Path, plan: str) -> Path:
    """A log of `plan` run in full, cut after step ``first`` finished: a crash there."""
    full = tmp_path / "full.jsonl"
    with pte.AuditLog(full) as audit:
        assert pte.Engine(REGISTRY).execute(plan, audit).ok
    records = pte.audit.read_records(full)
    keep = 1 + next(
        i for i, r in enumerate(records) if r["type"] == "step_finished" and r["step_id"] == "first"
    )
    cut = tmp_path / "cut.jsonl"
    lines = full.read_text(encoding="utf-8").splitlines(keepends=True)
    cut.write_text("".join(lines[:keep]), encoding="utf-8")
    BARRIER.reset()
    EVENTS.clear()
    return cut


def _overlapped(a: str, b: str) -> bool:
    """Whether `a` and `b` ran at the same time (one started before the other ended)."""
    position = {event: i for i, event in enumerate(EVENTS)}
    return position[("start", a)] < position[("end", b)] and position[("start", b)] < position[("end", a)]


def test_a_resumed_runs_independent_live_steps_run_at_once(tmp_path: Path) -> None:
    log = _cut_after_first(tmp_path, MEET_PLAN)
    result = pte.runs.resume_file(log, REGISTRY, max_concurrency=4)
    assert result.ok, result.message
    assert result.result == {"left": "left", "right": "right"}
    assert pte.verify(log).ok
    assert pte.runs.replay_file(log).ok
    kinds = [r["type"] for r in pte.audit.read_records(log)]
    assert kinds.count("run_resumed") == 1


def test_one_at_a_time_when_the_resume_says_so(tmp_path: Path) -> None:
    """The other side of the test above: with max_concurrency=1 the two never meet."""
    log = _cut_after_first(tmp_path, MEET_PLAN)
    result = pte.runs.resume_file(log, REGISTRY, max_concurrency=1)
    assert not result.ok
    assert pte.verify(log).ok  # a failed resume still leaves a log that verifies and replays
    assert pte.runs.replay_file(log).ok


@pytest.mark.parametrize("serial", [True, False])
def test_serial_writes_keeps_a_resumed_write_alone(tmp_path: Path, serial: bool) -> None:
    log = _cut_after_first(tmp_path, WRITE_PLAN)
    result = pte.runs.resume_file(log, REGISTRY, max_concurrency=4, serial_writes=serial)
    assert result.ok, result.message
    overlaps = _overlapped("write", "after") or _overlapped("write", "before")
    if serial:
        assert not overlaps, EVENTS
    else:
        # Without serial_writes the read after the write is free to run beside it.
        assert _overlapped("write", "after") or _overlapped("before", "after"), EVENTS
    assert pte.verify(log).ok
    assert pte.runs.replay_file(log).ok


def test_a_resumed_store_run_takes_the_same_settings(tmp_path: Path) -> None:
    """`pte.deployment.resume_run` (a run in a store) runs its live part concurrently too."""
    store = pte.stores.open_store(f"sqlite:///{tmp_path / 'runs.db'}")
    with pte.AuditLog(tmp_path / "full.jsonl") as audit:
        assert pte.Engine(REGISTRY).execute(MEET_PLAN, audit).ok
    records = pte.audit.read_records(tmp_path / "full.jsonl")
    keep = 1 + next(
        i for i, r in enumerate(records) if r["type"] == "step_finished" and r["step_id"] == "first"
    )
    run_id = records[0]["run_id"]
    with store.audit_log(run_id) as audit:
        for record in records[:keep]:
            own = ("type", "seq", "ts", "prev", "hash", "run_id", "format", "pte_version")
            audit.append(record["type"], **{k: v for k, v in record.items() if k not in own})
    BARRIER.reset()
    result = pte.deployment.resume_run(store, run_id, REGISTRY, max_concurrency=4)
    assert getattr(result, "ok", False), result
    assert store.verify(run_id).intact
