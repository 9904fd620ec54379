"""The `RecordSink` conformance suite: every sink the engine may write to keeps one contract.

As LangGraph runs one checkpointer suite against every backend, every sink here runs the
same checks: the in-memory log, the file log, a store's log (SQLite), replay's checker (a
whole recording, and resume's: a recorded prefix, the rest forwarded to the log) and the
tracing wrapper. What the engine relies on (pte/_audit/_record_sink.py):

- `write` returns the record as written: the common fields (consecutive-or-increasing
  ``seq``, the sink's ``run_id``, ``ts``, ``prev`` chained to the previous ``hash``, a hash
  that is right) around exactly the built fields (plus trace ids, for the tracer);
- secrets are redacted before a record is hashed;
- a record that is not JSON breaks the sink: `broken`, and every later write refuses;
- ``run_finished`` seals the run: nothing may follow it;
- `sync` works at any point; a durable sink holds, after it, a log `verify` finds intact.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pte import AuditLog, verify

# private: the tracing fields a record may carry; a record value, to build records by hand
from pte._audit import TRACE_FIELDS, Record

# private: the record builders, to write records by hand
from pte._audit import records as rec

# private: replay's parts, white-box
from pte._replay import CheckingAuditLog

# private: tracing, white-box
from pte._run import RunTracer, TracedAudit
from pte.audit import RecordSink, read_records
from pte.errors import AuditWriteError
from pte.stores import SQLiteStore
from tests._chain import chain_hash

RUN_ID = "0123456789abcdef0123456789abcdef"
PLAN_HASH = "a" * 64
SECRET = "sk-live-0123456789abcdefSECRET"

#: The members of the protocol, each present on every sink (no attribute forwarding).
MEMBERS = (
    "run_id",
    "redactor",
    "broken",
    "replaying",
    "continues_run",
    "origin_trace",
    "write",
    "write_records",
    "sync",
)


def scenario() -> list[Record]:
    """A small run, every record built by `pte._audit._records` (a read step, a retried call, a secret)."""
    return [
        rec.run_started(mode="execute", request=None, config={"refused": False}),
        rec.step_started(step_id="s1", tool="lookup", effect="read", args={"id": "x"}, plan_hash=PLAN_HASH),
        rec.step_finished(step_id="s1", tool="lookup", status="ok", duration_ms=1.23456, output={"v": 1}),
        rec.step_started(
            step_id="s2",
            tool="notify",
            effect="write",
            args={"api_key": SECRET, "to": "a"},
            plan_hash=PLAN_HASH,
        ),
        rec.step_finished(
            step_id="s2",
            tool="notify",
            status="failed",
            duration_ms=2.0,
            error={"kind": "tool_error", "message": "down"},
            attempts=2,
            retry_errors=[{"kind": "timeout", "message": "slow"}],
        ),
        rec.run_finished(
            status="failed_closed",
            reason="step_failed",
            message="s2 failed",
            answer=None,
            result=None,
            steps_run=2,
            llm_calls=0,
        ),
    ]


def _recording(records: list[Record]) -> list[tuple[int, dict[str, Any]]]:
    """`records` as a log records them, numbered by line (what replay's checker compares with)."""
    log = AuditLog(None, run_id=RUN_ID)
    return [(n, log.write(record)) for n, record in enumerate(records, start=1)]


@dataclass
class Sink:
    sink: RecordSink
    #: The records as the sink's storage holds them after a sync (None: it stores nothing).
    stored: Callable[[], list[dict[str, Any]]] | None = None
    #: The file `verify` checks (durable file sinks).
    path: Path | None = None
    traced: bool = False


def _memory(tmp: Path, stack: ExitStack) -> Sink:
    log = AuditLog(None, run_id=RUN_ID)
    return Sink(log, lambda: list(log.records))


def _file(tmp: Path, stack: ExitStack) -> Sink:
    path = tmp / "run.jsonl"
    log = stack.enter_context(AuditLog(path, run_id=RUN_ID))
    return Sink(log, lambda: read_records(path), path)


def _store(tmp: Path, stack: ExitStack) -> Sink:
    store = SQLiteStore(tmp / "runs.db")
    stack.callback(store.close)
    log = stack.enter_context(store.audit_log(RUN_ID))
    return Sink(log, lambda: list(store.records(RUN_ID)))


def _checker(tmp: Path, stack: ExitStack) -> Sink:
    return Sink(CheckingAuditLog(_recording(scenario()), run_id=RUN_ID))


def _resuming_checker_after(kept: int) -> Callable[[Path, ExitStack], Sink]:
    """A checker resuming a log that crashed after its first `kept` records: the recording is
    that prefix, the rest goes on in the log. After 3, between steps; after 2, between a read
    step's two records (a log written before they went in one write: on resume the step's pair
    is written together, its step_started checked)."""

    def make(tmp: Path, stack: ExitStack) -> Sink:
        path = tmp / "crashed.jsonl"
        with AuditLog(path, run_id=RUN_ID) as crashed:
            for record in scenario()[:kept]:
                crashed.write(record)
        numbered = list(enumerate(read_records(path), start=1))
        forward = stack.enter_context(AuditLog(path, run_id=RUN_ID, repair_partial_tail=True))
        return Sink(CheckingAuditLog(numbered, run_id=RUN_ID, forward=forward))

    return make


def _traced(tmp: Path, stack: ExitStack) -> Sink:
    sdk = pytest.importorskip("opentelemetry.sdk.trace", reason="OpenTelemetry is an optional extra")
    log = AuditLog(None, run_id=RUN_ID)
    tracer = RunTracer(RUN_ID, "execute", sdk.TracerProvider(), log.redactor)
    assert tracer.active
    return Sink(TracedAudit(log, tracer), lambda: list(log.records), traced=True)


SINKS: dict[str, Callable[[Path, ExitStack], Sink]] = {
    "memory": _memory,
    "file": _file,
    "sqlite-store": _store,
    "replay-checker": _checker,
    "resume-checker": _resuming_checker_after(3),
    "resume-checker-mid-step": _resuming_checker_after(2),
    "traced": _traced,
}


@pytest.fixture(params=sorted(SINKS))
def sink(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Sink]:
    with ExitStack() as stack:
        yield SINKS[request.param](tmp_path, stack)


def _hash_ok(record: dict[str, Any]) -> bool:
    body = {k: v for k, v in record.items() if k != "hash"}
    return bool(record["hash"] == chain_hash(record["prev"], body))


def test_every_sink_has_every_member_of_the_protocol(sink: Sink) -> None:
    for name in MEMBERS:
        assert name in dir(type(sink.sink)) or name in vars(sink.sink), name
    assert sink.sink.run_id == RUN_ID
    assert sink.sink.broken is False
    assert isinstance(sink.sink.replaying, bool)
    assert isinstance(sink.sink.continues_run, bool)
    assert sink.sink.origin_trace is None or set(sink.sink.origin_trace) == set(TRACE_FIELDS)


def test_write_returns_the_built_record_with_its_common_fields_chained(sink: Sink) -> None:
    written = [sink.sink.write(record) for record in scenario()]
    previous: dict[str, Any] | None = None
    for record, out in zip(scenario(), written, strict=True):
        assert out["type"] == record.type
        assert out["run_id"] == RUN_ID
        assert isinstance(out["ts"], str) and out["ts"].endswith("Z")
        assert _hash_ok(out)
        own = {k: v for k, v in out.items() if k not in {"seq", "run_id", "ts", "type", "prev", "hash"}}
        extra = set(own) - set(record.fields)
        if record.type == "run_started":  # what the writer itself records in every run_started
            assert extra == {"format", "pte_version"}
        elif sink.traced and record.type.startswith("step_"):
            assert extra == set(TRACE_FIELDS)
        else:
            assert extra == set()
        expected = sink.sink.redactor.redact_fields(record.type, record.fields)
        assert {k: own[k] for k in record.fields} == {k: v for k, v in expected.items()}
        if previous is not None and out["seq"] == previous["seq"] + 1:
            assert out["prev"] == previous["hash"]
        if previous is not None:
            assert out["seq"] > previous["seq"]
        previous = out
    _assert_kept(sink, written)


def _assert_kept(sink: Sink, written: list[dict[str, Any]]) -> None:
    """Once synced, the store (if any) holds `written` as its run's last records, and the file
    (if any) verifies."""
    sink.sink.sync()
    if sink.stored is not None:
        stored = sink.stored()
        assert [r for r in stored if r["run_id"] == RUN_ID][-len(written) :] == written
    if sink.path is not None:
        assert verify(sink.path).ok


def _in_batches(sink: RecordSink) -> list[dict[str, Any]]:
    """The scenario written as the executor writes it: each step's two records together
    where they are written together (the read s1, and s2's end with the run's)."""
    run_started, s1_started, s1_finished, s2_started, s2_finished, run_finished = scenario()
    return [
        sink.write(run_started),
        *sink.write_records([s1_started, s1_finished]),
        *sink.write_records([s2_started]),
        *sink.write_records([s2_finished, run_finished]),
    ]


def test_write_records_writes_what_write_writes_each_with_one_timestamp(sink: Sink) -> None:
    one_by_one = AuditLog(None, run_id=RUN_ID)
    expected = [one_by_one.write(record) for record in scenario()]
    written = _in_batches(sink.sink)
    # seq: resume's log numbers on past its run_resumed annotation.
    not_compared = {"seq", "ts", "prev", "hash", *(TRACE_FIELDS if sink.traced else ())}
    for out, reference in zip(written, expected, strict=True):
        assert _hash_ok(out)
        assert {k: v for k, v in out.items() if k not in not_compared} == {
            k: v for k, v in reference.items() if k not in not_compared
        }
    for before, after in itertools.pairwise(written):
        assert after["seq"] > before["seq"]
        if after["seq"] == before["seq"] + 1:
            assert after["prev"] == before["hash"]
    stamps = [r["ts"] for r in written]
    # The memory, file and store logs stamp a batch once (the checkers re-derive theirs).
    if isinstance(sink.sink, AuditLog):
        assert stamps[1] == stamps[2] and stamps[4] == stamps[5]
    _assert_kept(sink, written)


def test_a_batch_holding_a_record_that_is_not_json_writes_none_of_it(sink: Sink) -> None:
    run_started, s1_started, *_ = scenario()
    sink.sink.write(run_started)
    kept = sink.stored() if sink.stored is not None else None
    bad = rec.step_finished(step_id="s1", tool="t", status="ok", duration_ms=1.0, output=math.inf)
    with pytest.raises(AuditWriteError):
        sink.sink.write_records([s1_started, bad])
    assert sink.sink.broken
    if sink.stored is not None and not isinstance(sink.sink, CheckingAuditLog):
        assert sink.stored() == kept  # not even the good record before the bad one
    with pytest.raises(AuditWriteError):
        sink.sink.write_records([s1_started])


def test_a_secret_is_redacted_before_the_record_is_hashed(sink: Sink) -> None:
    written = [sink.sink.write(record) for record in scenario()]
    started = next(r for r in written if r["type"] == "step_started" and r["step_id"] == "s2")
    assert SECRET not in repr(written)
    assert started["args"]["to"] == "a"
    assert started["args"]["api_key"] != SECRET


def test_a_record_that_is_not_json_breaks_the_sink_for_good(sink: Sink) -> None:
    first, *_ = scenario()
    sink.sink.write(first)
    with pytest.raises(AuditWriteError):
        sink.sink.write(
            rec.step_started(step_id="s1", tool="t", effect="read", args=math.nan, plan_hash=PLAN_HASH)
        )
    assert sink.sink.broken
    with pytest.raises(AuditWriteError):
        sink.sink.write(scenario()[1])


def test_run_finished_seals_the_run(sink: Sink) -> None:
    for record in scenario():
        sink.sink.write(record)
    with pytest.raises(AuditWriteError):
        sink.sink.write(rec.run_resumed(after_records=6))


def test_the_replaying_flag_follows_the_recording() -> None:
    """Replay's checker says whether the next record is re-read; a log never re-reads."""
    checker = CheckingAuditLog(_recording(scenario()[:2]), run_id=RUN_ID)
    assert checker.replaying and not checker.continues_run
    checker.write(scenario()[0])
    assert checker.replaying
    checker.write(scenario()[1])
    assert not checker.replaying and checker.next_expected is None
    log = AuditLog(None, run_id=RUN_ID)
    assert (log.replaying, log.continues_run, log.origin_trace) == (False, False, None)
