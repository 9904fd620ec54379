"""What a deployment's importer specs hold open (``mcp:`` sessions and their server processes,
``openapi:`` HTTP clients) is closed when the process exits, by the import table that owns it:
no socket is left to the garbage collector (a ResourceWarning, an error here), no traceback, no
hang, and the MCP server sees its session closed by a live client, not by the client's death.

The process imports over real loopback services: the billing app (HTTP, uvicorn) and the CRM MCP
server (tests/integration_apps/crm_mcp_server.py, over stdio, started by the spec).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import pte

pytest.importorskip("uvicorn", reason="the loopback test app needs the test extra: 'plan-then-execute[test]'")
pytest.importorskip("mcp", reason="the MCP importer is an optional extra: 'plan-then-execute[mcp]'")

from tests._cli_run import make_deployment
from tests.integration_apps.billing_app import make_app
from tests.integration_apps.loopback import LoopbackServer
from tests.integration_apps.mcp_stdio import CRM_SERVER

#: A process that imports both specs, calls a tool of each (a pooled connection, a live
#: session) and exits without closing anything itself.
CHILD = """
import json, sys

import pte
# private: the deployment area's import table, as a deployment's `tools` use it
from pte._deploy import import_spec

billing, crm = import_spec(sys.argv[1]), import_spec(sys.argv[2])
plan = {
    "pte_plan": "1",
    "steps": [
        {"id": "inv", "tool": "getInvoice", "args": {"invoice_id": "INV-1001"}},
        {"id": "crm", "tool": "lookup_invoice", "args": {"invoice_id": "INV-1002"}},
    ],
    "result": [{"$ref": "inv/amount_cents"}, {"$ref": "crm/amount_cents"}],
}
registry = pte.Registry([billing["getInvoice"], crm["lookup_invoice"]])
with pte.AuditLog() as audit:
    result = pte.Engine(registry, config=pte.EngineConfig(llm_answer=False)).execute(json.dumps(plan), audit)
print(json.dumps(result.result))
"""


PLAN = {
    "pte_plan": "1",
    "steps": [
        {"id": "inv", "tool": "getInvoice", "args": {"invoice_id": "INV-1001"}},
        {"id": "crm", "tool": "lookup_invoice", "args": {"invoice_id": "INV-1002"}},
    ],
    "result": [{"$ref": "inv/amount_cents"}, {"$ref": "crm/amount_cents"}],
}


def _run(registry: pte.Registry) -> pte.RunResult:
    engine = pte.Engine(registry, config=pte.EngineConfig(llm_answer=False))
    with pte.AuditLog() as audit:
        return engine.execute(json.dumps(PLAN), audit)


@pytest.fixture(scope="module")
def billing() -> Iterator[LoopbackServer]:
    app, _ = make_app("v1")
    with LoopbackServer(app) as server:
        yield server


def test_a_process_that_imported_specs_closes_them_at_exit(billing: LoopbackServer, tmp_path: Path) -> None:
    exit_file = tmp_path / "crm-exit.json"
    crm = f"mcp:{shlex.join([sys.executable, str(CRM_SERVER), '--exit-file', str(exit_file)])}#lookup_invoice"
    openapi = f"openapi:{billing.url}/openapi.json#getInvoice"
    done = subprocess.run(
        [sys.executable, "-W", "error::ResourceWarning", "-c", CHILD, openapi, crm],
        capture_output=True,
        text=True,
        timeout=120,  # a backstop: a hang at exit fails here
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert (done.returncode, json.loads(done.stdout or "null")) == (0, [12500, 4300]), done.stderr
    for sign in ("Traceback", "Exception ignored", "ResourceWarning", "unclosed"):
        assert sign not in done.stderr, done.stderr
    assert billing.open_connections() == 0
    # The server's session was closed by the client, which waited for it to end: the server
    # exited while its parent was alive (not left to find its stdin gone after the parent died).
    assert json.loads(exit_file.read_text(encoding="utf-8")) == {"parent_alive": True}


def test_closing_a_deployment_closes_what_its_imports_hold(
    billing: LoopbackServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`pte.Deployment` as a context manager: leaving it (or `close()`) ends its specs' MCP
    sessions and closes their HTTP clients, so their tools fail as ``client_closed``; the
    deployment built again imports them afresh."""
    exit_file = tmp_path / "crm-exit.json"
    crm = f"mcp:{shlex.join([sys.executable, str(CRM_SERVER), '--exit-file', str(exit_file)])}#lookup_invoice"
    openapi = f"openapi:{billing.url}/openapi.json#getInvoice"
    folder = make_deployment(tmp_path, monkeypatch, capsys, "--tools", openapi, "--tools", crm, "--no-store")
    with pte.Deployment.from_folder(folder) as deployment:
        registry = deployment.registry()
        assert _run(registry).result == [12500, 4300]
        assert billing.open_connections(settle_s=0) >= 1 and not exit_file.exists()
    assert billing.open_connections() == 0
    assert json.loads(exit_file.read_text(encoding="utf-8")) == {"parent_alive": True}
    closed = _run(registry)
    error = closed.steps[0].error
    assert error is not None and error.kind == "client_closed", error
    deployment.close()  # idempotent
    rebuilt = pte.Deployment.from_folder(folder)
    try:
        assert _run(rebuilt.registry()).result == [12500, 4300]
    finally:
        rebuilt.close()
