"""The audit writer's fast path against the reference: what it writes is what the walk and the
RFC 8785 reference encoder (`rfc8785`) give, byte for byte, hash included.

The writer walks only a record's own fields for types and numbers when its common fields are
exact strings and safe integers (checked once per batch), cuts the placeholder hash member
with the comma after it in one `split`, and, when the search of a batch's encodings finds a
keyword that may lie in its own members (a random hex ``prev`` or run id spelling ``4b1d``,
``acca``), searches the records' own fields alone before deciding to walk. Each is checked
here on generated records: NaN, infinities, integers beyond 2**53, str and int subclasses,
lone surrogates, non-BMP keys, keys that are not text, secrets and rule keywords anywhere in
the data, run ids and clocks that are str subclasses or spell hex-only keywords.
"""

from __future__ import annotations

import hashlib
import string
from collections.abc import Mapping
from enum import IntEnum
from typing import Any

import pytest
import rfc8785
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from pte import AuditLog, verify

# private: the record builders and the record they build, to write records by hand
from pte._audit import records

# private: the hash a chain starts from
from pte._audit._scan import GENESIS_HASH
from pte.audit import Redactor
from pte.errors import AuditWriteError
from tests.secrets_corpus import FREE_TEXT, KEYED

SECRET = "pl41n-s3cret-of-the-deployment"
#: A ClickHouse Cloud key (gitleaks' rule: ``4b1d`` and 38 letters or digits).
CLICKHOUSE_KEY = "4b1d" + "Qx7Lm2Pz9Rt4Vw8Ks3Nb6Hj1Gf5Dc0Ya2Ue7Io"
COMMON = ("seq", "run_id", "ts", "type", "prev")


class Text(str):
    """A str subclass (as a `StrEnum` member is one)."""


class Number(IntEnum):
    THREE = 3


class Lines:
    """A `RecordWriter` keeping the lines the log hands it (the log's seam to a store)."""

    def __init__(self) -> None:
        self.lines: list[bytes] = []

    def head(self) -> tuple[int, str, bool]:
        return 0, GENESIS_HASH, False

    def write(self, record: Mapping[str, Any], line: bytes) -> None:
        self.lines.append(line)

    def sync(self) -> None:
        pass

    def close(self) -> None:
        pass


class CountingRedactor(Redactor):
    """The default redactor, counting the records it walks."""

    walks = 0

    def redact_fields(self, record_type: str, fields: Mapping[str, Any]) -> dict[str, Any]:
        self.walks += 1
        return super().redact_fields(record_type, fields)


def _redactor() -> CountingRedactor:
    redactor = CountingRedactor()
    redactor.add_secret(SECRET)
    return redactor


plain_texts = st.one_of(
    st.sampled_from(
        [
            *(text for _, text, _ in FREE_TEXT[:12]),
            *list(KEYED.values())[:6],
            SECRET,
            CLICKHOUSE_KEY,
            f"id {CLICKHOUSE_KEY}.",
            "ACCAQWERTYUIOPASDFGH",
            "4b1d",
            "acca",
            "\U0001f600",
            "K\u212aelvin",
        ]
    ),
    st.text(max_size=20),
    st.text(string.hexdigits, min_size=4, max_size=64),
    st.text(string.ascii_letters + string.digits + " .", max_size=12),
    st.text(string.ascii_letters + string.digits + " .", max_size=12),
    st.text(string.ascii_letters + string.digits + " .", max_size=12),
)
keys = st.one_of(
    plain_texts, st.sampled_from(["api_key", "Password", "x", "\U0001f600", "\uffff", "hash", "prev"])
).map(lambda key: f"{key}_" if key in (*COMMON, "hash") else key)
plain_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**53) + 1, 2**53 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    plain_texts,
)
# What only the reference encoder or the walk may decide (or refuse), now and then.
odd_scalars = st.one_of(
    st.sampled_from(
        [float("nan"), float("inf"), -float("inf"), 2**53, -(2**60), 2**70, 30.0, -0.0, 1e-7, 1e21]
    ),
    st.sampled_from(["\ud800", "a\udfffb"]),  # lone surrogates: not JSON
    st.builds(Text, st.text(max_size=5)),
    st.just(Number.THREE),
)


