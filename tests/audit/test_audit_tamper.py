"""Tamper evidence: every edit, deletion, reordering or truncation of a log is detected by verify().

The log bytes are built once; each example mutates them in memory and verifies a temporary
copy (hypothesis forbids function-scoped fixtures inside @given, hence tempfile).
"""

from __future__ import annotations

import itertools
import json
import os
import tempfile

from hypothesis import assume, given
from hypothesis import strategies as st

from pte import AuditLog, verify
from pte.audit import VerifyReport, canonical_json, hash_json
from tests._chain import chain_hash

PLAN = {
    "pte_plan": "1",
    "steps": [
        {"id": "inv", "tool": "list_overdue_invoices", "args": {"days": 30}},
        {
            "id": "total",
            "tool": "calculator",
            "args": {"expression": "sum(amounts)", "variables": {"amounts": {"$ref": "inv/amounts"}}},
        },
        {"id": "fmt", "tool": "format_table", "args": {"rows": {"$ref": "inv/rows"}}},
        {
            "id": "mail",
            "tool": "send_reminder",
            "args": {"invoice_ids": {"$ref": "inv/ids"}},
            "after": ["total"],
        },
    ],
    "result": {"$ref": "total/value"},
}


def build_realistic_log() -> bytes:
    """One sealed run: run_started, llm_call, plan_accepted, four steps (the last writes), run_finished."""
    ticks = itertools.count()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "audit.jsonl")
        with AuditLog(
            path,
            run_id="3f9c2d1e0b8a4c7d9e6f5a4b3c2d1e0f",
            durability="none",
            clock=lambda: f"2026-11-22T02:30:31.{next(ticks) * 1733:06d}Z",
            validate=True,
        ) as log:
            plan_hash = hash_json(PLAN)
            log.append(
                "run_started",
                mode="run",
                request="Remind every customer in Zürich whose invoice is > 30 days overdue (total in €).",
                tools=[
                    {"name": "list_overdue_invoices", "effect": "read", "idempotent": True, "timeout_s": 10},
                    {"name": "calculator", "effect": "read", "idempotent": True, "timeout_s": 1},
                    {"name": "format_table", "effect": "read", "idempotent": True, "timeout_s": 1},
                    {
                        "name": "send_reminder",
                        "effect": "write",
                        "idempotent": False,
                        "timeout_s": 30,
                        "requires_approval": False,
                    },
                ],
                config={
                    "max_replans": 2,
                    "llm": {"model": "gpt-test", "base_url": "http://127.0.0.1:8000/v1"},
                },
            )
            log.append(
                "llm_call",
                role="planner",
                model="gpt-test",
                messages=[
                    {"role": "system", "content": "You compile requests into PTE plans.\nTools: …"},
                    {"role": "user", "content": "Remind every customer in Zürich …"},
                ],
                response_format="json_schema",
                response=canonical_json(PLAN),
                finish_reason="stop",
                usage={"prompt_tokens": 812, "completion_tokens": 143, "total_tokens": 955},
                error=None,
                attempts=1,
                duration_ms=1234.5,
            )
            log.append(
                "plan_accepted",
                origin="planner",
                plan_hash=plan_hash,
                plan=PLAN,
                order=["inv", "total", "fmt", "mail"],
            )
            outputs = {
                "inv": {
                    "ids": [101, 102, 107],
                    "amounts": ["120.00", "75.50", "9.99"],
                    "rows": [["Müller AG", "120.00"], ["Søren & Co", "75.50"], ["李 Ltd", "9.99"]],
                },
                "total": {"value": "205.49"},
                "fmt": {"text": "| customer | amount |\n| Müller AG | 120.00 |"},
            }
            tools = {"inv": "list_overdue_invoices", "total": "calculator", "fmt": "format_table"}
            for step_id, output in outputs.items():
                log.append(
                    "step_started",
                    step_id=step_id,
                    tool=tools[step_id],
                    effect="read",
                    args={"days": 30} if step_id == "inv" else {"resolved": True},
                    plan_hash=plan_hash,
                )
                log.append(
                    "step_finished",
                    step_id=step_id,
                    tool=tools[step_id],
                    status="ok",
                    output=output,
                    duration_ms=3.2,
                )
            log.append(
                "step_started",
                step_id="mail",
                tool="send_reminder",
                effect="write",
                args={"invoice_ids": [101, 102, 107]},
                plan_hash=plan_hash,
            )
            log.sync()
            log.append(
                "step_finished",
                step_id="mail",
                tool="send_reminder",
                status="ok",
                output={"sent": 3},
                duration_ms=41.0,
            )
            log.append(
                "run_finished",
                status="succeeded",
                reason=None,
                message=None,
                answer="Sent 3 reminders; 205.49 € overdue.",
                result="205.49",
                steps_run=4,
                llm_calls=1,
            )
        with open(path, "rb") as fh:
            return fh.read()


