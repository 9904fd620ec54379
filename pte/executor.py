"""The deterministic executor: runs a compiled `Plan` with no LLM anywhere in reach.

Steps run one at a time in the plan's fixed order (topological, ties broken by plan
order). For each step the executor resolves references from earlier outputs, validates
the resolved arguments against the tool's input schema, records `step_started` (made
durable first for `write` tools: the write-ahead rule), calls the tool with its timeout,
validates the output against the output schema, and records `step_finished`. The first
failed step stops the run. It calls nothing the plan does not name.

Timeouts (`LiveInvoker`). Every tool call is bounded by the tool's ``timeout_s``:

- On the main thread of a POSIX process (the usual case: a CLI, a worker process), the
  tool runs right there under a one-shot ``ITIMER_REAL`` timer. When it expires, a SIGALRM
  handler raises a private `BaseException` inside the tool, so the tool is *stopped*, not
  left running: its ``finally`` blocks and context managers run (a ``with conn:`` SQLite
  transaction rolls back) and the step fails with ``ToolError("timeout")``. Being a
  `BaseException`, it passes through ``except Exception`` in the tool. The previous SIGALRM
  handler is put back after every call (after the whole run, inside `Executor.run`, which
  also leaves the timer armed between calls to save a system call: if it expires there,
  it is ignored, and an interrupted system call is retried as Python always does); a
  SIGALRM that is not this timer's goes to the previous handler meanwhile.
  Limits: a tool blocked inside C code that neither returns nor checks for signals (or
  one that swallows the exception with a bare ``except:``) only stops when that code
  returns; its step still fails with ``timeout``. A tool must not use SIGALRM or
  ``ITIMER_REAL`` itself.
- Anywhere else (another thread, a platform without SIGALRM, or while some other code has
  an ``ITIMER_REAL`` timer running, which is left untouched), the call runs on a daemon
  worker thread, one per calling thread, and is *abandoned* on timeout: Python cannot kill
  a thread, so the hung call may still finish (and have its effect) later, but it never
  blocks the run, later calls (they get a fresh worker) or interpreter exit.

Either way a call that did not finish within ``timeout_s`` fails its step with
``ToolError("timeout")``, and its result, if any, is discarded.

This module must never import an LLM client; tests/test_executor_isolation.py enforces it.
"""

from __future__ import annotations

import copy
import importlib
import queue
import signal
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from pte.audit import AuditLog
from pte.errors import AuditWriteError, ToolError
from pte.plan import Plan, PlanStep, Reference, is_reference
from pte.tools import Registry, ToolSpec

__all__ = ["ExecutionResult", "Executor", "LiveInvoker", "StepResult", "ToolInvoker"]

StepStatus = Literal["ok", "failed"]


@dataclass(frozen=True)
class StepResult:
    """What one step did: its resolved arguments and either an output or an error."""

    step_id: str
    tool: str
    status: StepStatus
    args: Mapping[str, Any] | None
    output: Any = None
    error: ToolError | None = None
    duration_ms: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def _ok_result(
    step_id: str, tool: str, args: Mapping[str, Any], output: Any, duration_ms: float
) -> StepResult:
    """``StepResult(step_id, tool, "ok", args, output=output, duration_ms=duration_ms)``, faster.

    A frozen dataclass sets each field through ``object.__setattr__``; filling the instance
    dict directly gives the same object in half the time (this runs once per step).
    """
    result: StepResult = object.__new__(StepResult)
    result.__dict__.update(
        step_id=step_id, tool=tool, status="ok", args=args, output=output, error=None, duration_ms=duration_ms
    )
    return result


@dataclass
class ExecutionResult:
    """The outcome of running (the rest of) a plan."""

    plan: Plan
    #: Outputs of every completed step, including those completed before this execution.
    outputs: dict[str, Any]
    #: The steps run by this execution, in order.
    results: list[StepResult] = field(default_factory=list)
    #: The failed step, if one failed (execution stopped there).
    failure: StepResult | None = None

    @property
    def ok(self) -> bool:
        return self.failure is None

    def result_value(self) -> Any:
        """The plan's `result` with its references resolved (None when the plan has none)."""
        return resolve_result(self.plan, self.outputs)


def resolve_result(plan: Plan, outputs: Mapping[str, Any]) -> Any:
    """Resolve the references in a plan's `result` against step outputs."""

    def walk(value: Any) -> Any:
        if is_reference(value):
            return Reference.parse(value["$ref"]).resolve(outputs)
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    return walk(plan.result) if plan.has_result else None


