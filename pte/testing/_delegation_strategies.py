"""A hypothesis strategy of delegating plans: a coordinator's plan, the sub-plan its specialist
answers, and the same plan with the sub-plan written inline.

`delegations(registry)` draws a `procedure_calls` case (a plan compiling against `registry`,
some literal arguments lifted into ``{"$param": ...}``) and recasts it: the procedure's body is
the sub-plan, its parameters the delegate step's inputs, and its tools the specialist's
catalogue. Running the coordinator's plan through a `ScriptedModel` (the sub-plan as the
specialist's answer) must compile to the same plan, labels and policy decision as the inline
plan (docs/specialists.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import assume
from hypothesis import strategies as st
from hypothesis.strategies import DrawFn, SearchStrategy

from pte._catalogue import Registry
from pte._plan import Specialist
from pte.testing._procedure_strategies import CALL_ID, procedure_calls

__all__ = ["DelegationCase", "delegations"]


@dataclass(frozen=True)
class DelegationCase:
    """A drawn specialist, a coordinator's plan delegating to it, its sub-plan, and the inline plan."""

    specialist: Specialist
    coordinator: dict[str, Any]
    sub_plan: dict[str, Any]
    inlined: dict[str, Any]


def delegations(
    registry: Registry, *, name: str = "spec", max_steps: int = 5
) -> SearchStrategy[DelegationCase]:
    """`DelegationCase`s over `registry`, the delegate step's id ``call`` (see the module docstring)."""

    @st.composite
    def cases(draw: DrawFn) -> DelegationCase:
        case = draw(procedure_calls(registry, max_steps=max_steps))
        body = case.procedure["plan"]
        tools = [s["tool"] for s in body["steps"] if "tool" in s]
        assume(tools)
        # Sometimes the specialist may use more than its sub-plan does.
        extra = draw(st.lists(st.sampled_from(registry.names), max_size=2))
        specialist = Specialist(
            name=name,
            description="A drawn specialist.",
            catalogue=tuple(dict.fromkeys([*tools, *extra])),
        )
        call = case.calling["steps"][0]
        coordinator = {
            "pte_plan": "1",
            "steps": [
                {"id": CALL_ID, "delegate": name, "task": "Do the drawn task.", "inputs": call["args"]}
            ],
            "result": {"$ref": CALL_ID},
        }
        return DelegationCase(specialist, coordinator, body, case.inlined)

    return cases()
