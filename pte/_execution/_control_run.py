"""Control at run time: conditions, `require`, and per-item (`for_each`) steps (see pte._plan._control).

The executor hands every step that has a condition, a list or a `require` to `run_controlled`.
Records (schemas/audit-record.schema.json):

- ``condition``: a `when` or `require` evaluated: the step, the outcome (``run``, ``skipped``,
  ``met``, ``not_met`` or ``error``) and the operand values it compared, so an auditor sees
  why a branch ran and replay checks the same decision was made;
- ``for_each``: the list a per-item step maps over was resolved, with its length, before
  any element runs; then each element is an ordinary step ``id[i]``: ``step_started`` (made
  durable first for write tools: write-ahead per element), the call, ``step_finished``.

A list longer than ``max_items`` fails the step before any element runs. The executor
never calls a model here either.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from decimal import Decimal, InvalidOperation
from typing import Any

from pte._audit import RecordSink
from pte._audit import records as rec
from pte._catalogue import Registry
from pte._core import (
    ConditionNotMet,
    FailedClosed,
    ReasonCode,
    ToolError,
    canonical_json,
    is_decimal_string,
)
from pte._execution._step_results import ExecutionResult, PlanRunner, StepResult
from pte._plan import COMPARISONS, ELEMENT, Plan, PlanStep, Reference, as_instant, is_reference

__all__ = [
    "Evaluation",
    "element_step",
    "evaluate",
    "is_controlled",
    "is_element",
    "note_completed",
    "run_controlled",
    "run_with_control",
    "stop_if_partial",
]

_ORDERING = frozenset({"lt", "le", "gt", "ge"})


def is_element(step_id: str) -> bool:
    """Whether a step id names one call of a for_each step (``id[i]``), not a plan step."""
    return step_id.endswith("]")


def note_completed(
    plan: Plan, outputs: Mapping[str, Any], prior: dict[str, str], prior_lists: set[str]
) -> None:
    """Record the plan's for_each and skipped-with-default steps among the completed ones.

    The engine learns of ordinary steps one by one; a for_each step is done when all its
    elements are, and a skipped step with a default has its default as its output.
    """
    for step in plan.tool_steps():
        if step.id in outputs and step.id not in prior:
            prior[step.id] = step.tool
        if step.id in prior and step.for_each is not None:
            prior_lists.add(step.id)


def stop_if_partial(failure: StepResult, registry: Registry) -> None:
    """A non-idempotent write for_each that failed after some elements took effect is not
    replanned: a new plan could not tell which effects happened, so a person must look."""
    if not is_element(failure.step_id) or failure.step_id.endswith("[0]"):
        return
    spec = registry.get(failure.tool)
    if spec is not None and spec.effect == "write" and not spec.idempotent:
        base = failure.step_id.rsplit("[", 1)[0]
        raise FailedClosed(
            ReasonCode.NEEDS_REVIEW,
            f"step {failure.step_id!r} ({failure.tool}) failed after the elements before it took effect; "
            f"{failure.tool} is not idempotent, so {base!r} is not replanned. Check its effects, then "
            "finish the work with a new plan.",
        )


def is_controlled(step: PlanStep) -> bool:
    """Whether a step needs `run_controlled` (a condition, a list or a require)."""
    return step.condition_json is not None or step.for_each is not None


@dataclass(frozen=True)
class Evaluation:
    """A condition evaluated at run time: whether it holds, and the operand values it compared."""

    holds: bool
    values: list[Any]


def evaluate(step: PlanStep, outputs: Mapping[str, Any], modes: tuple[str, ...] = ()) -> Evaluation:
    """Evaluate a step's condition against step outputs.

    Raises ToolError ``unresolved_reference`` when an operand selects nothing and
    ``condition_error`` when values cannot be compared (e.g. a null in an ordering).
    """
    cond = step.condition
    values: list[Any] = []
    counter = iter(modes)

    def operand(value: Any) -> Any:
        if is_reference(value):
            ref = Reference.parse(value["$ref"])
            try:
                return ref.resolve(outputs)
            except (KeyError, IndexError, TypeError) as exc:
                raise ToolError(
                    "unresolved_reference", f"the condition of step {step.id!r} selects nothing: {exc}"
                ) from None
        return value

    def walk(node: Any) -> bool:
        ((op, arg),) = node.items()
        if op in COMPARISONS:
            left, right = operand(arg[0]), operand(arg[1])
            values.append([left, right])
            return _compare(op, left, right, next(counter, "json"), step.id)
        if op == "and":
            return all([walk(c) for c in arg])  # every member evaluated: the record shows all
        if op == "or":
            return any([walk(c) for c in arg])
        if op == "not":
            return not walk(arg)
        value = operand(arg)
        size = len(value) if isinstance(value, (list, str, dict)) else 0
        values.append({"size": size})
        return bool((size == 0) == (op == "empty"))

    return Evaluation(walk(cond), values)


def _as_number(value: Any) -> Decimal | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return Decimal(str(value))
    if isinstance(value, str) and is_decimal_string(value):  # as compile read it (pte._plan._control)
        try:
            return Decimal(value)
        except InvalidOperation:
            return None
    return None


def _compare(op: str, left: Any, right: Any, mode: str, step_id: str) -> bool:
    a: Any
    b: Any
    if mode == "number":
        a, b = _as_number(left), _as_number(right)
    elif mode == "instant":
        a, b = as_instant(left), as_instant(right)
    else:
        a, b = canonical_json(left), canonical_json(right)
        if op in _ORDERING:  # compile never lets this through
            raise ToolError("condition_error", f"step {step_id!r}: {op} on values that have no order")
    if a is None or b is None:
        if op in ("eq", "ne"):
            same = left is None and right is None
            return same if op == "eq" else not same
        raise ToolError(
            "condition_error", f"step {step_id!r}: cannot order {json.dumps(left)} and {json.dumps(right)}"
        )
    try:
        if op == "eq":
            return bool(a == b)
        if op == "ne":
            return bool(a != b)
        if op == "lt":
            return bool(a < b)
        if op == "le":
            return bool(a <= b)
        if op == "gt":
            return bool(a > b)
        return bool(a >= b)
    except TypeError as exc:  # e.g. a naive and an aware date-time
        raise ToolError("condition_error", f"step {step_id!r}: {exc}") from None


def element_step(step: PlanStep, index: int) -> PlanStep:
    """The sub-step ``id[i]`` of a for_each step: its '*' references pointed at element `index`."""
    assert step.for_each is not None
    n = len(step.for_each.tokens)
    refs = tuple(
        (path, _at(ref, n, index) if _binds(step.for_each, ref) else ref) for path, ref in step.references
    )
    return replace(
        step, id=f"{step.id}[{index}]", references=refs, for_each=None, condition_json=None, default_json=None
    )


def _binds(lst: Reference, ref: Reference) -> bool:
    n = len(lst.tokens)
    return (
        ref.step == lst.step
        and ref.tokens[:n] == lst.tokens
        and len(ref.tokens) > n
        and ref.tokens[n] == ELEMENT
    )


def _at(ref: Reference, n: int, index: int) -> Reference:
    return Reference(ref.step, (*ref.tokens[:n], str(index), *ref.tokens[n + 1 :]))


def _condition_record(
    audit: RecordSink | None,
    plan: Plan,
    step: PlanStep,
    outcome: str,
    values: list[Any],
    error: ToolError | None,
) -> None:
    if audit is None:
        return
    audit.write(
        rec.condition(
            step_id=step.id,
            kind="require" if step.is_require else "when",
            outcome=outcome,
            values=values,
            error=None if error is None else error.to_dict(),
            plan_hash=plan.hash,
        )
    )


def run_controlled(
    executor: PlanRunner,
    plan: Plan,
    step: PlanStep,
    outputs: dict[str, Any],
    audit: RecordSink | None,
    execution: ExecutionResult,
    on_step: Callable[[StepResult], None] | None,
) -> bool:
    """Run one controlled step; False when the run must stop (a failure, or a require not met).

    Raises `ConditionNotMet` for a require step whose condition is false, after recording it.
    """
    if step.condition_json is not None:
        try:
            ev = evaluate(step, outputs, step.condition_modes)
        except ToolError as error:
            _condition_record(audit, plan, step, "error", [], error)
            return _failed(
                StepResult(step.id, step.tool or "require", "failed", None, error=error), execution, on_step
            )
        if step.is_require:
            _condition_record(audit, plan, step, "met" if ev.holds else "not_met", ev.values, None)
            if not ev.holds:
                assert step.message is not None
                raise ConditionNotMet(step.id, step.message)
            return True
        _condition_record(audit, plan, step, "run" if ev.holds else "skipped", ev.values, None)
        if not ev.holds:
            if step.default_json is not None:
                outputs[step.id] = step.default
            return True
    if step.for_each is None:  # its condition held: now it is a plain step
        plain = replace(step, condition_json=None, default_json=None, condition_modes=())
        return _run_one(executor, plan, plain, outputs, audit, execution, on_step)
    return _run_each(executor, plan, step, outputs, audit, execution, on_step)


def _failed(
    failure: StepResult, execution: ExecutionResult, on_step: Callable[[StepResult], None] | None
) -> bool:
    """End the run at a controlled step that failed before any call (a condition or a list):
    reported like a failed tool step. Always False (the run must stop)."""
    execution.failure = failure
    execution.results.append(failure)
    if on_step is not None:
        on_step(failure)
    return False


def _run_one(
    executor: PlanRunner,
    plan: Plan,
    step: PlanStep,
    outputs: dict[str, Any],
    audit: RecordSink | None,
    execution: ExecutionResult,
    on_step: Callable[[StepResult], None] | None,
) -> bool:
    """Run one plain step (a controlled step past its condition, or one element) through the
    executor itself, so that its records, write-ahead and timeouts are exactly a step's."""
    part = executor.run(_sub_plan(plan, [step]), audit, completed=outputs, on_step=on_step)
    execution.results.extend(part.results)
    if part.failure is not None:
        execution.failure = part.failure
        return False
    outputs[step.id] = part.outputs[step.id]
    return True


