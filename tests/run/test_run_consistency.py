"""What an operator sees is decided once, whichever command ran the plan (#28).

- A non-idempotent write that timed out ends ``needs_review`` under ``run`` and ``execute``
  alike (its effect is unknown); ``execute`` said ``step_failed``.
- The progress counter counts the steps of the plan being executed: after a replan it read
  ``progress=2/1`` (the earlier plan's steps were counted against the new plan's total).
"""

from __future__ import annotations

import io
import json
import time
from pathlib import Path
from typing import Any

import pytest
import structlog

from pte import AuditLog, Engine, EngineConfig, ReasonCode, Registry, tool, verify

# private: logging kept quiet in the test
from pte._core import quiet_logging
from pte.engine import configure_logging
from pte.runs import replay_file
from pte.testing import FunctionClient

CALLS: list[str] = []


@tool(effect="write", idempotent=False, timeout_s=0.2)
def slow_transfer(amount: int) -> int:
    """Moves money; slow today."""
    CALLS.append("slow_transfer")
    time.sleep(1.0)
    return amount


@tool(effect="read")
def lookup(key: str) -> str:
    """Reads a value."""
    return key.upper()


@tool(effect="read")
def broken(key: str) -> str:
    """Always fails."""
    raise RuntimeError("backend offline")


@tool(effect="read")
def keys() -> list[str]:
    """Three keys."""
    return ["x", "y", "z"]


REGISTRY = Registry([slow_transfer, lookup, broken, keys])
TRANSFER = json.dumps(
    {"pte_plan": "1", "steps": [{"id": "t", "tool": "slow_transfer", "args": {"amount": 5}}]}
)


@pytest.mark.parametrize("command", ["run", "execute"])
def test_a_timed_out_non_idempotent_write_needs_review_under_run_and_execute(
    tmp_path: Path, command: str
) -> None:
    CALLS.clear()
    path = tmp_path / f"{command}.jsonl"
    engine = Engine(REGISTRY, FunctionClient(lambda messages, call: TRANSFER if call.wants_json else "done"))
    with AuditLog(path) as audit:
        result = engine.run("transfer 5", audit) if command == "run" else engine.execute(TRANSFER, audit)
    assert (result.status, result.reason) == ("failed_closed", ReasonCode.NEEDS_REVIEW), result.message
    assert "may or may not have taken effect" in (result.message or "")
    assert CALLS == ["slow_transfer"]
    assert verify(path).ok
    assert replay_file(path, registry=REGISTRY).ok


def test_a_plain_failure_under_execute_is_still_step_failed(tmp_path: Path) -> None:
    plan = json.dumps({"pte_plan": "1", "steps": [{"id": "b", "tool": "broken", "args": {"key": "k"}}]})
    with AuditLog(tmp_path / "a.jsonl") as audit:
        result = Engine(REGISTRY).execute(plan, audit)
    assert result.reason is ReasonCode.STEP_FAILED


class _Terminal(io.StringIO):
    """Where the CLI's log lines go when stderr is a terminal (progress is shown only then)."""

    def isatty(self) -> bool:
        return True


@pytest.fixture
def terminal() -> Any:
    stream = _Terminal()
    configure_logging(json_lines=True, file=stream)
    try:
        yield stream
    finally:
        quiet_logging()
        structlog.reset_defaults()


def test_progress_counts_the_current_plan_after_a_replan(tmp_path: Path, terminal: _Terminal) -> None:
    first = {
        "pte_plan": "1",
        "steps": [
            {"id": "a", "tool": "lookup", "args": {"key": "a"}},
            {"id": "b", "tool": "broken", "args": {"key": "b"}, "after": ["a"]},
        ],
    }
    second = {"pte_plan": "1", "steps": [{"id": "c", "tool": "lookup", "args": {"key": "c"}}]}

    def answer(messages: list[dict[str, str]], call: Any) -> str:
        return json.dumps(first if call.number == 1 else second)

    engine = Engine(REGISTRY, FunctionClient(answer), config=EngineConfig(llm_answer=False))
    with AuditLog(tmp_path / "a.jsonl") as audit:
        result = engine.run("look things up", audit)
    assert result.ok, result.message
    events = [json.loads(line) for line in terminal.getvalue().splitlines()]
    progress = [(e["step"], e["progress"]) for e in events if e.get("event") == "step_finished"]
    assert progress == [("a", "1/2"), ("b", "2/2"), ("c", "1/1")]


def test_progress_counts_a_for_each_as_one_step_of_its_plan(tmp_path: Path, terminal: _Terminal) -> None:
    plan = {
        "pte_plan": "1",
        "steps": [
            {"id": "k", "tool": "keys", "args": {}},
            {
                "id": "each",
                "tool": "lookup",
                "for_each": {"$ref": "k"},
                "max_items": 5,
                "args": {"key": {"$ref": "k/*"}},
            },
        ],
    }
    with AuditLog(tmp_path / "a.jsonl") as audit:
        result = Engine(REGISTRY, config=EngineConfig(llm_answer=False)).execute(json.dumps(plan), audit)
    assert result.ok, result.message
    events = [json.loads(line) for line in terminal.getvalue().splitlines()]
    progress = [e["progress"] for e in events if e.get("event") == "step_finished"]
    assert progress and all(int(done) <= int(total) == 2 for done, total in (p.split("/") for p in progress))
    assert progress[-1] == "2/2"
