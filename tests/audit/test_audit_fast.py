"""verify's fast path (pte._audit._fast) is sound: it accepts only what the reference path accepts.

The fast path decodes a line into a msgspec Struct compiled from the audit schema and accepts
it when msgspec's sorted encoding equals the line, the residual checks pass and the chain
links; anything else goes to the reference path. These tests check each step of that
argument (encodings equal JCS where the fast path relies on it; the compiled schema accepts
nothing jsonschema rejects), that real logs do take the fast path, and that `verify` gives
the same report, first bad line included, with the fast path on and off over tampered logs.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import msgspec
import orjson
import pytest
import rfc8785
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

# private: the scanner's parts, white-box
import pte._audit._scan as audit_verify

# private: the schema checkers, white-box
import pte._audit._schema as audit_schema
from pte import verify

# private: the fast path's parts, white-box
from pte._audit._fast import (
    TIMESTAMP_PATTERN,
    FastPath,
    Unsupported,
    _float_ok,
    _utc_microseconds,
    compile_fast_path,
    fast_errors,
    no_surrogate_pairs,
)

# private: the schema checkers, white-box
from pte._audit._schema import load_audit_schema

# private: the canonical-form check
from pte._core import is_canonical
from pte.audit import VerifyReport

SAMPLES = sorted((Path(__file__).resolve().parents[2] / "audit_samples").glob("*.jsonl"))
_COMPILED = audit_schema._fast_path()
assert _COMPILED is not None
FAST: FastPath = _COMPILED
REFERENCE_SCHEMA = Draft202012Validator(load_audit_schema())
HEX64 = re.compile("[0-9a-f]{64}")
SAMPLE_RECORDS = [orjson.loads(line) for path in SAMPLES for line in path.read_bytes().splitlines()]


def fast_accepts(line: bytes) -> bool:
    """The fast path's per-line decision, without the chain: decode, residual, re-encoding."""
    try:
        record = FAST.decode(line)
    except fast_errors:
        return False
    check = FAST.checks[record.__class__]
    # verify only accepts `prev` and `hash` equal to hashes it computed (the chain).
    chained = all(HEX64.fullmatch(value) for value in (record.prev, record.hash))
    return (
        chained
        and (check is None or check(record))
        and FAST.encode(record) == line
        and no_surrogate_pairs(line)
    )


# ---------------------------------------------------------------------------------------------
# What the fast path relies on
# ---------------------------------------------------------------------------------------------


#: Record types whose checks need the parsed record (stored content, signatures).
EXCLUDED = {"run_started", "approval", "endorsement", "endorsement_rejected"}


def test_every_record_type_but_the_excluded_compiles() -> None:
    assert dict(FAST.skipped) == dict.fromkeys(EXCLUDED, "excluded")
    assert set(FAST.types.values()) == set(audit_schema._branches()) - EXCLUDED


def test_the_sample_logs_take_the_fast_path() -> None:
    """Every line of every sample whose type the fast path covers is accepted by it."""
    taken = 0
    for path in SAMPLES:
        for line in path.read_bytes().splitlines():
            record = orjson.loads(line)
            if "format" not in orjson.loads(path.read_bytes().splitlines()[0]):
                continue  # format 1
            if record["type"] in EXCLUDED:
                assert not fast_accepts(line)
                continue
            assert fast_accepts(line), (path.name, line[:200])
            taken += 1
    assert taken > 100


def test_strings_are_written_as_jcs_writes_them() -> None:
    """msgspec escapes exactly what RFC 8785 escapes, for every code point but surrogates."""
    for code in [*range(0x0, 0xD800), *range(0xE000, 0x10000), *range(0x10000, 0x110000, 97)]:
        text = chr(code)
        assert msgspec.json.encode(text) == rfc8785.dumps(text), hex(code)


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_floats_the_fast_path_keeps_are_written_as_jcs_writes_them(value: float) -> None:
    if _float_ok(value):
        assert msgspec.json.encode(value) == rfc8785.dumps(value)


@given(st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1))
def test_safe_integers_are_written_as_jcs_writes_them(value: int) -> None:
    assert msgspec.json.encode(value) == rfc8785.dumps(value)


