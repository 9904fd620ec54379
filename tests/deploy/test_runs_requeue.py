"""The operator's day after a broker flush: real PostgreSQL, real Redis, real Celery workers.

Runs are submitted, a worker is killed inside a run and the broker is flushed (FLUSHALL):
every message is gone, so the queued runs and the crashed one are stranded in the store.
``pte runs --status queued|running`` finds them, ``pte runs requeue`` puts them back (the
crashed one twice: requeueing is safe to repeat), and each run finishes exactly once: one
``run_finished`` each, every payment in the ledger once, nothing lost or doubled.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pte.stores import open_store
from tests._ledger import new_ledger
from tests._services import dies_with_parent, postgres_url, redis_url, run_python  # noqa: F401 - the session fixtures
from tests.deploy.test_workers import _IN_SLOW_STEP, PACK, PLANS, _fresh_database, _wait_for, stop_workers

REPO = Path(__file__).resolve().parents[2]
TOOLS = f"backoffice,calculator,shaping,{PACK}"


#: The `pte` console script (`pte._cli._main:main`), each command in a process of its own.
PTE = "import sys\nfrom pte._cli._main import main\nsys.exit(main(sys.argv[1:]))"
#: What the operator's commands import (the fork server has them loaded: a command starts fast).
CLI_IMPORTS = ["pte._cli", "pte._cli", "pte._deploy", "pte.stores", "psycopg", "celery", "redis"]


def _pte(*argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    done = run_python(PTE, "--quiet", *argv, env=env, timeout=120, warm=TOOLS.split(","), imports=CLI_IMPORTS)
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout.decode(), done.stderr.decode())


@pytest.fixture
def deployment(tmp_path: Path, postgres_url: str, redis_url: str) -> Iterator[dict[str, Any]]:  # noqa: F811
    """The operator's environment: PTE_STORE and PTE_BROKER only (no --store, no --broker)."""
    import redis

    store_url = _fresh_database(postgres_url, "pte_requeue")
    ledger = new_ledger(tmp_path / "ledger.sqlite")
    redis.Redis.from_url(redis_url).flushall()
    env = {
        **{k: v for k, v in os.environ.items() if k != "PTE_DEPLOYMENT"},
        "PTE_LEDGER": str(ledger),
        "PYTHONPATH": str(REPO),
        "PTE_STORE": store_url,  # the deployment's: it stands for --store
        "PTE_BROKER": redis_url,
    }
    # Workers act only under a deployment: its key signs each job (`pte submit`) and anchors runs.
    done = _pte("init", str(tmp_path / "deployment"), "--tools", TOOLS, "--store", store_url, env=env)
    assert done.returncode == 0, done.stderr
    env["PTE_DEPLOYMENT"] = str(tmp_path / "deployment")
    procs: list[subprocess.Popen[bytes]] = []
    try:
        yield {"store_url": store_url, "broker": redis_url, "ledger": ledger, "env": env, "procs": procs}
    finally:
        stop_workers(procs)


