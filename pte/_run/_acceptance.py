"""How a plan is checked, and what accepting it teaches the run: functions of their inputs.

The run loop (pte._run._loop) asks the model, writes the records and decides what comes next;
these say which checks a plan from a given origin gets (`policy_check`, `compile_checked`) and
fold an accepted plan's labels, types, literals and endorsements into the run's state
(`accept`), returning what its ``plan_accepted`` record says (`Accepted`), which the loop
writes. They write no record and call nothing back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pte._plan import CompileCheck, Plan, compile_plan
from pte._policy import PolicyCheck, plan_literals
from pte._run._exposure import exposure_of, literal_of
from pte._run._stages import continue_literals, decided_for
from pte._run._state import Planning, PlanOrigin, RunState

__all__ = ["Accepted", "accept", "compile_checked", "note_accepted", "policy_check"]


def policy_check(planning: Planning, state: RunState, origin: PlanOrigin, *, endorsable: bool) -> PolicyCheck:
    """The policy check a plan from `origin` gets, given what the run showed its writer.

    Sets `state.deciding` for a new request for a plan (a repair keeps the one it repairs)."""
    if origin != "repair":  # a repair answers the same request for a plan as the one it repairs
        state.deciding = decided_for(state, origin)
    prior = {sid: state.labels[sid] for sid in state.prior if sid in state.labels}
    # A planner copies what it was shown into literals, and decides with it which
    # references flow and which tools run (pte._run._exposure). A person's plan ("file") is theirs.
    literal = "request" if origin == "file" else literal_of(state)
    return planning.policy.check(
        literal=literal,
        prior=prior,
        request_literals=state.request_literals if literal != "request" else (),
        prior_trees={sid: state.label_trees[sid] for sid in state.prior if sid in state.label_trees},
        exposure=() if origin == "file" else exposure_of(state),
        decided=state.deciding,
        endorsable=endorsable,
    )


def compile_checked(
    planning: Planning,
    state: RunState,
    origin: PlanOrigin,
    text: str,
    checks: Sequence[CompileCheck],
    *,
    endorsable: bool,
) -> tuple[Plan, PolicyCheck]:
    """Compile `text` with every check a plan from `origin` gets (`PlanRejected` if one fails)."""
    checked = policy_check(planning, state, origin, endorsable=endorsable)
    plan = compile_plan(
        text,
        planning.registry,
        planning.config.limits,
        checks=(checked, *checks),
        prior=state.prior,
        prior_lists=state.prior_lists,
        prior_types={sid: state.output_types[sid] for sid in state.prior if sid in state.output_types},
    )
    return plan, checked


def note_accepted(state: RunState, plan: Plan, checked: PolicyCheck) -> dict[str, list[str]]:
    """Fold an accepted plan's labels, output types, decisions and literals into the run's state;
    returns the parameters of each step that needs an endorsement (``plan_accepted``'s)."""
    state.labels.update(checked.labels)
    state.input_labels.update(checked.input_labels)
    state.triggers.update(checked.triggers)
    state.label_trees.update(checked.trees)
    for step in plan.steps:  # a reused id (a failed step's) takes its new plan's type
        inferred = plan.output_schema(step.id)
        if inferred is None:
            state.output_types.pop(step.id, None)
        else:
            state.output_types[step.id] = inferred
    state.decided, state.completion = checked.decided, checked.completion
    if checked.literal == "request":  # written from the request and catalogue alone
        state.request_literals |= plan_literals(plan) | continue_literals(plan)
    return {sid: sorted(params) for sid, params in checked.endorsements.items()}


@dataclass(frozen=True)
class Accepted:
    """An accepted plan as its ``plan_accepted`` record states it (the loop writes it)."""

    origin: PlanOrigin
    plan: Plan
    #: The parameters of each step whose value waits for a person's endorsement (or none).
    needs_endorsement: dict[str, list[str]]


def accept(state: RunState, origin: PlanOrigin, plan: Plan, checked: PolicyCheck) -> Accepted:
    """Fold an accepted plan into the run's state (`note_accepted`, and the endorsements its
    calls will ask for); what its ``plan_accepted`` record says."""
    endorsing = note_accepted(state, plan, checked)
    if endorsing:
        state.endorse[plan.hash] = checked.endorsements
        state.endorse_decisions[plan.hash] = checked.endorse_decisions
    return Accepted(origin, plan, endorsing)
