"""Example-based tests of `compile_plan`: one or more per reason code, with the JSON path and a
helpful message; acceptance, execution order, hashing, immutability, type-checked references,
`after`, limits, and bytes input. Property tests live in test_compile_properties.py.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pte
from pte import Plan, PlanRejected, ReasonCode, compile_plan

# private: the deep copy the executor hands a tool, white-box
from pte._plan import copy_json
from pte.audit import canonical_json
from pte.plan import CompileContext, Limits
from pte.testing._catalogue import example_registry

REGISTRY = example_registry()

DESIGN_EXAMPLE: dict[str, Any] = {
    "pte_plan": "1",
    "steps": [
        {"id": "inv", "tool": "list_overdue_invoices", "args": {"days": 30}},
        {
            "id": "total",
            "tool": "calculator",
            "args": {"expression": "sum(amounts)", "variables": {"amounts": {"$ref": "inv/amounts"}}},
        },
        {
            "id": "mail",
            "tool": "send_reminder",
            "args": {"invoice_ids": {"$ref": "inv/ids"}},
            "after": ["total"],
        },
    ],
    "result": {"$ref": "total/value"},
}

INV = {"id": "inv", "tool": "list_overdue_invoices", "args": {"days": 30}}
CUST = {"id": "cust", "tool": "lookup_customer", "args": {"customer_id": "C001"}}
RISK = {"id": "risk", "tool": "score_risk", "args": {"customer": {"$ref": "cust"}, "overdue_days": 30}}
MAIL = {"id": "mail", "tool": "read_email", "args": {"mailbox": "ap"}}
_NO_RESULT = object()


def plan(*steps: dict[str, Any], result: Any = _NO_RESULT) -> dict[str, Any]:
    doc: dict[str, Any] = {"pte_plan": "1", "steps": [json.loads(json.dumps(s)) for s in steps]}
    if result is not _NO_RESULT:
        doc["result"] = result
    return doc


def step(step_id: str, tool: str, after: list[str] | None = None, **args: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"id": step_id, "tool": tool, "args": args}
    if after is not None:
        out["after"] = after
    return out


def ref(text: str) -> dict[str, str]:
    return {"$ref": text}


def compiles(doc: dict[str, Any] | str | bytes, limits: Limits | None = None) -> Plan:
    text = doc if isinstance(doc, (str, bytes)) else json.dumps(doc)
    return compile_plan(text, REGISTRY, limits)


def rejected(
    doc: dict[str, Any] | str | bytes,
    reason: ReasonCode,
    path: str | None = None,
    *,
    limits: Limits | None = None,
    registry: pte.Registry = REGISTRY,
) -> PlanRejected:
    text = doc if isinstance(doc, (str, bytes)) else json.dumps(doc)
    with pytest.raises(PlanRejected) as info:
        compile_plan(text, registry, limits)
    error = info.value
    assert error.reason is reason, f"expected {reason.value}, got {error}"
    if path is not None:
        assert error.path == path, f"expected path {path}, got {error.path} ({error})"
    assert error.message, "a rejection must say why"
    assert str(error).startswith(reason.value + ": ")
    assert error.to_dict() == {"reason": reason.value, "message": error.message, "path": error.path}
    return error


# --- acceptance -------------------------------------------------------------------------------


def test_design_example_is_accepted() -> None:
    compiled = compiles(DESIGN_EXAMPLE)
    assert [s.id for s in compiled.steps] == ["inv", "total", "mail"]
    assert compiled.order == ("inv", "total", "mail")
    assert compiled.to_dict() == DESIGN_EXAMPLE
    assert compiled.has_result and compiled.result == {"$ref": "total/value"}
    total = compiled.step("total")
    assert total.tool == "calculator"
    assert total.depends_on == ("inv",)
    [(path, reference)] = total.references
    assert path == ("variables", "amounts")
    assert (reference.step, reference.tokens, reference.pointer) == ("inv", ("amounts",), "/amounts")
    mail = compiled.step("mail")
    assert mail.after == ("total",)
    assert mail.depends_on == ("inv", "total")
    assert len(compiled) == 3 and [s.id for s in compiled] == ["inv", "total", "mail"]


def test_minimal_plan_without_result() -> None:
    compiled = compiles(plan(INV))
    assert compiled.order == ("inv",)
    assert not compiled.has_result and compiled.result is None
    assert compiled.step("inv").depends_on == ()
    with pytest.raises(KeyError):
        compiled.step("nope")


def test_the_stock_compile_alias_is_compile_plan() -> None:
    assert pte.compile is compile_plan


def test_extra_checks_run_after_the_pipeline() -> None:
    seen: list[tuple[str, ...]] = []

    def policy(ctx: CompileContext) -> None:
        seen.append(ctx.order)
        raise PlanRejected(ReasonCode.POLICY_VIOLATION, "no reminders today", "$.steps[2]")

    with pytest.raises(PlanRejected) as info:
        compile_plan(json.dumps(DESIGN_EXAMPLE), REGISTRY, checks=[policy])
    assert info.value.reason is ReasonCode.POLICY_VIOLATION and info.value.path == "$.steps[2]"
    assert seen == [("inv", "total", "mail")]  # the order is known by then
    seen.clear()
    rejected(plan(INV, INV), ReasonCode.DUPLICATE_STEP_ID)
    with pytest.raises(PlanRejected):
        compile_plan(json.dumps(plan(INV, INV)), REGISTRY, checks=[policy])
    assert seen == []  # a built-in rejection comes first


def test_an_unexpected_error_in_an_extra_check_is_a_rejection() -> None:
    def broken(ctx: CompileContext) -> None:
        raise ZeroDivisionError("a bug in a policy")

    with pytest.raises(PlanRejected) as caught:
        compile_plan(json.dumps(DESIGN_EXAMPLE), REGISTRY, checks=[broken])
    # A check that cannot decide must not let the plan through.
    assert caught.value.reason is ReasonCode.POLICY_VIOLATION
    assert "broken" in caught.value.message and "ZeroDivisionError" in caught.value.message


# --- invalid_json -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   \n",
        "not json",
        "{",
        '{"pte_plan": "1",}',
        '{"pte_plan": "1"} trailing',
        '{"pte_plan": "1"}{"pte_plan": "1"}',
        "{'pte_plan': '1'}",
        '// a comment\n{"pte_plan": "1"}',
        '{"x": NaN}',
        '{"x": Infinity}',
        '{"x": -Infinity}',
        "NaN",
        '{"x": 1e400}',
        '{"pte_plan": "1", "pte_plan": "1", "steps": []}',
        '{"steps": [{"id": "a", "id": "a", "tool": "t", "args": {}}]}',
        '{"x": "\\ud800"}',
        '{"x": "\\udc00\\ud800"}',
        '{"x": ' + "9" * 5000 + "}",
        "```json\n" + json.dumps({"pte_plan": "1", "steps": [INV]}) + "\n```",
        "\ufeff" + json.dumps({"pte_plan": "1", "steps": [INV]}),
    ],
)
def test_invalid_json(text: str) -> None:
    rejected(text, ReasonCode.INVALID_JSON, "$")


@pytest.mark.parametrize(
    ("text", "kind"), [("[1, 2]", "array"), ('"plan"', "string"), ("null", "null"), ("42", "integer")]
)
def test_a_plan_must_be_an_object(text: str, kind: str) -> None:
    error = rejected(text, ReasonCode.INVALID_JSON, "$")
    assert f"one JSON object, not a JSON {kind}" in error.message


def test_invalid_json_message_says_where() -> None:
    error = rejected('{\n  "pte_plan": "1",\n  "steps": [}\n', ReasonCode.INVALID_JSON, "$")
    assert "line 3" in error.message


def test_duplicate_keys_are_named() -> None:
    error = rejected('{"pte_plan": "1", "steps": [], "steps": []}', ReasonCode.INVALID_JSON)
    assert "'steps'" in error.message


def test_bytes_input_is_utf8() -> None:
    text = json.dumps(DESIGN_EXAMPLE, ensure_ascii=False)
    from_bytes = compile_plan(text.encode("utf-8"), REGISTRY)
    assert from_bytes.hash == compiles(text).hash


def test_bytes_with_non_ascii_strings() -> None:
    doc = plan(step("n", "calculator", expression="1", variables={"€uro": 1}))
    assert (
        compile_plan(json.dumps(doc, ensure_ascii=False).encode("utf-8"), REGISTRY).hash == compiles(doc).hash
    )


@pytest.mark.parametrize(
    "data",
    [
        b"\xff\xfe{}",
        b'{"pte_plan": "1", "steps": [], "x": "\xe9"}',  # latin-1, not UTF-8
        b"\xc0\xaf",  # overlong encoding
        b'{"x": "\xed\xa0\x80"}',  # an encoded surrogate
        json.dumps(DESIGN_EXAMPLE).encode("utf-16"),
    ],
)
def test_non_utf8_bytes_are_invalid_json(data: bytes) -> None:
    error = rejected(data, ReasonCode.INVALID_JSON, "$")
    assert "UTF-8" in error.message


# --- schema_violation -------------------------------------------------------------------------


def _mutated(mutate: Any) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(json.dumps(DESIGN_EXAMPLE))
    mutate(doc)
    return doc


@pytest.mark.parametrize(
    ("mutate", "path", "words"),
    [
        (lambda d: d.pop("pte_plan"), "$", "'pte_plan'"),
        (lambda d: d.update(pte_plan="2"), "$.pte_plan", "'1'"),
        (lambda d: d.update(pte_plan=1), "$.pte_plan", "'1'"),
        (lambda d: d.pop("steps"), "$", "'steps'"),
        (lambda d: d.update(steps=[]), "$.steps", "[]"),
        (lambda d: d.update(steps={}), "$.steps", "array"),
        (lambda d: d.update(version=2), "$", "'version'"),
        (lambda d: d["steps"][0].pop("args"), "$.steps[0]", "'args'"),
        (lambda d: d["steps"][0].pop("tool"), "$.steps[0]", "'tool'"),
        (lambda d: d["steps"][0].update(depends_on=["x"]), "$.steps[0]", "'depends_on'"),
        (lambda d: d["steps"][0].update(id="Inv"), "$.steps[0].id", "'Inv'"),
        (lambda d: d["steps"][0].update(id="1inv"), "$.steps[0].id", "'1inv'"),
        (lambda d: d["steps"][0].update(id="inv\n"), "$.steps[0].id", "inv"),
        (lambda d: d["steps"][0].update(id="a" * 65), "$.steps[0].id", "a" * 65),
        (lambda d: d["steps"][0].update(id=""), "$.steps[0].id", "''"),
        (lambda d: d["steps"][0].update(id=7), "$.steps[0].id", "string"),
        (lambda d: d["steps"][0].update(tool="1tool"), "$.steps[0].tool", "'1tool'"),
        (lambda d: d["steps"][0].update(tool="rm -rf"), "$.steps[0].tool", "'rm -rf'"),
        (lambda d: d["steps"][0].update(args=[30]), "$.steps[0].args", "object"),
        (lambda d: d["steps"][0].update(args=None), "$.steps[0].args", "object"),
        (lambda d: d["steps"][1].update(args={"$ref": "inv"}), "$.steps[1].args", "$ref"),
        (lambda d: d["steps"][2].update(after="total"), "$.steps[2].after", "array"),
        (lambda d: d["steps"][2].update(after=["total", "total"]), "$.steps[2].after", "non-unique"),
        (lambda d: d["steps"][2].update(after=["Total"]), "$.steps[2].after[0]", "'Total'"),
    ],
)
def test_schema_violations(mutate: Any, path: str, words: str) -> None:
    error = rejected(_mutated(mutate), ReasonCode.SCHEMA_VIOLATION, path)
    assert words in error.message


@pytest.mark.parametrize(
    "bad",
    [
        {"$ref": 5},
        {"$ref": None},
        {"$ref": ["inv"]},
        {"$ref": "inv", "x": 1},
        {"$ref": "Inv/amounts"},
        {"$ref": ""},
        {"$ref": "inv/~2"},
        {"$ref": "inv/a~"},
        {"$ref": "inv\n"},
        {"$ref": "/amounts"},
    ],
)
def test_malformed_references_are_schema_violations(bad: dict[str, Any]) -> None:
    doc = _mutated(lambda d: d["steps"][1]["args"]["variables"].update(amounts=bad))
    error = rejected(doc, ReasonCode.SCHEMA_VIOLATION)
    assert error.path.startswith("$.steps[1].args.variables.amounts"), error.path
    doc = _mutated(lambda d: d.update(result={"total": bad}))
    error = rejected(doc, ReasonCode.SCHEMA_VIOLATION)
    assert error.path.startswith("$.result"), error.path


def test_reference_with_a_second_dollar_ref_like_key_is_a_schema_violation() -> None:
    # Python's `$` matches before a final newline: the plan schema must not let "$ref\n" pass
    # as a second key of a reference (jsonschema-rs, used by compile, and pydantic refuse it).
    doc = _mutated(
        lambda d: d["steps"][1]["args"]["variables"].update(amounts={"$ref": "inv", "$ref\n": "x"})
    )
    rejected(doc, ReasonCode.SCHEMA_VIOLATION)


def test_pointer_escapes_are_valid_syntax() -> None:
    doc = plan(
        INV,
        step(
            "c",
            "convert_currency",
            amount=ref("inv/by_customer/a~1b~0c"),
            from_currency="EUR",
            to_currency="USD",
        ),
    )
    assert compiles(doc).step("c").references[0][1].tokens == ("by_customer", "a/b~c")


# --- duplicate_step_id ------------------------------------------------------------------------


def test_duplicate_step_id() -> None:
    error = rejected(plan(INV, CUST, INV), ReasonCode.DUPLICATE_STEP_ID, "$.steps[2].id")
    assert "'inv'" in error.message and "0" in error.message and "2" in error.message


def test_duplicate_step_id_is_found_before_references() -> None:
    doc = plan(INV, step("inv", "calculator", expression="1", variables={"a": ref("inv/amounts")}))
    rejected(doc, ReasonCode.DUPLICATE_STEP_ID, "$.steps[1].id")


# --- tool_not_allowed -------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["rm_rf", "Calculator", "calculator2", "os.system", "shell"])
def test_unknown_tool(name: str) -> None:
    error = rejected(plan(INV, step("x", name)), ReasonCode.TOOL_NOT_ALLOWED, "$.steps[1].tool")
    assert repr(name) in error.message and "'x'" in error.message
    assert "list_overdue_invoices" in error.message  # the message lists what is allowed


def test_denied_tool_is_not_allowed() -> None:
    narrowed = REGISTRY.deny(["send_reminder"])
    rejected(DESIGN_EXAMPLE, ReasonCode.TOOL_NOT_ALLOWED, "$.steps[2].tool", registry=narrowed)
    allowed = REGISTRY.allow(["list_overdue_invoices", "calculator", "send_reminder"])
    assert compile_plan(json.dumps(DESIGN_EXAMPLE), allowed).order == ("inv", "total", "mail")
    only_reads = REGISTRY.allow(["list_overdue_invoices"])
    error = rejected(DESIGN_EXAMPLE, ReasonCode.TOOL_NOT_ALLOWED, "$.steps[1].tool", registry=only_reads)
    assert "(list_overdue_invoices)" in error.message


def test_empty_registry_allows_nothing() -> None:
    error = rejected(plan(INV), ReasonCode.TOOL_NOT_ALLOWED, "$.steps[0].tool", registry=pte.Registry())
    assert "(none)" in error.message


# --- invalid_args: literals -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "path", "words"),
    [
        ({"days": "30"}, "$.steps[0].args.days", "'30' is not of type 'integer'"),
        ({"days": 1.5}, "$.steps[0].args.days", "not of type 'integer'"),
        ({"days": True}, "$.steps[0].args.days", "not of type 'integer'"),
        ({"days": None}, "$.steps[0].args.days", "not of type 'integer'"),
        ({"days": 0}, "$.steps[0].args.days", "minimum of 1"),
        ({"days": 366}, "$.steps[0].args.days", "maximum of 365"),
        ({"days": 3, "currency": "JPY"}, "$.steps[0].args.currency", "'JPY'"),
        ({"days": 3, "limit": 0}, "$.steps[0].args.limit", "minimum of 1"),
        ({}, "$.steps[0].args", "'days' is a required property"),
        ({"days": 3, "dayz": 3}, "$.steps[0].args", "'dayz'"),
    ],
)
def test_invalid_literal_args(args: dict[str, Any], path: str, words: str) -> None:
    error = rejected(plan(step("inv", "list_overdue_invoices", **args)), ReasonCode.INVALID_ARGS, path)
    assert words in error.message
    assert "'inv'" in error.message and "list_overdue_invoices" in error.message


def test_an_integer_a_double_cannot_hold_is_invalid_json_not_rounded() -> None:
    # RFC 8785 numbers are doubles: 10**30 would be silently rounded, so it is refused with a
    # hint before any schema check (an identifier or amount that long belongs in a string).
    error = rejected(plan(step("inv", "list_overdue_invoices", days=10**30)), ReasonCode.INVALID_JSON)
    assert "1000000000000000000000000000000" in error.message and "as strings" in error.message


def customer(**changes: Any) -> dict[str, Any]:
    """A literal customer record as `score_risk` takes it; `country=` changes the address."""
    address = {"street": "1 Main St", "city": "Springfield", "postcode": "12345", "country": "US"}
    if "country" in changes:
        address["country"] = changes.pop("country")
    return {"id": "C002", "name": "Globex", "address": address, **changes}


JOURNAL = step(
    "j", "post_journal_entry", lines=[{"account": 1000}, {"account": 2000}], memo="m", posted_on="2024-01-01"
)


@pytest.mark.parametrize(
    ("tool", "args", "path"),
    [
        ("lookup_customer", {"customer_id": "X1"}, "$.steps[0].args.customer_id"),
        ("lookup_customer", {"customer_id": "C001\n"}, "$.steps[0].args.customer_id"),
        ("send_reminder", {"invoice_ids": []}, "$.steps[0].args.invoice_ids"),
        ("send_reminder", {"invoice_ids": ["INV-0001", "INV-1"]}, "$.steps[0].args.invoice_ids[1]"),
        ("send_reminder", {"invoice_ids": ["INV-0001"], "channel": "fax"}, "$.steps[0].args.channel"),
        ("send_reminder", {"invoice_ids": ["INV-0001"], "note": "x" * 501}, "$.steps[0].args.note"),
        ("calculator", {"expression": ""}, "$.steps[0].args.expression"),
        ("calculator", {"expression": "a", "variables": {"a": "ten"}}, "$.steps[0].args.variables.a"),
        ("calculator", {"expression": "a", "variables": {"a": [[1]]}}, "$.steps[0].args.variables.a[0]"),
        (
            "convert_currency",
            {"amount": "1,5", "from_currency": "EUR", "to_currency": "USD"},
            "$.steps[0].args.amount",
        ),
        ("read_email", {"mailbox": "ap", "index": 10}, "$.steps[0].args.index"),
        ("score_risk", {"customer": {"id": "C001"}, "overdue_days": 1}, "$.steps[0].args.customer"),
        (
            "score_risk",
            {"customer": customer(country="XX"), "overdue_days": 1},
            "$.steps[0].args.customer.address.country",
        ),
        (
            "score_risk",
            {"customer": customer(), "overdue_days": 1, "weights": [1]},
            "$.steps[0].args.weights",
        ),
        (
            "score_risk",
            {"customer": customer(), "overdue_days": 1, "threshold": 1},
            "$.steps[0].args.threshold",
        ),
        (
            "post_journal_entry",
            {"lines": [{"account": 1000}, {"account": 99}], "memo": "m", "posted_on": "2024-01-01"},
            "$.steps[0].args.lines[1].account",
        ),
    ],
)
def test_invalid_literal_args_in_other_tools(tool: str, args: dict[str, Any], path: str) -> None:
    rejected(plan(step("s", tool, **args)), ReasonCode.INVALID_ARGS, path)


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("list_overdue_invoices", {"days": 30.0}),  # JSON Schema: 30.0 is an integer
        ("list_overdue_invoices", {"days": 365, "currency": None}),
        (
            "convert_currency",
            {"amount": "-12.50", "from_currency": "EUR", "to_currency": "USD", "on": "2024-06-30"},
        ),
        ("convert_currency", {"amount": 12.5, "from_currency": "EUR", "to_currency": "USD"}),
        (
            "score_risk",
            {"customer": customer(email=None, tags=["a"]), "overdue_days": 0, "weights": [0.1, 2]},
        ),
        ("send_reminder", {"invoice_ids": ["INV-0001"], "channel": "letter", "note": None}),
        ("calculator", {"expression": "a", "variables": {"a": [1, "2.5"], "b": 3}}),
    ],
)
def test_valid_literal_args(tool: str, args: dict[str, Any]) -> None:
    compiles(plan(step("s", tool, **args)))


@pytest.mark.parametrize(
    ("consumer", "words"),
    [
        (step("x", "list_overdue_invoices", days=ref("inv/count"), limit=0), ["limit", "minimum of 1"]),
        (step("x", "list_overdue_invoices", days=ref("inv/count"), currency="JPY"), ["currency", "'JPY'"]),
        (step("x", "send_reminder", invoice_ids=ref("inv/ids"), bogus=1), ["'bogus'"]),
        (step("x", "send_reminder", invoice_ids=[ref("inv/ids/0"), 5]), ["5 is not of type 'string'"]),
        (step("x", "convert_currency", amount=ref("inv/amounts/0"), from_currency="EUR"), ["to_currency"]),
        (step("x", "score_risk", customer=ref("inv/invoices/0"), overdue_days=-1), ["customer"]),
    ],
)
def test_invalid_literals_next_to_references(consumer: dict[str, Any], words: list[str]) -> None:
    # With references in a step, the literal parts are still fully validated.
    error = rejected(plan(INV, consumer), ReasonCode.INVALID_ARGS)
    assert error.path.startswith("$.steps[1].args"), error.path
    for word in words:
        assert word in error.message


# --- invalid_args: references are type-checked -------------------------------------------------


@pytest.mark.parametrize(
    ("producers", "tool", "args"),
    [
        # a string output into an integer parameter
        ([CUST], "list_overdue_invoices", {"days": ref("cust/name")}),
        # a number (float) into an integer
        ([CUST, RISK], "list_overdue_invoices", {"days": ref("risk/score")}),
        # an Optional[str] output into a str parameter
        ([CUST], "lookup_customer", {"customer_id": ref("cust/email")}),
        # an enum into an enum with other members, and a plain string into an enum
        (
            [CUST],
            "convert_currency",
            {"amount": 1, "from_currency": ref("cust/address/country"), "to_currency": "EUR"},
        ),
        ([CUST], "convert_currency", {"amount": 1, "from_currency": ref("cust/name"), "to_currency": "EUR"}),
        # a whole object of the wrong shape into a nested model
        ([INV], "score_risk", {"customer": ref("inv"), "overdue_days": 1}),
        # a list of objects without a required key into a list of models
        ([INV], "post_journal_entry", {"lines": ref("inv/invoices"), "memo": "m", "posted_on": "2024-01-01"}),
        # a list where a scalar is expected, and a scalar where a list is expected
        ([INV], "list_overdue_invoices", {"days": ref("inv/amounts")}),
        ([INV], "send_reminder", {"invoice_ids": ref("inv/ids/0")}),
        # a tuple member of the wrong type (prefixItems)
        ([MAIL], "list_overdue_invoices", {"days": ref("mail/attachments/0/0")}),
        # dict values (additionalProperties) of the wrong type
        ([MAIL], "list_overdue_invoices", {"days": ref("mail/headers/Message-Id")}),
        # into nested positions of literals
        ([CUST], "score_risk", {"customer": {**customer(), "address": ref("cust/name")}, "overdue_days": 1}),
        ([INV], "calculator", {"expression": "a", "variables": {"a": ref("inv/invoices")}}),
        ([INV], "send_reminder", {"invoice_ids": ["INV-0001", ref("inv/count")]}),
        # a date-time string into an integer
        ([JOURNAL], "list_overdue_invoices", {"days": ref("j/posted_at")}),
    ],
)
def test_ill_typed_references_are_invalid_args(
    producers: list[dict[str, Any]], tool: str, args: dict[str, Any]
) -> None:
    doc = plan(*producers, step("consumer", tool, **args))
    error = rejected(doc, ReasonCode.INVALID_ARGS)
    assert error.path.startswith(f"$.steps[{len(producers)}].args"), error.path
    assert "'consumer'" in error.message and tool in error.message
    [reference] = [r["$ref"] for r in _refs(args)]
    assert repr(reference) in error.message  # names the offending reference


def _refs(value: Any) -> list[dict[str, str]]:
    if isinstance(value, dict):
        if set(value) == {"$ref"}:
            return [value]
        return [r for v in value.values() for r in _refs(v)]
    if isinstance(value, list):
        return [r for v in value for r in _refs(v)]
    return []


def test_ill_typed_reference_message_names_both_types() -> None:
    error = rejected(
        plan(CUST, step("x", "list_overdue_invoices", days=ref("cust/name"))), ReasonCode.INVALID_ARGS
    )
    assert "gives string" in error.message and "expects integer" in error.message
    assert "lookup_customer" in error.message and "days" in error.message
    error = rejected(
        plan(CUST, step("x", "lookup_customer", customer_id=ref("cust/email"))), ReasonCode.INVALID_ARGS
    )
    assert "null" in error.message  # says why an Optional output does not fit


def test_a_bad_literal_next_to_a_reference_is_reported_at_its_own_path() -> None:
    error = rejected(
        plan(INV, step("x", "send_reminder", invoice_ids=ref("inv/ids"), channel="fax")),
        ReasonCode.INVALID_ARGS,
        "$.steps[1].args.channel",
    )
    assert "channel" in error.message and "fax" in error.message


def test_a_reference_of_the_right_json_type_but_another_enum_says_what_differs() -> None:
    risk = step("risk", "score_risk", customer=ref("cust"), overdue_days=30)
    error = rejected(
        plan(CUST, risk, step("x", "send_reminder", invoice_ids=["INV-1001"], channel=ref("risk/level"))),
        ReasonCode.INVALID_ARGS,
        "$.steps[2].args.channel",
    )
    assert "one of ['low', 'medium', 'high']" in error.message
    assert "one of ['email', 'letter']" in error.message


@pytest.mark.parametrize(
    ("producers", "tool", "args"),
    [
        # an integer into a number (Decimal accepts numbers)
        (
            [INV],
            "convert_currency",
            {"amount": ref("inv/count"), "from_currency": "EUR", "to_currency": "USD"},
        ),
        # an integer into an integer, through array items and a nested model
        ([INV], "list_overdue_invoices", {"days": ref("inv/invoices/0/days_overdue")}),
        # a pointer into array items of a nested model: /invoices/0/amount
        (
            [INV],
            "convert_currency",
            {"amount": ref("inv/invoices/0/amount"), "from_currency": "EUR", "to_currency": "USD"},
        ),
        # an enum into an enum with the same members
        (
            [INV],
            "convert_currency",
            {"amount": 1, "from_currency": ref("inv/invoices/3/currency"), "to_currency": "EUR"},
        ),
        (
            [CUST],
            "convert_currency",
            {"amount": 1, "from_currency": "EUR", "to_currency": ref("cust/preferred_currency")},
        ),
        # dict[str, Decimal] values (additionalProperties), under any key
        (
            [INV],
            "convert_currency",
            {"amount": ref("inv/by_customer/C001"), "from_currency": "EUR", "to_currency": "USD"},
        ),
        (
            [INV],
            "convert_currency",
            {"amount": ref("inv/by_customer/a b"), "from_currency": "EUR", "to_currency": "USD"},
        ),
        # whole list outputs into list parameters, and into list values of a dict parameter
        ([INV], "send_reminder", {"invoice_ids": ref("inv/ids")}),
        ([INV], "calculator", {"expression": "sum(a)", "variables": {"a": ref("inv/amounts")}}),
        # list items, inside a literal list
        ([INV], "send_reminder", {"invoice_ids": ["INV-0001", ref("inv/ids/0"), ref("inv/invoices/1/id")]}),
        # a whole nested model into a parameter of that model
        ([CUST], "score_risk", {"customer": ref("cust"), "overdue_days": 3}),
        # a nested model into a nested position of a literal
        (
            [CUST],
            "score_risk",
            {"customer": {**customer(), "address": ref("cust/address")}, "overdue_days": 3},
        ),
        # an Optional output into an Optional parameter; a Literal output into a str parameter
        ([CUST], "send_reminder", {"invoice_ids": ["INV-0001"], "note": ref("cust/email")}),
        ([CUST], "send_reminder", {"invoice_ids": ["INV-0001"], "note": ref("cust/address/country")}),
        # tuple members (prefixItems) and dict values
        ([MAIL], "list_overdue_invoices", {"days": ref("mail/attachments/0/1")}),
        ([MAIL], "send_reminder", {"invoice_ids": ["INV-0001"], "note": ref("mail/headers/Message-Id")}),
        # value constraints (ranges, patterns) are checked on the resolved value at run time
        (
            [CUST, RISK],
            "score_risk",
            {"customer": ref("cust"), "overdue_days": 1, "threshold": ref("risk/score")},
        ),
        ([MAIL], "read_email", {"mailbox": "ap", "index": ref("mail/attachments/0/1")}),
        ([INV], "send_reminder", {"invoice_ids": [ref("inv/invoices/0/customer_id")]}),
    ],
)
def test_well_typed_references_are_accepted(
    producers: list[dict[str, Any]], tool: str, args: dict[str, Any]
) -> None:
    compiled = compiles(plan(*producers, step("consumer", tool, **args)))
    assert compiled.order[-1] == "consumer"
    assert {r.step for _, r in compiled.step("consumer").references} == {p["id"] for p in producers[-1:]} | {
        r["$ref"].partition("/")[0] for r in _refs(args)
    }


# --- bad_reference ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pointer", "words"),
    [
        ("nope/amounts", "names no step"),
        ("inv/nope", "has no '/nope'"),
        ("inv/invoices/01/amount", "has no '/invoices/01/amount'"),  # no leading zeros in indices
        ("inv/invoices/-/amount", "has no"),  # "-" (past the end) never exists
        ("inv/invoices/0/nope", "has no"),
        ("inv/count/0", "has no"),  # into a scalar
        ("inv/ids/x", "has no"),  # a name into an array
        ("inv/by_customer/C001/x", "has no"),
    ],
)
def test_bad_reference_in_args(pointer: str, words: str) -> None:
    doc = plan(
        INV, step("c", "convert_currency", amount=ref(pointer), from_currency="EUR", to_currency="USD")
    )
    error = rejected(doc, ReasonCode.BAD_REFERENCE, "$.steps[1].args.amount")
    assert words in error.message and repr(pointer) in error.message
    if "has no" in words:
        assert "list_overdue_invoices" in error.message


def test_bad_reference_into_a_tuple_beyond_its_length() -> None:
    doc = plan(MAIL, step("x", "list_overdue_invoices", days=ref("mail/attachments/0/2")))
    rejected(doc, ReasonCode.BAD_REFERENCE, "$.steps[1].args.days")


def test_bad_reference_nested_in_args() -> None:
    doc = plan(INV, step("t", "calculator", expression="a", variables={"a": [1, ref("zzz/x")]}))
    rejected(doc, ReasonCode.BAD_REFERENCE, "$.steps[1].args.variables.a[1]")


def test_bad_reference_in_after() -> None:
    doc = plan(INV, step("x", "list_overdue_invoices", after=["inv", "zzz"], days=3))
    error = rejected(doc, ReasonCode.BAD_REFERENCE, "$.steps[1].after[1]")
    assert "'zzz'" in error.message


@pytest.mark.parametrize(
    ("result", "path"),
    [
        (ref("nope"), "$.result"),
        (ref("inv/nope"), "$.result"),
        ({"total": ref("inv/count"), "mail": ref("mail")}, "$.result.mail"),
        ([ref("inv"), ref("x/y")], "$.result[1]"),
    ],
)
def test_bad_reference_in_result(result: Any, path: str) -> None:
    rejected(plan(INV, result=result), ReasonCode.BAD_REFERENCE, path)


def test_result_may_be_any_value_with_references() -> None:
    compiled = compiles(plan(INV, result={"total": ref("inv/count"), "all": ref("inv"), "n": [1, None, "x"]}))
    assert compiled.result == {"total": ref("inv/count"), "all": ref("inv"), "n": [1, None, "x"]}


def test_references_to_later_steps_are_allowed() -> None:
    # Plan order is not execution order: a step may use the output of a step listed after it.
    doc = plan(step("total", "calculator", expression="sum(a)", variables={"a": ref("inv/amounts")}), INV)
    compiled = compiles(doc)
    assert compiled.order == ("inv", "total")
    assert [s.id for s in compiled.steps] == ["total", "inv"]


# --- plan_cycle -------------------------------------------------------------------------------


def test_self_reference() -> None:
    doc = plan(step("x", "list_overdue_invoices", days=ref("x/count")))
    error = rejected(doc, ReasonCode.PLAN_CYCLE, "$.steps[0].args.days")
    assert "'x'" in error.message and "own output" in error.message


def test_self_reference_to_the_whole_output_and_a_bad_pointer() -> None:
    rejected(plan(INV, step("x", "list_overdue_invoices", days=ref("x"))), ReasonCode.PLAN_CYCLE)
    rejected(plan(INV, step("x", "list_overdue_invoices", days=ref("x/no/such"))), ReasonCode.PLAN_CYCLE)


def test_waiting_for_itself() -> None:
    error = rejected(
        plan(step("x", "list_overdue_invoices", after=["x"], days=1)),
        ReasonCode.PLAN_CYCLE,
        "$.steps[0].after[0]",
    )
    assert "itself" in error.message


def test_two_step_cycle_through_references() -> None:
    doc = plan(
        step("a", "list_overdue_invoices", days=ref("b/count")),
        step("b", "list_overdue_invoices", days=ref("a/count")),
    )
    error = rejected(doc, ReasonCode.PLAN_CYCLE, "$.steps[0]")
    assert "'a'" in error.message and "'b'" in error.message


def test_three_step_cycle_through_after_and_references() -> None:
    doc = plan(
        INV,
        step("a", "list_overdue_invoices", after=["c"], days=1),
        step("b", "list_overdue_invoices", days=ref("a/count")),
        step("c", "calculator", expression="1", variables={"x": ref("b/amounts")}),
    )
    error = rejected(doc, ReasonCode.PLAN_CYCLE, "$.steps[1]")
    for name in ("'a'", "'b'", "'c'"):
        assert name in error.message
    assert "'inv'" not in error.message


def test_cycle_reports_only_steps_on_or_behind_it() -> None:
    doc = plan(
        step("a", "list_overdue_invoices", after=["b"], days=1),
        step("b", "list_overdue_invoices", after=["a"], days=1),
        step("c", "list_overdue_invoices", days=ref("a/count")),
        step("d", "list_overdue_invoices", days=1),
    )
    error = rejected(doc, ReasonCode.PLAN_CYCLE, "$.steps[0]")
    assert "'d'" not in error.message


def test_result_referencing_any_step_is_no_cycle() -> None:
    compiles(plan(INV, CUST, result=[ref("inv"), ref("cust/name")]))


# --- plan_too_large ---------------------------------------------------------------------------


def _chain(count: int) -> dict[str, Any]:
    steps = [step("s0", "list_overdue_invoices", days=1)]
    steps += [
        step(f"s{i}", "list_overdue_invoices", days=ref(f"s{i - 1}/invoices/0/days_overdue"))
        for i in range(1, count)
    ]
    return plan(*steps)


def test_too_many_steps() -> None:
    limits = Limits(max_steps=3)
    compiles(_chain(3), limits)
    error = rejected(_chain(4), ReasonCode.PLAN_TOO_LARGE, "$.steps", limits=limits)
    assert "4 steps" in error.message and "3" in error.message


def test_default_step_limit() -> None:
    assert pte.plan.DEFAULT_LIMITS.max_steps == 250
    assert compiles(_chain(250)).order[-1] == "s249"
    rejected(_chain(251), ReasonCode.PLAN_TOO_LARGE, "$.steps")


def test_too_many_steps_wins_over_later_defects() -> None:
    doc = _chain(5)
    doc["steps"][4]["tool"] = "nope"
    rejected(doc, ReasonCode.PLAN_TOO_LARGE, "$.steps", limits=Limits(max_steps=4))


def test_too_many_bytes_counts_utf8_bytes() -> None:
    doc = plan(step("c", "calculator", expression="1", variables={"€" * 100: 1}))
    text = json.dumps(doc, ensure_ascii=False)
    chars, size = len(text), len(text.encode("utf-8"))
    assert size > chars
    compiles(text, Limits(max_bytes=size))
    error = rejected(text, ReasonCode.PLAN_TOO_LARGE, "$", limits=Limits(max_bytes=chars))
    assert str(size) in error.message and str(chars) in error.message
    # Bytes are counted before parsing: an oversized text is refused even if it is not JSON.
    rejected("x" * 101, ReasonCode.PLAN_TOO_LARGE, "$", limits=Limits(max_bytes=100))


def test_whitespace_counts_towards_the_byte_limit() -> None:
    text = json.dumps(DESIGN_EXAMPLE)
    rejected(text + " " * 100, ReasonCode.PLAN_TOO_LARGE, limits=Limits(max_bytes=len(text) + 99))


def _nested(levels: int) -> Any:
    value: Any = 1
    for i in range(levels):
        value = [value] if i % 2 else {"k": value}
    return value


def test_depth_limit_in_args() -> None:
    # Depth counts every container from the document down: document > steps > step > args.
    doc = plan(step("c", "calculator", expression="1", variables={"a": [1]}))  # args at 4, dict 5, list 6
    compiles(doc, Limits(max_depth=6))
    error = rejected(doc, ReasonCode.PLAN_TOO_LARGE, "$.steps[0].args", limits=Limits(max_depth=5))
    assert "depth" in error.message and "5" in error.message


def test_depth_limit_in_result() -> None:
    limits = Limits(max_depth=10)
    compiles(plan(INV, result=_nested(9)), limits)  # result sits at depth 2
    rejected(plan(INV, result=_nested(10)), ReasonCode.PLAN_TOO_LARGE, "$.result", limits=limits)


def test_default_depth_limit() -> None:
    compiles(plan(INV, result=_nested(31)))
    rejected(plan(INV, result=_nested(32)), ReasonCode.PLAN_TOO_LARGE, "$.result")


@pytest.mark.parametrize("levels", [2_000, 100_000])
def test_nesting_too_deep_to_parse(levels: int) -> None:
    error = rejected("[" * levels + "]" * levels, ReasonCode.PLAN_TOO_LARGE, "$")
    assert "deep" in error.message


@pytest.mark.parametrize("where", ["args", "result"])
@pytest.mark.parametrize("levels", [300, 900])
def test_deep_schema_violation_is_rejected_not_a_crash(where: str, levels: int) -> None:
    # Nesting is only measured after the schema check; explaining a schema violation deep
    # inside must not overflow the stack (RecursionError) on the way.
    bad = "[" * levels + '{"$ref": 5}' + "]" * levels
    if where == "args":
        text = '{"pte_plan":"1","steps":[{"id":"a","tool":"calculator","args":{"expression":' + bad + "}}]}"
    else:
        text = '{"pte_plan":"1","steps":[{"id":"a","tool":"calculator","args":{}}],"result":' + bad + "}"
    assert _outcome(text) in ("plan_too_large", "schema_violation")


def _outcome(text: str) -> str:
    """The reason `text` is rejected, or what else happened (kept short: no deep traceback)."""
    try:
        compile_plan(text, REGISTRY)
    except PlanRejected as error:
        return error.reason.value
    except RecursionError:
        return "RecursionError escaped compile_plan"
    return "accepted"


# --- execution order --------------------------------------------------------------------------


def test_independent_steps_run_in_plan_order() -> None:
    doc = plan(CUST, INV, MAIL)
    assert compiles(doc).order == ("cust", "inv", "mail")


def test_order_is_topological_with_plan_order_tie_break() -> None:
    doc = plan(
        step("x", "list_overdue_invoices", after=["z"], days=1),
        step("y", "list_overdue_invoices", days=1),
        step("z", "list_overdue_invoices", days=1),
    )
    assert compiles(doc).order == ("y", "z", "x")


def test_order_reverses_a_reversed_chain() -> None:
    doc = _chain(6)
    doc["steps"].reverse()
    assert compiles(doc).order == tuple(f"s{i}" for i in range(6))


def test_diamond_order() -> None:
    doc = plan(
        step(
            "join",
            "calculator",
            expression="a",
            variables={"a": ref("left/amounts"), "b": ref("right/amounts")},
        ),
        step("right", "list_overdue_invoices", days=ref("root/count")),
        step("left", "list_overdue_invoices", days=ref("root/count")),
        step("root", "list_overdue_invoices", days=3),
        step("free", "list_overdue_invoices", days=3),
    )
    compiled = compiles(doc)
    # root is the first ready step in plan order... but "free" (index 4) comes after it.
    assert compiled.order == ("root", "right", "left", "join", "free")
    assert compiled.step("join").depends_on == ("left", "right")
    assert [s.id for s in compiled.steps_in_order()] == list(compiled.order)


def test_after_only_dependencies_are_in_depends_on() -> None:
    compiled = compiles(DESIGN_EXAMPLE)
    assert compiled.step("mail").after == ("total",)
    assert compiled.step("mail").to_dict()["after"] == ["total"]
    assert "after" not in compiled.step("inv").to_dict()


def test_after_and_reference_to_the_same_step() -> None:
    doc = plan(
        INV, step("t", "calculator", after=["inv"], expression="1", variables={"a": ref("inv/amounts")})
    )
    assert compiles(doc).step("t").depends_on == ("inv",)


# --- hashing ----------------------------------------------------------------------------------


def _layouts(doc: dict[str, Any]) -> list[str]:
    reordered = {
        "result": doc["result"],
        "steps": [dict(reversed(list(s.items()))) for s in doc["steps"]],
        "pte_plan": "1",
    }
    return [
        json.dumps(doc),
        json.dumps(doc, indent=2),
        json.dumps(doc, indent="\t", sort_keys=True),
        json.dumps(doc, separators=(",", ":")),
        json.dumps(reordered),
        "\n\n  " + json.dumps(reordered, indent=4, ensure_ascii=False) + "\n",
    ]


def test_hash_is_stable_across_whitespace_and_key_order() -> None:
    doc = json.loads(json.dumps(DESIGN_EXAMPLE))
    doc["steps"][2]["args"]["note"] = "Zahlung überfällig, bitte zahlen"
    hashes = {compiles(text).hash for text in _layouts(doc)}
    assert len(hashes) == 1
    [digest] = hashes
    assert digest == hashlib.sha256(canonical_json(doc).encode("utf-8")).hexdigest()
    assert len(digest) == 64 and int(digest, 16) >= 0


def test_hash_is_stable_across_string_escapes() -> None:
    plain = '{"pte_plan":"1","steps":[{"id":"n","tool":"calculator","args":{"expression":"é/1"}}]}'
    escaped = '{"pte_plan":"1","steps":[{"id":"n","tool":"calculator","args":{"expression":"\\u00e9\\/1"}}]}'
    assert compiles(plain).hash == compiles(escaped).hash


def test_hash_changes_with_content() -> None:
    base = compiles(DESIGN_EXAMPLE).hash
    changed = json.loads(json.dumps(DESIGN_EXAMPLE))
    changed["steps"][0]["args"]["days"] = 31
    assert compiles(changed).hash != base
    reordered = json.loads(json.dumps(DESIGN_EXAMPLE))
    reordered["steps"] = [reordered["steps"][0], reordered["steps"][2], reordered["steps"][1]]
    assert compiles(reordered).hash != base  # step order is part of the plan


def test_canonical_form() -> None:
    compiled = compiles(json.dumps(DESIGN_EXAMPLE, indent=2))
    assert compiled.canonical == canonical_json(DESIGN_EXAMPLE)
    assert compiled.to_json(indent=None) == compiled.canonical
    assert json.loads(compiled.to_json()) == DESIGN_EXAMPLE
    assert compiles(compiled.to_json()).hash == compiled.hash
    assert compiles(compiled.canonical).hash == compiled.hash


def test_same_text_gives_equal_plans() -> None:
    assert compiles(DESIGN_EXAMPLE) == compiles(DESIGN_EXAMPLE)


# --- immutability -----------------------------------------------------------------------------


def test_mutating_args_copies_does_not_change_the_plan() -> None:
    compiled = compiles(DESIGN_EXAMPLE)
    before = (compiled.hash, compiled.canonical, compiled.to_dict())
    total = compiled.step("total")
    args = total.args
    args["expression"] = "0"
    args["variables"]["amounts"]["$ref"] = "mail/message_ids"
    total.to_dict()["args"]["expression"] = "0"
    compiled.to_dict()["steps"][0]["args"]["days"] = 0
    compiled.to_dict()["steps"].clear()
    compiled.result["$ref"] = "inv"
    resolved = total.resolve_args({"inv": {"amounts": ["1.00"]}})
    resolved["variables"]["amounts"].append("2.00")
    resolved["expression"] = "0"
    assert total.args == {"expression": "sum(amounts)", "variables": {"amounts": {"$ref": "inv/amounts"}}}
    assert (compiled.hash, compiled.canonical, compiled.to_dict()) == before
    assert compiled.result == {"$ref": "total/value"}


def _containers(value: Any) -> list[Any]:
    """Every dict and list inside `value`, itself included."""
    if isinstance(value, dict):
        return [value, *(c for item in value.values() for c in _containers(item))]
    if isinstance(value, list):
        return [value, *(c for item in value for c in _containers(item))]
    return []


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=3),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=2), children, max_size=3)
    ),
    max_leaves=10,
)


@given(_JSON)
def test_copy_json_is_a_json_round_trip_that_shares_no_container(value: Any) -> None:
    # The executor hands a tool copy_json of its arguments (#37: it no longer descends into
    # scalars): equal to the JSON round trip, and no dict or list of the original in it.
    copied = copy_json(value)
    assert copied == json.loads(json.dumps(value))
    assert type(copied) is type(value)
    originals = {id(c) for c in _containers(value)}
    assert not any(id(c) in originals for c in _containers(copied))
    assert copy_json([value, (1, [2])]) == [copied, [1, [2]]]  # a tuple is copied as a list


def test_plan_and_steps_are_frozen() -> None:
    compiled = compiles(DESIGN_EXAMPLE)
    with pytest.raises(dataclasses.FrozenInstanceError):
        compiled.hash = "0" * 64  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        compiled.steps[0].tool = "send_reminder"  # type: ignore[misc]
    assert isinstance(compiled.steps, tuple) and isinstance(compiled.order, tuple)
    assert isinstance(compiled.steps[1].references, tuple) and isinstance(compiled.steps[2].after, tuple)


@pte.tool
def give_any() -> Any:
    """Returns any JSON."""


@pte.tool
def take_any(a: Any = None, b: Any = None, c: Any = None) -> None:
    """Takes any JSON."""


_TAKE_REGISTRY = pte.Registry([give_any, take_any])
_SOURCE = {"$ref": "give"}
_ARG_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | st.text(max_size=3) | st.just(_SOURCE),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.sampled_from("xyz"), children, max_size=3)
    ),
    max_leaves=8,
)


def _substituted(value: Any, output: Any) -> Any:
    """The oracle: `value` with every reference replaced by `output` (a JSON round trip else)."""
    if value == _SOURCE:
        return output
    if isinstance(value, dict):
        return {key: _substituted(item, output) for key, item in value.items()}
    if isinstance(value, list):
        return [_substituted(item, output) for item in value]
    return value


@settings(max_examples=max(50, settings().max_examples // 5))  # a compile per example
@given(st.dictionaries(st.sampled_from("abc"), _ARG_VALUES), _JSON)
def test_resolve_args_substitutes_every_reference_in_a_fresh_copy(args: dict[str, Any], output: Any) -> None:
    # resolve_args copies the literal parts and no longer copies a top-level reference before
    # filling its place (#37): the same arguments, the plan's own untouched.
    doc = {
        "pte_plan": "1",
        "steps": [
            {"id": "give", "tool": "give_any", "args": {}},
            {"id": "use", "tool": "take_any", "args": args},
        ],
    }
    step = compile_plan(json.dumps(doc), _TAKE_REGISTRY).step("use")
    outputs = {"give": output}
    resolved = step.resolve_args(outputs)
    assert resolved == _substituted(args, output) and list(resolved) == list(args)
    for key, value in args.items():
        if value == _SOURCE:
            assert resolved[key] is output  # the output's own object, as documented
    before = step.args
    for container in _containers(resolved):
        if all(container is not c for c in _containers(output)):
            container.clear()
    assert step.args == before == args


def test_resolve_args_replaces_references() -> None:
    compiled = compiles(DESIGN_EXAMPLE)
    outputs = {"inv": {"ids": ["INV-0001"], "amounts": ["1.50", "2"]}, "total": {"value": "3.50"}}
    assert compiled.step("total").resolve_args(outputs) == {
        "expression": "sum(amounts)",
        "variables": {"amounts": ["1.50", "2"]},
    }
    assert compiled.step("mail").resolve_args(outputs) == {"invoice_ids": ["INV-0001"]}
    with pytest.raises(KeyError):
        compiled.step("total").resolve_args({"inv": {"ids": []}})