LOG = build_realistic_log()
LINES = LOG.splitlines(keepends=True)
N = len(LINES)
#: Byte offsets at which a record starts (0 included).
BOUNDARIES = frozenset(itertools.accumulate((len(line) for line in LINES), initial=0))


def verify_bytes(data: bytes) -> VerifyReport:
    fd, name = tempfile.mkstemp(suffix=".jsonl")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        return verify(name)
    finally:
        os.unlink(name)


def test_the_untouched_log_verifies() -> None:
    report = verify_bytes(LOG)
    assert report.ok, report.issue
    assert report.records == N == 12
    assert any(b > 127 for b in LOG)  # multi-byte UTF-8 is part of what gets mutated


@given(data=st.data())
def test_any_modified_byte_is_detected(data: st.DataObject) -> None:
    position = data.draw(st.integers(0, len(LOG) - 1), label="position")
    value = data.draw(st.integers(0, 255).filter(lambda b: b != LOG[position]), label="value")
    report = verify_bytes(LOG[:position] + bytes([value]) + LOG[position + 1 :])
    assert not report.intact, (position, value)
    assert not report.ok


@given(data=st.data())
def test_any_modified_run_of_bytes_is_detected(data: st.DataObject) -> None:
    start = data.draw(st.integers(0, len(LOG) - 1), label="start")
    replacement = data.draw(st.binary(min_size=1, max_size=min(16, len(LOG) - start)), label="bytes")
    mutated = LOG[:start] + replacement + LOG[start + len(replacement) :]
    assume(mutated != LOG)
    assert not verify_bytes(mutated).intact


@given(index=st.integers(0, N - 1))
def test_any_deleted_record_is_detected(index: int) -> None:
    records = LINES
    report = verify_bytes(b"".join(records[:index] + records[index + 1 :]))
    assert not report.ok
    if index == len(records) - 1:
        # Dropping the seal leaves an intact prefix whose run is unfinished.
        assert report.intact and not report.complete
    else:
        assert not report.intact


@given(pair=st.tuples(st.integers(0, N - 1), st.integers(0, N - 1)).filter(lambda p: p[0] != p[1]))
def test_any_swapped_pair_of_records_is_detected(pair: tuple[int, int]) -> None:
    records = list(LINES)
    i, j = pair
    assert records[i] != records[j]
    records[i], records[j] = records[j], records[i]
    report = verify_bytes(b"".join(records))
    assert not report.intact and not report.ok


@given(index=st.integers(0, N - 1), at=st.integers(0, N))
def test_any_duplicated_record_is_detected(index: int, at: int) -> None:
    records = list(LINES)
    records.insert(at, records[index])
    assert not verify_bytes(b"".join(records)).intact


@given(data=st.data())
def test_any_truncation_is_detected(data: st.DataObject) -> None:
    offset = data.draw(st.integers(0, len(LOG) - 1), label="offset")
    report = verify_bytes(LOG[:offset])
    assert not report.ok
    if offset in BOUNDARIES:
        assert report.intact and not report.complete
    else:
        assert not report.intact


@given(index=st.integers(0, N - 1))
def test_a_rechained_edit_verifies_but_changes_the_anchor(index: int) -> None:
    """Recomputing every hash after an edit defeats the chain alone; the last hash, kept
    elsewhere as an anchor (`VerifyReport.last_hash`), still exposes it."""
    anchor = verify_bytes(LOG).last_hash
    prev = "0" * 64
    out = []
    for n, raw in enumerate(LINES):
        record = json.loads(raw)
        if n == index:
            record["ts"] = "2027-01-01T00:00:00.000000Z"
        record["prev"] = prev
        record.pop("hash")
        prev = chain_hash(prev, record)
        out.append((canonical_json({**record, "hash": prev}) + "\n").encode())
    report = verify_bytes(b"".join(out))
    assert report.ok
    assert report.last_hash != anchor