def _run_each(
    executor: PlanRunner,
    plan: Plan,
    step: PlanStep,
    outputs: dict[str, Any],
    audit: RecordSink | None,
    execution: ExecutionResult,
    on_step: Callable[[StepResult], None] | None,
) -> bool:
    assert step.for_each is not None
    try:
        items = step.for_each.resolve(outputs)
    except (KeyError, IndexError, TypeError) as exc:
        items = exc
    error: ToolError | None = None
    if isinstance(items, Exception):
        error = ToolError(
            "unresolved_reference", f"the for_each list of step {step.id!r} selects nothing: {items}"
        )
    elif not isinstance(items, list):
        error = ToolError("invalid_args", f"the for_each list of step {step.id!r} is not a list")
    elif len(items) > step.max_items:
        error = ToolError(
            "too_many_items",
            f"step {step.id!r} would call {step.tool} {len(items)} times; its max_items is {step.max_items}",
        )
    count = len(items) if isinstance(items, list) else 0
    if audit is not None:
        audit.write(
            rec.for_each(
                step_id=step.id,
                tool=step.tool,
                items=count,
                error=None if error is None else error.to_dict(),
                plan_hash=plan.hash,
            )
        )
    if error is not None:
        return _failed(StepResult(step.id, step.tool, "failed", None, error=error), execution, on_step)
    collected: list[Any] = []
    for index in range(count):
        sub = element_step(step, index)
        if not _run_one(executor, plan, sub, outputs, audit, execution, on_step):
            return False
        collected.append(outputs.pop(sub.id))  # an element is not a plan step
    outputs[step.id] = collected
    return True


