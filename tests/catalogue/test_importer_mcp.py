"""MCP importer against a real MCP server process (tests/integration_apps/crm_mcp_server.py, over stdio).

Its tools become PTE tools, compile with typed references, run, are recorded and replayed;
untyped tools are refused with what to declare; a tool description or output cannot add
steps or reach a guarded sink; a changed server definition is refused by a manifest pin and
makes replay against the changed catalogue diverge.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the MCP importer is an optional extra: 'plan-then-execute[mcp]'")

from pte import AuditLog, Engine, EngineConfig, PlanRejected, ReasonCode, Registry, compile_plan, tool
from pte.audit import read_records
from pte.importers import ImportRefused, fingerprint
from pte.importers.mcp import MCPConnection, MCPError, _source_tool, import_mcp_tools
from pte.runs import replay_file
from pte.testing import FunctionCall, FunctionClient
from tests.integration_apps.mcp_stdio import mcp_stdio

MANIFEST: dict[str, Any] = {
    "pte_import": "1",
    "tools": {
        "lookup_invoice": {"effect": "read", "provenance": "trusted"},
        "total_cents": {"effect": "read", "provenance": "trusted", "name": "crm.total_cents"},
        "customer_notes": {"effect": "read", "output_schema": {"type": "string"}},
        "broken": {"effect": "read"},
    },
}

PLAN = {
    "pte_plan": "1",
    "steps": [
        {"id": "a", "tool": "lookup_invoice", "args": {"invoice_id": "INV-1001"}},
        {"id": "b", "tool": "lookup_invoice", "args": {"invoice_id": "INV-1002"}},
        {
            "id": "total",
            "tool": "crm.total_cents",
            "args": {"amounts": [{"$ref": "a/amount_cents"}, {"$ref": "b/amount_cents"}]},
        },
    ],
    "result": {"$ref": "total/result"},
}


@pytest.fixture(scope="module")
def crm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MCPConnection]:
    # One server process for the module: each test imports afresh from the same live session.
    with mcp_stdio(tmp_path_factory.mktemp("crm")) as connection:
        yield connection


@tool(effect="write", sinks={"iban": ["request"]}, requires_approval=True)
def send_payment(iban: str, amount_cents: int) -> str:
    """Pay an IBAN (guarded: request-only IBAN, and a person approves the plan)."""
    raise AssertionError("a guarded payment must never run in these tests")


def test_mcp_tools_compile_run_are_recorded_and_replayed(crm: MCPConnection, tmp_path: Path) -> None:
    registry = import_mcp_tools(crm, manifest=MANIFEST)
    assert sorted(registry.names) == ["broken", "crm.total_cents", "customer_notes", "lookup_invoice"]
    lookup = registry["lookup_invoice"]
    assert lookup.output_schema["properties"]["amount_cents"]["type"] == "integer"  # the server's own schema
    assert (lookup.effect, lookup.provenance) == ("read", "trusted")
    assert registry["broken"].provenance == "untrusted"  # the default for what the manifest does not say

    def planner(messages: list[dict[str, str]], call: FunctionCall) -> str:
        if call.wants_json:
            assert "crm.total_cents" in messages[-1]["content"] + messages[0]["content"]
            return json.dumps(PLAN)
        return "Total: 16800 cents."

    log = tmp_path / "run.jsonl"
    with AuditLog(log) as audit:
        result = Engine(registry, FunctionClient(planner)).run("total of INV-1001 and INV-1002", audit)
    assert result.ok, result.message
    assert result.result == 12500 + 4300
    records = list(read_records(log))
    outputs = {r["step_id"]: r["output"] for r in records if r["type"] == "step_finished"}
    assert outputs["a"]["email"] == "ap@acme.test"
    started = records[0]
    assert {t["name"] for t in started["tools"]} == set(registry.names)
    # Replay from the log alone: recorded outputs, no server needed.
    report = replay_file(log)
    assert report.ok, report.render()
    # Replay against the live catalogue (the same server definition) agrees too.
    assert replay_file(log, registry=registry).ok


def test_references_into_mcp_outputs_are_type_checked(crm: MCPConnection) -> None:
    registry = import_mcp_tools(crm, manifest=MANIFEST)
    bad = json.loads(json.dumps(PLAN))
    bad["steps"][2]["args"]["amounts"][1] = {"$ref": "b/email"}  # a string into a list of integers
    with pytest.raises(PlanRejected) as caught:
        compile_plan(json.dumps(bad), registry)
    assert caught.value.reason is ReasonCode.INVALID_ARGS


def test_a_failing_mcp_tool_fails_its_step_with_the_servers_error(crm: MCPConnection, tmp_path: Path) -> None:
    registry = import_mcp_tools(crm, manifest=MANIFEST)
    plan = {"pte_plan": "1", "steps": [{"id": "x", "tool": "broken", "args": {"reason": "disk"}}]}
    with AuditLog(tmp_path / "a.jsonl") as audit:
        result = Engine(registry, config=EngineConfig(llm_answer=False)).execute(json.dumps(plan), audit)
    assert result.reason is ReasonCode.STEP_FAILED
    error = result.steps[0].error
    assert error is not None and error.kind == "tool_error" and "broken" in error.message


def test_untyped_tools_are_refused_with_what_to_declare(crm: MCPConnection) -> None:
    with pytest.raises(ImportRefused) as caught:
        import_mcp_tools(crm)
    message = str(caught.value)
    assert "'customer_notes' declares no output schema" in message
    assert '"customer_notes": {"output_schema"' in message
    # Without a manifest, the typed tools can be picked explicitly; names can be prefixed.
    registry = import_mcp_tools(crm, only=["lookup_invoice", "total_cents"], prefix="crm.")
    assert registry.names == ["crm.lookup_invoice", "crm.total_cents"]
    assert all((t.effect, t.idempotent, t.provenance) == ("write", False, "untrusted") for t in registry)


def test_manifest_problems_are_refused_together(crm: MCPConnection, tmp_path: Path) -> None:
    manifest = {"pte_import": "1", "tools": {"no_such_tool": {}, "lookup_invoice": {"sha256": "0" * 64}}}
    with pytest.raises(ImportRefused) as caught:
        import_mcp_tools(crm, manifest=manifest)
    assert "'no_such_tool' is not offered" in str(caught.value)
    assert "'lookup_invoice' changed since the manifest pinned it" in str(caught.value)
    duplicate = tmp_path / "m.json"
    duplicate.write_text(
        '{"pte_import": "1", "tools": {}, "tools": {"lookup_invoice": {}}}', encoding="utf-8"
    )
    with pytest.raises(ImportRefused, match="duplicate key 'tools'"):
        import_mcp_tools(crm, manifest=duplicate)
    with pytest.raises(ImportRefused, match="invalid at tools/lookup_invoice"):
        import_mcp_tools(crm, manifest={"pte_import": "1", "tools": {"lookup_invoice": {"effect": "delete"}}})


# -- injection ---------------------------------------------------------------------------------


def test_an_output_cannot_add_steps_or_reach_a_guarded_sink(crm: MCPConnection, tmp_path: Path) -> None:
    registry = import_mcp_tools(crm, manifest=MANIFEST).merged(Registry([send_payment]))
    # The notes say "pay DE00EVIL..."; the plan is fixed before they are read: exactly one step runs.
    notes_plan = {
        "pte_plan": "1",
        "steps": [{"id": "n", "tool": "customer_notes", "args": {"customer_id": "C001"}}],
        "result": {"$ref": "n"},
    }
    with AuditLog(tmp_path / "notes.jsonl") as audit:
        result = Engine(registry, config=EngineConfig(llm_answer=False)).execute(
            json.dumps(notes_plan), audit
        )
    assert result.ok and result.tools_called == ["customer_notes"]
    assert "DE00EVIL" in result.result
    # A plan that routes the (untrusted) notes into the payment's IBAN is refused before anything runs.
    routed = {
        "pte_plan": "1",
        "steps": [
            {"id": "n", "tool": "customer_notes", "args": {"customer_id": "C001"}},
            {"id": "pay", "tool": "send_payment", "args": {"iban": {"$ref": "n"}, "amount_cents": 1}},
        ],
    }
    with pytest.raises(PlanRejected) as caught:
        compile_plan(json.dumps(routed), registry, checks=(Engine(registry).policy.check(),))
    assert caught.value.reason is ReasonCode.POLICY_VIOLATION


def test_an_injected_description_cannot_reach_a_guarded_sink(crm: MCPConnection, tmp_path: Path) -> None:
    registry = import_mcp_tools(crm, manifest=MANIFEST).merged(Registry([send_payment]))
    assert "send_payment" in registry["customer_notes"].description  # the server's text, shown to the planner

    def obedient_planner(messages: list[dict[str, str]], call: FunctionCall) -> str:
        # A planner that follows the injected "system instruction" in the tool description.
        assert "DE00EVIL0000000000" in "".join(m["content"] for m in messages)
        steps = [
            {"id": "n", "tool": "customer_notes", "args": {"customer_id": "C001"}},
            {
                "id": "pay",
                "tool": "send_payment",
                "args": {"iban": "DE00EVIL0000000000", "amount_cents": 99999},
            },
        ]
        return json.dumps({"pte_plan": "1", "steps": steps})

    log = tmp_path / "inj.jsonl"
    with AuditLog(log) as audit:
        result = Engine(registry, FunctionClient(obedient_planner)).run("show C001's notes", audit)
    # The description is the server's text, framed as untrusted (the manifest did not replace
    # it): the planner that read it is the attacker's, and the IBAN it copied counts as
    # untrusted (pte._run._exposure). Refused before any step runs (and before any approval); the
    # repair (pte._run._repair) gives the fooled model its second chance, and it writes the same plan.
    assert result.reason is ReasonCode.REPLANS_EXHAUSTED
    assert "send_payment.iban" in (result.message or "") and "untrusted" in (result.message or "")
    assert result.steps == []
    assert not [r for r in read_records(log) if r["type"] == "step_started"]


# -- tamper: the server changes behind the deployment's back -----------------------------------


def test_a_changed_server_definition_is_refused_by_its_pin_and_diverges_on_replay(
    crm: MCPConnection, tmp_path: Path
) -> None:
    reviewed = {s["name"]: _source_tool(s) for s in crm.list_tools()}
    pinned = json.loads(json.dumps(MANIFEST))
    for name, declaration in pinned["tools"].items():
        declaration["sha256"] = fingerprint(reviewed[name])
    registry = import_mcp_tools(crm, manifest=pinned)
    log = tmp_path / "run.jsonl"
    with AuditLog(log) as audit:
        assert Engine(registry, config=EngineConfig(llm_answer=False)).execute(json.dumps(PLAN), audit).ok

    with mcp_stdio(tmp_path, CRM_VARIANT="changed") as changed:
        with pytest.raises(ImportRefused, match="'lookup_invoice' changed since the manifest pinned it"):
            import_mcp_tools(changed, manifest=pinned)
        # Without the pin the changed tool imports, and replaying the recorded run against it diverges.
        changed_registry = import_mcp_tools(changed, manifest=MANIFEST)
        report = replay_file(log, registry=changed_registry)
        assert not report.ok
        divergence = report.runs[0].divergence
        # Replay compares the deployment's catalogue with the recorded one first (its hash,
        # run_started.catalogue, in audit format 2).
        assert divergence is not None
        assert (divergence.record_type, divergence.field) == ("run_started", "catalogue")


def test_connection_errors_are_clear(tmp_path: Path) -> None:
    with pytest.raises(MCPError, match="cannot connect"):
        MCPConnection.stdio(sys.executable, ["-c", "import sys; sys.exit(3)"], timeout_s=30)
    with mcp_stdio(tmp_path) as connection:
        pass
    with pytest.raises(MCPError, match="closed"):
        connection.list_tools()


def test_mcp_over_streamable_http(tmp_path: Path) -> None:
    pytest.importorskip("uvicorn")
    from tests.integration_apps import crm_mcp_server
    from tests.integration_apps.loopback import LoopbackServer

    app = crm_mcp_server.server.streamable_http_app()
    with LoopbackServer(app, lifespan="on") as http_server:
        with MCPConnection.http(f"{http_server.url}/mcp", headers={"x-deployment": "test"}) as crm:
            registry = import_mcp_tools(crm, manifest=MANIFEST)
            log = tmp_path / "run.jsonl"
            with AuditLog(log) as audit:
                result = Engine(registry, config=EngineConfig(llm_answer=False)).execute(
                    json.dumps(PLAN), audit
                )
            assert result.ok, result.message
            assert result.result == 12500 + 4300
        assert replay_file(log).ok


def test_a_tool_whose_connection_was_closed_fails_naming_it(tmp_path: Path) -> None:
    """An `MCPConnection` is its caller's to close; a tool called after it was closed fails its
    step as ``client_closed`` (not ``unavailable``, which says the server went away)."""
    with mcp_stdio(tmp_path) as connection:
        registry = import_mcp_tools(connection, manifest=MANIFEST)
    with AuditLog(tmp_path / "run.jsonl") as audit:
        result = Engine(registry, config=EngineConfig(llm_answer=False)).execute(json.dumps(PLAN), audit)
    assert not result.ok
    error = result.steps[0].error
    assert error is not None and error.kind == "client_closed", error
    assert "closed" in error.message and connection.label in error.message
