"""The deterministic executor: runs a compiled `Plan` with no LLM anywhere in reach.

Steps run as soon as the steps they depend on (through references or ``after``) have
finished, up to `Executor.max_concurrency` at a time; a step waiting for a free slot goes
before every step after it in the plan's order (topological, ties broken by plan order).

The audit log does not follow the clock. A sequencer appends records in plan order, each
step's ``step_started`` and ``step_finished`` together once every earlier step's pair is
written, so a run's records are the same whichever concurrent step finishes first:
exactly those the plan run one step at a time would write (timestamps and durations
aside). Replay and resume therefore see no difference between the two.

Write-ahead: a ``write`` step runs only once every step before it in the plan order has
finished and is recorded, and its ``step_started`` has been made durable (`RecordSink.sync`).
So a write never runs beside an earlier step, and never before its intent is on disk. A
``read`` step may run (and finish) before its records are written; if the process dies
first, it is simply run again by resume. Its two records go to the log together, in one
write (`RecordSink.write_records`), once it and every step before it finished, unless it is
the run's first step or a call gate is asked about it before its effect (then its intent is
written before the call, as a write's is). `serial_writes` also keeps every other step from
running while a write runs.

Threads: with the live invoker, the loop runs on a worker thread of its own, the *owner*
(the caller waits). A call of a plain thread-mode tool without retries starts right on
the owner, with no hand-off; if it is still running after a short while when other steps
could run, it is handed over and a new owner continues the run (the rule and its bounds:
`pte._execution._owner`). Every other call runs where `pte._execution._invoke` puts it (worker thread, worker
process, event loop).

The first failed step in plan order ends the run, once every step before it has finished.
Steps after it that already ran are not recorded (they are reads, see above): async ones
are cancelled, process-isolated ones killed, thread ones abandoned.

How each call runs, is timed out and retried: `pte._execution._invoke`. This module must never import
an LLM client; tests/e2e/test_executor_isolation.py enforces it.

Extending (new step kinds): one step is `_Run._start` (resolve and check its arguments,
write a write's intent, start the call) and `_Run._complete` (check the
outcome, make the `StepResult`, release the steps waiting for it); the scheduler (`_launch`)
and the sequencer (`_flush`) do not look inside a step.
"""

from __future__ import annotations

import contextvars
import heapq
import queue
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from pte._audit import Record, RecordSink
from pte._audit import records as rec
from pte._catalogue import Registry, ToolSpec, derive_key
from pte._core import AuditWriteError, ToolError
from pte._execution._control_run import is_controlled, run_with_control
from pte._execution._invoke import _WORKERS, CallOutcome, settled, start_call
from pte._execution._owner import OwnerCalls, Superseded, may_run_on_owner
from pte._execution._step_results import ExecutionResult, StepResult
from pte._plan import Plan, PlanStep, copy_json

__all__ = ["CallGate", "CallHook", "Executor", "GoesLive", "LiveInvoker", "ToolInvoker"]


#: Steps running at once by default.
DEFAULT_CONCURRENCY = 8


class ToolInvoker(Protocol):
    """Calls a tool. The live invoker runs the function; replay serves recorded outputs."""

    def __call__(self, spec: ToolSpec, args: dict[str, Any], step: PlanStep) -> Any: ...


class CallHook(Protocol):
    """A point asked before a call's side effect (`CallGate.before_effect`): raising stops the
    run before the tool is called. The approval gate's `before_call` is one (it consumes its
    approval before a non-idempotent write, pte._policy._gate)."""

    def __call__(self, spec: ToolSpec, args: dict[str, Any], step: PlanStep) -> None: ...


@runtime_checkable
class GoesLive(Protocol):
    """An invoker that serves recorded outcomes and calls some tools for real (replay's): it
    tells the executor which call goes live, so the run's `CallGate` is asked before that
    call's side effect. An invoker without it (a plain function) counts as live on every call."""

    def goes_live(self, spec: ToolSpec, step: PlanStep) -> bool:
        """Whether the next call of `step` calls the tool for real (asked just before it)."""
        ...


