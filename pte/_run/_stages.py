"""Staged planning: a plan that ends with `continue` hands named values to a next planning stage.

Some work has a shape that depends on what was read ("do the tasks listed on this page") or
needs a model's judgement in the middle ("send a summary of the article to Bob"). A plan
ends with ``"continue": {"name": value, ...}`` instead of a ``result``; once its steps have
run, the run loop (pte._run._loop) asks `stage_handoff` for the hand-off, which decides, and
then does what it says:

1. checks the bound: at most ``EngineConfig.max_stages`` plans in a row (``stages_exhausted``
   beyond it), so the LLM budget of a run is ``2 + (stages - 1) + replans`` calls;
2. writes a ``stage`` record: the stage number, the values as the plan wrote them and the
   label set of each value (field-level, `pte._policy._labels`);
3. shows the planner the request, the completed steps (ids and tools: the next plan
   references their outputs by id, never by copying) and each value in a labelled data block;
4. compiles the answer like a replan: the same checks, and once untrusted data has been shown
   to a model, literals the new plan writes count as ``untrusted`` (values the first plan
   already wrote stay ``request``), while values carried **by reference** keep their own,
   field-level labels. A guarded sink then decides whether a later-stage literal may reach it.

The executor never calls a model: stages are planned by the engine between executions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pte._core import FailedClosed, ReasonCode, canonical_json
from pte._execution import resolve_result
from pte._plan import Plan, Reference, is_reference
from pte._policy import Decided
from pte._run._ending import error_labels_of
from pte._run._exposure import Shown, completed_for_planner, error_for_planner, literal_of, value_for_planner
from pte._run._prompts import replanner_messages, stage_messages

if TYPE_CHECKING:
    from pte._execution import StepResult
    from pte._policy import LabelTree
    from pte._run._state import Planning, RunState

__all__ = [
    "ReplanHandoff",
    "StageHandoff",
    "continue_literals",
    "decided_for",
    "replan_handoff",
    "replan_trigger",
    "stage_handoff",
    "value_labels",
]

_UNKNOWN = frozenset({"untrusted"})


def decided_for(run: RunState, origin: str) -> Decided:
    """What decides that a new plan runs at all (docs/labels.md). A stage runs only if the plan
    before it ended: every require, failure and hand-off of that plan. A replan runs because a
    step failed: the requires of the plan that failed, the earlier failures, and the trigger
    (`replan_trigger`: what decided that the step ran and failed, and the error it was shown)."""
    if origin == "stage":
        return run.completion
    if origin == "replanner":
        return Decided(run.completion.conditions | run.trigger, run.decided.failures)
    return Decided()


def replan_trigger(run: RunState, step_id: str, error_labels: frozenset[str]) -> frozenset[str]:
    """The labels of a failure that triggers a replan: what decided that the step ran and
    failed (its inputs, condition, list and every decision before it; an element's step), and
    the labels of its error (its kind included: a tool reading untrusted data may fail as that
    data chooses). Unknown step: assume the worst."""
    base = step_id.split("[", 1)[0]
    return run.triggers.get(base, _UNKNOWN) | error_labels


def continue_literals(plan: Plan) -> frozenset[str]:
    """Canonical JSON of the literals inside a plan's `continue` (they stand for the request
    when the plan was written before any untrusted data was shown)."""
    out: set[str] = set()
    stack: list[Any] = list(plan.continue_values.values())
    while stack:
        value = stack.pop()
        if is_reference(value):
            continue
        if isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
        else:
            out.add(canonical_json(value))
    return frozenset(out)


def value_labels(
    value: Any,
    trees: Mapping[str, LabelTree],
    labels: Mapping[str, frozenset[str]],
    literal: str,
    request_literals: frozenset[str],
) -> frozenset[str]:
    """The label set of a `continue` value: references by field, literals as their writer."""
    out: set[str] = set()
    stack = [value]
    while stack:
        item = stack.pop()
        if is_reference(item):
            ref = Reference.parse(item["$ref"])
            tree = trees.get(ref.step)
            out |= tree.select(ref.tokens) if tree is not None else labels.get(ref.step, {"untrusted"})
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        else:
            out.add("request" if canonical_json(item) in request_literals else literal)
    return frozenset(out)


def stage_values(plan: Plan, outputs: Mapping[str, Any]) -> dict[str, Any]:
    """The `continue` values resolved against step outputs (FailedClosed if one selects nothing)."""
    values = plan.continue_values
    shaped = Plan(
        steps=plan.steps,
        order=plan.order,
        hash=plan.hash,
        canonical=plan.canonical,
        result_json=canonical_json(values),
    )
    try:
        resolved: dict[str, Any] = resolve_result(shaped, outputs)
    except (KeyError, IndexError, TypeError) as exc:
        raise FailedClosed(
            ReasonCode.STEP_FAILED, f"a value the plan hands to the next stage selects nothing: {exc}"
        ) from None
    return resolved


@dataclass(frozen=True)
class StageHandoff:
    """What the loop does for a next stage: record it (``stage``: the number, the values as the
    plan wrote them, their labels), note what the prompt shows, and ask the planner."""

    stage: int
    plan_hash: str
    values: dict[str, Any]
    labels: dict[str, list[str]]
    messages: list[dict[str, str]]
    shown: Shown


def stage_handoff(planning: Planning, run: RunState, request: str, plan: Plan, stage: int) -> StageHandoff:
    """The hand-off of `plan`'s values to planning stage `stage` (see the module docstring);
    FailedClosed beyond ``max_stages`` or when a value selects nothing."""
    config = planning.config
    limit = config.max_stages
    if stage > limit:
        raise FailedClosed(
            ReasonCode.STAGES_EXHAUSTED,
            f"the plan hands values to planning stage {stage}; max_stages is {limit}",
        )
    resolved = stage_values(plan, run.result.outputs)
    literal = literal_of(run)
    shown_values: dict[str, tuple[Any, Any, str]] = {}
    recorded: dict[str, list[str]] = {}
    shown = Shown()
    for name, expr in plan.continue_values.items():
        labels = value_labels(expr, run.label_trees, run.labels, literal, run.request_literals)
        # pte._run._exposure: handles in place of untrusted parts, or the text (and exposure).
        untrusted_shown = run.shown_untrusted or shown.untrusted
        value, provenance, seen = value_for_planner(
            planning, run, expr, resolved[name], labels, untrusted_shown=untrusted_shown
        )
        shown |= seen
        shown_values[name] = (expr, value, provenance)
        recorded[name] = sorted(labels)
    # A generic step's output type is its instantiation (fields picked, records sorted): shown,
    # so that the next stage can write references into it (the compiler checks them against it).
    completed = [(sid, tool, run.output_types.get(sid)) for sid, tool in run.prior.items()]
    messages = stage_messages(
        request,
        planning.planner_registry,
        planning.policy,
        stage,
        shown_values,
        completed,
        budget=config.data_budget,
        handles=config.planner_data == "handles",
    )
    return StageHandoff(stage, plan.hash, plan.continue_values, recorded, messages, shown)


@dataclass(frozen=True)
class ReplanHandoff:
    """What the loop does for a replan, once its ``replan`` record is written: take the trigger
    (what decides the new plan, `replan_trigger`), note what the prompt shows, ask the replanner."""

    trigger: frozenset[str]
    messages: list[dict[str, str]]
    shown: Shown


def replan_handoff(
    planning: Planning, run: RunState, request: str, plan: Plan, failure: StepResult
) -> ReplanHandoff:
    """The replanner's question after `failure` of a step of `plan`: the failed step's error and
    the completed steps, each shown as the run's planner data says (pte._run._exposure)."""
    assert failure.error is not None
    config = planning.config
    error_labels = error_labels_of(run, failure)
    error, error_provenance, shown = error_for_planner(planning, failure.error.to_dict(), error_labels)
    completed, shown_completed = completed_for_planner(planning, run)
    messages = replanner_messages(
        request,
        planning.planner_registry,
        plan.to_dict(),
        completed,
        failure.step_id,
        failure.tool,
        error,
        error_provenance=error_provenance,
        policy=planning.policy,
        budget=config.data_budget,
        handles=config.planner_data == "handles",
    )
    trigger = replan_trigger(run, failure.step_id, error_labels)
    return ReplanHandoff(trigger, messages, shown | shown_completed)
