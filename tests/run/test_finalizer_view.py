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