class CallGate(Protocol):
    """What a person decided about the calls of the run being executed, handed to `Executor.run`:
    the one way approvals and endorsements reach the executor, at two points of each call.

    - `check_call`, before a call of a step it names (`calls_to_check`) is recorded and started
      (elements of a ``for_each`` one by one): it may pause the run (`pte.RunPaused`), refuse
      the call (`FailedClosed`) or let it run. Endorsements (pte._policy._endorsement).
    - `before_effect`, after the call's intent is recorded (and made durable, for a write) and
      before the tool is called for real: never for an outcome a log supplies (resume, replay).
      Raising stops the run before the call. Approvals are consumed here (pte._policy._gate).

    The run loop builds the run's gate (pte._run._call_gate) and passes it explicitly; nothing
    reaches the executor through a context variable or an invoker's hook.
    """

    def calls_to_check(self, step_ids: Iterable[str]) -> frozenset[str]:
        """The ids among `step_ids` the gate has work for (the executor asks once per run)."""
        ...

    def check_call(
        self,
        step_id: str,
        tool: str,
        args: Mapping[str, Any],
        outputs: Mapping[str, Any] | None = None,
        hidden: Sequence[str | None] = (),
    ) -> None: ...

    def before_effect(self, spec: ToolSpec, args: dict[str, Any], step: PlanStep) -> None: ...


class _Gated:
    """The executor with a run's `CallGate`, as control steps run their parts (a `PlanRunner`)."""

    def __init__(self, executor: Executor, gate: CallGate) -> None:
        self.executor, self.gate = executor, gate

    def run(
        self,
        plan: Plan,
        audit: RecordSink | None = None,
        *,
        completed: Mapping[str, Any] | None = None,
        on_step: Callable[[StepResult], None] | None = None,
    ) -> ExecutionResult:
        return self.executor.run(plan, audit, completed=completed, on_step=on_step, gate=self.gate)


class LiveInvoker:
    """Runs tool functions for real, each attempt under the tool's `timeout_s` (see `pte._execution._invoke`).

    Calling it runs one call to the end and returns its output (or raises its `ToolError`),
    unless `served` knows the step's outcome; the executor asks `served`, then uses `start`, to
    run several calls at once. Safe to share. What must happen before a call (approvals) is the
    run's `CallGate`, not the invoker's.
    """

    def start(
        self, spec: ToolSpec, args: dict[str, Any], step: PlanStep, done: Callable[[CallOutcome], None]
    ) -> Any:
        """Start the call; `done` gets its outcome from some thread. Returns a handle with `cancel()`."""
        return start_call(spec, args, done)

    def served(self, spec: ToolSpec, args: dict[str, Any], step: PlanStep) -> CallOutcome | None:
        """The step's outcome when it is known without calling the tool, else None (call it).

        Always None here. Resume's invoker (pte._replay) serves the steps its log recorded, so
        the executor schedules only the rest live, as many at a time as it may."""
        return None

    def __call__(self, spec: ToolSpec, args: dict[str, Any], step: PlanStep) -> Any:
        # The executor's path in one call: a step `served` knows is not called (resume's invoker
        # serves its log's steps this way, with no call path of its own).
        outcome = self.served(spec, args, step)
        if outcome is None:
            outcome = self._call_to_the_end(spec, args, step)
        if outcome.error is not None:
            raise outcome.error
        return outcome.output

    def _call_to_the_end(self, spec: ToolSpec, args: dict[str, Any], step: PlanStep) -> CallOutcome:
        box: list[CallOutcome] = []
        finished = threading.Event()

        def done(outcome: CallOutcome) -> None:
            box.append(outcome)
            finished.set()

        call = self.start(spec, args, step, done)
        try:
            finished.wait()
        except BaseException:  # e.g. Ctrl-C while waiting: stop what can be stopped
            call.cancel()
            raise
        return box[0]


