"""Issue 24 attacks through a real Celery worker (PostgreSQL store, Redis broker, worker process).

The worker holds the approvers' public keys and the deployment key (its deployment's, never
the job's). A store decision row copied to other paused runs pays nothing; a paid run cut
back in the database before its payment and handed to the worker again is refused.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from pte import SigningKey

# private: the worker and job internals, white-box
from pte._deploy import enqueue, make_app, submit_job
from pte.deployment import decide
from pte.stores import open_store
from tests._services import postgres_url, redis_url  # noqa: F401 - the session fixtures
from tests.deploy.test_workers import (  # noqa: F401 - the fixture
    PLANS,
    TOOLS,
    _wait_for,
    _worker,
    worker_deployment,
    workers_env,
)

SIGNER = SigningKey.generate()


def _payments(ledger: Path) -> int:
    with sqlite3.connect(ledger) as conn:
        return int(conn.execute("SELECT count(*) FROM payments_out").fetchone()[0])


@pytest.mark.slow
def test_copied_decisions_and_a_cut_run_pay_once_through_a_worker(
    workers_env: dict[str, Any],  # noqa: F811
    tmp_path: Path,
) -> None:
    store_url, env, broker = workers_env["store_url"], workers_env["env"], workers_env["broker"]
    ledger: Path = workers_env["ledger"]
    (tmp_path / "approver.pub").write_bytes(SIGNER.public_key.to_pem())
    # A deployment whose approver is SIGNER: its workers count only her signed decisions.
    env, deployment_key = worker_deployment(
        tmp_path / "with-approver", store_url, env, "--approval-keys", str(tmp_path / "approver.pub")
    )
    store = open_store(store_url)
    app = make_app(broker)
    job = {"mode": "execute", "plan_text": PLANS["approval"], "tools": TOOLS.split(","), "policy": None}
    runs = [submit_job(store, job, run_id=name, signing_key=deployment_key) for name in ("a", "b", "c")]
    enqueue(app, runs)
    workers_env["procs"].append(_worker("a", broker, env))
    _wait_for(lambda: len(store.runs("awaiting_approval")) == 3, 120, "three paused runs", every=0.2)

    # Attack 1: alice approves run a; the database writer copies her row to b and c.
    decide(store, "a", by="alice", approve=True, signing_key=SIGNER)
    with store._transaction() as cur:  # type: ignore[attr-defined]
        for victim in ("b", "c"):
            cur.execute(
                "INSERT INTO pte_approvals (run_id, plan_hash, decision, by_name, at, note, data) "
                "SELECT %s, plan_hash, decision, by_name, at, note, data "
                "FROM pte_approvals WHERE run_id = 'a'",
                (victim,),
            )
    enqueue(app, runs)

    def handled(run_id: str) -> bool:
        return any(r["type"] == "run_resumed" for r in store.records(run_id))

    _wait_for(lambda: all(handled(r) for r in runs), 120, "the worker to take up a, b and c", every=0.2)
    assert (info := store.run("a")) is not None and info.status == "succeeded"
    assert {info.run_id for info in store.runs("awaiting_approval")} == {"b", "c"}
    assert _payments(ledger) == 1

    # Attack 5 through the worker: run a is cut back before its payment, marked running, queued.
    records = store.records("a")
    pay = next(r["seq"] for r in records if r["type"] == "step_started" and r["step_id"] == "pay")
    with store._transaction() as cur:  # type: ignore[attr-defined]
        cur.execute("DELETE FROM pte_records WHERE run_id = 'a' AND seq >= %s", (pay,))
        cur.execute("DELETE FROM pte_checkpoints WHERE run_id = 'a'")
        cur.execute("UPDATE pte_runs SET status = 'running', reason = NULL WHERE run_id = 'a'")
    enqueue(app, ["a"])
    # The worker refuses it (anchors); give it the time it would need to pay again.
    with pytest.raises(AssertionError, match="timed out"):
        _wait_for(lambda: _payments(ledger) > 1, 15, "a second payment", every=0.2)
    assert _payments(ledger) == 1