def _sub_plan(plan: Plan, steps: list[PlanStep]) -> Plan:
    """The same plan (same hash, so records name it) restricted to `steps`, in this order."""
    return Plan(
        steps=tuple(steps),
        order=tuple(s.id for s in steps),
        hash=plan.hash,
        canonical=plan.canonical,
        _index={s.id: s for s in steps},
    )


def run_with_control(
    executor: PlanRunner,
    plan: Plan,
    audit: RecordSink | None,
    completed: Mapping[str, Any] | None,
    on_step: Callable[[StepResult], None] | None,
) -> ExecutionResult:
    """Run a plan that has controlled steps: the plain steps between them go to the executor
    as sub-plans (concurrently where it can), each controlled step runs at its turn in plan order.

    Records come in plan order either way, so replay and resume see the same log.
    """
    outputs: dict[str, Any] = dict(completed or {})
    execution = ExecutionResult(plan=plan, outputs=outputs)
    segment: list[PlanStep] = []

    def flush() -> bool:
        if not segment:
            return True
        part = executor.run(_sub_plan(plan, segment), audit, completed=outputs, on_step=on_step)
        segment.clear()
        execution.results.extend(part.results)
        outputs.update(part.outputs)
        execution.failure = part.failure
        return part.failure is None

    for step_id in plan.order:
        if step_id in outputs:
            continue
        step = plan.step(step_id)
        if not is_controlled(step):
            segment.append(step)
            continue
        if not flush() or not run_controlled(executor, plan, step, outputs, audit, execution, on_step):
            return execution
    flush()
    return execution
