"""The store interface: where audit records (and run state) go and come from.

One narrow interface, several backends (LangGraph's checkpointers, in spirit):

- `Store.writer(run_id)` gives the `RecordWriter` that an `AuditLog` appends through;
- `Store.lines(run_id)` streams a run's records back in the store's own order, as the
  canonical lines the writer was given, so `verify`, `show`, `replay` and `resume` read
  every backend the same way;
- `Store.runs` / `Store.run` list the runs and their state (``running``,
  ``awaiting_approval``, ``awaiting_endorsement``, ``succeeded``, ``failed_closed``,
  ``queued``), which the SQL
  backends keep in a table maintained from the records themselves;
- approvals, decisions and checkpoints live in the store too, so one database holds a
  deployment's whole state.

A store never interprets a record beyond its common fields: it keeps the exact canonical
line and the hash chain stays the audit log's. In the SQL stores every run has its own
chain (``seq`` from 0, ``prev`` of the first record 64 zeros), so runs are appended
concurrently without contending for one chain, and a run verifies on its own.
"""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pte._audit import AuditLog, Durability, RecordWriter, VerifyReport, verify
from pte._core import StoreError

__all__ = [
    "RUN_ID_PATTERN",
    "RUN_STATES",
    "WAITING_STATES",
    "RunInfo",
    "Store",
    "check_run_id",
    "paused_status",
    "utc_now",
]

#: What a run id may look like in a store: no spaces, quotes, slashes or control characters.
RUN_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")

#: Run states a store reports. ``queued``: submitted, no record yet (workers).
RUN_STATES = (
    "queued",
    "running",
    "awaiting_approval",
    "awaiting_endorsement",
    "succeeded",
    "failed_closed",
)

#: The states of a run paused for a person: its plan's approval, or a value's endorsement.
WAITING_STATES = ("awaiting_approval", "awaiting_endorsement")


def paused_status(record: Mapping[str, Any]) -> str:
    """The run state a ``run_paused`` record puts its run in (its reason names what it waits for)."""
    return "awaiting_endorsement" if record.get("reason") == "awaiting_endorsement" else "awaiting_approval"


def check_run_id(run_id: Any) -> str:
    """`run_id` when it is a well-formed run id, else `StoreError` (never reaches SQL or a path)."""
    if not isinstance(run_id, str) or RUN_ID_PATTERN.fullmatch(run_id) is None:
        raise StoreError(
            f"bad run id {run_id!r}: 1-128 characters of letters, digits, '_', '.', ':' or '-', "
            "starting with a letter or digit"
        )
    return run_id


def utc_now() -> str:
    """ISO-8601 UTC with microseconds, the audit log's timestamp form."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class RunInfo:
    """One run as a store knows it."""

    run_id: str
    status: str
    reason: str | None = None
    records: int = 0
    created_at: str | None = None
    updated_at: str | None = None
    #: Awaiting approval: the plan that waits, its hash, the tools needing approval, until when.
    plan_hash: str | None = None
    plan: dict[str, Any] | None = None
    tools: list[str] = field(default_factory=list)
    expires_at: str | None = None
    #: A submitted job (workers): what to run, with which tools and policy.
    job: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "status": self.status,
            "reason": self.reason,
            "records": self.records,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "plan_hash": self.plan_hash,
            "tools": self.tools,
            "expires_at": self.expires_at,
        }


@dataclass(frozen=True)
class Decision:
    """A person's decision on the plan a paused run waits with."""

    run_id: str
    plan_hash: str
    decision: str  # "approved" | "rejected"
    by: str
    at: str
    note: str | None = None


