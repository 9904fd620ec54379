"""What running a plan's steps produced (`StepResult`, `ExecutionResult`), and what runs them.

`PlanRunner` is what `pte._execution._control_run` runs the parts of per-item and conditional steps
through; `pte._execution._executor.Executor` is one. Kept apart from the executor so that the control
steps it calls are typed without importing it back.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import msgspec

from pte._audit import RecordSink
from pte._core import ToolError
from pte._plan import Plan, Reference, is_reference

__all__ = ["ExecutionResult", "PlanRunner", "StepResult", "resolve_result"]

StepStatus = Literal["ok", "failed"]


class StepResult(msgspec.Struct, frozen=True):
    """What one step did: its resolved arguments and either an output or an error.

    A frozen msgspec `Struct` rather than a frozen dataclass: one is built per step, and a
    frozen dataclass sets each of its nine fields through ``object.__setattr__`` in Python
    (~18k instructions per step against ~1.4k, #37). The same fields, defaults, equality,
    hash and immutability; `msgspec.structs.replace` is its ``dataclasses.replace``.
    """

    step_id: str
    tool: str
    status: StepStatus
    args: Mapping[str, Any] | None
    output: Any = None
    error: ToolError | None = None
    duration_ms: float = 0.0
    #: Calls of the tool (more than 1 after retries).
    attempts: int = 1
    #: The errors of the attempts that were retried.
    retry_errors: tuple[ToolError, ...] = ()

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass
class ExecutionResult:
    """The outcome of running (the rest of) a plan."""

    plan: Plan
    #: Outputs of every completed step, including those completed before this execution.
    outputs: dict[str, Any]
    #: The steps run by this execution, in plan order.
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


class PlanRunner(Protocol):
    """Runs (the rest of) a plan, recording each step: `pte._execution._executor.Executor.run`."""

    def run(
        self,
        plan: Plan,
        audit: RecordSink | None = None,
        *,
        completed: Mapping[str, Any] | None = None,
        on_step: Callable[[StepResult], None] | None = None,
    ) -> ExecutionResult:
        """Run every step of `plan` not already in `completed` (step id -> recorded output)."""
        ...
