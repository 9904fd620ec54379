"""`pte audit show`: untrusted text cannot drive the terminal, and the log is streamed."""

from __future__ import annotations

import json
import os
import re
import sys
import textwrap
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from pte import AuditLog

# private: the one-line rendering of a record; which records `audit show` shows
from pte._audit import render_record, visible
from pte.cli import main
from tests._cli_run import cli
from tests.audit_runs import begun

# What a hostile tool output or model answer might carry: an OSC window-title change, a CSI
# screen clear and colour, a C1 CSI, a bell, a carriage return that overwrites the line, a
# right-to-left override and a bidi isolate (which reorder what the reader sees) and a
# zero-width space.
HOSTILE = "\x1b]0;owned\x07\x1b[2J\x1b[31mred\x9b1m\rpaid \u202eyaw\u202c \u2066iso\u2069 zero\u200bwidth\x00"
RAW = re.compile(r"[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")

NOTE = "\x1b]0;owned\x07\u202eyaw"

PACK = textwrap.dedent(
    '''
    from pte import tool

    @tool(effect="read")
    def echo_note(note: str) -> dict[str, str]:
        """Return a note as given (stands in for any tool that returns untrusted text)."""
        return {"text": note}
    '''
)


def test_visible_escapes_every_control_and_bidi_character() -> None:
    shown = visible(HOSTILE)
    assert RAW.search(shown) is None
    for escape in (
        "\\x1b]0;owned\\x07",
        "\\x1b[2J",
        "\\x9b",
        "\\r",
        "\\u202e",
        "\\u2066",
        "\\u200b",
        "\\x00",
    ):
        assert escape in shown
    # Printable text, including non-ASCII letters, is left alone.
    assert visible("Zürich - 東京 ✓") == "Zürich - 東京 ✓"


def test_every_field_of_a_record_is_escaped() -> None:
    record: dict[str, Any] = {
        "seq": HOSTILE,
        "ts": HOSTILE,
        "type": HOSTILE,
        "run_id": "r",
        "anything": HOSTILE,
    }
    assert RAW.search(render_record(record)) is None
    for kind in ("run_started", "llm_call", "step_started", "step_finished", "run_finished", "plan_rejected"):
        record = {
            "seq": 1,
            "ts": "2026-01-01T00:00:00.000000Z",
            "type": kind,
            **{f: HOSTILE for f in ("request", "model", "role", "tool", "step_id", "message", "answer")},
            "args": {"x": HOSTILE},
            "output": {HOSTILE: HOSTILE},
            "error": {"kind": HOSTILE, "message": HOSTILE},
            "status": "failed",
        }
        assert RAW.search(render_record(record)) is None, kind


def test_hostile_tool_output_is_shown_escaped_end_to_end(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pack = tmp_path / "notes.py"
    pack.write_text(PACK, encoding="utf-8")
    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps({"pte_plan": "1", "steps": [{"id": "n", "tool": "echo_note", "args": {"note": NOTE}}]}),
        encoding="utf-8",
    )
    log = tmp_path / "audit.jsonl"
    code, _, err = cli(capsys, "execute", str(plan), "--tools", str(pack), "--audit", str(log))
    assert code == 0, err
    code, out, err = cli(capsys, "audit", "show", str(log))
    assert code == 0, err
    assert RAW.search(out.replace("\n", "")) is None
    # Inside JSON values the encoder already wrote ESC as \u001b; the bidi override, which
    # JSON leaves raw, is escaped by the renderer.
    assert "owned" in out
    assert "\\u202e" in out


def test_show_of_a_log_without_a_complete_line_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for content in (b"", b'{"seq": 0, "partial'):
        log = tmp_path / "partial.jsonl"
        log.write_bytes(content)
        code, out, err = cli(capsys, "audit", "show", str(log))
        assert code == 1
        assert out == ""
        assert "no complete record" in err


def test_show_of_a_deeply_nested_line_fails_cleanly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "deep.jsonl"
    log.write_text('{"a":' + "[" * 100_000 + "]" * 100_000 + "}\n", encoding="utf-8")
    for action in ("show", "verify"):
        code, _, err = cli(capsys, "audit", action, str(log))
        assert code == 1, action
        assert "Traceback" not in err


def test_show_streams_memory_bounded_by_the_largest_record(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    log_path = tmp_path / "big.jsonl"
    with begun(AuditLog(log_path, durability="none")) as log:
        for i in range(8_000):
            log.append("note", text=f"{i:06d}" + "x" * 1_000)
    size = log_path.stat().st_size
    assert size > 8_000_000
    cli(capsys, "audit", "show", str(log_path))  # imports and caches outside the measurement
    with open(os.devnull, "w", encoding="utf-8") as sink:
        monkeypatch.setattr(sys, "stdout", sink)
        tracemalloc.start()
        try:
            code = main(["--quiet", "audit", "show", str(log_path)])
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert code == 0
    # Loading the log whole would need more than its size; a stream needs a few records
    # (plus the redactor's bounded memo of short texts, about a megabyte at most).
    assert peak < size / 5, (peak, size)
