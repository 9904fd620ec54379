"""The deterministic executor: runs a compiled `Plan` with no LLM anywhere in reach.

Steps run one at a time in the plan's fixed order (topological, ties broken by plan
order). For each step the executor resolves references from earlier outputs, validates
the resolved arguments against the tool's input schema, records `step_started` (made
durable first for `write` tools: the write-ahead rule), calls the tool with its timeout,
validates the output against the output schema, and records `step_finished`. The first
failed step stops the run. It calls nothing the plan does not name.

This module must never import an LLM client; tests/test_executor_isolation.py enforces it.
"""

from __future__ import annotations

import copy
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from pte.audit import AuditLog
from pte.errors import AuditWriteError, ToolError
from pte.plan import Plan, PlanStep
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
    from pte.plan import Reference, is_reference

    def walk(value: Any) -> Any:
        if is_reference(value):
            return Reference.parse(value["$ref"]).resolve(outputs)
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    return walk(plan.result) if plan.has_result else None


class ToolInvoker(Protocol):
    """Calls a tool. The live invoker runs the function; replay serves recorded outputs."""

    def __call__(self, spec: ToolSpec, args: dict[str, Any], step: PlanStep) -> Any: ...


class _Worker:
    """One daemon thread that runs tool calls, so that a call can be abandoned on timeout.

    Python cannot kill a thread; a timed-out call is abandoned (its daemon thread never
    blocks interpreter exit) and later calls get a fresh worker, so the process never hangs.
    """

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], list[Any], threading.Event]] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name="pte-tool-worker", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            fn, box, done = self._jobs.get()
            try:
                box.append((True, fn()))
            except BaseException as exc:  # handed back to the executor, which decides
                box.append((False, exc))
            done.set()

    def run(self, fn: Callable[[], Any], timeout_s: float) -> tuple[bool, Any] | None:
        """(True, value) or (False, exception); None when the call did not finish in time."""
        box: list[Any] = []
        done = threading.Event()
        self._jobs.put((fn, box, done))
        if not done.wait(timeout_s):
            return None
        result: tuple[bool, Any] = box[0]
        return result


class LiveInvoker:
    """Runs tool functions for real, each under its `timeout_s`."""

    def __init__(self) -> None:
        self._worker: _Worker | None = None

    def __call__(self, spec: ToolSpec, args: dict[str, Any], step: PlanStep) -> Any:
        if self._worker is None:
            self._worker = _Worker()
        outcome = self._worker.run(lambda: spec.invoke(args), spec.timeout_s)
        if outcome is None:
            self._worker = None  # abandoned: it may still be running the hung call
            raise ToolError("timeout", f"{spec.name} did not finish within {spec.timeout_s:g}s and was abandoned")
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
        return execution

    def _run_step(
        self, plan: Plan, step: PlanStep, outputs: Mapping[str, Any], audit: AuditLog | None
    ) -> StepResult:
        spec = self.registry[step.tool]
        started = time.perf_counter()
        try:
            args = step.resolve_args(outputs)
        except (KeyError, IndexError, TypeError) as exc:
            # A pointer through an optional part of an output that was absent at run time.
            error = ToolError("unresolved_reference", f"a reference of step {step.id!r} selects nothing: {exc}")
            return self._record_failure(step, None, error, started, audit, spec, plan)
        if audit is not None:
            audit.append(
                "step_started", step_id=step.id, tool=spec.name, effect=spec.effect, args=args, plan_hash=plan.hash
            )
            if spec.effect == "write":
                audit.sync()  # write-ahead: the intent is durable before the side effect
        try:
            spec.validate_args(args)
            # The tool gets its own deep copy: resolved references share objects with earlier
            # steps' outputs, and a tool that mutates its arguments must not rewrite what those
            # steps returned (and the log recorded) nor the args kept in this step's result.
            output = self.invoker(spec, copy.deepcopy(args), step)
            spec.validate_output(output)
        except ToolError as error:
            return self._record_failure(step, args, error, started, audit, spec, plan, started_logged=True)
        duration_ms = (time.perf_counter() - started) * 1000
        result = StepResult(step.id, spec.name, "ok", args, output=output, duration_ms=duration_ms)
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
                    "step_started", step_id=step.id, tool=spec.name, effect=spec.effect, args=step.args, plan_hash=plan.hash
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
