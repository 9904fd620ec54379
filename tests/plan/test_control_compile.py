"""Compile-time checks of the control constructs: for_each, when, require, continue (pte._plan._control)."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pydantic
import pytest

from pte import PlanRejected, ReasonCode, compile_plan
from pte.plan import PlanDocument, plan_schema
from pte.testing import example_registry

REGISTRY = example_registry()
INV = {"id": "inv", "tool": "list_overdue_invoices", "args": {"days": 30}}
AMOUNT = {"$ref": "inv/invoices/0/amount"}
BIG = {"gt": [AMOUNT, "100.50"]}


def plan(*steps: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"pte_plan": "1", "steps": [INV, *steps], **extra}


def compiles(doc: dict[str, Any]) -> Any:
    return compile_plan(json.dumps(doc), REGISTRY)


def rejected(doc: dict[str, Any], reason: ReasonCode, path: str | None = None) -> PlanRejected:
    with pytest.raises(PlanRejected) as info:
        compiles(doc)
    assert info.value.reason is reason, info.value
    if path is not None:
        assert info.value.path == path, info.value
    return info.value


def calc(sid: str, **extra: Any) -> dict[str, Any]:
    return {"id": sid, "tool": "calculator", "args": {"expression": "1"}, **extra}


# --- for_each -----------------------------------------------------------------------------------


def lookup_each(**extra: Any) -> dict[str, Any]:
    return {
        "id": "cust",
        "tool": "lookup_customer",
        "for_each": {"$ref": "inv/invoices"},
        "max_items": 10,
        "args": {"customer_id": {"$ref": "inv/invoices/*/customer_id"}},
        **extra,
    }


def test_for_each_types_the_element_and_the_list_output() -> None:
    compiled = compiles(plan(lookup_each(), result={"$ref": "cust/0/name"}))
    step = compiled.step("cust")
    assert step.for_each is not None and str(step.for_each) == "inv/invoices" and step.max_items == 10
    assert step.depends_on == ("inv",)
    # The output is a list of lookup_customer outputs: a pointer past it must exist.
    rejected(plan(lookup_each(), result={"$ref": "cust/0/no_such"}), ReasonCode.BAD_REFERENCE, "$.result")
    # Another for_each can map over it, element by element.
    compiles(
        plan(
            lookup_each(),
            {
                "id": "risk",
                "tool": "score_risk",
                "for_each": {"$ref": "cust"},
                "max_items": 10,
                "args": {"customer": {"$ref": "cust/*"}, "overdue_days": 30},
            },
        )
    )


def test_element_reference_is_type_checked_against_the_parameter() -> None:
    bad = lookup_each(args={"customer_id": {"$ref": "inv/invoices/*/days_overdue"}})
    err = rejected(plan(bad), ReasonCode.INVALID_ARGS, "$.steps[1].args.customer_id")
    assert "integer" in err.message


@pytest.mark.parametrize(
    "ref",
    ["inv/invoices/*/customer_id", "inv/ids/*"],
)
def test_star_outside_its_for_each_is_refused(ref: str) -> None:
    # Not a for_each step at all.
    rejected(
        plan({"id": "c", "tool": "lookup_customer", "args": {"customer_id": {"$ref": ref}}}),
        ReasonCode.BAD_REFERENCE,
        "$.steps[1].args.customer_id",
    )


def test_star_over_another_list_is_refused() -> None:
    bad = lookup_each(**{"for_each": {"$ref": "inv/ids"}})
    err = rejected(plan(bad), ReasonCode.BAD_REFERENCE, "$.steps[1].args.customer_id")
    assert "inv/ids" in err.message


@pytest.mark.parametrize("where", ["result", "continue", "when"])
def test_star_in_result_continue_or_condition_is_refused(where: str) -> None:
    star = {"$ref": "inv/invoices/*/amount"}
    if where == "result":
        doc = plan(result=star)
    elif where == "continue":
        doc = plan(**{"continue": {"x": star}})
    else:
        doc = plan(lookup_each(when={"gt": [star, 1]}))
    rejected(doc, ReasonCode.BAD_REFERENCE)


def test_for_each_over_a_non_list_is_refused() -> None:
    bad = lookup_each(**{"for_each": {"$ref": "inv/invoices/0"}, "args": {"customer_id": "C100"}})
    err = rejected(plan(bad), ReasonCode.INVALID_ARGS, "$.steps[1].for_each")
    assert "needs a list" in err.message


def test_for_each_needs_max_items_and_a_bound() -> None:
    step = lookup_each()
    del step["max_items"]
    rejected(plan(step), ReasonCode.SCHEMA_VIOLATION)
    rejected(plan(lookup_each(max_items=1001)), ReasonCode.SCHEMA_VIOLATION)
    rejected(plan(lookup_each(max_items=0)), ReasonCode.SCHEMA_VIOLATION)
    rejected(plan(calc("x", max_items=3)), ReasonCode.SCHEMA_VIOLATION)


def test_for_each_list_naming_no_step_is_a_bad_reference() -> None:
    rejected(plan(lookup_each(**{"for_each": {"$ref": "nope/x"}})), ReasonCode.BAD_REFERENCE)


def test_for_each_over_its_own_output_is_a_cycle() -> None:
    rejected(plan(lookup_each(**{"for_each": {"$ref": "cust"}})), ReasonCode.PLAN_CYCLE)


# --- when -------------------------------------------------------------------------------------


def test_when_orders_decimal_amounts_as_numbers() -> None:
    compiled = compiles(plan(calc("big", when=BIG)))
    step = compiled.step("big")
    assert step.condition == BIG and step.condition_modes == ("number",)
    assert step.depends_on == ("inv",)


@pytest.mark.parametrize(
    ("cond", "why"),
    [
        ({"gt": [{"$ref": "inv/invoices/0/customer_id"}, "C100"]}, "orders numbers or instants"),
        ({"eq": [AMOUNT, True]}, "can never be equal"),
        ({"eq": [{"$ref": "inv/invoices/0/days_overdue"}, "ten"]}, "can never be equal"),
        ({"lt": [{"$ref": "inv/invoices/0/due"}, "next week"]}, "orders numbers or instants"),
        ({"empty": {"$ref": "inv/invoices/0/days_overdue"}}, "needs a list, a string or an object"),
        ({"and": [BIG, {"gt": [{"$ref": "inv/invoices/0/currency"}, 1]}]}, "orders"),
    ],
)
def test_ill_typed_conditions_are_refused(cond: Any, why: str) -> None:
    err = rejected(plan(calc("x", when=cond)), ReasonCode.INVALID_ARGS)
    assert why in err.message
    assert err.path.startswith("$.steps[1].when")


def test_when_compares_instants_and_checks_literals() -> None:
    compiled = compiles(plan(calc("x", when={"lt": [{"$ref": "inv/invoices/0/due"}, "2026-10-01"]})))
    assert compiled.step("x").condition_modes == ("instant",)
    compiled = compiles(plan(calc("x", when={"eq": [{"$ref": "inv/invoices/0/currency"}, "EUR"]})))
    assert compiled.step("x").condition_modes == ("json",)


def test_reading_a_possibly_skipped_step_needs_a_default_or_the_same_condition() -> None:
    reader = {
        "id": "y",
        "tool": "calculator",
        "args": {"expression": "a", "variables": {"a": {"$ref": "x/value"}}},
    }
    err = rejected(plan(calc("x", when=BIG), reader), ReasonCode.BAD_REFERENCE, "$.steps[2].args.variables.a")
    assert "may be skipped" in err.message
    compiles(plan(calc("x", when=BIG), {**reader, "when": BIG}))
    compiles(plan(calc("x", when=BIG), {**reader, "when": {"and": [{"nonempty": {"$ref": "inv/ids"}}, BIG]}}))
    rejected(plan(calc("x", when=BIG), {**reader, "when": {"or": [BIG, BIG]}}), ReasonCode.BAD_REFERENCE)
    rejected(plan(calc("x", when=BIG), {**reader, "when": {"not": BIG}}), ReasonCode.BAD_REFERENCE)
    compiles(plan(calc("x", when=BIG, default={"value": "0", "expression": "skipped"}), reader))
    # The plan's result and continue cannot sit under a condition.
    rejected(plan(calc("x", when=BIG), result={"$ref": "x/value"}), ReasonCode.BAD_REFERENCE, "$.result")
    rejected(plan(calc("x", when=BIG), **{"continue": {"v": {"$ref": "x"}}}), ReasonCode.BAD_REFERENCE)
    # A condition or a for_each list reads too.
    rejected(
        plan(calc("x", when=BIG), calc("z", when={"nonempty": {"$ref": "x/expression"}})),
        ReasonCode.BAD_REFERENCE,
    )


def test_default_is_any_literal_and_readers_see_the_union() -> None:
    reader = {
        "id": "y",
        "tool": "calculator",
        "args": {"expression": "a", "variables": {"a": {"$ref": "x/value"}}},
    }
    # A default the tool's output does not admit is allowed (issue 25: models write null, or a
    # short message): a reader of a field the default has sees the union of both types...
    compiles(plan(calc("x", when=BIG, default={"value": 1}), reader))
    # ...a reader of a field the default lacks would fail whenever the step is skipped.
    err = rejected(plan(calc("x", when=BIG, default=None), reader), ReasonCode.BAD_REFERENCE)
    assert "'x/value' may be null when 'x' is skipped" in err.message
    err = rejected(plan(calc("x", when=BIG, default="no figure"), reader), ReasonCode.BAD_REFERENCE)
    assert "'x/value' may be missing when 'x' is skipped" in err.message
    # A reader of the whole value is fine where the union fits its parameter.
    compiles(plan(calc("x", when=BIG, default=None), result={"figure": {"$ref": "x"}}))
    rejected(plan(calc("x", when=BIG, default={"$ref": "inv"})), ReasonCode.BAD_REFERENCE)
    rejected(plan(calc("x", default={"value": "0", "expression": ""})), ReasonCode.SCHEMA_VIOLATION)
    # A for_each's default is a list of outputs.
    compiles(plan(lookup_each(when=BIG, default=[]), result={"$ref": "cust"}))


# --- require and continue ----------------------------------------------------------------------


def test_require_guards_every_later_step_and_has_no_output() -> None:
    req = {"id": "req", "require": {"nonempty": {"$ref": "inv/ids"}}, "message": "nothing is overdue"}
    compiled = compiles(plan(req, calc("x"), calc("y")))
    assert compiled.step("req").is_require and compiled.step("req").message == "nothing is overdue"
    assert "req" in compiled.step("x").depends_on and "req" in compiled.step("y").depends_on
    assert compiled.order.index("req") < compiled.order.index("x")
    rejected(
        plan(
            req,
            {
                "id": "z",
                "tool": "calculator",
                "args": {"expression": "a", "variables": {"a": {"$ref": "req"}}},
            },
        ),
        ReasonCode.BAD_REFERENCE,
    )
    rejected(plan({**req, "tool": "calculator"}), ReasonCode.SCHEMA_VIOLATION)
    rejected(plan({**req, "message": ""}), ReasonCode.SCHEMA_VIOLATION)


def test_continue_and_result_are_exclusive() -> None:
    compiled = compiles(plan(**{"continue": {"ids": {"$ref": "inv/ids"}}}))
    assert compiled.continues and compiled.continue_values == {"ids": {"$ref": "inv/ids"}}
    rejected(plan(result=1, **{"continue": {"a": 1}}), ReasonCode.SCHEMA_VIOLATION)
    rejected(plan(**{"continue": {}}), ReasonCode.SCHEMA_VIOLATION)
    rejected(plan(**{"continue": {"Bad": 1}}), ReasonCode.SCHEMA_VIOLATION)
    rejected(plan(**{"continue": {"a": {"$ref": "nope"}}}), ReasonCode.BAD_REFERENCE)


# --- the document model agrees with the schema -------------------------------------------------

VALIDATOR = jsonschema.Draft202012Validator(plan_schema())

CASES: list[dict[str, Any]] = [
    plan(lookup_each()),
    plan(lookup_each(max_items=2.0)),
    plan(lookup_each(max_items=True)),
    plan(lookup_each(max_items=2.5)),
    plan(calc("x", when=BIG, default=None)),
    plan(calc("x", when=None)),
    plan(calc("x", default=1)),
    plan(calc("x", when={"eq": [1]})),
    plan(calc("x", when={"eq": [1, {"a": 1}]})),
    plan(calc("x", when={"and": [BIG]})),
    plan(calc("x", when={"not": BIG, "or": [BIG, BIG]})),
    plan(calc("x", when={"empty": "text"})),
    plan(calc("x", when={"nonempty": {"$ref": "inv"}})),
    plan(calc("x", when={"xor": [BIG, BIG]})),
    plan({"id": "r", "require": BIG, "message": "m"}),
    plan({"id": "r", "require": BIG}),
    plan({"id": "r", "require": None, "message": "m"}),
    plan({"id": "r", "require": BIG, "message": "m", "args": {}}),
    plan(**{"continue": {"a": 1}}),
    plan(**{"continue": None}),
    plan(result=None, **{"continue": {"a": 1}}),
    plan(**{"continue": {f"k{i}": i for i in range(17)}}),
]


@pytest.mark.parametrize("doc", CASES)
def test_pydantic_model_and_schema_agree(doc: dict[str, Any]) -> None:
    try:
        PlanDocument.model_validate(doc)
        model = True
    except pydantic.ValidationError:
        model = False
    assert model == VALIDATOR.is_valid(doc), json.dumps(doc)
