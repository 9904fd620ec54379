"""Procedure approvals for runs in a run store (#29): as for a log, one approval, no pause.

A store run (``pte execute|resume --store``) whose approval-needing steps all come from a
procedure version approved in the deployment's approval store (``--approvals``) runs without
pausing; each write consumes the approval once, keyed by run and step, and a run cut by
SIGKILL after the first of two payments and resumed pays each exactly once. Authority stays
the deployment's: a decision row in the run store, an edited approval line or an edited
procedure grants nothing (the run pauses for a person instead of paying).
"""

from __future__ import annotations

import json
import os
import sqlite3
import textwrap
from pathlib import Path
from typing import Any

import pytest

from pte.stores import open_store
from tests._crash import KILL_PATCH
from tests._services import run_python
from tests.plan.test_procedures import PAY_SUPPLIER as PAY
from tests.policy.test_procedure_approval import IBAN_A, IBAN_B, Deployment, _call, _payments, _plan
from tests.policy.test_procedure_approval import (
    _deployment_variable as _deployment_variable,  # autouse fixture
)
from tests.policy.test_procedure_approval import ledger as ledger  # the fixture, for the tests below
from tests.replay.test_resume import REPO

# The CLI in a child that kills itself at a record boundary (test_resume's patch, any AuditLog).
CLI_CHILD = KILL_PATCH + textwrap.dedent(
    """
    from pte._cli._main import main

    sys.exit(main(["--quiet", *sys.argv[1:]]))
    """
)

TWO_PAYMENTS = _plan(_call("a", IBAN_A, "30.00"), _call("b", IBAN_B, "40.00", "INV 2"))


class StoreDeployment(Deployment):
    """test_procedure_approval's deployment (procedures, approval store, keys) with a run store."""

    def __init__(self, tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
        super().__init__(tmp, capsys)
        self.db = tmp / "runs.db"
        self.url = f"sqlite://{self.db}"
        # The deployment's run store is this one.
        document_path = tmp / "deployment" / "pte-deployment.json"
        document = json.loads(document_path.read_text(encoding="utf-8"))
        document["store"] = self.url
        document_path.write_text(json.dumps(document), encoding="utf-8")
        self.plan = tmp / "plan.json"
        self.plan.write_text(TWO_PAYMENTS, encoding="utf-8")

    @property
    def store_flags(self) -> list[str]:
        return [*self.flags, "--store", self.url]

    def execute(self, run_id: str) -> tuple[int, dict[str, Any]]:  # type: ignore[override]
        code, out, err = self.cli("execute", str(self.plan), *self.store_flags, "--run-id", run_id, "--json")
        assert out, err
        return code, json.loads(out)

    def consumed(self) -> list[tuple[str, str]]:
        lines = [json.loads(line) for line in self.store.read_text().splitlines() if '"consumed"' in line]
        return sorted((c["run_id"], c["step_id"]) for c in lines)

    def types(self, run_id: str) -> list[str]:
        with open_store(self.url) as store:
            return [str(r["type"]) for r in store.records(run_id)]


@pytest.fixture
def dep(tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str]) -> StoreDeployment:
    return StoreDeployment(tmp_path, capsys)


def test_an_approved_procedure_runs_in_a_store_without_pausing_each_write_consumed_once(
    dep: StoreDeployment, ledger: Path
) -> None:
    code, paused = dep.execute("unapproved")
    assert code == 0 and paused["status"] == "awaiting_approval"  # no approval: a person decides
    assert _payments(ledger) == []
    assert dep.approve()[0] == 0
    code, first = dep.execute("r1")
    assert code == 0 and first["status"] == "succeeded", first
    code, second = dep.execute("r2")
    assert code == 0 and second["status"] == "succeeded", second
    assert _payments(ledger) == [(IBAN_A, "30.00"), (IBAN_B, "40.00")] * 2
    # Consumed once per run and step, in the deployment's approval store.
    assert dep.consumed() == [("r1", "a__pay"), ("r1", "b__pay"), ("r2", "a__pay"), ("r2", "b__pay")]
    assert "run_paused" not in dep.types("r1")
    assert dep.cli("audit", "verify", dep.url, "--run", "r1")[0] == 0
    # Starting r1 again pays nothing (the run is sealed), and no approval is used again.
    assert dep.execute("r1")[0] == 1
    assert len(_payments(ledger)) == 4 and len(dep.consumed()) == 4


