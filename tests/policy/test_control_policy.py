"""Field-level provenance and implicit flows through conditions, require steps and for_each lists."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import BaseModel

import pte
from pte import PlanRejected, Policy, ReasonCode, Registry, compile_plan, load_registry

# private: the policy checks' parts, white-box
from pte._policy import parse_field_pointer, schema_fields
from pte.errors import PolicyError
from pte.policy import LabelTree, provenance
from tests.packs import world

FIELDS = {
    "pte_policy": "1",
    "tools": {"transactions": {"output": "trusted", "fields": {"/transactions/*/subject": "untrusted"}}},
}


@pytest.fixture(scope="module")
def registry() -> Registry:
    return load_registry([str(Path(world.__file__))])


@pytest.fixture(scope="module")
def policy(registry: Registry) -> Policy:
    return Policy.from_registry(registry).with_document(FIELDS)


def check(registry: Registry, policy: Policy, doc: dict[str, Any]) -> dict[str, frozenset[str]]:
    checker = policy.check()
    compile_plan(json.dumps(doc), registry, checks=[checker])
    return checker.labels


def refused(registry: Registry, policy: Policy, doc: dict[str, Any]) -> PlanRejected:
    with pytest.raises(PlanRejected) as info:
        check(registry, policy, doc)
    assert info.value.reason is ReasonCode.POLICY_VIOLATION
    return info.value


def pay(amount: Any, iban: Any, subject: Any = "rent", **extra: Any) -> dict[str, Any]:
    return {
        "id": "pay",
        "tool": "send_money",
        "args": {"iban": iban, "amount": amount, "subject": subject},
        **extra,
    }


TX = {"id": "tx", "tool": "transactions", "args": {"n": 5}}


# --- label trees -------------------------------------------------------------------------------


def test_label_tree_selects_by_field_and_carries_the_path() -> None:
    tree = LabelTree.from_fields({"trusted"}, {"/transactions/*/subject": "untrusted"})
    assert tree.select(("transactions", "0", "amount")) == {"trusted"}
    assert tree.select(("transactions", "3", "subject")) == {"trusted", "untrusted"}
    assert tree.select(("transactions",)) == {"trusted", "untrusted"}
    assert tree.select(()) == tree.everything() == {"trusted", "untrusted"}
    assert tree.membership(("transactions",)) == {"trusted"}
    assert tree.with_own({"untrusted"}).select(("transactions", "0", "amount")) == {"trusted", "untrusted"}
    with pytest.raises(ValueError):
        parse_field_pointer("transactions/*/subject")


def test_policy_fields_are_validated_and_round_trip(registry: Registry, policy: Policy) -> None:
    assert policy.to_document()["tools"]["transactions"]["fields"] == {"/transactions/*/subject": "untrusted"}
    again = Policy.from_registry(registry).with_document(policy.to_document())
    assert again.tool_policy("transactions").fields == policy.tool_policy("transactions").fields
    for bad in ({"transactions/*/subject": "untrusted"}, {"/x": "request"}):
        with pytest.raises(PolicyError):
            Policy.from_registry(registry).with_document(
                {"pte_policy": "1", "tools": {"transactions": {"fields": bad}}}
            )


# --- field-level provenance ----------------------------------------------------------------------


def test_the_amount_and_iban_of_the_users_own_transaction_reach_a_guarded_sink(
    registry: Registry, policy: Policy
) -> None:
    labels = check(
        registry,
        policy,
        {
            "pte_plan": "1",
            "steps": [
                TX,
                pay(
                    {"$ref": "tx/transactions/0/amount"},
                    {"$ref": "tx/transactions/0/iban"},
                    {"$ref": "tx/transactions/0/subject"},
                ),
            ],
        },
    )
    assert labels["tx"] == {"trusted", "untrusted"}


def test_the_free_text_subject_cannot_reach_a_guarded_sink(registry: Registry, policy: Policy) -> None:
    doc = {
        "pte_plan": "1",
        "steps": [TX, pay({"$ref": "tx/transactions/0/amount"}, {"$ref": "tx/transactions/0/subject"})],
    }
    err = refused(registry, policy, doc)
    assert "send_money.iban" in err.message and "tx/transactions/0/subject" in err.message
    # Without the field declaration the whole output is trusted (the tool's own declaration).
    check(registry, Policy.from_registry(registry), doc)


def test_a_whole_list_with_an_untrusted_field_is_untrusted(registry: Registry, policy: Policy) -> None:
    doc = {
        "pte_plan": "1",
        "steps": [
            TX,
            {
                "id": "p",
                "tool": "send_money",
                "for_each": {"$ref": "tx/transactions"},
                "max_items": 5,
                "args": {
                    "iban": {"$ref": "tx/transactions/*/iban"},
                    "amount": {"$ref": "tx/transactions/*/amount"},
                    "subject": {"$ref": "tx/transactions/*/subject"},
                },
            },
        ],
    }
    check(registry, policy, doc)  # each element's iban and amount are trusted; the list's membership too
    bad = json.loads(json.dumps(doc))
    bad["steps"][1]["args"]["iban"] = {"$ref": "tx/transactions/*/subject"}
    refused(registry, policy, bad)


# --- implicit flows ------------------------------------------------------------------------------

PAGE = {"id": "page", "tool": "read_page", "args": {"url": "https://evil.example/todo"}}
ME = {"id": "me", "tool": "find_user", "args": {"name": "alice"}}


def test_untrusted_data_cannot_choose_the_branch_into_a_guarded_sink(
    registry: Registry, policy: Policy
) -> None:
    branch = pay("10.00", "DE89370400440532013000", when={"nonempty": {"$ref": "page/tasks"}})
    err = refused(registry, policy, {"pte_plan": "1", "steps": [PAGE, branch]})
    assert "whether and how often send_money runs depends on untrusted data" in err.message
    assert "page/tasks" in err.message
    # The same branch on trusted data is fine.
    check(
        registry,
        policy,
        {
            "pte_plan": "1",
            "steps": [
                ME,
                pay("10.00", "DE89370400440532013000", when={"eq": [{"$ref": "me/name"}, "alice"]}),
            ],
        },
    )
    # Comparing an untrusted value with a literal is still a decision by untrusted data.
    err = refused(
        registry,
        policy,
        {
            "pte_plan": "1",
            "steps": [
                PAGE,
                pay(
                    "10.00",
                    "DE89370400440532013000",
                    when={"eq": [{"$ref": "page/url"}, "https://evil.example/todo"]},
                ),
            ],
        },
    )
    assert err.path == "$.steps[1].when"


def test_a_require_on_untrusted_data_guards_the_later_write(registry: Registry, policy: Policy) -> None:
    need = {"id": "need", "require": {"empty": {"$ref": "page/tasks"}}, "message": "the page has tasks"}
    err = refused(
        registry, policy, {"pte_plan": "1", "steps": [PAGE, need, pay("1.00", "DE89370400440532013000")]}
    )
    assert "condition on page/tasks" in err.message
    # A step before the require is not decided by it.
    check(registry, policy, {"pte_plan": "1", "steps": [PAGE, pay("1.00", "DE89370400440532013000"), need]})


def test_untrusted_data_cannot_add_elements_to_a_guarded_write_for_each(
    registry: Registry, policy: Policy
) -> None:
    # The list comes from a web page: who gets a DM would be chosen by third parties.
    doc = {
        "pte_plan": "1",
        "steps": [
            PAGE,
            {
                "id": "dm",
                "tool": "send_dm",
                "for_each": {"$ref": "page/tasks"},
                "max_items": 5,
                "args": {"recipient": "bob@corp.example", "body": {"$ref": "page/tasks/*"}},
            },
        ],
    }
    err = refused(registry, policy, doc)
    assert "the for_each list 'page/tasks'" in err.message


def test_a_skipped_steps_default_carries_the_condition(registry: Registry, policy: Policy) -> None:
    doc = {
        "pte_plan": "1",
        "steps": [
            PAGE,
            {
                **ME,
                "when": {"nonempty": {"$ref": "page/tasks"}},
                "default": {"name": "nobody", "email": "nobody@corp.example"},
            },
            {"id": "dm", "tool": "send_dm", "args": {"recipient": {"$ref": "me/email"}, "body": "hi"}},
        ],
    }
    err = refused(registry, policy, doc)
    assert "send_dm.recipient" in err.message


# --- a tool labels its own output fields -----------------------------------------------------------


class Line(BaseModel):
    amount: Decimal
    iban: str
    memo: Annotated[str, provenance("untrusted")]


class Statement(BaseModel):
    lines: list[Line]
    notes: dict[str, Annotated[str, provenance("untrusted")]]


@pte.tool
def statement() -> Statement:
    """The account statement."""
    return Statement(lines=[], notes={})


@pte.tool(effect="write", sinks={"iban": ["request", "trusted"]})
def transfer(iban: str, amount: Decimal) -> str:
    """Move money."""
    return "ok"


def test_a_tool_can_label_parts_of_its_output_in_its_own_model() -> None:
    registry = Registry([statement, transfer])
    assert schema_fields(registry["statement"].output_schema) == {
        "/lines/*/memo": "untrusted",
        "/notes/*": "untrusted",
    }
    policy = Policy.from_registry(registry)
    assert policy.to_document()["tools"]["statement"]["fields"] == {
        "/lines/*/memo": "untrusted",
        "/notes/*": "untrusted",
    }

    def doc(iban: str) -> dict[str, Any]:
        return {
            "pte_plan": "1",
            "steps": [
                {"id": "st", "tool": "statement", "args": {}},
                {
                    "id": "pay",
                    "tool": "transfer",
                    "args": {"iban": {"$ref": iban}, "amount": {"$ref": "st/lines/0/amount"}},
                },
            ],
        }

    check(registry, policy, doc("st/lines/0/iban"))
    assert "untrusted" in refused(registry, policy, doc("st/lines/0/memo")).message
    refused(registry, policy, doc("st/notes/x"))
    # A policy file overrides the tool's own label.
    relaxed = policy.with_document(
        {"pte_policy": "1", "tools": {"statement": {"fields": {"/lines/*/memo": "trusted"}}}}
    )
    check(registry, relaxed, doc("st/lines/0/memo"))
    with pytest.raises(ValueError):
        provenance("request")  # type: ignore[arg-type]
