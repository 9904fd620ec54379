"""What the SQLite and PostgreSQL stores share: the tables, the append transaction, the queries.

Tables (``pte_`` prefix, created if missing):

- ``pte_records(run_id, seq, type, ts, prev, hash, line)``: one row per audit record, keyed
  by ``(run_id, seq)``; ``line`` is the exact canonical line, the columns are copies of its
  common fields for querying (verify checks they agree with the line).
- ``pte_runs``: one row per run, maintained from its lifecycle records (``run_started``,
  ``run_paused``, ``run_resumed``, ``run_finished``) in the same transaction as the record,
  plus submitted jobs (``queued``) for workers.
- ``pte_approvals``: decisions on paused runs' plans (approved / rejected, by whom, when,
  and the approval itself as JSON); also the plan-hash approvals the engine checks.
- ``pte_checkpoints``: the ``(seq, hash)`` each run was sealed at, so a run cut short in the
  table is caught by verify even though its chain is intact.
- ``pte_anchors``: the deployment's anchor chain when the deployment keeps it in its run store
  (`pte._audit._anchors`): line ``n`` of the chain, signed by the deployment key, shared by
  every machine of the deployment.

Every statement is parameterised: run ids, hashes and record text never become SQL.
"""

from __future__ import annotations

import json
import threading
from abc import abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

from pte._audit import Durability, RecordWriter, VerifyIssue, VerifyReport, verify
from pte._core import AnchorError, StoreError
from pte.stores._base import WAITING_STATES, Decision, RunInfo, Store, check_run_id, paused_status, utc_now

#: Record types that change a run's row in ``pte_runs``.
LIFECYCLE = frozenset({"run_started", "run_paused", "run_resumed", "run_finished"})

SCHEMA = """
CREATE TABLE IF NOT EXISTS pte_runs (
  run_id TEXT PRIMARY KEY,
  status TEXT NOT NULL,
  reason TEXT,
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL,
  plan_hash TEXT,
  plan TEXT,
  tools TEXT,
  expires_at TEXT,
  job TEXT
);
CREATE TABLE IF NOT EXISTS pte_records (
  run_id TEXT NOT NULL,
  seq INTEGER NOT NULL,
  type TEXT NOT NULL,
  ts TEXT NOT NULL,
  prev TEXT NOT NULL,
  hash TEXT NOT NULL,
  line TEXT NOT NULL,
  PRIMARY KEY (run_id, seq)
);
CREATE TABLE IF NOT EXISTS pte_approvals (
  id {serial} PRIMARY KEY,
  run_id TEXT,
  plan_hash TEXT NOT NULL,
  decision TEXT NOT NULL CHECK (decision IN ('approved', 'rejected')),
  by_name TEXT NOT NULL,
  at TEXT NOT NULL,
  note TEXT,
  data TEXT
);
CREATE INDEX IF NOT EXISTS pte_approvals_plan ON pte_approvals (plan_hash);
CREATE INDEX IF NOT EXISTS pte_runs_status ON pte_runs (status);
CREATE TABLE IF NOT EXISTS pte_requeues (
  id {serial} PRIMARY KEY,
  run_id TEXT NOT NULL,
  status TEXT NOT NULL,
  by_name TEXT NOT NULL,
  at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS pte_checkpoints (
  run_id TEXT NOT NULL,
  seq INTEGER NOT NULL,
  hash TEXT NOT NULL,
  at TEXT NOT NULL,
  PRIMARY KEY (run_id, seq)
);
CREATE TABLE IF NOT EXISTS pte_anchors (
  n BIGINT PRIMARY KEY,
  line TEXT NOT NULL
);
"""

_RUN_COLUMNS = "run_id, status, reason, created_at, updated_at, plan_hash, plan, tools, expires_at, job"