@given(
    st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31)),
    st.sampled_from([None, UTC, timezone(timedelta(hours=1)), timezone(timedelta(0), "UTC")]),
)
def test_a_timestamp_kept_by_the_fast_path_matches_the_schema_pattern(moment: datetime, tz: Any) -> None:
    value = moment.replace(tzinfo=tz)
    text = msgspec.json.encode(value)[1:-1].decode()
    if _utc_microseconds(value):
        assert re.fullmatch(TIMESTAMP_PATTERN[1:-1], text)
    decoded = msgspec.json.decode(msgspec.json.encode(value), type=datetime)
    if _utc_microseconds(decoded) and msgspec.json.encode(decoded)[1:-1].decode() == text:
        assert re.fullmatch(TIMESTAMP_PATTERN[1:-1], text)


def test_unknown_schema_constructs_leave_a_record_type_to_the_reference_path() -> None:
    common = {name: {"type": "string"} for name in ("run_id", "ts", "prev", "hash")}
    base: dict[str, Any] = {
        "type": "object",
        "properties": {**common, "seq": {"type": "integer"}, "type": {"const": "x"}},
        "required": ["seq", "run_id", "ts", "type", "prev", "hash"],
        "additionalProperties": False,
    }
    odd = [
        {**base, "properties": {**base["properties"], "n": {"type": "integer", "maximum": 3}}},
        {**base, "properties": {**base["properties"], "s": {"type": "string", "pattern": "a|b"}}},
        {**base, "properties": {**base["properties"], "s": {"type": "string", "pattern": r"^\d$"}}},
        {**base, "properties": {**base["properties"], "o": {"oneOf": [{"type": "string"}]}}},
        {**base, "additionalProperties": True},
        {**base, "required": ["seq"]},
    ]
    for schema in odd:
        fast = compile_fast_path(
            {"x": base, "y": {**schema, "properties": {**schema["properties"], "type": {"const": "y"}}}},
            exclude=frozenset(),
            implied=frozenset(),
        )
        assert "y" in fast.skipped and "x" not in fast.skipped
    with pytest.raises(Unsupported):
        compile_fast_path({"y": odd[0]}, exclude=frozenset(), implied=frozenset())


def test_a_boolean_const_takes_only_that_boolean() -> None:
    """``const: true`` is not given to msgspec as ``Literal[True]`` (msgspec < 0.22 refuses
    it): ``1``, ``false`` and ``null`` are left to the reference path."""
    common = {name: {"type": "string"} for name in ("run_id", "ts", "prev", "hash")}
    schema = {
        "type": "object",
        "properties": {
            **common,
            "seq": {"type": "integer"},
            "type": {"const": "x"},
            "flag": {"const": True},
            "either": {"enum": [True, None]},
        },
        "required": ["seq", "run_id", "ts", "type", "prev", "hash"],
        "additionalProperties": False,
    }
    fast = compile_fast_path({"x": schema}, exclude=frozenset(), implied=frozenset())
    base: dict[str, Any] = {"hash": "h", "prev": "p", "run_id": "r", "seq": 1, "ts": "t", "type": "x"}

    def accepted(**members: Any) -> bool:
        line = rfc8785.dumps({**base, **members})
        try:
            record = fast.decode(line)
        except fast_errors:
            return False
        check = fast.checks[record.__class__]
        return (check is None or check(record)) and fast.encode(record) == line

    assert accepted(flag=True) and accepted(either=True) and accepted(either=None) and accepted()
    for bad in (1, 0, False, None, "true"):
        assert not accepted(flag=bad), bad
    for bad in (1, False, "x"):
        assert not accepted(either=bad), bad


# ---------------------------------------------------------------------------------------------
# Soundness of the compiled schema
# ---------------------------------------------------------------------------------------------

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**60), max_value=2**60)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6)
    | st.sampled_from(
        ["ok", "failed", "read", "write", "x_1", "a[3]", "", "0" * 64, "2026-01-01T00:00:00.000001Z"]
    ),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)


@st.composite
def mutated_records(draw: st.DrawFn) -> dict[str, Any]:
    record = dict(draw(st.sampled_from(SAMPLE_RECORDS)))
    for _ in range(draw(st.integers(min_value=0, max_value=3))):
        action = draw(st.sampled_from(["set", "delete", "add", "nested"]))
        if action == "set" and record:
            record[draw(st.sampled_from(sorted(record)))] = draw(JSON_VALUES)
        elif action == "delete" and record:
            del record[draw(st.sampled_from(sorted(record)))]
        elif action == "add":
            record[draw(st.text(min_size=1, max_size=8))] = draw(JSON_VALUES)
        elif action == "nested":
            holders = [k for k, v in record.items() if isinstance(v, dict) and v]
            if holders:
                key = draw(st.sampled_from(holders))
                inner = dict(record[key])
                inner[draw(st.sampled_from(sorted(inner)))] = draw(JSON_VALUES)
                record[key] = inner
    return record