#: Steps whose argument templates an executor keeps (the cache is emptied when full).
_TEMPLATE_CACHE = 4096

_IMMUTABLE = frozenset({str, int, float, bool, type(None)})


def _fresh_copy(value: Any) -> Any:
    """A deep copy of JSON data (dicts, lists, scalars); anything else goes to `copy.deepcopy`.

    Same isolation as `copy.deepcopy` (no container is shared with `value`) at a fraction
    of the cost for the small argument objects tools take.
    """
    kind = type(value)
    if kind in _IMMUTABLE:
        return value
    if kind is dict:
        return {key: item if type(item) in _IMMUTABLE else _fresh_copy(item) for key, item in value.items()}
    if kind is list:
        return [item if type(item) in _IMMUTABLE else _fresh_copy(item) for item in value]
    return copy.deepcopy(value)


class ToolInvoker(Protocol):
    """Calls a tool. The live invoker runs the function; replay serves recorded outputs."""

    def __call__(self, spec: ToolSpec, args: dict[str, Any], step: PlanStep) -> Any: ...


#: What a timed call gives back: (True, value) or (False, exception); None when it timed out.
_Outcome = tuple[bool, Any] | None


class _ToolTimeout(BaseException):
    """Raised inside a tool by the SIGALRM handler when its timeout expires (never escapes)."""


class _Alarm:
    """Runs calls on the main thread under a one-shot ITIMER_REAL timer (see the module doc).

    One instance per process; it is only ever used from the main thread, where Python runs
    signal handlers, so its state needs no lock. Outside a scope (`hold`) each call installs
    the SIGALRM handler and puts the previous one back; inside one (`Executor.run` opens one
    for its whole loop) the handler stays installed between calls, and a SIGALRM that is not
    this timer's still goes to the previous handler.
    """

    #: A SIGALRM this long before the deadline is someone else's (clock granularity slack).
    _SLACK_S = 0.001
    #: After our timer fired, a SIGALRM this soon is that one, delivered late: ignored.
    _STALE_S = 0.5

    def __init__(self) -> None:
        self._handler_ref = self._handler  # one bound method: installed and compared by identity
        self._installed = False
        self._previous: Any = signal.SIG_DFL
        self._scopes = 0
        self._busy = False  # a timed call is in progress (a tool that runs a plan itself)
        self._inside = False  # the tool is running: the handler may raise into it
        self._deadline = 0.0
        self._stale_until = 0.0
        # Inside a scope the timer is not disarmed after a call (the next call re-arms it, the
        # end of the scope disarms it): one system call less per call. This is its deadline.
        self._left_armed: float | None = None
        self._foreign: BaseException | None = None
        self._fired = False  # the timer went off in the current call (and was handled)

    def _handler(self, signum: int, frame: Any) -> None:
        now = time.monotonic()
        if self._inside and now >= self._deadline - self._SLACK_S:
            self._inside = False  # one shot: the tool's cleanup runs undisturbed
            self._fired = True
            raise _ToolTimeout
        left_armed = self._left_armed
        if left_armed is not None and now >= left_armed - self._SLACK_S:
            self._left_armed = None  # the timer left armed after a call expired: it is spent
            return
        if now <= self._stale_until or (self._busy and now >= self._deadline - self._SLACK_S):
            return  # our timer, firing just as the call returned: nothing to stop
        previous = self._previous  # not our timer: behave as if we were not installed
        if callable(previous):
            try:
                previous(signum, frame)
            except BaseException as exc:  # theirs: it must reach the caller, not fail the step
                self._foreign = exc
                raise
        elif previous == signal.SIG_DFL:  # the default action ends the process
            _set_handler(signal.SIGALRM, signal.SIG_DFL)
            signal.raise_signal(signal.SIGALRM)

    def _install(self) -> bool:
        current = _get_handler(signal.SIGALRM)
        if self._installed and current is self._handler_ref:
            return True
        if current is None:  # installed outside Python: it could not be put back
            return False
        try:
            _set_handler(signal.SIGALRM, self._handler_ref)
        except (ValueError, OSError):  # not the main interpreter
            return False
        # Whatever was installed (even one a tool or a callback put in our place) is restored.
        self._previous = current
        self._installed = True
        return True

    def _is_ours(self, delay: float, interval: float, now: float) -> bool:
        """Whether a running ITIMER_REAL timer is the one a call left armed."""
        left_armed = self._left_armed
        return left_armed is not None and not interval and abs(delay - (left_armed - now)) < 0.01

    def _release(self) -> None:
        if self._left_armed is not None:
            now = time.monotonic()
            delay, interval = signal.setitimer(signal.ITIMER_REAL, 0)
            if delay and not self._is_ours(delay, interval, now):  # someone else's: leave it running
                signal.setitimer(signal.ITIMER_REAL, delay, interval)
            self._left_armed = None
        if not self._installed:
            return
        self._installed = False
        previous, self._previous = self._previous, signal.SIG_DFL
        if _get_handler(signal.SIGALRM) is self._handler_ref:  # else someone replaced it: theirs now
            _set_handler(signal.SIGALRM, previous)  # first runs any handler still pending

    def hold(self) -> _AlarmScope:
        """A context in which the handler, once installed, stays installed (main thread only)."""
        return _AlarmScope(self)

    def call(self, fn: Callable[[], Any], timeout_s: float) -> _Outcome | bool:
        """The outcome of `fn()`, or False when the timer is not available for this call."""
        if self._busy or not self._install():
            return False
        self._busy = True
        try:
            now = time.monotonic()
            self._deadline = now + timeout_s
            delay, interval = signal.setitimer(signal.ITIMER_REAL, timeout_s)
            if delay and not self._is_ours(delay, interval, now):
                # Someone else's timer was running: give it back untouched.
                signal.setitimer(signal.ITIMER_REAL, delay, interval)
                self._left_armed = None
                return False
            self._left_armed = None
            self._foreign = None
            self._fired = False
            self._inside = True
            try:
                value = fn()
            except _ToolTimeout:
                return None
            except BaseException as exc:  # handed back to the invoker, which decides
                if exc is self._foreign:
                    raise
                return None if self._fired else (False, exc)
            else:  # a tool that swallowed the timeout still timed out
                return None if self._fired else (True, value)
            finally:
                self._inside = False
                self._foreign = None
                if self._fired:  # spent, and its signal handled
                    self._fired = False
                elif self._scopes:
                    self._left_armed = self._deadline
                elif not signal.setitimer(signal.ITIMER_REAL, 0)[0]:  # it went off as the call returned
                    self._stale_until = time.monotonic() + self._STALE_S
        finally:
            self._busy = False
            if not self._scopes:
                self._release()


