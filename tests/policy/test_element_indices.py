"""The endorsement gate reads a for_each element's id and the values it shows a person by the one
index rule (`pte._core.array_index`), as the executor does.

Found in the review of #37: the decisions shown with a call (`render_decisions`) resolved
``prices/01`` to element 1 where the executor (`Reference.resolve`) selects nothing, so a person
could be shown a value the call does not read; and `split_element` took ``pay[01]`` for element
1 of ``pay`` (the executor writes ``pay[1]`` only). Both properties fail before the fix.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

# private: the one rule both must agree with
from pte._core import array_index

# private: what a person is shown with a call
from pte._policy._call_decisions import render_decisions

# private: how the gate reads a for_each element's step id
from pte._policy._endorsement import split_element
from pte.plan import Reference
from tests._pointer_tokens import index_tokens

PRICES = [3, 5, 8]


@given(index_tokens)
def test_a_decision_shows_the_value_the_call_reads(token: str) -> None:
    ref = Reference("prices", (token,))
    spec: dict[str, Any] = {"kind": "when", "condition": {"eq": [{"$ref": str(ref)}, 5]}}
    (sentence,) = render_decisions([spec], None, {"prices": PRICES})
    index = array_index(token)
    if index is not None and index < len(PRICES):
        assert f"{ref} = {PRICES[index]} " in sentence
        assert ref.resolve({"prices": PRICES}) == PRICES[index]
    else:
        assert f"{ref} (absent)" in sentence
        with pytest.raises(KeyError):
            ref.resolve({"prices": PRICES})


@given(st.sampled_from(["pay", "pay_supplier", "x__pay"]), index_tokens)
def test_an_element_id_names_an_element_exactly_when_its_index_is_one(step: str, token: str) -> None:
    step_id = f"{step}[{token}]"
    index = array_index(token)
    assert split_element(step_id) == (
        (step, index) if index is not None and "[" not in token else (step_id, None)
    )


@pytest.mark.parametrize("index", [0, 1, 12])
def test_the_executor_s_element_ids_are_elements(index: int) -> None:
    assert split_element(f"pay[{index}]") == ("pay", index)
