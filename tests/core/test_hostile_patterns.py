"""Hostile strings against schema patterns: explaining a rejection stays linear (issue 23).

pydantic's decimal-string pattern is cubic on Python's `re`: a 2.5 KB argument took ~24 s
to explain at compile and again at run time. The explaining validator runs patterns on RE2.
"""

from __future__ import annotations

import json
import time
from decimal import Decimal

import jsonschema_rs
import pytest
import re2
from hypothesis import given
from hypothesis import strategies as st

from pte import PlanRejected, Registry, ToolError, compile_plan, tool

# private: the decimal-string pattern under test; the schema validator under test; linear patterns, white-box
from pte._core import (
    DECIMAL_STRING_PATTERN,
    DECIMAL_STRING_RE2,
    ExplainingValidator,
    ecma_pattern,
    pattern_matcher,
)


@tool
def pay(amount: Decimal) -> str:
    """Pay an amount."""
    return str(amount)


REGISTRY = Registry([pay])
HOSTILE = "0" * 2500 + "x"  # cubic for `0*\d*\.?\d*$` on a backtracking engine

# Generous: the old explanation of the 2.5 KB string took ~24 s; of the 25 KB one, hours.
BOUND_S = 2.0


def _plan(amount: str) -> str:
    return json.dumps({"pte_plan": "1", "steps": [{"id": "p", "tool": "pay", "args": {"amount": amount}}]})


@pytest.mark.parametrize("size", [2500, 25_000])
def test_a_hostile_decimal_literal_is_rejected_and_explained_quickly_at_compile(size: int) -> None:
    started = time.perf_counter()
    with pytest.raises(PlanRejected) as caught:
        compile_plan(_plan("0" * size + "x"), REGISTRY)
    assert time.perf_counter() - started < BOUND_S
    assert caught.value.reason.value == "invalid_args"
    assert "does not match" in str(caught.value)


def test_a_hostile_decimal_argument_is_explained_quickly_at_run_time() -> None:
    spec = REGISTRY["pay"]
    started = time.perf_counter()
    with pytest.raises(ToolError) as caught:
        spec.validate_args({"amount": HOSTILE})
    assert time.perf_counter() - started < BOUND_S
    assert caught.value.kind == "invalid_args"
    assert "does not match" in str(caught.value)


def test_the_explaining_validator_never_runs_the_decimal_pattern_on_python_re() -> None:
    # The work done, not the clock: the matcher for pydantic's pattern is an RE2 program.
    matcher = pattern_matcher(DECIMAL_STRING_PATTERN)
    assert matcher.__closure__ is not None
    (regex,) = (cell.cell_contents for cell in matcher.__closure__)
    assert isinstance(regex, re2._Regexp)
    assert regex.pattern == ecma_pattern(DECIMAL_STRING_RE2)  # its \d as ECMA-262's [0-9]
    errors = list(
        ExplainingValidator({"type": "string", "pattern": DECIMAL_STRING_PATTERN}).iter_errors(HOSTILE)
    )
    assert len(errors) == 1


@given(st.text(alphabet="+-.0123456789x \n", max_size=12))
def test_the_re2_decimal_pattern_agrees_with_the_compiled_validator(text: str) -> None:
    compiled = jsonschema_rs.validator_for({"type": "string", "pattern": DECIMAL_STRING_PATTERN})
    assert pattern_matcher(DECIMAL_STRING_PATTERN)(text) == compiled.is_valid(text)


def test_a_pattern_re2_refuses_is_checked_by_the_compiled_validator() -> None:
    lookahead = r"^(?!admin$)[a-z]+$"
    validator = ExplainingValidator({"type": "string", "pattern": lookahead})
    assert validator.is_valid("alice")
    assert not validator.is_valid("admin")
