"""The run loop (pte._run._loop): one owner of a run, taking named transitions (#35).

White-box: a run is driven one `tick()` at a time, and each transition is shown to write
exactly its records (the order of record writes is the log format: replay compares them record
by record); `Engine.run`, `execute` and `plan` drive the same loop to the same records.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel

from pte import AuditLog, Engine, EngineConfig, Policy, ReasonCode, Registry, RunResult, tool

# private: the delegation generator and the loop's state, white-box
from pte._run._delegation import AskSpecialist, CompileText, compile_delegating

# private: the run loop itself, white-box (its phases and ticks)
from pte._run._loop import RunLoop, RunMode

# private: a run's state and what its decision functions read, built by hand
from pte._run._state import Planning, RunState
from pte.errors import PlanRejected
from pte.plan import Specialist
from pte.testing import ScriptedModel


class Count(BaseModel):
    """A running count."""

    value: int


@tool
def increment(value: int) -> Count:
    """value + 1."""
    return Count(value=value + 1)


@tool
def checkpoint(value: int, fail: bool = False) -> Count:
    """Pass `value` through; raises when `fail` is set (a back end that is down)."""
    if fail:
        raise RuntimeError("the back end is unavailable")
    return Count(value=value)


REGISTRY = Registry([increment, checkpoint])

#: As a model writes them: descriptive ids, an empty list where nothing waits.
FIRST: dict[str, Any] = {
    "pte_plan": "1",
    "steps": [
        {"id": "start_count", "tool": "increment", "args": {"value": 0}, "after": []},
        {
            "id": "save_count",
            "tool": "checkpoint",
            "args": {"value": {"$ref": "start_count/value"}, "fail": True},
        },
    ],
    "result": {"$ref": "save_count/value"},
}
REPLAN: dict[str, Any] = {
    "pte_plan": "1",
    "steps": [{"id": "save_again", "tool": "checkpoint", "args": {"value": {"$ref": "start_count/value"}}}],
    "result": {"$ref": "save_again/value"},
}
STAGED: dict[str, Any] = {
    "pte_plan": "1",
    "steps": [{"id": "start_count", "tool": "increment", "args": {"value": 1}}],
    "continue": {"count": {"$ref": "start_count/value"}},
}
SECOND_STAGE: dict[str, Any] = {
    "pte_plan": "1",
    "steps": [{"id": "save_count", "tool": "checkpoint", "args": {"value": {"$ref": "start_count/value"}}}],
    "result": {"$ref": "save_count/value"},
}


def _model(**script: list[Any]) -> ScriptedModel:
    """A model answering each role in turn, its plans written as JSON text."""
    answers = {
        role: [json.dumps(a) if isinstance(a, dict) else a for a in given] for role, given in script.items()
    }
    return ScriptedModel(
        planner=answers.get("planner", []),
        replanner=answers.get("replanner", []),
        stage=answers.get("stage", []),
        finalizer=answers.get("finalizer", []),
    )


def _engine(llm: ScriptedModel | None) -> Engine:
    return Engine(REGISTRY, llm, config=EngineConfig(max_replans=1))


def _ticks(loop: RunLoop, audit: AuditLog) -> list[tuple[str, list[str]]]:
    """(phase, record types its transition wrote) for every tick, the start first."""
    loop._start()
    out = [("start", [r["type"] for r in audit.records])]
    while loop.phase != "sealed":
        phase, before = loop.phase, len(audit.records)
        going_on = loop.tick()
        out.append((phase, [r["type"] for r in audit.records[before:]]))
        assert going_on == (str(loop.phase) != "sealed")
    return out


def _engine_records(mode: RunMode, llm: ScriptedModel | None, text: str) -> tuple[RunResult, list[str]]:
    audit = AuditLog()
    engine = _engine(llm)
    result = {"run": engine.run, "execute": engine.execute, "plan": engine.plan}[mode](text, audit)
    return result, [r["type"] for r in audit.records]


def test_a_replanned_run_takes_its_transitions_in_order_each_writing_its_records() -> None:
    audit = AuditLog()
    loop = _engine(_model(planner=[FIRST], replanner=[REPLAN], finalizer=["Saved 1."]))._loop(
        audit, "run", request="count to one and save it"
    )
    assert loop.phase == "plan"
    phases = _ticks(loop, audit)
    assert phases == [
        ("start", ["run_started"]),
        ("plan", ["llm_call", "plan_accepted"]),
        ("execute", ["step_started", "step_finished", "step_started", "step_finished"]),
        ("replan", ["replan", "llm_call", "plan_accepted"]),
        ("execute", ["step_started", "step_finished"]),
        ("finalize", ["llm_call", "run_finished"]),
    ]
    assert loop.state.result.ok and loop.state.result.result == 1 and loop.state.replans == 1
    # Engine.run is the same loop: the same records in the same order.
    result, types = _engine_records(
        "run", _model(planner=[FIRST], replanner=[REPLAN], finalizer=["Saved 1."]), "count to one and save it"
    )
    assert result.ok and types == [t for _, written in phases for t in written]


def test_a_staged_run_hands_on_through_the_stage_transition() -> None:
    audit = AuditLog()
    loop = _engine(_model(planner=[STAGED], stage=[SECOND_STAGE], finalizer=["Saved 2."]))._loop(
        audit, "run", request="count and save"
    )
    phases = _ticks(loop, audit)
    assert [phase for phase, _ in phases] == ["start", "plan", "execute", "stage", "execute", "finalize"]
    assert phases[3][1] == ["stage", "llm_call", "plan_accepted"]  # the hand-off is recorded first
    assert loop.state.result.result == 2 and loop.stage == 2


def test_execute_compiles_a_given_plan_without_a_model_and_plan_stops_before_execution() -> None:
    audit = AuditLog()
    loop = _engine(None)._loop(
        audit,
        "execute",
        plan_text=json.dumps(
            REPLAN | {"steps": [FIRST["steps"][0]], "result": {"$ref": "start_count/value"}}
        ),
    )
    assert loop.phase == "compile"
    assert _ticks(loop, audit) == [
        ("start", ["run_started"]),
        ("compile", ["plan_accepted"]),
        ("execute", ["step_started", "step_finished"]),
        ("finalize", ["run_finished"]),
    ]
    audit = AuditLog()
    loop = _engine(_model(planner=[FIRST]))._loop(audit, "plan", request="count")
    assert _ticks(loop, audit) == [
        ("start", ["run_started"]),
        ("plan", ["llm_call", "plan_accepted"]),
        ("seal", ["run_finished"]),
    ]
    assert loop.state.result.ok and loop.state.result.steps == []


def test_a_failed_closed_transition_seals_the_run_and_nothing_runs_after_it() -> None:
    """A second failure with no replan left: the replan transition raises, the run is sealed
    failed_closed(replans_exhausted) with run_finished last."""
    failing_again = REPLAN | {"steps": [REPLAN["steps"][0] | {"args": {"value": 1, "fail": True}}]}
    result, types = _engine_records(
        "run", _model(planner=[FIRST], replanner=[failing_again]), "count to one and save it"
    )
    assert result.status == "failed_closed" and result.reason is not None
    assert result.reason.value == "replans_exhausted"
    assert types[-1] == "run_finished" and types.count("run_finished") == 1
    assert types.count("replan") == 1


def test_a_coordinators_plan_is_compiled_by_a_generator_that_asks_and_never_calls_back() -> None:
    """Delegation is a function of its inputs (pte._run._delegation): it yields what it needs done
    (compile this, ask that specialist) and is sent the answers; it writes nothing itself."""
    savers = Specialist("savers", "Saves counts.", ("checkpoint",))
    config = EngineConfig(specialists=(savers,))
    # The planner catalogue is only shown in prompts; delegation checks against the deployment's.
    planning = Planning(config, REGISTRY, REGISTRY, Policy.from_registry(REGISTRY))
    audit = AuditLog()
    state = RunState(audit, RunResult(run_id=audit.run_id, status="failed_closed"))
    coordinator = {
        "pte_plan": "1",
        "steps": [
            {"id": "start_count", "tool": "increment", "args": {"value": 0}},
            {
                "id": "save",
                "delegate": "savers",
                "task": "Save the count",
                "inputs": {"count": {"$ref": "start_count/value"}},
                "after": [],
            },
        ],
        "result": {"$ref": "save"},
    }
    steps = compile_delegating(planning, state, "planner", json.dumps(coordinator))
    prefix = next(steps)  # the steps no delegation waits for, compiled for the inputs' labels
    assert isinstance(prefix, CompileText) and "start_count" in prefix.text and "delegate" not in prefix.text
    ask = steps.throw(PlanRejected(ReasonCode.SCHEMA_VIOLATION, "not now", "$"))  # its view: unknown
    assert isinstance(ask, AskSpecialist)
    assert "Save the count" in ask.messages[-1]["content"]
    sub_plan = {
        "pte_plan": "1",
        "steps": [{"id": "keep", "tool": "checkpoint", "args": {"value": {"$param": "count"}}}],
        "result": {"$ref": "keep/value"},
    }
    whole = steps.send(json.dumps(sub_plan))
    assert isinstance(whole, CompileText)
    assert [s["id"] for s in json.loads(whole.text)["steps"]] == ["start_count", "save__keep"]
    with pytest.raises(PlanRejected):  # a rejection blaming no sub-plan stands
        steps.throw(PlanRejected(ReasonCode.POLICY_VIOLATION, "refused", "$.result"))
    assert audit.records == [] and state.replans == 0  # nothing written, nothing counted
