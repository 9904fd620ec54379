"""Workers act under the deployment (issue 33): its approval and endorsement stores, keys, policy.

A worker built from `pte.Deployment` (``pte worker`` under one: ``$PTE_DEPLOYMENT``) loads the
deployment's approval store and endorsement store as the CLI does. Before, a write covered by
an approved procedure still paused on a worker, and a run waiting for an endorsement never
continued on one (workers had no endorsement store). Jobs are queued by ``pte submit`` under
the same deployment (signed with its key, bound to its fingerprint); each worker step is
`process_run` with the deployment, as the Celery task calls it.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pte import Deployment

# private: the demo's scenario; the demo's policy
from pte._cli import BILL_PAYMENT, ENDORSE_POLICY

# private: the worker and job internals, white-box
from pte._deploy import process_run
from pte.stores import open_store
from tests._cli_run import cli, make_deployment
from tests._cli_run import ledger as ledger  # the fixture
from tests._services import dies_with_parent, postgres_url, redis_url  # noqa: F401 - the session fixtures
from tests.plan.test_procedures import PAY_SUPPLIER
from tests.policy.test_procedure_approval import IBAN_A, _call, _plan


def _payments(ledger: Path) -> int:
    with sqlite3.connect(ledger) as conn:
        return int(conn.execute("SELECT count(*) FROM payments_out").fetchone()[0])


class Setup:
    """A deployment made by `pte init` (back-office pack, run store, approver key), the broker."""

    def __init__(
        self,
        tmp: Path,
        monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str],
        broker: str,
        *options: str,
    ) -> None:
        self.tmp, self.capsys, self.broker = tmp, capsys, broker
        self.private, self.public = tmp / "approver.pem", tmp / "approver.pub"
        code, _, err = cli(
            capsys, "keys", "generate", "--private", str(self.private), "--public", str(self.public)
        )
        assert code == 0, err
        self.folder = make_deployment(
            tmp, monkeypatch, capsys, "--tools", "backoffice", "--approval-keys", str(self.public), *options
        )

    def cli(self, *argv: str) -> tuple[int, str, str]:
        return cli(self.capsys, *argv)

    def submit(self, plan: str, run_id: str) -> None:
        path = self.tmp / f"{run_id}.json"
        path.write_text(plan, encoding="utf-8")
        code, _, err = self.cli("submit", str(path), "--broker", self.broker, "--run-id", run_id)
        assert code == 0, err

    def work(self, run_id: str) -> str:
        """One delivery of `run_id` to a worker of this deployment (as `pte worker`'s task runs it)."""
        deployment = Deployment.from_folder(self.folder)
        with open_store(str(deployment.store_url)) as store:
            return process_run(
                store, run_id, deployment.registry(), deployment.packs, owner="w", deployment=deployment
            )

    def run(self, run_id: str) -> Any:
        deployment = Deployment.from_folder(self.folder)
        with open_store(str(deployment.store_url)) as store:
            return store.run(run_id)


#: `Setup` with `pte init` options, in the test's folder, with the test's broker.
Deploy = Callable[..., Setup]


@pytest.fixture
def deploy(
    tmp_path: Path,
    ledger: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    redis_url: str,  # noqa: F811
) -> Deploy:
    """Makes the test's deployment (over the `ledger`, with the Redis broker) from `pte init` options."""
    return lambda *options: Setup(tmp_path, monkeypatch, capsys, redis_url, *options)


def test_a_procedure_approved_in_the_deployments_store_pays_on_a_worker_without_pausing(
    tmp_path: Path, ledger: Path, deploy: Deploy
) -> None:
    procedures = tmp_path / "procedures"
    procedures.mkdir()
    (procedures / "pay_supplier.json").write_text(json.dumps(PAY_SUPPLIER), encoding="utf-8")
    setup = deploy("--procedures", str(procedures))
    plan = _plan(_call("pay", IBAN_A, "10.00"))

    setup.submit(plan, "before")  # no approval yet: the run waits for a person
    assert setup.work("before") == "awaiting_approval"
    assert _payments(ledger) == 0

    code, _, err = setup.cli(
        "approve", "--procedure", str(procedures / "pay_supplier.json"), "--by", "compliance",
        "--signing-key", str(setup.private),
    )  # fmt: skip
    assert code == 0, err
    setup.submit(plan, "covered")
    assert setup.work("covered") == "succeeded"
    assert _payments(ledger) == 1
    # A second delivery of the ended run does nothing; nothing is paid twice.
    assert setup.work("covered") == "done"
    assert _payments(ledger) == 1


def test_a_run_waiting_for_an_endorsement_continues_on_a_worker_once_endorsed(
    tmp_path: Path, ledger: Path, deploy: Deploy
) -> None:
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps(ENDORSE_POLICY), encoding="utf-8")
    setup = deploy("--policy", str(policy))
    setup.submit(BILL_PAYMENT, "bill")
    assert setup.work("bill") == "awaiting_approval"
    code, _, err = setup.cli("approve", "bill", "--by", "alice", "--signing-key", str(setup.private))
    assert code == 0, err
    assert setup.work("bill") == "awaiting_endorsement"
    # Not endorsed yet: another delivery leaves it waiting, nothing paid.
    assert setup.work("bill") == "awaiting_endorsement"
    assert _payments(ledger) == 0

    code, out, err = setup.cli("endorse", "bill", "--json")
    assert code == 0, err
    value_hash = json.loads(out)["value_hash"]
    code, _, err = setup.cli(
        "endorse", "bill", "--by", "alice", "--signing-key", str(setup.private), "--value-hash", value_hash
    )
    assert code == 0, err
    assert setup.work("bill") == "succeeded"
    assert _payments(ledger) == 1
    info = setup.run("bill")
    assert info is not None and info.status == "succeeded"


