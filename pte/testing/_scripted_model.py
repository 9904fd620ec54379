"""`ScriptedModel`: an `LLMClient` that answers each role's calls from its own script.

A test of a whole run (a plan, a repair, a later stage, the answer) writes what the model
says in each role, in order, the way a model writes it; the engine runs every check it runs
for a real model, and the audit log replays like any other::

    model = ScriptedModel(
        planner=[{"pte_plan": "1", "steps": [...], "result": ...}],
        repair=[corrected_plan],
        finalizer=["You have 2 unread e-mails."],
    )
    result = Engine(registry, model).run("How many unread e-mails do I have?", audit)
    assert model.unused() == {}

A deployment with specialists (pte._plan._specialists) is scripted by specialist: the engine asks a
specialist for its sub-plan with role ``specialist``, and the model tells which one from its
prompt::

    model = ScriptedModel(planner=[coordinator_plan],
                          specialists={"payments": [sub_plan], "collections": [other_sub_plan]})

An answer is a plan document (a dict or list, sent as JSON), text, an `LLMResponse`, or a
function ``(messages, call) -> any of those`` for an answer that depends on the prompt.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pte._run import LLMResponse, specialist_of
from pte.testing._function_client import FunctionCall, FunctionClient

__all__ = ["ROLES", "ScriptExhausted", "ScriptedModel"]

#: The roles an engine calls a model for (`pte._core._call_role`).
ROLES = ("planner", "replanner", "stage", "repair", "finalizer", "specialist")

Answer = (
    str | Mapping[str, Any] | list[Any] | LLMResponse | Callable[[list[dict[str, str]], FunctionCall], Any]
)


class ScriptExhausted(AssertionError):
    """The engine asked for an answer the script does not have (a test's expectation failed)."""


class ScriptedModel(FunctionClient):
    """`LLMClient` answering planner, replanner, stage, repair, finalizer and specialist calls.

    Each role's answers are served in order. A call for a role with no answer left raises
    `ScriptExhausted` (an AssertionError: the run went another way than the test expected).
    Outside an engine (no role known) a call asking for JSON is a planner call, else a
    finalizer call. `roles` lists the role of every call made, `unused()` what is left.
    """

    def __init__(
        self,
        *,
        planner: Iterable[Answer] = (),
        replanner: Iterable[Answer] = (),
        stage: Iterable[Answer] = (),
        repair: Iterable[Answer] = (),
        finalizer: Iterable[Answer] = (),
        specialists: Mapping[str, Iterable[Answer]] | None = None,
        model: str = "scripted",
    ) -> None:
        super().__init__(self._answer, model=model)
        self.script: dict[str, deque[Answer]] = {
            "planner": deque(planner),
            "replanner": deque(replanner),
            "stage": deque(stage),
            "repair": deque(repair),
            "finalizer": deque(finalizer),
        }
        # A specialist's sub-plans (and its repairs) by its name: ``specialist:NAME``.
        for name, answers in (specialists or {}).items():
            self.script[f"specialist:{name}"] = deque(answers)
        self._given = {role: len(answers) for role, answers in self.script.items()}
        self.roles: list[str] = []

    @property
    def describe(self) -> dict[str, Any]:
        """The configuration for the audit log: the model name and how many answers each role has."""
        return {"model": self.model, "scripted": {r: n for r, n in self._given.items() if n}}

    def unused(self) -> dict[str, int]:
        """Answers not asked for, by role (empty when the run used the whole script)."""
        return {role: len(answers) for role, answers in self.script.items() if answers}

    def _answer(self, messages: list[dict[str, str]], call: FunctionCall) -> str | LLMResponse:
        role = call.role or ("planner" if call.wants_json else "finalizer")
        if role == "specialist":  # which specialist: its prompt says (pte._run._prompts.SPECIALIST_INTRO)
            role = f"specialist:{specialist_of(messages)}"
        queue = self.script.get(role)
        if not queue:
            raise ScriptExhausted(
                f"ScriptedModel: the engine asked the {role} (call {call.number}, after {self.roles}), "
                f"but the script has no {role} answer left ({self._given.get(role, 0)} given)"
            )
        self.roles.append(role)
        answer = queue.popleft()
        if callable(answer) and not isinstance(answer, LLMResponse):
            answer = answer(messages, call)
        if isinstance(answer, (str, LLMResponse)):
            return answer
        if isinstance(answer, (Mapping, list)):
            return json.dumps(answer, ensure_ascii=False)
        raise TypeError(
            f"a scripted answer is text, a JSON document or an LLMResponse, not {type(answer).__name__}"
        )