class Executor:
    """Runs compiled plans against a registry, recording each step to an audit log.

    - `invoker`: how tools are called. The default `LiveInvoker` runs independent steps
      concurrently; any other invoker (replay's) is called inline, one step at a time in
      plan order.
    - `max_concurrency`: most steps running at once (1: one at a time, in plan order).
    - `serial_writes`: a write step runs alone, with no other step running beside it.
    """

    def __init__(
        self,
        registry: Registry,
        *,
        invoker: ToolInvoker | None = None,
        max_concurrency: int = DEFAULT_CONCURRENCY,
        serial_writes: bool = False,
    ) -> None:
        if type(max_concurrency) is not int or max_concurrency < 1:
            raise ValueError("max_concurrency must be a positive integer")
        self.registry = registry
        self.invoker: ToolInvoker = invoker or LiveInvoker()
        self.max_concurrency = max_concurrency
        self.serial_writes = serial_writes

    def run(
        self,
        plan: Plan,
        audit: RecordSink | None = None,
        *,
        completed: Mapping[str, Any] | None = None,
        on_step: Callable[[StepResult], None] | None = None,
        gate: CallGate | None = None,
    ) -> ExecutionResult:
        """Run every step of `plan` not already in `completed` (step id -> recorded output).

        `on_step` is called after each step is recorded, in plan order (progress reporting);
        `gate` at two points of each call (`CallGate`): before it is recorded (endorsements) and
        before its side effect (approvals).

        Raises `AuditWriteError` if a record cannot be written: no further tool is started.
        """
        if any(is_controlled(step) for step in plan.steps):  # pte._plan._control: when, require, for_each
            runner = self if gate is None else _Gated(self, gate)
            return run_with_control(runner, plan, audit, completed, on_step)
        run = _Run(self, plan, audit, completed, on_step, gate)
        if not run.live:
            return run.execute()
        # The run's loop goes to a worker thread (its *owner*), so that plain calls can run
        # right there, with no thread hand-off per step, and still time out or be handed
        # over: then the watchdog gives the run to a new owner (`pte._execution._owner`).
        run.context = contextvars.copy_context()
        run.new_owner()
        try:
            run.done.wait()
        except BaseException:  # Ctrl-C while waiting: stop the run where it can be stopped
            run.abort()
            raise
        if run.error is not None:
            raise run.error
        return run.execution


