"""Opening a SQLite store while another process holds the file's write lock waits, never fails.

The flaky `test_sqlite_store_is_shared_by_processes` ("database is locked"): processes opening
one fresh file at once each switched it to WAL mode; the switch upgrades a read lock to a write
lock, which SQLite never retries on its own, so the second opener failed at once instead of
waiting for the first. Here the first opener is held mid-transaction on purpose: the race,
made deterministic.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from pte.stores import Store, StoreError, open_store


def _made_by(path: Path, who: str) -> None:
    """The file as `who` left it: empty, a rollback-journal database (SQLite's default, as
    another program makes one) or a store's own WAL-mode file."""
    if who == "nobody (an empty file)":
        path.touch()
        return
    with sqlite3.connect(path) as conn:
        if who == "a store":
            conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE other (x)")
    conn.close()


@pytest.mark.parametrize("lock", ["BEGIN IMMEDIATE", "BEGIN EXCLUSIVE"])
@pytest.mark.parametrize("made_by", ["nobody (an empty file)", "another program", "a store"])
def test_opening_waits_for_a_writer_holding_the_file(tmp_path: Path, made_by: str, lock: str) -> None:
    path = tmp_path / "shared.db"
    _made_by(path, made_by)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute(lock)  # as a second store does while it creates the tables
    opened: list[Store | BaseException] = []

    def open_it() -> None:
        try:
            opened.append(open_store(f"sqlite://{path}"))
        except StoreError as exc:
            opened.append(exc)

    opener = threading.Thread(target=open_it)
    opener.start()
    opener.join(0.3)
    # Still waiting for the lock (before the fix: "database is locked" at once).
    assert opened == [] and opener.is_alive()
    holder.execute("COMMIT")
    holder.close()
    opener.join(30)
    assert len(opened) == 1, opened
    result = opened[0]
    assert isinstance(result, Store), result
    with result as store:
        assert store.runs() == []
    with sqlite3.connect(path) as check:
        assert check.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    check.close()