@settings(max_examples=600, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_records())
def test_the_fast_path_accepts_no_record_the_schema_rejects(record: dict[str, Any]) -> None:
    for line in (orjson.dumps(record, option=orjson.OPT_SORT_KEYS), _jcs_or_none(record)):
        if line is not None and fast_accepts(line):
            assert REFERENCE_SCHEMA.is_valid(orjson.loads(line)), line
            assert is_canonical(line, orjson.loads(line)), line


def _jcs_or_none(record: dict[str, Any]) -> bytes | None:
    try:
        return rfc8785.dumps(record)
    except (rfc8785.CanonicalizationError, ValueError, TypeError):
        return None


# ---------------------------------------------------------------------------------------------
# Same report with the fast path on and off
# ---------------------------------------------------------------------------------------------


def _both(lines: list[bytes]) -> tuple[VerifyReport, VerifyReport]:
    """`verify` with the fast path, and with the reference path alone."""
    fast = verify(list(lines), anchors=range(0, 60, 7))
    compiled = audit_verify._fast_path  # type: ignore[attr-defined]  # the scan's own reference, patched
    audit_verify._fast_path = lambda: None  # type: ignore[attr-defined,assignment]  # off: reference path alone
    try:
        reference = verify(list(lines), anchors=range(0, 60, 7))
    finally:
        audit_verify._fast_path = compiled  # type: ignore[attr-defined]  # back on
    return fast, reference


def _same(lines: list[bytes]) -> VerifyReport:
    fast, reference = _both(lines)
    assert fast.to_dict() == reference.to_dict()
    assert dict(fast.anchors) == dict(reference.anchors)
    return fast


def _rechain(records: list[dict[str, Any]], *, encode: Any = None) -> list[bytes]:
    """Lines for `records` with seq, prev and hash recomputed (a consistent rewrite), each
    line written by `encode` (JCS unless given: orjson writes some numbers otherwise)."""
    from hashlib import sha256

    encode = encode or (lambda value: rfc8785.dumps(value))
    prev = "0" * 64
    out = []
    for seq, record in enumerate(records):
        body = {k: v for k, v in record.items() if k != "hash"}
        body["seq"], body["prev"] = seq, prev
        digest = sha256(prev.encode() + encode(body)).hexdigest()
        out.append(encode({**body, "hash": digest}) + b"\n")
        prev = digest
    return out


V2_SAMPLES = [p for p in SAMPLES if b'"format":"pte-audit/2"' in p.read_bytes().split(b"\n", 1)[0]]


@pytest.mark.parametrize("path", V2_SAMPLES, ids=lambda p: p.name)
def test_every_sample_verifies_alike(path: Path) -> None:
    _same(path.read_bytes().splitlines(keepends=True))


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_edited_bytes_give_the_same_report(data: st.DataObject) -> None:
    raw = bytearray(data.draw(st.sampled_from(V2_SAMPLES)).read_bytes())
    for _ in range(data.draw(st.integers(min_value=1, max_value=3))):
        at = data.draw(st.integers(min_value=0, max_value=len(raw) - 1))
        raw[at] = data.draw(st.integers(min_value=0, max_value=255))
    _same(bytes(raw).splitlines(keepends=True))


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_deleted_swapped_duplicated_lines_give_the_same_report(data: st.DataObject) -> None:
    lines = data.draw(st.sampled_from(V2_SAMPLES)).read_bytes().splitlines(keepends=True)
    i = data.draw(st.integers(min_value=0, max_value=len(lines) - 1))
    j = data.draw(st.integers(min_value=0, max_value=len(lines) - 1))
    action = data.draw(st.sampled_from(["delete", "swap", "duplicate", "truncate"]))
    if action == "delete":
        del lines[i]
    elif action == "swap":
        lines[i], lines[j] = lines[j], lines[i]
    elif action == "duplicate":
        lines.insert(j, lines[i])
    else:
        lines[i] = lines[i][: data.draw(st.integers(min_value=0, max_value=len(lines[i]) - 1))]
        del lines[i + 1 :]
    _same(lines)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_rechained_edits_give_the_same_report(data: st.DataObject) -> None:
    """An edit re-hashed from the edit on passes the chain: the schema, the canonical form and
    the run structure must then find it, on both paths alike."""
    records = [
        orjson.loads(line) for line in data.draw(st.sampled_from(V2_SAMPLES)).read_bytes().splitlines()
    ]
    index = data.draw(st.integers(min_value=0, max_value=len(records) - 1))
    if data.draw(st.booleans()):
        records[index] = data.draw(mutated_records())  # any sample record, mutated
    else:
        records[index] = _edit(records[index], data)
    encoder = data.draw(
        st.sampled_from(
            [
                None,
                lambda v: orjson.dumps(v, option=orjson.OPT_SORT_KEYS),
                lambda v: orjson.dumps(dict(reversed(v.items()))),  # members out of order
                json.dumps,
            ]
        )
    )
    try:
        lines = _rechain(
            records, encode=(lambda v: json.dumps(v).encode()) if encoder is json.dumps else encoder
        )
    except (rfc8785.CanonicalizationError, TypeError, ValueError):
        return
    report = _same(lines)
    assert report.records <= len(records)


