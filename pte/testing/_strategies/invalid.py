"""Invalid plans: `invalid_plans` and `invalid_plan_cases`, one mutation per compile-time reason.

Each example starts from a plan `valid_plans` could draw and introduces one defect; the
mutation for each reason lives in a ``defects_*`` module.
"""

from __future__ import annotations

from hypothesis import reject
from hypothesis import strategies as st
from hypothesis.strategies import DrawFn, SearchStrategy

from pte._catalogue import Registry
from pte._core import PLAN_REASONS, ReasonCode
from pte._plan import DEFAULT_LIMITS, Limits
from pte.testing._strategies.base import (
    _copy,
    _serialise,
)
from pte.testing._strategies.catalogue import (
    _Catalogue,
    _catalogue_for,
)
from pte.testing._strategies.defects_catalogue import (
    _mutate_invalid_args,
    _mutate_policy_violation,
    _mutate_tool_not_allowed,
    _sink_flows,
)
from pte.testing._strategies.defects_document import _mutate_invalid_json, _mutate_schema_violation
from pte.testing._strategies.defects_graph import (
    _mutate_bad_reference,
    _mutate_duplicate_step_id,
    _mutate_plan_cycle,
)
from pte.testing._strategies.defects_size import _fits, _mutate_plan_too_large
from pte.testing._strategies.edits import (
    _Mutation,
)
from pte.testing._strategies.valid import _draw_plan

__all__ = ["COMPILE_REASONS", "invalid_plan_cases", "invalid_plans"]

#: The reason codes `invalid_plans` can generate (every compile-time code but policy_violation).
#: A policy violation needs a policy with sinks, which a bare registry may not have.
COMPILE_REASONS: tuple[ReasonCode, ...] = tuple(
    reason for reason in ReasonCode if reason in PLAN_REASONS and reason is not ReasonCode.POLICY_VIOLATION
)


_MUTATIONS: dict[ReasonCode, _Mutation] = {
    ReasonCode.POLICY_VIOLATION: _mutate_policy_violation,
    ReasonCode.INVALID_JSON: _mutate_invalid_json,
    ReasonCode.SCHEMA_VIOLATION: _mutate_schema_violation,
    ReasonCode.DUPLICATE_STEP_ID: _mutate_duplicate_step_id,
    ReasonCode.TOOL_NOT_ALLOWED: _mutate_tool_not_allowed,
    ReasonCode.INVALID_ARGS: _mutate_invalid_args,
    ReasonCode.BAD_REFERENCE: _mutate_bad_reference,
    ReasonCode.PLAN_CYCLE: _mutate_plan_cycle,
    ReasonCode.PLAN_TOO_LARGE: _mutate_plan_too_large,
}


def _invalid_plan_strategy(catalogue: _Catalogue, reason: ReasonCode, limits: Limits) -> SearchStrategy[str]:
    mutate = _MUTATIONS[reason]
    # Base plans within the step limit (plan_too_large grows them past it itself).
    most = max(1, min(6, limits.max_steps - 1))

    @st.composite
    def plans(draw: DrawFn) -> str:
        drawn = _draw_plan(draw, catalogue, 1, most)
        drawn.doc = _copy(drawn.doc)
        outcome = mutate(draw, catalogue, drawn, limits)
        if outcome is None:
            reject()
        text = outcome if isinstance(outcome, str) else _serialise(draw, outcome)
        if reason is not ReasonCode.PLAN_TOO_LARGE and not _fits(
            text, limits, None if isinstance(outcome, str) else outcome
        ):
            reject()
        return text

    return plans()


def _reason(reason: ReasonCode | str) -> ReasonCode:
    code = ReasonCode(reason)
    if code not in PLAN_REASONS:
        raise ValueError(f"{code.value!r} is not a reason `compile_plan` gives (it ends runs, not plans)")
    return code


def invalid_plans(
    registry: Registry, reason: ReasonCode | str, *, limits: Limits | None = None
) -> SearchStrategy[str]:
    """Plan text that `compile_plan(text, registry, limits)` rejects with exactly `reason`.

    Each example starts from a plan `valid_plans` could draw and introduces one defect of
    that kind, in many forms: for ``invalid_args`` a literal of the wrong type, a value out
    of range, a missing required or an unexpected argument, or a reference whose output
    type does not fit; for ``bad_reference`` an unknown step (in args, ``after`` or the
    result) or a pointer the producer's output cannot have; for ``plan_cycle`` a
    self-reference or a 2..n cycle through references and ``after``; for
    ``plan_too_large`` too many steps, bytes or nesting levels for `limits`.

    For ``policy_violation``, an untrusted tool's output is wired (type-correctly) into a
    parameter whose declared sink refuses untrusted data: such text is rejected when compiled
    with the tools' own policy, ``checks=[Policy.from_registry(registry).check()]`` (what the
    engine always enforces). It raises `ValueError` when the registry has no such flow.

    `limits` are the limits the text will be compiled with (default: `DEFAULT_LIMITS`);
    plans for other reasons stay within them. Reason codes that only end runs raise `ValueError`.
    """
    code = _reason(reason)
    catalogue = _catalogue_for(registry)
    if code is ReasonCode.POLICY_VIOLATION and not _sink_flows(catalogue):
        raise ValueError("the registry has no untrusted output that fits a guarded sink parameter")
    return _invalid_plan_strategy(catalogue, code, limits or DEFAULT_LIMITS)


def invalid_plan_cases(
    registry: Registry, *, limits: Limits | None = None
) -> SearchStrategy[tuple[ReasonCode, str]]:
    """``(reason, text)`` pairs over every compile-time reason in `COMPILE_REASONS` (see `invalid_plans`)."""
    catalogue = _catalogue_for(registry)
    chosen = limits or DEFAULT_LIMITS
    return st.one_of(
        [_tagged(code, _invalid_plan_strategy(catalogue, code, chosen)) for code in COMPILE_REASONS]
    )


def _tagged(code: ReasonCode, texts: SearchStrategy[str]) -> SearchStrategy[tuple[ReasonCode, str]]:
    return st.tuples(st.just(code), texts)
