"""Timeouts that mean what they say, in each of the three places a tool can run.

- ``async def`` tools are *cancelled* on timeout: their ``finally`` blocks run before the
  step fails; one that blocks the event loop or ignores the cancellation is abandoned and
  the loop replaced, so later async calls still work.
- plain tools with ``isolation="process"`` are *killed* (SIGKILL, with their process group):
  an effect the tool would have had after its deadline never happens.
- plain tools in the default thread mode are *abandoned*: the step fails on time, but the
  call may still finish (and have its effect) later. The test shows that too, so that the
  process-mode guarantee is seen to be a real difference.

Also: a tool raising SystemExit, KeyboardInterrupt or a bare BaseException fails its step
(``tool_error``, fatal) in every mode, and the audit writer's one serialisation path gives
canonical, correctly hashed lines.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import threading
import time
from collections.abc import Iterator
from enum import Enum
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pte import AuditLog, Engine, Executor, Plan, ReasonCode, Registry, ToolError, compile_plan, tool, verify

# private: the canonical-form check
from pte._core import is_canonical
from pte.audit import canonical_json, read_records
from pte.execution import StepResult
from tests._chain import chain_hash
from tests.audit_runs import begun

#: What the tools below did, in order.
EVENTS: list[str] = []
#: Released at the end of each test, so that an abandoned worker thread ends too.
RELEASE = threading.Event()
#: The threads of the event loops `async_blocker` wedged.
BLOCKED_LOOP_THREADS: list[threading.Thread] = []
#: Set by `held` once it runs.
ENTERED = threading.Event()


@pytest.fixture(autouse=True)
def _clean_state() -> Iterator[None]:
    EVENTS.clear()
    RELEASE.clear()
    ENTERED.clear()
    yield
    RELEASE.set()


# --- tools ---------------------------------------------------------------------------------------


@tool(timeout_s=0.3)
async def async_sleeper() -> int:
    """Sleeps for an hour, unless cancelled."""
    try:
        EVENTS.append("sleeping")
        await asyncio.sleep(3600)
        return 0
    except asyncio.CancelledError:
        EVENTS.append("cancelled")
        raise
    finally:
        EVENTS.append("cleaned up")


@tool(timeout_s=0.3)
async def async_stubborn() -> int:
    """Swallows the cancellation and returns anyway."""
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        EVENTS.append("swallowed")
    return 3


@tool(timeout_s=0.2)
async def async_blocker() -> int:
    """Blocks the event loop (time.sleep in a coroutine) until released."""
    BLOCKED_LOOP_THREADS.append(threading.current_thread())
    RELEASE.wait(30)
    return 4


@tool(timeout_s=2.0)
async def async_quick(tag: str) -> str:
    await asyncio.sleep(0)
    EVENTS.append(f"async {tag}")
    return tag


@tool(timeout_s=0.5, isolation="process")
def late_effect_in_process(path: str) -> int:
    """Writes `path` one second after its deadline: in a worker process that is killed first."""
    time.sleep(1.5)
    Path(path).write_text("written after the deadline", encoding="utf-8")
    return 1


@tool(timeout_s=0.5)
def late_effect_in_thread(path: str) -> int:
    """The same in the default thread mode, where a timed-out call is only abandoned."""
    time.sleep(1.5)
    Path(path).write_text("written after the deadline", encoding="utf-8")
    return 1


@tool(timeout_s=0.5, isolation="process")
def late_effect_of_a_child(path: str) -> int:
    """Starts a shell that writes `path` after the deadline; the kill reaches the whole group."""
    subprocess.Popen(["sh", "-c", f"sleep 1.5; echo late > '{path}'"])
    time.sleep(3600)
    return 1


@tool(timeout_s=30.0, isolation="process")
def in_process(x: int) -> dict[str, int]:
    """Returns its input and the worker's pid."""
    import os

    return {"x": x, "pid": os.getpid()}


@tool(timeout_s=30.0, isolation="process")
def raises_in_process(kind: str) -> int:
    """Raises what it is told to, in its worker process."""
    if kind == "exit":
        raise SystemExit(0)
    if kind == "base":
        raise BaseException("bare")
    raise ValueError("bad value")


@tool(timeout_s=0.3)
def waiter() -> int:
    """Blocks until the test releases it (or 30 s)."""
    EVENTS.append(f"waiter on {threading.current_thread().name}")
    RELEASE.wait(30)
    return 0


@tool(timeout_s=5.0)
def held() -> int:
    """Signals that it runs, then blocks until released (well within its 5 s timeout)."""
    ENTERED.set()
    RELEASE.wait(30)
    EVENTS.append("held done")
    return 1


