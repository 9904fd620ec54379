"""Verifying a large log in parts, one process each (`verify(path, jobs=N)`).

A format 2 log is a chain: each line holds the hash of the line before. So a part of the
file can be verified on its own from what its first line claims (its ``prev``, its ``seq``,
the run it belongs to), and the parts joined after: each claim must equal what the part
before ended with (its last hash, its count of records, its open run). What a part cannot
see (runs begun in an earlier part, content stored there) it hands to the join, which
checks it by the rules `verify` applies on one pass (docs/audit-format.md, "Verifying in
parallel"). The run structure of the whole log is then read off every part's run segments
by `runs_left_open`, the same function a single pass uses.

Only a log found intact (or intact but incomplete) is reported from here. When any part
finds a problem, or a join does not fit, this returns None and `verify` reads the whole
log again in one pass, which names the first problem; so the report never depends on how
the file was cut.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from itertools import islice, pairwise
from typing import Any

import orjson

from pte._audit._content import content_problem
from pte._audit._scan import (
    AUDIT_FORMAT,
    WHOLE_LOG,
    Scan,
    ScanStart,
    Segment,
    VerifyReport,
    runs_left_open,
    scan_lines,
)

__all__ = ["MIN_PART_BYTES", "verify_in_parts"]

#: A part smaller than this is not worth a process (starting one costs ~10-50 ms).
MIN_PART_BYTES = 8 << 20


def verify_in_parts(
    path: str | os.PathLike[str], *, check_schema: bool, anchors: frozenset[int], jobs: int
) -> VerifyReport | None:
    """The report of `verify` for a format 2 file, verified in up to `jobs` parts at once.

    None when the file is not worth splitting (too small for two parts, format 1, or a first
    line that does not say format 2) or when it is not intact: `verify` then reads it in
    one pass.
    """
    size = os.path.getsize(path)
    parts = min(jobs, size // MIN_PART_BYTES)
    if parts < 2 or not _is_format_2(path):
        return None
    bounds = _part_bounds(path, size, parts)
    if len(bounds) < 2:
        return None
    # fork is cheap (no re-import, the compiled schema is inherited) but unsafe in a process
    # with other threads running; then a fresh interpreter per worker.
    method = (
        "fork"
        if threading.active_count() == 1 and "fork" in multiprocessing.get_all_start_methods()
        else "spawn"
    )
    file = os.fspath(path)
    try:
        with ProcessPoolExecutor(len(bounds) - 1, mp_context=multiprocessing.get_context(method)) as pool:
            later = [pool.submit(scan_part, file, lo, hi, check_schema, anchors) for lo, hi in bounds[1:]]
            first = scan_part(file, *bounds[0], check_schema, anchors)
            if first is None or first.issue is not None:
                for future in later:
                    future.cancel()
                return None
            scans = [first, *(future.result() for future in later)]
    except (OSError, BrokenProcessPool):
        # No worker (a process limit) or a worker died (killed, out of memory): one pass,
        # in this process, decides (and raises OSError itself if the file cannot be read).
        return None
    return join_parts(scans)


def scan_part(path: str, lo: int, hi: int, check_schema: bool, anchors: frozenset[int]) -> Scan | None:
    """Verify the lines of `path` in bytes [lo, hi) from what the first of them claims.

    None when that first line is not a record to start from (then the join fails).
    """
    with open(path, "rb") as fh:
        fh.seek(lo)
        head = fh.readline()
        start = WHOLE_LOG if lo == 0 else _start_of(head)
        if start is None:
            return None
        fh.seek(lo)
        return scan_lines(_lines(fh, hi - lo), start, check_schema=check_schema, anchors=anchors)


def join_parts(scans: list[Scan | None]) -> VerifyReport | None:
    """The whole log's report from its parts' scans, in file order; None if they do not fit."""
    first = scans[0]
    if first is None:
        return None
    seen: set[str] = set()
    stored: dict[str, Any] = {}
    anchors: dict[int, str] = {}
    segments: list[Segment] = []
    before: Scan | None = None
    for scan in scans:
        if scan is None or scan.issue is not None or scan.version != 2:
            return None
        if before is not None and not (scan.segments and _continues(before, scan)):
            return None
        for segment in scan.segments:
            if segment.begins:
                if segment.run_id in seen:
                    return None  # a run begun twice, or resumed after another began
                seen.add(segment.run_id)
            elif segments and segments[-1].run_id == segment.run_id and not segments[-1].sealed:
                pass  # the run the part before ended in, carried on
            else:
                return None
            segments.append(segment)
        if not _deferred_content_ok(scan, stored):
            return None
        stored.update(scan.stored)
        anchors.update(scan.anchors)
        before = scan
    assert before is not None  # the last part
    whole = Scan(
        None, before.count, before.last_hash, 2, first.log_id, anchors, segments, stored, [], len(seen)
    )
    return whole.report(runs_left_open(segments))


def _continues(before: Scan, scan: Scan) -> bool:
    """`scan`'s first line claims what the part `before` it ended with."""
    head = scan.segments[0]
    return (
        scan.start.count == before.count
        and scan.start.prev == before.last_hash
        and (head.begins or bool(before.segments and before.segments[-1].run_id == head.run_id))
    )


def _deferred_content_ok(scan: Scan, stored_before: dict[str, Any]) -> bool:
    """Check the ``run_started`` records of `scan` that refer to content stored before it."""
    extra: dict[str, Any] = {}
    for _, record, known in scan.deferred:
        view = dict(stored_before)
        view.update(islice(scan.stored.items(), known))
        view.update(extra)
        if content_problem(record, view) is not None:
            return False
        fresh = record.get("stored")
        if isinstance(fresh, dict):
            extra.update(fresh)
    stored_before.update(extra)
    return True


def _is_format_2(path: str | os.PathLike[str]) -> bool:
    with open(path, "rb") as fh:
        head = fh.readline()
    try:
        record = orjson.loads(head)
    except ValueError:
        return False
    return isinstance(record, dict) and record.get("format") == AUDIT_FORMAT


def _part_bounds(path: str | os.PathLike[str], size: int, parts: int) -> list[tuple[int, int]]:
    """Byte ranges of `parts` about equal parts, each starting at the beginning of a line."""
    cuts = [0]
    with open(path, "rb") as fh:
        for k in range(1, parts):
            fh.seek(size * k // parts)
            fh.readline()  # to the start of the next line
            at = fh.tell()
            if cuts[-1] < at < size:
                cuts.append(at)
    cuts.append(size)
    return list(pairwise(cuts))


def _start_of(line: bytes) -> ScanStart | None:
    """What a part's first line claims: the hash before it, its seq, the run it continues."""
    try:
        record = orjson.loads(line)
    except ValueError:
        return None
    if not isinstance(record, dict):
        return None
    prev, seq, run_id, rtype = (record.get(k) for k in ("prev", "seq", "run_id", "type"))
    if type(prev) is not str or type(seq) is not int or type(run_id) is not str or type(rtype) is not str:
        return None
    return ScanStart(prev, seq, None if rtype == "run_started" else run_id, False)


def _lines(fh: Any, length: int) -> Iterator[bytes]:
    """The lines of `fh` from where it is, up to `length` bytes (a whole number of lines)."""
    for raw in fh:
        yield raw
        length -= len(raw)
        if length <= 0:
            return