def _values(leaves: st.SearchStrategy[Any], odd_keys: bool) -> st.SearchStrategy[Any]:
    def containers(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        found = st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=3)
        if odd_keys:  # a key that is not text, or not JSON
            found |= st.dictionaries(st.sampled_from([0, "\ud800"]), inner, min_size=1, max_size=1)
        return found

    return st.recursive(leaves, containers, max_leaves=6)


# Mostly plain data (the fast path, or the walk for a secret), sometimes what only the
# reference may decide: about a third of the records are refused.
field_dicts = st.one_of(
    st.dictionaries(keys, _values(plain_scalars, odd_keys=False), max_size=5),
    st.dictionaries(keys, _values(plain_scalars | odd_scalars, odd_keys=True), max_size=4),
)
RUN_IDS = ["4b1d" * 8, "acca" + "0" * 28, "3" * 32, Text("eaaa" + "f" * 28)]


def _reference_line(body: dict[str, Any], prev: str) -> bytes:
    """`body` (a record without its hash) as its line: hashed and encoded by `rfc8785`
    (an integer beyond 2**53 as the double it equals when JCS writes that double with the
    integer's own digits, else refused: `canonical_bytes`'s rule)."""

    def jcs(value: dict[str, Any]) -> bytes:
        try:
            return rfc8785.dumps(value)
        except rfc8785.IntegerDomainError:
            return rfc8785.dumps(_as_doubles(value))

    digest = hashlib.sha256(prev.encode("ascii") + jcs(body)).hexdigest()
    return jcs({**body, "hash": digest}) + b"\n"


def _as_doubles(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | dict | list):
        return value
    if isinstance(value, int):
        if abs(value) < 2**53:
            return value
        if rfc8785.dumps(float(value)) != str(value).encode():
            raise ValueError(f"{value} does not survive JSON's doubles")
        return float(value)
    if isinstance(value, dict):
        return {key: _as_doubles(item) for key, item in value.items()}
    return [_as_doubles(item) for item in value]


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(field_dicts, st.sampled_from(RUN_IDS), st.booleans(), st.booleans())
def test_the_writer_writes_what_the_walk_and_the_reference_encoder_give(
    fields: dict[str, Any], run_id: str, odd_clock: bool, as_pair: bool
) -> None:
    redactor = _redactor()
    sink = Lines()
    ts = Text("2026-11-29T14:00:00.000001Z") if odd_clock else "2026-11-29T14:00:00.000002Z"
    log = AuditLog(run_id=run_id, redactor=redactor, writer=sink, clock=lambda: ts)
    log.write(records.run_started(mode="execute", request=None, config={}))
    prev = log.last_hash
    started = records.step_started(step_id="s", tool="t", effect="read", args={"x": 1}, plan_hash="a" * 64)
    finished = records.Record("step_finished", fields)
    batch = [started, finished] if as_pair else [finished]
    expected: list[bytes] = []
    refused = False
    for seq, record in enumerate(batch, start=1):
        try:  # the walk, then the reference encoder
            walked = redactor.redact_fields(record.type, record.fields)
            body = {"seq": seq, "run_id": run_id, "ts": ts, "type": record.type, "prev": prev, **walked}
            line = _reference_line(body, prev)
        except (rfc8785.CanonicalizationError, TypeError, ValueError):  # NaN, a lone surrogate...
            refused = True
            break
        expected.append(line)
        prev = _hash_of(line)
    if refused:
        event("refused")
        with pytest.raises(AuditWriteError):
            log.write_records(batch)
        assert len(sink.lines) == 1  # nothing of the batch was written
        return
    walks = redactor.walks
    log.write_records(batch)
    event("walked" if redactor.walks > walks else "fast path")
    assert sink.lines[1:] == expected


def _hash_of(line: bytes) -> str:
    at = line.index(b'"hash":"') + len(b'"hash":"')
    return line[at : at + 64].decode("ascii")


