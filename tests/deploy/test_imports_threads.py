"""Threads building one deployment at once share one import of its ``mcp:`` spec: the process's
import table imports a spec once at a time, so one MCP server is started (none left running
beside the one the table holds) and every thread's registry serves the same tools.

Over the real CRM MCP server (tests/integration_apps/crm_mcp_server.py, over stdio, started by
the spec), which appends a line to ``--start-file`` each time it starts.
"""

from __future__ import annotations

import json
import shlex
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import pte

# private: the deployment area's import table, as a deployment's `tools` use it
from pte._deploy import forget_imports, import_spec

pytest.importorskip("mcp", reason="the MCP importer is an optional extra: 'plan-then-execute[mcp]'")

from tests._cli_run import make_deployment
from tests.integration_apps.mcp_stdio import CRM_SERVER

THREADS = 8

PLAN = {
    "pte_plan": "1",
    "steps": [{"id": "invoice", "tool": "lookup_invoice", "args": {"invoice_id": "INV-1002"}}],
    "result": {"$ref": "invoice/amount_cents"},
}


def test_threads_building_one_deployment_start_one_mcp_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    starts, exits = tmp_path / "starts.txt", tmp_path / "exit.json"
    command = [sys.executable, str(CRM_SERVER), "--start-file", str(starts), "--exit-file", str(exits)]
    spec = f"mcp:{shlex.join(command)}#lookup_invoice"
    folder = make_deployment(tmp_path, monkeypatch, capsys, "--tools", spec, "--no-store")
    pte.Deployment.from_folder(folder).close()  # `pte init` imported the spec to check it: forgotten
    starts.unlink()
    before = set(threading.enumerate())
    barrier = threading.Barrier(THREADS)
    deployments: list[pte.Deployment] = []
    results: list[object] = []
    errors: list[BaseException] = []

    def build() -> None:
        try:
            deployment = pte.Deployment.from_folder(folder)
            barrier.wait(timeout=60)  # every thread asks for the import at once
            engine = deployment.engine(config=pte.EngineConfig(llm_answer=False))
            with pte.AuditLog() as audit:
                result = engine.execute(json.dumps(PLAN), audit).result
            deployments.append(deployment)
            results.append(result)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=build) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    try:
        assert not errors, errors
        assert results == [4300] * THREADS
        assert len(starts.read_text(encoding="utf-8").splitlines()) == 1  # one server started
        tools = {id(deployment.registry()["lookup_invoice"]) for deployment in deployments}
        assert len(tools) == 1  # every thread serves the same import
        sessions = [t for t in threading.enumerate() if t.name.startswith("pte-mcp") and t not in before]
        assert len(sessions) == 1  # one MCP session, the table's
    finally:
        sessions = [t for t in threading.enumerate() if t.name.startswith("pte-mcp") and t not in before]
        for deployment in deployments:
            deployment.close()
    assert not any(t.is_alive() for t in sessions)
    assert json.loads(exits.read_text(encoding="utf-8")) == {"parent_alive": True}


class SlowDocument:
    """A loopback server whose OpenAPI document is sent when the test says (`answer`), counting
    the times it was asked."""

    def __init__(self) -> None:
        from starlette.applications import Starlette
        from starlette.concurrency import run_in_threadpool
        from starlette.requests import Request
        from starlette.responses import JSONResponse
        from starlette.routing import Route

        from tests.integration_apps.billing_app import openapi
        from tests.integration_apps.loopback import LoopbackServer

        self.asked, self.answer, self.times = threading.Event(), threading.Event(), 0

        async def document(request: Request) -> JSONResponse:
            self.times += 1
            self.asked.set()
            await run_in_threadpool(self.answer.wait, 60)
            return JSONResponse(openapi("v1"))

        self.server = LoopbackServer(Starlette(routes=[Route("/openapi.json", document)]))
        self.spec = f"openapi:{self.server.url}/openapi.json#getInvoice"

    def __enter__(self) -> SlowDocument:
        self.server.__enter__()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.answer.set()
        try:
            forget_imports([self.spec])
        finally:
            self.server.__exit__()


def _in_thread(work: Callable[[], object]) -> threading.Thread:
    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    return thread


@pytest.fixture
def slow() -> Iterator[SlowDocument]:
    pytest.importorskip(
        "uvicorn", reason="the loopback test app needs the test extra: 'plan-then-execute[test]'"
    )
    with SlowDocument() as server:
        yield server


def test_a_slow_import_holds_up_only_its_own_spec(slow: SlowDocument, tmp_path: Path) -> None:
    """An import under way (a fetched OpenAPI document the server is slow to send) holds up the
    threads importing its spec, not those importing another."""
    from tests.integration_apps.billing_app import openapi

    (tmp_path / "billing.json").write_text(
        json.dumps({**openapi("v1"), "servers": [{"url": slow.server.url}]}), encoding="utf-8"
    )
    local = f"openapi:{tmp_path / 'billing.json'}#getInvoice"
    imported: dict[str, pte.Registry] = {}
    try:
        waiting = _in_thread(lambda: imported.__setitem__(slow.spec, import_spec(slow.spec)))
        assert slow.asked.wait(30)  # its import is under way, waiting for the document
        _in_thread(lambda: imported.__setitem__(local, import_spec(local))).join(timeout=30)
        assert list(imported) == [local] and waiting.is_alive()
        slow.answer.set()
        waiting.join(timeout=30)
        assert sorted(imported) == sorted([slow.spec, local])
    finally:
        forget_imports([local])


def test_closing_a_spec_waits_for_its_import_under_way(slow: SlowDocument) -> None:
    """`forget_imports` (what `pte.Deployment.close` calls) of a spec being imported waits for
    the import, then closes it: the table is left without it, not holding an import made after."""
    imported: list[pte.Registry] = []
    waiting = _in_thread(lambda: imported.append(import_spec(slow.spec)))
    assert slow.asked.wait(30)
    closing = _in_thread(lambda: forget_imports([slow.spec]))
    closing.join(timeout=0.5)
    assert closing.is_alive()  # waiting for the import
    slow.answer.set()
    waiting.join(timeout=30)
    closing.join(timeout=30)
    assert not closing.is_alive() and len(imported) == 1
    with pte.AuditLog() as audit:
        run = pte.Engine(imported[0], config=pte.EngineConfig(llm_answer=False)).execute(
            json.dumps(
                {
                    "pte_plan": "1",
                    "steps": [{"id": "invoice", "tool": "getInvoice", "args": {"invoice_id": "INV-1001"}}],
                    "result": {"$ref": "invoice"},
                }
            ),
            audit,
        )
    error = run.steps[0].error
    assert error is not None and error.kind == "client_closed", error
    assert import_spec(slow.spec) is not imported[0] and slow.times == 2  # imported afresh