@tool(timeout_s=1.0)
def quick(tag: str) -> str:
    EVENTS.append(f"quick {tag}")
    return tag


@tool(timeout_s=1.0)
def nap(tag: str) -> str:
    """Takes a tenth of its 1 s timeout."""
    time.sleep(0.1)
    return tag


@tool(timeout_s=30.0)
def patient(tag: str) -> str:
    """Quick, with a long timeout."""
    return tag


@tool
def raises(kind: str) -> int:
    """Raises SystemExit, KeyboardInterrupt or a bare BaseException."""
    EVENTS.append(f"raises {kind}")
    if kind == "exit":
        raise SystemExit(0)
    if kind == "interrupt":
        raise KeyboardInterrupt
    raise BaseException("bare")


@tool
async def async_raises(kind: str) -> int:
    if kind == "exit":
        raise SystemExit(3)
    raise KeyboardInterrupt


REGISTRY = Registry(
    [
        async_sleeper,
        async_stubborn,
        async_blocker,
        async_quick,
        late_effect_in_process,
        late_effect_in_thread,
        late_effect_of_a_child,
        in_process,
        raises_in_process,
        waiter,
        held,
        quick,
        nap,
        patient,
        raises,
        async_raises,
    ]
)


def make_plan(*steps: tuple[str, str, dict[str, Any]]) -> Plan:
    doc = {"pte_plan": "1", "steps": [{"id": i, "tool": t, "args": a} for i, t, a in steps]}
    return compile_plan(json.dumps(doc), REGISTRY)


def run_timed(plan: Plan, audit: AuditLog | None = None) -> tuple[Any, float]:
    started = time.monotonic()
    result = Executor(REGISTRY).run(plan, audit)
    return result, time.monotonic() - started


def failure(result: Any, kind: str) -> ToolError:
    assert result.failure is not None and result.failure.error is not None
    error: ToolError = result.failure.error
    assert error.kind == kind, error
    return error


# --- plain tools on the run's own thread: one watchdog, each call's own deadline ----------------


def test_lone_calls_are_each_timed_from_their_own_start() -> None:
    # 15 chained steps of 0.1 s each (every one alone, so each runs on the run's own thread)
    # under a 1 s timeout: the run takes longer than one timeout, and no call overran its own.
    steps = [("n0", "nap", {"tag": "x"})] + [
        (f"n{i}", "nap", {"tag": {"$ref": f"n{i - 1}"}}) for i in range(1, 15)
    ]
    result, elapsed = run_timed(make_plan(*steps))
    assert result.ok, result.failure
    assert len(result.results) == 15 and elapsed > 1.0


def test_a_short_timeout_after_a_long_one_still_fires_on_time() -> None:
    # The watchdog is armed for the first call's 30 s deadline; the waiter's 0.3 s one is
    # earlier and must be what times it out.
    doc = {
        "pte_plan": "1",
        "steps": [
            {"id": "p", "tool": "patient", "args": {"tag": "x"}},
            {"id": "w", "tool": "waiter", "args": {}, "after": ["p"]},
        ],
    }
    result, elapsed = run_timed(compile_plan(json.dumps(doc), REGISTRY))
    assert "abandoned" in failure(result, "timeout").message
    assert elapsed < 10.0, elapsed
    assert any(e.startswith("waiter on") for e in EVENTS)


# --- async tools: cancelled -------------------------------------------------------------------------


def test_a_timed_out_async_tool_is_cancelled_and_cleans_up_before_the_step_fails() -> None:
    result, elapsed = run_timed(make_plan(("s", "async_sleeper", {})))
    error = failure(result, "timeout")
    assert "cancelled" in error.message
    assert 0.25 < elapsed < 2.0, elapsed
    assert EVENTS == ["sleeping", "cancelled", "cleaned up"]


def test_an_async_tool_that_swallows_the_cancellation_still_times_out() -> None:
    result, _ = run_timed(make_plan(("s", "async_stubborn", {})))
    failure(result, "timeout")
    assert EVENTS == ["swallowed"]