class _Run:
    """One execution of a plan: the scheduler (what runs when) and the sequencer (what is recorded)."""

    def __init__(
        self,
        executor: Executor,
        plan: Plan,
        audit: RecordSink | None,
        completed: Mapping[str, Any] | None,
        on_step: Callable[[StepResult], None] | None,
        gate: CallGate | None = None,
    ) -> None:
        self.executor = executor
        self.registry = executor.registry
        self.plan = plan
        self.audit = audit
        self.on_step = on_step
        self.gate = gate
        #: Scopes idempotency keys: the log's run id (the same when resumed), else this run's own.
        self.run_id = audit.run_id if audit is not None else uuid.uuid4().hex
        self.execution = ExecutionResult(plan=plan, outputs=dict(completed or {}))
        #: Outputs that later steps may use: recorded ones and those of steps still unrecorded.
        self.available: dict[str, Any] = dict(self.execution.outputs)
        self.steps = [plan.step(sid) for sid in plan.order if sid not in self.available]
        self.specs = [self.registry[s.tool] for s in self.steps]
        #: The steps a person's endorsement may apply to (the gate's): none without a gate (a
        #: plan with no endorsable calls); no other step is checked.
        self.endorsable = gate.calls_to_check(s.id for s in self.steps) if gate is not None else frozenset()
        #: Which calls go live (`GoesLive`, replay's invoker), decided once per run: a
        #: runtime-checkable protocol's isinstance walks its members, too slow for every step.
        invoker = executor.invoker
        self.goes_live: Callable[[ToolSpec, PlanStep], bool] | None = (
            invoker.goes_live if isinstance(invoker, GoesLive) else None
        )
        position = {s.id: i for i, s in enumerate(self.steps)}
        #: Per step: how many of its dependencies have not finished yet; who waits for it.
        self.waiting = [0] * len(self.steps)
        self.dependents: list[list[int]] = [[] for _ in self.steps]
        for i, step in enumerate(self.steps):
            for dep in step.depends_on:
                j = position.get(dep)
                if j is not None:
                    self.waiting[i] += 1
                    self.dependents[j].append(i)
        #: Per step: scheduled and written ahead as a write (a read with effects too: resume
        #: must know it ran). Decided once per run; the loop asks it several times a step.
        self.writes = [spec.effect == "write" or spec.read_effects for spec in self.specs]
        #: Per step: whether its live call runs on the run's owner thread (`pte._execution._owner`).
        self.on_owner = [may_run_on_owner(spec) for spec in self.specs]
        #: Reads whose dependencies have finished, by plan position (writes wait for their turn).
        self.ready = [i for i, n in enumerate(self.waiting) if n == 0 and not self.writes[i]]
        self.args: dict[int, dict[str, Any] | None] = {}
        self.began: dict[int, float] = {}
        self.running: dict[int, Any] = {}
        self.finished: dict[int, StepResult] = {}
        self.completions: queue.SimpleQueue[tuple[int, CallOutcome]] = queue.SimpleQueue()
        self.next = 0  # the next step to record
        self.stop_at = len(self.steps)  # the first failed step (plan position) known so far
        self.started_logged: set[int] = set()
        self.called: set[int] = set()
        self.write_running = False
        self.live = isinstance(executor.invoker, LiveInvoker)
        self.limit = executor.max_concurrency if self.live else 1
        #: Set when the run is over (live runs: the caller waits for it).
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.aborted = False
        #: The caller's context, which every owner thread runs the loop in (a copy each).
        self.context = contextvars.Context()
        #: Calls on the owner thread (`pte._execution._owner`).
        self.owner_calls = OwnerCalls(self.completions, self.new_owner)

    # -- the loop ------------------------------------------------------------------------------

    def new_owner(self) -> None:
        """Start a thread that runs the loop (at the start, and when an owner call is left behind)."""
        context = self.context.copy()
        _WORKERS.submit(lambda: context.run(self.own))

    def own(self) -> None:
        """The loop, on an owner thread: the outcome is left for `Executor.run`."""
        try:
            self.execute()
        except Superseded:
            return  # an owner call handed over or timed out: a new owner has the run now
        except BaseException as exc:  # handed to the caller's thread
            self.error = exc
        self.done.set()

    def abort(self) -> None:
        """Stop the run (the caller was interrupted): nothing more is started."""
        self.aborted = True
        for call in list(self.running.values()):
            if call is not None:
                call.cancel()
        self.completions.put((-1, CallOutcome()))

    def execute(self) -> ExecutionResult:
        try:
            while self.next < len(self.steps) and self.execution.failure is None:
                if self.aborted:
                    raise Superseded
                self._launch()
                i, outcome = self.completions.get()
                self._complete(i, outcome)
                # Take whatever else finished meanwhile (this thread is the only consumer).
                while not self.completions.empty():
                    i, outcome = self.completions.get_nowait()
                    self._complete(i, outcome)
                self._flush()
        except Superseded:
            raise
        except Exception:
            self._stop_running(wait=True)
            raise
        except BaseException:  # Ctrl-C and the like: do not wait for anything
            self._stop_running(wait=False)
            raise
        # No tool of this run is left running when it returns or raises an error (except
        # timed-out thread calls, which cannot be stopped).
        self._stop_running(wait=True)
        return self.execution

    def _stop_running(self, *, wait: bool) -> None:
        """Cancel the calls still running (past a failure); `wait` for those that cannot be."""
        waiting = {i for i, call in self.running.items() if call is not None and not call.cancel()}
        self.running.clear()
        while wait and waiting:
            waiting.discard(self.completions.get()[0])

    def _launch(self) -> None:
        """Start what may start: the write whose turn it is, then ready reads in plan order."""
        i = self.next
        if (
            i < self.stop_at
            and self.writes[i]
            and i not in self.running
            and i not in self.finished
            and not (self.executor.serial_writes and self.running)
            and len(self.running) < self.limit
        ):
            self._start(i)
        while self.ready and len(self.running) < self.limit and not self.aborted:
            if self.write_running and self.executor.serial_writes:
                return
            i = heapq.heappop(self.ready)
            if i < self.stop_at:
                self._start(i)
        if not self.running and not self.aborted:  # a write waits for a turn that cannot come
            raise AssertionError(f"executor stalled at step {self.next} of {len(self.steps)}")

    # -- one step --------------------------------------------------------------------------------

    def _start(self, i: int) -> None:
        """Resolve, check and record (writes) the step's arguments, then start its tool."""
        step, spec = self.steps[i], self.specs[i]
        self.began[i] = time.perf_counter()
        self.running[i] = None
        try:
            args = step.resolve_args(self.available)
        except (KeyError, IndexError, TypeError) as exc:
            # A pointer through an optional part of an output that was absent at run time.
            self.args[i] = None
            unresolved = ToolError(
                "unresolved_reference", f"a reference of step {step.id!r} selects nothing: {exc}"
            )
            self.completions.put((i, CallOutcome(error=unresolved)))
            return
        if spec.idempotency_key is not None:  # the engine's key, never the plan's (pte._catalogue)
            args[spec.idempotency_key] = derive_key(self.run_id, self.plan.hash, step.id)
        self.args[i] = args
        try:
            spec.validate_args(args)
        except ToolError as invalid:
            self.completions.put((i, CallOutcome(error=invalid)))
            return
        # A call whose value needs a person's endorsement (pte._policy._endorsement): pause, refuse or
        # record the endorsement it consumes, before its intent is recorded. Such a step is a
        # write, started only at its turn, so everything before it is recorded.
        if step.id in self.endorsable and self.gate is not None:
            self.gate.check_call(step.id, spec.name, args, self.available, (spec.idempotency_key,))
        if i == self.next and (self.writes[i] or self.gate is not None or not self.started_logged):
            # The intent goes first where something relies on it: a write's (write-ahead; a
            # write is only ever started at its turn), any call a gate is asked about before
            # its effect, and the run's first (a log that refuses the run's records, one whose
            # run has not begun or that is sealed or broken, stops it before any tool runs). A
            # read's two records are otherwise written together, in one write, once it and
            # every step before it finished.
            self._record_started(i)
        if self.writes[i]:
            if self.audit is not None:
                self.audit.sync()  # write-ahead: the intent is durable before the side effect
            self.write_running = True
        # The tool gets its own deep copy: resolved references share objects with earlier
        # steps' outputs, and a tool that mutates its arguments must not rewrite what those
        # steps returned (and the log recorded) nor the args kept in this step's result.
        private = copy_json(args)
        self.called.add(i)
        invoker = self.executor.invoker
        if isinstance(invoker, LiveInvoker):
            served = invoker.served(spec, private, step)
            if served is not None:  # recorded (resume): no gate, no call
                self.completions.put((i, served))
                return
            if self.gate is not None:
                self.gate.before_effect(spec, private, step)
            if self.on_owner[i]:
                lone = len(self.running) == 1 and not self.ready  # nothing else could run
                self.running[i] = _ON_OWNER
                self.owner_calls.call(i, spec, private, hand_over=not lone)
                return
            self.running[i] = invoker.start(
                spec, private, step, lambda outcome: self.completions.put((i, outcome))
            )
        else:
            live = self.goes_live is None or self.goes_live(spec, step)
            if live and self.gate is not None:
                self.gate.before_effect(spec, private, step)
            try:
                outcome = CallOutcome(output=invoker(spec, private, step))
            except ToolError as exc:
                outcome = CallOutcome(error=exc)
            self.completions.put((i, outcome))

    def _complete(self, i: int, outcome: CallOutcome) -> None:
        if i < 0:
            raise Superseded  # aborted
        if i not in self.running:
            return  # cancelled: past a failure
        del self.running[i]
        if i > self.stop_at:
            return  # past a failure: not recorded
        if self.writes[i]:
            self.write_running = False
        step, spec = self.steps[i], self.specs[i]
        error, output = outcome.error, outcome.output
        if error is None:
            try:
                spec.validate_output(output)
                # A generic tool's output must also fit the type compile inferred for it.
                mistyped = self.plan.output_error(step.id, output)
                if mistyped is not None:
                    raise ToolError("invalid_output", mistyped)
            except ToolError as exc:
                error = exc
        duration_ms = (time.perf_counter() - self.began[i]) * 1000
        args = self.args[i]
        if error is None:
            result = StepResult(
                step_id=step.id,
                tool=spec.name,
                status="ok",
                args=args,
                output=output,
                duration_ms=duration_ms,
                attempts=outcome.attempts,
                retry_errors=tuple(map(settled, outcome.retry_errors)),
            )
            self.available[step.id] = output
            for j in self.dependents[i]:
                self.waiting[j] -= 1
                if not self.waiting[j] and not self.writes[j]:
                    heapq.heappush(self.ready, j)
        else:
            result = StepResult(
                step_id=step.id,
                tool=spec.name,
                status="failed",
                args=args,
                error=settled(error),
                duration_ms=duration_ms,
                attempts=outcome.attempts,
                retry_errors=tuple(map(settled, outcome.retry_errors)),
            )
            if i < self.stop_at:
                self.stop_at = i
                for j, call in list(self.running.items()):
                    # Reads past the failure will not be recorded: stop them, or let them end.
                    if j > i and (call is None or call.cancel()):
                        del self.running[j]
        self.finished[i] = result

    # -- the sequencer ---------------------------------------------------------------------------

    def _flush(self) -> None:
        """Record every finished step whose predecessors in plan order are all recorded."""
        execution = self.execution
        while self.next < len(self.steps):
            i = self.next
            result = self.finished.get(i)
            if result is None:
                return
            try:
                self._record(i, result)
            except AuditWriteError as exc:
                if i in self.called:  # the tool ran: it still counts as called
                    execution.results.append(result)
                    if self.on_step is not None:
                        self.on_step(result)
                raise exc
            execution.results.append(result)
            if self.on_step is not None:
                self.on_step(result)
            self.next += 1
            if not result.ok:
                execution.failure = result
                return
            execution.outputs[result.step_id] = result.output

    def _record_started(self, i: int) -> None:
        """A write's ``step_started``, before its call (write-ahead)."""
        if self.audit is None or i in self.started_logged:
            return
        self.audit.write(self._started(i))
        self.started_logged.add(i)

    def _record(self, i: int, result: StepResult) -> None:
        """A finished step's records: its ``step_finished`` after the ``step_started`` written
        before its call, or both in one write (a read, recorded once every step before it is)."""
        if self.audit is None:
            return
        if i in self.started_logged:
            self.audit.write(self._finished(result))
        else:
            self.audit.write_records([self._started(i), self._finished(result)])
            self.started_logged.add(i)

    def _started(self, i: int) -> Record:
        step, spec = self.steps[i], self.specs[i]
        args = self.args.get(i)
        return rec.step_started(
            step_id=step.id,
            tool=spec.name,
            effect=spec.effect,
            # Arguments that could not be resolved are recorded unresolved.
            args=args if args is not None else step.args,
            plan_hash=self.plan.hash,
        )

    @staticmethod
    def _finished(result: StepResult) -> Record:
        ok = result.ok
        error = None
        if not ok:
            assert result.error is not None
            error = result.error.to_dict()
        retried = result.retry_errors
        return rec.step_finished(
            step_id=result.step_id,
            tool=result.tool,
            status=result.status,
            duration_ms=result.duration_ms,
            output=result.output if ok else None,
            error=error,
            attempts=result.attempts,
            retry_errors=[e.to_dict() for e in retried] if retried else (),
        )


class _OnOwner:
    """Stands in `_Run.running` for a call on the owner thread (`pte._execution._owner`)."""

    def cancel(self) -> bool:
        return False  # a thread cannot be stopped; it reports when it ends


_ON_OWNER = _OnOwner()