def _edit(record: dict[str, Any], data: st.DataObject) -> dict[str, Any]:
    record = dict(record)
    key = data.draw(st.sampled_from(sorted(record)))
    record[key] = data.draw(
        JSON_VALUES
        | st.sampled_from(
            [
                1.0,
                1e-7,
                -0.0,
                2**53 + 1,
                3.25,
                "2026-11-23T14:05:56.546474+01:00",
                "2026-11-23T14:05:56.546474",
                "2026-11-23T14:05:56Z",
                "2026-11-23T14:05:56.546474Z\n",
                "inv\n",
                {"\U0001f600": 1, "\ue000": 2},
                {"kind": "x", "message": "m", "fatal": 1},
                {"kind": "x", "message": "m", "fatal": True},
                [{"a": [[[[[[[[1]]]]]]]]}],
            ]
        )
    )
    return record


def test_a_long_log_with_every_kind_of_late_problem(tmp_path: Path) -> None:
    """Problems after many fast-path lines: the same first bad line and message."""
    lines = (
        (Path(__file__).resolve().parents[2] / "audit_samples" / "success.jsonl").read_bytes().splitlines()
    )
    records = [orjson.loads(line) for line in lines] * 5  # five runs, each its own run id
    base = [dict(r, run_id=f"{r['run_id']}-{i // len(lines)}") for i, r in enumerate(records)]
    good = _rechain(base)
    assert _same(good).ok
    at = len(base) - 3
    caught = accepted = 0
    for value in (1.0, 2**53 + 1, "x\n", None, 7, {"\U0001f600": 1, "\ue000": 2}):
        for key in ("output", "args", "ts", "step_id", "duration_ms"):
            if key in base[at]:
                edited = [*base[:at], {**base[at], key: value}, *base[at + 1 :]]
                for encode in (None, lambda v: orjson.dumps(v, option=orjson.OPT_SORT_KEYS)):
                    try:
                        report = _same(_rechain(edited, encode=encode))
                    except (rfc8785.CanonicalizationError, TypeError, ValueError):
                        continue
                    if report.ok:
                        accepted += 1
                    else:
                        assert report.issue is not None and report.issue.line == at + 1, (key, value)
                        caught += 1
    assert caught > 10 and accepted > 0


V1_LOGS = sorted((Path(__file__).resolve().parents[1] / "data").glob("audit_v1_*.jsonl"))


@pytest.mark.parametrize("path", [*V1_LOGS, *SAMPLES], ids=lambda p: p.name)
def test_every_v1_log_and_sample_still_verifies(path: Path) -> None:
    """Format 1 logs never take the fast path (it is format 2 only) and verify as before."""
    assert V1_LOGS
    report = _same(path.read_bytes().splitlines(keepends=True))
    assert report.intact
    if path in V1_LOGS:
        assert report.ok and report.format == 1


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_tampered_v1_logs_give_the_same_report(data: st.DataObject) -> None:
    lines = data.draw(st.sampled_from(V1_LOGS)).read_bytes().splitlines(keepends=True)
    i = data.draw(st.integers(min_value=0, max_value=len(lines) - 1))
    action = data.draw(st.sampled_from(["byte", "delete", "swap", "truncate"]))
    if action == "byte":
        line = bytearray(lines[i])
        at = data.draw(st.integers(min_value=0, max_value=len(line) - 1))
        line[at] = data.draw(st.integers(min_value=0, max_value=255))
        lines[i] = bytes(line)
    elif action == "delete":
        del lines[i]
    elif action == "swap":
        j = data.draw(st.integers(min_value=0, max_value=len(lines) - 1))
        lines[i], lines[j] = lines[j], lines[i]
    else:
        lines[i] = lines[i][: data.draw(st.integers(min_value=0, max_value=len(lines[i]) - 1))]
        del lines[i + 1 :]
    _same(lines)
