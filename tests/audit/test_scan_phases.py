"""`scan_lines` split into phases (#35) scans exactly as the one function before it did.

Hypothesis builds logs from the audit samples (format 1 and 2, alone or two concatenated),
tampers with them (a byte edited, a line dropped, duplicated or swapped, the file cut short, a
record's field edited with or without re-chaining every hash after it), and scans them whole
or from a cut inside (as `verify(jobs=N)` scans a part), with and without the schema, with the
fast path on and off, asking for some anchors. The new `scan_lines` and the frozen copy of the
old one (tests/audit/_frozen_scan.py) must return equal `Scan`s: the same first issue, worded
byte for byte, and the same counts, segments, stored content, deferred checks and anchors.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

# private: the scanner's parts, white-box
import pte._audit._scan as scan_module
import tests.audit._frozen_scan as frozen

# private: the parallel verifier's parts, white-box
from pte._audit._parallel import _start_of

# private: the scanner's parts, white-box
from pte._audit._scan import GENESIS_HASH, WHOLE_LOG, Scan, ScanStart, runs_left_open, scan_lines
from tests._chain import chain_hash, line_of

SAMPLES = sorted((Path(__file__).resolve().parents[2] / "audit_samples").glob("*.jsonl"))
LINES = {p.stem: p.read_bytes().splitlines(keepends=True) for p in SAMPLES}

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
    | st.sampled_from(["", "0" * 64, "a" * 64, "run_started", "run_finished", "approval", "pte-audit/2"])
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)
FIELDS = ["seq", "run_id", "ts", "type", "prev", "hash", "format", "resumes", "stored", "catalogue", "policy"]


def _rechain(lines: list[bytes], start: int) -> list[bytes]:
    """Every seq/prev/hash from line `start` on recomputed, as a writer of the file could."""
    out = list(lines[:start])
    prev = GENESIS_HASH
    if start:
        try:
            prev = json.loads(out[-1])["hash"]
        except (ValueError, KeyError, TypeError):
            return lines
    for line in lines[start:]:
        try:
            record = json.loads(line)
            body = {k: v for k, v in record.items() if k != "hash"}
            body["prev"] = prev
            body["seq"] = len(out)
            prev = chain_hash(prev, body)
            out.append(line_of({**body, "hash": prev}))
        except (ValueError, TypeError, AttributeError):
            out.append(line)
    return out


@st.composite
def logs(draw: st.DrawFn) -> list[bytes]:
    """Lines of a sample (or two), tampered with or not."""
    names = draw(st.lists(st.sampled_from(sorted(LINES)), min_size=1, max_size=2))
    lines = [line for name in names for line in LINES[name]]
    if len(names) > 1 and draw(st.booleans()):
        # The second log as later runs of the first: its runs renamed, its first run resuming
        # the first log's last run or not, every seq/prev/hash from there re-chained.
        first = len(LINES[names[0]])
        last_run = json.loads(lines[first - 1]).get("run_id")
        resume = draw(st.booleans())
        for at in range(first, len(lines)):
            record = json.loads(lines[at])
            record["run_id"] = f"{record.get('run_id')}-again"
            if resume and record.get("type") == "run_started" and at == first:
                record["resumes"] = last_run
            lines[at] = json.dumps(record).encode() + b"\n"
        lines = _rechain(lines, first)
    op = draw(st.sampled_from(["none", "byte", "drop", "dup", "swap", "cut", "field", "field+rechain"]))
    i = draw(st.integers(0, len(lines) - 1))
    if op == "byte":
        line = bytearray(lines[i])
        at = draw(st.integers(0, len(line) - 1))
        line[at] = draw(st.integers(0, 255))
        lines[i] = bytes(line)
    elif op == "drop":
        del lines[i]
    elif op == "dup":
        lines.insert(i, lines[i])
    elif op == "swap":
        j = draw(st.integers(0, len(lines) - 1))
        lines[i], lines[j] = lines[j], lines[i]
    elif op == "cut":
        keep = b"".join(lines)[: draw(st.integers(0, sum(map(len, lines))))]
        lines = keep.splitlines(keepends=True)
    elif op.startswith("field"):
        record = json.loads(lines[i])
        name = draw(st.sampled_from(FIELDS + sorted(record)))
        if draw(st.booleans()) and name in record:
            del record[name]
        else:
            record[name] = draw(json_values)
        try:
            lines[i] = line_of(record)
        except (ValueError, TypeError):
            lines[i] = json.dumps(record).encode() + b"\n"
        if op == "field+rechain":
            lines = _rechain(lines, i)
    return lines


def _scan(
    module: Any, lines: list[bytes], start: ScanStart, check_schema: bool, anchors: frozenset[int]
) -> Any:
    """The scan. With check_schema off, a tampered record's mistyped field (a list where a
    stored content hash belongs) crashed both alike; it is a verdict now, never an exception
    (tests/audit/test_verify_mistyped.py), so an exception fails the test."""
    return module.scan_lines(iter(lines), start, check_schema=check_schema, anchors=anchors)


def _both(
    lines: list[bytes], start: ScanStart, check_schema: bool, anchors: frozenset[int]
) -> tuple[Any, Any]:
    return (
        _scan(scan_module, lines, start, check_schema, anchors),
        _scan(frozen, lines, start, check_schema, anchors),
    )


def _assert_same(new: Any, old: Any) -> None:
    assert isinstance(new, Scan) and isinstance(old, Scan)
    assert str(new.issue) == str(old.issue)
    assert new == old
    if new.start.whole:
        assert new.report(runs_left_open(new.segments)) == old.report(runs_left_open(old.segments))


@contextmanager
def _fast_path_off() -> Iterator[None]:
    """Both scans without the fast path: every line through the reference checks."""
    modules: tuple[Any, ...] = (scan_module, frozen)
    compiled = [m._fast_path for m in modules]
    for m in modules:
        m._fast_path = lambda: None
    try:
        yield
    finally:
        for m, fast in zip(modules, compiled, strict=True):
            m._fast_path = fast


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    lines=logs(),
    cut=st.integers(0, 60),
    check_schema=st.booleans(),
    fast=st.booleans(),
    anchors=st.frozensets(st.integers(0, 60), max_size=4),
)
def test_the_phases_scan_as_the_one_function_did(
    lines: list[bytes], cut: int, check_schema: bool, fast: bool, anchors: frozenset[int]
) -> None:
    cut = min(cut, len(lines))
    start: ScanStart | None = WHOLE_LOG
    if cut and lines:
        start = _start_of(lines[cut - 1]) if cut <= len(lines) else None
        lines = lines[cut - 1 :]
    if start is None:
        return
    if fast:
        new, old = _both(lines, start, check_schema, anchors)
    else:
        with _fast_path_off():
            new, old = _both(lines, start, check_schema, anchors)
    _assert_same(new, old)
    if not isinstance(old, Scan):
        event(f"raises {old[0]}")
        return
    event("clean" if old.issue is None else re.sub(r"[0-9a-f]{6,}|\d+", "N", old.issue.message)[:48])


def test_the_comparison_sees_problems_and_clean_logs() -> None:
    """The property above compares real outcomes: clean samples scan clean, a dropped line is
    named, and the two scans of each agree."""
    issues = 0
    for lines in LINES.values():
        new, old = _both(lines, WHOLE_LOG, True, frozenset({0, 1}))
        _assert_same(new, old)
        dropped = lines[:1] + lines[2:]
        new, old = _both(dropped, WHOLE_LOG, True, frozenset())
        _assert_same(new, old)
        assert new.issue is not None
        issues += old.issue is not None
    assert issues == len(LINES)
    clean = scan_lines(iter(LINES["success"]), WHOLE_LOG, check_schema=True, anchors=frozenset())
    assert clean.issue is None and clean.count == len(LINES["success"])
