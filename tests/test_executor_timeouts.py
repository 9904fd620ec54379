"""Tool timeouts: stopped on the main thread (SIGALRM), abandoned elsewhere (a worker per thread).

On the main thread a timed-out tool is *stopped*: an exception is raised inside it, so its
``finally`` blocks run and a ``with conn:`` transaction rolls back. The SIGALRM handler and
any ITIMER_REAL timer that was there before are left as they were. Off the main thread each
calling thread has its own worker, so a call hung in one thread never delays another.

The last section checks that the audit log's fast serialisation (the executor's hot path)
writes exactly what the general path and ``canonical_json`` write.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import threading
import time
from collections.abc import Iterator
from enum import Enum
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pte.audit import AuditLog, Redactor, read_records, verify
from pte.canonical import canonical_json, is_canonical, sha256_hex
from pte.compiler import compile_plan
from pte.errors import ToolError
from pte.executor import Executor, LiveInvoker, StepResult
from pte.plan import Plan
from pte.tools import Registry, spec_of, tool

pytestmark = pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="POSIX timers only")

#: What the tools below did, in order (cleanup markers prove a tool was stopped, not abandoned).
EVENTS: list[str] = []
#: Released at the end of each test, so that an abandoned worker thread ends too.
RELEASE = threading.Event()
#: Set by `held` once it runs.
ENTERED = threading.Event()
#: The SQLite database `insert_then_hang` writes to.
DB: list[Path] = []


@pytest.fixture(autouse=True)
def _clean_state() -> Iterator[None]:
    EVENTS.clear()
    RELEASE.clear()
    ENTERED.clear()
    before = signal.getsignal(signal.SIGALRM)
    yield
    RELEASE.set()
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, before)  # type: ignore[arg-type]


# --- tools ---------------------------------------------------------------------------------------


@tool(timeout_s=0.3)
def sleeper() -> int:
    """Sleeps for an hour, unless stopped."""
    try:
        EVENTS.append("sleeping")
        time.sleep(3600)
        return 0
    finally:
        EVENTS.append("sleeper cleaned up")


@tool(timeout_s=0.3)
def spinner() -> int:
    """A busy loop that never returns on its own."""
    try:
        n = 0
        while True:
            n += 1
    finally:
        EVENTS.append("spinner cleaned up")


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
    """Returns at once, recording which thread ran it."""
    EVENTS.append(f"quick {tag} main={threading.current_thread() is threading.main_thread()}")
    return tag


@tool(timeout_s=5.0)
def foreign_alarm() -> int:
    """Raises SIGALRM itself, well before its deadline: that signal is not the timer's."""
    signal.raise_signal(signal.SIGALRM)
    EVENTS.append("foreign_alarm went on")
    return 2


@tool(effect="write", timeout_s=0.3)
def insert_then_hang(note: str) -> int:
    """Inserts a row in a transaction, then hangs before committing."""
    conn = sqlite3.connect(DB[0])
    try:
        with conn:  # commits on success, rolls back on any exception
            conn.execute("INSERT INTO notes (note) VALUES (?)", (note,))
            EVENTS.append("inserted")
            time.sleep(3600)
        return 1
    finally:
        conn.close()
        EVENTS.append("connection closed")


REGISTRY = Registry([sleeper, spinner, waiter, held, quick, foreign_alarm, insert_then_hang])


def make_plan(*steps: tuple[str, str, dict[str, Any]]) -> Plan:
    doc = {"pte_plan": "1", "steps": [{"id": i, "tool": t, "args": a} for i, t, a in steps]}
    return compile_plan(json.dumps(doc), REGISTRY)


def run_timed(plan: Plan, audit: AuditLog | None = None) -> tuple[Any, float]:
    started = time.monotonic()
    result = Executor(REGISTRY).run(plan, audit)
    return result, time.monotonic() - started


def timeout_error(result: Any) -> ToolError:
    assert result.failure is not None and result.failure.error is not None
    error: ToolError = result.failure.error
    assert error.kind == "timeout", error
    return error


# --- the main thread: stopped ---------------------------------------------------------------------


def test_a_hanging_tool_on_the_main_thread_is_stopped_and_cleans_up() -> None:
    assert threading.current_thread() is threading.main_thread()
    result, elapsed = run_timed(make_plan(("s", "sleeper", {}), ("after", "quick", {"tag": "x"})))
    error = timeout_error(result)
    assert "stopped" in error.message
    assert 0.25 < elapsed < 2.0, elapsed
    # Its finally block ran before the executor moved on: it was stopped, not abandoned.
    assert EVENTS == ["sleeping", "sleeper cleaned up"]
    assert [r.step_id for r in result.results] == ["s"]


