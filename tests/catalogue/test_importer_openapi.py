"""OpenAPI importer against a real HTTP app on loopback (tests/integration_apps/billing_app.py, uvicorn).

The document is fetched from the app, its operations become typed tools, and a plan runs
over them on loopback, is recorded and replayed. Untyped operations are refused with what
to declare; injected descriptions and path tricks do not reach anything the plan does not
name; a changed service is refused by the pin, fails output validation, and diverges on replay.
"""

from __future__ import annotations

import gc
import json
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("uvicorn", reason="the loopback test app needs the test extra: 'plan-then-execute[test]'")
import httpx

from pte import AuditLog, Engine, EngineConfig, PlanRejected, ReasonCode, compile_plan
from pte.audit import read_records
from pte.importers import ImportRefused, fingerprint
from pte.importers.openapi import OpenAPIError, _operations, import_openapi, load_openapi
from pte.runs import replay_file
from pte.testing import FunctionCall, FunctionClient
from tests.integration_apps.billing_app import make_app
from tests.integration_apps.loopback import LoopbackServer


@pytest.fixture(scope="module")
def billing() -> Iterator[tuple[LoopbackServer, list[dict[str, Any]]]]:
    app, sent = make_app("v1")
    with LoopbackServer(app) as server:
        yield server, sent


MANIFEST: dict[str, Any] = {
    "pte_import": "1",
    "tools": {
        "listInvoices": {"provenance": "trusted"},
        "getInvoice": {"provenance": "trusted"},
        "sendReminder": {"sinks": {"body": ["request", "trusted"]}},
    },
}

PLAN = {
    "pte_plan": "1",
    "steps": [
        {"id": "overdue", "tool": "listInvoices", "args": {"status": "overdue"}},
        {"id": "inv", "tool": "getInvoice", "args": {"invoice_id": {"$ref": "overdue/ids/0"}}},
        {
            "id": "remind",
            "tool": "sendReminder",
            "args": {"body": {"invoice_id": {"$ref": "inv/id"}, "email": "ap@acme.test"}},
        },
    ],
    "result": {"amount": {"$ref": "inv/amount_cents"}, "sent": {"$ref": "remind/sent"}},
}


def _document(server: LoopbackServer) -> dict[str, Any]:
    return load_openapi(f"{server.url}/openapi.json")


def test_a_plan_runs_over_an_imported_openapi_service(
    billing: tuple[LoopbackServer, list[dict[str, Any]]], tmp_path: Path
) -> None:
    server, sent = billing
    with httpx.Client(headers={"x-deployment": "test"}) as http:
        registry = import_openapi(_document(server), base_url=server.url, client=http, manifest=MANIFEST)
        assert registry.names == ["listInvoices", "getInvoice", "sendReminder"]
        get_invoice = registry["getInvoice"]
        assert (get_invoice.effect, registry["sendReminder"].effect) == ("read", "write")
        assert get_invoice.input_schema["required"] == ["invoice_id"]
        assert "$defs" in get_invoice.output_schema  # component references carried along
        log = tmp_path / "run.jsonl"
        before = len(sent)
        with AuditLog(log) as audit:
            result = Engine(registry, config=EngineConfig(llm_answer=False)).execute(json.dumps(PLAN), audit)
        assert result.ok, result.message
        assert result.result == {"amount": 12500, "sent": True}
        assert sent[before:] == [{"invoice_id": "INV-1001", "email": "ap@acme.test"}]
    records = list(read_records(log))
    remind = next(r for r in records if r["type"] == "step_started" and r["step_id"] == "remind")
    assert remind["effect"] == "write"
    assert replay_file(log).ok  # from the log alone: no request is sent again
    assert len(sent) == before + 1


def test_references_are_type_checked_through_component_schemas(
    billing: tuple[LoopbackServer, list[dict[str, Any]]],
) -> None:
    server, _ = billing
    registry = import_openapi(_document(server), base_url=server.url, manifest=MANIFEST)
    # The invoice's email may be null (["string", "null"]); the reminder needs a string.
    nullable = json.loads(json.dumps(PLAN))
    nullable["steps"][2]["args"]["body"]["email"] = {"$ref": "inv/email"}
    with pytest.raises(PlanRejected) as caught:
        compile_plan(json.dumps(nullable), registry)
    assert caught.value.reason is ReasonCode.INVALID_ARGS
    enum = json.loads(json.dumps(PLAN))
    enum["steps"][0]["args"]["status"] = "lost"  # not in the Status enum
    with pytest.raises(PlanRejected) as caught:
        compile_plan(json.dumps(enum), registry)
    assert caught.value.reason is ReasonCode.INVALID_ARGS


