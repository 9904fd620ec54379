"""Scanning an audit log's lines: the checks of each line and of the chain, and the report.

`pte._audit._verify.verify` scans a whole log with `scan_lines`; `pte._audit._parallel` scans
parts of one in several processes and joins their `Scan`s by the same rules.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from hashlib import sha256 as _sha256
from typing import Any

import orjson

from pte._audit._content import approval_problem, endorsement_problem
from pte._audit._content import content_problem as _content_problem
from pte._audit._fast import fast_errors, no_surrogate_pairs
from pte._audit._fast import hash_of_line as _hash_of_line
from pte._audit._schema import _checkers, _fast_path
from pte._core import canonical_bytes, canonical_json_v1, is_canonical, sha256_hex

#: ``prev`` of the first record of a file.
GENESIS_HASH = "0" * 64

#: The audit format this PTE writes (docs/audit-format.md); every ``run_started`` carries it.
AUDIT_FORMAT = "pte-audit/2"


#: Fields every record has; `AuditLog.append` sets them itself.
_COMMON_FIELDS = frozenset({"seq", "run_id", "ts", "type", "prev", "hash"})

_HEX64 = re.compile(r"[0-9a-f]{64}")


# ---------------------------------------------------------------------------------------------
# Verification
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class VerifyIssue:
    """The first problem `verify` found: 1-based line, the record's seq when known, what."""

    line: int
    seq: int | None
    message: str

    def __str__(self) -> str:
        seq = f" (seq {self.seq})" if self.seq is not None else ""
        return f"line {self.line}{seq}: {self.message}"


@dataclass(frozen=True)
class VerifyReport:
    """The outcome of `verify`.

    `intact`: every line is canonical JSON, chained and hashed right, schema-valid, and the
    runs are well formed. `complete`: intact, and every run is sealed by ``run_finished`` (or
    was resumed by a later run in the file). `records` counts the records that verified
    before the first issue; `last_hash` is the hash of the last of them, which can be kept
    elsewhere as an anchor (the chain alone cannot reveal that whole sealed runs were cut off
    the end of the file).
    """

    records: int
    runs: int
    intact: bool
    complete: bool
    issue: VerifyIssue | None
    last_hash: str | None = None
    #: 2 for RFC 8785 logs (``"format": "pte-audit/2"``), 1 for logs written before it.
    format: int = 2
    #: The hash of the log's first record: names the log (checkpoints refer to it).
    log_id: str | None = None
    #: Record index -> its hash, for the indexes asked for in `verify(anchors=...)`.
    anchors: Mapping[int, str] = field(default_factory=dict, compare=False, repr=False)

    @property
    def ok(self) -> bool:
        """Intact and complete."""
        return self.intact and self.complete

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (``pte audit verify --json``)."""
        return {
            "ok": self.ok,
            "intact": self.intact,
            "complete": self.complete,
            "records": self.records,
            "runs": self.runs,
            "last_hash": self.last_hash,
            "format": self.format,
            "log_id": self.log_id,
            "issue": (
                None
                if self.issue is None
                else {"line": self.issue.line, "seq": self.issue.seq, "message": self.issue.message}
            ),
        }


def _common_fields_problem(record: Mapping[str, Any]) -> str | None:
    seq = record.get("seq")
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
        return f"bad or missing seq: {seq!r}"
    for name in ("run_id", "ts", "type"):
        if not isinstance(record.get(name), str) or not record[name]:
            return f"bad or missing {name}: {record.get(name)!r}"
    for name in ("prev", "hash"):
        value = record.get(name)
        if not isinstance(value, str) or _HEX64.fullmatch(value) is None:
            return f"bad or missing {name}: {value!r}"
    return None


def _record_hash_problem(record: Mapping[str, Any]) -> str | None:
    body = {k: v for k, v in record.items() if k != "hash"}
    # Parsed from a line: its numbers are JSON text's (an integer beyond 2**53 is a double).
    expected = sha256_hex(record["prev"].encode("utf-8") + canonical_bytes(body, from_text=True))
    if expected != record["hash"]:
        return f"hash mismatch: recorded {record['hash'][:12]}…, content hashes to {expected[:12]}…"
    return None


def _v1_line_problem(body: bytes) -> tuple[Any, bool]:
    """Format 1: the parsed line and whether it is canonical in format 1's sense."""
    record = json.loads(body.decode("utf-8"))
    try:
        return record, canonical_json_v1(record).encode("utf-8") == body
    except ValueError:
        return record, False


