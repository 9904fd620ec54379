"""Imported tools from the CLI: ``--tools openapi:SPEC[#op,…]`` and ``--tools mcp:CMD[#tool,…]``.

Against the loopback billing service of tests/catalogue/test_importer_openapi.py (JSON over HTTP, and the
same document as a YAML file) and the real MCP server process of tests/catalogue/test_importer_mcp.py.
"""

from __future__ import annotations

import gc
import json
import shlex
import sys
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

# private: the process's imports are the deployment area's (no public way to drop them)
from pte._deploy import forget_imports
from pte.cli import main
from tests._billing_service import INVOICE_PLAN
from tests._billing_service import billing as billing  # the fixture, for the tests below
from tests._cli_run import make_deployment, pte_child_watching
from tests.integration_apps.billing_app import openapi
from tests.integration_apps.loopback import LoopbackServer

SERVER = Path(__file__).parents[1] / "integration_apps" / "crm_mcp_server.py"


@pytest.fixture
def imports_forgotten() -> Iterator[None]:
    """After the test, the MCP servers ``--tools mcp:`` started are stopped, the HTTP clients of
    ``--tools openapi:`` closed and the imports forgotten. A process keeps them for its lifetime
    (a server started once per spec): in a test worker, every later file's, with the session's
    thread, event loop and server process, or a pooled connection."""
    yield
    forget_imports()


def _execute(tmp_path: Path, plan: dict[str, Any], tools: str, capsys: pytest.CaptureFixture[str]) -> Any:
    (tmp_path / "plan.json").write_text(json.dumps(plan), encoding="utf-8")
    argv = ["--quiet", "execute", str(tmp_path / "plan.json"), "--tools", tools]
    code = main([*argv, "--audit", str(tmp_path / "run.jsonl"), "--json"])
    out, err = capsys.readouterr()
    assert code == 0, (out, err)
    return json.loads(out)


def test_openapi_spec_from_a_url_with_chosen_operations(
    billing: LoopbackServer, tmp_path: Path, capsys: pytest.CaptureFixture[str], imports_forgotten: None
) -> None:
    tools = f"openapi:{billing.url}/openapi.json#listInvoices,getInvoice"
    # The document names https://evil.example.test: requests stay on the origin it came from.
    result = _execute(tmp_path, INVOICE_PLAN, tools, capsys)
    assert (result["status"], result["result"]) == ("succeeded", 12500)
    (tmp_path / "p.json").write_text(
        json.dumps(INVOICE_PLAN).replace("getInvoice", "sendReminder"), encoding="utf-8"
    )
    assert main(["--quiet", "validate", str(tmp_path / "p.json"), "--tools", tools]) == 1  # not imported


def test_openapi_yaml_spec_file(
    billing: LoopbackServer, tmp_path: Path, capsys: pytest.CaptureFixture[str], imports_forgotten: None
) -> None:
    import httpx

    document = httpx.get(f"{billing.url}/openapi.json").json()
    document["servers"] = [{"url": billing.url}]
    spec = tmp_path / "billing.yaml"
    spec.write_text(yaml.safe_dump(document), encoding="utf-8")
    # All operations, the 204 delete included (imported with a declared empty output).
    result = _execute(tmp_path, INVOICE_PLAN, f"openapi:{spec}#getInvoice,deleteInvoice", capsys)
    assert result["result"] == 12500


def test_the_import_table_owns_the_openapi_client_and_forgetting_closes_it(
    billing: LoopbackServer, tmp_path: Path, capsys: pytest.CaptureFixture[str], imports_forgotten: None
) -> None:
    """An ``openapi:`` spec's tools call through one client the process's import table owns: its
    pooled connection outlives a run (the next run of the spec reuses it), and `forget_imports`
    closes it, not the collector (a ResourceWarning is an error here)."""
    gc.collect()  # what earlier tests left is not this test's
    result = _execute(tmp_path, INVOICE_PLAN, f"openapi:{billing.url}/openapi.json#getInvoice", capsys)
    assert result["result"] == 12500
    assert billing.open_connections(settle_s=0) >= 1
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        forget_imports()
        assert billing.open_connections() == 0
        gc.collect()
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("openapi: '3.1.0'\ninfo: {title: x, version: '1'}\npaths: {}\npaths: {}\n", "duplicate key 'paths'"),
        ("openapi: '3.1.0'\ninfo: &i {title: x, version: '1'}\nx: *i\npaths: {}\n", "aliases"),
        ("openapi: '3.1.0'\ninfo: {title: x, version: '1'}\npaths: {}\n", "no absolute server URL"),
        ("openapi: [\n", "not valid YAML"),
    ],
    ids=["duplicate", "alias", "no-server", "broken"],
)
def test_bad_yaml_specs_are_usage_errors_with_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, why: str
) -> None:
    spec = tmp_path / "bad.yaml"
    spec.write_text(text, encoding="utf-8")
    (tmp_path / "plan.json").write_text(json.dumps(INVOICE_PLAN), encoding="utf-8")
    with pytest.raises(SystemExit) as exit_info:
        main(["--quiet", "validate", str(tmp_path / "plan.json"), "--tools", f"openapi:{spec}"])
    assert exit_info.value.code == 2
    assert why in capsys.readouterr().err


