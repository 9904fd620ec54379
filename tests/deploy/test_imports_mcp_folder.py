"""A deployment's ``mcp:`` command is started in the deployment's folder, wherever the process
reading the deployment was started.

Authority (the catalogue, and the code behind its tools) comes only from the deployment: a
worker or a command started from another working directory, one holding a different
``server.py`` (the same tool list, so the catalogue cannot tell them apart), starts the
deployment's own server, and the working directory's never runs. The fingerprint describes the
files the command names inside the folder, not where the folder lies: editing ``server.py``
refuses a run started before, naming ``mcp_servers``; a copy of the folder keeps its
fingerprint. A command typed on the command line without a deployment keeps the working
directory, as a user typing it expects.

Over the real CRM MCP server (tests/integration_apps/crm_mcp_server.py, over stdio), started by
a ``server.py`` that first writes which one it is to a side-effect file.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import pte
from pte.errors import DeploymentError

pytest.importorskip("mcp", reason="the MCP importer is an optional extra: 'plan-then-execute[mcp]'")

from tests._cli_run import child_env, cli, make_deployment, naming_tools
from tests.integration_apps.mcp_stdio import CRM_SERVER

PLAN = {
    "pte_plan": "1",
    "steps": [{"id": "invoice_lookup", "tool": "lookup_invoice", "args": {"invoice_id": "INV-1001"}}],
    "result": {"$ref": "invoice_lookup/amount_cents"},
}

#: The spec a document writes: this interpreter (absolute) running the ``server.py`` beside it.
SPEC = f"mcp:{shlex.join([sys.executable, 'server.py'])}#lookup_invoice"


def _server(path: Path, which: str, started: Path) -> Path:
    """A ``server.py`` serving the CRM server's tools after appending `which` to `started`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "import runpy\n"
        f"with open({str(started)!r}, 'a', encoding='utf-8') as started:\n"
        f"    started.write({which!r} + '\\n')\n"
        f"runpy.run_path({str(CRM_SERVER)!r}, run_name='__main__')\n",
        encoding="utf-8",
    )
    return path