class _AlarmScope:
    def __init__(self, alarm: _Alarm) -> None:
        self._alarm = alarm

    def __enter__(self) -> None:
        self._alarm._scopes += 1

    def __exit__(self, *exc: object) -> None:
        alarm = self._alarm
        alarm._scopes -= 1
        if not alarm._scopes and not alarm._busy:
            alarm._release()


# The C functions: signal.signal's wrapper converts handlers to and from enums (~2 µs a call).
try:
    _c_signal: Any = importlib.import_module("_signal")
    _get_handler: Callable[[int], Any] = _c_signal.getsignal
    _set_handler: Callable[[int, Any], Any] = _c_signal.signal
except (ImportError, AttributeError):  # pragma: no cover - not CPython
    _get_handler = signal.getsignal
    _set_handler = signal.signal

_ALARM: _Alarm | None = _Alarm() if hasattr(signal, "SIGALRM") and hasattr(signal, "setitimer") else None
_MAIN_THREAD_ID = threading.main_thread().ident


#: A job for a worker: the call, the box its outcome goes in, the event set when it is there.
_Job = tuple[Callable[[], Any], list[Any], threading.Event]


def _worker_loop(jobs: queue.SimpleQueue[_Job | None]) -> None:
    while True:
        job = jobs.get()
        if job is None:  # its _Worker was dropped: end the thread
            return
        fn, box, done = job
        try:
            box.append((True, fn()))
        except BaseException as exc:  # handed back to the invoker, which decides
            box.append((False, exc))
        done.set()
        del job, fn, box, done


