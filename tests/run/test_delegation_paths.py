"""Delegation reads a rejection's ``$.steps[i]`` with ASCII digits only (review of #37).

`_blamed` and `_for_specialist` matched ``\\$\\.steps\\[(\\d+)\\]``: Python's ``\\d`` takes every
script's digits and `int` reads them, so ``$.steps[٣]`` would have named step 3 of a sub-plan.
The compiler writes these paths with ASCII indices, so this is hygiene on text the engine
builds; the property pins it: a path whose index is not ASCII digits is left as it is.
"""

from __future__ import annotations

from typing import Any, cast

from hypothesis import given
from hypothesis import strategies as st

from pte import PlanRejected, ReasonCode

# private: how a rejection of the inlined tree is told to the specialist (no public name)
from pte._run._delegation import _Delegation, _for_specialist
from tests._other_digits import with_a_digit_replaced

CALL = _Delegation(
    index=0,
    step={"id": "ask_billing", "tool": "billing"},
    specialist=cast(Any, None),
    body={"steps": [{"id": "totals"}, {"id": "late"}, {"id": "report"}]},
)


def _rejection(index: str) -> PlanRejected:
    return PlanRejected(
        ReasonCode.BAD_REFERENCE, "reference 'ask_billing__report/x' is wrong", f"$.steps[{index}].args.x"
    )


@given(st.integers(min_value=0, max_value=99).map(str))
def test_an_ascii_index_is_rewritten_to_the_specialist_s_own(index: str) -> None:
    told = _for_specialist(_rejection(index), CALL, "ask_billing__report")
    assert told.path == "$.steps[2].args.x" and "ask_billing__" not in told.message


@given(st.integers(min_value=0, max_value=99).map(str).flatmap(with_a_digit_replaced))
def test_an_index_in_other_digits_is_not_an_index(index: str) -> None:
    told = _for_specialist(_rejection(index), CALL, "ask_billing__report")
    assert told.path == f"$.steps[{index}].args.x"
