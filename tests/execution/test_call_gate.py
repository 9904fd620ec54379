"""The executor's one call gate (#35): what a person decided reaches the executor as an explicit
`Executor.run(gate=...)`, not through a context variable or an invoker's hook. The gate is asked
at two points of each call: before it is recorded and started (`check_call`, endorsements),
elements of a ``for_each`` one by one, and stopping there runs nothing more; and after its intent
is recorded, before the tool is called for real (`before_effect`, approvals), never for an
outcome an invoker serves from a log.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pytest
from pydantic import BaseModel

from pte import AuditLog, Executor, ReasonCode, Registry, compile_plan, tool

# private: the gate's protocol, white-box
from pte._execution import CallGate
from pte.errors import FailedClosed
from tests.audit_runs import begun

CALLED: list[str] = []


class Members(BaseModel):
    """A channel's members."""

    names: list[str]


class Greeting(BaseModel):
    """A greeting sent."""

    text: str


@tool
def channel_members() -> Members:
    """The members of the team channel."""
    CALLED.append("channel_members")
    return Members(names=["ada", "bob", "cy"])


@tool(effect="write", idempotent=True)
def greet(name: str) -> Greeting:
    """Greet one member."""
    CALLED.append(f"greet {name}")
    return Greeting(text=f"hello {name}")


REGISTRY = Registry([channel_members, greet])
PLAN = {
    "pte_plan": "1",
    "steps": [
        {"id": "team", "tool": "channel_members", "args": {}},
        {
            "id": "say_hello",
            "tool": "greet",
            "for_each": {"$ref": "team/names"},
            "max_items": 10,
            "args": {"name": {"$ref": "team/names/*"}},
        },
    ],
    "result": {"$ref": "say_hello"},
}


class Asked:
    """A gate that notes every call it is asked about and stops at `stop_at`."""

    def __init__(
        self, stop_at: str | None = None, audit: AuditLog | None = None, stop_effect: str | None = None
    ) -> None:
        self.asked: list[tuple[str, str, dict[str, Any]]] = []
        self.stop_at = stop_at
        self.audit, self.stop_effect = audit, stop_effect
        #: (step id, its intent already recorded, tools called so far) at each `before_effect`.
        self.effects: list[tuple[str, bool, list[str]]] = []
        #: The step ids of each run the executor asked about (a for_each's elements: a run each).
        self.runs: list[list[str]] = []

    def calls_to_check(self, step_ids: Iterable[str]) -> frozenset[str]:
        self.runs.append(sorted(step_ids))
        return frozenset(self.runs[-1])

    def check_call(
        self,
        step_id: str,
        tool: str,
        args: Mapping[str, Any],
        outputs: Mapping[str, Any] | None = None,
        hidden: Sequence[str | None] = (),
    ) -> None:
        self.asked.append((step_id, tool, dict(args)))
        if step_id == self.stop_at:
            raise FailedClosed(ReasonCode.ENDORSEMENT_REJECTED, f"a person refused {step_id}")

    def before_effect(self, spec: Any, args: dict[str, Any], step: Any) -> None:
        records = self.audit.records if self.audit is not None else []
        started = any(r["type"] == "step_started" and r["step_id"] == step.id for r in records)
        self.effects.append((step.id, started, list(CALLED)))
        if step.id == self.stop_effect:
            raise FailedClosed(ReasonCode.APPROVAL_CONSUMED, f"the approval of {step.id} is used")


@pytest.fixture(autouse=True)
def _calls() -> None:
    CALLED.clear()


def test_the_gate_is_asked_before_every_call_and_each_element() -> None:
    gate = Asked()
    checked: CallGate = gate  # the protocol the executor takes
    audit = begun(AuditLog(keep=True))
    result = Executor(REGISTRY).run(compile_plan(json.dumps(PLAN), REGISTRY), audit, gate=checked)
    assert result.failure is None
    assert [(sid, tool) for sid, tool, _ in gate.asked] == [
        ("team", "channel_members"),
        ("say_hello[0]", "greet"),
        ("say_hello[1]", "greet"),
        ("say_hello[2]", "greet"),
    ]
    assert gate.asked[2][2] == {"name": "bob"}  # the element's own resolved arguments


