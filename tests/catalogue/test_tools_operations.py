"""The operations models reached for (issue #25): zip/join, concat, has_key/contains filters,
top_key, coalesce, the clock; and empty inputs giving empty outputs for every list operation.

Each operation is called the way the executor calls it (arguments and output validated), typed
through compile (references into its output are checked against the inferred type), and
labelled per field (`pte._catalogue._selection`).
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

import pte
from pte import (
    AuditLog,
    Engine,
    EngineConfig,
    Executor,
    PlanRejected,
    Policy,
    ReasonCode,
    Registry,
    compile_plan,
    load_registry,
    verify,
)
from pte.audit import read_records
from pte.engine import ReplayClient
from pte.runs import replay_file

STOCK = load_registry(["shaping", "containers", "dates"])


def call(name: str, **args: Any) -> Any:
    """Call a tool as the executor does: validate the arguments, invoke, validate the output."""
    spec = STOCK[name]
    spec.validate_args(args)
    out = spec.invoke(args)
    spec.validate_output(out)
    return out


class Contact(BaseModel):
    name: str
    email: str


class Contacts(BaseModel):
    contacts: list[Contact]
    phones: list[str]


class Order(BaseModel):
    order_id: int
    customer: str
    note: str


class Orders(BaseModel):
    orders: list[Order]


@pte.tool
def contacts() -> Contacts:
    """Contacts and, by position, their phone numbers."""
    return Contacts(
        contacts=[Contact(name="Ann", email="ann@x.example"), Contact(name="Bo", email="bo@x.example")],
        phones=["+41 1", "+41 2"],
    )


@pte.tool
def orders() -> Orders:
    """Orders; the note is the customer's free text."""
    return Orders(
        orders=[
            Order(order_id=1, customer="Bo", note="fast please"),
            Order(order_id=2, customer="Cy", note="-"),
            Order(order_id=3, customer="Ann", note="gift"),
        ]
    )


def _registry() -> Registry:
    registry = load_registry(["shaping", "containers", "dates"])
    registry.register(contacts)
    registry.register(orders)
    return registry


def _compile(registry: Registry, *steps: dict[str, Any], checks: list[Any] | None = None) -> Any:
    return compile_plan(json.dumps({"pte_plan": "1", "steps": list(steps)}), registry, checks=checks or [])


# --- zip and join ----------------------------------------------------------------------------------


def test_zip_lists_pairs_by_position_and_refuses_a_length_mismatch() -> None:
    out = call("zip_lists", left=["a", "b"], right=[1, 2])
    assert out == {"records": [{"left": "a", "right": 1}, {"left": "b", "right": 2}], "count": 2}
    assert call("zip_lists", left=[], right=[]) == {"records": [], "count": 0}
    with pytest.raises(ValueError, match="left has 2 items and right 1"):
        call("zip_lists", left=["a", "b"], right=[1])


def test_join_records_is_an_inner_join_in_left_then_right_order() -> None:
    left = [{"id": 1, "n": "a"}, {"id": "2", "n": "b"}, {"id": None, "n": "c"}, {"id": 4, "n": "d"}]
    right = [{"ref": "1.0", "v": "x"}, {"ref": 2, "v": "y"}, {"ref": 1, "v": "z"}]
    out = call("join_records", left=left, right=right, left_field="id", right_field="ref")
    assert [(p["left"]["n"], p["right"]["v"]) for p in out["records"]] == [("a", "x"), ("a", "z"), ("b", "y")]
    text = call(
        "join_records",
        left=[{"k": "Ann"}],
        right=[{"k": "ann"}],
        left_field="k",
        right_field="k",
        ignore_case=True,
    )
    assert text["count"] == 1
    assert call("join_records", left=[], right=right, left_field="id", right_field="ref")["count"] == 0
    with pytest.raises(ValueError, match="unknown field 'idd'"):
        call("join_records", left=left, right=right, left_field="idd", right_field="ref")


