"""The LLM-call budget: a run that succeeds without failures makes exactly 2 LLM calls
(planner + finalizer) whatever the number of steps, and each replan adds exactly one.

The plans are generated: a chain of `step_count` steps, each taking the previous step's
output by reference. One set of runs goes through the real HTTP path (`OpenAIClient`
against `FakeOpenAIServer`, counting the requests the server received); the others use
`ReplayClient` (counting its calls).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel

from pte import AuditLog, Engine, EngineConfig, OpenAIClient, Registry, RunResult, tool
from pte.engine import LLMClient, ReplayClient
from pte.testing import FakeOpenAIServer

STEP_COUNTS = [1, 5, 20, 50]

#: Tool calls made, in order (tool name, its `value` argument).
CALLS: list[tuple[str, int]] = []


class Count(BaseModel):
    """A running count."""

    value: int


@tool
def increment(value: int) -> Count:
    """value + 1."""
    CALLS.append(("increment", value))
    return Count(value=value + 1)


@tool
def checkpoint(value: int, fail: bool = False) -> Count:
    """Pass `value` through; raises when `fail` is set (a stand-in for a flaky back end)."""
    CALLS.append(("checkpoint", value))
    if fail:
        raise RuntimeError("the back end is unavailable")
    return Count(value=value)


REGISTRY = Registry([increment, checkpoint])


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "PTE_MODEL", "OPENAI_MODEL"):
        monkeypatch.delenv(name, raising=False)
    CALLS.clear()
    yield
    CALLS.clear()


def chain_plan(step_count: int) -> str:
    """A plan of `step_count` increments, each taking the previous one's output."""
    steps: list[dict[str, Any]] = [{"id": "s0", "tool": "increment", "args": {"value": 0}}]
    for i in range(1, step_count):
        steps.append({"id": f"s{i}", "tool": "increment", "args": {"value": {"$ref": f"s{i - 1}/value"}}})
    return json.dumps({"pte_plan": "1", "steps": steps, "result": {"$ref": f"s{step_count - 1}/value"}})


def failing_chain_plan(step_count: int) -> str:
    """The chain, then a checkpoint that fails."""
    document = json.loads(chain_plan(step_count))
    document["steps"].append(
        {
            "id": "cp",
            "tool": "checkpoint",
            "args": {"value": {"$ref": f"s{step_count - 1}/value"}, "fail": True},
        }
    )
    document["result"] = {"$ref": "cp/value"}
    return json.dumps(document)


def replan(attempt: int, step_count: int, *, fail: bool) -> str:
    """A replanned remainder: one new checkpoint reading the completed chain's last output."""
    step_id = f"cp{attempt}"
    step = {
        "id": step_id,
        "tool": "checkpoint",
        "args": {"value": {"$ref": f"s{step_count - 1}/value"}, "fail": fail},
    }
    return json.dumps({"pte_plan": "1", "steps": [step], "result": {"$ref": f"{step_id}/value"}})


def script(step_count: int, replans: int) -> list[str]:
    """The LLM answers of a run that needs `replans` replans and then succeeds."""
    if replans == 0:
        return [chain_plan(step_count), "done"]
    answers = [failing_chain_plan(step_count)]
    answers += [replan(k, step_count, fail=k < replans) for k in range(1, replans + 1)]
    return [*answers, "done"]


def run(llm: LLMClient) -> tuple[RunResult, AuditLog]:
    audit = AuditLog()  # in memory
    result = Engine(REGISTRY, llm, config=EngineConfig(max_replans=2)).run("count", audit)
    return result, audit


def check(result: RunResult, audit: AuditLog, step_count: int, replans: int) -> None:
    assert result.ok, result.message
    assert result.result == step_count
    # Every step ran exactly once, completed steps were never re-run by a replan.
    increments = [v for name, v in CALLS if name == "increment"]
    assert increments == list(range(step_count))
    expected_checkpoints = replans + 1 if replans else 0
    assert [v for name, v in CALLS if name == "checkpoint"] == [step_count] * expected_checkpoints
    llm_records = [r for r in audit.records if r["type"] == "llm_call"]
    roles = ["planner", *(["replanner"] * replans), "finalizer"]
    assert [r["role"] for r in llm_records] == roles
    assert result.llm_calls == 2 + replans


# -- no failures: 2 calls whatever the plan size ---------------------------------------------------


@pytest.mark.parametrize("step_count", STEP_COUNTS)
def test_two_llm_calls_over_http_whatever_the_step_count(step_count: int) -> None:
    with (
        FakeOpenAIServer(script(step_count, 0)) as server,
        OpenAIClient("fake-model", base_url=server.base_url, timeout_s=5.0, max_retries=0) as llm,
    ):
        result, audit = run(llm)
        assert len(server.requests) == 2
        assert server.remaining == 0
    check(result, audit, step_count, 0)
    assert len(result.steps) == step_count


@pytest.mark.parametrize("step_count", STEP_COUNTS)
def test_two_llm_calls_with_replay_whatever_the_step_count(step_count: int) -> None:
    llm = ReplayClient(script(step_count, 0))
    result, audit = run(llm)

    assert len(llm.calls) == 2
    assert llm.remaining == 0
    check(result, audit, step_count, 0)
    assert len(result.steps) == step_count


# -- each replan adds exactly one call ---------------------------------------------------------------


@pytest.mark.parametrize("replans", [1, 2])
@pytest.mark.parametrize("step_count", STEP_COUNTS)
def test_each_replan_adds_one_llm_call(step_count: int, replans: int) -> None:
    llm = ReplayClient(script(step_count, replans))
    result, audit = run(llm)

    assert len(llm.calls) == 2 + replans
    check(result, audit, step_count, replans)
    # The chain, the failed checkpoint(s) and the final one: no step twice.
    assert len(result.steps) == step_count + 1 + replans
    assert len({s.step_id for s in result.steps}) == len(result.steps)


@pytest.mark.parametrize("replans", [1, 2])
def test_each_replan_adds_one_llm_call_over_http(replans: int) -> None:
    step_count = 20
    with (
        FakeOpenAIServer(script(step_count, replans)) as server,
        OpenAIClient("fake-model", base_url=server.base_url, timeout_s=5.0, max_retries=0) as llm,
    ):
        result, audit = run(llm)
        assert len(server.requests) == 2 + replans
    check(result, audit, step_count, replans)
