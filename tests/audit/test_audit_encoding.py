"""The writer encodes each record once: its line and hash must be exactly the two-encode ones."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from pte import AuditLog, verify

# private: canonical JSON read back
from pte._core import canonical_loads as loads
from tests._chain import GENESIS, chain_hash, line_of
from tests.audit_runs import begun

_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53) + 1, 2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


def _check_line(line: bytes, prev: str) -> dict[str, Any]:
    record: dict[str, Any] = loads(line)
    assert line == line_of(record)
    body = {k: v for k, v in record.items() if k != "hash"}
    assert record["hash"] == chain_hash(prev, body)
    return record


@settings(max_examples=200, deadline=None)
@given(args=_json, output=_json)
def test_single_encode_gives_the_canonical_line_and_hash(
    tmp_path_factory: Any, args: Any, output: Any
) -> None:
    path = tmp_path_factory.mktemp("enc") / "audit.jsonl"
    with begun(AuditLog(path, run_id="r1", durability="none", redactor=None)) as log:
        log.append("step_started", step_id="a", tool="t", effect="read", args={"v": args}, plan_hash="a" * 64)
        log.append("step_finished", step_id="a", tool="t", status="ok", output=output, duration_ms=1.5)
    prev = GENESIS
    for line in path.read_bytes().splitlines(keepends=True):
        prev = _check_line(line, prev)["hash"]


def test_a_nested_hash_member_like_the_placeholder_falls_back_to_two_encodes(tmp_path: Path) -> None:
    # The writer encodes with a placeholder hash (64 zeros) and cuts that member out; a nested
    # "hash" key holding the same value makes the cut ambiguous, so it encodes twice instead.
    path = tmp_path / "audit.jsonl"
    with AuditLog(path, run_id="r1", durability="none") as log:
        log.append("run_started", mode="execute", request=None, tools=[], config={"hash": GENESIS})
        log.append(
            "step_started",
            step_id="a",
            tool="t",
            effect="read",
            args={"hash": GENESIS, "z": [{"hash": GENESIS}]},
            plan_hash="a" * 64,
        )
        log.append("run_finished", status="succeeded", reason=None, message=None, steps_run=0, llm_calls=0)
    prev = GENESIS
    records = []
    for line in path.read_bytes().splitlines(keepends=True):
        records.append(_check_line(line, prev))
        prev = records[-1]["hash"]
    # The nested values are recorded as given (not overwritten by the digest).
    assert records[0]["config"] == {"hash": GENESIS}
    assert records[1]["args"] == {"hash": GENESIS, "z": [{"hash": GENESIS}]}
    report = verify(path, check_schema=False)
    assert report.ok, report.issue
