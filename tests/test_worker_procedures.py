"""`pte worker --procedures DIR`: a worker serves the deployment's procedures, never a job's.

Bug: the flag was accepted and ignored (the worker's processes loaded only their packs), so a
plan calling a procedure failed closed on a worker while `pte execute --store` ran it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from pte import load_pack

# private: the worker and job internals, white-box
from pte._deploy import WorkerConfig, process_run, served_registry
from pte.stores import open_store
from tests.test_procedures import BALANCE_REPORT, TWO_CALLS, _folder


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "ledger.sqlite"
    module = sys.modules[load_pack("backoffice")["get_invoice"].func.__module__]
    module.create_sample_ledger(path, overwrite=True)
    monkeypatch.setenv("PTE_LEDGER", str(path))
    return path


def test_the_worker_config_carries_the_procedure_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _folder(tmp_path, BALANCE_REPORT)
    config = WorkerConfig(f"sqlite://{tmp_path / 'runs.db'}", ("backoffice",), procedures=str(folder))
    for name, value in config.to_env().items():
        monkeypatch.setenv(name, value)
    again = WorkerConfig.from_env()
    assert again == config
    assert list(served_registry(again).procedures) == ["balance_report"]
    assert served_registry(WorkerConfig(config.store_url, ("backoffice",))).procedures == {}
    monkeypatch.delenv("PTE_WORKER_PROCEDURES")
    assert WorkerConfig.from_env().procedures == ""  # a worker started before this change


def test_a_worker_runs_a_plan_calling_a_procedure_twice(tmp_path: Path, ledger: Path) -> None:
    config = WorkerConfig(
        f"sqlite://{tmp_path / 'runs.db'}", ("backoffice",), procedures=str(_folder(tmp_path, BALANCE_REPORT))
    )
    registry = served_registry(config)
    store = open_store(config.store_url)
    store.submit("p1", {"mode": "execute", "plan_text": json.dumps(TWO_CALLS), "tools": ["backoffice"]})
    assert process_run(store, "p1", registry, ["backoffice"], owner="w") == "succeeded"
    steps = [r["step_id"] for r in store.records("p1") if r["type"] == "step_finished"]
    assert steps == ["first__balance", "second__balance"]
    assert store.verify("p1").ok


def test_a_job_narrowing_the_allow_list_keeps_only_procedures_it_still_allows(
    tmp_path: Path, ledger: Path
) -> None:
    """Attack: a job's `allow` narrows the worker's tools; a procedure whose body needs a tool
    the job no longer allows must not stay callable (it would run a tool outside the list)."""
    config = WorkerConfig(
        f"sqlite://{tmp_path / 'runs.db'}", ("backoffice",), procedures=str(_folder(tmp_path, BALANCE_REPORT))
    )
    registry = served_registry(config)
    store = open_store(config.store_url)
    job = {"mode": "execute", "plan_text": json.dumps(TWO_CALLS), "tools": ["backoffice"]}
    store.submit("narrow", {**job, "allow": ["get_customer"]})
    assert process_run(store, "narrow", registry, ["backoffice"], owner="w") == "failed_closed"
    info = store.run("narrow")
    assert info is not None and info.reason == "tool_not_allowed"
    assert not [r for r in store.records("narrow") if r["type"] == "step_started"]
    store.submit("kept", {**job, "allow": ["customer_balance", "get_customer"]})
    assert process_run(store, "kept", registry, ["backoffice"], owner="w") == "succeeded"
