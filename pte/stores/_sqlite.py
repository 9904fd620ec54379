"""The SQLite store: one file, many runs, queryable; the embedded default for a deployment.

``sqlite:///abs/path/pte.db`` (three slashes: an absolute path, as in ``file:`` URLs) or
``sqlite:relative/path.db``. WAL mode, so readers (``pte audit verify``, ``pte approvals
list``) never block the workers appending; every record is its own committed transaction.
Durability maps to ``PRAGMA synchronous``: ``always`` FULL, ``batch`` NORMAL (a commit
survives a killed process; an OS crash may lose the last commits), ``none`` OFF.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pte._audit import Durability
from pte._core import StoreError
from pte.stores._base import check_run_id, utc_now
from pte.stores._sql import SCHEMA, SQLStore

__all__ = ["SQLiteStore"]

_SYNCHRONOUS = {"always": "FULL", "batch": "NORMAL", "none": "OFF"}
#: How long a worker's claim on a run lasts without being renewed (its process may have died).
LEASE_SECONDS = 60.0
#: How long a statement waits for another process's lock (the connection's busy timeout).
BUSY_TIMEOUT_SECONDS = 30.0


class SQLiteStore(SQLStore):
    """Runs, records, approvals and checkpoints in one SQLite file (created if missing)."""

    def __init__(self, path: str | Path, *, url: str | None = None) -> None:
        super().__init__(url if url is not None else f"sqlite:{path}")
        self.path = Path(path)
        if not self.path.parent.is_dir():
            raise StoreError(f"the directory of SQLite store {str(self.path)!r} does not exist")
        try:
            # `timeout` is the busy timeout, set before the first statement runs.
            self._conn = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_SECONDS
            )
            _enter_wal(self._conn)
            self._conn.execute("PRAGMA synchronous=NORMAL")
            with self._transaction() as cur:
                for statement in SCHEMA.replace("{serial}", "INTEGER").split(";"):
                    if statement.strip():
                        cur.execute(statement)
                cur.execute(
                    "CREATE TABLE IF NOT EXISTS pte_leases (run_id TEXT PRIMARY KEY, owner TEXT NOT NULL, "
                    "until REAL NOT NULL)"
                )
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open SQLite store {str(self.path)!r}: {exc}") from None

    @contextmanager
    def _transaction(self) -> Iterator[Any]:
        with self._lock:
            cur = self._conn.cursor()
            try:
                cur.execute("BEGIN IMMEDIATE")
                yield cur
                cur.execute("COMMIT")
            except BaseException as exc:
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    raise StoreError(f"SQLite store {str(self.path)!r}: {exc}") from None
                raise
            finally:
                cur.close()

    def _execute_one(self, sql: str, params: Sequence[Any]) -> int:
        with self._lock:
            try:
                return int(self._conn.execute(sql, tuple(params)).rowcount)  # autocommit
            except sqlite3.Error as exc:
                raise StoreError(f"SQLite store {str(self.path)!r}: {exc}") from None

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            try:
                return self._conn.execute(sql, tuple(params)).fetchall()
            except sqlite3.Error as exc:
                raise StoreError(f"SQLite store {str(self.path)!r}: {exc}") from None

    def _set_durability(self, durability: Durability | str) -> None:
        level = _SYNCHRONOUS[str(getattr(durability, "value", durability))]
        with self._lock:
            self._conn.execute(f"PRAGMA synchronous={level}")  # one of three constants above

    def claim(self, run_id: str, owner: str) -> bool:
        import time

        now = time.time()
        with self._transaction() as cur:
            cur.execute(
                "INSERT INTO pte_leases (run_id, owner, until) VALUES (?, ?, ?) ON CONFLICT (run_id) "
                "DO UPDATE SET owner = excluded.owner, until = excluded.until "
                "WHERE pte_leases.until < ? OR pte_leases.owner = excluded.owner",
                (check_run_id(run_id), owner, now + LEASE_SECONDS, now),
            )
            return bool(cur.rowcount == 1)

    def release(self, run_id: str, owner: str) -> None:
        with self._transaction() as cur:
            cur.execute(
                "DELETE FROM pte_leases WHERE run_id = ? AND owner = ?", (check_run_id(run_id), owner)
            )

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._conn.close()

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r})"


del utc_now


def _enter_wal(conn: sqlite3.Connection) -> None:
    """Switch the file to WAL mode unless it is already, waiting out other processes' locks.

    The switch reads the file's header, then upgrades to a write lock to rewrite it. SQLite
    never runs the busy handler for that upgrade (waiting could deadlock two readers), so a
    second process opening a fresh file while the first switches or creates the tables got
    "database is locked" at once. Retried here within the busy timeout instead; a file already
    in WAL mode (every open after the first) needs no write at all.
    """
    deadline = time.monotonic() + BUSY_TIMEOUT_SECONDS
    pause = 0.001
    while True:
        try:
            if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode & 0xFF != sqlite3.SQLITE_BUSY or time.monotonic() >= deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.05)
