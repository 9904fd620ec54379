"""A hypothesis strategy of procedures, plans that call them, and the same plans written inline.

`procedure_calls(registry)` draws a plan that compiles against `registry` (`valid_plans`),
lifts some of its literal arguments into parameters (``{"$param": "p0"}``) to make it a
procedure's body, and returns the procedure, a plan calling it once with those literals, and
the body written inline by hand (ids ``call__STEP``, references renamed). Compiling and
running the two plans must give the same plan, labels, policy decision and effects
(docs/procedures.md).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from hypothesis import assume
from hypothesis import strategies as st
from hypothesis.strategies import DrawFn, SearchStrategy

from pte._catalogue import Registry
from pte.testing._strategies import valid_plans

__all__ = ["ProcedureCase", "procedure_calls"]

#: The call's step id in the drawn calling plan (its body's steps run as ``call__STEP``).
CALL_ID = "call"


@dataclass(frozen=True)
class ProcedureCase:
    """A drawn procedure document, a plan calling it, and that plan with the body inline."""

    procedure: dict[str, Any]
    calling: dict[str, Any]
    inlined: dict[str, Any]


def _has_ref(value: Any) -> bool:
    if isinstance(value, dict):
        return "$ref" in value or any(_has_ref(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_ref(v) for v in value)
    return False


def _renamed(value: Any, ids: set[str]) -> Any:
    if isinstance(value, dict):
        ref = value.get("$ref")
        if len(value) == 1 and isinstance(ref, str):
            step, sep, rest = ref.partition("/")
            return {"$ref": f"{CALL_ID}__{step}{sep}{rest}"} if step in ids else value
        return {k: _renamed(v, ids) for k, v in value.items()}
    if isinstance(value, list):
        return [_renamed(v, ids) for v in value]
    return value


def procedure_calls(
    registry: Registry, *, name: str = "proc", max_steps: int = 5
) -> SearchStrategy[ProcedureCase]:
    """`ProcedureCase`s over `registry` (a procedure named `name`; see the module docstring)."""

    @st.composite
    def cases(draw: DrawFn) -> ProcedureCase:
        body = draw(valid_plans(registry, max_steps=max_steps))
        assume("continue" not in body and all("__" not in s["id"] for s in body["steps"]))
        ids = {s["id"] for s in body["steps"]}
        steps = copy.deepcopy(body["steps"])
        call_args: dict[str, Any] = {}
        for step in steps:
            for key, value in list((step.get("args") or {}).items()):
                if not _has_ref(value) and draw(st.booleans()):
                    param = f"p{len(call_args)}"
                    call_args[param] = value
                    step["args"][key] = {"$param": param}
        result = body.get("result", {"$ref": body["steps"][-1]["id"]})
        procedure = {
            "pte_procedure": "1",
            "name": name,
            "description": "A drawn procedure.",
            "parameters": {
                "type": "object",
                "properties": {p: {} for p in call_args},
                "required": list(call_args),
            },
            "plan": {"pte_plan": "1", "steps": steps, "result": result},
        }
        calling = {
            "pte_plan": "1",
            "steps": [{"id": CALL_ID, "tool": name, "args": call_args}],
            "result": {"$ref": CALL_ID},
        }
        inline_steps = []
        for step in body["steps"]:
            new = {k: _renamed(v, ids) for k, v in step.items() if k not in ("id", "after")}
            new["id"] = f"{CALL_ID}__{step['id']}"
            if step.get("after"):
                new["after"] = [f"{CALL_ID}__{a}" if a in ids else a for a in step["after"]]
            inline_steps.append(new)
        inlined = {"pte_plan": "1", "steps": inline_steps, "result": _renamed(result, ids)}
        return ProcedureCase(procedure, calling, inlined)

    return cases()