def test_mcp_server_command(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    imports_forgotten: None,
) -> None:
    pytest.importorskip("mcp", reason="the MCP importer is an optional extra: 'plan-then-execute[mcp]'")
    tools = f"mcp:{shlex.join([sys.executable, str(SERVER)])}#lookup_invoice,total_cents"
    make_deployment(tmp_path, monkeypatch, capsys, "--tools", tools, "--no-store")  # MCP tools are writes
    plan: dict[str, Any] = {
        "pte_plan": "1",
        "steps": [{"id": "a", "tool": "lookup_invoice", "args": {"invoice_id": "INV-1001"}}],
        "result": {"$ref": "a/amount_cents"},
    }
    result = _execute(tmp_path, plan, tools, capsys)
    assert result["status"] == "succeeded" and isinstance(result["result"], int)
    # Imported without a manifest, the server's outputs are untrusted: they cannot feed a
    # guarded parameter (the MCP tools are writes by default, their parameters guarded).
    plan["steps"].append(
        {"id": "t", "tool": "total_cents", "args": {"amounts": [{"$ref": "a/amount_cents"}]}}
    )
    plan["result"] = {"$ref": "t/result"}
    (tmp_path / "plan.json").write_text(json.dumps(plan), encoding="utf-8")
    argv = [
        "--quiet",
        "execute",
        str(tmp_path / "plan.json"),
        "--tools",
        tools,
        "--audit",
        str(tmp_path / "r2.jsonl"),
    ]
    assert main(argv) == 1
    assert "receive untrusted data" in capsys.readouterr().err
    # Forgotten, the imports leave nothing running: the session's thread (and its server) ends.
    sessions = [t for t in threading.enumerate() if t.name.startswith("pte-mcp stdio:")]
    assert sessions
    forget_imports()
    assert not any(t.is_alive() for t in sessions)


def test_workers_refuse_importer_specs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "--quiet",
                "worker",
                "--tools",
                "openapi:spec.yaml",
                "--store",
                "sqlite:s.db",
                "--broker",
                "redis://127.0.0.1:9/0",
            ]
        )
    assert exit_info.value.code == 2 and "pack file" in capsys.readouterr().err


def test_a_command_with_a_policy_imports_each_spec_once(billing: LoopbackServer, tmp_path: Path) -> None:
    """Without a deployment, ``--policy`` checks its tool names against the whole packs: the
    command's one import of each spec, the one its registry holds, never a second that could
    read another version of the file. The spec file is consulted as often as without a policy
    (a second import read it, and hashed it, again)."""
    spec = tmp_path / "billing.json"
    spec.write_text(json.dumps({**openapi("v1"), "servers": [{"url": billing.url}]}), encoding="utf-8")
    (tmp_path / "plan.json").write_text(json.dumps(INVOICE_PLAN), encoding="utf-8")
    (tmp_path / "policy.json").write_text(
        json.dumps({"pte_policy": "1", "tools": {"getInvoice": {"output": "trusted"}}}), encoding="utf-8"
    )
    command = ["execute", "plan.json", "--tools", "openapi:billing.json#getInvoice,listInvoices", "--json"]
    opened = []
    for log, extra in (("plain.jsonl", []), ("policed.jsonl", ["--policy", "policy.json"])):
        done, count = pte_child_watching(Path("billing.json"), *command, "--audit", log, *extra, cwd=tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        assert json.loads(done.stdout)["result"] == 12500
        opened.append(count)
    assert opened[0] >= 1
    assert opened[1] == opened[0]
