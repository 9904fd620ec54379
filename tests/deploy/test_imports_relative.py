"""A relative ``openapi:`` spec file in a deployment document is the one in the deployment's folder,
wherever the process reading the deployment was started.

Authority (the catalogue) comes only from the deployment: a worker or a command started from
another working directory, one holding a different ``spec.yaml`` (with a write tool the
deployment's has not), imports the deployment's own file, the fingerprint describes it, and the
working directory's file is never opened. A document that relied on the working directory (no
such file in its folder) is refused, saying where a relative path is read from. ``..`` and
symlinks are the document's own to write, as an absolute path is: resolved from the folder.

Over a real loopback billing service (uvicorn); the CLI as a child process.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import pte
from pte.errors import DeploymentError

pytest.importorskip("uvicorn", reason="the loopback test app needs the test extra: 'plan-then-execute[test]'")
pytest.importorskip("httpx", reason="the OpenAPI importer is an optional extra: 'plan-then-execute[openapi]'")

from tests._billing_service import INVOICE_PLAN
from tests._billing_service import billing as billing  # the fixture, for the tests below
from tests._cli_run import child_env, cli, make_deployment, naming_tools, pte_child_watching
from tests.integration_apps.billing_app import openapi
from tests.integration_apps.loopback import LoopbackServer


def _spec(path: Path, url: str, *, with_write: bool = False) -> Path:
    """The billing document served by `url`: getInvoice only, or with sendReminder (a write)."""
    document: dict[str, Any] = {**openapi("v1"), "servers": [{"url": url}]}
    paths = document["paths"]
    kept = {
        "/invoices/{invoice_id}": {k: v for k, v in paths["/invoices/{invoice_id}"].items() if k != "delete"}
    }
    if with_write:
        kept["/reminders"] = paths["/reminders"]
    document["paths"] = kept
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document), encoding="utf-8")  # JSON is YAML
    return path


@pytest.fixture
def folders(
    billing: LoopbackServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> Iterator[tuple[Path, Path]]:
    """(a deployment whose document names ``openapi:spec.yaml``, its spec beside it; a working
    directory elsewhere holding a different ``spec.yaml``, with a write tool), the test in the latter."""
    folder = make_deployment(tmp_path, monkeypatch, capsys, "--no-store")
    _spec(folder / "spec.yaml", billing.url)
    naming_tools(folder, "openapi:spec.yaml")
    elsewhere = tmp_path / "elsewhere"
    _spec(elsewhere / "spec.yaml", billing.url, with_write=True)
    monkeypatch.chdir(elsewhere)
    yield folder, elsewhere
    pte.Deployment.from_folder(folder).close()


def test_a_relative_spec_is_read_from_the_deployment_folder(
    folders: tuple[Path, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    folder, _ = folders
    with pte.Deployment.from_folder(folder) as deployment:
        assert deployment.registry().names == ["getInvoice"]  # not the working directory's sendReminder
        with pte.AuditLog() as audit:
            run = deployment.engine(config=pte.EngineConfig(llm_answer=False)).execute(
                json.dumps(INVOICE_PLAN), audit
            )
        assert run.result == 12500
        # The fingerprint describes the folder's file: the catalogue of a deployment naming it by
        # its absolute path.
        control = make_deployment(tmp_path, monkeypatch, capsys, "--no-store", folder="control")
        with pte.Deployment.from_folder(naming_tools(control, f"openapi:{folder / 'spec.yaml'}")) as named:
            assert deployment.parts["catalogue"] == named.parts["catalogue"]


def test_a_command_started_elsewhere_never_opens_the_working_directory_spec(
    folders: tuple[Path, Path],
) -> None:
    folder, elsewhere = folders
    (elsewhere / "plan.json").write_text(json.dumps(INVOICE_PLAN), encoding="utf-8")
    env = {**child_env(), "PTE_DEPLOYMENT": str(folder)}

    def pte_watching(*argv: str) -> tuple[subprocess.CompletedProcess[str], int]:
        return pte_child_watching(Path("spec.yaml"), *argv, cwd=elsewhere, env=env)

    done, opened = pte_watching("execute", "plan.json", "--audit", "run.jsonl", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["result"] == 12500
    assert opened == 0
    started = next(r for r in pte.audit.read_records(elsewhere / "run.jsonl") if r["type"] == "run_started")
    with pte.Deployment.from_folder(folder) as deployment:
        assert started["deployment"]["fingerprint"] == deployment.fingerprint
    # The working directory's write tool is not the deployment's: a plan calling it is refused.
    send = {
        "pte_plan": "1",
        "steps": [
            {"id": "send", "tool": "sendReminder", "args": {"invoice_id": "INV-1001", "email": "x@y.test"}}
        ],
        "result": {"$ref": "send/sent"},
    }
    (elsewhere / "send.json").write_text(json.dumps(send), encoding="utf-8")
    done, opened = pte_watching("execute", "send.json", "--audit", "send.jsonl", "--json")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "sendReminder" in done.stdout + done.stderr
    assert opened == 0


def test_a_document_that_relied_on_the_working_directory_is_refused_saying_so(
    billing: LoopbackServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    folder = naming_tools(
        make_deployment(tmp_path, monkeypatch, capsys, "--no-store"), "openapi:spec.yaml#getInvoice"
    )
    _spec(tmp_path / "spec.yaml", billing.url, with_write=True)
    monkeypatch.chdir(tmp_path)  # where the file is: not the deployment's folder
    deployment = pte.Deployment.from_folder(folder)
    reason = "never from the working directory"
    with pytest.raises(DeploymentError, match=reason) as refused:
        deployment.registry()
    assert str(folder / "spec.yaml") in str(refused.value)
    assert any(reason in problem for problem in deployment.problems())
    with pytest.raises(DeploymentError, match=reason):
        _ = deployment.fingerprint
    (tmp_path / "plan.json").write_text(json.dumps(INVOICE_PLAN), encoding="utf-8")
    code, out, err = cli(capsys, "execute", "plan.json", "--audit", "run.jsonl", "--json")
    assert code == 2 and reason in out + err and "Traceback" not in out + err
    assert not (tmp_path / "run.jsonl").exists() or "step_started" not in (tmp_path / "run.jsonl").read_text()
    # An absolute path stays as written: a missing one is named, with no word of folders.
    gone = tmp_path / "gone" / "spec.yaml"
    (problem,) = pte.Deployment.from_folder(naming_tools(folder, f"openapi:{gone}")).problems()
    assert str(gone) in problem and reason not in problem


def test_dot_dot_and_symlinks_are_resolved_from_the_folder(
    billing: LoopbackServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``../shared/spec.yaml`` is the folder's neighbour, not the working directory's; a symlink in
    the folder is followed, and what it points to is what the fingerprint describes (edited, or
    pointed elsewhere, a rebuilt deployment imports the new content)."""
    folder = make_deployment(tmp_path, monkeypatch, capsys, "--no-store")
    _spec(tmp_path / "shared" / "spec.yaml", billing.url)
    work = tmp_path / "a" / "work"
    _spec(tmp_path / "a" / "shared" / "spec.yaml", billing.url, with_write=True)  # the cwd's ../shared
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    with pte.Deployment.from_folder(naming_tools(folder, "openapi:../shared/spec.yaml")) as deployment:
        assert deployment.registry().names == ["getInvoice"]

    target = _spec(tmp_path / "specs" / "billing.json", billing.url)
    (folder / "linked.yaml").symlink_to(target)
    with pte.Deployment.from_folder(naming_tools(folder, "openapi:linked.yaml")) as linked:
        assert linked.registry().names == ["getInvoice"]
        before = linked.fingerprint
    _spec(target, billing.url, with_write=True)  # the file the link points to, edited
    with pte.Deployment.from_folder(folder) as edited:
        assert edited.registry().names == ["getInvoice", "sendReminder"]
        assert edited.fingerprint != before


