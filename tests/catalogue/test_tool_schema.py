"""`pte.catalogue.tool_from_schema`: tools from JSON Schemas and a callable (sync or async)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pte import AuditLog, Engine, EngineConfig, PlanRejected, ReasonCode, Registry, compile_plan
from pte.audit import read_records
from pte.catalogue import tool_from_schema
from pte.errors import ToolRegistrationError
from pte.runs import replay_file
from tests._vandal import vandalise

INVOICE_OUT = {
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "amount_cents": {"type": "integer"},
        "customer": {"type": "object", "properties": {"email": {"type": "string"}}, "required": ["email"]},
    },
    "required": ["id", "amount_cents", "customer"],
}


def _get_invoice(args: dict[str, Any]) -> dict[str, Any]:
    return {"id": args["id"], "amount_cents": 1250, "customer": {"email": "ap@example.test"}}


async def _double(args: dict[str, Any]) -> dict[str, Any]:
    return {"value": args["x"] * 2}


def _registry() -> Registry:
    return Registry(
        [
            tool_from_schema(
                "get-invoice",
                description="One invoice by id.",
                input_schema={"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]},
                output_schema=INVOICE_OUT,
                func=_get_invoice,
            ),
            tool_from_schema(
                "double",
                description="x * 2 (async).",
                input_schema={
                    "type": "object",
                    "properties": {"x": {"type": "integer"}},
                    "required": ["x"],
                    "additionalProperties": False,
                },
                output_schema={
                    "type": "object",
                    "properties": {"value": {"type": "integer"}},
                    "required": ["value"],
                },
                func=_double,
            ),
        ]
    )


PLAN = {
    "pte_plan": "1",
    "steps": [
        {"id": "inv", "tool": "get-invoice", "args": {"id": "INV-1"}},
        {"id": "twice", "tool": "double", "args": {"x": {"$ref": "inv/amount_cents"}}},
    ],
    "result": {"$ref": "twice/value"},
}


def test_schema_tools_compile_with_typed_references_run_and_replay(tmp_path: Path) -> None:
    registry = _registry()
    plan = compile_plan(json.dumps(PLAN), registry)
    assert plan.order == ("inv", "twice") or list(plan.order) == ["inv", "twice"]
    log = tmp_path / "run.jsonl"
    with AuditLog(log) as audit:
        result = Engine(registry, config=EngineConfig(llm_answer=False)).execute(json.dumps(PLAN), audit)
    assert result.ok, result.message
    assert result.result == 2500
    started = next(r for r in read_records(log) if r["type"] == "run_started")
    assert {t["name"] for t in started["tools"]} == {"get-invoice", "double"}
    assert replay_file(log).ok


def test_references_into_schema_tools_are_type_checked() -> None:
    registry = _registry()
    bad = json.loads(json.dumps(PLAN))
    bad["steps"][1]["args"]["x"] = {"$ref": "inv/customer/email"}  # a string where an integer is wanted
    with pytest.raises(PlanRejected) as caught:
        compile_plan(json.dumps(bad), registry)
    assert caught.value.reason is ReasonCode.INVALID_ARGS
    missing = json.loads(json.dumps(PLAN))
    missing["steps"][1]["args"]["x"] = {"$ref": "inv/no_such_field"}
    with pytest.raises(PlanRejected) as caught:
        compile_plan(json.dumps(missing), registry)
    assert caught.value.reason is ReasonCode.BAD_REFERENCE


def test_output_that_breaks_its_schema_fails_the_step(tmp_path: Path) -> None:
    lying = tool_from_schema(
        "lying",
        description="Claims an integer, returns a string.",
        input_schema={"type": "object"},
        output_schema={"type": "integer"},
        func=lambda args: "not a number",
    )
    plan = {"pte_plan": "1", "steps": [{"id": "a", "tool": "lying", "args": {}}]}
    with AuditLog(tmp_path / "a.jsonl") as audit:
        result = Engine(Registry([lying]), config=EngineConfig(llm_answer=False)).execute(
            json.dumps(plan), audit
        )
    assert result.reason is ReasonCode.STEP_FAILED
    assert result.steps[0].error is not None and result.steps[0].error.kind == "invalid_output"


def test_invoke_hands_the_function_the_arguments_it_is_given() -> None:
    """No second copy: the executor hands each call (each attempt) its own copy already, so
    `invoke` passes the arguments on as a `pte.tool`'s does (a JSON round trip per call was spent
    on every imported tool's call for nothing)."""
    seen: list[dict[str, Any]] = []

    def keep(args: dict[str, Any]) -> int:
        seen.append(args)
        return 1

    async def keep_async(args: dict[str, Any]) -> int:
        return keep(args)

    for func in (keep, keep_async):
        spec = tool_from_schema(
            "keep",
            description="",
            input_schema={"type": "object"},
            output_schema={"type": "integer"},
            func=func,
        )
        args = {"items": ["a"]}
        assert spec.invoke(args) == 1
        assert seen.pop() is args