def test_a_gate_that_stops_a_call_stops_it_before_its_record_and_nothing_runs_after_it() -> None:
    gate = Asked(stop_at="say_hello[1]")
    audit = begun(AuditLog(keep=True))
    with pytest.raises(FailedClosed) as stopped:
        Executor(REGISTRY).run(compile_plan(json.dumps(PLAN), REGISTRY), audit, gate=gate)
    assert stopped.value.reason is ReasonCode.ENDORSEMENT_REJECTED
    assert CALLED == ["channel_members", "greet ada"]
    started = [r["step_id"] for r in audit.records if r["type"] == "step_started"]
    assert "say_hello[1]" not in started and "say_hello[2]" not in started


def test_without_a_gate_nothing_is_asked_and_every_call_runs() -> None:
    Executor(REGISTRY).run(compile_plan(json.dumps(PLAN), REGISTRY), begun(AuditLog()))
    assert CALLED == ["channel_members", "greet ada", "greet bob", "greet cy"]


def test_before_its_side_effect_each_call_asks_the_gate_after_its_intent_is_recorded() -> None:
    audit = begun(AuditLog(keep=True))
    gate = Asked(audit=audit)
    Executor(REGISTRY).run(compile_plan(json.dumps(PLAN), REGISTRY), audit, gate=gate)
    assert gate.effects == [
        ("team", True, []),
        ("say_hello[0]", True, ["channel_members"]),
        ("say_hello[1]", True, ["channel_members", "greet ada"]),
        ("say_hello[2]", True, ["channel_members", "greet ada", "greet bob"]),
    ]


def test_a_gate_that_stops_before_the_side_effect_leaves_the_intent_and_calls_nothing() -> None:
    audit = begun(AuditLog(keep=True))
    gate = Asked(audit=audit, stop_effect="say_hello[1]")
    with pytest.raises(FailedClosed) as stopped:
        Executor(REGISTRY).run(compile_plan(json.dumps(PLAN), REGISTRY), audit, gate=gate)
    assert stopped.value.reason is ReasonCode.APPROVAL_CONSUMED
    assert CALLED == ["channel_members", "greet ada"]
    started = [r["step_id"] for r in audit.records if r["type"] == "step_started"]
    assert "say_hello[1]" in started and "say_hello[2]" not in started


class Served:
    """An invoker that serves `greet` from a log and calls `channel_members` for real (`GoesLive`)."""

    def goes_live(self, spec: Any, step: Any) -> bool:
        return bool(spec.name == "channel_members")

    def __call__(self, spec: Any, args: dict[str, Any], step: Any) -> Any:
        if spec.name == "channel_members":
            return channel_members().model_dump()
        return {"text": f"hello {args['name']}"}


def test_an_invoker_says_which_call_goes_live_and_only_those_ask_the_gate() -> None:
    served = Served()
    audit = begun(AuditLog(keep=True))
    gate = Asked(audit=audit)
    plan = compile_plan(json.dumps(PLAN), REGISTRY)
    result = Executor(REGISTRY, invoker=served).run(plan, audit, gate=gate)
    assert result.failure is None
    assert [sid for sid, _, _ in gate.effects] == ["team"]
    assert CALLED == ["channel_members"]


def test_an_invoker_that_does_not_say_is_live_on_every_call() -> None:
    def direct(spec: Any, args: dict[str, Any], step: Any) -> Any:
        return spec.func(**args).model_dump()

    audit = begun(AuditLog(keep=True))
    gate = Asked(audit=audit)
    Executor(REGISTRY, invoker=direct).run(compile_plan(json.dumps(PLAN), REGISTRY), audit, gate=gate)
    assert [sid for sid, _, _ in gate.effects] == ["team", "say_hello[0]", "say_hello[1]", "say_hello[2]"]