class SQLStore(Store):
    """A store over one DB-API connection; subclasses supply the dialect."""

    #: The placeholder of the driver's paramstyle; SQL here is written with "?".
    placeholder = "?"

    def __init__(self, url: str) -> None:
        self.url = url
        self._lock = threading.RLock()
        self._closed = False

    # -- dialect ---------------------------------------------------------------------------------

    @abstractmethod
    def _transaction(self) -> AbstractContextManager[Any]:
        """A context manager: one transaction on the store's connection, yielding a cursor."""

    @abstractmethod
    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run one read statement outside an explicit transaction; all rows."""

    def _execute_one(self, sql: str, params: Sequence[Any]) -> int:
        """Run one writing statement as its own (autocommitted) transaction; its row count."""
        with self._lock, self._transaction() as cur:
            cur.execute(sql, params)
            return int(cur.rowcount)

    def _sql(self, sql: str) -> str:
        return sql if self.placeholder == "?" else sql.replace("?", self.placeholder)

    def _set_durability(self, durability: Durability | str) -> None:
        """Apply the audit log's durability setting to the connection (dialect-specific)."""

    # -- records ---------------------------------------------------------------------------------

    def writer(self, run_id: str, *, durability: Durability | str = "batch") -> RecordWriter:
        self._set_durability(durability)
        return _SQLWriter(self, check_run_id(run_id))

    def head(self, run_id: str) -> tuple[int, str, bool]:
        rows = self._query(
            self._sql("SELECT seq, hash, type FROM pte_records WHERE run_id = ? ORDER BY seq DESC LIMIT 1"),
            (run_id,),
        )
        if not rows:
            return 0, "0" * 64, False
        seq, digest, rtype = rows[0]
        return int(seq) + 1, str(digest), rtype == "run_finished"

    def append(self, run_id: str, record: Mapping[str, Any], line: bytes) -> None:
        """Insert one record and its run-state change in one transaction.

        The insert only happens when the record extends the run's chain (its ``prev`` is the
        hash of record ``seq - 1``, or it is record 0 with the genesis prev); the primary key
        refuses a second record with the same ``seq``. Either way a forked chain is refused.
        """
        seq = record["seq"]
        text = line.decode("utf-8").rstrip("\n")
        try:
            self._insert(run_id, record, text)
        except StoreError as exc:
            if "UNIQUE" not in str(exc) and "duplicate key" not in str(exc):
                raise
            raise StoreError(
                f"run {run_id}: record {seq} is already stored: another writer appended to this run"
            ) from None

    def _insert(self, run_id: str, record: Mapping[str, Any], text: str) -> None:
        seq, rtype, ts, prev, digest = (
            record["seq"],
            record["type"],
            record["ts"],
            record["prev"],
            record["hash"],
        )
        insert = self._sql(
            "INSERT INTO pte_records (run_id, seq, type, ts, prev, hash, line) "
            "SELECT ?, ?, ?, ?, ?, ?, ? WHERE (? = 0 AND ? = ?) OR EXISTS ("
            "SELECT 1 FROM pte_records WHERE run_id = ? AND seq = ? AND hash = ?)"
        )
        params = (run_id, seq, rtype, ts, prev, digest, text, seq, prev, "0" * 64, run_id, seq - 1, prev)
        refused = StoreError(
            f"run {run_id}: record {seq} does not extend the stored chain "
            "(another writer appended to this run, or records were removed)"
        )
        if rtype not in LIFECYCLE:
            # One statement is its own transaction: one round trip per record.
            if self._execute_one(insert, params) != 1:
                raise refused
            return
        with self._lock, self._transaction() as cur:
            cur.execute(insert, params)
            if cur.rowcount != 1:
                raise refused
            self._lifecycle(cur, run_id, record)

    def _lifecycle(self, cur: Any, run_id: str, record: Mapping[str, Any]) -> None:
        rtype, now = record["type"], utc_now()
        if rtype == "run_started":
            cur.execute(
                self._sql(
                    "INSERT INTO pte_runs (run_id, status, created_at, updated_at) "
                    "VALUES (?, 'running', ?, ?) "
                    "ON CONFLICT (run_id) DO UPDATE SET status = 'running', updated_at = ?"
                ),
                (run_id, now, now, now),
            )
        elif rtype == "run_resumed":
            cur.execute(
                self._sql("UPDATE pte_runs SET status = 'running', updated_at = ? WHERE run_id = ?"),
                (now, run_id),
            )
        elif rtype == "run_paused":
            cur.execute(
                self._sql(
                    "SELECT line FROM pte_records WHERE run_id = ? AND type = 'plan_accepted' "
                    "ORDER BY seq DESC LIMIT 1"
                ),
                (run_id,),
            )
            row = cur.fetchone()
            plan = json.loads(row[0]).get("plan") if row else None
            cur.execute(
                self._sql(
                    "UPDATE pte_runs SET status = ?, reason = NULL, plan_hash = ?, "
                    "plan = ?, tools = ?, expires_at = ?, updated_at = ? WHERE run_id = ?"
                ),
                (
                    paused_status(record),
                    record.get("plan_hash"),
                    json.dumps(plan, sort_keys=True),
                    json.dumps(record.get("tools") or []),
                    record.get("expires_at"),
                    now,
                    run_id,
                ),
            )
        elif rtype == "run_finished":
            cur.execute(
                self._sql("UPDATE pte_runs SET status = ?, reason = ?, updated_at = ? WHERE run_id = ?"),
                (record.get("status"), record.get("reason"), now, run_id),
            )
            cur.execute(
                self._sql("INSERT INTO pte_checkpoints (run_id, seq, hash, at) VALUES (?, ?, ?, ?)"),
                (run_id, record["seq"], record["hash"], now),
            )

    def lines(self, run_id: str) -> Iterator[bytes]:
        rows = self._query(
            self._sql("SELECT line FROM pte_records WHERE run_id = ? ORDER BY seq"), (check_run_id(run_id),)
        )
        for (text,) in rows:
            yield text.encode("utf-8") + b"\n"

    def verify(self, run_id: str, *, check_schema: bool = True) -> VerifyReport:
        """Verify the run's chain in ``seq`` order, then that it reaches its checkpoint.

        Also checks that the query columns (``seq``, ``type``, ``hash``, ``prev``) agree with
        each record's line, so an edited column cannot mislead a query.
        """

        run_id = check_run_id(run_id)
        rows = self._query(
            self._sql("SELECT seq, type, prev, hash, line FROM pte_records WHERE run_id = ? ORDER BY seq"),
            (run_id,),
        )
        report = verify((row[4].encode("utf-8") + b"\n" for row in rows), check_schema=check_schema)
        if not report.intact:
            return report
        for number, (seq, rtype, prev, digest, text) in enumerate(rows, start=1):
            record = json.loads(text)
            if (
                record.get("seq") != seq
                or record.get("type") != rtype
                or record.get("prev") != prev
                or record.get("hash") != digest
                or record.get("run_id") != run_id
            ):
                issue = VerifyIssue(number, record.get("seq"), "the row's columns disagree with its record")
                return VerifyReport(number - 1, report.runs, False, False, issue, None)
        for checkpoint in self.checkpoints(run_id):
            seq, digest = checkpoint["seq"], checkpoint["hash"]
            if seq >= len(rows) or rows[seq][3] != digest:
                issue = VerifyIssue(
                    len(rows),
                    None,
                    f"the run was sealed at record {seq} (hash {digest[:12]}…) but the stored chain "
                    f"{'ends before it' if seq >= len(rows) else 'differs there'}: records were removed",
                )
                return VerifyReport(report.records, report.runs, False, False, issue, report.last_hash)
        return report

    # -- runs ------------------------------------------------------------------------------------

    def _info(self, row: Sequence[Any], records: int) -> RunInfo:
        run_id, status, reason, created, updated, plan_hash, plan, tools, expires_at, job = row
        waiting = status in WAITING_STATES
        return RunInfo(
            run_id=run_id,
            status=status,
            reason=reason,
            records=records,
            created_at=created,
            updated_at=updated,
            plan_hash=plan_hash if waiting else None,
            plan=json.loads(plan) if plan and waiting else None,
            tools=json.loads(tools) if tools and waiting else [],
            expires_at=expires_at if waiting else None,
            job=json.loads(job) if job else None,
        )

    def runs(self, status: str | None = None) -> list[RunInfo]:
        where, params = ("WHERE r.status = ?", (status,)) if status is not None else ("", ())
        rows = self._query(
            self._sql(
                f"SELECT {', '.join('r.' + c for c in _RUN_COLUMNS.split(', '))}, "
                "(SELECT count(*) FROM pte_records x WHERE x.run_id = r.run_id) "
                f"FROM pte_runs r {where} ORDER BY r.created_at, r.run_id"
            ),
            params,
        )
        return [self._info(row[:-1], int(row[-1])) for row in rows]

    def run(self, run_id: str) -> RunInfo | None:
        rows = self._query(
            self._sql(
                f"SELECT {_RUN_COLUMNS}, (SELECT count(*) FROM pte_records x WHERE x.run_id = ?) "
                "FROM pte_runs WHERE run_id = ?"
            ),
            (check_run_id(run_id), run_id),
        )
        return self._info(rows[0][:-1], int(rows[0][-1])) if rows else None

    def submit(self, run_id: str, job: Mapping[str, Any]) -> None:
        now = utc_now()
        with self._lock, self._transaction() as cur:
            cur.execute(
                self._sql(
                    "INSERT INTO pte_runs (run_id, status, created_at, updated_at, job) "
                    "VALUES (?, 'queued', ?, ?, ?) ON CONFLICT (run_id) DO NOTHING"
                ),
                (check_run_id(run_id), now, now, json.dumps(dict(job), sort_keys=True)),
            )
            if cur.rowcount != 1:
                raise StoreError(f"run {run_id} already exists in {self.describe()}")

    # -- approvals -------------------------------------------------------------------------------

    def decide(self, decision: Decision, data: Mapping[str, Any] | None = None) -> None:
        with self._lock, self._transaction() as cur:
            cur.execute(
                self._sql(
                    "INSERT INTO pte_approvals (run_id, plan_hash, decision, by_name, at, note, data) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)"
                ),
                (
                    decision.run_id or None,
                    decision.plan_hash,
                    decision.decision,
                    decision.by,
                    decision.at,
                    decision.note,
                    json.dumps(dict(data), sort_keys=True) if data is not None else None,
                ),
            )

    def decisions(self, run_id: str) -> list[Decision]:
        rows = self._query(
            self._sql(
                "SELECT run_id, plan_hash, decision, by_name, at, note FROM pte_approvals "
                "WHERE run_id = ? ORDER BY id"
            ),
            (check_run_id(run_id),),
        )
        return [Decision(*row) for row in rows]

    # -- requeues (pte runs requeue) ---------------------------------------------------------------

    def record_requeue(self, run_id: str, *, status: str, by: str, at: str) -> None:
        self._execute_one(
            self._sql("INSERT INTO pte_requeues (run_id, status, by_name, at) VALUES (?, ?, ?, ?)"),
            (check_run_id(run_id), status, by, at),
        )

    def requeues(self, run_id: str) -> list[dict[str, Any]]:
        rows = self._query(
            self._sql("SELECT status, by_name, at FROM pte_requeues WHERE run_id = ? ORDER BY id"),
            (check_run_id(run_id),),
        )
        return [{"status": status, "by": by, "at": at} for status, by, at in rows]

    def approvals_data(self, plan_hash: str | None = None) -> list[dict[str, Any]]:
        """The stored approvals (their JSON form), for one plan hash or all, oldest first."""
        where, params = ("AND plan_hash = ?", (plan_hash,)) if plan_hash is not None else ("", ())
        rows = self._query(
            self._sql(
                "SELECT data FROM pte_approvals WHERE decision = 'approved' AND data IS NOT NULL "
                f"{where} ORDER BY id"
            ),
            params,
        )
        return [json.loads(row[0]) for row in rows]

    def checkpoints(self, run_id: str) -> list[dict[str, Any]]:
        rows = self._query(
            self._sql("SELECT seq, hash, at FROM pte_checkpoints WHERE run_id = ? ORDER BY seq"),
            (check_run_id(run_id),),
        )
        return [{"seq": int(seq), "hash": digest, "at": at} for seq, digest, at in rows]

    # -- the deployment's anchor chain (pte._audit._anchor_lines.AnchorPlace) ------------------------

    def anchor_lines(self, start: int) -> list[bytes]:
        """Lines ``start``.. of the anchor chain kept in this store, in order."""
        rows = self._query(self._sql("SELECT n, line FROM pte_anchors WHERE n >= ? ORDER BY n"), (start,))
        for expected, (n, _) in enumerate(rows, start=start):
            if int(n) != expected:
                raise AnchorError(
                    f"the anchor chain in {self.describe()} has no line {expected}: a row was deleted"
                )
        return [str(line).encode("utf-8") for _, line in rows]

    def append_anchor(self, index: int, line: bytes) -> bool:
        """Append line ``index`` of the anchor chain if the chain has exactly ``index`` lines."""
        try:
            added = self._execute_one(
                self._sql(
                    "INSERT INTO pte_anchors (n, line) SELECT ?, ? "
                    "WHERE NOT EXISTS (SELECT 1 FROM pte_anchors WHERE n >= ?) "
                    "AND (? = 0 OR EXISTS (SELECT 1 FROM pte_anchors WHERE n = ?))"
                ),
                (index, line.decode("utf-8"), index, index, index - 1),
            )
        except StoreError as exc:
            if "UNIQUE" in str(exc) or "duplicate key" in str(exc):
                return False  # another machine appended line `index` first
            raise
        return added == 1


class _SQLWriter:
    """An `AuditLog`'s writer into a SQL store: one transaction per record (it survives a kill)."""

    def __init__(self, store: SQLStore, run_id: str) -> None:
        self._store = store
        self._run_id = run_id

    def head(self) -> tuple[int, str, bool]:
        return self._store.head(self._run_id)

    def write(self, record: Mapping[str, Any], line: bytes) -> None:
        self._store.append(self._run_id, record, line)

    def sync(self) -> None:
        # Every record is committed on its own, so it is already as durable as the database
        # makes a commit (see the store's durability setting).
        return None

    def close(self) -> None:
        return None