_KEYS = st.text(alphabet="abcxyz", min_size=1, max_size=3)
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_KEYS, inner, max_size=3),
    max_leaves=12,
)


@settings(max_examples=60, deadline=None)
@given(data=_JSON, literal=_JSON, is_async=st.booleans())
def test_a_tool_that_changes_its_arguments_cannot_change_what_was_recorded(
    data: Any, literal: Any, is_async: bool
) -> None:
    """Through the executor (every caller of `invoke` in PTE is behind its copy): a tool that
    changes every container of its arguments, a referenced output's and a literal's, leaves the
    plan, the producer's output, the logged arguments and the step's recorded arguments as they were."""

    def vandal(args: dict[str, Any]) -> int:
        vandalise(args)
        return 1

    async def vandal_async(args: dict[str, Any]) -> int:
        return vandal(args)

    registry = Registry(
        [
            tool_from_schema(
                "produce",
                description="",
                input_schema={"type": "object"},
                output_schema={"type": "object", "properties": {"value": {}}, "required": ["value"]},
                func=lambda args: {"value": json.loads(json.dumps(data))},
            ),
            tool_from_schema(
                "vandal",
                description="",
                input_schema={"type": "object"},
                output_schema={"type": "integer"},
                func=vandal_async if is_async else vandal,
            ),
        ]
    )
    args = {"data": {"$ref": "p/value"}, "literal": literal}
    plan = {
        "pte_plan": "1",
        "steps": [
            {"id": "p", "tool": "produce", "args": {}},
            {"id": "v", "tool": "vandal", "args": args},
            {"id": "again", "tool": "vandal", "args": args},
        ],
        "result": {"$ref": "p/value"},
    }
    audit = AuditLog(keep=True)
    result = Engine(registry, config=EngineConfig(llm_answer=False)).execute(json.dumps(plan), audit)
    assert result.ok, result.message
    resolved = {"data": data, "literal": literal}
    assert result.result == data
    assert [step.args for step in result.steps] == [{}, resolved, resolved]
    started = [r["args"] for r in audit.records if r["type"] == "step_started"]
    assert started == [{}, resolved, resolved]
    produced = [r["output"] for r in audit.records if r["type"] == "step_finished" and r["step_id"] == "p"]
    assert produced == [{"value": data}]


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"name": "bad name"}, "must match"),
        ({"input_schema": {"type": "string"}}, '"type": "object"'),
        (
            {"input_schema": {"type": "object", "properties": {"a": {"type": "nope"}}}},
            "not a valid JSON Schema",
        ),
        ({"output_schema": {"$ref": "https://schemas.example.test/x.json"}}, "refers outside itself"),
        (
            {"output_schema": {"type": "object", "properties": {"a": {"$ref": "other.json#/a"}}}},
            "refers outside",
        ),
        ({"output_schema": True}, "JSON Schema object"),
        ({"effect": "delete"}, "effect"),
        ({"provenance": "maybe"}, "provenance"),
        ({"timeout_s": 0}, "timeout_s"),
        ({"sinks": {"missing": "request"}}, "not a property"),
        ({"sinks": {"to": "somewhere"}}, "unknown provenance"),
        ({"func": "not callable"}, "callable"),
    ],
)
def test_refusals(kwargs: dict[str, Any], words: str) -> None:
    base: dict[str, Any] = {
        "name": "ok",
        "description": "",
        "input_schema": {"type": "object", "properties": {"to": {"type": "string"}}},
        "output_schema": {"type": "object"},
        "func": lambda args: {},
    }
    base.update(kwargs)
    with pytest.raises(ToolRegistrationError, match=words):
        tool_from_schema(**base)
