"""Data blocks within a budget (pte._core._data_budget): record boundaries, never mid-string."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from pte import AuditLog, Engine, EngineConfig, Registry, tool

# private: the data budget's rendering
from pte._core import render_budgeted

# private: the prompts' text, white-box
from pte._run import DATA_CLOSE, DATA_OPEN, data_block
from pte.audit import read_records
from pte.engine import ReplayClient

MORE = re.compile(r"^… (\d+) more records? not shown$")
HIDDEN = re.compile(r"^\[text of \d+ characters not shown\]$")


def files(n: int) -> list[dict[str, Any]]:
    return [{"id": i, "name": f"report-{i:04d}.pdf", "size": 1000 + i} for i in range(n)]


def test_a_long_listing_is_cut_at_a_record_boundary_and_says_how_many_are_left() -> None:
    listing = files(500)
    shown = json.loads(render_budgeted(listing, 2000))
    *records, marker = shown
    assert records == listing[: len(records)] and len(records) > 10
    match = MORE.match(marker)
    assert match and int(match.group(1)) == 500 - len(records)
    assert len(json.dumps(shown, ensure_ascii=False)) <= 2000


def test_records_inside_an_object_are_cut_and_small_fields_survive() -> None:
    value: dict[str, Any] = {"count": 500, "next_page": None, "files": files(500)}
    shown = json.loads(render_budgeted(value, 3000))
    assert shown["count"] == 500 and shown["next_page"] is None
    assert MORE.match(shown["files"][-1])
    assert shown["files"][:-1] == value["files"][: len(shown["files"]) - 1]


def test_a_string_is_shown_whole_or_not_at_all() -> None:
    iban = "DE89370400440532013000"
    value = {"iban": iban, "body": "x" * 50_000}
    shown = json.loads(render_budgeted(value, 1000))
    assert shown["iban"] == iban and HIDDEN.match(shown["body"])
    # Plain text is cut after its last whole line.
    text = "\n".join(f"line {i}" for i in range(2000))
    cut = render_budgeted(text, 500)
    body, marker = cut.rsplit("\n", 1)
    assert text.startswith(body + "\n") and re.fullmatch(r"… \d+ more lines not shown", marker)


def test_the_default_budget_is_larger_than_the_old_clip_and_none_keeps_the_old_form() -> None:
    listing = files(150)  # about 7,500 characters
    assert EngineConfig().data_budget == 16_000
    assert json.loads(render_budgeted(listing, EngineConfig().data_budget)) == listing
    assert "more characters clipped" in render_budgeted(listing, None)
    block = data_block("big", listing, budget=2000)
    assert block.startswith(DATA_OPEN) and block.endswith(DATA_CLOSE) and "more records not shown" in block


@pytest.mark.parametrize("bad", [0, 10, -5, 1.5, "big"])
def test_a_budget_must_be_a_sensible_integer(bad: Any) -> None:
    with pytest.raises(ValueError, match="data_budget"):
        EngineConfig(data_budget=bad)


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=60),
    lambda inner: st.lists(inner, max_size=30) | st.dictionaries(st.text(max_size=8), inner, max_size=6),
    max_leaves=200,
)


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (k, *_strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


@settings(max_examples=200, deadline=None)
@given(_json, st.integers(min_value=200, max_value=3000))
def test_a_budgeted_block_is_valid_json_with_only_whole_strings(value: Any, budget: int) -> None:
    if isinstance(value, str):
        return  # plain text: cut at lines (above)
    shown = json.loads(render_budgeted(value, budget))
    original = set(_strings(value))
    for text in _strings(shown):
        assert text in original or MORE.match(text) or HIDDEN.match(text), text


class Listing(BaseModel):
    files: list[dict[str, Any]]


class Done(BaseModel):
    ok: bool


@tool
def list_drive() -> Listing:
    """Every file in the drive."""
    return Listing(files=files(800))


@tool
def noop() -> Done:
    """Do nothing."""
    return Done(ok=True)


def test_a_stage_planner_sees_whole_records_and_how_many_more_there_are(tmp_path: Path) -> None:
    stage1 = {
        "pte_plan": "1",
        "steps": [{"id": "ls", "tool": "list_drive", "args": {}}],
        "continue": {"files": {"$ref": "ls/files"}},
    }
    stage2 = {"pte_plan": "1", "steps": [{"id": "n", "tool": "noop", "args": {}}], "result": {"$ref": "n"}}
    llm = ReplayClient([json.dumps(stage1), json.dumps(stage2)])
    engine = Engine(
        Registry([list_drive, noop]), llm, config=EngineConfig(llm_answer=False, data_budget=5000)
    )
    with AuditLog(tmp_path / "run.jsonl") as audit:
        assert engine.run("list my drive", audit).ok
    prompt = llm.calls[1]["messages"][1]["content"]
    block = prompt.split(DATA_OPEN, 1)[1].split(">>>\n", 1)[1].split(f"\n{DATA_CLOSE}", 1)[0]
    *records, marker = json.loads(block)
    assert records == files(800)[: len(records)] and MORE.match(marker)


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    from pte.cli import main

    try:
        code = main(["--quiet", *argv])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    "flags",
    [["--data-budget", "5"], ["--data-budget", "1e6"], ["--data-budget", "nan"], ["--planner-data", "all"]],
)
def test_cli_refuses_a_bad_budget_or_mode(capsys: pytest.CaptureFixture[str], flags: list[str]) -> None:
    code, err = _cli(capsys, "run", "x", "--tools", "calculator", *flags)
    assert code == 2 and flags[0] in err


def test_cli_records_the_mode_and_budget(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    answers = tmp_path / "answers.json"
    plan = {"pte_plan": "1", "steps": [{"id": "c", "tool": "calculator", "args": {"expression": "1+1"}}]}
    answers.write_text(json.dumps([json.dumps({**plan, "result": {"$ref": "c/value"}})]), encoding="utf-8")
    log = tmp_path / "run.jsonl"
    argv = ["run", "one plus one", "--tools", "calculator", "--replay-responses", str(answers)]
    code, err = _cli(capsys, *argv, "--no-llm-answer", "--audit", str(log), "--data-budget", "900")
    assert code == 0, err
    started = read_records(log)[0]
    assert started["config"]["data_budget"] == 900 and started["config"]["planner_data"] == "handles"


def test_the_finalizer_sees_whole_records_within_the_budget(tmp_path: Path) -> None:
    from pte.testing import FunctionCall, FunctionClient

    seen: list[str] = []

    def model(messages: list[dict[str, str]], call: FunctionCall) -> str:
        if call.wants_json:
            return json.dumps(
                {
                    "pte_plan": "1",
                    "steps": [{"id": "ls", "tool": "list_drive", "args": {}}],
                    "result": {"$ref": "ls"},
                }
            )
        seen.append(messages[1]["content"])
        return "You have 800 files."

    engine = Engine(Registry([list_drive]), FunctionClient(model), config=EngineConfig(data_budget=3000))
    with AuditLog(tmp_path / "run.jsonl") as audit:
        result = engine.run("how many files do I have?", audit)
    assert result.ok and result.answer == "You have 800 files."
    (prompt,) = seen
    assert "more records not shown" in prompt and "characters clipped" not in prompt
    assert len(prompt) < 2 * 3000 + 1000  # the result block and the step block, each in budget