def _record_hash(record: Mapping[str, Any], version: int) -> str:
    body = {k: v for k, v in record.items() if k != "hash"}
    # Parsed from a line: its numbers are JSON text's (an integer beyond 2**53 is a double).
    text = canonical_bytes(body, from_text=True) if version == 2 else canonical_json_v1(body).encode("utf-8")
    return _sha256(str(record["prev"]).encode("utf-8") + text).hexdigest()


@dataclass(frozen=True)
class ScanStart:
    """Where `scan_lines` begins: what the lines before its first one left behind.

    `WHOLE_LOG` is a log's first line. A part of a log (pte._audit._parallel) starts from
    what its own first line claims (``prev``, ``seq``, ``run_id``); joining the parts
    checks those claims against the part before.
    """

    prev: str
    count: int
    run: str | None
    whole: bool


WHOLE_LOG = ScanStart(GENESIS_HASH, 0, None, True)


@dataclass
class Segment:
    """Records of one run that follow each other in a scan.

    A run's records are contiguous in a log, so a run has one segment, or one per part of
    the log it spans when verifying in parts. `last_seq`: seq of its last record there.
    """

    run_id: str
    begins: bool
    resumes: str | None
    sealed: bool = False
    last_seq: int = -1


@dataclass
class Scan:
    """What `scan_lines` found: the first issue (if any) and the state its lines leave."""

    issue: VerifyIssue | None
    count: int
    last_hash: str
    version: int
    log_id: str | None
    anchors: dict[int, str]
    segments: list[Segment]
    #: Content stored by the scanned ``run_started`` records (hash -> value), in order.
    stored: dict[str, Any]
    #: Format 2 ``run_started`` records whose stored content lies before the scanned part:
    #: (seq, record, how many of `stored` came before it), checked when the parts are joined.
    deferred: list[tuple[int, dict[str, Any], int]]
    runs: int
    #: Where the scan began (what its first line claimed, for a part of a log).
    start: ScanStart = WHOLE_LOG

    def report(self, open_runs: Mapping[str, int]) -> VerifyReport:
        """The `VerifyReport` of a whole log scanned (`open_runs`: `runs_left_open`)."""
        if self.issue is not None:
            return VerifyReport(
                self.count,
                self.runs,
                False,
                False,
                self.issue,
                self.last_hash if self.count else None,
                self.version,
                self.log_id,
                self.anchors,
            )
        if self.count == 0:
            issue = VerifyIssue(0, None, "incomplete: the log holds no records")
            return VerifyReport(0, 0, True, False, issue, None, self.version)
        if open_runs:
            run_id, seq = next(iter(open_runs.items()))
            more = f" (and {len(open_runs) - 1} more)" if len(open_runs) > 1 else ""
            # Every line of an intact log is one record: line = seq + 1.
            issue = VerifyIssue(seq + 1, seq, f"incomplete: run {run_id} has no run_finished{more}")
            return VerifyReport(
                self.count,
                self.runs,
                True,
                False,
                issue,
                self.last_hash,
                self.version,
                self.log_id,
                self.anchors,
            )
        return VerifyReport(
            self.count, self.runs, True, True, None, self.last_hash, self.version, self.log_id, self.anchors
        )


def runs_left_open(segments: Iterable[Segment]) -> dict[str, int]:
    """Runs not sealed by ``run_finished`` nor resumed by a later run, in order of first
    appearance -> the seq of their last record."""
    open_runs: dict[str, int] = {}
    for segment in segments:
        if segment.begins and segment.resumes is not None:
            # A resumed run is carried on (and sealed) by the run that resumes it.
            open_runs.pop(segment.resumes, None)
        if segment.sealed:
            open_runs.pop(segment.run_id, None)
        else:
            open_runs[segment.run_id] = segment.last_seq
    return open_runs


