"""A worker serves its deployment's procedures, never a job's (nor a variable's).

Bug: `pte worker --procedures DIR` was accepted and ignored (the worker's processes loaded only
their packs), so a plan calling a procedure failed closed on a worker while `pte execute
--store` ran it. Workers now build everything from their deployment (`pte init --procedures`).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pte import Deployment

# private: the worker and job internals, white-box
from pte._deploy import WorkerConfig, process_run
from pte.errors import PTEError
from pte.stores import open_store
from tests._cli_run import make_deployment
from tests._ledger import ledger
from tests.plan.test_procedures import BALANCE_REPORT, TWO_CALLS, _folder

__all__ = ["ledger"]  # the fixture, used by name


def _deployment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Deployment:
    """A deployment (`pte init`) serving backoffice and the BALANCE_REPORT procedure."""
    folder = _folder(tmp_path, BALANCE_REPORT)
    where = make_deployment(
        tmp_path, monkeypatch, capsys, "--tools", "backoffice", "--procedures", str(folder),
        "--store", f"sqlite://{tmp_path / 'runs.db'}",
    )  # fmt: skip
    return Deployment.from_folder(where)


def test_a_worker_serves_its_deployments_procedures_and_no_variable_names_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The worker's configuration carries only its deployment's folder: the procedures are the
    deployment's, and the variable that once named a folder beside it is refused, never read."""
    deployment = _deployment(tmp_path, monkeypatch, capsys)
    config = WorkerConfig(str(deployment.folder), ("backoffice",))
    for name, value in config.to_env().items():
        monkeypatch.setenv(name, value)
    again = WorkerConfig.from_env()
    assert again == config
    assert list(Deployment.from_folder(again.deployment).registry().procedures) == ["balance_report"]
    monkeypatch.setenv("PTE_WORKER_PROCEDURES", str(tmp_path / "elsewhere"))
    with pytest.raises(PTEError, match="PTE_WORKER_PROCEDURES"):
        WorkerConfig.from_env()


def test_a_worker_runs_a_plan_calling_a_procedure_twice(
    tmp_path: Path, ledger: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    deployment = _deployment(tmp_path, monkeypatch, capsys)
    registry = deployment.registry()
    store = open_store(f"sqlite://{tmp_path / 'runs.db'}")
    store.submit("p1", {"mode": "execute", "plan_text": json.dumps(TWO_CALLS), "tools": ["backoffice"]})
    assert process_run(store, "p1", registry, ["backoffice"], owner="w") == "succeeded"
    steps = [r["step_id"] for r in store.records("p1") if r["type"] == "step_finished"]
    assert steps == ["first__balance", "second__balance"]
    assert store.verify("p1").ok


def test_a_job_narrowing_the_allow_list_keeps_only_procedures_it_still_allows(
    tmp_path: Path, ledger: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Attack: a job's `allow` narrows the worker's tools; a procedure whose body needs a tool
    the job no longer allows must not stay callable (it would run a tool outside the list)."""
    registry = _deployment(tmp_path, monkeypatch, capsys).registry()
    store = open_store(f"sqlite://{tmp_path / 'runs.db'}")
    job = {"mode": "execute", "plan_text": json.dumps(TWO_CALLS), "tools": ["backoffice"]}
    store.submit("narrow", {**job, "allow": ["get_customer"]})
    assert process_run(store, "narrow", registry, ["backoffice"], owner="w") == "failed_closed"
    info = store.run("narrow")
    assert info is not None and info.reason == "tool_not_allowed"
    assert not [r for r in store.records("narrow") if r["type"] == "step_started"]
    store.submit("kept", {**job, "allow": ["customer_balance", "get_customer"]})
    assert process_run(store, "kept", registry, ["backoffice"], owner="w") == "succeeded"