def test_an_async_tool_that_blocks_the_loop_is_abandoned_and_later_async_calls_work() -> None:
    result, elapsed = run_timed(make_plan(("b", "async_blocker", {})))
    error = failure(result, "timeout")
    assert "abandoned" in error.message and elapsed < 3.0, elapsed
    again, elapsed = run_timed(make_plan(("q", "async_quick", {"tag": "next"})))
    assert again.ok and again.outputs == {"q": "next"} and elapsed < 1.5, elapsed
    # Once the wedge clears, the abandoned loop stops and its thread ends (it ran on, idle, for
    # the rest of the process: into every later test of the worker).
    [wedged] = BLOCKED_LOOP_THREADS[-1:]
    RELEASE.set()
    wedged.join(5)
    assert not wedged.is_alive()


# --- process isolation: killed --------------------------------------------------------------------


def test_a_timed_out_tool_in_process_isolation_never_has_its_late_effect(tmp_path: Path) -> None:
    target = tmp_path / "late.txt"
    result, elapsed = run_timed(make_plan(("p", "late_effect_in_process", {"path": str(target)})))
    error = failure(result, "timeout")
    assert "killed" in error.message
    assert elapsed < 20.0  # worker start-up is not part of the tool's timeout
    time.sleep(2.0)  # well past the moment the tool would have written
    assert not target.exists(), "the killed worker still had its effect"


def test_a_timed_out_tool_in_a_thread_is_only_abandoned_and_may_still_have_its_effect(
    tmp_path: Path,
) -> None:
    # The contrast that makes the previous test mean something: same tool, default mode.
    target = tmp_path / "late.txt"
    result, elapsed = run_timed(make_plan(("t", "late_effect_in_thread", {"path": str(target)})))
    assert "abandoned" in failure(result, "timeout").message and elapsed < 1.5
    deadline = time.monotonic() + 5
    while not target.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert target.exists()


def test_the_kill_reaches_processes_the_tool_started(tmp_path: Path) -> None:
    target = tmp_path / "late.txt"
    result, _ = run_timed(make_plan(("c", "late_effect_of_a_child", {"path": str(target)})))
    failure(result, "timeout")
    time.sleep(2.5)
    assert not target.exists(), "the tool's child process survived the kill"


def test_process_isolation_returns_outputs_and_reuses_its_worker() -> None:
    executor = Executor(REGISTRY)
    first = executor.run(make_plan(("a", "in_process", {"x": 1})))
    second = executor.run(make_plan(("b", "in_process", {"x": 2})))
    assert first.ok and second.ok, (first.failure, second.failure)
    assert first.outputs["a"]["x"] == 1 and second.outputs["b"]["x"] == 2
    import os

    assert first.outputs["a"]["pid"] != os.getpid()
    assert first.outputs["a"]["pid"] == second.outputs["b"]["pid"]


@pytest.mark.parametrize(
    ("kind", "fatal", "text"),
    [("exit", True, "SystemExit"), ("base", True, "BaseException: bare"), ("value", False, "ValueError")],
)
def test_exceptions_in_a_worker_process_fail_the_step(kind: str, fatal: bool, text: str) -> None:
    result = Executor(REGISTRY).run(make_plan(("r", "raises_in_process", {"kind": kind})))
    error = failure(result, "tool_error")
    assert text in error.message and error.fatal is fatal


# --- threads: abandoned -------------------------------------------------------------------------------


def test_a_tool_called_from_another_thread_still_times_out() -> None:
    box: dict[str, Any] = {}

    def body() -> None:
        box["result"], box["elapsed"] = run_timed(make_plan(("w", "waiter", {})))

    thread = threading.Thread(target=body)
    thread.start()
    thread.join(10)
    assert not thread.is_alive()
    assert "abandoned" in failure(box["result"], "timeout").message
    assert box["elapsed"] < 2.0
    assert EVENTS == ["waiter on pte-tool-worker"]


def test_two_threads_on_one_executor_do_not_share_a_worker() -> None:
    executor = Executor(REGISTRY)
    results: dict[str, Any] = {}

    def run(name: str, plan: Plan) -> None:
        results[name] = executor.run(plan)

    slow = threading.Thread(target=run, args=("a", make_plan(("h", "held", {}))))
    slow.start()
    assert ENTERED.wait(5), "thread A's tool is running (and holds a worker)"
    fast = threading.Thread(target=run, args=("b", make_plan(("q", "quick", {"tag": "b"}))))
    started = time.monotonic()
    fast.start()
    fast.join(5)
    elapsed = time.monotonic() - started
    assert results["b"].ok, results["b"].failure
    assert elapsed < 0.9, elapsed
    assert "held done" not in EVENTS
    RELEASE.set()
    slow.join(5)
    assert results["a"].ok and results["a"].outputs == {"h": 1}


