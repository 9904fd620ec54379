"""Run stores: the same runs in JSONL, SQLite and PostgreSQL (a real server on loopback).

Each backend must give back exactly the records the engine wrote, verify every run, catch
every kind of tampering in the database (an edited record, an edited query column, a
removed record, a run cut short), refuse a second writer forking a run's chain, and never
let a run id, a record or a URL become SQL.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from pte import Engine, load_registry, verify

# private: replay of one stored run (it gives replay its deployment)
from pte._deploy import replay_run
from pte.errors import AuditWriteError
from pte.stores import JsonlStore, Store, StoreError, check_run_id, open_store
from tests._ledger import ledger, new_ledger
from tests._services import postgres_url, store_fixture, write_tables  # noqa: F401 - postgres_url: the session fixture

__all__ = ["ledger"]  # the fixture, used by name

PLAN = """{"pte_plan": "1", "steps": [
 {"id": "inv", "tool": "list_overdue_invoices", "args": {"days": 30}},
 {"id": "one", "tool": "queue_reminder", "args": {"invoice_id": "INV-1006", "channel": "letter"}},
 {"id": "n", "tool": "calculator",
  "args": {"expression": "sum(a)", "variables": {"a": {"$ref": "inv/amounts"}}}}
], "result": {"$ref": "n/value"}}"""

NASTY = "'); DROP TABLE pte_records; -- \" \\ \u2028 \U0001f600"


store = store_fixture("t_stores")


def _execute(store: Store, run_id: str, plan: str = PLAN) -> Any:
    registry = load_registry(["backoffice", "calculator", "shaping"])
    with store.audit_log(run_id) as audit:
        return Engine(registry).execute(plan, audit)


def test_runs_are_stored_verified_and_replayed(store: Store, ledger: Path) -> None:
    for run_id in ("r1", "r2", "r3"):
        result = _execute(store, run_id)
        assert result.ok, result.message
    infos = store.runs()
    assert [(i.run_id, i.status, i.records) for i in infos] == [
        (r, "succeeded", 9) for r in ("r1", "r2", "r3")
    ]
    for run_id in ("r1", "r2", "r3"):
        report = store.verify(run_id)
        assert report.ok, report.issue
        records = store.records(run_id)
        # Each run has its own chain in a database store.
        assert [r["seq"] for r in records] == list(range(9))
        assert records[0]["prev"] == "0" * 64
        assert replay_run(list(enumerate(records, 1))).outcome == "same"
        assert [(c["seq"], c["hash"]) for c in store.checkpoints(run_id)] == [(8, records[-1]["hash"])]
    if hasattr(store, "verify_in_database"):
        assert store.verify_in_database("r2") is None


def test_the_same_run_gives_the_same_records_in_every_backend(
    store: Store, ledger: Path, tmp_path: Path
) -> None:
    jsonl = JsonlStore(tmp_path / "run.jsonl")
    with jsonl.audit_log("same") as audit:
        assert Engine(load_registry(["backoffice", "calculator", "shaping"])).execute(PLAN, audit).ok
    new_ledger(ledger)  # the same state for the second run
    assert _execute(store, "same").ok

    def decisions(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        ignore = {"ts", "hash", "prev", "duration_ms"}
        return [{k: v for k, v in r.items() if k not in ignore} for r in records]

    assert decisions(store.records("same")) == decisions(jsonl.records("same"))
    assert verify(tmp_path / "run.jsonl").ok


def test_an_edited_record_is_caught(store: Store, ledger: Path) -> None:
    assert _execute(store, "t1").ok
    write_tables(
        store,
        "UPDATE pte_records SET line = replace(line, 'INV-1006', 'INV-1007') WHERE run_id = ? AND seq = 3",
        ("t1",),
    )
    report = store.verify("t1")
    assert not report.intact and report.issue is not None and "hash mismatch" in report.issue.message
    if hasattr(store, "verify_in_database"):
        assert "record 3: hash mismatch" in str(store.verify_in_database("t1"))


def test_an_edited_query_column_is_caught(store: Store, ledger: Path) -> None:
    assert _execute(store, "t2").ok
    write_tables(store, "UPDATE pte_records SET type = 'llm_call' WHERE run_id = ? AND seq = 2", ("t2",))
    report = store.verify("t2")
    assert not report.intact and report.issue is not None and "columns disagree" in report.issue.message


def test_a_removed_record_is_caught(store: Store, ledger: Path) -> None:
    assert _execute(store, "t3").ok
    write_tables(store, "DELETE FROM pte_records WHERE run_id = ? AND seq = 4", ("t3",))
    report = store.verify("t3")
    assert (
        not report.intact
        and report.issue is not None
        and "seq 5 where 4 was expected" in report.issue.message
    )
    if hasattr(store, "verify_in_database"):
        assert "missing" in str(store.verify_in_database("t3"))


def test_a_run_cut_short_is_caught_by_its_checkpoint(store: Store, ledger: Path) -> None:
    assert _execute(store, "t4").ok
    write_tables(store, "DELETE FROM pte_records WHERE run_id = ? AND seq >= 6", ("t4",))
    report = store.verify("t4")
    assert not report.ok and report.issue is not None and "records were removed" in report.issue.message


def test_a_record_moved_to_another_run_is_caught(store: Store, ledger: Path) -> None:
    assert _execute(store, "t5").ok and _execute(store, "t6").ok
    write_tables(
        store, "UPDATE pte_records SET run_id = 't6', seq = 100 WHERE run_id = ? AND seq = 8", ("t5",)
    )
    assert not store.verify("t6").intact
    assert not store.verify("t5").ok


def test_a_second_writer_cannot_fork_a_runs_chain(store: Store, ledger: Path) -> None:
    first = store.audit_log("fork")
    second = store.audit_log("fork")  # opened at the same head
    first.append("run_started", mode="execute", request=None, tools=[], config={})
    with pytest.raises(AuditWriteError, match="another writer appended to this run"):
        second.append("run_started", mode="execute", request=None, tools=[], config={})
    first.close()
    second.close()
    assert [r["seq"] for r in store.records("fork")] == [0]


def test_a_sealed_run_takes_no_more_records(store: Store, ledger: Path) -> None:
    assert _execute(store, "sealed").ok
    with pytest.raises(AuditWriteError, match="sealed"), store.audit_log("sealed") as audit:
        audit.append("run_resumed", after_records=1)


@pytest.mark.parametrize(
    "run_id",
    ["x'; DROP TABLE pte_records; --", "a b", "", "../../etc/passwd", "r\x00", "r\n", "é", "x" * 129, 7],
)
def test_run_ids_that_could_inject_are_refused_before_anywrite_tables(store: Store, run_id: Any) -> None:
    with pytest.raises(StoreError, match="bad run id"):
        store.audit_log(run_id)
    with pytest.raises(StoreError, match="bad run id"):
        store.verify(run_id)
    with pytest.raises(StoreError, match="bad run id"):
        list(store.lines(run_id))
    with pytest.raises(StoreError, match="bad run id"):
        check_run_id(run_id)
    assert store.runs() == []  # the tables are still there and empty


def test_record_text_that_looks_like_sql_is_stored_as_data(store: Store, ledger: Path) -> None:
    with store.audit_log("data") as audit:
        audit.append("run_started", mode="run", request=NASTY, tools=[], config={"note": NASTY})
    records = store.records("data")
    assert records[0]["request"] == NASTY and records[0]["config"]["note"] == NASTY
    assert store.verify("data").intact
    assert [i.run_id for i in store.runs()] == ["data"]


@pytest.mark.parametrize(
    "url",
    [
        "mysql://x/y",
        "sqlite:",
        "sqlite://relative/but/two/slashes.db",
        "sqlite:///no/such/dir/x.db",
        "sqlite:///tmp/x.db\x00; DROP TABLE pte_runs",
        "postgresql://nobody@127.0.0.1:1/nothing",
    ],
)
def test_bad_store_urls_are_clear_errors(url: str) -> None:
    with pytest.raises(StoreError):
        open_store(url)


def test_postgres_url_text_never_becomeswrite_tables(postgres_url: str) -> None:  # noqa: F811
    """Connection parameters go to libpq, not into a statement: a quote in them is just a bad name."""
    bad = postgres_url.rsplit("/", 1)[0] + "/postgres';DROP TABLE pte_runs;--"
    with pytest.raises(StoreError, match="cannot open PostgreSQL store"):
        open_store(bad)
    with open_store(postgres_url) as store:
        store.runs()  # the tables are intact


def test_jsonl_store_is_the_audit_log_file(tmp_path: Path, ledger: Path) -> None:
    store = open_store(str(tmp_path / "log.jsonl"))
    assert isinstance(store, JsonlStore)
    with store.audit_log("j1") as audit:
        assert Engine(load_registry(["backoffice", "calculator", "shaping"])).execute(PLAN, audit).ok
    assert [(i.run_id, i.status) for i in store.runs()] == [("j1", "succeeded")]
    assert store.verify("j1").ok and len(store.records("j1")) == 9
    assert isinstance(open_store(f"jsonl:{tmp_path / 'log.jsonl'}"), JsonlStore)


def test_sqlite_store_is_shared_by_processes(tmp_path: Path, ledger: Path) -> None:
    """Several processes append runs to one SQLite file at once; every run verifies."""
    import subprocess

    url = f"sqlite://{tmp_path / 'shared.db'}"
    child = (
        "import sys; from pte.stores import open_store; from pte._run._engine import Engine; "
        "from pte._catalogue._registry import load_registry; "
        "reg = load_registry(['backoffice','calculator','shaping']); "
        "s = open_store(sys.argv[1]); plan = open(sys.argv[3]).read()\n"
        "for i in range(5):\n"
        "    a = s.audit_log(f'{sys.argv[2]}-{i}')\n"
        "    assert Engine(reg).execute(plan, a).ok\n"
        "    a.close()\n"
    )
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(PLAN, encoding="utf-8")
    procs = [subprocess.Popen([sys.executable, "-c", child, url, f"p{n}", str(plan_file)]) for n in range(3)]
    assert [p.wait(120) for p in procs] == [0, 0, 0]
    with open_store(url) as store:
        runs = store.runs()
        assert len(runs) == 15 and {r.status for r in runs} == {"succeeded"}
        assert all(store.verify(r.run_id).ok for r in runs)


def test_the_setup_commands_need_no_database_driver_or_broker() -> None:
    """`pte demo` and the JSONL default never import psycopg or celery (both are extras)."""
    import subprocess

    code = (
        "import sys, pte._cli._main; pte._cli._main.build_parser(); import pte.stores, pte._deploy._runs; "
        "pte.stores.open_store('x.jsonl'); "
        "bad = sorted(m for m in ('psycopg', 'celery', 'kombu', 'redis') if m in sys.modules); "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
