"""An ``mcp:`` spec whose server went away (its process exited) is imported afresh when the
deployment is built again: the import table does not hand back a session whose server has ended.

The session notices its server's end (the transport's stream ends): a call on the old session
fails as ``unavailable`` (a server gone, the importers' reason), never as a generic tool error,
and the import, made from a server no longer there, no longer counts as current: a rebuilt
deployment starts the server again and its calls succeed.

Over the real CRM MCP server (tests/integration_apps/crm_mcp_server.py, over stdio, started by
the spec), which appends its process id to ``--start-file`` each time it starts; the test kills
that process (by its id: a process this test's spec started).
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import sys
from pathlib import Path

import pytest

import pte
from pte.errors import ToolError

pytest.importorskip("mcp", reason="the MCP importer is an optional extra: 'plan-then-execute[mcp]'")

from tests._cli_run import make_deployment
from tests.integration_apps.mcp_stdio import CRM_SERVER

PLAN = {
    "pte_plan": "1",
    "steps": [{"id": "invoice", "tool": "lookup_invoice", "args": {"invoice_id": "INV-1002"}}],
    "result": {"$ref": "invoice/amount_cents"},
}


def _run(deployment: pte.Deployment) -> pte.RunResult:
    with pte.AuditLog() as audit:
        result: pte.RunResult = deployment.engine(config=pte.EngineConfig(llm_answer=False)).execute(
            json.dumps(PLAN), audit
        )
    return result


def test_a_rebuilt_deployment_starts_a_server_that_went_away_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    starts = tmp_path / "starts.txt"
    command = [sys.executable, str(CRM_SERVER), "--start-file", str(starts)]
    folder = make_deployment(
        tmp_path, monkeypatch, capsys, "--tools", f"mcp:{shlex.join(command)}#lookup_invoice", "--no-store"
    )
    pte.Deployment.from_folder(folder).close()  # `pte init` imported the spec to check it: forgotten
    starts.unlink()
    one = pte.Deployment.from_folder(folder)
    two: pte.Deployment | None = None
    try:
        assert _run(one).result == 4300
        (server,) = map(int, starts.read_text(encoding="utf-8").split())
        os.kill(server, signal.SIGKILL)  # the server crashes

        old = one.registry()["lookup_invoice"]
        with pytest.raises(ToolError) as failed:
            old.invoke({"invoice_id": "INV-1002"})
        assert failed.value.kind == "unavailable", failed.value
        assert "ended the session" in failed.value.message

        two = pte.Deployment.from_folder(folder)  # a worker or service building it again
        run = _run(two)
        assert run.result == 4300, run
        assert len(starts.read_text(encoding="utf-8").split()) == 2  # started again
        assert two.registry()["lookup_invoice"] is not old
        assert two.fingerprint == one.fingerprint  # the same server program, the same catalogue
        # The old session's tools still say why they fail: the server went away, not closed by an owner.
        with pytest.raises(ToolError) as again:
            old.invoke({"invoice_id": "INV-1002"})
        assert again.value.kind == "unavailable"
        # Built again while the new server lives, the deployment shares its import.
        with pte.Deployment.from_folder(folder) as three:
            assert three.registry()["lookup_invoice"] is two.registry()["lookup_invoice"]
        two = None  # closed with three: the spec's imports are the process's
    finally:
        one.close()
        if two is not None:
            two.close()