def _worker(name: str, deployment: dict[str, Any]) -> subprocess.Popen[bytes]:
    env = {**deployment["env"], "PGAPPNAME": f"pte-worker-{name}"}  # its connections, for _IN_SLOW_STEP
    proc = subprocess.Popen(
        [sys.executable, "-m", "pte._cli", "--quiet", "worker", "--tools", TOOLS,
         "--name", f"{name}@pte-test", "--visibility-timeout", "4"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        preexec_fn=dies_with_parent(signal.SIGKILL),  # a killed test run leaves no worker polling
    )  # fmt: skip
    deployment["procs"].append(proc)
    return proc


def _runs(env: dict[str, str], *argv: str) -> list[dict[str, Any]]:
    done = _pte("runs", *argv, "--json", env=env)
    assert done.returncode == 0, done.stderr
    rows: list[dict[str, Any]] = json.loads(done.stdout)
    return rows


@pytest.mark.slow
def test_broker_flushed_mid_run_runs_are_found_requeued_and_finish_once(
    deployment: dict[str, Any], tmp_path: Path
) -> None:
    env, ledger = deployment["env"], deployment["ledger"]
    import redis

    kinds: dict[str, str] = {}
    for kind, count in (("slow", 4), ("payment_in", 4)):
        plan = tmp_path / f"{kind}.json"
        plan.write_text(PLANS[kind], encoding="utf-8")
        done = _pte("submit", str(plan), "--tools", TOOLS, "--count", str(count), "--json", env=env)
        assert done.returncode == 0, done.stderr
        kinds.update(dict.fromkeys(json.loads(done.stdout)["submitted"], kind))
    assert Counter(r["status"] for r in _runs(env)) == {"queued": 8}

    # A worker dies inside a slow run, and the broker loses every message.
    store = open_store(deployment["store_url"])
    worker_a = _worker("a", deployment)
    query = store._query  # type: ignore[attr-defined]  # the SQL store's own query, as an operator's
    crashed = _wait_for(lambda: query(_IN_SLOW_STEP), 120, "worker a inside a slow step")[0][0]
    worker_a.send_signal(signal.SIGKILL)
    worker_a.wait(10)
    redis.Redis.from_url(deployment["broker"]).flushall()

    assert redis.Redis.from_url(deployment["broker"]).llen("pte") == 0  # no message left: stranded
    queued = [r["run_id"] for r in _runs(env, "--status", "queued")]
    running = [r["run_id"] for r in _runs(env, "--status", "running")]
    assert running == [crashed]
    assert crashed not in queued and len(queued) >= 1
    ended_before = {r["run_id"] for r in _runs(env) if r["status"] == "succeeded"}
    assert sorted(queued + running + sorted(ended_before)) == sorted(kinds)

    # The crashed run twice (before a worker is back): a repeated requeue is harmless.
    for run_id in [*queued, crashed, crashed]:
        done = _pte("runs", "requeue", run_id, "--by", "oncall", env=env)
        assert done.returncode == 0, done.stderr
        assert f"run {run_id} queued again" in done.stdout
    _worker("b", deployment)

    _wait_for(
        lambda: Counter(r["status"] for r in _runs(env)) == {"succeeded": 8},
        180,
        "every run to finish",
        every=1,
    )
    # Each run finished once; the crashed one was resumed, its payment step started once.
    for run_id in kinds:
        types = [r["type"] for r in store.records(run_id)]
        assert types.count("run_finished") == 1 and types.count("run_started") == 1, (run_id, types)
        assert store.verify(run_id).ok
    crashed_records = store.records(crashed)
    assert [r["type"] for r in crashed_records].count("run_resumed") == 1
    assert [r["step_id"] for r in crashed_records if r["type"] == "step_started"].count("pay") == 1
    with sqlite3.connect(ledger) as conn:
        paid = dict(
            conn.execute(
                "SELECT invoice_id, count(*) FROM payments WHERE invoice_id IN ('INV-1025', 'INV-1050') "
                "AND amount = '1.00' GROUP BY invoice_id"
            ).fetchall()
        )
    assert paid == {"INV-1025": 4, "INV-1050": 4}

    # The requeues are on record; an ended run is refused with the reason (exit 1), nothing queued.
    rows = {r["run_id"]: r for r in _runs(env)}
    assert rows[crashed]["requeues"] == 2 and all(rows[r]["requeues"] == 1 for r in queued)
    assert all(len(r["plan_hash"]) == 64 for r in rows.values())
    assert store.requeues(crashed)[0] == {
        "status": "running",
        "by": "oncall",
        "at": store.requeues(crashed)[0]["at"],
    }
    done = _pte("runs", "requeue", crashed, env=env)
    assert done.returncode == 1 and "has ended (succeeded)" in done.stderr
    done = _pte("runs", "requeue", "no-such-run", env=env)
    assert done.returncode == 1 and "no run 'no-such-run'" in done.stderr
    table = _pte("runs", "--status", "succeeded", env=env)
    assert table.returncode == 0 and crashed in table.stdout and "8 run(s)" in table.stdout
