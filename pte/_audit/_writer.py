"""The tamper-evident audit log: append-only JSON Lines, one hash-chained record per line.

Every line is exactly ``canonical_json(record) + "\\n"``. Every record carries

- ``seq``: 0 for the first line of the *file*, +1 for each line after it;
- ``run_id``, ``ts`` (ISO-8601 UTC with microseconds) and ``type``;
- ``prev``: the previous line's ``hash`` (64 zeros for the first line);
- ``hash`` = ``sha256_hex(prev + canonical_json(record without "hash"))``;

plus the fields of its type (schemas/audit-record.schema.json is the contract). A file may
hold several runs one after another; the chain continues across them and ``run_finished``
seals a run. Because each line must be canonical and chained, any edited byte, deleted or
reordered record, or truncation inside a run is detected by `verify`.

Secrets are scrubbed by a `Redactor` before a record is hashed, so neither the log nor its
hashes ever depend on a secret. A failed write breaks the log for good and every later
`AuditLog.append` raises `AuditWriteError`: the run fails closed instead of running unlogged.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import uuid
import weakref
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

import orjson

from pte._core import AuditWriteError, PTEError, canonical_bytes, sha256_hex

try:  # POSIX; elsewhere appends are serialised within one process only
    import fcntl as _fcntl
except ImportError:  # pragma: no cover - Windows
    _fcntl = None  # type: ignore[assignment]

__all__ = [
    "AuditLog",
    "Durability",
    "RecordWriter",
]

from pte._audit._records import Record
from pte._audit._scan import _COMMON_FIELDS, AUDIT_FORMAT, GENESIS_HASH
from pte._audit._schema import _schema_problem
from pte._audit._tail import (
    _check_format,
    _checked_last,
    _parse_complete_record,
    _read_tail,
    _stored_hashes,
)
from pte._core import Redactor, __version__

# The hash member as `AuditLog._serialise` first encodes it (any 64 hex digits would do),
# with the comma after it: "hash" is never a record's last member ("type" sorts after it).
_HASH_KEY = b'"hash":"'
_PLACEHOLDER = GENESIS_HASH
_PLACEHOLDER_CUT = _HASH_KEY + _PLACEHOLDER.encode("ascii") + b'",'

#: Records a log with the deployment's anchors signs as soon as they are written (besides every
#: `AuditLog.sync`): what a run is (its start, bound to its deployment) and each plan it accepts.
ANCHOR_POINTS = frozenset({"run_started", "plan_accepted"})
# Records after which the log's state changes beyond its chain (`AuditLog._frame_written`).
_FRAME_TYPES = ANCHOR_POINTS | {"run_finished"}
#: The largest integer orjson writes as JCS does (`pte._core._canonical.numbers_as_jcs`).
_MAX_SAFE_INT = 2**53 - 1

# ---------------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------------


class Durability(StrEnum):
    """When the audit log forces its records to stable storage."""

    #: write() and fsync after every record.
    ALWAYS = "always"
    #: write() every record to the OS at once (it survives SIGKILL of the process), fsync only
    #: at `AuditLog.sync` points: before a write tool is called, at run end and on close.
    BATCH = "batch"
    #: write() every record, never fsync (benchmarks, throwaway logs).
    NONE = "none"


def _utc_now() -> str:
    """ISO-8601 UTC with microseconds, e.g. ``2026-11-22T02:30:31.123456Z``."""
    return format_timestamp(datetime.now(UTC))


def format_timestamp(moment: datetime) -> str:
    """`moment` (UTC) as a record's ``ts``: what ``isoformat(timespec="microseconds")`` gives,
    with ``Z`` for ``+00:00``. orjson writes it in C (RFC 3339, less than half the work of
    formatting the seven fields in Python; no cache), except that, as ``isoformat()`` does, it
    leaves out a microsecond of 0: that one in a million is formatted field by field."""
    if moment.microsecond and moment.tzinfo is UTC:
        try:
            return orjson.dumps(moment, option=orjson.OPT_UTC_Z)[1:-1].decode("ascii")
        except TypeError:  # a datetime subclass (pendulum, a frozen clock): orjson refuses it
            pass
    return _TS_FORMAT % (
        moment.year,
        moment.month,
        moment.day,
        moment.hour,
        moment.minute,
        moment.second,
        moment.microsecond,
    )


_TS_FORMAT = "%04d-%02d-%02dT%02d:%02d:%02d.%06dZ"


class RecordWriter(Protocol):
    """Where one run's `AuditLog` puts its records (the seam between the log and a store)."""

    def head(self) -> tuple[int, str, bool]:
        """``(next_seq, last_hash, sealed)`` of the chain this writer continues."""
        ...

    def write(self, record: Mapping[str, Any], line: bytes) -> None:
        """Store one record durably enough to survive the process; `line` is its canonical
        line (newline included). Raises `StoreError` or `OSError` when it cannot."""
        ...

    def sync(self) -> None:
        """Make every record written so far durable (the write-ahead point)."""
        ...

    def close(self) -> None:
        """Release what the writer holds; idempotent."""
        ...


