"""The PostgreSQL store (psycopg 3): runs, records, approvals and checkpoints in tables.

``postgresql://user:password@host:port/dbname`` (any libpq URL or conninfo). Each record is
appended in its own transaction, which also refuses a record that does not extend the
run's chain; `verify_in_database` re-checks every run's chain with the server's own
``sha256`` in ``seq`` order, next to the full check in Python (`Store.verify`).

A worker claims a run with a session-level advisory lock: exactly one worker holds a run,
and the lock goes with the worker's connection when its process dies, so another worker
can take the run over at once.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from pte._audit import Durability
from pte._core import StoreError
from pte.stores._base import check_run_id
from pte.stores._sql import SCHEMA, SQLStore

__all__ = ["PostgresStore"]

_SYNCHRONOUS = {"always": "on", "batch": "on", "none": "off"}

# The chain of one run, recomputed by the server: each record's hash is sha256(prev + the
# canonical record without its "hash" entry), and prev is the previous row's hash in seq order.
_CHAIN_SQL = """
SELECT seq,
       hash = encode(sha256(convert_to(prev || replace(line, '"hash":"' || hash || '",', ''), 'UTF8')), 'hex')
         AS hash_ok,
       prev = coalesce(lag(hash) OVER (ORDER BY seq), repeat('0', 64)) AS prev_ok,
       seq = row_number() OVER (ORDER BY seq) - 1 AS seq_ok
FROM pte_records WHERE run_id = %s ORDER BY seq
"""


class PostgresStore(SQLStore):
    """A store in a PostgreSQL database (tables created if missing)."""

    placeholder = "%s"

    def __init__(self, url: str) -> None:
        super().__init__(url)
        try:
            import psycopg
        except ImportError:  # pragma: no cover - the [postgres] extra is not installed
            raise StoreError(
                "the PostgreSQL store needs psycopg: pip install 'plan-then-execute[postgres]'"
            ) from None
        self._psycopg = psycopg
        try:
            self._conn = psycopg.connect(url, autocommit=True, connect_timeout=10)
            with self._transaction() as cur:
                # Several processes may create the tables at once; the lock serialises that.
                cur.execute("SELECT pg_advisory_xact_lock(7244011)")
                cur.execute(SCHEMA.replace("{serial}", "BIGSERIAL"))
        except psycopg.Error as exc:
            raise StoreError(f"cannot open PostgreSQL store {self.describe()}: {_first_line(exc)}") from None

    @contextmanager
    def _transaction(self) -> Iterator[Any]:
        with self._lock:
            try:
                with self._conn.transaction(), self._conn.cursor() as cur:
                    yield cur
            except self._psycopg.Error as exc:
                raise StoreError(f"PostgreSQL store {self.describe()}: {_first_line(exc)}") from None

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            try:
                with self._conn.cursor() as cur:
                    cur.execute(sql, tuple(params))
                    return list(cur.fetchall())
            except self._psycopg.Error as exc:
                raise StoreError(f"PostgreSQL store {self.describe()}: {_first_line(exc)}") from None

    def _execute_one(self, sql: str, params: Sequence[Any]) -> int:
        with self._lock:
            try:
                cur = self._conn.execute(sql, tuple(params))  # autocommit: its own transaction
                return int(cur.rowcount)
            except self._psycopg.Error as exc:
                raise StoreError(f"PostgreSQL store {self.describe()}: {_first_line(exc)}") from None

    def _set_durability(self, durability: Durability | str) -> None:
        level = _SYNCHRONOUS[str(getattr(durability, "value", durability))]
        self._query_none(f"SET synchronous_commit = {level}")  # one of two constants above

    def _query_none(self, sql: str, params: Sequence[Any] = ()) -> None:
        with self._lock:
            try:
                self._conn.execute(sql, tuple(params))
            except self._psycopg.Error as exc:
                raise StoreError(f"PostgreSQL store {self.describe()}: {_first_line(exc)}") from None

    def verify_in_database(self, run_id: str) -> str | None:
        """The server's own check of a run's chain (hash, prev, seq per row, in seq order).

        None when every row holds; else what the first bad row is. Complements `verify`
        (which also checks canonical form, the schema and run structure).
        """
        rows = self._query(_CHAIN_SQL, (check_run_id(run_id),))
        for seq, hash_ok, prev_ok, seq_ok in rows:
            if not seq_ok:
                return f"record {seq}: seq out of order (a record is missing)"
            if not hash_ok:
                return f"record {seq}: hash mismatch (the record was edited)"
            if not prev_ok:
                return f"record {seq}: prev is not the previous record's hash"
        return None

    def claim(self, run_id: str, owner: str) -> bool:
        rows = self._query(
            "SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", ("pte-run:" + check_run_id(run_id),)
        )
        return bool(rows[0][0])

    def release(self, run_id: str, owner: str) -> None:
        self._query(
            "SELECT pg_advisory_unlock(hashtextextended(%s, 0))", ("pte-run:" + check_run_id(run_id),)
        )

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._conn.close()

    def __repr__(self) -> str:
        return f"PostgresStore({self.describe()!r})"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
