"""A condition reads a decimal string by one rule at compile and at run time: ASCII digits,
as JSON Schema (ECMA-262) reads the decimal pattern, and as RE2 does.

Found in the review of #37: compile (`_literal_kinds`) and run time (`_as_number`) matched
`DECIMAL_STRING_PATTERN` with Python's `re`, whose ``\\d`` takes every script's digits (and whose
``$`` matches before a final newline), and `Decimal` reads them: a model's ``"1\\u0660\\u0660"`` (an
Arabic-Indic zero looks like a dot) next to an amount compiled as the number 100 and was
compared as 100. Such a literal is now a string, so ordering it against a number is refused at
compile (`invalid_args`), and an ASCII decimal still compares exactly. Fails before the fix.
"""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pte import AuditLog, Engine, PlanRejected, ReasonCode, Registry, compile_plan, tool

# private: the one reading of a decimal string (what compile and run time both ask)
from pte._core import is_decimal_string
from tests._other_digits import with_a_digit_replaced


@tool
def invoice_total() -> Decimal:
    """The invoice's total, in EUR."""
    return Decimal("120.00")


@tool
def flag_for_review(note: str) -> str:
    """Flag the invoice for a person's review."""
    return f"flagged: {note}"


REGISTRY = Registry([invoice_total, flag_for_review])

ascii_decimals = st.decimals(
    min_value=0, max_value=1000, places=2, allow_nan=False, allow_infinity=False
).map(str)
literals = st.one_of(
    ascii_decimals,
    ascii_decimals.flatmap(with_a_digit_replaced),
    ascii_decimals.map(lambda text: text + "\n"),
)


def _plan(literal: str) -> str:
    steps = [
        {"id": "total", "tool": "invoice_total", "args": {}},
        {
            "id": "flag",
            "tool": "flag_for_review",
            "args": {"note": "a large invoice"},
            "when": {"gt": [{"$ref": "total"}, literal]},
            "default": "not flagged",
        },
    ]
    return json.dumps({"pte_plan": "1", "steps": steps, "result": {"$ref": "flag"}})


@given(literals)
def test_a_literal_compares_as_a_number_exactly_when_it_is_an_ascii_decimal(literal: str) -> None:
    if not is_decimal_string(literal):
        with pytest.raises(PlanRejected) as caught:
            compile_plan(_plan(literal), REGISTRY)
        assert caught.value.reason is ReasonCode.INVALID_ARGS
        return
    result = Engine(REGISTRY).execute(_plan(literal), AuditLog())
    assert result.status == "succeeded"
    flagged = Decimal("120.00") > Decimal(literal)
    assert result.result == ("flagged: a large invoice" if flagged else "not flagged")


def test_an_arabic_indic_zero_is_not_a_digit_of_an_amount() -> None:
    assert not is_decimal_string("1\u0660\u0660") and not is_decimal_string("100\n")
    assert is_decimal_string("100") and is_decimal_string("-0.5") and not is_decimal_string("-")
