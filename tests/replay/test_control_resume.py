"""A for_each over a non-idempotent write, killed by SIGKILL at every record boundary, then resumed.

Every element's effect is applied at most once, ever; every element whose call finished before
the crash is never called again; a resumed run either finishes every remaining element exactly
once, or — when the crash hit an element between its write-ahead record and its result, so its
effect is unknown — ends needs_review naming that element, without calling it or any later one.
"""

from __future__ import annotations

import json
import os
import sqlite3
import textwrap
from pathlib import Path

import pytest

from pte import ReasonCode, Registry, load_registry, verify
from pte.audit import read_records
from pte.runs import replay_file, resume_file
from tests._crash import KILL_PATCH
from tests._services import run_python
from tests.packs import world

REPO = Path(__file__).resolve().parents[2]
PACK = str(Path(world.__file__))
RECIPIENTS = ["alice@corp.example", "bob@corp.example", "dave@corp.example"]
PLAN = json.dumps(
    {
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
)

CHILD = KILL_PATCH + textwrap.dedent(
    """
    from pte import Engine, load_registry

    registry = load_registry([{pack!r}])
    with AuditLog(sys.argv[1]) as audit:
        Engine(registry).execute({plan!r}, audit)
    """
)


def _crash(tmp: Path, kill_at: int, mode: str, db: Path) -> tuple[Path, int]:
    log = tmp / f"run-{mode}-{kill_at}.jsonl"
    env = {**os.environ, "PTE_WORLD": str(db), "KILL_AT": str(kill_at), "KILL_MODE": mode}
    child = run_python(
        CHILD.format(repo=str(REPO), pack=PACK, plan=PLAN), str(log), env=env, timeout=120, warm=[PACK]
    )
    return log, child.returncode


def _sent(db: Path) -> list[str]:
    with sqlite3.connect(db) as conn:
        return [r[0] for r in conn.execute("SELECT recipient FROM dms ORDER BY id")]


@pytest.fixture(scope="module")
def registry() -> Registry:
    return load_registry([PACK])


def test_for_each_write_killed_at_every_record_then_resumed(
    tmp_path: Path, registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "clean.sqlite"
    world.reset(str(db))
    log, code = _crash(tmp_path, 10_000, "after", db)
    assert code == 0 and _sent(db) == RECIPIENTS
    total = len(read_records(log))
    assert total == 12  # run_started, plan_accepted, ch x2, for_each, dm[0..2] x2, run_finished
    finished_runs = needs_review = 0
    boundaries = [(k, "after") for k in range(total - 1)] + [(k, "before") for k in range(1, total)]
    for kill_at, mode in boundaries:
        db = tmp_path / f"world-{mode}-{kill_at}.sqlite"
        world.reset(str(db))
        log, code = _crash(tmp_path, kill_at, mode, db)
        assert code == -9, f"the child was not killed at {mode} {kill_at}"
        before = _sent(db)
        assert len(set(before)) == len(before)
        records = read_records(log)
        done = {r["step_id"] for r in records if r["type"] == "step_finished"}
        started = [r["step_id"] for r in records if r["type"] == "step_started"]
        monkeypatch.setenv("PTE_WORLD", str(db))
        result = resume_file(log, registry)
        after = _sent(db)
        assert len(set(after)) == len(after), (mode, kill_at, after)  # no element applied twice
        assert after[: len(before)] == before
        if result.ok:
            finished_runs += 1
            assert after == RECIPIENTS, (mode, kill_at)
            assert [d["recipient"] for d in result.result] == RECIPIENTS
        else:
            needs_review += 1
            assert result.reason is ReasonCode.NEEDS_REVIEW, (mode, kill_at, result.message)
            in_flight = next(s for s in started if s not in done)
            assert f"'{in_flight}'" in (result.message or "") and in_flight.startswith("dm[")
            index = int(in_flight[3:-1])
            # Elements before the in-flight one: exactly once; it: as before the crash; later: never.
            assert after == before and RECIPIENTS[:index] == after[:index] and len(after) <= index + 1
        # Every element that finished before the crash was served from the log, not re-sent.
        assert verify(log).ok
        assert replay_file(log).ok, (mode, kill_at)
        assert [r["type"] for r in read_records(log)].count("run_resumed") == 1
    assert finished_runs and needs_review


def _truncated(source: Path, keep: int, target: Path) -> Path:
    lines = source.read_text(encoding="utf-8").splitlines(keepends=True)
    target.write_text("".join(lines[:keep]), encoding="utf-8")
    return target


def test_a_staged_run_with_skipped_steps_resumes_from_any_record(
    tmp_path: Path, registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cut a two-stage run (with a skipped step and a for_each) after every record; resume
    finishes it with the same effects, and the finished log verifies and replays."""
    from pte import AuditLog, Engine, EngineConfig
    from pte.engine import ReplayClient

    stage1 = {
        "pte_plan": "1",
        "steps": [
            {"id": "at10", "tool": "is_free", "args": {"slot": "2026-11-02T10:00"}},
            {
                "id": "early",
                "tool": "create_event",
                "args": {"title": "Retro", "slot": "2026-11-02T10:00"},
                "when": {"eq": [{"$ref": "at10/free"}, True]},
                "default": {"id": 0, "title": "", "slot": ""},
            },
        ],
        "continue": {"booked": {"$ref": "early/slot"}},
    }
    stage2 = json.loads(PLAN)
    answers = [json.dumps(stage1), json.dumps(stage2)]
    db = tmp_path / "clean.sqlite"
    world.reset(str(db))
    monkeypatch.setenv("PTE_WORLD", str(db))
    full = tmp_path / "full.jsonl"
    with AuditLog(full) as audit:
        result = Engine(registry, ReplayClient(answers), config=EngineConfig(llm_answer=False)).run(
            "go", audit
        )
    assert result.ok and _sent(db) == RECIPIENTS
    records = read_records(full)
    kinds = [r["type"] for r in records]
    assert {"condition", "stage", "for_each"} <= set(kinds)
    for keep in range(1, len(records)):
        db = tmp_path / f"world-{keep}.sqlite"
        world.reset(str(db))
        monkeypatch.setenv("PTE_WORLD", str(db))
        # The effects the cut run had made: the DMs whose step_finished is in the kept part.
        kept = records[:keep]
        for record in kept:
            if record["type"] == "step_finished" and record["step_id"].startswith("dm["):
                with sqlite3.connect(db) as conn:
                    conn.execute(
                        "INSERT INTO dms(recipient, body) VALUES (?, 'x')", (record["output"]["recipient"],)
                    )
        log = _truncated(full, keep, tmp_path / f"cut-{keep}.jsonl")
        in_flight = kept[-1]["type"] == "step_started" and kept[-1]["step_id"].startswith("dm[")
        resumed = resume_file(
            log, registry, llm=ReplayClient(answers[[r["type"] for r in kept].count("llm_call") :])
        )
        if in_flight:  # a DM started and not finished: its effect is unknown
            assert resumed.reason is ReasonCode.NEEDS_REVIEW, keep
        else:
            assert resumed.ok, (keep, kinds[keep - 1], resumed.message)
            assert _sent(db) == RECIPIENTS, keep
        assert verify(log).ok
        assert replay_file(log).ok, keep
