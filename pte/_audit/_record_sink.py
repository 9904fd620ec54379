"""`RecordSink`: where a run's records go, the one interface the engine and executor write to.

Three sinks implement it, each on its own (none subclasses or forwards to another by
attribute magic):

- `pte._audit._writer.AuditLog`, the hash-chained log (a file, memory or a store's writer);
- `pte._replay._replayer.CheckingAuditLog`, replay's checker: it compares every record with the
  recorded one instead of writing it (and, resuming, hands the rest to a log);
- `pte._run._otel.TracedAudit`, tracing: it adds a step span's ids to step records on the way
  to the sink it wraps.

Every sink passes the same conformance suite (tests/audit/test_record_sink.py), as every
checkpointer of LangGraph does: what the engine may rely on is written down once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pte._audit._records import Record
    from pte._core import Redactor

__all__ = ["RecordSink"]


class RecordSink(Protocol):
    """What the engine, executor and gates write a run's records to.

    `write` takes a record built by `pte._audit._records` and returns it as written (the common
    fields added); it raises `AuditWriteError` when it cannot, and on every call after that
    (`broken`). `sync` makes what was written durable: the executor calls it before any
    ``write`` tool (write-ahead), the engine at the run's end.
    """

    @property
    def run_id(self) -> str:
        """The run the records belong to."""
        ...

    @property
    def redactor(self) -> Redactor:
        """The rules that scrub secrets from the records (and from anything shown beside them)."""
        ...

    @property
    def broken(self) -> bool:
        """True once a write failed: nothing more can be written."""
        ...

    @property
    def replaying(self) -> bool:
        """True while the next record is re-read from a recording (replay, resume), not new."""
        ...

    @property
    def continues_run(self) -> bool:
        """True when the records continue a run that began earlier (resume): an approval the
        run consumed before is its own."""
        ...

    @property
    def origin_trace(self) -> Mapping[str, str] | None:
        """Resume: the trace and span ids of the run this continues (a span link), else None."""
        ...

    def write(self, record: Record) -> dict[str, Any]:
        """Write one record; return it with its common fields (seq, run_id, ts, prev, hash)."""
        ...

    def write_records(self, records: Sequence[Record]) -> list[dict[str, Any]]:
        """Write `records` in order, as `write` writes each, together where the sink can (the
        log: one timestamp, one lock, one file write; a step's two records once it finished).
        Either all are written or, raising `AuditWriteError`, none; returns them as written."""
        ...

    def sync(self) -> None:
        """Make every record written so far durable."""
        ...