class AuditLog:
    """An append-only, hash-chained audit log for one run.

    `path` None keeps the records in memory only (in `records`). With a path the file is
    opened for appending (created if missing; its directory must exist) and, when it already
    holds records, the chain continues from its last record: `next_seq` and `last_hash` are
    taken from it after checking that this record is canonical and its hash is right.

    A file whose last line is partial (a crash in the middle of a write) is refused with
    `AuditWriteError`, since appending after it would bury the damage. `repair_partial_tail`
    True (used by resume after a crash) repairs it instead: a tail that is a complete,
    correctly chained record lacking only its newline is completed; anything else is
    dropped. Dropping loses nothing that mattered: a record is only relied on once it is
    complete, and a `write` tool is only called after `sync` made its `step_started` durable.

    `validate` True checks every record against the audit schema before writing it (a
    violation raises `AuditWriteError` like any other failed write).

    One writer per file: opening a file for appending takes its exclusive advisory lock
    (``flock``) and holds it until `close`, the run's seal (``run_finished``) or a failed
    write; a second writer, in this process or another, is refused at open with
    `AuditWriteError` ("being written by another writer"). A write by a process that ignores
    the lock (or a truncation) is still caught: the next append finds the file's size changed
    and fails closed.

    Thread-safe: appends from several threads are serialised.
    """

    path: Path | None
    run_id: str
    records: list[dict[str, Any]]
    last_hash: str
    next_seq: int

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        run_id: str | None = None,
        durability: Durability | str = Durability.BATCH,
        redactor: Redactor | None = None,
        clock: Callable[[], str] | None = None,
        keep: bool = False,
        repair_partial_tail: bool = False,
        validate: bool = False,
        writer: RecordWriter | None = None,
        anchors: Any = None,
    ) -> None:
        self.path = Path(path) if path is not None else None
        #: The deployment's anchors (`pte._audit._anchors.Anchors`, with its signing key): every `sync`
        #: (the write-ahead point, a pause, the seal) signs where the run has got to.
        self.anchors = anchors
        #: How many anchors this run has as far as this writer knows (`Anchors.sign`): 0 for a
        #: fresh run, the verified count for a resumed one (set by resume).
        self.anchored = 0
        # A store's writer (pte.stores) takes the records instead of a file.
        self._writer = writer if path is None else None
        self.run_id = run_id if run_id is not None else uuid.uuid4().hex
        if not isinstance(self.run_id, str) or not self.run_id:
            raise ValueError("run_id must be a non-empty string")
        self.durability = Durability(durability)
        self.redactor = redactor if redactor is not None else Redactor()
        self._clock = clock if clock is not None else _utc_now
        self._keep = keep or (self.path is None and writer is None)
        self._validate = validate
        self.records = []
        self.last_hash = GENESIS_HASH
        self.next_seq = 0
        self._lock = threading.Lock()
        self._fd: int | None = None
        #: True while this writer holds the file's lock (from open until close or the seal).
        self._locked = False
        self._size = 0
        self._created = False
        self._dir_synced = True
        self._closed = False
        self._broken: str | None = None
        # Set when this run's run_finished is written (or found at the end of the file).
        self._sealed = False
        # Set once this run has begun: its run_started written (or found at the file's end).
        self._begun = False
        # Hashes of the contents (catalogue, policy) the file already holds in some
        # run_started's "stored": a run_started stores only the others.
        self._stored: set[str] = set()
        if self.path is not None:
            self._open(self.path, repair_partial_tail)
        elif self._writer is not None:
            try:
                self.next_seq, self.last_hash, self._sealed = self._writer.head()
                self._begun = self.next_seq > 0  # the store's chain is this run's alone
            except (OSError, PTEError) as exc:
                raise AuditWriteError(f"cannot open the run's store: {exc}") from exc

    # -- opening ------------------------------------------------------------------------------

    def _open(self, path: Path, repair: bool) -> None:
        self._created = not path.exists()
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_BINARY", 0), 0o644)
        except OSError as exc:
            raise AuditWriteError(f"cannot open audit log {path}: {exc}") from exc
        try:
            # One writer per file: the lock is taken here and held until close (or the run's
            # seal), so no other writer can append (or read a chain that is about to change)
            # while this one may still write; a run's records are contiguous in a log anyway.
            _lock_for_writing(fd, path)
            self._size = os.fstat(fd).st_size
            if self._size:
                self._resume_chain(path, fd, repair)
        except AuditWriteError:
            os.close(fd)
            raise
        except OSError as exc:
            os.close(fd)
            raise AuditWriteError(f"cannot read audit log {path}: {exc}") from exc
        self._fd = fd
        self._locked = True
        # A log dropped without close() must not hold the file (and its lock) until the
        # process exits: when it is collected, its descriptor is closed. close() detaches this.
        self._release = weakref.finalize(self, _release_file, fd)
        # A new file's directory entry must be fsynced too, or a crash can lose the whole file.
        self._dir_synced = not self._created

    def _resume_chain(self, path: Path, fd: int, repair: bool) -> None:
        with open(path, "rb") as fh:
            first = fh.readline()
            _check_format(path, first)
            self._stored = _stored_hashes(fh, fd, self._size, first)
            last, tail = _read_tail(fh, self._size)
        if tail:
            if not repair:
                raise AuditWriteError(
                    f"audit log {path} ends in a partial record ({len(tail)} bytes); verify it "
                    "(or open it with repair_partial_tail=True to resume after a crash)"
                )
            prev, seq = GENESIS_HASH, 0
            if last is not None:
                prev, before = _checked_last(path, last)
                seq = before["seq"] + 1
            completed = _parse_complete_record(tail + b"\n", prev, seq)
            if completed is not None:
                # The crash hit between the record and its newline: finish the line, lose nothing.
                _write_all(fd, b"\n")
                self._size += 1
                last = tail + b"\n"
            else:
                os.truncate(path, self._size - len(tail))
                self._size -= len(tail)
        if last is None:
            return
        last_hash, record = _checked_last(path, last)
        self.last_hash = last_hash
        self.next_seq = record["seq"] + 1
        if record.get("run_id") == self.run_id:
            self._begun = True
            self._sealed = record.get("type") == "run_finished"

    # -- state --------------------------------------------------------------------------------

    @property
    def broken(self) -> bool:
        """True once a write failed: every later append raises `AuditWriteError`."""
        return self._broken is not None

    @property
    def closed(self) -> bool:
        """True after `close`."""
        return self._closed

    def _fail(self, message: str, cause: BaseException | None = None) -> AuditWriteError:
        if self._broken is None:
            self._broken = message
            # A broken log never writes again: the next writer may have the file.
            self._unlock()
        err = AuditWriteError(message)
        if cause is not None:
            err.__cause__ = cause
        return err

    @property
    def replaying(self) -> bool:
        """False: every record this log takes is new (`pte._audit._record_sink.RecordSink`)."""
        return False

    @property
    def continues_run(self) -> bool:
        """False: a log continues a run's chain, not its decisions (resume's checker does)."""
        return False

    @property
    def origin_trace(self) -> Mapping[str, str] | None:
        """None: a log links no earlier run's trace (resume's checker does)."""
        return None

    # -- writing ------------------------------------------------------------------------------

    def write(self, record: Record) -> dict[str, Any]:
        """Write a record built by `pte._audit._records` (`append` of its type and fields)."""
        return self.write_records((record,))[0]

    def write_records(self, records: Sequence[Record]) -> list[dict[str, Any]]:
        """Write `records` in order, as `write` writes each, in one go: one timestamp for all,
        one acquisition of the lock and, in a file, one ``write`` of their lines (a step's
        pair, once the step has finished). Either every record is written or none is: one
        that cannot be (not JSON, a schema violation) breaks the log before anything of the
        batch reaches it. Returns the records as written."""
        if not records:
            return []
        with self._lock:
            ts = self._clock()
            # The batch is checked for anything to redact once (`Redactor.clean`); when
            # something may be there, it is serialised again through the redacting walk.
            built = self._serialise_all(records, ts, redact=False)
            if built is None:
                built = self._serialise_all(records, ts, redact=True)
                assert built is not None
            written, digests, lines = built
            if self._validate:
                for record in written:
                    problem = _schema_problem(record)
                    if problem is not None:
                        raise self._fail(f"{record['type']}: record violates the audit schema: {problem}")
            self._store(written, lines)
            self._written(written, digests)
            return written

    def append(self, type: str, /, **fields: Any) -> dict[str, Any]:
        """Redact `fields`, add the common fields, hash, write one line; return the record.

        The record holds the values as written; where nothing was redacted they may be the
        caller's own objects, except in a log that keeps its records (`records`), which keeps
        and returns a copy of its own.

        Raises `AuditWriteError` when the record cannot be written (I/O error, a value that is
        not JSON such as NaN, a field that clashes with a common field, a closed or sealed
        log) and on every call after such a failure.
        """
        return self.write_records((Record(type, fields),))[0]

    def _serialise_all(
        self, records: Sequence[Record], ts: str, *, redact: bool
    ) -> tuple[list[dict[str, Any]], list[str], list[bytes]] | None:
        """`records` as written, their hashes and their lines (the caller holds the lock);
        None when `redact` is False and the batch may hold something to redact."""
        if self._broken is not None or self._closed:
            self._refuse("", {}, self._begun, self._sealed)
        prev, seq, begun, sealed = self.last_hash, self.next_seq, self._begun, self._sealed
        # The common fields are the log's own; when they are exact JSON strings and safe
        # integers (checked once for the batch), a record's types and numbers are its own
        # fields' (`_serialise`).
        own_plain = (
            ts.__class__ is str
            and prev.__class__ is str
            and self.run_id.__class__ is str
            and seq.__class__ is int
            and 0 <= seq <= _MAX_SAFE_INT - len(records)
        )
        redactor = self.redactor
        written: list[dict[str, Any]] = []
        digests: list[str] = []
        lines: list[bytes] = []
        searched: list[bytes] = []  # the encodings' parts still to be checked for anything to redact
        data: list[Mapping[str, Any]] = []  # and the fields they hold
        for type, fields in records:
            if type == "run_started":
                fields = self._run_started_fields(fields)
            if (
                sealed
                or not isinstance(type, str)
                or not type
                or not _COMMON_FIELDS.isdisjoint(fields)
                or (type != "run_started") is not begun
            ):
                self._refuse(type, fields, begun, sealed)
            try:
                record, digest, line, parts = self._serialise(type, fields, seq, prev, ts, redact, own_plain)
            except (TypeError, ValueError, RecursionError, UnicodeEncodeError) as exc:
                raise self._fail(f"{type}: record is not JSON-serialisable: {exc}", exc) from exc
            if parts is not None:
                searched += parts
                data.append(fields)
            written.append(record)
            digests.append(digest)
            lines.append(line)
            prev, seq, begun = digest, seq + 1, True
            sealed = type == "run_finished"
        # A finding may lie in the log's own members, which the walk leaves alone and the
        # search of the encodings cannot tell apart: a random hex `prev` or run id spelling a
        # hex-only keyword (``acca``, ``4b1d``) in about one step of a hundred. The records'
        # own fields then decide, searched alone (`Redactor.clean_values`).
        if searched and not redactor.clean(searched) and not redactor.clean_values(data):
            return None
        return written, digests, lines

    def _store(self, written: list[dict[str, Any]], lines: list[bytes]) -> None:
        """Hand the serialised records (`written`, with their `lines`) to the file (one write)
        or the store's writer (the caller holds the lock)."""
        fd = self._fd
        if fd is not None:
            data = lines[0] if len(lines) == 1 else b"".join(lines)
            try:
                # No other writer can append (this one holds the file's lock), but a
                # process that ignores the lock can still write or truncate: a chain
                # forked that way is refused here, before anything follows it.
                size = os.lseek(fd, 0, os.SEEK_END)
                if size != self._size:
                    raise self._fail(
                        f"audit log {self.path} changed underneath this writer "
                        f"(size {size}, expected {self._size}): something wrote to it "
                        "without taking its lock"
                    )
                _write_all(fd, data)
                self._size += len(data)
                if self.durability is Durability.ALWAYS:
                    self._fsync()
            except OSError as exc:
                raise self._fail(f"cannot write audit log {self.path}: {exc}", exc) from exc
        elif self._writer is not None:
            try:
                for record, line in zip(written, lines, strict=True):
                    self._writer.write(record, line)
            except (OSError, PTEError) as exc:
                raise self._fail(f"cannot write to the run's store: {exc}", exc) from exc

    def _written(self, written: list[dict[str, Any]], digests: list[str]) -> None:
        """The log's state after the `written` records (hashed `digests`) were stored, one by
        one (the caller holds the lock)."""
        if self._keep:
            self.records += written
        for record, digest in zip(written, digests, strict=True):
            self.last_hash = digest
            self.next_seq += 1
            if record["type"] in _FRAME_TYPES:
                self._frame_written(record)

    def _frame_written(self, record: dict[str, Any]) -> None:
        """`_written` of a record that begins, anchors or seals a run."""
        type = record["type"]
        if type == "run_started":
            self._begun = True
            if isinstance(record.get("stored"), Mapping):
                self._stored.update(record["stored"])
        if type == "run_finished":
            self._sealed = True
            if self._fd is not None:
                if self.durability is not Durability.NONE:
                    # The end of a run is a sync point even if the caller forgets to sync().
                    self._fsync()
                # Nothing more can be written here: the next writer may open the file.
                self._unlock()
        elif type in ANCHOR_POINTS and self.anchors is not None:
            # The run's start and each plan are signed before any tool runs: no writer of
            # the log or store can swap what a run is, even if it crashes before its first
            # write (pte._audit._anchors).
            self._sync_locked()

    def _run_started_fields(self, fields: Mapping[str, Any]) -> dict[str, Any]:
        """`fields` with what the writer itself records in every ``run_started`` (the caller
        holds the lock).

        The format version (the first line of a log is a ``run_started``, so every log
        starts with it) and the version of PTE that wrote the run.
        """
        clash = sorted({"format", "pte_version"}.intersection(fields))
        if clash:
            raise self._fail(f"run_started: fields {clash} are set by the audit log itself")
        out = {"format": AUDIT_FORMAT, "pte_version": __version__, **fields}
        stored = fields.get("stored")
        if isinstance(stored, Mapping):
            # Content is stored once per log (docs/audit-format.md): drop what the file holds.
            out["stored"] = {key: value for key, value in stored.items() if key not in self._stored}
        return out

    def _serialise(
        self,
        type: str,
        fields: Mapping[str, Any],
        seq: int,
        prev: str,
        ts: str,
        redact: bool,
        own_plain: bool,
    ) -> tuple[dict[str, Any], str, bytes, Sequence[bytes] | None]:
        """The record, its hash, its line and, unless it went through the redacting walk, its
        encoding in parts (without the hash member, which the walk leaves alone like every
        common field), which the caller must check (`Redactor.clean`) before the line is
        written: the one place hashed JSON is produced.

        The hash covers ``prev`` + the canonical JSON of the record without "hash"; the line
        is the canonical JSON of the record with it (so verify needs nothing but
        `canonical_json` to check a line). One encode gives both: the record is encoded with
        a placeholder hash; cutting that member and the comma after it out gives the hashed
        bytes (removing a member from a JCS object leaves the JCS form of the rest,
        docs/audit-format.md), and writing the digest in its place gives the line (the key
        order and escaping of a 64-hex-digit value do not depend on which digits). The
        top-level member is always followed by a comma, so when the member and a comma occur
        once in the encoding, that is it (`without_member`'s argument); otherwise (a nested
        ``"hash"`` key holding the placeholder) the record is encoded twice.
        `redact`: through the walk (`Redactor.redact_fields`) whatever the record holds.
        `own_plain`: the common fields are exact JSON strings and safe integers, so that only
        the record's own fields need the types and numbers walk.
        """
        # `fields` cannot hold a common field (`append` refused it): nothing is overwritten.
        # (A copy of the fields with the common ones added: a third less work than unpacking
        # them into a new dict.)
        run_id = self.run_id
        record = dict(fields, seq=seq, run_id=run_id, ts=ts, type=type, prev=prev, hash=_PLACEHOLDER)
        # Most records hold nothing to redact: checked whole, their encoding is the line's.
        encoded = None
        if not redact:
            own = own_plain and type.__class__ is str and fields.__class__ is dict
            encoded = self.redactor.canonical_if_checkable(record, walk=fields if own else record)
        unchecked = encoded is not None
        if encoded is None:
            walked = self.redactor.redact_fields(type, fields)
            record = dict(walked, seq=seq, run_id=run_id, ts=ts, type=type, prev=prev, hash=_PLACEHOLDER)
            encoded = canonical_bytes(record)
        elif self._keep:
            record = orjson.loads(encoded)  # a record the log keeps holds none of the caller's values
        parts = encoded.split(_PLACEHOLDER_CUT)  # one pass: each occurrence
        if len(parts) != 2:
            del record["hash"]
            digest = sha256_hex(prev.encode("ascii") + canonical_bytes(record))
            record["hash"] = digest
            return record, digest, canonical_bytes(record) + b"\n", (encoded,) if unchecked else None
        head, tail = parts
        digest = hashlib.sha256(b"".join((prev.encode("ascii"), head, tail))).hexdigest()
        record["hash"] = digest
        # The digest takes the placeholder's place, with the comma after it.
        line = b"".join((head, _HASH_KEY, digest.encode("ascii"), b'",', tail, b"\n"))
        return record, digest, line, parts if unchecked else None

    def _refuse(self, type: str, fields: Mapping[str, Any], begun: bool, sealed: bool) -> None:
        """Raise the reason `append` cannot write (the caller holds the lock); `begun` and
        `sealed`: the run has its run_started, its run_finished (in the log, or earlier in
        the batch)."""
        if self._broken is not None:
            raise AuditWriteError(f"audit log is broken by an earlier failure: {self._broken}")
        if self._closed:
            raise self._fail("audit log is closed")
        if sealed:
            raise self._fail(f"run {self.run_id} is sealed by run_finished; nothing may follow it")
        if not isinstance(type, str) or not type:
            raise self._fail(f"record type must be a non-empty string, not {type!r}")
        if _COMMON_FIELDS.isdisjoint(fields):
            if begun:
                raise self._fail(f"run {self.run_id} has begun already: a run has one run_started")
            raise self._fail(
                f"{type}: run {self.run_id} has not begun: a run's first record is run_started "
                "(Engine.execute and Engine.run write it; Executor.run records steps only)"
            )
        clash = sorted(_COMMON_FIELDS.intersection(fields))
        raise self._fail(f"{type}: fields {clash} are set by the audit log itself")

    def _fsync(self) -> None:
        """fsync the file (and once, for a new file, its directory); caller holds the lock."""
        assert self._fd is not None
        try:
            os.fsync(self._fd)
        except OSError as exc:
            raise self._fail(f"cannot fsync audit log {self.path}: {exc}", exc) from exc
        if not self._dir_synced:
            self._dir_synced = True
            _fsync_dir(self._fd_dir())

    def _fd_dir(self) -> Path:
        assert self.path is not None
        return self.path.resolve().parent

    def sync(self) -> None:
        """Make every record written so far durable (fsync, unless durability is NONE).

        The executor calls this before any `write` tool (the write-ahead rule). Raises
        `AuditWriteError` when the fsync fails or the log is already broken.
        """
        with self._lock:
            self._sync_locked()

    def _sync_locked(self) -> None:
        """`sync` for a caller that holds the lock."""
        if self._broken is not None:
            raise AuditWriteError(f"audit log is broken by an earlier failure: {self._broken}")
        if self._writer is not None:
            try:
                self._writer.sync()
            except (OSError, PTEError) as exc:
                raise self._fail(f"cannot sync the run's store: {exc}", exc) from exc
        if self._fd is not None and self.durability is not Durability.NONE:
            self._fsync()
        if self.anchors is not None and self._begun:
            self._anchor()

    def _anchor(self) -> None:
        # Under self._lock: the anchor names exactly the record just made durable.
        from pte._core import AnchorError

        try:
            self.anchored = self.anchors.sign(
                self.run_id, self.next_seq - 1, self.last_hash, expected=self.anchored
            )
        except AnchorError as exc:
            raise self._fail(f"cannot anchor run {self.run_id}: {exc}") from None

    def close(self) -> None:
        """Sync (per durability) and close the file; idempotent. Later appends raise."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._writer is not None:
                self._writer.close()
            if self._fd is None:
                return
            try:
                if self._broken is None and self.durability is not Durability.NONE:
                    self._fsync()
            finally:
                self._unlock()
                self._release.detach()
                os.close(self._fd)
                self._fd = None

    def _unlock(self) -> None:
        """Release the file's lock (caller holds `_lock`). Explicitly, not by closing the
        descriptor: a process forked meanwhile shares it and would keep the lock alive."""
        if self._locked and self._fd is not None:
            self._locked = False
            if _fcntl is not None:
                with contextlib.suppress(OSError):
                    _fcntl.flock(self._fd, _fcntl.LOCK_UN)

    def __enter__(self) -> AuditLog:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self.close()
        except AuditWriteError:
            # Do not hide the exception that is already unwinding; the log is marked broken.
            if exc_type is None:
                raise

    def __repr__(self) -> str:
        where = str(self.path) if self.path is not None else "memory"
        state = "broken" if self.broken else "closed" if self._closed else "open"
        return f"AuditLog({where!r}, run_id={self.run_id!r}, next_seq={self.next_seq}, {state})"


def _release_file(fd: int) -> None:
    """Unlock and close the descriptor of an `AuditLog` collected without `close`."""
    with contextlib.suppress(OSError):
        if _fcntl is not None:
            _fcntl.flock(fd, _fcntl.LOCK_UN)
        os.close(fd)


def _lock_for_writing(fd: int, path: Path) -> None:
    """Take the exclusive advisory lock on the open file `fd`, or refuse at once.

    flock locks an open file description, so two logs on one file exclude each other in one
    process too. Another writer holding it gets a named error, not a wait: a run's records
    must be contiguous in its log, so the two could not share the file anyway. A no-op where
    there is no fcntl (appends are then serialised within one process only).
    """
    if _fcntl is None:  # pragma: no cover - Windows
        return
    try:
        _fcntl.flock(fd, _fcntl.LOCK_EX | _fcntl.LOCK_NB)
    except BlockingIOError:
        raise AuditWriteError(
            f"audit log {path} is being written by another writer (it holds the file's lock): "
            "one writer per log file at a time; close it first or use another file"
        ) from None


def _write_all(fd: int, data: bytes) -> None:
    written = os.write(fd, data)
    if written == len(data):  # the usual case: one call
        return
    if written <= 0:
        raise OSError("write returned 0 bytes")
    view = memoryview(data)[written:]
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise OSError("write returned 0 bytes")
        view = view[written:]


def _fsync_dir(directory: Path) -> None:
    # Best effort: some platforms and filesystems cannot open or fsync a directory; the
    # records themselves were fsynced already.
    try:
        dfd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)
