"""The executor's one call gate (#35): what a person decided reaches the executor as an explicit
`Executor.run(gate=...)`, not through a context variable. The gate is asked before each call is
recorded and started, elements of a ``for_each`` one by one, and stopping there runs nothing more.
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

    def __init__(self, stop_at: str | None = None) -> None:
        self.asked: list[tuple[str, str, dict[str, Any]]] = []
        self.stop_at = stop_at
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