class _Worker:
    """One daemon thread that runs tool calls, so that a call can be abandoned on timeout.

    Python cannot kill a thread; a timed-out call is abandoned (its daemon thread never
    blocks interpreter exit) and later calls get a fresh worker, so the process never hangs.
    The thread ends once its `_Worker` is dropped (after its current call, if any).
    """

    def __init__(self) -> None:
        jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._jobs = jobs
        thread = threading.Thread(target=_worker_loop, args=(jobs,), name="pte-tool-worker", daemon=True)
        thread.start()
        weakref.finalize(self, jobs.put, None)

    def run(self, fn: Callable[[], Any], timeout_s: float) -> _Outcome:
        """(True, value) or (False, exception); None when the call did not finish in time."""
        box: list[Any] = []
        done = threading.Event()
        self._jobs.put((fn, box, done))
        if not done.wait(timeout_s):
            return None
        result: tuple[bool, Any] = box[0]
        return result


class LiveInvoker:
    """Runs tool functions for real, each under its `timeout_s` (see the module docstring).

    Safe to share between threads: each calling thread gets its own worker thread when it
    needs one, so a call hung in one thread never delays a call made in another.
    """

    def __init__(self) -> None:
        self._local = threading.local()

    def scope(self) -> AbstractContextManager[None]:
        """A context for a series of calls (`Executor.run` opens one for its loop).

        On the main thread the SIGALRM handler then stays installed from the first call to
        the end of the scope instead of being installed and removed around every call.
        """
        if _ALARM is not None and threading.get_ident() == _MAIN_THREAD_ID:
            return _ALARM.hold()
        return nullcontext()

    def __call__(self, spec: ToolSpec, args: dict[str, Any], step: PlanStep) -> Any:
        timeout_s = spec.timeout_s
        outcome: _Outcome | bool = False
        if _ALARM is not None and threading.get_ident() == _MAIN_THREAD_ID:
            outcome = _ALARM.call(lambda: spec.invoke(args), timeout_s)
        if outcome is False:
            worker: _Worker | None = getattr(self._local, "worker", None)
            if worker is None:
                worker = self._local.worker = _Worker()
            try:
                outcome = worker.run(lambda: spec.invoke(args), timeout_s)
            except BaseException:  # e.g. KeyboardInterrupt while waiting: the call may still run
                self._local.worker = None
                raise
            if outcome is None:
                self._local.worker = None  # abandoned: it may still be running the hung call
                raise ToolError(
                    "timeout", f"{spec.name} did not finish within {timeout_s:g}s and was abandoned"
                )
        if outcome is None:
            raise ToolError("timeout", f"{spec.name} did not finish within {timeout_s:g}s and was stopped")
        assert outcome is not True
        ok, value = outcome
        if ok:
            return value
        if isinstance(value, ToolError):
            raise value
        if not isinstance(value, Exception):  # KeyboardInterrupt, SystemExit: not ours to swallow
            raise value
        raise ToolError("tool_error", f"{type(value).__name__}: {value}")


