"""Many runs across workers: real PostgreSQL, real Redis, real Celery worker processes.

The end-to-end test submits 200 runs over the back-office pack (reads, idempotent writes,
non-idempotent writes, payments needing approval, and slow runs), SIGKILLs one of two
workers while it is in the middle of a run, approves the runs that wait, and checks that
every run ended, every chain verifies in the database (in Python and by the server), the
killed run was resumed by the other worker, and the ledger shows each write applied
exactly once.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pte import SigningKey

# private: the worker and job internals, white-box
from pte._deploy import enqueue, make_app, process_run, submit_job
from pte.deployment import decide
from pte.stores import Store, open_store
from tests._ledger import new_ledger
from tests._services import dies_with_parent, postgres_url, redis_url  # noqa: F401 - the session fixtures

REPO = Path(__file__).resolve().parents[2]
PACK = str(Path(__file__).parents[1] / "worker_pack.py")
TOOLS = f"backoffice,calculator,shaping,{PACK}"

PLANS = {
    "read": """{"pte_plan": "1", "steps": [
      {"id": "inv", "tool": "list_overdue_invoices", "args": {"days": 30}},
      {"id": "t", "tool": "calculator",
       "args": {"expression": "sum(a)", "variables": {"a": {"$ref": "inv/amounts"}}}}
    ], "result": {"$ref": "t/value"}}""",
    "idempotent": """{"pte_plan": "1", "steps": [
      {"id": "inv", "tool": "list_overdue_invoices", "args": {"days": 30}},
      {"id": "one", "tool": "queue_reminder", "args": {"invoice_id": "INV-1006", "channel": "letter"}},
      {"id": "all", "tool": "send_reminders", "args": {"invoice_ids": {"$ref": "inv/ids"}}}
    ], "result": {"$ref": "all/invoice_ids"}}""",
    "payment_in": """{"pte_plan": "1", "steps": [
      {"id": "inv", "tool": "get_invoice", "args": {"invoice_id": "INV-1025"}},
      {"id": "pay", "tool": "record_payment",
       "args": {"invoice_id": "INV-1025", "amount": "1.00", "currency": {"$ref": "inv/currency"}}}
    ], "result": {"$ref": "pay/payment_id"}}""",
    "approval": """{"pte_plan": "1", "steps": [
      {"id": "sup", "tool": "get_supplier", "args": {"supplier_id": "S001"}},
      {"id": "pay", "tool": "send_payment", "args": {"iban": {"$ref": "sup/iban"}, "amount": "10.00",
       "currency": "EUR", "reference": "Supplier run"}}
    ], "result": {"$ref": "pay/payment_id"}}""",
    "slow": """{"pte_plan": "1", "steps": [
      {"id": "wait", "tool": "hold", "args": {"ms": 400}},
      {"id": "inv", "tool": "get_invoice", "args": {"invoice_id": "INV-1050"}, "after": ["wait"]},
      {"id": "pay", "tool": "record_payment",
       "args": {"invoice_id": "INV-1050", "amount": "1.00", "currency": {"$ref": "inv/currency"}}}
    ], "result": {"$ref": "pay/payment_id"}}""",
}
COUNTS = {"read": 50, "idempotent": 40, "payment_in": 50, "approval": 30, "slow": 30}

# Runs worker "a" holds (its advisory lock) whose last record is the slow step starting.
_IN_SLOW_STEP = """
SELECT r.run_id FROM pte_runs r
JOIN pg_locks l ON l.locktype = 'advisory' AND l.granted
 AND ((l.classid::bigint << 32) | l.objid::bigint) = hashtextextended('pte-run:' || r.run_id, 0)
JOIN pg_stat_activity a ON a.pid = l.pid AND a.application_name = 'pte-worker-a'
WHERE (SELECT x.line FROM pte_records x WHERE x.run_id = r.run_id ORDER BY x.seq DESC LIMIT 1)
      LIKE '%%"tool":"hold"%%"type":"step_started"%%'
