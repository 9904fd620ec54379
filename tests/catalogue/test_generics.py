"""Generic tools: TypeVar declarations, per-step output inference, and the checks built on it."""

from __future__ import annotations

import json
from typing import Annotated, Any, Generic, TypeVar

import pytest
from pydantic import BaseModel

from pte import Executor, PlanRejected, Registry, compile_plan, load_pack, tool

# private: a tool's spec from its function
from pte._catalogue import spec_of
from pte.catalogue import FieldName, FieldOf, ToolSpec
from pte.errors import ToolRegistrationError

T = TypeVar("T")
R = TypeVar("R", bound=dict[str, Any])


class Contact(BaseModel):
    name: str
    email: str
    age: int
    tags: list[str]


class Contacts(BaseModel):
    contacts: list[Contact]


CONTACTS = [
    {"name": "Bea", "email": "bea@example.org", "age": 41, "tags": ["team"]},
    {"name": "Al", "email": "al@example.org", "age": 29, "tags": []},
    {"name": "Cy", "email": "cy@example.org", "age": 35, "tags": ["team", "lead"]},
]


@tool
def list_contacts() -> Contacts:
    """All contacts."""
    return Contacts.model_validate({"contacts": CONTACTS})


@tool(effect="write")
def send_email(to: str, subject: str) -> dict[str, str]:
    """Send one e-mail."""
    return {"sent_to": to}


@tool(effect="write")
def notify(addresses: list[str]) -> dict[str, int]:
    """Notify several addresses."""
    return {"notified": len(addresses)}


class Box(BaseModel, Generic[T]):
    item: T


@tool(provenance="derived")
def lying_first(records: list[T]) -> Box[T]:
    """Claims to return the first record; returns something else (for the executor test)."""
    return Box(item={"name": 7})  # type: ignore[arg-type]


def registry() -> Registry:
    shaping = load_pack("shaping")
    return Registry([list_contacts, send_email, notify, lying_first, *shaping])


def compile_doc(steps: list[dict[str, Any]], result: Any = None) -> Any:
    doc: dict[str, Any] = {"pte_plan": "1", "steps": steps}
    if result is not None:
        doc["result"] = result
    return compile_plan(json.dumps(doc), registry())


def ref(pointer: str) -> dict[str, str]:
    return {"$ref": pointer}


CHAIN = [
    {"id": "c", "tool": "list_contacts", "args": {}},
    {"id": "s", "tool": "sort_records", "args": {"records": ref("c/contacts"), "by": "age"}},
    {"id": "f", "tool": "first", "args": {"records": ref("s/records")}},
]


def test_type_var_becomes_a_marker_and_the_tool_is_generic() -> None:
    spec = spec_of(load_pack("shaping")["first"])
    assert spec.generic
    assert spec.input_schema["properties"]["records"]["items"] == {"x-pte-var": "T"}
    assert spec.output_schema["properties"]["record"]["x-pte-var"] == "T"
    assert not spec_of(list_contacts).generic
    # The markers live in the schemas: a tool rebuilt from an audit log is just as generic.
    assert ToolSpec.from_record(spec.describe()).generic


def test_a_return_type_variable_no_parameter_binds_is_refused() -> None:
    with pytest.raises(ToolRegistrationError, match=r"type variable\(s\) \['T'\]"):

        @tool
        def make(n: int) -> list[T]:
            return []


def test_sort_then_first_keeps_the_record_type_for_later_references() -> None:
    plan = compile_doc(
        [*CHAIN, {"id": "m", "tool": "send_email", "args": {"to": ref("f/record/email"), "subject": "hi"}}]
    )
    record = plan.output_schema("f")
    assert record is not None
    assert record["properties"]["record"]["properties"]["email"] == {"title": "Email", "type": "string"}
    result = Executor(registry()).run(plan)
    assert result.ok and result.outputs["m"] == {"sent_to": "al@example.org"}


def test_filter_keeps_types_so_index_references_are_checked() -> None:
    steps = [
        CHAIN[0],
        {
            "id": "k",
            "tool": "filter_records",
            "args": {"records": ref("c/contacts"), "field": "tags", "op": "contains", "value": "lead"},
        },
        {"id": "m", "tool": "send_email", "args": {"to": ref("k/records/0/email"), "subject": "hi"}},
    ]
    result = Executor(registry()).run(compile_doc(steps))
    assert result.ok and result.outputs["m"] == {"sent_to": "cy@example.org"}


def test_a_pointer_the_inferred_type_cannot_have_is_a_bad_reference() -> None:
    steps = [*CHAIN, {"id": "m", "tool": "send_email", "args": {"to": ref("f/record/phone"), "subject": "x"}}]
    with pytest.raises(PlanRejected) as info:
        compile_doc(steps)
    assert info.value.reason == "bad_reference" and "'/record/phone'" in info.value.message
    with pytest.raises(PlanRejected) as info:
        compile_doc(CHAIN, result=ref("f/record/phone"))
    assert info.value.reason == "bad_reference"


