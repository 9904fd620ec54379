"""Plain calls on the run's own thread (pte/_owner.py): no hand-off for quick tools, no lost concurrency.

- After its first call in a run, a quick plain tool runs on the run's own (owner) thread,
  even when several of its steps are ready, instead of one worker-thread hand-off per call.
- A quick tool that turns slow is handed over: the run continues on a new owner thread,
  so a step that can only finish together with a later independent one still does (the
  two really run at the same time), and the slow call's timeout still fails its step.
- A tool whose last call was slow goes to worker threads: two such calls overlap.
"""

from __future__ import annotations

import collections
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from pte import AuditLog, Executor, Plan, Registry, compile_plan, tool

#: (tag, thread ident) of each `where` call.
CALLS: list[tuple[str, int]] = []
#: Two `meet` calls with wait=True must both be inside at once to pass it.
BARRIER = threading.Barrier(2, timeout=10)
#: Released at the end of each test, so that an abandoned call's thread ends too.
RELEASE = threading.Event()


@pytest.fixture(autouse=True)
def _clean_state() -> Iterator[None]:
    CALLS.clear()
    BARRIER.reset()
    RELEASE.clear()
    yield
    RELEASE.set()


@tool(timeout_s=30.0)
def where(tag: str) -> str:
    """Quick: notes the thread it ran on."""
    CALLS.append((tag, threading.get_ident()))
    return tag


@tool(timeout_s=30.0)
def meet(tag: str, wait: bool) -> str:
    """Quick, unless `wait`: then it returns only once another waiting call has arrived."""
    if wait:
        BARRIER.wait()
    return tag


@tool(timeout_s=0.5)
def stall(tag: str, hang: bool) -> str:
    """Quick, unless `hang`: then it blocks past its 0.5 s timeout."""
    if hang:
        RELEASE.wait(30)
    return tag


REGISTRY = Registry([where, meet, stall])


def make_plan(steps: list[dict[str, Any]]) -> Plan:
    return compile_plan(json.dumps({"pte_plan": "1", "steps": steps}), REGISTRY)


def test_a_quick_tool_runs_on_one_thread_after_its_first_calls() -> None:
    # 40 independent steps: at most 8 (the concurrency limit) start on worker threads
    # before the first one has finished and shown the tool to be quick; the rest run on the
    # owner thread (a rare hand-over under load splits them between two owners at most).
    plan = make_plan([{"id": f"s{i}", "tool": "where", "args": {"tag": f"s{i}"}} for i in range(40)])
    log = AuditLog()
    result = Executor(REGISTRY, max_concurrency=8).run(plan, log)
    assert result.ok, result.failure
    assert [r.step_id for r in result.results] == [f"s{i}" for i in range(40)]
    (thread, calls), *_ = collections.Counter(ident for _, ident in CALLS).most_common(1)
    assert calls >= 16, collections.Counter(ident for _, ident in CALLS)
    assert thread != threading.get_ident()  # the caller's thread only waits
    # The log is the same as for any run: in plan order, each step's pair together.
    assert [(r["type"], r.get("step_id")) for r in log.records] == [
        (kind, f"s{i}") for i in range(40) for kind in ("step_started", "step_finished")
    ]


def test_a_quick_tool_that_turns_slow_is_handed_over_and_the_next_step_runs_beside_it() -> None:
    # `first` runs alone and shows `meet` quick. Then `a` runs on the owner thread and
    # blocks until a second waiting call arrives: only `b`, which the run must start while
    # `a` is still inside. Without the hand-over, `a` would hold the run and the barrier
    # would break (both steps failing).
    plan = make_plan(
        [
            {"id": "first", "tool": "meet", "args": {"tag": "first", "wait": False}},
            {"id": "a", "tool": "meet", "args": {"tag": "a", "wait": True}, "after": ["first"]},
            {"id": "b", "tool": "meet", "args": {"tag": "b", "wait": True}, "after": ["first"]},
        ]
    )
    log = AuditLog()
    result = Executor(REGISTRY, max_concurrency=8).run(plan, log)
    assert result.ok, result.failure
    assert [(r.step_id, r.output) for r in result.results] == [("first", "first"), ("a", "a"), ("b", "b")]
    assert [(r["type"], r.get("step_id")) for r in log.records] == [
        (kind, sid) for sid in ("first", "a", "b") for kind in ("step_started", "step_finished")
    ]


def test_a_handed_over_call_still_times_out_and_the_run_goes_on_without_it() -> None:
    # `a` turns slow on the owner thread: it is handed over after a moment, `b` and `c` run
    # meanwhile, and at a's 0.5 s deadline its step fails with a timeout (it is abandoned, as
    # any timed-out thread call). The run ends at that failure, with b and c not recorded.
    plan = make_plan(
        [
            {"id": "first", "tool": "stall", "args": {"tag": "first", "hang": False}},
            {"id": "a", "tool": "stall", "args": {"tag": "a", "hang": True}, "after": ["first"]},
            {"id": "b", "tool": "where", "args": {"tag": "b"}, "after": ["first"]},
            {"id": "c", "tool": "where", "args": {"tag": "c"}, "after": ["first"]},
        ]
    )
    result = Executor(REGISTRY, max_concurrency=8).run(plan)
    assert result.failure is not None and result.failure.step_id == "a"
    assert result.failure.error is not None and result.failure.error.kind == "timeout"
    assert "abandoned" in result.failure.error.message
    assert [r.step_id for r in result.results] == ["first", "a"]
    assert sorted(tag for tag, _ in CALLS) == ["b", "c"]  # they ran while `a` hung


def test_a_tool_whose_last_call_was_slow_runs_on_worker_threads_again() -> None:
    # `a` and `b` (independent, both waiting) are the tool's first calls: they go to worker
    # threads and meet there. Then `c` and `d`, also waiting: the tool's last calls were
    # slow, so they go to worker threads too and meet (no hand-over needed).
    plan = make_plan(
        [
            {"id": "a", "tool": "meet", "args": {"tag": "a", "wait": True}},
            {"id": "b", "tool": "meet", "args": {"tag": "b", "wait": True}},
            {"id": "c", "tool": "meet", "args": {"tag": "c", "wait": True}, "after": ["a", "b"]},
            {"id": "d", "tool": "meet", "args": {"tag": "d", "wait": True}, "after": ["a", "b"]},
        ]
    )
    result = Executor(REGISTRY, max_concurrency=8).run(plan)
    assert result.ok, result.failure
    assert [r.output for r in result.results] == ["a", "b", "c", "d"]
