"""A frozen copy of `pte._audit._scan.scan_lines` as it was before it was split into phases (#35).

Used only by tests/audit/test_scan_phases.py, which checks that the split changed nothing: the
same `Scan` (first issue, its message byte for byte, counts, segments, stored content, anchors)
for every generated log. Do not edit: it is the reference the refactor is measured against.
One bug fix since made in both carries here too (cb96963: a line is JSON text, whose numbers are
doubles, and is hashed so — `from_text` — rather than refused for an integer beyond a double).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from hashlib import sha256 as _sha256
from typing import Any

import orjson

# private: the stored-content checks, white-box
from pte._audit._content import approval_problem, endorsement_problem

# private: the stored-content checks, white-box
from pte._audit._content import content_problem as _content_problem

# private: the fast path's parts, white-box
from pte._audit._fast import fast_errors, no_surrogate_pairs

# private: the fast path's parts, white-box
from pte._audit._fast import hash_of_line as _hash_of_line

# private: the scanner's parts, white-box
from pte._audit._scan import AUDIT_FORMAT, Scan, ScanStart, Segment, VerifyIssue

# private: the schema checkers, white-box
from pte._audit._schema import _checkers, _fast_path

# private: canonical bytes, format 1's JSON and hashes, as the frozen old scan used them
from pte._core import canonical_bytes, canonical_json_v1, is_canonical, sha256_hex

_HEX64 = re.compile(r"[0-9a-f]{64}")


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
    text = canonical_bytes(body, from_text=True) if version == 2 else canonical_json_v1(body).encode("utf-8")
    return _sha256(str(record["prev"]).encode("utf-8") + text).hexdigest()


def scan_lines(
    lines: Iterable[bytes], start: ScanStart, *, check_schema: bool, anchors: frozenset[int]
) -> Scan:
    """Verify `lines` from `start` (see `verify`), up to the first problem."""
    checkers = _checkers() if check_schema else None
    fast_checks = {name: checker.fast.is_valid for name, checker in (checkers or {}).items()}
    wanted = anchors
    found_anchors: dict[int, str] = {}
    stored: dict[str, Any] = {}
    deferred: list[tuple[int, dict[str, Any], int]] = []
    expected_prev = start.prev
    count = start.count
    version = 2
    log_id: str | None = None
    current_run = start.run
    segments: list[Segment] = []
    seen_runs: set[str] = set()
    if current_run is not None:  # a part of a log that begins inside a run
        segments.append(Segment(current_run, begins=False, resumes=None))
        seen_runs.add(current_run)
    current_sealed = False

    def scanned(issue: VerifyIssue | None) -> Scan:
        if segments and not segments[-1].sealed:
            segments[-1].last_seq = count - 1
        return Scan(
            issue,
            count,
            expected_prev,
            version,
            log_id,
            found_anchors,
            segments,
            stored,
            deferred,
            len(seen_runs),
            start,
        )

    def broken(line: int, seq: int | None, message: str) -> Scan:
        return scanned(VerifyIssue(line, seq, message))

    loads = orjson.loads
    fast = _fast_path()
    if fast is not None:
        decode, encode, hash_of = fast.decode, fast.encode, _hash_of_line
        finished = next((cls for cls, name in fast.types.items() if name == "run_finished"), None)
    for number, raw in enumerate(lines, start=1):
        if not raw.endswith(b"\n"):
            return broken(number, None, f"partial last line ({len(raw)} bytes): the log ends mid-record")
        body = raw[:-1]
        if fast is not None and version == 2 and number > 1:
            # The fast path (pte._audit._fast): one C pass decodes and schema-checks the
            # line; it is accepted here only when every check below would pass, else
            # the reference path that follows decides and names the problem.
            rec: Any
            try:
                rec = decode(body)
            except fast_errors:
                rec = None
            if (
                rec is not None
                and rec.seq == count
                and rec.prev == expected_prev
                and rec.run_id == current_run
                and not current_sealed
                and encode(rec) == body
                and no_surrogate_pairs(body)
                and hash_of(expected_prev, body, rec.hash) == rec.hash
                and ((residual := fast.checks[rec.__class__]) is None or residual(rec))
            ):
                expected_prev = rec.hash
                if rec.__class__ is finished:
                    current_sealed = segments[-1].sealed = True
                    segments[-1].last_seq = count
                if count in wanted:
                    found_anchors[count] = expected_prev
                count += 1
                continue
        try:
            if version == 2:
                record = loads(body)
                canonical = type(record) is dict and is_canonical(body, record)
            else:
                record, canonical = _v1_line_problem(body)
        except ValueError as exc:  # orjson.JSONDecodeError and UnicodeDecodeError are ValueErrors
            return broken(number, None, f"not valid JSON: {exc}")
        except RecursionError:
            return broken(number, None, "not valid JSON for this reader: nested too deeply")
        if type(record) is not dict:
            return broken(number, None, "not a JSON object")
        if (
            start.whole
            and number == 1
            and record.get("format") is None
            and record.get("type") == "run_started"
        ):
            version = 1  # a log written before format 2: its own rules, read-only
            try:
                record, canonical = _v1_line_problem(body)
            except (ValueError, RecursionError) as exc:
                return broken(number, None, f"not valid JSON: {exc}")
        seq = record.get("seq")
        # Any: once the checks below pass, each holds a non-empty str.
        digest: Any = record.get("hash")
        run_id: Any = record.get("run_id")
        rtype: Any = record.get("type")
        ts = record.get("ts")
        # The usual case first, in a few comparisons: a well-formed record that links up
        # (prev equal to a verified hash and a hash equal to a computed one are both hex).
        if not (
            canonical
            and seq == count
            and type(seq) is int
            and record.get("prev") == expected_prev
            and type(digest) is str
            and type(run_id) is str
            and run_id
            and type(rtype) is str
            and rtype
            and type(ts) is str
            and ts
            and digest.isascii()
            and _hash_of_line(expected_prev, body, digest) == digest
        ):
            # Otherwise every check in turn, so that the first problem is the one named.
            seq = seq if isinstance(seq, int) and not isinstance(seq, bool) else None
            if not canonical:
                form = "RFC 8785 canonical form" if version == 2 else "canonical form"
                return broken(number, seq, f"not in {form} (the line was edited)")
            problem = _common_fields_problem(record)
            if problem is not None:
                return broken(number, seq, problem)
            expected = _record_hash(record, version)
            if expected != digest:
                return broken(
                    number,
                    seq,
                    f"hash mismatch: recorded {digest[:12]}…, content hashes to {expected[:12]}…",
                )
            if seq != count:
                hint = " (a record is missing)" if seq is not None and seq > count else ""
                return broken(number, seq, f"seq {seq} where {count} was expected{hint}")
            if record["prev"] != expected_prev:
                return broken(
                    number, seq, "prev is not the previous record's hash (records removed or reordered)"
                )
        if checkers is not None:
            # The compiled check decides; `problem` (which words the message) only runs
            # on a record it rejects or cannot take in.
            is_valid = fast_checks.get(rtype)
            try:
                valid = is_valid is not None and is_valid(record)
            except (ValueError, TypeError, OverflowError):
                valid = False
            if not valid:
                checker = checkers.get(rtype)
                if checker is None:
                    return broken(number, seq, f"schema: unknown record type {rtype!r}")
                problem = checker.problem(record)
                if problem is not None:
                    return broken(number, seq, f"schema: {problem}")
        if rtype == "run_started":
            found = record.get("format")
            if version == 2 and found != AUDIT_FORMAT:
                return broken(number, seq, f"run_started of format {found!r} in a {AUDIT_FORMAT} log")
            if version == 1 and found is not None:
                return broken(number, seq, f"run_started of format {found!r} in a format 1 log")
            if version == 2:
                if not start.whole and _refers_before(record, stored):
                    deferred.append((count, record, len(stored)))
                else:
                    problem = _content_problem(record, stored)
                    if problem is not None:
                        return broken(number, seq, problem)
        if rtype in ("approval", "endorsement", "endorsement_rejected") and version == 2:
            problem = approval_problem(record) if rtype == "approval" else endorsement_problem(record)
            if problem is not None:
                return broken(number, seq, problem)
        if run_id != current_run:
            if run_id in seen_runs:
                return broken(number, seq, f"record of run {run_id} after run {current_run} began")
            if rtype != "run_started":
                return broken(number, seq, f"run {run_id} does not begin with run_started")
            if segments and not segments[-1].sealed:
                segments[-1].last_seq = count - 1
            resumed = record.get("resumes")
            segments.append(
                Segment(run_id, begins=True, resumes=resumed if isinstance(resumed, str) else None)
            )
            seen_runs.add(run_id)
            current_run = run_id
            current_sealed = False
        elif current_sealed:
            return broken(number, seq, f"{rtype} after run_finished of run {run_id}")
        elif rtype == "run_started":
            return broken(number, seq, f"second run_started in run {run_id}")
        if rtype == "run_finished":
            current_sealed = segments[-1].sealed = True
            segments[-1].last_seq = count
        if count == 0:
            log_id = digest
        if count in wanted:
            found_anchors[count] = digest
        expected_prev = digest
        count += 1
    return scanned(None)


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