PAY = """{"pte_plan": "1", "steps": [
 {"id": "supplier", "tool": "get_supplier", "args": {"supplier_id": "S001"}},
 {"id": "pay", "tool": "send_payment", "args": {"iban": {"$ref": "supplier/iban"}, "amount": "120.00",
  "currency": "EUR", "reference": "Invoice 7"}}
], "result": {"$ref": "pay/payment_id"}}"""


def _change_packs(folder: Path) -> None:
    """The operator changes the deployment's packs (a pack added): its fingerprint changes."""
    document = folder / "pte-deployment.json"
    data = json.loads(document.read_text(encoding="utf-8"))
    data["tools"] = [*data["tools"], "calculator"]
    document.write_text(json.dumps(data), encoding="utf-8")


def test_runs_stranded_by_a_changed_deployment_are_listed_and_ended_on_the_record(
    ledger: Path,
    deploy: Deploy,
    redis_url: str,  # noqa: F811
) -> None:
    setup = deploy()
    for run_id in ("paused", "third", "fourth"):
        setup.submit(PAY, run_id)
        assert setup.work(run_id) == "awaiting_approval"
    setup.submit(PAY, "queued")  # not taken by a worker before the change
    _change_packs(setup.folder)

    # pte runs lists each with the reason and the command that ends it.
    code, out, err = setup.cli("runs")
    assert code == 0, err
    assert out.count("CANNOT CONTINUE here:") == 4 and "4 cannot continue under this deployment" in out
    assert "end it: pte runs end paused" in out and "started under deployment" in out
    code, out, _ = setup.cli("runs", "--json")
    assert all(row["cannot_continue"] for row in json.loads(out))
    # Requeueing one is refused with the command that ends it.
    code, _, err = setup.cli("runs", "requeue", "third", "--broker", redis_url)
    assert code == 1 and "pte runs end third" in err

    # pte reject says what really happens: the worker ends it deployment_mismatch.
    code, out, err = setup.cli("reject", "paused", "--by", "bob", "--broker", redis_url)
    assert code == 0, err
    assert "a worker ends it failed_closed(deployment_mismatch)" in out and "queued to resume" not in out
    # ... and the worker does, on the record, instead of a traceback in its log.
    for run_id in ("paused", "queued"):
        assert setup.work(run_id) == "failed_closed"
        info = setup.run(run_id)
        assert info is not None and info.reason == "deployment_mismatch"
    deployment = Deployment.from_folder(setup.folder)
    with open_store(str(deployment.store_url)) as store:
        records = store.records("paused")
        assert [r["type"] for r in records[-2:]] == ["run_resumed", "run_finished"]
        assert "step_started" not in {r["type"] for r in records if r["seq"] > 2}
        assert store.verify("paused").intact
        assert [r["type"] for r in store.records("queued")] == ["run_started", "run_finished"]

    # The printed command ends it, as printed.
    code, out, err = setup.cli("runs", "end", "third")
    assert code == 0 and "ended failed_closed(deployment_mismatch)" in out, err
    info = setup.run("third")
    assert info is not None and (info.status, info.reason) == ("failed_closed", "deployment_mismatch")
    code, _, err = setup.cli("runs", "end", "third")
    assert code == 1 and "ended already" in err
    assert _payments(ledger) == 0