class Store(ABC):
    """Where records and run state go and come from. Backends: JSONL, SQLite, PostgreSQL."""

    #: The URL the store was opened from (credentials are never kept in it: see `describe`).
    url: str

    # -- records ------------------------------------------------------------------------------

    @abstractmethod
    def writer(self, run_id: str, *, durability: Durability | str = "batch") -> RecordWriter:
        """The writer an `AuditLog` for `run_id` appends through."""

    @abstractmethod
    def lines(self, run_id: str) -> Iterator[bytes]:
        """The run's records as canonical lines (newline included), in the store's order."""

    def records(self, run_id: str) -> list[dict[str, Any]]:
        """The run's records, parsed."""
        out = []
        for number, line in enumerate(self.lines(run_id), start=1):
            try:
                record = json.loads(line)
            except ValueError as exc:
                raise StoreError(f"run {run_id} record {number} is not JSON: {exc}") from None
            if not isinstance(record, dict):
                raise StoreError(f"run {run_id} record {number} is not a JSON object")
            out.append(record)
        return out

    def audit_log(self, run_id: str | None = None, **kwargs: Any) -> AuditLog:
        """An `AuditLog` appending to this store (a new run id when None)."""
        import uuid

        run_id = check_run_id(run_id if run_id is not None else uuid.uuid4().hex)
        durability = kwargs.pop("durability", "batch")
        return AuditLog(None, run_id=run_id, writer=self.writer(run_id, durability=durability), **kwargs)

    def verify(self, run_id: str, *, check_schema: bool = True) -> VerifyReport:
        """Verify one run's chain as stored: canonical lines, seq, prev, hash, schema, structure."""

        return verify(self.lines(check_run_id(run_id)), check_schema=check_schema)

    # -- runs ---------------------------------------------------------------------------------

    @abstractmethod
    def runs(self, status: str | None = None) -> list[RunInfo]:
        """Every run (or those in `status`), oldest first."""

    def run(self, run_id: str) -> RunInfo | None:
        """One run, or None when the store does not know it."""
        run_id = check_run_id(run_id)
        for info in self.runs():
            if info.run_id == run_id:
                return info
        return None

    # -- approvals of paused runs ----------------------------------------------------------------

    def decide(self, decision: Decision, data: Mapping[str, Any] | None = None) -> None:
        """Record a person's decision on a paused run's plan (`data`: the approval's JSON form)."""
        raise StoreError(f"{type(self).__name__} does not keep approval decisions")

    def decisions(self, run_id: str) -> list[Decision]:
        """The decisions recorded for `run_id`, oldest first."""
        return []

    # -- submitted jobs (workers) -----------------------------------------------------------------

    def submit(self, run_id: str, job: Mapping[str, Any]) -> None:
        """Record a job for a worker to run as `run_id` (status ``queued``)."""
        raise StoreError(f"{type(self).__name__} cannot hold submitted jobs; use sqlite: or postgresql:")

    def record_requeue(self, run_id: str, *, status: str, by: str, at: str) -> None:
        """Record that `by` put `run_id` (then in `status`) back on the broker (`pte runs requeue`)."""
        raise StoreError(f"{type(self).__name__} cannot hold submitted jobs; use sqlite: or postgresql:")

    def requeues(self, run_id: str) -> list[dict[str, Any]]:
        """The requeues recorded for `run_id` (``{"status", "by", "at"}``), oldest first."""
        return []

    def claim(self, run_id: str, owner: str) -> bool:
        """Take `run_id` for `owner` (one worker at a time); False when another holds it."""
        return True

    def release(self, run_id: str, owner: str) -> None:  # noqa: B027 - nothing to release by default
        """Give `run_id` back (also implied when the owner's process dies)."""

    # -- checkpoints -------------------------------------------------------------------------------

    def checkpoints(self, run_id: str) -> list[dict[str, Any]]:
        """Anchors kept for a run: ``{"seq", "hash", "at"}``, oldest first."""
        return []

    # -- lifecycle -----------------------------------------------------------------------------------

    def close(self) -> None:  # noqa: B027 - a file store holds nothing open
        """Close connections; idempotent."""

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def describe(self) -> str:
        """The URL without a password, for messages and logs."""
        return re.sub(r"(://[^:/@]*:)[^@/]*@", r"\1***@", self.url)


def iter_lines(rows: Iterable[tuple[Any, ...]]) -> Iterator[bytes]:
    """Canonical lines (newline added) from rows whose last column is the stored line text."""
    for row in rows:
        text = row[-1]
        yield (text if isinstance(text, str) else bytes(text).decode("utf-8")).encode("utf-8") + b"\n"
