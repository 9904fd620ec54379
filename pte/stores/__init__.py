"""Run stores: where audit records and run state go and come from (see `pte.stores._base`).

`open_store(url)` picks the backend from the URL:

| URL | backend |
|---|---|
| ``path/to/log.jsonl``, ``jsonl:path`` | `JsonlStore`: one audit log file (the default) |
| ``sqlite:///abs/path.db``, ``sqlite:rel/path.db`` | `SQLiteStore`: one file, many runs |
| ``postgresql://user@host:port/db`` | `PostgresStore`: a PostgreSQL database |
"""

from __future__ import annotations

from pte._audit import RecordWriter
from pte._core import StoreError
from pte.stores._base import (
    RUN_ID_PATTERN,
    RUN_STATES,
    WAITING_STATES,
    Decision,
    RunInfo,
    Store,
    check_run_id,
    paused_status,
)
from pte.stores._jsonl import JsonlStore
from pte.stores._sqlite import SQLiteStore

__all__ = [
    "RUN_ID_PATTERN",
    "RUN_STATES",
    "WAITING_STATES",
    "Decision",
    "JsonlStore",
    "RecordWriter",
    "RunInfo",
    "SQLiteStore",
    "Store",
    "StoreError",
    "check_run_id",
    "is_store_url",
    "open_store",
    "paused_status",
]

_SQL_SCHEMES = ("sqlite:", "postgresql:", "postgres:")


def is_store_url(text: str) -> bool:
    """Whether `text` names a database store (as opposed to a JSON Lines file path)."""
    return text.startswith(_SQL_SCHEMES)


def open_store(url: str) -> Store:
    """Open the store `url` names (tables are created if missing). Raises `StoreError`."""
    if not isinstance(url, str) or not url or "\x00" in url:
        raise StoreError(f"bad store URL {url!r}")
    if url.startswith(("postgresql://", "postgres://")):
        from pte.stores.postgres import PostgresStore

        return PostgresStore(url)
    if url.startswith("sqlite:"):
        path = url.removeprefix("sqlite:")
        if path.startswith("//"):
            path = path[2:]  # sqlite:///abs/path -> /abs/path
            if not path.startswith("/"):
                raise StoreError(f"bad SQLite store URL {url!r}: use sqlite:///abs/path.db or sqlite:rel.db")
        if not path:
            raise StoreError(f"bad SQLite store URL {url!r}: no path")
        return SQLiteStore(path, url=url)
    if url.startswith("jsonl:"):
        return JsonlStore(url.removeprefix("jsonl:"), url=url)
    if "://" in url:
        raise StoreError(
            f"unknown store URL scheme in {url!r}: use a file path, jsonl:, sqlite: or postgresql:"
        )
    return JsonlStore(url)