"""


def _fresh_database(server: str, name: str) -> str:
    import psycopg

    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name}")
    return server.rsplit("/", 1)[0] + "/" + name


def _env(ledger: Path) -> dict[str, str]:
    inherited = {k: v for k, v in os.environ.items() if k not in ("PTE_DEPLOYMENT", "PTE_STORE")}
    return {**inherited, "PTE_LEDGER": str(ledger), "PYTHONPATH": str(REPO)}


def _pte(*argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pte._cli", "--quiet", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def stop_workers(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM each worker still running (a warm shutdown), then wait; kill one that does not end."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def _worker(name: str, broker: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """A `pte worker` under the deployment of ``env`` (its store: no --store); its database
    connections are named ``pte-worker-NAME`` (libpq's ``PGAPPNAME``) for the tests' queries."""
    return subprocess.Popen(
        [sys.executable, "-m", "pte._cli", "--quiet", "worker", "--tools", TOOLS,
         "--broker", broker, "--name", f"{name}@pte-test", "--visibility-timeout", "4"],
        env={**env, "PGAPPNAME": f"pte-worker-{name}"}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        preexec_fn=dies_with_parent(signal.SIGKILL),  # a killed test run leaves no worker polling
    )  # fmt: skip


def worker_deployment(
    folder: Path, store_url: str, env: dict[str, str], *options: str
) -> tuple[dict[str, str], SigningKey]:
    """A deployment made by `pte init FOLDER --tools TOOLS --store STORE_URL OPTIONS…` (its anchor
    chain in that store): the environment that names it, and its key (which signs jobs)."""
    done = _pte("init", str(folder), "--tools", TOOLS, "--store", store_url, *options, env=env)
    assert done.returncode == 0, done.stderr
    return {**env, "PTE_DEPLOYMENT": str(folder)}, SigningKey.load(folder / "deployment.key")


def _wait_for(condition: Callable[[], Any], timeout: float, what: str, every: float = 0.02) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


@pytest.fixture
def workers_env(tmp_path: Path, postgres_url: str, redis_url: str) -> Iterator[dict[str, Any]]:  # noqa: F811
    store_url = _fresh_database(postgres_url, "pte_workers")
    ledger = new_ledger(tmp_path / "ledger.sqlite")
    # Workers act only under a deployment; its key signs each job (`pte submit`) and anchors runs.
    env, key = worker_deployment(tmp_path / "deployment", store_url, _env(ledger))
    import redis

    redis.Redis.from_url(redis_url).flushdb()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        yield {
            "store_url": store_url, "ledger": ledger, "env": env, "broker": redis_url,
            "procs": procs, "key": key,
        }  # fmt: skip
    finally:
        stop_workers(procs)


@pytest.mark.slow
def test_200_runs_two_workers_one_killed_mid_run(workers_env: dict[str, Any], tmp_path: Path) -> None:
    store_url, env, broker = workers_env["store_url"], workers_env["env"], workers_env["broker"]
    ledger: Path = workers_env["ledger"]
    store = open_store(store_url)

    # Submit (before the workers start): the slow runs first, so the workers begin with them.
    # One kind through the CLI, the rest through the same Python API (a process start each is slow).
    kinds: dict[str, str] = {}
    plan = tmp_path / "slow.json"
    plan.write_text(PLANS["slow"], encoding="utf-8")
    done = _pte(
        "submit", str(plan), "--tools", TOOLS, "--store", store_url, "--broker", broker,
        "--count", str(COUNTS["slow"]), "--json", env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    kinds.update(dict.fromkeys(json.loads(done.stdout)["submitted"], "slow"))
    app = make_app(broker)
    for kind in ("read", "idempotent", "payment_in", "approval"):
        job = {"mode": "execute", "plan_text": PLANS[kind], "tools": TOOLS.split(","), "policy": None}
        run_ids = [submit_job(store, job, signing_key=workers_env["key"]) for _ in range(COUNTS[kind])]
        enqueue(app, run_ids)
        kinds.update(dict.fromkeys(run_ids, kind))
    assert len(kinds) == 200
    assert Counter(info.status for info in store.runs()) == {"queued": 200}
    worker_a = _worker("a", broker, env)
    worker_b = _worker("b", broker, env)
    workers_env["procs"] += [worker_a, worker_b]

    # Kill worker "a" while it is inside a run: it holds the run and the slow step has started.
    query = store._query  # type: ignore[attr-defined]  # the SQL store's own query, as an operator's
    killed_run = _wait_for(lambda: query(_IN_SLOW_STEP), 120, "worker a inside a slow step")[0][0]
    worker_a.send_signal(signal.SIGKILL)
    worker_a.wait(10)

    def settled() -> bool:
        states = Counter(info.status for info in store.runs())
        return states["queued"] == 0 and states["running"] == 0 and sum(states.values()) == 200

    _wait_for(settled, 240, "every run to end or wait for approval", every=0.5)
    waiting = [info.run_id for info in store.runs("awaiting_approval")]
    assert sorted(waiting) == sorted(r for r, k in kinds.items() if k == "approval")

    # A person approves the waiting runs: one through the CLI (which queues it), the rest in bulk.
    first, rest = waiting[0], waiting[1:]
    done = _pte("approve", first, "--by", "alice", "--store", store_url, "--broker", broker, env=env)
    assert done.returncode == 0, done.stderr
    for run_id in rest:
        decide(store, run_id, by="alice", approve=True)
    enqueue(app, rest)
    _wait_for(
        lambda: not store.runs("awaiting_approval") and settled(),
        240,
        "the approved runs to finish",
        every=0.5,
    )

    # Every run ended, and as expected.
    runs = {info.run_id: info for info in store.runs()}
    assert len(runs) == 200
    ends = Counter((info.status, info.reason) for info in runs.values())
    assert ends == {("succeeded", None): 200}, ends

    # Every chain verifies in the database: in Python and recomputed by the server.
    for run_id in runs:
        report = store.verify(run_id)
        assert report.ok, (run_id, report.issue)
        assert store.verify_in_database(run_id) is None  # type: ignore[attr-defined]
    done = _pte("audit", "verify", store_url, "--json", env=env)
    assert done.returncode == 0 and json.loads(done.stdout)["failed"] == 0, done.stdout[-2000:]

    # The killed run was taken over: resumed by worker b from the store, not run twice.
    records = store.records(killed_run)
    assert [r["type"] for r in records].count("run_resumed") == 1
    assert [r["step_id"] for r in records if r["type"] == "step_started"].count("pay") == 1

    # The ledger: each write applied exactly once.
    recorded: Counter[str] = Counter()
    payment_ids: list[str] = []
    outgoing: list[str] = []
    for run_id in runs:
        for record in store.records(run_id):
            if record["type"] == "step_finished" and record["status"] == "ok":
                recorded[record["tool"]] += 1
                if record["tool"] == "record_payment":
                    payment_ids.append(record["output"]["payment_id"])
                elif record["tool"] == "send_payment":
                    outgoing.append(record["output"]["payment_id"])
    assert recorded["record_payment"] == COUNTS["payment_in"] + COUNTS["slow"]
    assert recorded["send_payment"] == COUNTS["approval"]
    with sqlite3.connect(ledger) as conn:
        marks = ",".join("?" * len(payment_ids))
        paid = dict(
            conn.execute(
                f"SELECT invoice_id, count(*) FROM payments WHERE id IN ({marks}) GROUP BY invoice_id",
                payment_ids,
            ).fetchall()
        )
        new_payments = conn.execute(
            "SELECT count(*) FROM payments WHERE invoice_id IN ('INV-1025', 'INV-1050') AND amount = '1.00'"
        ).fetchone()[0]
        out_rows = sorted(r[0] for r in conn.execute("SELECT id FROM payments_out").fetchall())
        reminders = conn.execute(
            "SELECT invoice_id, channel, count(*) FROM reminders_outbox GROUP BY invoice_id, channel"
        ).fetchall()
    assert len(set(payment_ids)) == len(payment_ids) == new_payments == 80
    assert paid == {"INV-1025": 50, "INV-1050": 30}
    assert out_rows == sorted(outgoing) and len(out_rows) == 30
    assert reminders and all(count == 1 for _, _, count in reminders)


def test_a_worker_serves_only_its_own_tool_packs(
    tmp_path: Path,
    postgres_url: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A job naming a pack the worker does not serve ends failed_closed(tool_not_allowed) on the record."""
    from pte import load_registry

    monkeypatch.setenv("PTE_LEDGER", str(new_ledger(tmp_path / "ledger.sqlite")))
    store = open_store(_fresh_database(postgres_url, "pte_refuse"))
    store.submit(
        "j1", {"mode": "execute", "plan_text": PLANS["read"], "tools": ["backoffice", "/tmp/evil.py"]}
    )
    registry = load_registry(["backoffice", "calculator"])
    outcome = process_run(store, "j1", registry, ["backoffice", "calculator"], owner="w")
    assert outcome == "failed_closed"
    info = store.run("j1")
    assert info is not None and (info.status, info.reason) == ("failed_closed", "tool_not_allowed")
    assert store.verify("j1").ok
    # A second delivery of an ended run does nothing.
    assert process_run(store, "j1", registry, ["backoffice", "calculator"], owner="w") == "done"
    # Another worker holding the run makes this one wait.
    store.submit("j2", {"mode": "execute", "plan_text": PLANS["read"], "tools": ["backoffice", "calculator"]})
    other = open_store(store.url)
    assert other.claim("j2", "other")
    assert process_run(store, "j2", registry, ["backoffice", "calculator"], owner="w") == "busy"
    other.close()  # its lock goes with its connection (once the server has ended that session)
    outcome = _wait_for(
        lambda: (
            (o := process_run(store, "j2", registry, ["backoffice", "calculator"], owner="w")) != "busy" and o
        ),
        10,
        "the lock to go with the closed connection",
    )
    assert outcome == "succeeded", [r.get("message") or r.get("error") for r in store.records("j2")]


def test_unknown_runs_and_bad_ids_from_the_broker_do_nothing(postgres_url: str) -> None:  # noqa: F811
    from pte import load_registry
    from pte.stores import StoreError

    store: Store = open_store(_fresh_database(postgres_url, "pte_unknown"))
    registry = load_registry(["backoffice"])
    assert process_run(store, "never-submitted", registry, ["backoffice"], owner="w") == "unknown"
    with pytest.raises(StoreError, match="bad run id"):
        process_run(store, "x'; DROP TABLE pte_runs; --", registry, ["backoffice"], owner="w")
    assert store.runs() == []


def test_request_jobs_are_planned_with_the_workers_own_llm(
    tmp_path: Path,
    postgres_url: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A submitted request is planned by the worker's LLM endpoint; without one it is refused."""
    from pte import load_registry
    from pte.engine import ReplayClient

    monkeypatch.setenv("PTE_LEDGER", str(new_ledger(tmp_path / "ledger.sqlite")))
    store = open_store(_fresh_database(postgres_url, "pte_requests"))
    registry = load_registry(["backoffice", "calculator"])
    job = {"mode": "run", "request": "Total of the overdue invoices", "tools": ["backoffice", "calculator"]}
    store.submit("q1", job)
    store.submit("q2", job)
    llm = ReplayClient([PLANS["read"]])
    assert process_run(store, "q1", registry, ["backoffice", "calculator"], owner="w", llm=llm) == "succeeded"
    records = store.records("q1")
    assert [r["type"] for r in records][:3] == ["run_started", "llm_call", "plan_accepted"]
    assert records[0]["request"] == "Total of the overdue invoices" and store.verify("q1").ok
    assert process_run(store, "q2", registry, ["backoffice", "calculator"], owner="w") == "failed_closed"
    assert store.run("q2").reason == "llm_error"  # type: ignore[union-attr]


def test_a_job_never_brings_its_own_policy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Attack: a submitted job carries a policy that opens every sink; the worker refuses it.

    Policy is the deployment's authority (``pte worker --policy``): whoever can submit a job
    or write the store must not be able to weaken it. A job carrying exactly the worker's own
    policy runs.
    """
    from pte import Policy, load_registry

    monkeypatch.setenv("PTE_LEDGER", str(new_ledger(tmp_path / "ledger.sqlite")))
    store = open_store(f"sqlite://{tmp_path / 'runs.db'}")
    registry = load_registry(["backoffice", "calculator"])
    deployment = Policy.from_registry(registry).to_document()
    weakened = Policy.from_registry(registry, default="open").to_document()
    assert weakened != deployment
    packs = ["backoffice", "calculator"]
    store.submit("evil", {"mode": "execute", "plan_text": PLANS["read"], "tools": packs, "policy": weakened})
    outcome = process_run(store, "evil", registry, packs, owner="w", policy=deployment)
    assert outcome == "failed_closed"
    info = store.run("evil")
    assert info is not None and (info.status, info.reason) == ("failed_closed", "policy_violation")
    assert "step_started" not in [r["type"] for r in store.records("evil")]
    assert store.verify("evil").ok
    store.submit(
        "same", {"mode": "execute", "plan_text": PLANS["read"], "tools": packs, "policy": deployment}
    )
    assert process_run(store, "same", registry, packs, owner="w", policy=deployment) == "succeeded"