class Executor:
    """Runs compiled plans against a registry, recording each step to an audit log."""

    def __init__(self, registry: Registry, *, invoker: ToolInvoker | None = None) -> None:
        self.registry = registry
        self.invoker: ToolInvoker = invoker or LiveInvoker()
        # id(step) -> (step, its literal arguments): see `_resolve_args`.
        self._templates: dict[int, tuple[PlanStep, dict[str, Any], bool]] = {}

    def run(
        self,
        plan: Plan,
        audit: AuditLog | None = None,
        *,
        completed: Mapping[str, Any] | None = None,
        on_step: Callable[[StepResult], None] | None = None,
    ) -> ExecutionResult:
        """Run every step of `plan` not already in `completed` (step id -> recorded output).

        `on_step` is called after each step (progress reporting).

        Raises `AuditWriteError` if a record cannot be written: no further tool is called.
        """
        outputs: dict[str, Any] = dict(completed or {})
        execution = ExecutionResult(plan=plan, outputs=outputs)
        invoker = self.invoker
        with invoker.scope() if isinstance(invoker, LiveInvoker) else nullcontext():
            self._run_steps(plan, audit, outputs, execution, on_step)
        return execution

    def _run_steps(
        self,
        plan: Plan,
        audit: AuditLog | None,
        outputs: dict[str, Any],
        execution: ExecutionResult,
        on_step: Callable[[StepResult], None] | None,
    ) -> None:
        for step_id in plan.order:
            if step_id in outputs:
                continue
            try:
                result = self._run_step(plan, plan.step(step_id), outputs, audit)
            except AuditWriteError as exc:
                # The tool may already have run: it still counts as called.
                ran: StepResult | None = getattr(exc, "step_result", None)
                if ran is not None:
                    execution.results.append(ran)
                    if on_step is not None:
                        on_step(ran)
                raise
            execution.results.append(result)
            if on_step is not None:
                on_step(result)
            if not result.ok:
                execution.failure = result
                break
            outputs[step_id] = result.output

    def _resolve_args(self, step: PlanStep, outputs: Mapping[str, Any]) -> dict[str, Any]:
        """`step.resolve_args(outputs)`, from a per-step template instead of a JSON round trip.

        The template is the step's literal arguments (a private copy, never handed out);
        each call copies it and puts in the values its references select, which stay shared
        with the producing steps' outputs exactly as with `PlanStep.resolve_args`.
        """
        cached = self._templates.get(id(step))
        if cached is None or cached[0] is not step:
            if len(self._templates) >= _TEMPLATE_CACHE:
                self._templates.clear()
            template = step.args
            # Flat: a shallow copy is a deep one, once top-level references are put in.
            top_refs = {path[0] for path, _ in step.references if len(path) == 1}
            flat = all(type(v) in _IMMUTABLE or k in top_refs for k, v in template.items())
            # The step is kept in the entry, so that its id cannot be reused while cached.
            cached = self._templates[id(step)] = (step, template, flat)
        args: dict[str, Any] = dict(cached[1]) if cached[2] else _fresh_copy(cached[1])
        for path, ref in step.references:
            target: Any = args
            for key in path[:-1]:
                target = target[key]
            target[path[-1]] = ref.resolve(outputs)
        return args

    def _run_step(
        self, plan: Plan, step: PlanStep, outputs: Mapping[str, Any], audit: AuditLog | None
    ) -> StepResult:
        spec = self.registry[step.tool]
        started = time.perf_counter()
        try:
            args = self._resolve_args(step, outputs)
        except (KeyError, IndexError, TypeError) as exc:
            # A pointer through an optional part of an output that was absent at run time.
            error = ToolError(
                "unresolved_reference", f"a reference of step {step.id!r} selects nothing: {exc}"
            )
            return self._record_failure(step, None, error, started, audit, spec, plan)
        if audit is not None:
            audit.append(
                "step_started",
                step_id=step.id,
                tool=spec.name,
                effect=spec.effect,
                args=args,
                plan_hash=plan.hash,
            )
            if spec.effect == "write":
                audit.sync()  # write-ahead: the intent is durable before the side effect
        try:
            spec.validate_args(args)
            # The tool gets its own deep copy: resolved references share objects with earlier
            # steps' outputs, and a tool that mutates its arguments must not rewrite what those
            # steps returned (and the log recorded) nor the args kept in this step's result.
            output = self.invoker(spec, _fresh_copy(args), step)
            spec.validate_output(output)
            mistyped = plan.output_error(step.id, output)
            if mistyped is not None:
                raise ToolError("invalid_output", mistyped)
        except ToolError as error:
            return self._record_failure(step, args, error, started, audit, spec, plan, started_logged=True)
        duration_ms = (time.perf_counter() - started) * 1000
        result = _ok_result(step.id, spec.name, args, output, duration_ms)
        if audit is not None:
            try:
                audit.append(
                    "step_finished",
                    step_id=step.id,
                    tool=spec.name,
                    status="ok",
                    output=output,
                    duration_ms=round(duration_ms, 3),
                )
            except AuditWriteError as exc:
                exc.step_result = result  # type: ignore[attr-defined]
                raise
        return result

    def _record_failure(
        self,
        step: PlanStep,
        args: dict[str, Any] | None,
        error: ToolError,
        started: float,
        audit: AuditLog | None,
        spec: ToolSpec,
        plan: Plan,
        *,
        started_logged: bool = False,
    ) -> StepResult:
        duration_ms = (time.perf_counter() - started) * 1000
        if audit is not None:
            if not started_logged:  # the arguments could not be resolved: record them unresolved
                audit.append(
                    "step_started",
                    step_id=step.id,
                    tool=spec.name,
                    effect=spec.effect,
                    args=step.args,
                    plan_hash=plan.hash,
                )
            audit.append(
                "step_finished",
                step_id=step.id,
                tool=spec.name,
                status="failed",
                error=error.to_dict(),
                duration_ms=round(duration_ms, 3),
            )
        return StepResult(step.id, spec.name, "failed", args, error=error, duration_ms=duration_ms)