def _started(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").split() if path.exists() else []


@pytest.fixture
def folders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Iterator[tuple[Path, Path, Path]]:
    """(a deployment naming ``mcp:python server.py``, its server.py beside it; a working directory
    elsewhere holding another server.py with the same tools; the file each appends its name to
    when started), the test in the working directory elsewhere."""
    started = tmp_path / "started.txt"
    folder = make_deployment(tmp_path, monkeypatch, capsys, "--no-store")
    _server(folder / "server.py", "deployment", started)
    naming_tools(folder, SPEC)
    elsewhere = tmp_path / "elsewhere"
    _server(elsewhere / "server.py", "elsewhere", started)
    monkeypatch.chdir(elsewhere)
    yield folder, elsewhere, started
    pte.Deployment.from_folder(folder).close()


def _execute(deployment: pte.Deployment) -> tuple[object, dict[str, object]]:
    """The plan's result under `deployment`, and its run's ``run_started`` record."""
    with pte.AuditLog() as audit:
        run = deployment.engine(config=pte.EngineConfig(llm_answer=False)).execute(json.dumps(PLAN), audit)
        started = next(r for r in audit.records if r["type"] == "run_started")
    return run.result, dict(started)


def test_the_deployment_server_is_started_in_its_folder(
    folders: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    folder, _, started = folders
    with pte.Deployment.from_folder(folder) as deployment:
        assert deployment.registry().names == ["lookup_invoice"]
        result, _ = _execute(deployment)
        assert result == 12500
        fingerprint = deployment.fingerprint
    assert _started(started) == ["deployment"]  # the working directory's server.py never ran
    # The same deployment copied to another path keeps its fingerprint: the folder's absolute
    # path is no part of it (the spec as written, the tools, the server's file).
    copy = tmp_path / "copied" / "deployment"
    shutil.copytree(folder, copy)
    with pte.Deployment.from_folder(copy) as copied:
        assert copied.fingerprint == fingerprint
    assert _started(started) == ["deployment", "deployment"]  # the copy's own server


def test_a_command_started_elsewhere_starts_the_deployment_server(
    folders: tuple[Path, Path, Path],
) -> None:
    folder, elsewhere, started = folders
    (elsewhere / "plan.json").write_text(json.dumps(PLAN), encoding="utf-8")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pte._cli",
            "--quiet",
            "execute",
            "plan.json",
            "--audit",
            "run.jsonl",
            "--json",
        ],
        cwd=elsewhere,
        env={**child_env(), "PTE_DEPLOYMENT": str(folder)},
        capture_output=True,
        encoding="utf-8",
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["result"] == 12500
    assert _started(started) == ["deployment"]
    record = next(r for r in pte.audit.read_records(elsewhere / "run.jsonl") if r["type"] == "run_started")
    with pte.Deployment.from_folder(folder) as deployment:
        assert record["deployment"]["fingerprint"] == deployment.fingerprint


def test_an_edited_server_refuses_a_run_started_before(
    folders: tuple[Path, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Tamper: server.py edited behind a run's back (same tools, other code): a run started
    before is refused on resume under the edited deployment, naming what differs."""
    folder, _, started = folders
    deployment = pte.Deployment.from_folder(folder)
    log = tmp_path / "run.jsonl"
    (tmp_path / "plan.json").write_text(json.dumps(PLAN), encoding="utf-8")
    code, out, err = cli(capsys, "execute", str(tmp_path / "plan.json"), "--audit", str(log))  # anchored
    assert code == 0, out + err
    lines = log.read_text(encoding="utf-8").splitlines(keepends=True)
    crashed = tmp_path / "crashed.jsonl"  # the log as a crash before its step leaves it
    crashed.write_text("".join(lines[: 1 + next(i for i, x in enumerate(lines) if '"plan_accepted"' in x)]))
    started_record = next(r for r in pte.audit.read_records(log) if r["type"] == "run_started")
    deployment.from_run(started_record)  # it started under this deployment
    server = folder / "server.py"
    server.write_text(server.read_text(encoding="utf-8") + "# changed\n", encoding="utf-8")
    edited = pte.Deployment.from_folder(folder)
    try:
        # Resume checks the deployment before anything else (then its anchors, then runs).
        with pytest.raises(pte.errors.FailedClosed, match=r"what differs: mcp_servers\. "):
            pte.runs.resume_file(crashed, edited.registry(), deployment=edited)
        with pytest.raises(DeploymentError, match=r"what differs: mcp_servers\b"):
            edited.from_run(started_record)
        # In one process (the first deployment's server still running), the deployment read
        # again serves the edited server, started afresh, not the earlier session.
        assert edited.registry().names == ["lookup_invoice"]
        assert _started(started) == ["deployment", "deployment"]
    finally:
        deployment.close()
        edited.close()


def test_a_command_line_spec_without_a_deployment_runs_in_the_working_directory(
    folders: tuple[Path, Path, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--tools mcp:python server.py`` typed without a deployment starts the working directory's
    server.py, as typed. Its plan calls a write, so the command is refused with the `pte init` that
    makes a deployment: run as printed, it writes the server's path so that the deployment (whose
    command starts in its folder, .pte) starts the same server, and the command then runs again
    unchanged."""
    _, elsewhere, started = folders
    monkeypatch.delenv("PTE_DEPLOYMENT")
    (elsewhere / "plan.json").write_text(json.dumps(PLAN), encoding="utf-8")
    command = ["execute", "plan.json", "--tools", SPEC, "--audit", "run.jsonl", "--json"]
    from pte._deploy import forget_imports  # private: the import table the typed spec is held in

    try:
        code, out, err = cli(capsys, *command)
        assert code == 2 and "no_deployment" in err, out + err
        assert _started(started) == ["elsewhere"]  # the command as typed, where it was typed
        hint = shlex.split(err.split("run this command again: ", 1)[1].splitlines()[0])
        assert hint[:2] == ["pte", "init"]
        code, out, err = cli(capsys, *hint[1:])
        assert code == 0 and "to fix" not in out, out + err
        document = json.loads((elsewhere / ".pte" / "pte-deployment.json").read_text(encoding="utf-8"))
        assert document["tools"] == [
            f"mcp:{shlex.join([sys.executable, str(elsewhere / 'server.py')])}#lookup_invoice"
        ]
        code, out, err = cli(capsys, *command)
        assert code == 0, out + err
        assert json.loads(out)["result"] == 12500
    finally:
        forget_imports([SPEC])
        if (elsewhere / ".pte").is_dir():
            pte.Deployment.from_folder(elsewhere / ".pte").close()
    assert set(_started(started)) == {"elsewhere"}


def test_a_document_cannot_name_the_folder_its_server_starts_in(
    folders: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    folder, _, started = folders
    naming_tools(folder, f"mcp:\0{tmp_path / 'elsewhere'}\0{SPEC.removeprefix('mcp:')}")
    with pte.Deployment.from_folder(folder) as deployment, pytest.raises(DeploymentError, match="NUL"):
        deployment.registry()
    assert _started(started) == []
