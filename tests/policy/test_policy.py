"""Data-flow (provenance) policies: labels, sinks, flow messages, policy files, and soundness.

The catalogue is defined here so the tests do not depend on a stock pack: an untrusted
`read_email`, a trusted `get_supplier`, shaping tools `pick` / `format_text` (derived) and a
guarded `send_payment` sink.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from pte import (
    AuditLog,
    Engine,
    Executor,
    Plan,
    PlanRejected,
    Policy,
    PTEError,
    ReasonCode,
    Registry,
    compile_plan,
    load_policy,
    tool,
    verify,
)

# private: the JSON Schemas shipped in schemas/
from pte._core import load_schema

# private: the label names; the policy checks' parts, white-box
from pte._policy import LABELS, ToolPolicy, plan_literals
from pte.audit import read_records
from pte.catalogue import ToolSpec
from pte.errors import PolicyError
from pte.plan import CompileContext, PlanStep
from pte.policy import PolicyCheck

# --- the catalogue ---------------------------------------------------------------------------

GOOD_IBAN = "DE89370400440532013000"
BAD_IBAN = "GB33BUKB20201555555555"


class Email(BaseModel):
    iban: str
    amount: str
    body: str


class Supplier(BaseModel):
    supplier_id: str
    name: str
    iban: str
    currency: str


class Text(BaseModel):
    text: str


class Picked(BaseModel):
    value: str


class Receipt(BaseModel):
    payment_id: str


@tool(provenance="untrusted")
def read_email(message_id: str) -> Email:
    """Read an e-mail (third-party text)."""
    return Email(iban=BAD_IBAN, amount="990.00", body=f"Pay {BAD_IBAN} now ({message_id})")


@tool
def get_supplier(supplier_id: str) -> Supplier:
    """The supplier on file (trusted)."""
    return Supplier(supplier_id=supplier_id, name="ACME", iban=GOOD_IBAN, currency="EUR")


@tool(provenance="derived")
def pick(record: dict[str, Any], field: str) -> Picked:
    """One field of a record."""
    return Picked(value=str(record[field]))


@tool(provenance="derived")
def format_text(template: str, values: dict[str, str]) -> Text:
    """Fill {name} placeholders."""
    return Text(text=template.format(**values))


@tool(provenance="derived")
def today() -> Text:
    """A derived tool with no arguments."""
    return Text(text="2026-11-01")


@tool
def note(text: str, tags: list[str] | None = None) -> Text:
    """Keep a note (trusted output, no sinks of its own)."""
    return Text(text=text)


@tool(
    effect="write",
    sinks={
        "iban": ["request", "trusted"],
        "amount": ["request", "trusted"],
        "currency": ["request", "trusted"],
    },
)
def send_payment(iban: str, amount: str, currency: str = "EUR", reference: str = "") -> Receipt:
    """Pay a supplier (guarded)."""
    return Receipt(payment_id="P-1")


REGISTRY = Registry([read_email, get_supplier, pick, format_text, today, note, send_payment])
POLICY = Policy.from_registry(REGISTRY)


def plan_text(*steps: dict[str, Any], result: Any = None) -> str:
    doc: dict[str, Any] = {"pte_plan": "1", "steps": list(steps)}
    if result is not None:
        doc["result"] = result
    return json.dumps(doc)


def ref(text: str) -> dict[str, str]:
    return {"$ref": text}


def compile_with(text: str, policy: Policy = POLICY, **check: Any) -> Plan:
    prior_tools = check.pop("prior_tools", None)
    return compile_plan(text, REGISTRY, checks=[policy.check(**check)], prior=prior_tools)


def rejection(text: str, policy: Policy = POLICY, **check: Any) -> PlanRejected:
    with pytest.raises(PlanRejected) as info:
        compile_with(text, policy, **check)
    assert info.value.reason is ReasonCode.POLICY_VIOLATION
    return info.value


REPLAN_NOTE = "untrusted: written by a replanner that was shown untrusted data"
EMAIL = {"id": "s1", "tool": "read_email", "args": {"message_id": "M1"}}
SUPPLIER = {"id": "sup", "tool": "get_supplier", "args": {"supplier_id": "S1"}}


# --- labels ----------------------------------------------------------------------------------


def test_sources_have_fixed_labels() -> None:
    plan = compile_plan(plan_text(EMAIL, SUPPLIER), REGISTRY)
    assert POLICY.label_plan(plan) == {"s1": {"untrusted"}, "sup": {"trusted"}}


def test_derived_label_is_the_union_of_every_argument_literals_included() -> None:
    text = plan_text(
        EMAIL,
        SUPPLIER,
        # Only references: no literal, so no "request".
        {"id": "a", "tool": "pick", "args": {"record": ref("s1"), "field": "iban"}},
        {"id": "b", "tool": "format_text", "args": {"template": "{x}", "values": {"x": ref("sup/iban")}}},
        {
            "id": "c",
            "tool": "format_text",
            "args": {"template": "{x}{y}", "values": {"x": ref("b/text"), "y": ref("a/value")}},
        },
        {"id": "d", "tool": "today", "args": {}},
    )
    labels = POLICY.label_plan(compile_plan(text, REGISTRY))
    assert labels["a"] == {"untrusted", "request"}  # "field": "iban" is a literal
    assert labels["b"] == {"trusted", "request"}
    assert labels["c"] == {"trusted", "untrusted", "request"}
    assert labels["d"] == {"request"}  # no arguments: the plan's own choice


def test_object_keys_below_the_arguments_count_as_literals_but_argument_names_do_not() -> None:
    only_refs = {
        "id": "a",
        "tool": "format_text",
        "args": {"template": ref("s1/body"), "values": {"k": ref("s1/iban")}},
    }
    labels = POLICY.label_plan(compile_plan(plan_text(EMAIL, only_refs), REGISTRY))
    assert labels["a"] == {"untrusted", "request"}  # the key "k" was written by the planner
    whole = {"id": "a", "tool": "pick", "args": {"record": ref("s1"), "field": ref("s1/iban")}}
    labels = POLICY.label_plan(compile_plan(plan_text(EMAIL, whole), REGISTRY))
    assert labels["a"] == {"untrusted"}


def test_literals_count_as_untrusted_in_a_replan_that_showed_untrusted_data() -> None:
    text = plan_text(
        SUPPLIER,
        {"id": "t", "tool": "format_text", "args": {"template": "{x}", "values": {"x": ref("sup/iban")}}},
    )
    plan = compile_plan(text, REGISTRY)
    assert POLICY.label_plan(plan, literal="untrusted")["t"] == {"trusted", "untrusted"}
    assert POLICY.label_plan(plan)["t"] == {"trusted", "request"}


def test_label_plan_accepts_a_compile_context() -> None:
    seen: dict[str, Any] = {}

    def capture(ctx: CompileContext) -> None:
        seen["labels"] = POLICY.label_plan(ctx)

    compile_plan(plan_text(EMAIL, SUPPLIER), REGISTRY, checks=[capture])
    assert seen["labels"] == {"s1": {"untrusted"}, "sup": {"trusted"}}


def test_check_stores_labels_in_the_context_and_on_the_check() -> None:
    seen: dict[str, Any] = {}
    check = POLICY.check()

    def capture(ctx: CompileContext) -> None:
        assert ctx.provenance is not None
        seen.update(ctx.provenance)

    text = plan_text(EMAIL, {"id": "p", "tool": "pick", "args": {"record": ref("s1"), "field": "iban"}})
    compile_plan(text, REGISTRY, checks=[check, capture])
    assert seen == {"s1": {"untrusted"}, "p": {"untrusted", "request"}}
    assert check.labels == seen
    assert all(isinstance(v, frozenset) for v in seen.values())


def test_labels_are_stored_even_when_the_plan_is_rejected() -> None:
    check = POLICY.check()
    bad = {"id": "pay", "tool": "send_payment", "args": {"iban": ref("s1/iban"), "amount": "1.00"}}
    with pytest.raises(PlanRejected):
        compile_plan(plan_text(EMAIL, bad), REGISTRY, checks=[check])
    assert check.labels == {"s1": {"untrusted"}, "pay": {"trusted"}}


# --- sinks and flow messages -----------------------------------------------------------------


def test_trusted_and_request_values_reach_the_sink() -> None:
    pay = {
        "id": "pay",
        "tool": "send_payment",
        "args": {"iban": ref("sup/iban"), "amount": "120.00", "reference": ref("s1/body")},
    }
    # reference is declared nowhere: the guarded default lets only request/trusted data in...
    error = rejection(plan_text(EMAIL, SUPPLIER, pay))
    assert "send_payment.reference accepts only request or trusted data" in error.message
    # ...and an open policy leaves undeclared parameters alone.
    opened = Policy.from_registry(REGISTRY, default="open")
    plan = compile_with(plan_text(EMAIL, SUPPLIER, pay), opened)
    assert [s.id for s in plan.steps] == ["s1", "sup", "pay"]
    literal = {**pay, "args": {"iban": ref("sup/iban"), "amount": "120.00", "reference": "Invoice 7"}}
    assert [s.id for s in compile_with(plan_text(EMAIL, SUPPLIER, literal)).steps] == ["s1", "sup", "pay"]


def test_untrusted_value_in_a_sink_is_rejected_with_the_flow_and_path() -> None:
    pay = {"id": "s2", "tool": "send_payment", "args": {"iban": ref("s1/iban"), "amount": "120.00"}}
    error = rejection(plan_text(EMAIL, pay))
    assert "send_payment.iban ← s1/iban ← read_email (untrusted)" in error.message
    assert "accepts only request or trusted data, but would receive untrusted data" in error.message
    assert error.message.startswith("step 's2': ")
    assert error.path == "$.steps[1].args.iban"


def test_flow_through_a_chain_of_shaping_tools_names_every_hop() -> None:
    text = plan_text(
        SUPPLIER,
        EMAIL,
        {"id": "s2", "tool": "pick", "args": {"record": ref("s1"), "field": "iban"}},
        {
            "id": "s3",
            "tool": "format_text",
            "args": {"template": "{iban}", "values": {"iban": ref("s2/value")}},
        },
        {"id": "s4", "tool": "send_payment", "args": {"iban": ref("s3/text"), "amount": "1.00"}},
    )
    error = rejection(text)
    assert error.message.endswith(
        "send_payment.iban ← s3/text ← format_text ← s2/value ← pick ← s1 ← read_email (untrusted)"
    )
    assert error.path == "$.steps[4].args.iban"


def test_the_flow_follows_the_argument_that_carries_the_offending_label() -> None:
    text = plan_text(
        SUPPLIER,
        EMAIL,
        {
            "id": "t",
            "tool": "format_text",
            "args": {"template": "{a}{b}", "values": {"a": ref("sup/iban"), "b": ref("s1/amount")}},
        },
        {"id": "pay", "tool": "send_payment", "args": {"iban": ref("sup/iban"), "amount": ref("t/text")}},
    )
    error = rejection(text)
    assert error.message.endswith(
        "send_payment.amount ← t/text ← format_text ← s1/amount ← read_email (untrusted)"
    )
    assert error.path == "$.steps[3].args.amount"


def test_nested_values_in_a_sink_are_labelled_by_all_their_parts() -> None:
    # A sink parameter whose value mixes literals and references (here a list).
    policy = POLICY.with_document({"pte_policy": "1", "tools": {"note": {"sinks": {"tags": ["request"]}}}})
    ok = {"id": "n", "tool": "note", "args": {"text": "x", "tags": ["a", "b"]}}
    compile_with(plan_text(ok), policy)
    bad = {"id": "n", "tool": "note", "args": {"text": "x", "tags": ["a", ref("sup/name")]}}
    error = rejection(plan_text(SUPPLIER, bad), policy)
    assert error.message.endswith("note.tags ← sup/name ← get_supplier (trusted)")
    assert "note.tags accepts only request data, but would receive trusted data" in error.message


def test_first_violation_in_plan_order_is_reported() -> None:
    text = plan_text(
        EMAIL,
        {
            "id": "late",
            "tool": "send_payment",
            "args": {"iban": "X", "amount": ref("s1/amount")},
            "after": ["early"],
        },
        {"id": "early", "tool": "send_payment", "args": {"iban": ref("s1/iban"), "amount": "1"}},
    )
    error = rejection(text)
    assert error.path == "$.steps[1].args.amount"  # plan order, although "early" runs first


def test_an_unset_sink_parameter_is_not_checked() -> None:
    policy = POLICY.with_document(
        {"pte_policy": "1", "tools": {"send_payment": {"sinks": {"reference": []}}}}
    )
    compile_with(
        plan_text({"id": "pay", "tool": "send_payment", "args": {"iban": "X", "amount": "1"}}), policy
    )
    error = rejection(
        plan_text(
            {"id": "pay", "tool": "send_payment", "args": {"iban": "X", "amount": "1", "reference": "r"}}
        ),
        policy,
    )
    assert (
        "send_payment.reference accepts no data from a plan, but would receive request data" in error.message
    )
    assert error.message.endswith('send_payment.reference ← literal "r" (request)')


def test_replan_literals_are_untrusted_and_the_message_says_why() -> None:
    pay = {"id": "pay", "tool": "send_payment", "args": {"iban": BAD_IBAN, "amount": "1.00"}}
    compile_with(plan_text(pay))  # a literal from the request is fine
    error = rejection(plan_text(pay), literal="untrusted")
    assert error.message.endswith(f'send_payment.iban ← literal "{BAD_IBAN}" ({REPLAN_NOTE})')


def test_request_literals_keep_the_request_label_in_a_replan() -> None:
    first = compile_plan(
        plan_text(
            SUPPLIER,
            {"id": "pay", "tool": "send_payment", "args": {"iban": ref("sup/iban"), "amount": "120.00"}},
        ),
        REGISTRY,
    )
    known = plan_literals(first)
    assert '"120.00"' in known and '"S1"' in known
    replan = plan_text(
        {"id": "pay2", "tool": "send_payment", "args": {"iban": ref("sup/iban"), "amount": "120.00"}}
    )
    prior = {"sup": "get_supplier"}
    # Copying the request-time amount verbatim is fine; any other literal is the replanner's.
    compile_with(replan, prior_tools=prior, literal="untrusted", request_literals=known)
    rejection(replan, prior_tools=prior, literal="untrusted")
    error = rejection(
        replan.replace("120.00", "9999.00"), prior_tools=prior, literal="untrusted", request_literals=known
    )
    assert error.message.endswith(f'send_payment.amount ← literal "9999.00" ({REPLAN_NOTE})')
    check = POLICY.check(literal="untrusted", request_literals=known)
    assert check.configured().request_literals == known
    assert check.configured(request_literals=()).request_literals == frozenset()


def test_a_derived_value_made_only_of_replan_literals_is_untrusted() -> None:
    text = plan_text(
        {"id": "t", "tool": "today", "args": {}},
        {"id": "pay", "tool": "send_payment", "args": {"iban": ref("t/text"), "amount": ref("sup/iban")}},
        SUPPLIER,
    )
    error = rejection(text, literal="untrusted")
    assert error.message.endswith(f"send_payment.iban ← t/text ← today ← no arguments ({REPLAN_NOTE})")


def test_long_literals_are_shortened_in_messages() -> None:
    pay = {"id": "pay", "tool": "send_payment", "args": {"iban": "A" * 500, "amount": "1"}}
    error = rejection(plan_text(pay), literal="untrusted")
    assert "A" * 60 not in error.message
    assert "…" in error.message


# --- prior steps (replans) -------------------------------------------------------------------


def test_prior_labels_carry_into_a_replan() -> None:
    pay = {"id": "pay", "tool": "send_payment", "args": {"iban": ref("old/text"), "amount": "1"}}
    prior_tools = {"old": "format_text"}
    compile_with(plan_text(pay), prior_tools=prior_tools, prior={"old": frozenset({"trusted", "request"})})
    error = rejection(plan_text(pay), prior_tools=prior_tools, prior={"old": frozenset({"untrusted"})})
    assert error.message.endswith("send_payment.iban ← old/text ← format_text (untrusted, completed earlier)")


def test_prior_step_without_labels_gets_its_tool_label_or_the_worst_case() -> None:
    pay = {"id": "pay", "tool": "send_payment", "args": {"iban": ref("old/text"), "amount": "1"}}
    # A derived step whose inputs are unknown could carry anything.
    error = rejection(plan_text(pay), prior_tools={"old": "format_text"})
    assert error.message.endswith(
        "old/text ← format_text (labels unknown: completed earlier, assumed untrusted)"
    )
    compile_with(
        plan_text({"id": "pay", "tool": "send_payment", "args": {"iban": ref("sup/iban"), "amount": "1"}}),
        prior_tools={"sup": "get_supplier"},
    )
    error = rejection(
        plan_text({"id": "pay", "tool": "send_payment", "args": {"iban": ref("m/iban"), "amount": "1"}}),
        prior_tools={"m": "read_email"},
    )
    assert "m/iban ← read_email (untrusted" in error.message


def test_check_arguments_are_validated() -> None:
    with pytest.raises(ValueError, match="literal"):
        POLICY.check(literal="nobody")
    with pytest.raises(ValueError, match="unknown labels"):
        POLICY.check(prior={"x": frozenset({"secret"})})


def test_configured_returns_a_new_check_for_another_compile() -> None:
    base = POLICY.check()
    replan = base.configured(literal="untrusted", prior={"s1": frozenset({"untrusted"})})
    assert isinstance(replan, PolicyCheck) and replan is not base
    assert (base.literal, dict(base.prior)) == ("request", {})
    assert (replan.literal, dict(replan.prior)) == ("untrusted", {"s1": frozenset({"untrusted"})})
    assert replan.configured().literal == "untrusted"


# --- the policy file -------------------------------------------------------------------------


def write_policy(tmp_path: Path, doc: Any) -> Path:
    path = tmp_path / "policy.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc), encoding="utf-8")
    return path


def test_the_schema_is_a_valid_2020_12_schema_with_its_id() -> None:
    schema = load_schema("policy.schema.json")
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$id"] == "https://pte.dev/schemas/policy/1.json"
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"


def test_policy_reads_the_tools_declarations() -> None:
    assert POLICY.output_label("read_email") == "untrusted"
    assert POLICY.output_label("format_text") == "derived"
    assert POLICY.output_label("get_supplier") == "trusted"
    assert POLICY.sinks("send_payment") == {
        "iban": {"request", "trusted"},
        "amount": {"request", "trusted"},
        "currency": {"request", "trusted"},
        "reference": {"request", "trusted"},  # guarded by default: a write tool's parameter
    }
    assert POLICY.default == "guarded"
    assert Policy.from_registry(REGISTRY, default="open").sinks("send_payment").keys() == {
        "iban",
        "amount",
        "currency",
    }
    assert POLICY.sinks("note") == {}
    assert POLICY.tool_policy("note") == ToolPolicy("trusted", {})
    doc = POLICY.to_document()
    jsonschema.validate(doc, load_schema("policy.schema.json"))
    assert POLICY.describe()["sources"] == []


def test_a_policy_file_overrides_outputs_and_adds_sinks(tmp_path: Path) -> None:
    path = write_policy(
        tmp_path,
        {
            "pte_policy": "1",
            "description": "Compliance, 2026-11",
            "tools": {
                "get_supplier": {"output": "untrusted"},
                "note": {"sinks": {"text": ["trusted"]}},
                "send_payment": {"sinks": {"reference": ["request", "trusted"]}},
            },
        },
    )
    policy = load_policy(REGISTRY, path)
    assert policy.output_label("get_supplier") == "untrusted"
    assert policy.sinks("note") == {"text": {"trusted"}}
    assert set(policy.sinks("send_payment")) == {"iban", "amount", "currency", "reference"}
    assert policy.sources == (str(path),)
    # The file made the supplier register untrusted: paying to its IBAN is now a violation.
    pay = {"id": "pay", "tool": "send_payment", "args": {"iban": ref("sup/iban"), "amount": "1"}}
    error = rejection(plan_text(SUPPLIER, pay), policy)
    assert error.message.endswith("send_payment.iban ← sup/iban ← get_supplier (untrusted)")
    # The tool's own declaration is unchanged; only this policy differs.
    compile_with(plan_text(SUPPLIER, pay))
    error = rejection(plan_text({"id": "n", "tool": "note", "args": {"text": "hello"}}), policy)
    assert error.message.endswith('note.text ← literal "hello" (request)')


def test_a_file_sink_replaces_the_code_sink_for_that_parameter() -> None:
    policy = POLICY.with_document(
        {"pte_policy": "1", "tools": {"send_payment": {"sinks": {"iban": ["trusted"]}}}}
    )
    assert policy.sinks("send_payment")["iban"] == {"trusted"}
    assert policy.sinks("send_payment")["amount"] == {"request", "trusted"}
    rejection(
        plan_text({"id": "pay", "tool": "send_payment", "args": {"iban": GOOD_IBAN, "amount": "1"}}), policy
    )


def test_with_file_returns_a_new_policy(tmp_path: Path) -> None:
    path = write_policy(tmp_path, {"pte_policy": "1", "tools": {"read_email": {"output": "trusted"}}})
    new = POLICY.with_file(path)
    assert new is not POLICY
    assert (POLICY.output_label("read_email"), new.output_label("read_email")) == ("untrusted", "trusted")
    assert load_policy(REGISTRY, None).tools == POLICY.tools


@pytest.mark.parametrize(
    ("doc", "match"),
    [
        ("{not json", "not valid JSON"),
        ('{"pte_policy": "1", "tools": {}, "tools": {}}', "duplicate key 'tools'"),
        ('{"pte_policy": "1", "tools": {"note": {"output": NaN}}}', "NaN is not valid JSON"),
        ([], r"invalid at \$: \[\] is not of type 'object'"),
        ({"pte_policy": "2", "tools": {}}, r"invalid at \$.pte_policy"),
        ({"pte_policy": "1"}, "'tools' is a required property"),
        ({"pte_policy": "1", "tools": {}, "extra": 1}, "Additional properties"),
        ({"pte_policy": "1", "tools": {"note": {"output": "secret"}}}, r"invalid at \$.tools.note.output"),
        (
            {"pte_policy": "1", "tools": {"note": {"sinks": {"text": ["public"]}}}},
            r"\$.tools.note.sinks.text\[0\]",
        ),
        ({"pte_policy": "1", "tools": {"note": {"sinks": {"text": ["trusted", "trusted"]}}}}, "non-unique"),
        ({"pte_policy": "1", "tools": {"note": {}}}, "should be non-empty|does not have enough properties"),
        ({"pte_policy": "1", "tools": {"note": {"sink": {}}}}, "Additional properties"),
        (
            {"pte_policy": "1", "tools": {"send_paymnet": {"output": "trusted"}}},
            "did you mean 'send_payment'",
        ),
        ({"pte_policy": "1", "tools": {"note": {"sinks": {"body": ["trusted"]}}}}, "has no parameter 'body'"),
    ],
)
def test_bad_policy_files_are_refused_with_a_clear_message(tmp_path: Path, doc: Any, match: str) -> None:
    path = write_policy(tmp_path, doc)
    with pytest.raises(PolicyError, match=match) as info:
        load_policy(REGISTRY, path)
    assert isinstance(info.value, PTEError)
    assert str(path) in str(info.value)


def test_missing_policy_file(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="cannot read policy file"):
        load_policy(REGISTRY, tmp_path / "nope.json")


def test_unknown_tools_can_be_skipped_for_a_narrowed_registry(tmp_path: Path) -> None:
    path = write_policy(
        tmp_path,
        {
            "pte_policy": "1",
            "tools": {"wire_transfer": {"output": "untrusted"}, "note": {"output": "untrusted"}},
        },
    )
    with pytest.raises(PolicyError, match="names tool 'wire_transfer', which is not in the registry"):
        load_policy(REGISTRY, path)
    policy = load_policy(REGISTRY, path, ignore_unknown=True)
    assert "wire_transfer" not in policy.tools
    assert policy.output_label("note") == "untrusted"


def test_a_policy_without_a_registry_accepts_any_tool_and_falls_back_to_declarations() -> None:
    policy = Policy().with_document(
        {"pte_policy": "1", "tools": {"send_payment": {"sinks": {"iban": ["trusted"]}}}}
    )
    assert policy.sinks("send_payment") == {"iban": {"trusted"}}
    # Tools it does not know keep their own declarations from the compile's registry.
    pay = {"id": "pay", "tool": "send_payment", "args": {"iban": ref("s1/iban"), "amount": "1"}}
    error = rejection(plan_text(EMAIL, pay), policy)
    assert "accepts only trusted data" in error.message


# --- end to end --------------------------------------------------------------------------------


def test_engine_fails_closed_on_a_policy_violation_before_any_step(tmp_path: Path) -> None:
    calls: list[str] = []

    @tool(provenance="untrusted", name="read_email")
    def read_email_logged(message_id: str) -> Email:
        calls.append("read_email")
        return Email(iban=BAD_IBAN, amount="1", body="")

    @tool(effect="write", sinks={"iban": ["request", "trusted"]}, name="send_payment")
    def send_payment_logged(iban: str, amount: str) -> Receipt:
        calls.append("send_payment")
        return Receipt(payment_id="P")

    registry = Registry([read_email_logged, send_payment_logged])
    engine = Engine(registry, None, checks=[Policy.from_registry(registry).check()])
    pay = {"id": "pay", "tool": "send_payment", "args": {"iban": ref("s1/iban"), "amount": "1"}}
    log = tmp_path / "audit.jsonl"
    with AuditLog(log) as audit:
        result = engine.execute(plan_text(EMAIL, pay), audit)
    assert (result.status, result.reason) == ("failed_closed", ReasonCode.POLICY_VIOLATION)
    assert calls == []
    assert verify(log).ok
    rejected = [r for r in read_records(log) if r["type"] == "plan_rejected"]
    assert rejected[0]["reason"] == "policy_violation"
    assert rejected[0]["path"] == "$.steps[1].args.iban"
    assert "send_payment.iban ← s1/iban ← read_email (untrusted)" in rejected[0]["message"]


# --- soundness: static labels against actual runs ---------------------------------------------

# Every value carries a marker for each place it came from: tools taint values dynamically,
# and the static labels must cover every marker that actually shows up.
MARK = {"request": "⚠R", "trusted": "⚠T", "untrusted": "⚠U"}


class Out(BaseModel):
    text: str


@tool(name="t_src")
def t_src(seed: str = "") -> Out:
    """Trusted source: its own data, whatever the seed (a lookup key)."""
    return Out(text=f"{MARK['trusted']}{len(seed)}")


@tool(name="u_src", provenance="untrusted")
def u_src(seed: str = "") -> Out:
    """Untrusted source: third-party text."""
    return Out(text=f"{MARK['untrusted']}{len(seed)}")


@tool(name="concat", provenance="derived")
def concat(parts: list[str]) -> Out:
    """Shaping: join the parts."""
    return Out(text="|".join(parts))


@tool(name="first", provenance="derived")
def first(parts: list[str], sep: str = "") -> Out:
    """Shaping: keep only the first part (labels still cover every argument)."""
    return Out(text=parts[0] + sep)


@tool(name="fill", provenance="derived")
def fill(template: str, values: dict[str, str]) -> Out:
    """Shaping: a template filled from values."""
    return Out(text=template + "".join(values[k] for k in sorted(values)))


SINK_CALLS: list[str] = []


def make_sink(allowed: frozenset[str]) -> ToolSpec:
    @tool(name="sink", effect="write", sinks={"value": sorted(allowed)})
    def sink(value: str, note: str = "") -> Out:
        SINK_CALLS.append(value)
        return Out(text="done")

    return sink.__pte_tool__  # type: ignore[attr-defined, no-any-return]


def literal() -> st.SearchStrategy[str]:
    return st.sampled_from(["a", "b", ""]).map(lambda s: MARK["request"] + s)


@st.composite
def flows(draw: st.DrawFn) -> tuple[list[dict[str, Any]], frozenset[str], str]:
    """A random DAG of sources and shaping steps, then a sink fed by one of them (or a literal)."""
    steps: list[dict[str, Any]] = []

    def value() -> Any:
        if bool(steps) and draw(st.booleans()):
            return ref(f"{draw(st.sampled_from([s['id'] for s in steps]))}/text")
        return draw(literal())

    for i in range(draw(st.integers(1, 8))):
        kind = draw(
            st.sampled_from(["t_src", "u_src", "concat", "first", "fill"] if steps else ["t_src", "u_src"])
        )
        if kind in ("t_src", "u_src"):
            args: dict[str, Any] = {"seed": value()} if draw(st.booleans()) else {}
        elif kind == "concat":
            args = {"parts": [value() for _ in range(draw(st.integers(1, 3)))]}
        elif kind == "first":
            args = {"parts": [value() for _ in range(draw(st.integers(1, 3)))]}
            if draw(st.booleans()):
                args["sep"] = value()
        else:
            names = draw(st.lists(st.sampled_from(["x", "y", "z"]), unique=True, max_size=3))
            args = {"template": value(), "values": {n: value() for n in names}}
        steps.append({"id": f"s{i}", "tool": kind, "args": args})
    sink_args: dict[str, Any] = {"value": value()}
    if draw(st.booleans()):
        sink_args["note"] = value()  # not a sink parameter: anything may reach it
    steps.append({"id": "out", "tool": "sink", "args": sink_args})
    allowed = draw(
        st.sampled_from([frozenset(LABELS) - {x} for x in LABELS] + [frozenset({x}) for x in LABELS])
    )
    literal_label = draw(st.sampled_from(["request", "untrusted"]))
    return steps, allowed, literal_label


def markers(text: str) -> set[str]:
    return {label for label, mark in MARK.items() if mark in text}


def direct_invoker(spec: ToolSpec, args: dict[str, Any], step: PlanStep) -> Any:
    return spec.invoke(args)


@given(flows())
def test_static_labels_are_sound_against_the_actual_run(
    flow: tuple[list[dict[str, Any]], frozenset[str], str],
) -> None:
    """Hypothesis generates flows through chains of shaping tools and checks the static labels
    against the actual run."""
    steps, allowed, literal_label = flow
    registry = Registry([t_src, u_src, concat, first, fill, make_sink(allowed)])
    # Open: the property is about the declared sink (the guarded default is tested apart).
    policy = Policy.from_registry(registry, default="open")
    text = plan_text(*steps)

    # Run the plan without the policy to see what really flows where.
    plan = compile_plan(text, registry)
    labels = policy.label_plan(plan, literal=literal_label)
    SINK_CALLS.clear()
    execution = Executor(registry, invoker=direct_invoker).run(plan)
    assert execution.ok
    # Literals carry the request marker; in replan mode they stand for untrusted text.
    as_label = {"request": literal_label, "trusted": "trusted", "untrusted": "untrusted"}
    for step_id, output in execution.outputs.items():
        actual = {as_label[m] for m in markers(output["text"])}
        assert actual <= labels[step_id], (step_id, output, labels[step_id])
    (delivered,) = SINK_CALLS
    sink_value = steps[-1]["args"]["value"]
    static = (
        labels[sink_value["$ref"].split("/")[0]]
        if isinstance(sink_value, dict)
        else frozenset({literal_label})
    )
    actual = {as_label[m] for m in markers(delivered)}
    assert actual <= static

    # Whether the sink runs is decided by every earlier step's failure, which depends on what
    # that step is called with (docs/labels.md), except labels the sink's own arguments carry.
    def arg_labels(args: dict[str, Any]) -> set[str]:
        out: set[str] = set()
        stack: list[Any] = list(args.values())
        while stack:
            item = stack.pop()
            if isinstance(item, dict) and set(item) == {"$ref"}:
                out |= labels[item["$ref"].split("/")[0]]
            elif isinstance(item, (dict, list)) and item:
                if isinstance(item, dict):
                    out.add(literal_label)  # its keys are literals too
                stack.extend(item.values() if isinstance(item, dict) else item)
            else:
                out.add(literal_label)  # a scalar, or an empty container
        return out

    implicit = set().union(*(arg_labels(s["args"]) for s in steps[:-1])) - arg_labels(steps[-1]["args"])

    # And the policy: a plan it accepts never delivers a forbidden label into the sink.
    SINK_CALLS.clear()
    try:
        checked = compile_plan(text, registry, checks=[policy.check(literal=literal_label)])
    except PlanRejected as error:
        assert error.reason is ReasonCode.POLICY_VIOLATION
        assert not (static <= allowed and implicit <= allowed)
        # A value into the sink names the parameter; whether the call runs names the call.
        last = f"$.steps[{len(steps) - 1}]"
        assert error.path == (f"{last}.args.value" if not static <= allowed else last)
        return
    assert static <= allowed and implicit <= allowed
    Executor(registry, invoker=direct_invoker).run(checked)
    (delivered,) = SINK_CALLS
    assert {as_label[m] for m in markers(delivered)} <= allowed
    if "untrusted" not in allowed:
        assert MARK["untrusted"] not in delivered
