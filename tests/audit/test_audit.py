"""The audit log: chain building, continuation, redaction, durability, failures, verify, timeline."""

from __future__ import annotations

import itertools
import json
import os
import re
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

# private: the record builders, the only writers of record names
import pte._audit._records as rec
from pte import AuditLog, ReasonCode, SigningKey, verify

# private: the scanner's parts, white-box
from pte._audit._scan import GENESIS_HASH

# private: the schema checkers, white-box
from pte._audit._schema import load_audit_schema

# private: the timeline rendering, white-box
from pte._audit._show import render_timeline

# private: records grouped by run, white-box
from pte._audit._verify import records_by_run

# private: the writer's timestamp format
from pte._audit._writer import format_timestamp

# private: the reason-code group the schema's plan_reason lists
from pte._core import PLAN_REASONS

# private: approvals built by hand (tamper tests)
from pte._policy import make_approval
from pte.audit import Durability, Redactor, VerifyReport, canonical_json, iter_records, read_records
from pte.errors import AuditFormatError, AuditWriteError
from tests._chain import chain_hash, sha256_text
from tests.audit_runs import begun

PLAN_HASH = sha256_text("the plan")
#: What a redacted value or substring becomes (docs/audit-log.md).
REDACTED = "[REDACTED]"


FINISH: dict[str, Any] = {
    "status": "succeeded",
    "reason": None,
    "message": None,
    "answer": "done",
    "result": None,
    "steps_run": 0,
    "llm_calls": 0,
}


def fixed_clock() -> Callable[[], str]:
    """A deterministic clock: one microsecond per record."""
    ticks = itertools.count()
    return lambda: f"2026-11-22T02:30:31.{next(ticks):06d}Z"


TOOLS = [
    {"name": "list_overdue_invoices", "effect": "read", "idempotent": True, "timeout_s": 10},
    {
        "name": "send_reminder",
        "effect": "write",
        "idempotent": False,
        "timeout_s": 30.0,
        "provenance": "trusted",
        "requires_approval": True,
    },
]


def every_type(log: AuditLog) -> None:
    """Append one record of every type (a failing step, a replan, a rejected plan included)."""
    log.append("run_started", mode="run", request="remind overdue", tools=TOOLS, config={"max_replans": 2})
    log.append(
        "llm_call",
        role="planner",
        model="gpt-test",
        messages=[{"role": "system", "content": "plan"}, {"role": "user", "content": "remind overdue"}],
        response_format="json_schema",
        response='{"pte_plan":"1"}',
        finish_reason="stop",
        usage={"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        error=None,
        attempts=1,
        duration_ms=120.5,
    )
    log.append(
        "plan_rejected",
        origin="planner",
        reason="invalid_args",
        message="-1 is less than the minimum of 0",
        path="$.steps[1].args.days",
        plan_text='{"pte_plan":"1"}',
    )
    plan = {"pte_plan": "1", "steps": [{"id": "inv", "tool": "list_overdue_invoices", "args": {"days": 30}}]}
    log.append("plan_accepted", origin="replanner", plan_hash=PLAN_HASH, plan=plan, order=["inv", "mail"])
    # A real signed approval: verify checks its id and its signature (docs/audit-format.md §7).
    approval = make_approval(
        PLAN_HASH,
        "alice",
        catalogue="c" * 64,
        run=log.run_id,
        signing_key=SigningKey.generate(),
        at=datetime(2026, 11, 22, 2, 30, tzinfo=UTC),
    )
    log.write(rec.approval(approval.to_dict(), approval_id=approval.id, signed=True))
    log.append(
        "step_started",
        step_id="inv",
        tool="list_overdue_invoices",
        effect="read",
        args={"days": 30},
        plan_hash=PLAN_HASH,
    )
    log.append(
        "step_finished",
        step_id="inv",
        tool="list_overdue_invoices",
        status="ok",
        output={"ids": [1, 2], "amounts": ["10.00", "5.50"]},
        duration_ms=3.2,
    )
    log.append(
        "step_started",
        step_id="mail",
        tool="send_reminder",
        effect="write",
        args={"invoice_ids": [1, 2]},
        plan_hash=PLAN_HASH,
    )
    log.append(
        "step_finished",
        step_id="mail",
        tool="send_reminder",
        status="failed",
        error={"kind": "timeout", "message": "no answer in 30 s"},
        duration_ms=30000.0,
    )
    log.append(
        "replan",
        attempt=1,
        failed_step="mail",
        error={"kind": "timeout", "message": "no answer in 30 s"},
        completed=["inv"],
    )
    log.append(
        "run_finished",
        status="failed_closed",
        reason="replans_exhausted",
        message="2 replans used",
        answer=None,
        result=None,
        steps_run=2,
        llm_calls=1,
    )


def simple_run(log: AuditLog, *, finish: bool = True, resumes: str | None = None) -> None:
    fields: dict[str, Any] = {"mode": "run", "request": "r", "tools": TOOLS, "config": {}}
    if resumes is not None:
        fields.update(mode="resume", resumes=resumes)
    log.append("run_started", **fields)
    log.append(
        "step_started", step_id="a", tool="list_overdue_invoices", effect="read", args={}, plan_hash=PLAN_HASH
    )
    log.append(
        "step_finished", step_id="a", tool="list_overdue_invoices", status="ok", output=1, duration_ms=1
    )
    if finish:
        log.append(
            "run_finished",
            status="succeeded",
            reason=None,
            message=None,
            answer="done",
            result=1,
            steps_run=1,
            llm_calls=0,
        )


def chain(records: list[dict[str, Any]]) -> bytes:
    """Hash-chain hand-made records (seq/prev/hash filled in), for logs AuditLog refuses to write."""
    out = []
    prev = GENESIS_HASH
    for seq, fields in enumerate(records):
        body = {"seq": seq, "ts": "2026-11-22T02:30:31.000000Z", "prev": prev, **fields}
        prev = chain_hash(prev, body)
        out.append(canonical_json({**body, "hash": prev}) + "\n")
    return "".join(out).encode("utf-8")


def run_started(run_id: str, **extra: Any) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "type": "run_started",
        "mode": "run",
        "request": None,
        "tools": [],
        "config": {},
        **extra,
    }