def test_a_hex_keyword_in_the_logs_own_members_sends_no_record_through_the_walk() -> None:
    # The run id spells `4b1d` (gitleaks' ClickHouse keyword), so every record's encoding holds
    # it; the walk leaves the common members alone, and the records' own fields decide.
    redactor = _redactor()
    sink = Lines()
    log = AuditLog(run_id="4b1d" * 8, redactor=redactor, writer=sink)
    log.write(records.run_started(mode="execute", request=None, config={}))
    for i in range(40):
        log.write_records(
            [
                records.step_started(
                    step_id=f"s{i}", tool="t", effect="read", args={"x": i}, plan_hash="c" * 64
                ),
                records.step_finished(step_id=f"s{i}", tool="t", status="ok", duration_ms=0.5, output=i),
            ]
        )
    assert redactor.walks == 0
    # A secret in a data field is still found, and only the data is changed.
    found = log.write_records(
        [
            records.step_started(
                step_id="k", tool="t", effect="read", args={"q": f"key {CLICKHOUSE_KEY}"}, plan_hash="c" * 64
            ),
            records.step_finished(
                step_id="k", tool="t", status="ok", duration_ms=0.5, output="ACCAQWERTYUIOPASDFGH"
            ),
        ]
    )
    assert redactor.walks == 2
    assert found[0]["args"] == {"q": "key [REDACTED]"} and found[1]["output"] == "[REDACTED]"
    assert found[0]["run_id"] == "4b1d" * 8
    data = b"".join(sink.lines)
    assert CLICKHOUSE_KEY.encode() not in data and b"ACCAQWERTYUIOPASDFGH" not in data


def test_a_plan_hash_is_data_a_hex_keyword_in_it_is_walked_and_kept() -> None:
    # `plan_hash` is the executor's field, not the log's own member: searched as data (a false
    # alarm there costs a walk, never a miss), written as it is.
    redactor = _redactor()
    log = AuditLog(redactor=redactor)
    log.write(records.run_started(mode="execute", request=None, config={}))
    plan_hash = "4b1d" + "e" * 60
    written = log.write(
        records.step_started(step_id="a", tool="t", effect="read", args={}, plan_hash=plan_hash)
    )
    assert written["plan_hash"] == plan_hash and redactor.walks == 1


@pytest.mark.parametrize(
    "nested",
    [
        {"hash": GENESIS_HASH},  # the placeholder member, followed by a brace
        {"hash": GENESIS_HASH, "z": 1},  # followed by a comma: the cut is not unique
        [{"hash": GENESIS_HASH}, {"hash": GENESIS_HASH, "i": [1]}],
        {"a": {"hash": GENESIS_HASH, "hash2": GENESIS_HASH}},
    ],
)
def test_a_nested_placeholder_member_is_never_cut_for_the_records_own(nested: Any, tmp_path: Any) -> None:
    path = tmp_path / "run.jsonl"
    with AuditLog(path, run_id="r1", redactor=_redactor()) as log:
        log.write(records.run_started(mode="execute", request=None, config={"c": nested}))
        prev = log.last_hash
        log.write_records(
            [
                records.step_started(
                    step_id="a", tool="t", effect="read", args={"n": nested}, plan_hash="a" * 64
                ),
                records.step_finished(step_id="a", tool="t", status="ok", duration_ms=1.0, output=nested),
            ]
        )
    lines = path.read_bytes().splitlines(keepends=True)
    assert verify(path).intact
    body = {
        "seq": 1,
        "run_id": "r1",
        "ts": _ts_of(lines[1]),
        "type": "step_started",
        "prev": prev,
        "step_id": "a",
        "tool": "t",
        "effect": "read",
        "args": {"n": nested},
        "plan_hash": "a" * 64,
    }
    assert lines[1] == _reference_line(body, prev)


def _ts_of(line: bytes) -> str:
    at = line.index(b'"ts":"') + len(b'"ts":"')
    return line[at : line.index(b'"', at)].decode("ascii")
