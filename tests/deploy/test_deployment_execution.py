"""The deployment document's ``"execution"``: the ceiling of how a run's steps overlap (#33).

A run's ``max_concurrency`` and ``serial_writes`` come from flags, a worker's settings, or (on a
resume) the run's own ``run_started`` record, which a log writer could edit and re-hash. The
document names the ceiling: every engine of the deployment runs within it, whatever those say.
A document without it keeps the fingerprint it always had.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

import pte
from pte.errors import DeploymentError
from tests._cli_run import cli

#: Two slow reads after a first step, each noting when it starts and ends in $EVENTS_FILE.
PACK = """
import os
import time

import pte


def _note(event: str) -> None:
    with open(os.environ["EVENTS_FILE"], "a", encoding="utf-8") as fh:
        fh.write(event + "\\n")


@pte.tool
def first_step() -> dict[str, int]:
    \"\"\"The step a cut log keeps.\"\"\"
    return {"n": 1}


@pte.tool
def slow_look(side: str) -> dict[str, str]:
    \"\"\"A read that takes a while.\"\"\"
    _note("start " + side)
    time.sleep(0.3)
    _note("end " + side)
    return {"side": side}
"""
PLAN = {
    "pte_plan": "1",
    "steps": [
        {"id": "first", "tool": "first_step", "args": {}},
        {"id": "left", "tool": "slow_look", "args": {"side": "left"}},
        {"id": "right", "tool": "slow_look", "args": {"side": "right"}},
    ],
    "result": {"left": {"$ref": "left/side"}, "right": {"$ref": "right/side"}},
}


@pytest.fixture
def deployment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Path:
    """A deployment folder of PACK naming ``"execution": {"max_concurrency": 1}``; cwd tmp_path."""
    monkeypatch.chdir(tmp_path)
    for name in ("PTE_STORE", "PTE_ANCHORS_FILE", "PTE_DEPLOYMENT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("EVENTS_FILE", str(tmp_path / "events.txt"))
    (tmp_path / "pack.py").write_text(PACK, encoding="utf-8")
    code, out, err = cli(capsys, "init", "dep", "--tools", str(tmp_path / "pack.py"), "--no-store")
    assert code == 0, out + err
    document = json.loads((tmp_path / "dep" / "pte-deployment.json").read_text(encoding="utf-8"))
    document["execution"] = {"max_concurrency": 1}
    (tmp_path / "dep" / "pte-deployment.json").write_text(json.dumps(document), encoding="utf-8")
    (tmp_path / "plan.json").write_text(json.dumps(PLAN), encoding="utf-8")
    monkeypatch.setenv("PTE_DEPLOYMENT", str(tmp_path / "dep"))
    return tmp_path / "dep"


def _overlapped(tmp_path: Path) -> bool:
    events = (tmp_path / "events.txt").read_text(encoding="utf-8").split("\n")
    at = {event: i for i, event in enumerate(events)}
    return at["start left"] < at["end right"] and at["start right"] < at["end left"]


def _with_execution(folder: Path, execution: Any) -> None:
    path = folder / "pte-deployment.json"
    document = json.loads(path.read_text(encoding="utf-8"))
    document["execution"] = execution
    path.write_text(json.dumps(document), encoding="utf-8")


@pytest.mark.parametrize(
    ("execution", "reason"),
    [
        ({"max_concurrency": 0}, "from 1 to"),
        ({"max_concurrency": True}, "from 1 to"),
        ({"max_concurrency": "4"}, "from 1 to"),
        ({"max_concurrency": 1025}, "from 1 to"),
        ({"serial_writes": "yes"}, "true or false"),
        ({"threads": 4}, '"execution" must be'),
        ([4], '"execution" must be'),
    ],
)
def test_a_bad_execution_setting_is_refused_by_name(
    deployment: Path, capsys: pytest.CaptureFixture[str], execution: Any, reason: str
) -> None:
    _with_execution(deployment, execution)
    with pytest.raises(DeploymentError, match=reason):
        pte.Deployment.from_folder(deployment)
    code, out, err = cli(capsys, "execute", "plan.json", "--audit", "run.jsonl")
    assert code == 2 and reason in err and "Traceback" not in err, (code, out, err)
    assert not Path("run.jsonl").exists()


def test_a_document_without_it_keeps_its_fingerprint_and_one_with_it_is_another_deployment(
    deployment: Path,
) -> None:
    _with_execution(deployment, None)
    plain = pte.Deployment.from_folder(deployment)
    assert "execution" not in plain.document.to_document()  # what every earlier document hashed
    document = json.loads((deployment / "pte-deployment.json").read_text(encoding="utf-8"))
    del document["execution"]
    (deployment / "pte-deployment.json").write_text(json.dumps(document), encoding="utf-8")
    assert pte.Deployment.from_folder(deployment).fingerprint == plain.fingerprint
    _with_execution(deployment, {"max_concurrency": 2, "serial_writes": True})
    named = pte.Deployment.from_folder(deployment)
    assert named.document.execution == {"max_concurrency": 2, "serial_writes": True}
    assert named.fingerprint != plain.fingerprint  # the ceiling is part of the deployment


def test_a_wider_flag_runs_within_the_documents_limit(
    deployment: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = cli(capsys, "execute", "plan.json", "--audit", "run.jsonl", "--max-concurrency", "4")
    assert code == 0, out + err
    assert not _overlapped(tmp_path)
    assert pte.audit.read_records(tmp_path / "run.jsonl")[0]["config"]["max_concurrency"] == 1
    assert cli(capsys, "audit", "verify", "run.jsonl")[0] == 0


def test_an_edited_record_rehashed_cannot_widen_a_resume_past_the_document(
    deployment: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Tamper: a log writer raises the recorded limit of a crashed run and re-hashes the chain."""
    code, out, err = cli(capsys, "execute", "plan.json", "--audit", "full.jsonl")
    assert code == 0, out + err
    records = pte.audit.read_records(tmp_path / "full.jsonl")
    assert records[0]["config"]["max_concurrency"] == 1
    keep = 1 + next(
        i for i, r in enumerate(records) if r.get("step_id") == "first" and "finished" in r["type"]
    )
    records = records[:keep]
    records[0]["config"]["max_concurrency"] = 8
    prev = records[0]["prev"]
    for record in records:
        record["prev"] = prev
        body = {k: v for k, v in record.items() if k != "hash"}
        record["hash"] = prev = hashlib.sha256((prev + pte.audit.canonical_json(body)).encode()).hexdigest()
    forged = tmp_path / "forged.jsonl"
    forged.write_text("".join(pte.audit.canonical_json(r) + "\n" for r in records), encoding="utf-8")
    assert pte.verify(forged).intact  # the chain alone holds: only the deployment can tell
    (tmp_path / "events.txt").unlink()
    dep = pte.Deployment.from_folder(deployment)
    # Its anchors refuse the edited start before anything runs ...
    with pytest.raises(pte.errors.FailedClosed, match="not the one the deployment signed"):
        pte.runs.resume_file(forged, dep.registry(), deployment=dep)
    assert not (tmp_path / "events.txt").exists()
    # ... and the engine the deployment makes from any source of settings (a flag, a worker's
    # settings, a record re-driven) runs within its ceiling: defence in depth.
    with pte.AuditLog(tmp_path / "again.jsonl") as audit:
        assert dep.engine(max_concurrency=8).execute(json.dumps(PLAN), audit).ok
    assert not _overlapped(tmp_path)
    assert pte.audit.read_records(tmp_path / "again.jsonl")[0]["config"]["max_concurrency"] == 1


def test_serial_writes_named_by_the_document_stay_on(deployment: Path, tmp_path: Path) -> None:
    _with_execution(deployment, {"serial_writes": True})
    dep = pte.Deployment.from_folder(deployment)
    with pte.AuditLog(tmp_path / "run.jsonl") as audit:
        assert dep.engine(serial_writes=False, max_concurrency=2).execute(json.dumps(PLAN), audit).ok
    config = pte.audit.read_records(tmp_path / "run.jsonl")[0]["config"]
    assert (config["serial_writes"], config["max_concurrency"]) == (True, 2)
