"""An amount is ASCII digits: a model's ``"1\\u0660\\u0660"`` never pays 100.

Found in the review of #37: a `Decimal` parameter's schema carries the decimal-string pattern,
whose lookahead sent it to a Unicode-aware regex engine where ``\\d`` is any script's digit;
pydantic's `Decimal` then read ``"1\\u0660\\u0660"`` (ARABIC-INDIC zeros, which look like dots:
a person approving reads ``1..`` or ``1.00``) as 100, and paid it. A planner that has seen
untrusted data is the attacker's: such an amount is now refused at compile (``invalid_args``)
before anything runs, and an amount that arrives as data is refused by the executor's check of
the arguments before the tool (and its `Decimal` conversion) is reached. Fails before the fix.
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from pte import AuditLog, Engine, EngineConfig, ReasonCode, Registry, RunResult, tool, verify

# private: the pattern every Decimal parameter's schema carries
from pte._core import DECIMAL_STRING_PATTERN
from pte.audit import read_records
from pte.catalogue import ToolSpec
from pte.testing import ScriptedModel

PAID: list[tuple[str, Decimal]] = []


@tool(effect="write")
def pay_invoice(invoice_id: str, amount: Decimal) -> str:
    """Pay an invoice the given amount, in EUR."""
    PAID.append((invoice_id, amount))
    return f"paid {amount} EUR on {invoice_id}"


@tool
def amount_due_in_ledger(invoice_id: str) -> str:
    """The amount due on an invoice, as the ledger's import from the supplier wrote it."""
    return IN_LEDGER[invoice_id]


IN_LEDGER = {"INV-1001": "1\u0660\u0660", "INV-1002": "\uff11\uff10\uff10", "INV-1003": "100.00"}
REGISTRY = Registry([pay_invoice, amount_due_in_ledger])

#: ARABIC-INDIC zeros (they look like dots), FULLWIDTH digits, DEVANAGARI digits.
LOOKALIKE_AMOUNTS = ["1\u0660\u0660", "\uff11\uff10\uff10", "\u0967\u0966\u0966.\u0966\u0966"]


@pytest.fixture(autouse=True)
def _no_payments_yet() -> None:
    PAID.clear()


def _plan(amount: Any) -> dict[str, Any]:
    # As a model writes it: a descriptive id, the invoice and amount from the request.
    return {
        "pte_plan": "1",
        "steps": [
            {
                "id": "pay_the_overdue_invoice",
                "tool": "pay_invoice",
                "args": {"invoice_id": "INV-1001", "amount": amount},
            }
        ],
        "result": {"$ref": "pay_the_overdue_invoice"},
    }


def _run(model: ScriptedModel, tmp_path: Path) -> tuple[RunResult, list[dict[str, Any]]]:
    log = tmp_path / "run.jsonl"
    engine = Engine(REGISTRY, model, config=EngineConfig(llm_answer=False))
    with AuditLog(log) as audit:
        result = engine.run("Pay the overdue invoice INV-1001: 100 EUR.", audit)
    assert verify(log).ok
    return result, read_records(log)


@pytest.mark.parametrize("amount", LOOKALIKE_AMOUNTS)
def test_a_model_paying_an_amount_in_other_digits_is_refused_at_compile(amount: str, tmp_path: Path) -> None:
    plan = json.dumps(_plan(amount))
    result, records = _run(ScriptedModel(planner=[plan], repair=[plan]), tmp_path)
    assert result.status == "failed_closed", result
    rejected = [r for r in records if r["type"] == "plan_rejected"]
    assert [r["reason"] for r in rejected] == ["invalid_args", "invalid_args"]
    assert rejected[0]["path"] == "$.steps[0].args.amount"
    assert not any(r["type"] == "step_started" for r in records)
    assert PAID == []


def test_an_ascii_amount_still_pays(tmp_path: Path) -> None:
    result, _ = _run(ScriptedModel(planner=[json.dumps(_plan("100.00"))]), tmp_path)
    assert result.status == "succeeded", result
    assert [("INV-1001", Decimal("100.00"))] == PAID


@pytest.mark.parametrize(("invoice", "pays"), [("INV-1001", False), ("INV-1002", False), ("INV-1003", True)])
def test_an_amount_read_from_data_is_checked_before_the_tool_converts_it(
    invoice: str, pays: bool, tmp_path: Path
) -> None:
    # Compile cannot see a value read at run time (from a trusted tool: untrusted data could not
    # reach the amount at all): the executor checks the arguments against the schema before the
    # call, so pydantic's Decimal never sees an amount the pattern refused.
    plan = {
        "pte_plan": "1",
        "steps": [
            {"id": "amount_in_the_ledger", "tool": "amount_due_in_ledger", "args": {"invoice_id": invoice}},
            {
                "id": "pay_the_amount_due",
                "tool": "pay_invoice",
                "args": {"invoice_id": invoice, "amount": {"$ref": "amount_in_the_ledger"}},
            },
        ],
        "result": {"$ref": "pay_the_amount_due"},
    }
    log = tmp_path / "run.jsonl"
    with AuditLog(log) as audit:
        result = Engine(REGISTRY, config=EngineConfig(llm_answer=False)).execute(json.dumps(plan), audit)
    assert verify(log).ok
    if pays:
        assert result.status == "succeeded" and [(invoice, Decimal("100.00"))] == PAID
        return
    assert (result.status, result.reason) == ("failed_closed", ReasonCode.STEP_FAILED) and PAID == []
    failed = [r for r in read_records(log) if r["type"] == "step_finished" and r["status"] != "ok"]
    assert [(r["step_id"], r["error"]["kind"]) for r in failed] == [("pay_the_amount_due", "invalid_args")]
    assert "does not match" in failed[0]["error"]["message"]


def test_the_catalogue_rebuilt_from_a_log_reads_the_pattern_alike() -> None:
    # Replay rebuilds each tool from its run_started entry (`ToolSpec.from_record`): the entry
    # keeps the pattern as written, and the rebuilt validators read it as ECMA-262 too.
    entry = REGISTRY["pay_invoice"].describe()
    assert entry["input_schema"]["properties"]["amount"]["anyOf"][1]["pattern"] == DECIMAL_STRING_PATTERN
    rebuilt = ToolSpec.from_record(json.loads(json.dumps(entry)))
    for amount in LOOKALIKE_AMOUNTS:
        assert rebuilt.args_error({"invoice_id": "INV-1001", "amount": amount}) is not None
        assert not rebuilt.param_is_valid("amount", amount)
    assert rebuilt.args_error({"invoice_id": "INV-1001", "amount": "100.00"}) is None
