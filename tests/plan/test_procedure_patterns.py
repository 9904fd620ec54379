"""A procedure's parameter pattern reads ``\\d`` as ECMA-262's ``[0-9]``.

Found in the review of #37: compile checked a procedure call's literal arguments with
`jsonschema`'s own validator, which runs a `pattern` on Python's `re`, where ``\\d`` takes every
script's digits (and backtracks). A procedure whose ``amount`` is ``^\\d+$`` and whose body
hands it to a tool typed only ``string`` took ``"1\\u0660\\u0660"`` (the zeros look like dots).
It is now refused (``invalid_args``); ``"100"`` still compiles. Fails before the fix.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from pte import PlanRejected, ReasonCode, Registry, compile_plan, tool
from pte.plan import Procedure, load_procedures


@tool(effect="write")
def transfer(account: str, amount: str) -> str:
    """Transfer an amount (whole euros, as text) to an account."""
    return f"sent {amount} to {account}"


PAY_RENT: dict[str, Any] = {
    "pte_procedure": "1",
    "name": "pay_rent",
    "description": "Pay the month's rent, in whole euros.",
    "parameters": {
        "type": "object",
        "properties": {"amount": {"type": "string", "pattern": "^\\d+$"}},
        "required": ["amount"],
    },
    "plan": {
        "pte_plan": "1",
        "steps": [
            {
                "id": "send_rent",
                "tool": "transfer",
                "args": {"account": "landlord", "amount": {"$param": "amount"}},
            }
        ],
        "result": {"$ref": "send_rent"},
    },
}

BASE = Registry([transfer])
REGISTRY = BASE.with_procedures(load_procedures([Procedure.from_document(PAY_RENT)], BASE))


def _plan(amount: str) -> str:
    call = {"id": "pay_this_months_rent", "tool": "pay_rent", "args": {"amount": amount}}
    return json.dumps({"pte_plan": "1", "steps": [call], "result": {"$ref": "pay_this_months_rent"}})


@pytest.mark.parametrize("amount", ["1\u0660\u0660", "\uff11\uff10\uff10", "\u0967\u0966\u0966"])
def test_a_procedure_argument_in_other_digits_is_invalid(amount: str) -> None:
    with pytest.raises(PlanRejected) as caught:
        compile_plan(_plan(amount), REGISTRY)
    assert caught.value.reason is ReasonCode.INVALID_ARGS
    assert "amount" in caught.value.message


def test_an_ascii_procedure_argument_compiles() -> None:
    assert compile_plan(_plan("100"), REGISTRY).order
