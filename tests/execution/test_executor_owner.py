"""Plain calls on the run's own thread (pte._execution): no hand-off for quick tools, no lost concurrency.

- Every call of a plain thread-mode tool (no retries) starts on the run's own (owner)
  thread, even when several of its steps are ready: no worker-thread hand-off per call.
- A call that takes long while other steps could run is handed over: the run continues on
  a new owner thread, so a step that can only finish together with a later independent one
  still does (the two really run at the same time), and the slow call's timeout still
  fails its step.
- The rule does not depend on measured time: a tool that was slow before still starts on
  the owner, and is handed over again.
- Tools with retries never run on the owner.
"""

from __future__ import annotations

import collections
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from pte import AuditLog, Executor, Plan, Registry, compile_plan, tool
from tests.audit_runs import begun

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


def test_quick_calls_run_on_the_owner_thread_one_after_another() -> None:
    # 40 independent steps, up to 8 at a time: each call starts on the owner thread and
    # returns long before the hand-over time, so they all run there (a hand-over caused by
    # an OS time slice lost under load moves the run to a new owner: a few owners at most).
    plan = make_plan([{"id": f"s{i}", "tool": "where", "args": {"tag": f"s{i}"}} for i in range(40)])
    log = begun(AuditLog())
    result = Executor(REGISTRY, max_concurrency=8).run(plan, log)
    assert result.ok, result.failure
    assert [r.step_id for r in result.results] == [f"s{i}" for i in range(40)]
    threads = collections.Counter(ident for _, ident in CALLS)
    (thread, calls), *_ = threads.most_common(1)
    assert calls >= 20, threads
    assert thread != threading.get_ident()  # the caller's thread only waits
    # One after another: the tags were appended in plan order (worker threads would race).
    assert [tag for tag, ident in CALLS if ident == thread] == sorted(
        (tag for tag, ident in CALLS if ident == thread), key=lambda t: int(t[1:])
    )
    # The log is the same as for any run: in plan order, each step's pair together.
    assert [(r["type"], r.get("step_id")) for r in log.records[1:]] == [
        (kind, f"s{i}") for i in range(40) for kind in ("step_started", "step_finished")
    ]


def test_a_call_that_turns_slow_is_handed_over_and_the_next_step_runs_beside_it() -> None:
    # `first` runs alone. Then `a` runs on the owner thread and
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
    log = begun(AuditLog())
    result = Executor(REGISTRY, max_concurrency=8).run(plan, log)
    assert result.ok, result.failure
    assert [(r.step_id, r.output) for r in result.results] == [("first", "first"), ("a", "a"), ("b", "b")]
    assert [(r["type"], r.get("step_id")) for r in log.records[1:]] == [
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


def test_a_tool_that_was_slow_still_starts_on_the_owner_and_is_handed_over_again() -> None:
    # `a` and `b` (independent, both waiting) meet only because `a` is handed over while `b`
    # starts. Then `c` and `d`, also waiting: where they run does not depend on how long the
    # tool took before; they start on the owner, `c` is handed over, and they meet too.
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


@tool(timeout_s=30.0, retries=1, idempotent=True)
def where_retried(tag: str) -> str:
    """Quick, but declares retries: its calls go to worker threads."""
    CALLS.append((tag, threading.get_ident()))
    return tag


def test_a_tool_with_retries_never_runs_on_the_owner() -> None:
    registry = Registry([where, where_retried])
    steps: list[dict[str, Any]] = [{"id": "w", "tool": "where", "args": {"tag": "w"}}]
    steps += [
        {"id": f"r{i}", "tool": "where_retried", "args": {"tag": f"r{i}"}, "after": ["w"]} for i in range(2)
    ]
    plan = compile_plan(json.dumps({"pte_plan": "1", "steps": steps}), registry)
    result = Executor(registry, max_concurrency=1).run(plan)
    assert result.ok, result.failure
    owner = dict(CALLS)["w"]  # a lone plain call: on the owner
    assert all(ident != owner for tag, ident in CALLS if tag.startswith("r"))
