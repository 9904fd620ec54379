"""Tampering with the records of the control constructs, then re-hashing the chain so that
`audit verify` passes: replay still catches every edit, because it re-makes each decision
(conditions, lists, element calls, stage hand-overs) from the recorded inputs."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pte import AuditLog, Engine, EngineConfig, load_registry, verify
from pte.audit import read_records
from pte.engine import ReplayClient
from pte.runs import replay_file
from tests.audit.test_audit_samples import _rehash
from tests.packs import world

Edit = Callable[[list[dict[str, Any]]], None]


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("control-tamper")
    db = tmp / "world.sqlite"
    world.reset(str(db))
    old = os.environ.get("PTE_WORLD")
    os.environ["PTE_WORLD"] = str(db)
    try:
        registry = load_registry([str(Path(world.__file__))])
        out = {"control": tmp / "control.jsonl", "stage": tmp / "stage.jsonl"}
        control = {
            "pte_plan": "1",
            "steps": [
                {"id": "ch", "tool": "channel_members", "args": {"channel": "general"}},
                {
                    "id": "dm",
                    "tool": "send_dm",
                    "for_each": {"$ref": "ch/members"},
                    "max_items": 5,
                    "args": {"recipient": {"$ref": "ch/members/*/email"}, "body": "hi"},
                },
                {"id": "at10", "tool": "is_free", "args": {"slot": "2026-11-02T10:00"}},
                {
                    "id": "book",
                    "tool": "create_event",
                    "args": {"title": "Retro", "slot": "2026-11-02T10:00"},
                    "when": {"eq": [{"$ref": "at10/free"}, True]},
                    "default": {"id": 0, "title": "", "slot": ""},
                },
            ],
            "result": {"$ref": "book/slot"},
        }
        with AuditLog(out["control"]) as audit:
            assert Engine(registry).execute(json.dumps(control), audit).ok
        stage1 = {
            "pte_plan": "1",
            "steps": [{"id": "page", "tool": "read_page", "args": {"url": "https://news.example/article"}}],
            "continue": {"text": {"$ref": "page/text"}},
        }
        stage2 = {
            "pte_plan": "1",
            "steps": [{"id": "me", "tool": "find_user", "args": {"name": "alice"}}],
            "result": {"$ref": "me/email"},
        }
        llm = ReplayClient([json.dumps(stage1), json.dumps(stage2)])
        with AuditLog(out["stage"]) as audit:
            engine = Engine(registry, llm, config=EngineConfig(llm_answer=False))
            assert engine.run("Read the article, then look me up.", audit).ok
    finally:
        if old is None:
            os.environ.pop("PTE_WORLD", None)
        else:
            os.environ["PTE_WORLD"] = old
    return out


def _first(records: list[dict[str, Any]], kind: str, **match: Any) -> dict[str, Any]:
    return next(r for r in records if r["type"] == kind and all(r.get(k) == v for k, v in match.items()))


def flip_skip(records: list[dict[str, Any]]) -> None:
    _first(records, "condition", step_id="book")["outcome"] = "run"


def free_at_ten(records: list[dict[str, Any]]) -> None:
    # The forger claims the calendar was free: the recorded condition no longer follows.
    _first(records, "step_finished", step_id="at10")["output"]["free"] = True


def fewer_items(records: list[dict[str, Any]]) -> None:
    _first(records, "for_each", step_id="dm")["items"] = 2


def drop_an_element(records: list[dict[str, Any]]) -> None:
    records[:] = [r for r in records if r.get("step_id") != "dm[1]"]


def redirect_an_element(records: list[dict[str, Any]]) -> None:
    _first(records, "step_started", step_id="dm[2]")["args"]["recipient"] = "mallory@evil.example"


def add_a_member(records: list[dict[str, Any]]) -> None:
    members = _first(records, "step_finished", step_id="ch")["output"]["members"]
    members.append({"name": "mallory", "email": "mallory@evil.example"})


def launder_stage_labels(records: list[dict[str, Any]]) -> None:
    _first(records, "stage")["labels"]["text"] = ["trusted"]


def skip_the_stage(records: list[dict[str, Any]]) -> None:
    records[:] = [r for r in records if r["type"] != "stage"]


@pytest.mark.parametrize(
    ("log", "edit"),
    [
        ("control", flip_skip),
        ("control", free_at_ten),
        ("control", fewer_items),
        ("control", drop_an_element),
        ("control", redirect_an_element),
        ("control", add_a_member),
        ("stage", launder_stage_labels),
        ("stage", skip_the_stage),
    ],
    ids=lambda v: v if isinstance(v, str) else v.__name__,
)
def test_a_rehashed_edit_verifies_but_replay_diverges(
    logs: dict[str, Path], log: str, edit: Edit, tmp_path: Path
) -> None:
    records = read_records(logs[log])
    assert replay_file(logs[log]).ok
    edit(records)
    for seq, record in enumerate(records):  # a forger renumbers what was removed
        record["seq"] = seq
    forged = tmp_path / "forged.jsonl"
    _rehash(records, forged)
    assert verify(forged).ok  # the chain alone cannot tell
    report = replay_file(forged)
    assert not report.ok
    assert report.runs[0].outcome == "diverged"
