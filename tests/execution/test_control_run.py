"""Running for_each, when and require: records, outcomes, replay (pte._execution._control_run)."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from pte import AuditLog, Engine, Registry, RunResult, load_registry, verify
from pte.audit import read_records
from pte.runs import replay_file
from tests._cli_run import make_deployment
from tests.packs import world

PACK = str(Path(world.__file__))


@pytest.fixture
def registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Registry:
    db = tmp_path / "world.sqlite"
    world.reset(str(db))
    monkeypatch.setenv("PTE_WORLD", str(db))
    return load_registry([PACK])


def rows(sql: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(os.environ["PTE_WORLD"]) as db:
        return db.execute(sql).fetchall()


def execute(registry: Registry, doc: dict[str, Any], tmp_path: Path) -> tuple[RunResult, Path]:
    log = tmp_path / "run.jsonl"
    with AuditLog(log) as audit:
        result = Engine(registry).execute(json.dumps(doc), audit)
    assert verify(log).ok
    assert replay_file(log, registry=registry).ok  # the same decisions from the log alone
    assert replay_file(log).ok  # and from the recorded catalogue
    return result, log


def types(log: Path) -> list[tuple[str, Any]]:
    return [(r["type"], r.get("step_id")) for r in read_records(log)]


DMS = {
    "pte_plan": "1",
    "steps": [
        {"id": "ch", "tool": "channel_members", "args": {"channel": "general"}},
        {
            "id": "dm",
            "tool": "send_dm",
            "for_each": {"$ref": "ch/members"},
            "max_items": 10,
            "args": {"recipient": {"$ref": "ch/members/*/email"}, "body": "The retro is on Monday."},
        },
    ],
    "result": {"$ref": "dm"},
}


def test_for_each_calls_the_tool_once_per_element_as_audited_sub_steps(
    registry: Registry, tmp_path: Path
) -> None:
    result, log = execute(registry, DMS, tmp_path)
    assert result.status == "succeeded", result.message
    assert rows("SELECT recipient FROM dms ORDER BY id") == [
        ("alice@corp.example",),
        ("bob@corp.example",),
        ("dave@corp.example",),
    ]
    assert [r["recipient"] for r in result.result] == [
        r[0] for r in rows("SELECT recipient FROM dms ORDER BY id")
    ]
    seen = types(log)
    i = seen.index(("for_each", "dm"))
    assert seen[i + 1 : i + 7] == [
        ("step_started", "dm[0]"),
        ("step_finished", "dm[0]"),
        ("step_started", "dm[1]"),
        ("step_finished", "dm[1]"),
        ("step_started", "dm[2]"),
        ("step_finished", "dm[2]"),
    ]
    record = next(r for r in read_records(log) if r["type"] == "for_each")
    assert record["items"] == 3 and record["error"] is None
    started = [r for r in read_records(log) if r["type"] == "step_started" and r["step_id"] == "dm[1]"]
    assert started[0]["args"] == {"recipient": "bob@corp.example", "body": "The retro is on Monday."}


def test_a_list_over_max_items_fails_before_any_element_runs(registry: Registry, tmp_path: Path) -> None:
    doc = json.loads(json.dumps(DMS))
    doc["steps"][1]["max_items"] = 2
    result, log = execute(registry, doc, tmp_path)
    assert result.status == "failed_closed" and result.reason is not None
    assert result.reason.value == "step_failed" and "max_items is 2" in (result.message or "")
    assert rows("SELECT count(*) FROM dms") == [(0,)]
    assert not any(t == "step_started" and str(s).startswith("dm") for t, s in types(log))


def booking(slot_when_free: str = "2026-11-02T10:00") -> dict[str, Any]:
    free = {"eq": [{"$ref": "at10/free"}, True]}
    return {
        "pte_plan": "1",
        "steps": [
            {"id": "at10", "tool": "is_free", "args": {"slot": slot_when_free}},
            {
                "id": "early",
                "tool": "create_event",
                "args": {"title": "Retro", "slot": slot_when_free},
                "when": free,
                "default": {"id": 0, "title": "", "slot": ""},
            },
            {
                "id": "late",
                "tool": "create_event",
                "args": {"title": "Retro", "slot": "2026-11-02T16:00"},
                "when": {"not": free},
                "default": {"id": 0, "title": "", "slot": ""},
            },
        ],
        "result": {"early": {"$ref": "early/slot"}, "late": {"$ref": "late/slot"}},
    }


def test_when_runs_one_branch_and_records_the_other_as_skipped(registry: Registry, tmp_path: Path) -> None:
    result, log = execute(registry, booking(), tmp_path)
    assert result.status == "succeeded"
    assert rows("SELECT slot FROM events") == [("2026-11-02T16:00",)]  # 10:00 is busy
    assert result.result == {"early": "", "late": "2026-11-02T16:00"}
    conditions = [r for r in read_records(log) if r["type"] == "condition"]
    assert [(c["step_id"], c["kind"], c["outcome"], c["values"]) for c in conditions] == [
        ("early", "when", "skipped", [[False, True]]),
        ("late", "when", "run", [[False, True]]),
    ]
    assert ("step_started", "early") not in types(log)


def test_when_true_takes_the_first_branch(registry: Registry, tmp_path: Path) -> None:
    result, _ = execute(registry, booking("2026-11-02T11:00"), tmp_path)
    assert rows("SELECT slot FROM events") == [("2026-11-02T11:00",)]
    assert result.result == {"early": "2026-11-02T11:00", "late": ""}


def test_require_ends_the_run_condition_not_met_and_nothing_after_it_runs(
    registry: Registry, tmp_path: Path
) -> None:
    doc = {
        "pte_plan": "1",
        "steps": [
            {"id": "at10", "tool": "is_free", "args": {"slot": "2026-11-02T10:00"}},
            {
                "id": "need",
                "require": {"eq": [{"$ref": "at10/free"}, True]},
                "message": "the calendar is busy at 10:00",
            },
            {"id": "book", "tool": "create_event", "args": {"title": "Retro", "slot": "2026-11-02T10:00"}},
        ],
        "result": {"$ref": "book/id"},
    }
    result, log = execute(registry, doc, tmp_path)
    assert (result.status, result.reason, result.message) == (
        "condition_not_met",
        None,
        "condition not met: the calendar is busy at 10:00",
    )
    assert rows("SELECT count(*) FROM events") == [(0,)]
    finished = read_records(log)[-1]
    assert finished["status"] == "condition_not_met" and finished["reason"] is None
    assert ("step_started", "book") not in types(log)


def test_a_condition_that_cannot_be_evaluated_fails_the_step(registry: Registry, tmp_path: Path) -> None:
    doc = {
        "pte_plan": "1",
        "steps": [
            {"id": "ch", "tool": "channel_members", "args": {"channel": "nobody"}},
            {
                "id": "x",
                "tool": "find_user",
                "args": {"name": "bob"},
                "when": {"eq": [{"$ref": "ch/members/0/name"}, "alice"]},
            },
        ],
    }
    result, log = execute(registry, doc, tmp_path)
    assert result.status == "failed_closed"
    record = next(r for r in read_records(log) if r["type"] == "condition")
    assert record["outcome"] == "error" and record["error"]["kind"] == "unresolved_reference"


def test_cli_execute_reports_condition_not_met_with_exit_code_0(
    registry: Registry,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    make_deployment(tmp_path, monkeypatch, capsys, "--tools", PACK, "--no-store")  # create_event writes
    from pte.cli import main

    doc = {
        "pte_plan": "1",
        "steps": [
            {"id": "at10", "tool": "is_free", "args": {"slot": "2026-11-02T10:00"}},
            {"id": "need", "require": {"eq": [{"$ref": "at10/free"}, True]}, "message": "busy at 10:00"},
            {"id": "book", "tool": "create_event", "args": {"title": "Retro", "slot": "2026-11-02T10:00"}},
        ],
    }
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(doc), encoding="utf-8")
    log = tmp_path / "cli.jsonl"
    code = main(["--quiet", "execute", str(plan_file), "--tools", PACK, "--audit", str(log)])
    out = capsys.readouterr().out
    assert code == 0 and "condition not met: busy at 10:00" in out
    assert rows("SELECT count(*) FROM events") == [(0,)]
    code = main(["--quiet", "execute", str(plan_file), "--tools", PACK, "--audit", str(log), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["status"] == "condition_not_met" and report["reason"] is None