def test_a_busy_loop_is_stopped() -> None:
    result, elapsed = run_timed(make_plan(("b", "spinner", {})))
    timeout_error(result)
    assert elapsed < 2.0, elapsed
    assert EVENTS == ["spinner cleaned up"]


def test_a_write_tool_stopped_mid_transaction_leaves_nothing_written(tmp_path: Path) -> None:
    DB[:] = [tmp_path / "ledger.db"]
    with sqlite3.connect(DB[0]) as conn:
        conn.execute("CREATE TABLE notes (note TEXT)")
    conn.close()
    path = tmp_path / "audit.jsonl"
    try:
        with AuditLog(path) as log:
            result, elapsed = run_timed(make_plan(("w", "insert_then_hang", {"note": "half done"})), log)
    finally:
        DB.clear()
    timeout_error(result)
    assert elapsed < 2.0, elapsed
    assert EVENTS == ["inserted", "connection closed"]
    with sqlite3.connect(tmp_path / "ledger.db", timeout=0.5) as conn:
        assert conn.execute("SELECT COUNT(*) FROM notes").fetchone() == (0,)
        conn.execute("INSERT INTO notes (note) VALUES ('not locked')")  # no lock was left behind
    conn.close()
    # The log shows the intent (write-ahead) and the timeout.
    records = read_records(path)
    assert [(r["type"], r.get("status")) for r in records] == [
        ("step_started", None),
        ("step_finished", "failed"),
    ]
    assert records[1]["error"]["kind"] == "timeout"


def test_the_executor_is_usable_after_a_stopped_call() -> None:
    executor = Executor(REGISTRY)
    assert executor.run(make_plan(("s", "sleeper", {}))).failure is not None
    again = executor.run(make_plan(("q", "quick", {"tag": "next"})))
    assert again.ok and again.outputs == {"q": "next"}
    assert EVENTS[-1] == "quick next main=True"


# --- the previous SIGALRM handler and timer ---------------------------------------------------------


def test_the_previous_handler_is_restored_after_calls_runs_and_timeouts() -> None:
    calls: list[int] = []

    def previous(signum: int, frame: Any) -> None:
        calls.append(signum)

    signal.signal(signal.SIGALRM, previous)
    assert Executor(REGISTRY).run(make_plan(("a", "quick", {"tag": "a"}), ("b", "quick", {"tag": "b"}))).ok
    assert signal.getsignal(signal.SIGALRM) is previous
    timeout_error(Executor(REGISTRY).run(make_plan(("s", "sleeper", {}))))
    assert signal.getsignal(signal.SIGALRM) is previous
    # A bare invoker call (no run around it) restores it too.
    invoker = LiveInvoker()
    step = make_plan(("q", "quick", {"tag": "bare"})).step("q")
    assert invoker(spec_of(quick), {"tag": "bare"}, step) == "bare"
    assert signal.getsignal(signal.SIGALRM) is previous
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    assert calls == [], "the timer's own signals never reach the previous handler"


def test_the_default_handler_is_restored() -> None:
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    assert Executor(REGISTRY).run(make_plan(("q", "quick", {"tag": "q"}))).ok
    timeout_error(Executor(REGISTRY).run(make_plan(("s", "sleeper", {}))))
    assert signal.getsignal(signal.SIGALRM) == signal.SIG_DFL
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_a_running_timer_is_left_alone_and_the_worker_enforces_the_timeout() -> None:
    fired: list[float] = []
    signal.signal(signal.SIGALRM, lambda signum, frame: fired.append(time.monotonic()))
    armed_at = time.monotonic()
    signal.setitimer(signal.ITIMER_REAL, 1.5)
    result = Executor(REGISTRY).run(make_plan(("q", "quick", {"tag": "q"})))
    assert result.ok
    assert EVENTS == ["quick q main=False"], "with someone else's timer running, a worker runs the tool"
    remaining, interval = signal.getitimer(signal.ITIMER_REAL)
    assert 0.0 < remaining <= 1.5 - (time.monotonic() - armed_at) + 0.05 and interval == 0.0
    # A hung tool still times out (abandoned by the worker path), and the timer keeps running.
    result, elapsed = run_timed(make_plan(("w", "waiter", {})))
    error = timeout_error(result)
    assert "abandoned" in error.message and elapsed < 1.2
    assert fired == []
    deadline = time.monotonic() + 5
    while not fired and time.monotonic() < deadline:
        time.sleep(0.01)
    assert fired and fired[0] - armed_at >= 1.45, "the previous timer fired, on time, into its own handler"