def test_only_the_deployments_approval_store_counts_not_the_run_store(
    dep: StoreDeployment, ledger: Path
) -> None:
    assert dep.approve()[0] == 0
    line = json.loads(dep.store.read_text().splitlines()[0])
    # An edited approval line (another version) does not count: the run waits for a person.
    dep.store.write_text(json.dumps({**line, "version": "0" * 64}) + "\n", encoding="utf-8")
    code, out = dep.execute("t1")
    assert code == 0 and out["status"] == "awaiting_approval"
    # A decision row a writer of the run store inserts is no approval either.
    with sqlite3.connect(dep.db) as conn:
        conn.execute(
            "INSERT INTO pte_approvals (run_id, plan_hash, decision, by_name, at, note) "
            "SELECT run_id, plan_hash, 'approved', 'mallory', '2026-11-27T00:00:00.000000Z', NULL "
            "FROM pte_runs WHERE run_id = 't1'"
        )
    code, text, _ = dep.cli("resume", "t1", *dep.store_flags, "--json")
    assert code == 0 and json.loads(text)["status"] == "awaiting_approval"
    # An edited procedure body is another version: the old approval does not cover it.
    dep.store.write_text(json.dumps(line) + "\n", encoding="utf-8")
    edited = json.loads(json.dumps(PAY))
    edited["plan"]["steps"][0]["args"]["currency"] = "USD"
    dep.write(edited)
    code, out = dep.execute("t2")
    assert code == 0 and out["status"] == "awaiting_approval"
    assert _payments(ledger) == [] and dep.consumed() == []


@pytest.mark.parametrize("mode", ["after", "before"])
def test_killed_after_the_first_payment_and_resumed_pays_each_exactly_once(
    dep: StoreDeployment, ledger: Path, mode: str
) -> None:
    """SIGKILL at the record boundary after the first procedure-covered payment's result
    (records: run_started, plan_accepted, approval, step_started a__pay, step_finished a__pay):
    resume re-drives a__pay from the records and pays b__pay once, under the one approval."""
    assert dep.approve()[0] == 0
    after_first = 4 if mode == "after" else 5  # "before" 5: the same boundary, seen from the next record
    env = {**os.environ, "PTE_LEDGER": str(ledger), "KILL_AT": str(after_first), "KILL_MODE": mode}
    child = run_python(
        CLI_CHILD.format(repo=str(REPO)),
        "execute",
        str(dep.plan),
        *dep.store_flags,
        "--run-id",
        "cut",
        env=env,
        timeout=120,
        warm=["backoffice"],
    )
    assert child.returncode == -9, child.stderr.decode()
    assert dep.types("cut")[-2:] == ["step_started", "step_finished"]
    assert _payments(ledger) == [(IBAN_A, "30.00")]
    assert dep.consumed() == [("cut", "a__pay")]
    code, out, err = dep.cli("resume", "cut", *dep.store_flags, "--json")
    assert code == 0, err
    assert json.loads(out)["status"] == "succeeded"
    assert _payments(ledger) == [(IBAN_A, "30.00"), (IBAN_B, "40.00")]
    assert dep.consumed() == [("cut", "a__pay"), ("cut", "b__pay")]
    types = dep.types("cut")
    assert types.count("approval") == 1 and "run_paused" not in types and types[-1] == "run_finished"
    assert dep.cli("audit", "verify", dep.url, "--run", "cut")[0] == 0
    code, out, _ = dep.cli("replay", dep.url, "--run", "cut", *dep.flags)
    assert code == 0 and "same decisions" in out, out
    # Resumed again, or started again: nothing more is paid or consumed.
    assert dep.cli("resume", "cut", *dep.store_flags)[0] == 1
    assert dep.execute("cut")[0] == 1
    assert len(_payments(ledger)) == 2 and len(dep.consumed()) == 2