def run_finished(run_id: str) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "type": "run_finished",
        "status": "succeeded",
        "reason": None,
        "message": None,
        "answer": None,
        "result": None,
        "steps_run": 0,
        "llm_calls": 0,
    }


def step(run_id: str) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "type": "step_finished",
        "step_id": "a",
        "tool": "t",
        "status": "ok",
        "output": None,
        "duration_ms": 0,
    }


@pytest.fixture
def log_path(tmp_path: Path) -> Path:
    return tmp_path / "audit.jsonl"


# --- the chain ---------------------------------------------------------------------------------


def test_in_memory_chain_links_every_record() -> None:
    log = AuditLog(run_id="r1", clock=fixed_clock())
    every_type(log)
    assert log.path is None
    assert [r["seq"] for r in log.records] == list(range(11))
    prev = GENESIS_HASH
    for record in log.records:
        assert record["prev"] == prev
        body = {k: v for k, v in record.items() if k != "hash"}
        assert record["hash"] == chain_hash(prev, body)
        assert record["run_id"] == "r1"
        prev = record["hash"]
    assert log.last_hash == prev
    assert log.next_seq == 11


def test_file_lines_are_exactly_canonical_records(log_path: Path) -> None:
    with AuditLog(log_path, run_id="r1", keep=True, clock=fixed_clock()) as log:
        every_type(log)
    lines = log_path.read_bytes().split(b"\n")
    assert lines[-1] == b""
    assert [json.loads(line) for line in lines[:-1]] == log.records
    for line, record in zip(lines, log.records, strict=False):
        assert line.decode("utf-8") == canonical_json(record)
    assert read_records(log_path) == log.records


def test_records_not_kept_for_a_file_log_unless_asked(log_path: Path) -> None:
    with AuditLog(log_path) as log:
        record = log.append("run_started", mode="run", request=None, tools=[], config={})
    assert log.records == []
    assert record["seq"] == 0 and record["prev"] == GENESIS_HASH


def test_default_run_id_and_timestamp_format() -> None:
    log = AuditLog()
    record = log.append("run_started", mode="run", request=None, tools=[], config={})
    assert re.fullmatch(r"[0-9a-f]{32}", log.run_id)
    assert AuditLog().run_id != log.run_id
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", record["ts"])


@given(st.datetimes(timezones=st.just(UTC)))
@example(datetime(2026, 11, 29, 14, 0, 0, 0, tzinfo=UTC))  # orjson leaves out a microsecond of 0
@example(datetime(9, 1, 2, 3, 4, 5, 6, tzinfo=UTC))
def test_timestamp_is_isoformat_with_microseconds_and_z(moment: datetime) -> None:
    expected = moment.isoformat(timespec="microseconds").replace("+00:00", "Z")
    assert format_timestamp(moment) == expected


def test_append_returns_plain_json_values() -> None:
    log = begun(AuditLog())
    record = log.append("x", reason=ReasonCode.INVALID_ARGS, items=(1, 2), durability=Durability.NONE)
    assert type(record["reason"]) is str and record["reason"] == "invalid_args"
    assert type(record["durability"]) is str
    assert record["items"] == [1, 2]


def test_a_kept_record_holds_none_of_the_callers_values(log_path: Path) -> None:
    """An in-memory log's records are the log: a caller (a tool) changing what it passed after
    the write must not change a kept record; a file log's record is its line."""
    args: dict[str, Any] = {"items": [1, 2], "nested": {"k": "v"}}
    started = rec.step_started(step_id="a", tool="t", effect="read", args=args, plan_hash="a" * 64)
    memory = begun(AuditLog())
    returned = memory.write(started)
    with begun(AuditLog(log_path)) as on_file:
        on_file.write(started)
    args["items"].append(3)
    args["nested"]["k"] = "changed"
    assert memory.records[-1] is returned and returned["args"] == {"items": [1, 2], "nested": {"k": "v"}}
    line = json.loads(log_path.read_bytes().splitlines()[-1])
    assert line["args"] == {"items": [1, 2], "nested": {"k": "v"}}
    assert verify(log_path).intact


def test_continue_an_existing_file_with_a_new_run(log_path: Path) -> None:
    with AuditLog(log_path, run_id="r1") as first:
        simple_run(first)
    with AuditLog(log_path, run_id="r2") as second:
        assert second.next_seq == first.next_seq == 4
        assert second.last_hash == first.last_hash
        record = second.append("run_started", mode="run", request=None, tools=[], config={})
        assert record["seq"] == 4 and record["prev"] == first.last_hash
        second.append("run_finished", **FINISH)
    report = verify(log_path)
    assert report.ok and report.runs == 2 and report.records == 6
    assert report.last_hash == second.last_hash
    assert list(records_by_run(read_records(log_path))) == ["r1", "r2"]
    assert [len(v) for v in records_by_run(read_records(log_path)).values()] == [4, 2]


def test_three_runs_in_one_file_verify(log_path: Path) -> None:
    for run in ("a", "b", "c"):
        with AuditLog(log_path, run_id=run) as log:
            simple_run(log)
    report = verify(log_path)
    assert report.ok and report.runs == 3 and report.records == 12


def test_reopening_a_sealed_run_refuses_to_append(log_path: Path) -> None:
    with AuditLog(log_path, run_id="r1") as log:
        simple_run(log)
    with AuditLog(log_path, run_id="r1") as again, pytest.raises(AuditWriteError, match="sealed"):
        again.append("step_started")
    assert verify(log_path).ok


def test_nothing_may_follow_run_finished_in_the_same_log() -> None:
    log = AuditLog()
    simple_run(log)
    with pytest.raises(AuditWriteError, match="sealed"):
        log.append("step_started")
    assert log.broken


def test_unsealed_run_can_be_continued_after_reopening(log_path: Path) -> None:
    with AuditLog(log_path, run_id="r1") as log:
        simple_run(log, finish=False)
    assert not verify(log_path).complete
    with AuditLog(log_path, run_id="r1") as log:
        log.append("run_finished", **FINISH)
    assert verify(log_path).ok