def test_zip_and_join_outputs_are_typed_through_compile() -> None:
    registry = _registry()
    src = {"id": "address_book", "tool": "contacts", "args": {}}
    paired = {
        "id": "contacts_with_phones",
        "tool": "zip_lists",
        "args": {"left": {"$ref": "address_book/contacts"}, "right": {"$ref": "address_book/phones"}},
    }
    use = {"id": "first_pair", "tool": "first", "args": {"records": {"$ref": "contacts_with_phones/records"}}}
    mail = {
        "id": "mail",
        "tool": "has_key",
        "args": {"object": {"$ref": "first_pair/record/left"}, "key": "email"},
    }
    plan = _compile(registry, src, paired, use, mail)
    assert Executor(registry).run(plan).outputs["first_pair"]["record"] == {
        "left": {"name": "Ann", "email": "ann@x.example"},
        "right": "+41 1",
    }
    wrong = {**use, "args": {"records": {"$ref": "contacts_with_phones/records/0/left/phone"}}}
    with pytest.raises(PlanRejected) as caught:
        _compile(registry, src, paired, wrong)
    assert caught.value.reason is ReasonCode.BAD_REFERENCE
    joined: dict[str, Any] = {
        "id": "orders_with_contacts",
        "tool": "join_records",
        "args": {
            "left": {"$ref": "all_orders/orders"},
            "right": {"$ref": "address_book/contacts"},
            "left_field": "customer",
            "right_field": "name",
        },
    }
    emails = {
        "id": "emails",
        "tool": "pluck",
        "args": {"records": {"$ref": "orders_with_contacts/records"}, "field": "right"},
    }
    steps = [src, {"id": "all_orders", "tool": "orders", "args": {}}, joined, emails]
    plan = _compile(registry, *steps)
    result = Executor(registry).run(plan)
    assert [p["email"] for p in result.outputs["emails"]["values"]] == ["bo@x.example", "ann@x.example"]
    typo = {**joined, "args": {**joined["args"], "right_field": "nmae"}}
    with pytest.raises(PlanRejected, match="no field 'nmae'"):
        _compile(registry, src, steps[1], typo)


def test_join_labels_each_side_by_its_fields_and_the_join_fields() -> None:
    registry = _registry()
    policy = Policy.from_registry(registry).with_document(
        {
            "pte_policy": "1",
            "tools": {"orders": {"output": "trusted", "fields": {"/orders/*/note": "untrusted"}}},
        }
    )
    joined: dict[str, Any] = {
        "id": "joined",
        "tool": "join_records",
        "args": {
            "left": {"$ref": "all_orders/orders"},
            "right": {"$ref": "address_book/contacts"},
            "left_field": "customer",
            "right_field": "name",
        },
    }
    steps = [
        {"id": "address_book", "tool": "contacts", "args": {}},
        {"id": "all_orders", "tool": "orders", "args": {}},
        joined,
    ]
    check = policy.check()
    _compile(registry, *steps, checks=[check])
    tree = check.trees["joined"]
    assert tree.select(("records", "0", "right", "email")) == {"trusted", "request"}
    assert tree.select(("records", "0", "left", "order_id")) == {"trusted", "request"}
    assert "untrusted" in tree.select(("records", "0", "left", "note"))
    joined["args"]["left_field"] = "note"  # joined on the customer's free text: everything it picks
    check = policy.check()
    _compile(registry, *steps, checks=[check])
    assert "untrusted" in check.trees["joined"].select(("records", "0", "right", "email"))


# --- concat, filters, top_key, coalesce ------------------------------------------------------------


def test_concat_flattens_one_level_and_is_typed_from_its_parts() -> None:
    assert call("concat", lists=[[1], [], [2, 3]]) == {"values": [1, 2, 3], "count": 3}
    assert call("concat", lists=[]) == {"values": [], "count": 0}
    registry = _registry()
    src = {"id": "address_book", "tool": "contacts", "args": {}}
    both = {
        "id": "everyone",
        "tool": "concat",
        "args": {"lists": [{"$ref": "address_book/contacts"}, {"$ref": "address_book/contacts"}]},
    }
    names: dict[str, Any] = {
        "id": "names",
        "tool": "pluck",
        "args": {"records": {"$ref": "everyone/values"}, "field": "name"},
    }
    result = Executor(registry).run(_compile(registry, src, both, names))
    assert result.outputs["names"]["values"] == ["Ann", "Bo", "Ann", "Bo"]
    with pytest.raises(PlanRejected, match="no field 'phone'"):
        _compile(registry, src, both, {**names, "args": {**names["args"], "field": "phone"}})