def scan_lines(
    lines: Iterable[bytes], start: ScanStart, *, check_schema: bool, anchors: frozenset[int]
) -> Scan:
    """Verify `lines` from `start` (see `verify`), up to the first problem."""
    scanner = _Scanner(start, check_schema, anchors)
    fast = scanner.fast
    fast_accepts, take = scanner.fast_accepts, scanner.take
    for number, raw in enumerate(lines, start=1):
        if not raw.endswith(b"\n"):
            message = f"partial last line ({len(raw)} bytes): the log ends mid-record"
            return scanner.result(VerifyIssue(number, None, message))
        body = raw[:-1]
        if fast is not None and scanner.version == 2 and number > 1 and fast_accepts(body):
            continue
        issue = take(number, body)
        if issue is not None:
            return scanner.result(issue)
    return scanner.result(None)


#: Record types whose signed content `_Scanner.signed_problem` checks.
_SIGNED = frozenset({"approval", "endorsement", "endorsement_rejected"})


class _Scanner:
    """The state of one `scan_lines`, and its phases: each line goes through them in order
    (decode, common fields and chain link, schema, stored content, signed records, runs and
    seals, advance) and the first problem is the one named."""

    __slots__ = (
        "checkers",
        "count",
        "current_run",
        "current_sealed",
        "deferred",
        "expected_prev",
        "fast",
        "fast_checks",
        "finished",
        "found_anchors",
        "log_id",
        "seen_runs",
        "segments",
        "start",
        "stored",
        "version",
        "wanted",
    )

    def __init__(self, start: ScanStart, check_schema: bool, anchors: frozenset[int]) -> None:
        self.start = start
        self.wanted = anchors
        self.checkers = _checkers() if check_schema else None
        self.fast_checks = {name: checker.fast.is_valid for name, checker in (self.checkers or {}).items()}
        self.found_anchors: dict[int, str] = {}
        self.stored: dict[str, Any] = {}
        self.deferred: list[tuple[int, dict[str, Any], int]] = []
        self.expected_prev = start.prev
        self.count = start.count
        self.version = 2
        self.log_id: str | None = None
        self.current_run = start.run
        self.current_sealed = False
        self.segments: list[Segment] = []
        self.seen_runs: set[str] = set()
        if start.run is not None:  # a part of a log that begins inside a run
            self.segments.append(Segment(start.run, begins=False, resumes=None))
            self.seen_runs.add(start.run)
        self.fast = _fast_path()
        self.finished = None
        if self.fast is not None:
            self.finished = next((c for c, name in self.fast.types.items() if name == "run_finished"), None)

    def result(self, issue: VerifyIssue | None) -> Scan:
        """Collect the result: the issue (if any) and the state the lines leave."""
        if self.segments and not self.segments[-1].sealed:
            self.segments[-1].last_seq = self.count - 1
        return Scan(
            issue,
            self.count,
            self.expected_prev,
            self.version,
            self.log_id,
            self.found_anchors,
            self.segments,
            self.stored,
            self.deferred,
            len(self.seen_runs),
            self.start,
        )

    def fast_accepts(self, body: bytes) -> bool:
        """Take the line by the fast path if it proves every check would pass (pte._audit._fast).

        One C pass decodes and schema-checks the line; when anything is off, the reference
        path (`take`) decides and names the problem.
        """
        fast = self.fast
        assert fast is not None
        rec: Any
        try:
            rec = fast.decode(body)
        except fast_errors:
            return False
        prev = self.expected_prev
        count = self.count
        if not (
            rec.seq == count
            and rec.prev == prev
            and rec.run_id == self.current_run
            and not self.current_sealed
            and fast.encode(rec) == body
            and no_surrogate_pairs(body)
            and _hash_of_line(prev, body, rec.hash) == rec.hash
            and ((residual := fast.checks[rec.__class__]) is None or residual(rec))
        ):
            return False
        self.expected_prev = rec.hash
        if rec.__class__ is self.finished:
            self.current_sealed = self.segments[-1].sealed = True
            self.segments[-1].last_seq = count
        if count in self.wanted:
            self.found_anchors[count] = rec.hash
        self.count = count + 1
        return True

    def take(self, number: int, body: bytes) -> VerifyIssue | None:
        """Check one line by the reference path and advance past it; its problem if any."""
        decoded = self.decode(body, number)
        if isinstance(decoded, str):
            return VerifyIssue(number, None, decoded)
        record, canonical = decoded
        problem = self.link_problem(record, body, canonical)
        if problem is not None:
            seq = record.get("seq")
            return VerifyIssue(
                number, seq if isinstance(seq, int) and not isinstance(seq, bool) else None, problem
            )
        # Linked: the record's seq is `count` and its common fields are non-empty strings.
        rtype: str = record["type"]
        problem = None if self.checkers is None else self.schema_problem(record, rtype)
        if problem is None and rtype == "run_started":
            problem = self.run_started_problem(record, rtype)
        if problem is None and rtype in _SIGNED:
            problem = self.signed_problem(record, rtype)
        if problem is None and (
            rtype == "run_started" or record["run_id"] != self.current_run or self.current_sealed
        ):
            problem = self.run_problem(record, rtype)
        if problem is not None:
            return VerifyIssue(number, self.count, problem)
        self.advance(rtype, record["hash"])
        return None

    def decode(self, body: bytes, number: int) -> tuple[dict[str, Any], bool] | str:
        """Decode a line: the record and whether it is canonical, or the problem; a whole
        log's first line decides its format."""
        try:
            if self.version == 2:
                record = orjson.loads(body)
                canonical = type(record) is dict and is_canonical(body, record)
            else:
                record, canonical = _v1_line_problem(body)
        except ValueError as exc:  # orjson.JSONDecodeError and UnicodeDecodeError are ValueErrors
            return f"not valid JSON: {exc}"
        except RecursionError:
            return "not valid JSON for this reader: nested too deeply"
        if type(record) is not dict:
            return "not a JSON object"
        if (
            self.start.whole
            and number == 1
            and record.get("format") is None
            and record.get("type") == "run_started"
        ):
            self.version = 1  # a log written before format 2: its own rules, read-only
            try:
                record, canonical = _v1_line_problem(body)
            except (ValueError, RecursionError) as exc:
                return f"not valid JSON: {exc}"
        return record, canonical

    def link_problem(self, record: dict[str, Any], body: bytes, canonical: bool) -> str | None:
        """Check canonical form, the common fields, the hash, seq and the chain link."""
        seq = record.get("seq")
        digest = record.get("hash")
        run_id = record.get("run_id")
        rtype = record.get("type")
        ts = record.get("ts")
        # The usual case first, in a few comparisons: a well-formed record that links up
        # (prev equal to a verified hash and a hash equal to a computed one are both hex).
        if (
            canonical
            and seq == self.count
            and type(seq) is int
            and record.get("prev") == self.expected_prev
            and type(digest) is str
            and type(run_id) is str
            and run_id
            and type(rtype) is str
            and rtype
            and type(ts) is str
            and ts
            and digest.isascii()
            and _hash_of_line(self.expected_prev, body, digest) == digest
        ):
            return None
        return self.first_link_problem(record, canonical)

    def first_link_problem(self, record: dict[str, Any], canonical: bool) -> str | None:
        """Every link check in turn, so that the first problem is the one named."""
        if not canonical:
            form = "RFC 8785 canonical form" if self.version == 2 else "canonical form"
            return f"not in {form} (the line was edited)"
        problem = _common_fields_problem(record)
        if problem is not None:
            return problem
        digest = record["hash"]
        expected = _record_hash(record, self.version)
        if expected != digest:
            return f"hash mismatch: recorded {digest[:12]}…, content hashes to {expected[:12]}…"
        seq = record["seq"]
        if seq != self.count:
            hint = " (a record is missing)" if seq > self.count else ""
            return f"seq {seq} where {self.count} was expected{hint}"
        if record["prev"] != self.expected_prev:
            return "prev is not the previous record's hash (records removed or reordered)"
        return None

    def schema_problem(self, record: dict[str, Any], rtype: str) -> str | None:
        """Check the record against its type's schema (when asked to)."""
        if self.checkers is None:
            return None
        # The compiled check decides; `problem` (which words the message) only runs on a
        # record it rejects or cannot take in.
        is_valid = self.fast_checks.get(rtype)
        try:
            valid = is_valid is not None and is_valid(record)
        except (ValueError, TypeError, OverflowError):
            valid = False
        if valid:
            return None
        checker = self.checkers.get(rtype)
        if checker is None:
            return f"schema: unknown record type {rtype!r}"
        problem = checker.problem(record)
        return None if problem is None else f"schema: {problem}"

    def run_started_problem(self, record: dict[str, Any], rtype: str) -> str | None:
        """Check a ``run_started``'s format and its stored content (deferred in a part of a
        log when it refers to content before the part)."""
        if rtype != "run_started":
            return None
        found = record.get("format")
        if self.version == 1:
            return None if found is None else f"run_started of format {found!r} in a format 1 log"
        if found != AUDIT_FORMAT:
            return f"run_started of format {found!r} in a {AUDIT_FORMAT} log"
        if not self.start.whole and _refers_before(record, self.stored):
            self.deferred.append((self.count, record, len(self.stored)))
            return None
        return _content_problem(record, self.stored)

    def signed_problem(self, record: dict[str, Any], rtype: str) -> str | None:
        """Check a format 2 approval or endorsement record's content."""
        if self.version != 2:
            return None
        if rtype == "approval":
            return approval_problem(record)
        if rtype in ("endorsement", "endorsement_rejected"):
            return endorsement_problem(record)
        return None

    def run_problem(self, record: dict[str, Any], rtype: str) -> str | None:
        """Track runs: a run's records are contiguous, begin with run_started and end at its
        seal; a new run opens a new segment."""
        run_id: str = record["run_id"]
        if run_id == self.current_run:
            if self.current_sealed:
                return f"{rtype} after run_finished of run {run_id}"
            if rtype == "run_started":
                return f"second run_started in run {run_id}"
            return None
        if run_id in self.seen_runs:
            return f"record of run {run_id} after run {self.current_run} began"
        if rtype != "run_started":
            return f"run {run_id} does not begin with run_started"
        if self.segments and not self.segments[-1].sealed:
            self.segments[-1].last_seq = self.count - 1
        resumed = record.get("resumes")
        self.segments.append(
            Segment(run_id, begins=True, resumes=resumed if isinstance(resumed, str) else None)
        )
        self.seen_runs.add(run_id)
        self.current_run = run_id
        self.current_sealed = False
        return None

    def advance(self, rtype: str, digest: str) -> None:
        """Past a verified record: its seal, the log's id, the anchors asked for, the chain."""
        if rtype == "run_finished":
            self.current_sealed = self.segments[-1].sealed = True
            self.segments[-1].last_seq = self.count
        if self.count == 0:
            self.log_id = digest
        if self.count in self.wanted:
            self.found_anchors[self.count] = digest
        self.expected_prev = digest
        self.count += 1


def _refers_before(record: Mapping[str, Any], stored: Mapping[str, Any]) -> bool:
    """True when a ``run_started`` refers to content neither it nor the scanned part stores
    (in a part of a log: content stored before the part, checked when the parts are joined)."""
    fresh = record.get("stored")
    fresh_keys = fresh.keys() if isinstance(fresh, Mapping) else ()
    for name in ("catalogue", "policy"):
        ref = record.get(name)
        if isinstance(ref, str) and ref not in stored and ref not in fresh_keys:
            return True
    return False