def test_continuation_reads_a_last_record_bigger_than_the_read_block(log_path: Path) -> None:
    with AuditLog(log_path, run_id="r1") as log:
        simple_run(log, finish=False)
        big = log.append(
            "step_finished", step_id="a", tool="t", status="ok", output="x" * 300_000, duration_ms=1
        )
    with AuditLog(log_path, run_id="r1") as log:
        assert log.last_hash == big["hash"] and log.next_seq == 4
        log.append("run_finished", **FINISH)
    assert verify(log_path).ok


def test_a_partial_last_line_is_refused(log_path: Path) -> None:
    with AuditLog(log_path, run_id="r1") as log:
        simple_run(log, finish=False)
    with log_path.open("ab") as fh:
        fh.write(b'{"seq":3,"run_')
    size = log_path.stat().st_size
    with pytest.raises(AuditWriteError, match="partial record"):
        AuditLog(log_path, run_id="r1")
    assert log_path.stat().st_size == size  # append-only: nothing was cut


def test_repair_partial_tail_drops_an_incomplete_record(log_path: Path) -> None:
    with AuditLog(log_path, run_id="r1") as log:
        simple_run(log, finish=False)
        good_size = log_path.stat().st_size
    with log_path.open("ab") as fh:
        fh.write(b'{"seq":3,"run_')
    with AuditLog(log_path, run_id="r2", repair_partial_tail=True) as log:
        assert log_path.stat().st_size == good_size
        assert log.next_seq == 3
        simple_run(log, resumes="r1")
    report = verify(log_path)
    assert report.ok, report.issue  # r1 never finished, but r2 resumed it


def test_repair_partial_tail_completes_a_record_missing_only_its_newline(log_path: Path) -> None:
    with AuditLog(log_path, run_id="r1") as log:
        simple_run(log, finish=False)
        last = log.last_hash
    data = log_path.read_bytes()
    log_path.write_bytes(data[:-1])  # the crash hit between the record and its newline
    with AuditLog(log_path, run_id="r1", repair_partial_tail=True) as log:
        assert log.last_hash == last and log.next_seq == 3
        log.append("run_finished", **FINISH)
    assert log_path.read_bytes().startswith(data)
    assert verify(log_path).ok


def test_repair_of_a_file_that_is_only_a_partial_line(log_path: Path) -> None:
    log_path.write_bytes(b'{"seq":0')
    with AuditLog(log_path, run_id="r1", repair_partial_tail=True) as log:
        assert log.next_seq == 0 and log.last_hash == GENESIS_HASH
        simple_run(log)
    assert verify(log_path).ok


@pytest.mark.parametrize(
    "mutate",
    [
        lambda data: data[:-10] + b"X" + data[-9:],  # corrupted hash in the last line
        lambda data: data[:-1] + b" \n",  # not canonical
        lambda data: data + b"[]\n",  # not an object
        lambda data: data + b"nope\n",  # not JSON
    ],
)
def test_a_damaged_last_record_is_refused(log_path: Path, mutate: Callable[[bytes], bytes]) -> None:
    with AuditLog(log_path, run_id="r1") as log:
        simple_run(log, finish=False)
    log_path.write_bytes(mutate(log_path.read_bytes()))
    with pytest.raises(AuditWriteError, match="last record"):
        AuditLog(log_path, run_id="r1")


def test_a_second_writer_on_the_same_file_is_refused_while_the_first_is_open(log_path: Path) -> None:
    # One writer per file: the first holds the file's lock from open to close (or its seal).
    first = AuditLog(log_path, run_id="r1")
    first.append("run_started", mode="run", request=None, tools=[], config={})
    with pytest.raises(AuditWriteError, match="being written by another writer"):
        AuditLog(log_path, run_id="r2")
    first.append("step_started", step_id="s", tool="t", effect="read", args={}, plan_hash="0" * 64)
    assert not first.broken
    first.close()
    # Closed: the file is free, and the next writer continues the chain.
    with AuditLog(log_path, run_id="r2") as second:
        second.append("run_started", mode="run", request=None, tools=[], config={})
    assert verify(log_path, check_schema=False).intact


def test_a_sealed_run_frees_the_file_for_the_next_writer(log_path: Path) -> None:
    first = AuditLog(log_path, run_id="r1")
    simple_run(first)  # ends with run_finished: nothing more can follow it from this writer
    with AuditLog(log_path, run_id="r2") as second:
        second.append("run_started", mode="run", request=None, tools=[], config={})
    first.close()
    assert verify(log_path, check_schema=False).intact


def test_a_write_that_ignores_the_lock_is_detected(log_path: Path) -> None:
    first = AuditLog(log_path, run_id="r1")
    first.append("run_started", mode="run", request=None, tools=[], config={})
    with log_path.open("ab") as fh:  # no flock: a process that does not play by the rule
        fh.write(b'{"note":"someone else"}\n')
    with pytest.raises(AuditWriteError, match="changed underneath"):
        first.append("step_started")
    assert first.broken
    first.close()


def test_truncation_underneath_the_writer_is_detected(log_path: Path) -> None:
    first = AuditLog(log_path, run_id="r1")
    first.append("run_started", mode="run", request=None, tools=[], config={})
    os.truncate(log_path, 0)
    with pytest.raises(AuditWriteError, match="changed underneath"):
        first.append("step_started")
    first.close()


def test_appends_from_many_threads_form_one_chain(log_path: Path) -> None:
    with AuditLog(log_path, run_id="r1", durability="none") as log:
        log.append("run_started", mode="run", request=None, tools=[], config={})

        def worker(n: int) -> None:
            for i in range(50):
                log.append("step_finished", step_id="s", tool="t", status="ok", output=[n, i], duration_ms=0)

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        log.append("run_finished", **FINISH)
    report = verify(log_path)
    assert report.ok and report.records == 402


# --- redaction ---------------------------------------------------------------------------------