def test_step_results_are_ordinary_frozen_step_results() -> None:
    result = Executor(REGISTRY).run(make_plan(("q", "quick", {"tag": "t"})))
    step = result.results[0]
    assert type(step) is StepResult and step == StepResult(
        "q", "quick", "ok", {"tag": "t"}, "t", None, step.duration_ms
    )
    with pytest.raises(AttributeError):
        step.status = "failed"  # type: ignore[misc]


# --- tools that raise BaseException ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool_name", "kind", "text"),
    [
        ("raises", "exit", "SystemExit"),
        ("raises", "interrupt", "KeyboardInterrupt"),
        ("raises", "bare", "BaseException: bare"),
        ("async_raises", "exit", "SystemExit: 3"),
        ("async_raises", "interrupt", "KeyboardInterrupt"),
    ],
)
def test_a_tool_raising_a_base_exception_fails_its_step_fatally(tool_name: str, kind: str, text: str) -> None:
    result = Executor(REGISTRY).run(make_plan(("x", tool_name, {"kind": kind}), ("y", "quick", {"tag": "y"})))
    error = failure(result, "tool_error")
    assert text in error.message and error.fatal
    assert error.to_dict()["fatal"] is True
    assert [r.step_id for r in result.results] == ["x"]
    # The executor and its event loop survive it.
    assert Executor(REGISTRY).run(make_plan(("q", "async_quick", {"tag": "after"}))).ok


def test_engine_ends_the_run_sealed_without_a_replan_after_system_exit(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    text = json.dumps({"pte_plan": "1", "steps": [{"id": "x", "tool": "raises", "args": {"kind": "exit"}}]})
    with AuditLog(path) as log:
        run = Engine(REGISTRY).execute(text, log)
    assert (run.status, run.reason) == ("failed_closed", ReasonCode.STEP_FAILED)
    assert "SystemExit" in (run.message or "")
    records = read_records(path)
    assert records[-1]["type"] == "run_finished" and records[-1]["status"] == "failed_closed"
    finished = next(r for r in records if r["type"] == "step_finished")
    assert finished["error"]["fatal"] is True
    assert verify(path).ok


# --- the audit writer's one serialisation path ---------------------------------------------------


class _Colour(str, Enum):  # noqa: UP042 - str() is "_Colour.RED", unlike a StrEnum
    RED = "red"


_NAMES = ["args", "output", "status", "step_id", "a", "zz", "h", "hash_", "pre", "token", "Zeta", "ü", "x"]
_texts = st.text(max_size=8) | st.sampled_from(
    ["sk-proj-" + "a" * 24, "Bearer abcdefghijk", "é✓\u2028", "\x00"]
)
_scalars = (
    st.none()
    | st.booleans()
    # Beyond 2**53 - 1, JCS (RFC 8785) holds only integers it writes with all their digits.
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | _texts
    | st.just(_Colour.RED)
)
_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["k", "token", "ü"]), inner, max_size=3)
    ),
    max_leaves=6,
)


@settings(max_examples=60)
@given(
    st.dictionaries(st.sampled_from(_NAMES), _values, max_size=6), st.sampled_from(["step_started", "ünï"])
)
def test_every_record_is_canonical_and_correctly_hashed(fields: dict[str, Any], rtype: str) -> None:
    log = begun(AuditLog(run_id="r-ü", clock=lambda: "2026-11-22T02:30:31.000000Z"))
    record = log.append(rtype, **fields)
    body = {k: v for k, v in record.items() if k != "hash"}
    assert record["hash"] == chain_hash(record["prev"], body)
    # The line read back is canonical under JSON's number model (1.0 reads back as 1).
    line = canonical_json(record).encode("utf-8")
    assert is_canonical(line, json.loads(line))


def test_lines_verify(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    with AuditLog(path, run_id="r1") as log:
        log.append("run_started", mode="run", request='ü \u2028 "quoted"', tools=[], config={})
        log.append(
            "step_started",
            step_id="a",
            tool="t",
            effect="read",
            args={"x": 1.5, "y": [None]},
            plan_hash="0" * 64,
        )
        log.append("step_finished", step_id="a", tool="t", status="ok", output=-0.0, duration_ms=1e-7)
        log.append(
            "run_finished",
            status="succeeded",
            reason=None,
            message=None,
            answer=None,
            result=None,
            steps_run=1,
            llm_calls=0,
        )
    lines = path.read_text(encoding="utf-8").split("\n")[:-1]  # not splitlines(): U+2028 is no line end
    assert [canonical_json(json.loads(line)) for line in lines] == lines
    report = verify(path, check_schema=False)
    assert report.ok, report.issue
