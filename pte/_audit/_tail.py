"""Reading the end of an existing audit log, so that a writer can continue its chain.

`AuditLog` appends to a file another process (or a crashed run) may have written: before
its first record it checks the file's format, finds the last complete record and verifies
it (never chaining onto a damaged one), tells a partial record left by a crash from a whole
one, and learns which contents earlier ``run_started`` records already store. Those reads
are here; the decisions (refuse, truncate, finish the line) and every write stay in
`pte._audit._writer`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import orjson

from pte._audit._scan import AUDIT_FORMAT, _common_fields_problem, _record_hash_problem
from pte._core import AuditWriteError, canonical_json

__all__: list[str] = []


def _read_tail(fh: Any, size: int, block: int = 65536) -> tuple[bytes | None, bytes]:
    """The last complete line (with its newline) and any partial bytes after it."""
    start = size
    buf = b""
    while True:
        step = min(block, start)
        start -= step
        fh.seek(start)
        buf = fh.read(step) + buf
        lines = buf.split(b"\n")
        # lines[-2] is whole once a newline precedes it or the file start was reached.
        if len(lines) >= 3 or start == 0:
            break
        block *= 2
    tail = lines[-1]
    last = lines[-2] + b"\n" if len(lines) >= 2 else None
    return last, tail


#: (device, inode, first line) of a log -> (bytes scanned, content hashes found): a process
#: that opens the same log run after run scans only what was appended since.
_STORED_SCANS: dict[tuple[int, int, bytes], tuple[int, frozenset[str]]] = {}


def _stored_hashes(fh: Any, fd: int, size: int, first: bytes) -> set[str]:
    """Hashes of the contents stored in the log's ``run_started`` records (first `size` bytes).

    Best effort: a content stored twice (two processes starting runs at once) only costs
    space; verify accepts it, since a stored value must hash to its key either way.
    """
    stat = os.fstat(fd)
    key = (stat.st_dev, stat.st_ino, first)
    start, found = _STORED_SCANS.get(key, (0, frozenset()))
    if start > size:  # the file shrank (a repaired tail, a new file on a reused inode)
        start, found = 0, frozenset()
    hashes = set(found)
    if start < size:
        fh.seek(start)
        scanned = start
        for raw in fh:
            if scanned + len(raw) > size or not raw.endswith(b"\n"):
                break
            scanned += len(raw)
            if b'"stored":{"' in raw and b'"type":"run_started"' in raw:
                try:
                    stored = orjson.loads(raw).get("stored")
                except (ValueError, AttributeError):
                    continue
                if isinstance(stored, dict):
                    hashes.update(stored)
        _STORED_SCANS[key] = (scanned, frozenset(hashes))
        fh.seek(0)
    return hashes


def _check_format(path: Path, first: bytes) -> None:
    """Refuse to append to a log that is not in this writer's format (its first line says)."""
    if not first.endswith(b"\n"):
        return  # a partial first line: the partial-tail handling decides
    try:
        record = json.loads(first.decode("utf-8"))
    except ValueError:
        record = None
    found = record.get("format") if isinstance(record, dict) else None
    if found != AUDIT_FORMAT:
        what = "format 1 (its first record names no format)" if found is None else f"format {found!r}"
        raise AuditWriteError(
            f"audit log {path} is in {what}; this PTE writes {AUDIT_FORMAT}, and one file holds one "
            "format: start a new log file (the old one still verifies with `pte audit verify`)"
        )


def _parse_complete_record(raw: bytes, prev: str, seq: int) -> dict[str, Any] | None:
    """`raw` parsed when it is a canonical, self-consistent record `seq` chained to `prev`."""
    try:
        record = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError):
        return None
    # Parsed from a line: its numbers are JSON text's (an integer beyond 2**53 is a double).
    if not isinstance(record, dict) or (canonical_json(record, from_text=True) + "\n").encode("utf-8") != raw:
        return None
    if _common_fields_problem(record) is not None or record["prev"] != prev or record["seq"] != seq:
        return None
    if _record_hash_problem(record) is not None:
        return None
    return record


def _checked_last(path: Path, raw: bytes) -> tuple[str, dict[str, Any]]:
    """Hash and record of the file's last line, refusing to chain onto a damaged record."""
    try:
        record = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as exc:
        raise AuditWriteError(f"last record of audit log {path} is not JSON: {exc!s:.200}") from None
    problem: str | None
    if not isinstance(record, dict):
        problem = "not a JSON object"
    elif (canonical_json(record, from_text=True) + "\n").encode("utf-8") != raw:  # as the line's text
        problem = "not in canonical form"
    else:
        problem = _common_fields_problem(record) or _record_hash_problem(record)
    if problem is not None:
        raise AuditWriteError(f"last record of audit log {path} does not verify ({problem}); run verify")
    return record["hash"], record