def test_secret_keys_are_redacted_case_and_separator_insensitively() -> None:
    r = Redactor()
    value: dict[str, Any] = {
        "API-Key": "abc",
        "apiKey": "abc",
        "PASSWORD": 1234,
        "config": {"openai_api_key": "k", "db_password": "p", "Authorization": "Basic xyz", "max_tokens": 5},
        "headers": [{"x-api-key": "k"}, {"Cookie": "session=1"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3},
        "token": None,
        "secret": False,
        "name": "ok",
    }
    out = r.redact(value)
    assert out["API-Key"] == out["apiKey"] == out["PASSWORD"] == REDACTED
    assert out["config"] == {
        "openai_api_key": REDACTED,
        "db_password": REDACTED,
        "Authorization": REDACTED,
        "max_tokens": 5,
    }
    assert out["headers"] == [{"x-api-key": REDACTED}, {"Cookie": REDACTED}]
    assert out["usage"] == value["usage"]
    assert out["token"] is None and out["secret"] is False  # nothing to hide
    assert out["name"] == "ok"
    assert value["config"]["openai_api_key"] == "k"  # input untouched


def test_whole_structures_under_a_secret_key_are_redacted() -> None:
    assert Redactor().redact({"secret": {"a": [1, 2]}}) == {"secret": REDACTED}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("key sk-abcdefghijklmnopqrstuvwxyz0123 used", "key [REDACTED] used"),
        ("sk-proj-AbC_dEf-1234567890abcdefghij", REDACTED),
        ("Authorization: Bearer eyJhbGciOi.abc.def-ghi", "Authorization: Bearer [REDACTED]"),
        ("header Bearer abcdefghijkl1234", "header Bearer [REDACTED]"),
        ("aws AKIAIOSFODNN7EXAMPLE here", "aws [REDACTED] here"),
        ("gh ghp_" + "a" * 36, "gh [REDACTED]"),
        ("github_pat_" + "A1_" * 10, REDACTED),
        ("slack xoxb-1234567890-abcdef", "slack [REDACTED]"),
        ("google AIza" + "B" * 35, "google [REDACTED]"),
        ("stripe sk_live_" + "9" * 24, "stripe [REDACTED]"),
        ("https://bob:hunter2@db.example.com/x", "https://bob:[REDACTED]@db.example.com/x"),
        ("GET /v1?key=0123456789abcdef0123456789abcdef&x=1", "GET /v1?key=[REDACTED]&x=1"),
        ('{"api_key": "abcd1234efgh"}', '{"api_key": "[REDACTED]"}'),
        ("password=hunter22 next", "password=[REDACTED] next"),
        ("DB_PASSWORD: s3cr3t!", "DB_PASSWORD: [REDACTED]"),
        (
            "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----",
            REDACTED,
        ),
    ],
)
def test_patterns_redact_substrings(text: str, expected: str) -> None:
    assert Redactor().redact(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        PLAN_HASH,
        f"approve plan {PLAN_HASH} now",
        f"plan_hash={PLAN_HASH}",
        f'{{"plan_hash": "{PLAN_HASH}", "prev": "{GENESIS_HASH}"}}',
        "max_tokens: 512, prompt_tokens=3, total_tokens: 15",
        "the task-oriented risk-averse plan; tokens: many",
        "a secret: no",
        "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567 base32 but no vendor prefix",
        "",
    ],
)
def test_patterns_leave_hashes_and_ordinary_text_alone(text: str) -> None:
    assert Redactor().redact(text) == text


def test_hashes_survive_redaction_in_records() -> None:
    log = begun(AuditLog())
    record = log.append(
        "plan_accepted", origin="planner", plan_hash=PLAN_HASH, plan={"h": PLAN_HASH}, order=[]
    )
    assert record["plan_hash"] == PLAN_HASH and record["plan"] == {"h": PLAN_HASH}


def test_add_secret_scrubs_exact_strings_everywhere() -> None:
    r = Redactor()
    r.add_secret("hunter2")
    r.add_secret("")  # ignored
    r.add_secret("hunter2-long")
    out = r.redact({"a": ["my hunter2 and hunter2-long"], "b": "nothing", "hunter2": "value kept"})
    # A key is text too (issue 23: a credential used as a key was recorded raw).
    assert out == {"a": ["my [REDACTED] and [REDACTED]"], "b": "nothing", "[REDACTED]": "value kept"}
    with pytest.raises(TypeError):
        r.add_secret(123)  # type: ignore[arg-type]


def test_custom_and_extra_keys_and_patterns() -> None:
    r = Redactor(keys=(), patterns=(), extra_keys=["iban"], extra_patterns=[r"CH\d{19}"])
    assert r.redact({"iban": "x", "password": "p", "note": "pay CH9300762011623852957 now"}) == {
        "iban": REDACTED,
        "password": "p",
        "note": "pay [REDACTED] now",
    }
    assert Redactor().redact({"password": "p"}) == {"password": REDACTED}  # a default secret key


def test_redaction_happens_before_hashing_and_writing(log_path: Path) -> None:
    redactor = Redactor()
    redactor.add_secret("s3cret-value")
    with AuditLog(log_path, redactor=redactor) as log:
        log.append(
            "run_started",
            mode="run",
            request="use sk-abcdefghijklmnopqrstuvwxyz0123 and s3cret-value",
            tools=[],
            config={"llm": {"api_key": "sk-zzzzzzzzzzzzzzzzzzzzzzzzzz", "model": "m"}},
        )
    text = log_path.read_text(encoding="utf-8")
    assert "sk-" not in text and "s3cret-value" not in text
    assert text.count(REDACTED) == 3
    assert verify(log_path).intact


# --- durability --------------------------------------------------------------------------------