def test_pte_init_writes_a_spec_file_so_the_deployment_reads_it_anywhere(
    billing: LoopbackServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``pte init --tools openapi:FILE`` resolves FILE against the working directory (as every file
    given to it) and writes it placed: relative inside the folder, else absolute."""
    monkeypatch.chdir(tmp_path)
    _spec(tmp_path / "billing.yaml", billing.url)
    folder = make_deployment(
        tmp_path, monkeypatch, capsys, "--no-store", "--tools", "openapi:billing.yaml#getInvoice"
    )
    document = json.loads((folder / "pte-deployment.json").read_text(encoding="utf-8"))
    assert document["tools"] == [f"openapi:{tmp_path / 'billing.yaml'}#getInvoice"]
    # The same --tools value given from the same place narrows to the pack pte init wrote (its
    # no_deployment hint says: make one, then run this command again, unchanged).
    (tmp_path / "plan.json").write_text(json.dumps(INVOICE_PLAN), encoding="utf-8")
    flags = ("--tools", "openapi:billing.yaml#getInvoice", "--json")
    code, out, err = cli(capsys, "execute", "plan.json", "--audit", "run.jsonl", *flags)
    assert code == 0 and json.loads(out)["result"] == 12500, out + err
    elsewhere = tmp_path / "elsewhere"
    _spec(elsewhere / "billing.yaml", billing.url, with_write=True)
    monkeypatch.chdir(elsewhere)
    with pte.Deployment.from_folder(folder) as deployment:
        assert deployment.registry().names == ["getInvoice"]
    # From elsewhere, the same text names another file: not the deployment's pack.
    (elsewhere / "plan.json").write_text(json.dumps(INVOICE_PLAN), encoding="utf-8")
    code, out, err = cli(capsys, "execute", "plan.json", "--audit", "run.jsonl", *flags)
    assert code == 2 and "never widen" in err, out + err
    code, out, err = cli(capsys, "init", str(tmp_path / "other"), "--tools", "openapi:missing.yaml")
    assert code == 2 and "missing.yaml" in out + err
    assert not (tmp_path / "other" / "pte-deployment.json").exists()


@pytest.mark.parametrize("spec", ["openapi:spec.yaml", "openapi:./spec.yaml#getInvoice"])
def test_a_narrowing_names_the_pack_as_the_document_writes_it(folders: tuple[Path, Path], spec: str) -> None:
    """A flag (or a job) narrows by the pack's text; it is read from the folder, and a spec the
    deployment does not name (the working directory's file by another name) is refused."""
    folder, elsewhere = folders
    with pte.Deployment.from_folder(naming_tools(folder, spec)) as deployment:
        assert deployment.narrowed(packs=[spec]).registry().names == ["getInvoice"]
        with pytest.raises(DeploymentError, match="never widen"):
            deployment.narrowed(packs=[f"openapi:{elsewhere / 'spec.yaml'}"])
