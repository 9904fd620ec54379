"""One way to get an engine (#33): replay and resume act under a `pte.Deployment`.

A deployment is read from a folder, given by its parts (`Deployment.of`, what flags name where
no folder is in force), or taken from what a run recorded (`Deployment.from_run_record`:
evidence for a replay that runs nothing). There is no second class of that name.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
from pathlib import Path

import pytest

import pte
import pte.audit
import pte.errors
import pte.runs

PLAN: dict[str, object] = {
    "pte_plan": "1",
    "steps": [{"id": "sum", "tool": "calculator", "args": {"expression": "2 + 3"}}],
    "result": {"$ref": "sum/value"},
}


def _run(tmp_path: Path, plan: dict[str, object], registry: pte.Registry) -> Path:
    log = tmp_path / "run.jsonl"
    with pte.AuditLog(log) as audit:
        pte.Engine(registry).execute(json.dumps(plan), audit)
    return log


def test_no_module_defines_another_deployment_class() -> None:
    found = []
    for module in pkgutil.walk_packages(pte.__path__, "pte."):
        if module.name.startswith("pte.testing") or module.name.endswith("__main__"):
            continue
        loaded = importlib.import_module(module.name)
        value = vars(loaded).get("Deployment")
        if value is not None and value is not pte.Deployment:
            found.append(module.name)
    assert found == []
    assert not hasattr(importlib.import_module("pte._replay"), "Deployment")


def test_a_replay_under_what_the_run_recorded(tmp_path: Path) -> None:
    log = _run(tmp_path, PLAN, pte.load_registry(["calculator"]))
    records = pte.audit.read_records(log)
    recorded = pte.Deployment.from_run_record(records)
    authority = recorded.authority
    assert "calculator" in authority["registry"].names
    # Evidence, never authority: no store, no keys, no anchors, no deployment in hand.
    assert all(authority[k] is None for k in ("approvals", "endorsements", "keys", "anchors", "fingerprint"))
    assert pte.runs.replay_file(log, deployment=recorded).ok
    engine = recorded.engine()  # the recorded catalogue compiles the plan, but holds no tool code
    with pte.AuditLog(tmp_path / "again.jsonl") as audit:
        again = engine.execute(json.dumps(PLAN), audit)
    assert not again.ok and again.steps[0].status == "failed"


def test_from_run_record_needs_a_run(tmp_path: Path) -> None:
    with pytest.raises(pte.errors.DeploymentError):
        pte.Deployment.from_run_record([{"type": "step_started"}])
    with pytest.raises(pte.errors.DeploymentError):
        pte.Deployment.from_run_record([])


def test_parts_are_checked_and_have_no_fingerprint() -> None:
    with pytest.raises(TypeError, match="unknown part"):
        pte.Deployment.of(registri=None)
    given = pte.Deployment.of(registry=pte.load_registry(["calculator"]))
    with pytest.raises(pte.errors.DeploymentError):
        _ = given.fingerprint
    with pytest.raises(AttributeError):
        given.given = None  # type: ignore[misc]  # frozen


def test_a_folder_deployments_authority_is_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pte.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["--quiet", "init", "dep", "--tools", "calculator", "--no-store"]) == 0
    deployment = pte.Deployment.from_folder(tmp_path / "dep")
    authority = deployment.authority
    assert authority["fingerprint"] is deployment
    assert authority["anchors"] is not None and "calculator" in authority["registry"].names
    narrowed = deployment.with_parts(specialists=())
    assert narrowed.authority["registry"] is authority["registry"]
