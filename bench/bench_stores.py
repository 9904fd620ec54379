"""Run stores and workers: append cost per record, and runs per second over Celery workers.

    python bench/bench_stores.py [--records 3000] [--runs 200]

Starts its own PostgreSQL and Redis on loopback (as the tests do). Prints ratios against a
baseline measured in the same run:

1. store append cost per audit record (the engine's `AuditLog.append`, default durability)
   for JSON Lines, SQLite and PostgreSQL, as a ratio to JSON Lines;
2. runs per second with 1, 2 and 4 `pte worker` processes (Celery, Redis broker,
   PostgreSQL store) against the same runs executed one after another in one process into
   the same store.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from _services import postgres_server, redis_server  # noqa: E402

from pte import Engine, load_pack, load_registry  # noqa: E402
from pte._deploy import enqueue, make_app, submit_job  # noqa: E402
from pte.deployment import pausing_gate, run_in_store  # noqa: E402
from pte.stores import Store, open_store  # noqa: E402

TOOLS = "backoffice,calculator,shaping"
PLAN = """{"pte_plan": "1", "steps": [
  {"id": "inv", "tool": "list_overdue_invoices", "args": {"days": 30}},
  {"id": "one", "tool": "queue_reminder", "args": {"invoice_id": "INV-1006", "channel": "letter"}},
  {"id": "t", "tool": "calculator",
   "args": {"expression": "sum(a)", "variables": {"a": {"$ref": "inv/amounts"}}}}
], "result": {"$ref": "t/value"}}"""


def _database(server: str, name: str) -> str:
    import psycopg

    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name}")
    return server.rsplit("/", 1)[0] + "/" + name


def append_cost(store: Store, records: int) -> float:
    """Seconds per record for `records` step-like appends to one run (each survives a kill)."""
    fields = {"step_id": "inv", "tool": "list_overdue_invoices", "effect": "read", "args": {"days": 30}}
    with store.audit_log("bench-append") as audit:
        audit.append("step_started", **fields)  # warm-up: the file / connection is open
        started = time.perf_counter()
        for _ in range(records):
            audit.append("step_started", **fields)
        elapsed = time.perf_counter() - started
    return elapsed / records


def _settled(store: Store, total: int) -> bool:
    runs = store.runs()
    return len(runs) >= total and all(r.status in ("succeeded", "failed_closed") for r in runs)


def workers_rate(server: str, broker: str, env: dict[str, str], processes: int, runs: int) -> float:
    url = _database(server, f"bench_w{processes}")
    store = open_store(url)
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pte._cli",
                "--quiet",
                "worker",
                "--tools",
                TOOLS,
                "--store",
                url,
                "--broker",
                broker,
                "--name",
                f"w{n}@bench",
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for n in range(processes)
    ]
    app = make_app(broker)
    job = {"mode": "execute", "plan_text": PLAN, "tools": TOOLS.split(","), "policy": None}
    try:
        # Warm-up: every worker has started and run once before the clock starts.
        enqueue(app, [submit_job(store, job) for _ in range(processes * 2)])
        while not _settled(store, processes * 2):
            time.sleep(0.2)
        ids = [submit_job(store, job) for _ in range(runs)]
        started = time.perf_counter()
        enqueue(app, ids)
        while not _settled(store, runs + processes * 2):
            time.sleep(0.05)
        return runs / (time.perf_counter() - started)
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(30)
        store.close()


def in_process_rate(server: str, runs: int) -> float:
    store = open_store(_database(server, "bench_inproc"))
    registry = load_registry(TOOLS.split(","))
    engine = Engine(registry, approval=pausing_gate(store, registry))
    run_in_store(engine, store, plan_text=PLAN)  # warm-up
    started = time.perf_counter()
    for _ in range(runs):
        run_in_store(engine, store, plan_text=PLAN)
    rate = runs / (time.perf_counter() - started)
    store.close()
    return rate


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=3000)
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, postgres_server() as server, redis_server() as broker:
        ledger = Path(tmp) / "ledger.sqlite"
        module = sys.modules[load_pack("backoffice")["get_invoice"].func.__module__]
        module.create_sample_ledger(ledger, overwrite=True)
        os.environ["PTE_LEDGER"] = str(ledger)
        env = {**os.environ, "PYTHONPATH": str(REPO)}

        costs = {
            "jsonl": append_cost(open_store(str(Path(tmp) / "bench.jsonl")), args.records),
            "sqlite": append_cost(open_store(f"sqlite://{Path(tmp) / 'bench.db'}"), args.records),
            "postgresql": append_cost(open_store(_database(server, "bench_append")), args.records),
        }
        print(f"store append cost per record ({args.records} records, durability batch):")
        for name, cost in costs.items():
            print(f"  {name:11} {cost * 1e6:8.1f} µs   {cost / costs['jsonl']:6.1f} x JSONL")

        baseline = in_process_rate(server, args.runs)
        print(f"\nruns per second ({args.runs} runs of a 3-step plan, PostgreSQL store):")
        print(f"  one process, no broker   {baseline:7.1f} runs/s   1.00 x")
        for processes in (1, 2, 4):
            rate = workers_rate(server, broker, env, processes, args.runs)
            print(f"  {processes} worker process(es)    {rate:7.1f} runs/s   {rate / baseline:4.2f} x")
        print(f"\n({os.cpu_count()} CPU cores on this machine)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
