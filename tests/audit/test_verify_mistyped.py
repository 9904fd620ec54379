"""A verify gives a verdict, never an exception, whatever type a record's fields have (#33).

A writer of the log can put any JSON value in any field and re-hash the chain. With the schema
check off (``verify(check_schema=False)``, the content checks of pte._audit._content still
run), a ``run_started`` whose ``catalogue``, ``policy`` or ``stored`` was retyped raised
TypeError, KeyError or IntegerDomainError; now every such log is FAILED with a reason.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pte import verify

# private: the verdict, as `pte audit verify` gives it
from pte._audit import verdict
from tests._chain import GENESIS, chain_hash, line_of

REPO = Path(__file__).resolve().parents[2]
SAMPLES = sorted((REPO / "audit_samples").glob("*.jsonl"))

#: Values of every JSON type, including integers JCS cannot write and deep nesting.
MISTYPED = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=8,
)


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _rechained(records: list[dict[str, Any]]) -> bytes:
    """The records re-hashed as a writer without a key can; a record JCS cannot write is
    written as plain JSON (its line is then not canonical: also a verdict, never a crash)."""
    out, prev = [], GENESIS
    for record in records:
        body = {k: v for k, v in record.items() if k != "hash"}
        body["prev"] = prev
        try:
            prev = chain_hash(prev, body)
            out.append(line_of({**body, "hash": prev}))
        except (ValueError, TypeError):
            out.append(json.dumps({**body, "hash": prev}).encode() + b"\n")
    return b"".join(out)


def _judged(log: Path) -> list[Any]:
    """Every verdict a verifier gives the log; an exception fails the test."""
    return [verify(log, check_schema=False), verify(log), verdict(log)]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), value=MISTYPED)
def test_a_mistyped_field_of_any_record_gets_a_verdict(
    tmp_path: Path, data: st.DataObject, value: Any
) -> None:
    sample = data.draw(st.sampled_from(SAMPLES), label="sample")
    records = _records(sample)
    index = data.draw(st.integers(0, len(records) - 1), label="record")
    record = records[index]
    field = data.draw(st.sampled_from(sorted(k for k in record if k not in ("prev", "hash"))), label="field")
    record[field] = value
    log = tmp_path / "edited.jsonl"
    log.write_bytes(_rechained(records))
    for found in _judged(log):
        assert found is not None


@pytest.mark.parametrize("field", ["catalogue", "policy", "stored"])
@pytest.mark.parametrize(
    "value", [["a", "b"], {"x": 1}, 2**64, 3.5, True, [{"name": 1}], {"k": 2**64}], ids=repr
)
def test_a_retyped_run_started_fails_with_a_reason(tmp_path: Path, field: str, value: Any) -> None:
    """The red team's cases: each was an exception before; each is a FAILED verify now."""
    records = _records(REPO / "audit_samples" / "success.jsonl")
    assert field in records[0] or field == "policy"
    records[0][field] = value
    log = tmp_path / "edited.jsonl"
    log.write_bytes(_rechained(records))
    report = verify(log, check_schema=False)
    assert not report.ok and report.issue is not None and report.issue.message
    assert verdict(log).status == "tampered"


@pytest.mark.parametrize("value", [47705898649609210, 2**64, -(2**70)])
@pytest.mark.parametrize("field", ["seq", "step_id", "args"])
def test_an_integer_beyond_a_double_edited_into_a_line_is_a_verdict(
    tmp_path: Path, field: str, value: int
) -> None:
    """A line holding an integer JCS writes only as a double (47705898649609210, found by
    test_scan_phases' property) made the chain check raise IntegerDomainError through
    `verify`: the line is JSON text, whose numbers are doubles, and is hashed as such now."""
    lines = (REPO / "audit_samples" / "success.jsonl").read_text(encoding="utf-8").splitlines()
    index = next(i for i, line in enumerate(lines) if '"type":"step_started"' in line)
    record = json.loads(lines[index])
    record[field] = {"amount": value} if field == "args" else value
    lines[index] = json.dumps(record, separators=(",", ":"))
    log = tmp_path / "edited.jsonl"
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    for found in _judged(log):
        assert found is not None and not found.ok