@pytest.fixture
def fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = os.fsync

    def counting(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", counting)
    return calls


def test_durability_always_fsyncs_every_record(log_path: Path, fsyncs: list[int]) -> None:
    log = AuditLog(log_path, durability=Durability.ALWAYS)
    log.append("run_started", mode="run", request=None, tools=[], config={})
    after_first = len(fsyncs)
    assert after_first == 2  # the file, and once the directory of the new file
    for _ in range(5):
        log.append("step_started")
    assert len(fsyncs) == after_first + 5
    log.close()


def test_durability_batch_fsyncs_only_at_sync_points(log_path: Path, fsyncs: list[int]) -> None:
    log = AuditLog(log_path)
    assert log.durability is Durability.BATCH
    log.append("run_started", mode="run", request=None, tools=[], config={})
    for _ in range(5):
        log.append("step_started")
    assert fsyncs == []
    # write() went to the OS already: another reader sees every record without any fsync.
    assert len(read_records(log_path)) == 6
    log.sync()
    assert len(fsyncs) == 2  # file + directory of the new file
    log.sync()
    assert len(fsyncs) == 3
    log.append("run_finished", **FINISH)  # the end of a run is a sync point
    assert len(fsyncs) == 4
    log.close()
    assert len(fsyncs) == 5


def test_durability_none_never_fsyncs(log_path: Path, fsyncs: list[int]) -> None:
    log = AuditLog(log_path, durability="none")
    simple_run(log)
    log.sync()
    log.close()
    assert fsyncs == []
    assert verify(log_path).ok


def test_bad_durability_value() -> None:
    with pytest.raises(ValueError):
        AuditLog(durability="sometimes")


def test_in_memory_sync_and_close_are_harmless() -> None:
    log = AuditLog()
    log.sync()
    log.close()
    log.close()
    assert log.closed


# --- failures: fail closed ---------------------------------------------------------------------


def test_nonexistent_directory(tmp_path: Path) -> None:
    with pytest.raises(AuditWriteError) as info:
        AuditLog(tmp_path / "missing" / "audit.jsonl")
    assert info.value.reason is ReasonCode.AUDIT_WRITE_FAILED


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root ignores permissions")
def test_read_only_directory(tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        with pytest.raises(AuditWriteError):
            AuditLog(ro / "audit.jsonl")
    finally:
        ro.chmod(0o700)


def test_a_path_that_is_a_directory(tmp_path: Path) -> None:
    with pytest.raises(AuditWriteError):
        AuditLog(tmp_path)


def test_write_failure_breaks_the_log_for_good(log_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = AuditLog(log_path)
    log.append("run_started", mode="run", request=None, tools=[], config={})
    real_write = os.write
    target = log._fd  # only this log's writes fail

    def failing(fd: int, data: Any) -> int:
        if fd == target:
            raise OSError(28, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", failing)
    with pytest.raises(AuditWriteError, match="No space left"):
        log.append("step_started")
    assert log.broken
    monkeypatch.setattr(os, "write", real_write)
    with pytest.raises(AuditWriteError, match="broken"):
        log.append("step_started")
    with pytest.raises(AuditWriteError):
        log.sync()
    assert log.next_seq == 1
    log.close()
    assert len(read_records(log_path)) == 1


def test_short_writes_are_completed(log_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_write = os.write

    def dribble(fd: int, data: Any) -> int:
        return real_write(fd, bytes(data[:7]))

    log = AuditLog(log_path, run_id="r1")
    monkeypatch.setattr(os, "write", dribble)
    simple_run(log)
    monkeypatch.setattr(os, "write", real_write)
    log.close()
    assert verify(log_path).ok


def test_fsync_failure_raises(log_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = AuditLog(log_path)
    log.append("run_started", mode="run", request=None, tools=[], config={})

    def failing(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing)
    with pytest.raises(AuditWriteError, match="fsync"):
        log.sync()
    assert log.broken
    monkeypatch.undo()
    log.close()


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"value": float("nan")}, "not JSON"),
        ({"value": float("inf")}, "not JSON"),
        ({"value": {1, 2}}, "not JSON"),
        ({"value": object()}, "not JSON"),
        ({"seq": 7}, "set by the audit log"),
        ({"hash": "x"}, "set by the audit log"),
    ],
)
def test_bad_fields_fail_closed(fields: dict[str, Any], match: str) -> None:
    log = begun(AuditLog())
    with pytest.raises(AuditWriteError, match=match):
        log.append("step_started", **fields)
    assert log.broken and [r["type"] for r in log.records] == ["run_started"] and log.next_seq == 1
    with pytest.raises(AuditWriteError):
        log.append("step_started")


def test_appending_to_a_closed_log(log_path: Path) -> None:
    log = AuditLog(log_path)
    log.close()
    with pytest.raises(AuditWriteError, match="closed"):
        log.append("run_started")
    assert log.broken


def test_context_manager_does_not_mask_the_original_error(
    log_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing)
    with pytest.raises(KeyError), AuditLog(log_path) as log:
        log.append("run_started")
        raise KeyError("original")
    with pytest.raises(AuditWriteError), AuditLog(log_path) as log:
        pass


def test_validate_rejects_records_that_break_the_schema() -> None:
    log = AuditLog(validate=True)
    log.append("run_started", mode="run", request=None, tools=[], config={})
    with pytest.raises(AuditWriteError, match="schema"):
        log.append("step_finished", step_id="a", tool="t", status="ok", duration_ms=1)  # no output
    assert log.broken
    with pytest.raises(AuditWriteError, match="unknown record type"):
        begun(AuditLog(validate=True)).append("mystery")


# --- the schema --------------------------------------------------------------------------------


def test_every_record_validates_against_the_schema(log_path: Path) -> None:
    schema = load_audit_schema()
    Draft202012Validator.check_schema(schema)
    validator = Draft202012Validator(schema)
    with AuditLog(log_path, run_id="r1", validate=True) as log:
        every_type(log)
    with AuditLog(log_path, run_id="r2", validate=True) as log:  # resume's annotation
        log.append("run_started", mode="resume", request=None, tools=[], config={})
        log.append("run_resumed", after_records=1)
        log.append("run_finished", **FINISH)
    assert verify(log_path).ok
    records = read_records(log_path)
    assert {r["type"] for r in records} == {
        "run_started",
        "llm_call",
        "plan_accepted",
        "plan_rejected",
        "approval",
        "step_started",
        "step_finished",
        "replan",
        "run_finished",
        "run_resumed",
    }
    for record in records:
        errors = list(validator.iter_errors(record))
        assert errors == [], (record["type"], [e.message for e in errors])


def test_schema_shape() -> None:
    schema = load_audit_schema()
    assert schema["$id"] == "https://pte.dev/schemas/audit-record/2.json"
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    defs = schema["$defs"]
    branches = [b["$ref"].rsplit("/", 1)[-1] for b in schema["oneOf"]]
    assert {
        "run_started",
        "llm_call",
        "plan_accepted",
        "plan_rejected",
        "approval",
        "step_started",
        "step_finished",
        "replan",
        "run_finished",
    } <= set(branches)
    for name in branches:
        assert defs[name]["additionalProperties"] is False
        assert {"seq", "run_id", "ts", "type", "prev", "hash"} <= set(defs[name]["required"])
    assert set(defs["plan_reason"]["enum"]) == {r.value for r in PLAN_REASONS}
    assert defs["reason"]["enum"] == [r.value for r in ReasonCode]
    schema["$id"] = "mutated"
    assert load_audit_schema()["$id"] != "mutated"  # a fresh copy each time


@pytest.mark.parametrize(
    ("record_type", "change"),
    [
        ("run_started", {"surprise": 1}),
        ("run_started", {"mode": "walk"}),
        ("run_started", {"tools": [{"name": "t", "effect": "delete", "idempotent": True, "timeout_s": 1}]}),
        ("llm_call", {"role": "critic"}),
        ("llm_call", {"usage": {"total_tokens": 1.5}}),
        ("plan_accepted", {"plan_hash": "abc"}),
        ("plan_accepted", {"order": ["Bad-Id"]}),
        ("plan_rejected", {"reason": "replans_exhausted"}),  # compile cannot produce it
        ("step_finished", {"status": "ok", "error": {"kind": "x", "message": "y"}}),
        ("replan", {"attempt": 0}),
        ("run_finished", {"reason": "no_such_reason"}),
        ("run_finished", {"status": "succeeded", "reason": "llm_error"}),
    ],
)
def test_schema_rejects(record_type: str, change: dict[str, Any]) -> None:
    validator = Draft202012Validator(load_audit_schema())
    log = AuditLog(clock=fixed_clock())
    every_type(log)
    record = next(r for r in log.records if r["type"] == record_type)
    assert validator.is_valid(record)
    assert not validator.is_valid({**record, **change})


def test_schema_conditions_on_status() -> None:
    validator = Draft202012Validator(load_audit_schema())
    log = AuditLog(clock=fixed_clock())
    every_type(log)
    finished = next(r for r in log.records if r["type"] == "run_finished")
    assert not validator.is_valid({**finished, "reason": None})  # failed_closed must name a reason
    ok_step = next(r for r in log.records if r["type"] == "step_finished" and r["status"] == "ok")
    assert not validator.is_valid({k: v for k, v in ok_step.items() if k != "output"})
    failed = next(r for r in log.records if r["type"] == "step_finished" and r["status"] == "failed")
    assert not validator.is_valid({k: v for k, v in failed.items() if k != "error"})
    assert validator.is_valid({**failed, "output": {"bad": "output"}})  # evidence of a bad output


# --- reading -----------------------------------------------------------------------------------


def test_iter_records_streams_with_line_numbers(log_path: Path) -> None:
    with AuditLog(log_path, run_id="r1") as log:
        simple_run(log)
    pairs = list(iter_records(log_path))
    assert [n for n, _ in pairs] == [1, 2, 3, 4]
    assert isinstance(iter_records(log_path), Iterator)


@pytest.mark.parametrize(("junk", "message"), [(b"{oops\n", "not JSON"), (b"[1]\n", "not a JSON object")])
def test_read_records_names_the_bad_line(log_path: Path, junk: bytes, message: str) -> None:
    with AuditLog(log_path, run_id="r1") as log:
        simple_run(log)
    with log_path.open("ab") as fh:
        fh.write(junk)
    with pytest.raises(AuditFormatError, match=message) as info:
        read_records(log_path)
    assert info.value.line == 5
    assert f"{log_path}:5" in str(info.value)


def test_read_records_partial_tail(log_path: Path) -> None:
    with AuditLog(log_path, run_id="r1") as log:
        simple_run(log)
    with log_path.open("ab") as fh:
        fh.write(b'{"seq":4')
    with pytest.raises(AuditFormatError, match="partial"):
        read_records(log_path)
    assert len(read_records(log_path, skip_partial_tail=True)) == 4


# --- verify ------------------------------------------------------------------------------------


def test_verify_a_good_log(log_path: Path) -> None:
    with AuditLog(log_path, run_id="r1") as log:
        every_type(log)
    report = verify(log_path)
    assert report == VerifyReport(
        records=11,
        runs=1,
        intact=True,
        complete=True,
        issue=None,
        last_hash=log.last_hash,
        format=2,
        log_id=read_records(log_path)[0]["hash"],
    )
    assert report.ok
    assert report.to_dict() == {
        "ok": True,
        "intact": True,
        "complete": True,
        "records": 11,
        "runs": 1,
        "last_hash": log.last_hash,
        "format": 2,
        "log_id": read_records(log_path)[0]["hash"],
        "issue": None,
    }
    assert verify(log_path, check_schema=False).ok


def test_verify_an_incomplete_log(log_path: Path) -> None:
    with AuditLog(log_path, run_id="r1") as log:
        simple_run(log, finish=False)
    report = verify(log_path)
    assert report.intact and not report.complete and not report.ok
    assert report.records == 3
    assert report.issue is not None
    assert report.issue.message == "incomplete: run r1 has no run_finished"
    assert (report.issue.line, report.issue.seq) == (3, 2)
    assert report.to_dict()["issue"] == {
        "line": 3,
        "seq": 2,
        "message": "incomplete: run r1 has no run_finished",
    }


def test_verify_names_the_first_of_several_unfinished_runs(log_path: Path) -> None:
    for run in ("a", "b"):
        with AuditLog(log_path, run_id=run) as log:
            simple_run(log, finish=False)
    report = verify(log_path)
    assert report.issue is not None and "run a has no run_finished (and 1 more)" in report.issue.message


def test_a_resumed_run_is_completed_by_the_run_that_resumes_it(log_path: Path) -> None:
    with AuditLog(log_path, run_id="r1") as log:
        simple_run(log, finish=False)
    with AuditLog(log_path, run_id="r2") as log:
        simple_run(log, resumes="r1", finish=False)
    report = verify(log_path)
    assert not report.complete and report.issue is not None and "run r2" in report.issue.message
    with AuditLog(log_path, run_id="r2") as log:
        log.append("run_finished", **FINISH)
    assert verify(log_path).ok


def test_verify_an_empty_log(log_path: Path) -> None:
    log_path.write_bytes(b"")
    report = verify(log_path)
    assert report.intact and not report.complete
    assert report.issue is not None and "no records" in report.issue.message
    assert report.last_hash is None


def test_verify_a_partial_last_line(log_path: Path) -> None:
    with AuditLog(log_path, run_id="r1") as log:
        simple_run(log)
    data = log_path.read_bytes()
    log_path.write_bytes(data[:-5])
    report = verify(log_path)
    assert not report.intact and not report.complete
    assert report.records == 3
    assert report.issue is not None and report.issue.line == 4 and "partial last line" in report.issue.message


def _issue(data: bytes, tmp_path: Path, **kwargs: Any) -> str:
    path = tmp_path / "crafted.jsonl"
    path.write_bytes(data)
    report = verify(path, **kwargs)
    assert not report.ok
    assert report.issue is not None
    return report.issue.message


def test_verify_structural_rules(tmp_path: Path) -> None:
    good = chain([run_started("a"), step("a"), run_finished("a")])
    assert verify(_write(tmp_path, good)).ok
    assert "after run_finished of run a" in _issue(
        chain([run_started("a"), run_finished("a"), step("a")]), tmp_path
    )
    assert "does not begin with run_started" in _issue(chain([step("a"), run_finished("a")]), tmp_path)
    assert "second run_started" in _issue(chain([run_started("a"), run_started("a")]), tmp_path)
    assert "record of run a after run b began" in _issue(
        chain([run_started("a"), run_started("b"), step("a")]), tmp_path
    )
    assert "unknown record type" in _issue(
        chain([run_started("a"), {"run_id": "a", "type": "odd"}]), tmp_path
    )
    # Without the schema, unknown types pass; the run rules still apply.
    assert verify(
        _write(tmp_path, chain([run_started("a"), {"run_id": "a", "type": "odd"}, run_finished("a")])),
        check_schema=False,
    ).ok


def _write(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "crafted.jsonl"
    path.write_bytes(data)
    return path


def test_verify_schema_violation_with_a_valid_chain(tmp_path: Path) -> None:
    bad = chain([run_started("a", mode="walk"), run_finished("a")])
    message = _issue(bad, tmp_path)
    assert message.startswith("schema:") and "walk" in message
    assert verify(_write(tmp_path, bad), check_schema=False).ok


def test_verify_rejects_a_rewritten_but_equivalent_line(tmp_path: Path) -> None:
    lines = chain([run_started("a"), run_finished("a")]).decode().splitlines(keepends=True)
    spaced = json.dumps(json.loads(lines[0])) + "\n"  # same value, same hash, different bytes
    assert "canonical" in _issue((spaced + lines[1]).encode(), tmp_path)


def test_verify_common_field_problems(tmp_path: Path) -> None:
    lines = chain([run_started("a"), run_finished("a")]).decode().splitlines(keepends=True)
    record = json.loads(lines[0])
    del record["ts"]
    assert "missing ts" in _issue((canonical_json(record) + "\n").encode(), tmp_path)
    record = json.loads(lines[0])
    record["hash"] = "X" * 64
    assert "bad or missing hash" in _issue((canonical_json(record) + "\n").encode(), tmp_path)


def test_verify_reports_the_first_issue_with_line_and_seq(tmp_path: Path) -> None:
    lines = chain([run_started("a"), step("a"), step("a"), run_finished("a")]).splitlines(keepends=True)
    report = verify(_write(tmp_path, lines[0] + lines[2] + lines[3]))
    assert report.records == 1 and report.issue is not None
    assert (report.issue.line, report.issue.seq) == (2, 2)
    assert "seq 2 where 1 was expected (a record is missing)" in report.issue.message
    assert str(report.issue).startswith("line 2 (seq 2): ")
    report = verify(_write(tmp_path, lines[0] + lines[1] + lines[2].replace(b'"seq":2', b'"seq":9')))
    assert report.issue is not None and "not in canonical form" not in report.issue.message
    assert "hash mismatch" in report.issue.message


def test_verify_bad_utf8_and_bad_json(tmp_path: Path) -> None:
    assert "not valid JSON" in _issue(b"\xff\xfe\n", tmp_path)
    assert "not valid JSON" in _issue(b"{\n", tmp_path)
    assert "not a JSON object" in _issue(b"1\n", tmp_path)


# --- the timeline ------------------------------------------------------------------------------


def test_render_timeline_summarises_each_record() -> None:
    log = AuditLog(run_id="r1", clock=fixed_clock())
    every_type(log)
    text = render_timeline(log.records)
    lines = text.split("\n")
    assert len(lines) == len(log.records)
    assert lines[0].split() == [
        "0",
        "02:30:31.000",
        "run_started",
        "run",
        "r1",
        "mode=run",
        "tools=2",
        "request=remind",
        "overdue",
    ]
    assert "llm_call       planner gpt-test attempts=1 120.5 ms stop tokens=15" in lines[1]
    assert "plan_rejected  invalid_args at $.steps[1].args.days: -1 is less than the minimum of 0" in lines[2]
    assert f"plan_accepted  replanner plan {PLAN_HASH[:12]}… steps=2 order=inv,mail" in lines[3]
    assert "approval       plan" in lines[4] and "by alice" in lines[4] and "signed" in lines[4]
    assert 'step_started   inv list_overdue_invoices read {"days":30}' in lines[5]
    assert "step_finished  inv list_overdue_invoices ok 3.2 ms" in lines[6]
    assert "step_finished  mail send_reminder failed 30.00 s timeout: no answer in 30 s" in lines[8]
    assert "replan         attempt 1 after mail failed (timeout: no answer in 30 s) completed=inv" in lines[9]
    assert "run_finished   failed_closed(replans_exhausted) steps=2 llm_calls=1: 2 replans used" in lines[10]


def test_render_timeline_elides_long_values_and_survives_odd_records() -> None:
    log = AuditLog(run_id="r1", clock=fixed_clock())
    simple_run(log, finish=False)
    log.append(
        "run_finished",
        status="succeeded",
        reason=None,
        message=None,
        answer="line one\nline two " + "x" * 500,
        result=None,
        steps_run=1,
        llm_calls=0,
    )
    lines = render_timeline(log.records).split("\n")
    assert len(lines) == 4
    assert "answer=line one\\nline two xxx" in lines[3] and lines[3].endswith("…") and len(lines[3]) < 160
    odd = render_timeline([{"type": "custom", "seq": 9, "ts": "bad", "extra": 1}, {}])
    assert odd.split("\n")[0].split() == ["9", "bad", "custom", '{"extra":1}']
    assert len(odd.split("\n")) == 2
    assert render_timeline([]) == ""


# --- the fast schema check agrees with jsonschema ----------------------------------------------

_SAMPLE_STRINGS = [
    "read",
    "write",
    "ok",
    "failed",
    "succeeded",
    "failed_closed",
    "invalid_args",
    "replans_exhausted",
    "planner",
    "file",
    "run",
    "inv",
    "Bad-Id",
    "",
    "2026-11-22T02:30:31.000000Z",
    "2026-11-22T02:30:31Z",
    PLAN_HASH,
    PLAN_HASH.upper(),
]
_KEYS = [
    "kind",
    "message",
    "name",
    "role",
    "content",
    "effect",
    "idempotent",
    "timeout_s",
    "x",
    "output",
    "error",
]

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-3, 3)
    | st.sampled_from([0.0, 1.0, -1.5, 2.5, 1e300])
    | st.text(max_size=5)
    | st.sampled_from(_SAMPLE_STRINGS),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(_KEYS), inner, max_size=4),
    max_leaves=8,
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Paths to every dict and list inside `value` (itself included)."""
    if isinstance(value, dict):
        yield prefix
        for key, item in value.items():
            yield from _paths(item, (*prefix, key))
    elif isinstance(value, list):
        yield prefix
        for index, item in enumerate(value):
            yield from _paths(item, (*prefix, index))


def _sample_records() -> list[dict[str, Any]]:
    log = AuditLog(clock=fixed_clock())
    every_type(log)
    simple_run(AuditLog(clock=fixed_clock()))
    return log.records


_SAMPLES = _sample_records()


@given(data=st.data())
def test_fast_schema_check_agrees_with_jsonschema(data: st.DataObject) -> None:
    import copy

    # private: the schema checkers, white-box
    from pte._audit._schema import _checkers

    record = copy.deepcopy(data.draw(st.sampled_from(_SAMPLES), label="record"))
    # The branch of the original type: a mutated `type` must then fail its const.
    checker = _checkers()[record["type"]]
    for _ in range(data.draw(st.integers(1, 3), label="mutations")):
        path = data.draw(st.sampled_from(list(_paths(record))), label="path")
        target: Any = record
        for step_key in path:
            target = target[step_key]
        op = data.draw(st.sampled_from(["set", "delete", "add"]), label="op")
        if isinstance(target, dict):
            keys = sorted(target) or ["x"]
            key = data.draw(
                st.sampled_from(keys + _KEYS) if op == "add" else st.sampled_from(keys), label="key"
            )
            if op == "delete":
                target.pop(key, None)
            else:
                target[key] = data.draw(json_values, label="value")
        elif target:
            index = data.draw(st.integers(0, len(target) - 1), label="index")
            if op == "delete":
                del target[index]
            else:
                target[index] = data.draw(json_values, label="value")
    # The one known dialect difference: JSON Schema's ECMA-262 `$` (jsonschema-rs) does not
    # match before a trailing newline, Python's `re` (jsonschema) does.
    assume(not _has_text_ending_in_newline(record))
    assert checker.fast is not None
    assert checker.fast.is_valid(record) == checker.validator.is_valid(record), record
    assert (checker.problem(record) is None) == checker.validator.is_valid(record), record


def _has_text_ending_in_newline(value: Any) -> bool:
    if isinstance(value, str):
        return value.endswith("\n")
    if isinstance(value, dict):
        return any(_has_text_ending_in_newline(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_text_ending_in_newline(v) for v in value)
    return False


def test_every_record_type_has_a_fast_check() -> None:
    # private: the schema checkers, white-box
    from pte._audit._schema import _checkers

    assert len(_checkers()) == len(load_audit_schema()["oneOf"]) >= 10
    assert all(checker.fast is not None for checker in _checkers().values())


def test_the_compiled_check_decides_and_jsonschema_words_the_message() -> None:
    # private: the schema checkers, white-box
    from pte._audit._schema import _checkers

    record = dict(next(r for r in _SAMPLES if r["type"] == "step_finished"))
    checker = _checkers()["step_finished"]
    assert checker.problem(record) is None
    # JSON Schema patterns are ECMA-262: "$" does not match before a final newline (Python's
    # re would let this id through; the compiled jsonschema-rs check does not).
    problem = checker.problem({**record, "step_id": "inv\n"})
    assert problem is not None and "step_id" in problem
    problem = checker.problem({**record, "duration_ms": "slow"})
    assert problem == "'slow' is not of type 'number' (at $.duration_ms)"


def test_render_timeline_run_resumed() -> None:
    line = render_timeline(
        [{"seq": 7, "ts": "2026-11-22T02:30:31.000007Z", "type": "run_resumed", "after_records": 3}]
    )
    assert line.split() == [
        "7",
        "02:30:31.000",
        "run_resumed",
        "resumed",
        "after",
        "3",
        "re-driven",
        "record(s)",
    ]


def test_nested_hash_keys_do_not_confuse_verify(log_path: Path) -> None:
    with AuditLog(log_path, run_id="r1") as log:
        log.append("run_started", mode="run", request=None, tools=[], config={"hash": GENESIS_HASH})
        first = log.last_hash
        log.append(
            "step_started",
            step_id="a",
            tool="t",
            effect="read",
            args={"hash": first, "x": {"hash": 1}},
            plan_hash=first,
        )
        log.append(
            "step_finished", step_id="a", tool="t", status="ok", output={"hash": log.last_hash}, duration_ms=1
        )
        log.append("run_finished", **FINISH)
    assert verify(log_path).ok
