"""A reference's array index is ASCII digits (RFC 6901), whatever else `str.isdigit` accepts.

Found in the review of #37: ``str.isdigit`` is true for superscripts and circled digits (``²``,
``①``), which `int` refuses, and for the decimal digits of other scripts (U+0661, U+FF15...),
which `int` reads as numbers. A model-written reference ``prices/²`` made compile raise a bare
ValueError (a traceback out of `Engine.run`), and ``prices/`` + U+0661 was taken for
``prices/1``: a second spelling of the same element. Both are now a ``bad_reference``.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pte import AuditLog, Engine, EngineConfig, PlanRejected, ReasonCode, Registry, compile_plan, tool
from pte.plan import Reference
from pte.testing import ScriptedModel


@tool
def list_prices() -> list[int]:
    """The prices, in order."""
    return [3, 5, 8]


@tool
def pair_of_prices() -> tuple[int, str]:
    """A price and its currency."""
    return (3, "EUR")


@tool
def price_label(price: Any) -> str:
    """A price as text."""
    return f"{price} EUR"


REGISTRY = Registry([list_prices, pair_of_prices, price_label])

#: Every character `str.isdigit` accepts that is not an ASCII digit.
OTHER_DIGITS = [chr(c) for c in range(128, sys.maxunicode + 1) if chr(c).isdigit()]

non_ascii_indices = st.one_of(
    st.sampled_from(OTHER_DIGITS),
    st.tuples(st.sampled_from("123"), st.sampled_from(OTHER_DIGITS)).map("".join),
    st.lists(st.sampled_from(OTHER_DIGITS), min_size=2, max_size=3).map("".join),
)


def _plan(producer: str, pointer: str, *, in_args: bool) -> str:
    steps: list[dict[str, Any]] = [{"id": "prices", "tool": producer, "args": {}}]
    target = {"$ref": f"prices/{pointer}"}
    if in_args:
        steps.append({"id": "label", "tool": "price_label", "args": {"price": target}})
        return json.dumps({"pte_plan": "1", "steps": steps, "result": {"$ref": "label"}})
    return json.dumps({"pte_plan": "1", "steps": steps, "result": {"second": target}})


@given(non_ascii_indices, st.sampled_from(["list_prices", "pair_of_prices"]), st.booleans())
def test_an_index_that_is_not_ascii_digits_is_a_bad_reference(
    index: str, producer: str, in_args: bool
) -> None:
    with pytest.raises(PlanRejected) as caught:
        compile_plan(_plan(producer, index, in_args=in_args), REGISTRY)
    assert caught.value.reason is ReasonCode.BAD_REFERENCE


@pytest.mark.parametrize("index", ["0", "1"])
def test_an_ascii_index_still_selects_its_element(index: str) -> None:
    compile_plan(_plan("list_prices", index, in_args=True), REGISTRY)
    assert Reference.parse(f"prices/{index}").resolve({"prices": [3, 5]}) == [3, 5][int(index)]


@given(non_ascii_indices)
def test_resolving_such_an_index_selects_nothing(index: str) -> None:
    # At run time too: absent (KeyError, the executor's unresolved_reference), never a
    # ValueError from int() nor another element.
    with pytest.raises(KeyError):
        Reference.parse(f"prices/{index}").resolve({"prices": list(range(20))})


def test_a_model_writing_a_superscript_index_fails_the_run_closed_not_with_a_traceback() -> None:
    plan = _plan("list_prices", "\u00b2", in_args=False)
    model = ScriptedModel(planner=[plan] * 4, finalizer=["-"])
    result = Engine(REGISTRY, model, config=EngineConfig(llm_answer=False)).run(
        "What is the second price?", AuditLog()
    )
    assert result.status == "failed_closed" and result.reason is not None
