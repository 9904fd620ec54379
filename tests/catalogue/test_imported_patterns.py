"""An imported schema's ``\\d`` is ECMA-262's ``[0-9]``: a payment service on loopback.

Found in the review of #37: an OpenAPI document (a third party's) types an amount as
``{"type": "string", "pattern": "^\\\\d+$"}``; the compiled validator read a pattern with a
lookahead on a Unicode-aware engine, where ``\\d`` takes every script's digits, so a plan paying
``"1\\u0660\\u0660"`` (ARABIC-INDIC zeros look like dots to the person approving it) was sent to
the service, which may well read it as 100. Now refused at compile (``invalid_args``), nothing
sent; ``"100"`` still pays. Fails before the fix.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("uvicorn", reason="the loopback test app needs the test extra: 'plan-then-execute[test]'")
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from pte import AuditLog, Engine, EngineConfig, PlanRejected, ReasonCode, compile_plan
from pte.audit import read_records
from pte.importers import ImportRefused
from pte.importers.openapi import import_openapi
from tests.integration_apps.loopback import LoopbackServer

#: The service's own pattern. With a lookahead (as pydantic's decimal pattern has), jsonschema-rs
#: used to hand it to fancy-regex untranslated; the plain one it translated itself.
PATTERNS = ["^(?!0)\\d+$", "^\\d+$"]


def _document(pattern: str) -> dict[str, Any]:
    amount = {"type": "string", "pattern": pattern, "description": "Whole euros."}
    body = {
        "type": "object",
        "properties": {"invoice_id": {"type": "string"}, "amount": amount},
        "required": ["invoice_id", "amount"],
        "additionalProperties": False,
    }
    paid = {"type": "object", "properties": {"paid": {"type": "string"}}, "required": ["paid"]}
    operation = {
        "operationId": "createPayment",
        "summary": "Pay an invoice.",
        "requestBody": {"required": True, "content": {"application/json": {"schema": body}}},
        "responses": {"201": {"description": "paid", "content": {"application/json": {"schema": paid}}}},
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "payments", "version": "1"},
        "paths": {"/payments": {"post": operation}},
    }


@pytest.fixture(scope="module")
def payments() -> Iterator[tuple[LoopbackServer, list[dict[str, Any]]]]:
    received: list[dict[str, Any]] = []

    async def create_payment(request: Request) -> JSONResponse:
        body = await request.json()
        received.append(body)
        return JSONResponse({"paid": body["amount"]}, status_code=201)

    with LoopbackServer(Starlette(routes=[Route("/payments", create_payment, methods=["POST"])])) as server:
        yield server, received


def _plan(amount: str) -> str:
    # As a model writes it: a descriptive id, the invoice and amount from the request.
    pay = {
        "id": "pay_invoice_inv_1001",
        "tool": "createPayment",
        "args": {"body": {"invoice_id": "INV-1001", "amount": amount}},
    }
    return json.dumps({"pte_plan": "1", "steps": [pay], "result": {"$ref": "pay_invoice_inv_1001"}})


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("amount", ["1\u0660\u0660", "\uff11\uff10\uff10", "\u0967\u0966\u0966"])
def test_an_imported_digit_pattern_refuses_other_scripts_digits(
    payments: tuple[LoopbackServer, list[dict[str, Any]]], pattern: str, amount: str
) -> None:
    server, received = payments
    registry = import_openapi(_document(pattern), base_url=server.url)
    before = len(received)
    with pytest.raises(PlanRejected) as caught:
        compile_plan(_plan(amount), registry)
    assert caught.value.reason is ReasonCode.INVALID_ARGS
    assert caught.value.path == "$.steps[0].args.body.amount"
    log = AuditLog()
    result = Engine(registry, config=EngineConfig(llm_answer=False)).execute(_plan(amount), log)
    assert (result.status, result.reason) == ("failed_closed", ReasonCode.INVALID_ARGS)
    assert not any(r["type"] == "step_started" for r in log.records)
    assert len(received) == before  # nothing reached the service
    # What the catalogue shows a planner keeps the service's pattern as written.
    assert (
        registry["createPayment"].input_schema["properties"]["body"]["properties"]["amount"]["pattern"]
        == pattern
    )


@pytest.mark.parametrize("pattern", PATTERNS)
def test_an_ascii_amount_still_pays_the_service(
    payments: tuple[LoopbackServer, list[dict[str, Any]]], pattern: str, tmp_path: Any
) -> None:
    server, received = payments
    registry = import_openapi(_document(pattern), base_url=server.url)
    with AuditLog(tmp_path / "run.jsonl") as log:
        result = Engine(registry, config=EngineConfig(llm_answer=False)).execute(_plan("100"), log)
    assert result.status == "succeeded", result.message
    assert received[-1] == {"invoice_id": "INV-1001", "amount": "100"}
    assert [r["type"] for r in read_records(tmp_path / "run.jsonl")].count("step_finished") == 1


def test_a_pattern_the_compiled_validator_cannot_read_refuses_the_import_naming_it(
    payments: tuple[LoopbackServer, list[dict[str, Any]]],
) -> None:
    # ``\d{,3}`` is a pattern to Python's `re` (the schema check) but not to jsonschema-rs: the
    # import is refused naming the operation, not ended by the validator's own exception.
    server, _ = payments
    with pytest.raises(ImportRefused) as caught:
        import_openapi(_document("^\\d{,3}$"), base_url=server.url)
    assert "createPayment" in str(caught.value) and "cannot be compiled" in str(caught.value)