def test_a_wrongly_typed_field_is_an_invalid_arg() -> None:
    steps = [*CHAIN, {"id": "m", "tool": "send_email", "args": {"to": ref("f/record/age"), "subject": "x"}}]
    with pytest.raises(PlanRejected) as info:
        compile_doc(steps)
    assert info.value.reason == "invalid_args"
    assert "gives integer (first output) but send_email expects string" in info.value.message


def test_a_field_name_the_records_cannot_have_is_a_compile_error() -> None:
    steps = [
        CHAIN[0],
        {"id": "s", "tool": "sort_records", "args": {"records": ref("c/contacts"), "by": "agee"}},
    ]
    with pytest.raises(PlanRejected) as info:
        compile_doc(steps)
    assert info.value.reason == "invalid_args"
    assert "no field 'agee'" in info.value.message and "name, email, age, tags" in info.value.message


def test_pluck_gives_the_field_type_and_pick_keeps_only_the_fields() -> None:
    steps = [
        CHAIN[0],
        {"id": "p", "tool": "pluck", "args": {"records": ref("c/contacts"), "field": "email"}},
        {"id": "n", "tool": "notify", "args": {"addresses": ref("p/values")}},
    ]
    assert Executor(registry()).run(compile_doc(steps)).outputs["n"] == {"notified": 3}
    bad = [
        *steps[:1],
        {"id": "p", "tool": "pluck", "args": {"records": ref("c/contacts"), "field": "age"}},
        steps[2],
    ]
    with pytest.raises(PlanRejected, match="gives array"):
        compile_doc(bad)
    picked = [
        CHAIN[0],
        {"id": "p", "tool": "pick", "args": {"records": ref("c/contacts"), "fields": ["name"]}},
        {"id": "m", "tool": "send_email", "args": {"to": ref("p/records/0/email"), "subject": "x"}},
    ]
    with pytest.raises(PlanRejected) as info:
        compile_doc(picked)
    assert info.value.reason == "bad_reference"


def test_literal_records_bind_by_their_shape() -> None:
    steps = [
        {"id": "f", "tool": "first", "args": {"records": [{"to": "a@example.org"}, {"to": "b@example.org"}]}},
        {"id": "m", "tool": "send_email", "args": {"to": ref("f/record/to"), "subject": "x"}},
    ]
    assert Executor(registry()).run(compile_doc(steps)).outputs["m"] == {"sent_to": "a@example.org"}


def test_a_bound_type_variable_refuses_a_list_of_strings_with_a_reason() -> None:
    steps = [
        CHAIN[0],
        {"id": "p", "tool": "pluck", "args": {"records": ref("c/contacts"), "field": "email"}},
        {"id": "s", "tool": "sort_records", "args": {"records": ref("p/values"), "by": "x"}},
    ]
    with pytest.raises(PlanRejected) as info:
        compile_doc(steps)
    assert info.value.reason == "invalid_args"
    assert "records: gives string but R must be object" in info.value.message


def test_the_executor_holds_a_generic_output_to_the_inferred_type() -> None:
    steps = [CHAIN[0], {"id": "f", "tool": "lying_first", "args": {"records": ref("c/contacts")}}]
    result = Executor(registry()).run(compile_doc(steps))
    assert result.failure is not None and result.failure.error is not None
    assert result.failure.error.kind == "invalid_output"
    assert "the type compile inferred" in result.failure.error.message


class Tagged(BaseModel, Generic[T]):
    value: T
    label: str


@tool(provenance="derived")
def tag(value: T, label: str) -> Tagged[T]:
    """Wrap a value with a label."""
    return Tagged(value=value, label=label)


@tool(provenance="derived")
def lookup(table: dict[str, T], key: str) -> Box[T]:
    """table[key]."""
    return Box(item=table[key])


@tool(provenance="derived")
def column(rows: list[R], name: Annotated[str, FieldName(R)]) -> list[Annotated[Any, FieldOf(R, "name")]]:
    """One column."""
    return [row[name] for row in rows]


def test_author_written_generics_bind_from_values_objects_and_fields() -> None:
    reg = Registry([list_contacts, send_email, tag, lookup, column])
    doc = {
        "pte_plan": "1",
        "steps": [
            {"id": "c", "tool": "list_contacts", "args": {}},
            {"id": "t", "tool": "tag", "args": {"value": ref("c/contacts/0"), "label": "x"}},
            {"id": "l", "tool": "lookup", "args": {"table": {"a": ref("c/contacts/1")}, "key": "a"}},
            {"id": "col", "tool": "column", "args": {"rows": ref("c/contacts"), "name": "email"}},
            {"id": "m1", "tool": "send_email", "args": {"to": ref("t/value/email"), "subject": "x"}},
            {"id": "m2", "tool": "send_email", "args": {"to": ref("l/item/email"), "subject": "x"}},
            {"id": "m3", "tool": "send_email", "args": {"to": ref("col/2"), "subject": "x"}},
        ],
    }
    result = Executor(reg).run(compile_plan(json.dumps(doc), reg))
    assert result.ok
    assert [result.outputs[m]["sent_to"] for m in ("m1", "m2", "m3")] == [
        "bea@example.org",
        "al@example.org",
        "cy@example.org",
    ]