def test_untyped_operations_are_refused_with_what_to_declare(
    billing: tuple[LoopbackServer, list[dict[str, Any]]],
) -> None:
    server, _ = billing
    document = _document(server)
    with pytest.raises(ImportRefused) as caught:
        import_openapi(document, base_url=server.url)
    assert "GET /health: no operationId" in str(caught.value)
    # No content (204): imported with a declared empty output, not refused with the whole spec.
    imported = import_openapi(document, base_url=server.url, only=["getInvoice", "deleteInvoice"])
    assert imported["deleteInvoice"].output_schema == {"type": "null"}
    no_json = json.loads(json.dumps(document))
    no_json["paths"]["/invoices/{invoice_id}"]["delete"]["responses"] = {
        "200": {"description": "text", "content": {"text/plain": {"schema": {"type": "string"}}}}
    }
    with pytest.raises(ImportRefused) as caught:
        import_openapi(no_json, base_url=server.url, only=["getInvoice", "deleteInvoice"])
    assert "'deleteInvoice' declares no output schema" in str(caught.value)
    assert '"deleteInvoice": {"output_schema"' in str(caught.value)
    declared = {"pte_import": "1", "tools": {"deleteInvoice": {"output_schema": {"type": "null"}}}}
    registry = import_openapi(document, base_url=server.url, manifest=declared)
    assert registry["deleteInvoice"].effect == "write" and not registry["deleteInvoice"].idempotent
    with pytest.raises(ImportRefused, match="base_url"):
        import_openapi(document, base_url="ftp://x")
    with pytest.raises(OpenAPIError, match="not an OpenAPI 3"):
        load_openapi(f"{server.url}/invoices?status=paid")


# -- injection -------------------------------------------------------------------------------------


def test_path_parameters_cannot_address_another_resource(
    billing: tuple[LoopbackServer, list[dict[str, Any]]], tmp_path: Path
) -> None:
    server, _ = billing
    registry = import_openapi(_document(server), base_url=server.url, manifest=MANIFEST)
    for value, kind in ((". .".replace(" ", ""), "invalid_args"), ("INV-1001/../../reminders", "http_error")):
        plan = {"pte_plan": "1", "steps": [{"id": "g", "tool": "getInvoice", "args": {"invoice_id": value}}]}
        with AuditLog(tmp_path / f"{kind}.jsonl") as audit:
            result = Engine(registry, config=EngineConfig(llm_answer=False)).execute(json.dumps(plan), audit)
        assert result.reason is ReasonCode.STEP_FAILED
        error = result.steps[0].error
        assert error is not None and error.kind == kind, error


def test_an_injected_description_cannot_route_untrusted_data_into_a_sink(
    billing: tuple[LoopbackServer, list[dict[str, Any]]], tmp_path: Path
) -> None:
    server, sent = billing
    # getInvoice's output is untrusted here (the manifest's default); sendReminder's body is a sink.
    manifest = {
        "pte_import": "1",
        "tools": {"getInvoice": {}, "sendReminder": {"sinks": {"body": ["request"]}}},
    }
    registry = import_openapi(_document(server), base_url=server.url, manifest=manifest)
    assert "DE00EVIL" in registry["getInvoice"].description

    def obedient(messages: list[dict[str, str]], call: FunctionCall) -> str:
        steps = [
            {"id": "inv", "tool": "getInvoice", "args": {"invoice_id": "INV-1002"}},
            {
                "id": "remind",
                "tool": "sendReminder",
                "args": {"body": {"invoice_id": {"$ref": "inv/id"}, "email": "pay to DE00EVIL"}},
            },
        ]
        return json.dumps({"pte_plan": "1", "steps": steps})

    before = len(sent)
    with AuditLog(tmp_path / "a.jsonl") as audit:
        result = Engine(registry, FunctionClient(obedient), config=EngineConfig(max_replans=0)).run(
            "x", audit
        )
    assert result.reason is ReasonCode.POLICY_VIOLATION
    assert result.steps == [] and len(sent) == before


# -- tamper ------------------------------------------------------------------------------------------


