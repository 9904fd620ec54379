"""Compile and run time read a reference's index token by one rule, `pte._core.array_index`.

Found in the review of #37: the check "this pointer token is an array index" was written at
eight places and they disagreed: compile's schema check and `Reference.resolve` refused ``01``
(RFC 6901: no leading zero), a procedure's result and what the planner is shown of it took
``01`` for ``1``, and every place raised a bare ValueError (a traceback out of compile) on an
index of more than 4300 digits, which `int` refuses. Each property here fails before the fix.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pte import AuditLog, Engine, PlanRejected, ReasonCode, Registry, compile_plan

# private: the one rule, what the properties compare every reader with
from pte._core import array_index

# private: what the planner is shown of a procedure's result (no public name)
from pte._plan import procedure_output_schema
from pte.plan import Procedure, Reference, load_procedures
from tests._pointer_tokens import index_tokens

# The tools the reference tests read lists and tuples with: the same outputs, the same rule.
from tests.plan.test_reference_indices import REGISTRY

#: A procedure whose result holds a literal list: a reference into it is read at compile.
FIRST_TWO: dict[str, Any] = {
    "pte_procedure": "1",
    "name": "first_two_prices",
    "description": "The first two prices.",
    "parameters": {"type": "object", "properties": {}},
    "plan": {
        "pte_plan": "1",
        "steps": [{"id": "prices", "tool": "list_prices", "args": {}}],
        "result": {"two": [{"$ref": "prices/0"}, {"$ref": "prices/1"}]},
    },
}
WITH_PROCEDURE = REGISTRY.with_procedures(load_procedures([Procedure.from_document(FIRST_TWO)], REGISTRY))


def _escaped(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def _plan(producer: str, pointer: str) -> str:
    """A model's plan: the price at `pointer` of `producer`'s output, as text."""
    steps = [
        {"id": "prices", "tool": producer, "args": {}},
        {"id": "label", "tool": "price_label", "args": {"price": {"$ref": f"prices/{pointer}"}}},
    ]
    return json.dumps({"pte_plan": "1", "steps": steps, "result": {"$ref": "label"}})


def _compiles(text: str, registry: Registry = REGISTRY) -> bool:
    try:
        compile_plan(text, registry)
    except PlanRejected as rejected:
        assert rejected.reason is ReasonCode.BAD_REFERENCE, rejected
        return False
    return True


@given(index_tokens)
def test_compile_takes_an_index_into_a_list_exactly_when_it_is_one(token: str) -> None:
    # A list's length is known at run time only: any index compiles, nothing else does.
    assert _compiles(_plan("list_prices", _escaped(token))) is (array_index(token) is not None)


@given(index_tokens)
def test_compile_takes_an_index_into_a_tuple_exactly_when_it_names_a_position(token: str) -> None:
    index = array_index(token)
    assert _compiles(_plan("pair_of_prices", _escaped(token))) is (index is not None and index < 2)


@given(index_tokens, st.integers(min_value=0, max_value=4))
def test_run_time_selects_by_the_same_rule(token: str, length: int) -> None:
    # What compile took as an index selects that element at run time, or nothing (past the
    # end: the executor's unresolved_reference); what it refused selects nothing either.
    index = array_index(token)
    ref = Reference("prices", (token,))
    outputs = {"prices": list(range(10, 10 + length))}
    if index is not None and index < length:
        assert ref.resolve(outputs) == outputs["prices"][index]
    else:
        with pytest.raises(KeyError):
            ref.resolve(outputs)


@given(index_tokens)
def test_a_procedure_result_is_read_by_the_same_rule(token: str) -> None:
    index = array_index(token)
    plan = json.dumps(
        {
            "pte_plan": "1",
            "steps": [
                {"id": "two_prices", "tool": "first_two_prices", "args": {}},
                {
                    "id": "label",
                    "tool": "price_label",
                    "args": {"price": {"$ref": f"two_prices/two/{_escaped(token)}"}},
                },
            ],
            "result": {"$ref": "label"},
        }
    )
    assert _compiles(plan, WITH_PROCEDURE) is (index is not None and index < 2)


@given(index_tokens)
def test_the_planner_is_shown_a_procedure_result_type_by_the_same_rule(token: str) -> None:
    doc = {**FIRST_TWO, "plan": {**FIRST_TWO["plan"], "result": {"$ref": f"prices/{_escaped(token)}"}}}
    shown = procedure_output_schema(Procedure.from_document(doc), REGISTRY, {})
    element = {"type": "integer"}
    assert (shown == element) is (array_index(token) is not None), shown


@pytest.mark.parametrize(
    ("token", "ending"),
    [
        ("1", ("succeeded", None)),
        ("01", ("failed_closed", ReasonCode.BAD_REFERENCE)),
        ("\u0663", ("failed_closed", ReasonCode.BAD_REFERENCE)),
        # Compiled (a list's length is not known before it runs); selects nothing at run time.
        ("9" * 5000, ("failed_closed", ReasonCode.STEP_FAILED)),
    ],
)
def test_a_person_s_plan_compiles_and_runs_by_the_same_rule(
    token: str, ending: tuple[str, ReasonCode | None]
) -> None:
    audit = AuditLog()
    result = Engine(REGISTRY).execute(_plan("list_prices", token), audit)
    assert (result.status, result.reason) == ending
    if ending[0] == "succeeded":
        assert result.result == "5 EUR"
    elif ending[1] is ReasonCode.STEP_FAILED:
        failed = [step for step in result.steps if step.status == "failed"]
        assert [(s.step_id, s.error.kind if s.error else None) for s in failed] == [
            ("label", "unresolved_reference")
        ]
    assert audit.records[-1]["type"] == "run_finished"


def test_the_index_rule_is_not_python_s() -> None:
    assert "\u0663".isdigit() and int("\u0663") == 3 and sys.get_int_max_str_digits() < 5000