def test_pte_runs_end_refuses_a_run_that_can_continue_and_needs_a_deployment(
    monkeypatch: pytest.MonkeyPatch,
    deploy: Deploy,
    redis_url: str,  # noqa: F811
) -> None:
    setup = deploy()
    setup.submit(PAY, "fine")
    assert setup.work("fine") == "awaiting_approval"
    code, _, err = setup.cli("runs", "end", "fine")
    assert code == 1 and "can continue under this deployment" in err
    code, out, err = setup.cli("reject", "fine", "--by", "bob", "--broker", redis_url)
    assert code == 0 and "a worker ends it failed_closed(approval_rejected)" in out, err
    assert setup.work("fine") == "failed_closed"
    info = setup.run("fine")
    assert info is not None and info.reason == "approval_rejected"
    monkeypatch.delenv("PTE_DEPLOYMENT")
    code, _, err = setup.cli("runs", "end", "fine", "--store", "sqlite:runs.db")
    assert code == 2 and "there is none" in err


@pytest.mark.slow
def test_pte_worker_under_a_deployment_runs_signed_jobs_from_its_store(
    tmp_path: Path,
    postgres_url: str,  # noqa: F811
    redis_url: str,  # noqa: F811
) -> None:
    """`pte init` with a PostgreSQL store, `pte submit` and a real `pte worker` process, found
    through $PTE_DEPLOYMENT alone: no --store, --tools or key variable on either command."""
    from tests._ledger import new_ledger
    from tests.deploy.test_workers import _env, _fresh_database, _pte, _wait_for

    store_url = _fresh_database(postgres_url, "pte_worker_deployment")
    ledger = new_ledger(tmp_path / "ledger.sqlite")
    env = {k: v for k, v in _env(ledger).items() if not k.startswith("PTE_") or k == "PTE_LEDGER"}
    done = _pte("init", str(tmp_path / "dep"), "--tools", "backoffice", "--store", store_url, env=env)
    assert done.returncode == 0, done.stderr
    env["PTE_DEPLOYMENT"] = str(tmp_path / "dep")
    plan = tmp_path / "read.json"
    plan.write_text(READ_PLAN, encoding="utf-8")
    done = _pte("submit", str(plan), "--broker", redis_url, "--run-id", "w1", "--json", env=env)
    assert done.returncode == 0, done.stderr
    worker = subprocess.Popen(
        [sys.executable, "-m", "pte._cli", "--quiet", "worker", "--broker", redis_url, "--name", "d@test"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        preexec_fn=dies_with_parent(signal.SIGKILL),  # a killed test run leaves no worker polling
    )  # fmt: skip
    try:
        with open_store(store_url) as store:

            def ended() -> Any:
                info = store.run("w1")
                return info is not None and info.status not in ("queued", "running") and info

            info = _wait_for(ended, 120, "the worker to run the job", every=0.2)
            assert (info.status, info.reason) == ("succeeded", None)
            started = store.records("w1")[0]
            # Bound to the deployment it ran under.
            assert (
                started["deployment"]["fingerprint"] == Deployment.from_folder(tmp_path / "dep").fingerprint
            )
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(20)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait(5)


READ_PLAN = """{"pte_plan": "1", "steps": [
  {"id": "invoice", "tool": "get_invoice", "args": {"invoice_id": "INV-1025"}}
], "result": {"$ref": "invoice/currency"}}"""