def test_filter_records_has_key_and_list_contains() -> None:
    records = [
        {"id": 1, "meta": {"vip": True}, "tags": ["a", "b"]},
        {"id": 2, "meta": {}, "tags": []},
        {"id": 3, "meta": None, "tags": ["b"]},
    ]
    has = call("filter_records", records=records, field="meta", op="has_key", value="vip")
    assert [r["id"] for r in has["records"]] == [1]
    tagged = call("filter_records", records=records, field="tags", op="contains", value="b")
    assert [r["id"] for r in tagged["records"]] == [1, 3]
    with pytest.raises(ValueError, match="op 'has_key' needs an object field"):
        call("filter_records", records=records, field="id", op="has_key", value="vip")


def test_top_key_is_the_argmax_of_a_count_map() -> None:
    assert call("top_key", object={"ann": 3, "bo": "5", "cy": 5}) == {"key": "bo", "value": "5"}
    assert call("top_key", object={"ann": 3, "bo": 5}, which="min") == {"key": "ann", "value": 3}
    with pytest.raises(ValueError, match="the object is empty"):
        call("top_key", object={})


def test_coalesce_takes_the_first_non_empty_value_or_the_default() -> None:
    assert call("coalesce", values=[None, "", [], {}, "x", "y"]) == {"value": "x"}
    assert call("coalesce", values=[0, "x"]) == {"value": 0}  # 0 and false are values
    assert call("coalesce", values=[None, ""], default="n/a") == {"value": "n/a"}
    with pytest.raises(ValueError, match="all 2 values are empty"):
        call("coalesce", values=[None, ""])


# --- empty inputs ----------------------------------------------------------------------------------

FIELD_NAMES = st.sampled_from(["id", "date", "amount", "anything"])


@st.composite
def empty_calls(draw: st.DrawFn) -> tuple[str, dict[str, Any], Any]:
    """(operation, arguments with an empty list, the expected empty output)."""
    name = draw(FIELD_NAMES)
    rows: dict[str, Any] = {"records": [], "count": 0}
    values: dict[str, Any] = {"values": [], "count": 0}
    cases: list[tuple[str, dict[str, Any], Any]] = [
        (
            "filter_records",
            {"field": name, "op": draw(st.sampled_from(["eq", "contains", "has_key", "gt"])), "value": "x"},
            rows,
        ),
        ("sort_records", {"by": name, "descending": draw(st.booleans())}, rows),
        ("take", {"n": draw(st.integers(0, 5))}, rows),
        ("pick", {"fields": [name]}, rows),
        ("pluck", {"field": name}, values),
        ("pluck_numbers", {"field": name}, values),
        ("pluck_text", {"field": name}, values),
        ("sum_field", {"field": name}, {"total": "0", "count": 0}),
        ("group_sum", {"key": name, "field": name}, {"groups": [], "count": 0}),
        ("count", {}, {"count": 0}),
    ]
    lists: list[tuple[str, dict[str, Any], Any]] = [
        ("filter_values", {"op": "eq", "value": "x"}, values),
        ("sort_values", {}, values),
        ("unique", {}, values),
        ("difference", {"remove": []}, values),
        ("intersection", {"other": ["x"]}, values),
    ]
    tool, args, expected = draw(st.sampled_from(cases + lists + [("extra", {}, None)]))
    if tool == "extra":
        tool, args, expected = draw(
            st.sampled_from(
                [
                    ("count_by", {"items": [], "field": name}, {"groups": [], "count": 0}),
                    ("rank", {"items": []}, rows),
                    ("concat", {"lists": draw(st.lists(st.just([]), max_size=3))}, values),
                    ("zip_lists", {"left": [], "right": []}, rows),
                    (
                        "join_records",
                        {"left": [], "right": [], "left_field": name, "right_field": name},
                        rows,
                    ),
                    ("entries", {"object": {}}, rows),
                    ("keys", {"object": {}}, values),
                ]
            )
        )
        return tool, args, expected
    key = "values" if (tool, args, expected) in lists else "records"
    return tool, {key: [], **args}, expected


@settings(max_examples=120, deadline=None)
@given(empty_calls())
def test_every_list_operation_gives_an_empty_output_for_an_empty_input(
    case: tuple[str, dict[str, Any], Any],
) -> None:
    tool, args, expected = case
    assert call(tool, **args) == expected


