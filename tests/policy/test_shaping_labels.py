"""Cookbook: field labels survive the stock shaping operations (pte._policy._shaping_labels).

The bank's policy labels a transaction's subject ``untrusted`` (a third party wrote it) and
the rest ``trusted``. After pluck / sort / filter / first, an amount or IBAN taken from the
user's own trusted fields still reaches a guarded sink, while the subject cannot, and a
subject that decided *which* record was taken taints everything selected from it.
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import pte
from pte import PlanRejected, Policy, ReasonCode, Registry, compile_plan, load_registry, verify
from pte.audit import hash_json
from pte.runs import replay_file
from tests.audit.test_audit_samples import _rehash
from tests.e2e.test_cookbook_control import BANK_POLICY, Task, plan, rows
from tests.packs import world

TX = {"id": "tx", "tool": "transactions", "args": {"n": 5}}
SORTED = {
    "id": "by_date",
    "tool": "sort_records",
    "args": {"records": {"$ref": "tx/transactions"}, "by": "date", "descending": True},
}
LATEST = {"id": "latest", "tool": "first", "args": {"records": {"$ref": "by_date/records"}}}


@pytest.fixture
def registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Registry:
    db = tmp_path / "world.sqlite"
    world.reset(str(db))
    monkeypatch.setenv("PTE_WORLD", str(db))
    return load_registry([str(Path(world.__file__)), "shaping"])


def pay(iban: Any, amount: Any, subject: Any = "Paid again") -> dict[str, Any]:
    return {"id": "pay", "tool": "send_money", "args": {"iban": iban, "amount": amount, "subject": subject}}


def _check(registry: Registry) -> Any:
    return Policy.from_registry(registry).with_document(BANK_POLICY).check()


def refused(registry: Registry, doc: dict[str, Any]) -> str:
    with pytest.raises(PlanRejected) as caught:
        compile_plan(json.dumps(doc), registry, checks=[_check(registry)])
    assert caught.value.reason is ReasonCode.POLICY_VIOLATION
    return caught.value.message


def test_pay_again_the_latest_transaction_after_sort_and_first(registry: Registry, tmp_path: Path) -> None:
    doc = plan(
        TX,
        SORTED,
        LATEST,
        pay(
            {"$ref": "latest/record/iban"},
            {"$ref": "latest/record/amount"},
            {"$ref": "latest/record/subject"},
        ),
        result={"$ref": "pay/id"},
    )
    task = Task(registry, tmp_path, "Pay my most recent transfer again.", doc)
    assert task.status == "succeeded", task.result.message
    assert rows("SELECT iban, amount, subject FROM payments") == [
        ("DE02100100100006820101", "19.99", "Music subscription")
    ]
    # The literals "date" / true chose the order: the request's; the fields keep their own labels.
    assert task.labels(doc, "latest/record/amount") == {"trusted", "request"}
    assert task.labels(doc, "latest/record/iban") == {"trusted", "request"}
    assert task.labels(doc, "latest/record/subject") == {"trusted", "untrusted", "request"}


def test_the_subject_after_shaping_cannot_reach_a_guarded_sink(registry: Registry) -> None:
    doc = plan(TX, SORTED, LATEST, pay({"$ref": "latest/record/subject"}, {"$ref": "latest/record/amount"}))
    assert "send_money.iban" in refused(registry, doc) and "untrusted" in refused(registry, doc)


def test_a_plucked_amount_column_reaches_the_amount_sink_but_a_subject_column_does_not(
    registry: Registry, tmp_path: Path
) -> None:
    amounts = {
        "id": "amounts",
        "tool": "pluck",
        "args": {"records": {"$ref": "tx/transactions"}, "field": "amount"},
    }
    ibans = {
        "id": "ibans",
        "tool": "pluck",
        "args": {"records": {"$ref": "tx/transactions"}, "field": "iban"},
    }
    doc = plan(TX, amounts, ibans, pay({"$ref": "ibans/values/0"}, {"$ref": "amounts/values/0"}))
    task = Task(registry, tmp_path, "Pay my last transfer again.", doc)
    assert task.status == "succeeded", task.result.message
    assert rows("SELECT iban, amount FROM payments") == [("DE02100100100006820101", "19.99")]
    assert task.labels(doc, "amounts/values/0") == {"trusted", "request"}
    subjects = {
        "id": "subjects",
        "tool": "pluck",
        "args": {"records": {"$ref": "tx/transactions"}, "field": "subject"},
    }
    bad = plan(TX, amounts, subjects, pay({"$ref": "subjects/values/1"}, {"$ref": "amounts/values/1"}))
    assert "send_money.iban" in refused(registry, bad)


def test_a_record_chosen_by_its_untrusted_subject_taints_what_is_taken_from_it(registry: Registry) -> None:
    # "Pay again whatever my transaction saying 'rent' was": the subject decides which amount.
    by_subject = {
        "id": "rent",
        "tool": "filter_records",
        "args": {
            "records": {"$ref": "tx/transactions"},
            "field": "subject",
            "op": "contains",
            "value": "Rent",
        },
    }
    chosen = {"id": "chosen", "tool": "first", "args": {"records": {"$ref": "rent/records"}}}
    doc = plan(TX, by_subject, chosen, pay("DE89370400440532013000", {"$ref": "chosen/record/amount"}))
    message = refused(registry, doc)
    assert "send_money.amount" in message and "untrusted" in message
    # The same choice made on a trusted field (the IBAN) is fine.
    by_iban = {
        "id": "rent",
        "tool": "filter_records",
        "args": {
            "records": {"$ref": "tx/transactions"},
            "field": "iban",
            "op": "eq",
            "value": "DE89370400440532013000",
        },
    }
    ok = plan(TX, by_iban, chosen, pay("DE89370400440532013000", {"$ref": "chosen/record/amount"}))
    compile_plan(json.dumps(ok), registry, checks=[_check(registry)])


def test_a_field_named_by_reference_stands_for_every_field(registry: Registry) -> None:
    column = {
        "id": "col",
        "tool": "pluck_numbers",
        "args": {"records": {"$ref": "tx/transactions"}, "field": {"$ref": "tx/transactions/0/subject"}},
    }
    doc = plan(TX, column, pay("DE89370400440532013000", {"$ref": "col/values/0"}))
    assert "send_money.amount" in refused(registry, doc)


class Column(BaseModel):
    values: list[Decimal]
    count: int


@pte.tool(name="pluck", provenance="derived")
def lookalike(records: list[dict[str, Any]], field: str) -> Column:
    """Named like the stock pluck, but not its code: it could return any field."""
    return Column(values=[Decimal(str(r.get(field, 0))) for r in records], count=len(records))


def test_a_lookalike_shaping_tool_keeps_the_union(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A tool named pluck that is not the stock code gets no field precision: the union."""
    db = tmp_path / "world.sqlite"
    world.reset(str(db))
    monkeypatch.setenv("PTE_WORLD", str(db))
    registry = load_registry([str(Path(world.__file__))])
    registry.register(lookalike)
    amounts = {
        "id": "amounts",
        "tool": "pluck",
        "args": {"records": {"$ref": "tx/transactions"}, "field": "amount"},
    }
    doc = plan(TX, amounts, pay("DE89370400440532013000", {"$ref": "amounts/values/0"}))
    assert "send_money.amount" in refused(registry, doc)
    # The stock pluck, in the same plan, passes: the difference is the code, not the name.
    stock = load_registry([str(Path(world.__file__)), "shaping"])
    compile_plan(json.dumps(doc), stock, checks=[_check(stock)])


