"""Format 1 logs (written before RFC 8785): they still verify and replay, and are never appended to."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from pte import AuditLog, verify
from pte.errors import AuditWriteError
from pte.runs import replay_file

DATA = Path(__file__).resolve().parents[1] / "data"
V1_LOGS = sorted(DATA.glob("audit_v1_*.jsonl"))


@pytest.mark.parametrize("log", V1_LOGS, ids=lambda p: p.stem)
def test_a_v1_log_verifies_and_replays(log: Path) -> None:
    report = verify(log)
    assert report.ok and report.format == 1
    assert replay_file(log).ok


@pytest.mark.parametrize("log", V1_LOGS, ids=lambda p: p.stem)
def test_a_tampered_v1_log_is_caught(log: Path, tmp_path: Path) -> None:
    lines = log.read_bytes().splitlines(keepends=True)
    edited = tmp_path / "edited.jsonl"
    edited.write_bytes(b"".join([lines[0], lines[1].replace(b'"seq":1', b'"seq": 1'), *lines[2:]]))
    report = verify(edited)
    assert not report.intact and report.issue is not None and report.issue.line == 2
    dropped = tmp_path / "dropped.jsonl"
    dropped.write_bytes(b"".join(lines[:2] + lines[3:]))
    assert not verify(dropped).intact


def test_appending_to_a_v1_log_is_refused_with_a_clear_message(tmp_path: Path) -> None:
    log = tmp_path / "old.jsonl"
    shutil.copyfile(V1_LOGS[0], log)
    before = log.read_bytes()
    with pytest.raises(AuditWriteError, match=r"format 1 .*start a new log file"):
        AuditLog(log)
    assert log.read_bytes() == before


def _v1_line(record: dict[str, Any], prev: str) -> bytes:
    body = {**record, "prev": prev}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    digest = hashlib.sha256((prev + text).encode()).hexdigest()
    full = json.dumps({**body, "hash": digest}, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return (full + "\n").encode()


def test_a_v2_run_in_a_v1_log_is_an_issue(tmp_path: Path) -> None:
    # One file holds one format: a run claiming format 2, chained onto a format 1 log, is not
    # verified by format 1's rules.
    log = tmp_path / "mixed.jsonl"
    shutil.copyfile(V1_LOGS[0], log)
    last = json.loads(log.read_bytes().splitlines()[-1])
    record = {
        "seq": last["seq"] + 1,
        "run_id": "second",
        "ts": "2026-11-23T07:00:00.000000Z",
        "type": "run_started",
        "format": "pte-audit/2",
        "mode": "run",
        "request": None,
        "tools": [],
        "config": {},
    }
    with open(log, "ab") as fh:
        fh.write(_v1_line(record, last["hash"]))
    report = verify(log)
    assert not report.intact and report.issue is not None
    assert "format 'pte-audit/2' in a format 1 log" in report.issue.message