def test_the_operations_that_need_an_element_say_so() -> None:
    with pytest.raises(ValueError, match="the list is empty: there is no first item"):
        call("first", records=[])
    with pytest.raises(ValueError, match="the list is empty: there is no max"):
        call("extreme_by", records=[], field="date", which="max")
    with pytest.raises(ValueError, match="no record has a value for 'date'"):
        call("extreme_by", records=[{"date": None}], field="date", which="min")


def test_an_empty_search_result_flows_through_filter_and_pick_at_run_time() -> None:
    """The docs said 'a field no record has is an error'; models avoided filters on lists that
    might be empty. An empty list gives an empty result all the way down a plan."""
    registry = _registry()
    src = {"id": "all_orders", "tool": "orders", "args": {}}
    none = {
        "id": "orders_from_nobody",
        "tool": "filter_records",
        "args": {"records": {"$ref": "all_orders/orders"}, "field": "customer", "op": "eq", "value": "Zed"},
    }
    picked = {
        "id": "picked",
        "tool": "pick",
        "args": {"records": {"$ref": "orders_from_nobody/records"}, "fields": ["order_id"]},
    }
    again = {
        "id": "gifts",
        "tool": "filter_records",
        "args": {"records": {"$ref": "picked/records"}, "field": "order_id", "op": "gt", "value": 1},
    }
    result = Executor(registry).run(_compile(registry, src, none, picked, again))
    assert result.ok, result.failure
    assert result.outputs["gifts"] == {"records": [], "count": 0}


# --- the clock -------------------------------------------------------------------------------------


def test_the_clock_reads_the_configured_time_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = STOCK["clock"]
    assert spec.effect == "read" and spec.provenance == "trusted"
    monkeypatch.setenv("PTE_TIMEZONE", "Pacific/Kiritimati")  # UTC+14: its date is rarely UTC's
    out = call("clock")
    expected = dt.datetime.now(dt.timezone(dt.timedelta(hours=14)))
    assert out["timezone"] == "Pacific/Kiritimati" and out["now"].endswith("+14:00")
    assert out["today"] in {
        expected.date().isoformat(),
        (expected - dt.timedelta(minutes=1)).date().isoformat(),
    }
    assert out["weekday"] == dt.date.fromisoformat(out["today"]).strftime("%A")
    assert call("clock", timezone="UTC")["now"].endswith("+00:00")
    with pytest.raises(ValueError, match="unknown time zone 'Mars/Base'"):
        call("clock", timezone="Mars/Base")


def test_the_clock_is_recorded_like_any_read_and_replays_exactly(tmp_path: Path) -> None:
    registry = load_registry(["dates"])
    doc = {
        "pte_plan": "1",
        "steps": [
            {"id": "current_time", "tool": "clock", "args": {}},
            {
                "id": "next_week",
                "tool": "add_duration",
                "args": {"value": {"$ref": "current_time/today"}, "duration": "P7D"},
            },
        ],
        "result": {"$ref": "next_week/value"},
    }
    log = tmp_path / "clock.jsonl"
    engine = Engine(registry, ReplayClient([json.dumps(doc)]), config=EngineConfig(llm_answer=False))
    with AuditLog(log) as audit:
        result = engine.run("What is the date a week from today?", audit)
    assert result.status == "succeeded", result.message
    recorded = next(
        r for r in read_records(log) if r["type"] == "step_finished" and r["step_id"] == "current_time"
    )
    today = dt.date.fromisoformat(recorded["output"]["today"])
    assert result.answer is not None and (today + dt.timedelta(days=7)).isoformat() in result.answer
    assert verify(log).ok
    # Replay serves the recorded time, whenever it runs: the same decisions, no divergence.
    assert replay_file(log).ok
    # The recorded time is evidence like any output: an edited date breaks the chain.
    text = log.read_text(encoding="utf-8")
    forged = (today - dt.timedelta(days=400)).isoformat()
    log.write_text(text.replace(f'"today":"{today.isoformat()}"', f'"today":"{forged}"', 1), encoding="utf-8")
    assert log.read_text(encoding="utf-8") != text
    assert not verify(log).intact