def test_a_log_that_passes_off_another_tool_as_the_stock_one_does_not_replay(
    registry: Registry, tmp_path: Path
) -> None:
    """Field precision follows the recorded declaration: a re-chained log whose `first` has no
    selection in its output schema (and claims other code) replays to a refused plan, a
    divergence, not to the recorded payment."""
    doc = plan(TX, SORTED, LATEST, pay({"$ref": "latest/record/iban"}, {"$ref": "latest/record/amount"}))
    task = Task(registry, tmp_path, "Pay my most recent transfer again.", doc)
    assert task.status == "succeeded", task.result.message
    records = [dict(r) for r in task.records]
    started = records[0]
    # Format 2: the catalogue is stored once, by its hash; a coherent forgery rewrites both.
    catalogue = [
        {
            **t,
            "code_sha256": "0" * 64,
            "output_schema": {k: v for k, v in t["output_schema"].items() if k != "x-pte-selection"},
        }
        if t["name"] == "first"
        else t
        for t in started["stored"].pop(started["catalogue"])
    ]
    started["catalogue"] = hash_json(catalogue)
    started["stored"][started["catalogue"]] = catalogue
    forged = next(t for t in catalogue if t["name"] == "first")
    for entry in started["tools"]:
        if entry["name"] == "first":  # the fingerprint's schema hash, rewritten to match
            entry["schema_hash"] = hash_json(
                {"input_schema": forged["input_schema"], "output_schema": forged["output_schema"]}
            )
    edited = tmp_path / "edited.jsonl"
    _rehash(records, edited)
    assert verify(edited).intact
    report = replay_file(edited)
    assert not report.ok
    assert "policy_violation" in json.dumps(report.to_dict())
