"""The finalizer is shown the result, the steps it depends on and the writes, nothing else (#37)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pte import AuditLog, Engine, EngineConfig, load_registry
from pte.runs import replay_file
from pte.testing import ScriptedModel


def test_the_finalizer_sees_the_steps_the_result_depends_on_and_not_the_others(tmp_path: Path) -> None:
    plan = {
        "pte_plan": "1",
        "steps": [
            {"id": "share_of_quarter", "tool": "percentage", "args": {"part": 1, "whole": 4}},
            {"id": "unrelated_share", "tool": "percentage", "args": {"part": 3, "whole": 7}},
            {
                "id": "share_in_words",
                "tool": "format_text",
                "args": {"template": "{p} percent", "values": {"p": {"$ref": "share_of_quarter/value"}}},
            },
        ],
        "result": {"$ref": "share_in_words/text"},
    }
    seen: list[str] = []

    def answer(messages: list[dict[str, Any]], call: Any) -> str:
        seen.append("\n".join(m["content"] for m in messages))
        return "A quarter is 25 percent."

    model = ScriptedModel(planner=[json.dumps(plan)], finalizer=[answer])
    log = tmp_path / "run.jsonl"
    with AuditLog(log) as audit:
        result = Engine(load_registry(["calculator", "shaping"]), model, config=EngineConfig()).run(
            "What share of 4 is 1, in words?", audit
        )
    assert result.status == "succeeded", result.message
    (shown,) = seen
    assert "step=share_in_words" in shown and "step=share_of_quarter" in shown  # the result's chain
    assert "unrelated_share" not in shown and "42.86" not in shown  # a step it does not depend on
    assert replay_file(log).ok  # replay writes the same finalizer prompt


def test_the_finalizer_sees_the_steps_within_one_data_budget(tmp_path: Path) -> None:
    """The steps' blocks share the data budget (the result has its own): where they do not all
    fit, those nearest the result are shown and the earlier ones named, so a long chain cannot
    grow the finalizer's prompt without bound (#37)."""
    text = "\n".join(f"line {i} of the note, with a few words in it" for i in range(60))
    parts = [f"words_in_part_{i}" for i in range(5)]
    plan = {
        "pte_plan": "1",
        "steps": [
            *(
                {"id": part, "tool": "split_text", "args": {"text": text, "separator": None}, "after": []}
                for part in parts
            ),
            {
                "id": "all_the_lines",
                "tool": "concat",
                "args": {"lists": [{"$ref": f"{p}/values"} for p in parts]},
            },
            {"id": "how_many_lines", "tool": "count", "args": {"records": {"$ref": "all_the_lines/values"}}},
        ],
        "result": {"$ref": "how_many_lines/count"},
    }
    seen: list[list[dict[str, Any]]] = []

    def answer(messages: list[dict[str, Any]], call: Any) -> str:
        seen.append(messages)
        return "The note has 300 lines."

    model = ScriptedModel(planner=[json.dumps(plan)], finalizer=[answer])
    log = tmp_path / "run.jsonl"
    config = EngineConfig(data_budget=2000)
    registry = load_registry(["text", "containers", "shaping"])
    with AuditLog(log) as audit:
        result = Engine(registry, model, config=config).run("How many lines, all parts together?", audit)
    assert result.status == "succeeded" and result.result == 300, result.message
    (messages,) = seen
    user = messages[-1]["content"]
    for part in parts:  # the earlier steps: named, their outputs left out
        assert f"- step={part} tool=split_text: output not shown (the data budget is spent)" in user
        assert f"step={part} tool=split_text output" not in user
    assert "step=how_many_lines tool=count output" in user and "step=all_the_lines tool=concat" in user
    blocks = user[user.index("The outputs of the steps") :]
    assert len(blocks) < 2000 + 1000, len(blocks)  # the budget, and the named steps and headers
    assert replay_file(log).ok  # replay writes the same finalizer prompt