def test_a_sigalrm_that_is_not_the_timers_goes_to_the_previous_handler() -> None:
    calls: list[int] = []
    signal.signal(signal.SIGALRM, lambda signum, frame: calls.append(signum))
    executor = Executor(REGISTRY)
    # Right after a timeout too (the spent timer must not be mistaken for this signal).
    for plan in (
        make_plan(("f", "foreign_alarm", {})),
        make_plan(("s", "sleeper", {}), ("f", "foreign_alarm", {})),
    ):
        result = executor.run(plan)
        assert [r.status for r in result.results] == (["ok"] if len(plan) == 1 else ["failed"])
        result = executor.run(make_plan(("f", "foreign_alarm", {})))
        assert result.ok, result.failure
    assert calls == [signal.SIGALRM] * 3
    assert EVENTS.count("foreign_alarm went on") == 3


@tool(timeout_s=0.3)
def stubborn() -> int:
    """Swallows every exception, the timeout's too, and returns."""
    try:
        time.sleep(3600)
    except BaseException:
        EVENTS.append("swallowed")
    return 3


def test_a_tool_that_swallows_the_timeout_still_times_out() -> None:
    registry = Registry([stubborn])
    plan = compile_plan('{"pte_plan": "1", "steps": [{"id": "s", "tool": "stubborn", "args": {}}]}', registry)
    result = Executor(registry).run(plan)
    timeout_error(result)
    assert EVENTS == ["swallowed"]


# --- other threads: a worker per calling thread ---------------------------------------------------


def test_a_tool_called_from_another_thread_still_times_out() -> None:
    box: dict[str, Any] = {}

    def body() -> None:
        box["result"], box["elapsed"] = run_timed(make_plan(("w", "waiter", {})))

    thread = threading.Thread(target=body)
    thread.start()
    thread.join(10)
    assert not thread.is_alive()
    error = timeout_error(box["result"])
    assert "abandoned" in error.message
    assert box["elapsed"] < 2.0
    assert EVENTS == ["waiter on pte-tool-worker"]


def test_two_threads_on_one_executor_do_not_share_a_worker() -> None:
    executor = Executor(REGISTRY)
    results: dict[str, Any] = {}

    def run(name: str, plan: Plan) -> None:
        results[name] = executor.run(plan)

    slow = threading.Thread(target=run, args=("a", make_plan(("h", "held", {}))))
    slow.start()
    assert ENTERED.wait(5), "thread A's tool is running (and holds A's worker)"
    fast = threading.Thread(target=run, args=("b", make_plan(("q", "quick", {"tag": "b"}))))
    started = time.monotonic()
    fast.start()
    fast.join(5)
    elapsed = time.monotonic() - started
    # B's 1 s call did not queue behind A's call, which is still running.
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


# --- the audit log's fast serialisation writes what the general path writes -----------------------


class _Colour(str, Enum):  # noqa: UP042 - str() is "_Colour.RED", unlike a StrEnum
    RED = "red"


class _PlainRedactor(Redactor):
    """Same rules; being a subclass sends every record down the general serialisation path."""


_NAMES = [
    "args",
    "output",
    "status",
    "step_id",
    "a",
    "zz",
    "h",
    "hash_",
    "pre",
    "token",
    "db_password",
    "Zeta",
    "ü",
    "x",
]
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
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(["k", "token", "ü", "x"]), inner, max_size=3)
    ),
    max_leaves=6,
)


@given(
    st.dictionaries(st.sampled_from(_NAMES), _values, max_size=6), st.sampled_from(["step_started", "ünï"])
)
def test_fast_serialisation_equals_the_general_one_and_is_canonical(
    fields: dict[str, Any], rtype: str
) -> None:
    logs = [
        AuditLog(run_id="r-ü", clock=lambda: "2026-11-22T02:30:31.000000Z", redactor=redactor)
        for redactor in (Redactor(), _PlainRedactor())
    ]
    records = [log.append(rtype, **fields) for log in logs]
    assert records[0] == records[1]
    assert list(records[0]) == list(records[1])
    record = records[0]
    body = {k: v for k, v in record.items() if k != "hash"}
    assert record["hash"] == sha256_hex(record["prev"] + canonical_json(body))
    # The line read back is canonical under JSON's number model (1.0 reads back as 1).
    line = canonical_json(record).encode("utf-8")
    assert is_canonical(line, json.loads(line))


def test_fast_serialisation_lines_verify(tmp_path: Path) -> None:
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