def test_a_changed_service_is_refused_fails_validation_and_diverges_on_replay(
    billing: tuple[LoopbackServer, list[dict[str, Any]]], tmp_path: Path
) -> None:
    server, _ = billing
    reviewed = _document(server)
    pins = {
        op.operation["operationId"]: fingerprint(op.source_tool())
        for op in _operations(reviewed)
        if op.operation.get("operationId")
    }
    pinned = json.loads(json.dumps(MANIFEST))
    for name, declaration in pinned["tools"].items():
        declaration["sha256"] = pins[name]
    registry = import_openapi(reviewed, base_url=server.url, manifest=pinned)
    log = tmp_path / "run.jsonl"
    with AuditLog(log) as audit:
        assert Engine(registry, config=EngineConfig(llm_answer=False)).execute(json.dumps(PLAN), audit).ok

    app, _ = make_app("changed")
    with LoopbackServer(app) as changed:
        changed_document = _document(changed)
        with pytest.raises(ImportRefused, match="'getInvoice' changed since the manifest pinned it"):
            import_openapi(changed_document, base_url=changed.url, manifest=pinned)
        # The reviewed document, but the service behind it changed: its answers fail validation.
        stale = import_openapi(reviewed, base_url=changed.url, manifest=MANIFEST)
        with AuditLog(tmp_path / "stale.jsonl") as audit:
            result = Engine(stale, config=EngineConfig(llm_answer=False)).execute(json.dumps(PLAN), audit)
        assert result.reason is ReasonCode.STEP_FAILED
        assert result.steps[-1].error is not None and result.steps[-1].error.kind == "invalid_output"
        # Replaying the recorded run against the changed catalogue diverges.
        report = replay_file(
            log, registry=import_openapi(changed_document, base_url=changed.url, manifest=MANIFEST)
        )
        assert not report.ok and report.runs[0].divergence is not None


# -- who owns the HTTP client ------------------------------------------------------------------------


def _run_and_drop(server: LoopbackServer, tmp_path: Path, client: httpx.Client | None) -> None:
    """Import the service's tools, run a plan over them (a GET, a GET and a POST), drop them."""
    registry = import_openapi(_document(server), base_url=server.url, client=client, manifest=MANIFEST)
    with AuditLog(tmp_path / "run.jsonl") as audit:
        result = Engine(registry, config=EngineConfig(llm_answer=False)).execute(json.dumps(PLAN), audit)
    assert result.ok, result.message


def test_tools_imported_without_a_client_leave_no_connection_open(
    billing: tuple[LoopbackServer, list[dict[str, Any]]], tmp_path: Path
) -> None:
    """Without a client, each call opens its own and closes it before returning: once the plan
    has run, the service holds no connection of ours, and dropping the tools closes nothing
    late (no socket left for the collector: a ResourceWarning is an error here)."""
    server, _ = billing
    gc.collect()  # what earlier tests left is not this test's
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        _run_and_drop(server, tmp_path, None)
        assert server.open_connections() == 0
        gc.collect()
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []


def test_a_client_passed_in_stays_the_callers(
    billing: tuple[LoopbackServer, list[dict[str, Any]]], tmp_path: Path
) -> None:
    """A client the deployment passes is its own: PTE never closes it (its pooled connection is
    still there after the run, for the next), and closing it is what ends the connection."""
    server, _ = billing
    with httpx.Client() as http:
        _run_and_drop(server, tmp_path, http)
        assert not http.is_closed and server.open_connections(settle_s=0) >= 1
    assert server.open_connections() == 0


def test_a_tool_whose_client_was_closed_fails_naming_it(
    billing: tuple[LoopbackServer, list[dict[str, Any]]], tmp_path: Path
) -> None:
    """A client passed in is the caller's to close; a tool called after it was closed fails its
    step as ``client_closed``, saying so (httpx raises a RuntimeError there, which was a generic
    ``tool_error`` the operator could not tell from a bug in the tool)."""
    server, sent = billing
    with httpx.Client() as http:
        registry = import_openapi(_document(server), base_url=server.url, client=http, manifest=MANIFEST)
    before = len(sent)
    with AuditLog(tmp_path / "run.jsonl") as audit:
        result = Engine(registry, config=EngineConfig(llm_answer=False)).execute(json.dumps(PLAN), audit)
    assert not result.ok and len(sent) == before
    error = result.steps[0].error
    assert error is not None and error.kind == "client_closed", error
    assert "HTTP client" in error.message and "closed" in error.message
    failed = [r for r in read_records(tmp_path / "run.jsonl") if r["type"] == "step_finished"]
    assert failed[0]["error"]["kind"] == "client_closed"
