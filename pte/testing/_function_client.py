"""`FunctionClient`: an `LLMClient` that answers from a Python function of the messages.

Like Pydantic AI's ``FunctionModel``: a test (or a deterministic deployment) writes the
planner as code that reads the prompt, and the engine runs through every check it runs for
a real model. Nothing is recorded up front, so the answer may depend on what the prompt
says (the catalogue, a failed step's error, the results to phrase).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pte._core import LLMError, current_role
from pte._run import LLMResponse

__all__ = ["FunctionCall", "FunctionClient"]


@dataclass(frozen=True)
class FunctionCall:
    """What the function is told about the call besides the messages."""

    #: 1 for the first call this client answers, then 2, 3, ...
    number: int
    #: The JSON Schema the answer must match (the plan schema for planner/replanner calls), or None.
    schema: Mapping[str, Any] | None
    schema_name: str
    #: What the engine calls for: ``planner``, ``replanner``, ``stage``, ``repair`` or
    #: ``finalizer`` (`pte._core._call_role`); None when the client is called outside an engine.
    role: str | None = None

    @property
    def wants_json(self) -> bool:
        """Whether a JSON value is asked for (planner and replanner) rather than text (finalizer)."""
        return self.schema is not None


#: The function: messages and call details in, the answer's text (or a full `LLMResponse`) out.
AnswerFunction = Callable[[list[dict[str, str]], FunctionCall], "str | LLMResponse"]


class FunctionClient:
    """`LLMClient` whose answers come from `function(messages, call)`.

    The function returns the answer's text (served with finish_reason "stop" and zero usage)
    or an `LLMResponse`, or raises `LLMError` to stand for a failed call. Any other exception
    propagates from `complete` unchanged; the engine, like for any model client that raises,
    ends the run ``failed_closed(llm_error)`` recording its type and text. `calls` keeps
    each call's messages and schema for assertions.
    """

    def __init__(self, function: AnswerFunction, *, model: str = "function") -> None:
        if not callable(function):
            raise TypeError("FunctionClient needs a callable: function(messages, call) -> str | LLMResponse")
        self.model = model
        self.function = function
        self.calls: list[dict[str, Any]] = []

    @property
    def describe(self) -> dict[str, Any]:
        """The configuration for the audit log."""
        return {"model": self.model, "function": getattr(self.function, "__qualname__", repr(self.function))}

    def complete(
        self,
        messages: Sequence[Mapping[str, str]],
        *,
        schema: Mapping[str, Any] | None = None,
        schema_name: str = "pte_plan",
    ) -> LLMResponse:
        """Ask the function; see `LLMClient.complete`."""
        started = time.perf_counter()
        chat = [dict(m) for m in messages]
        self.calls.append({"messages": chat, "schema": dict(schema) if schema is not None else None})
        call = FunctionCall(
            number=len(self.calls), schema=schema, schema_name=schema_name, role=current_role()
        )
        answer = self.function([dict(m) for m in chat], call)
        if isinstance(answer, LLMResponse):
            return answer
        if not isinstance(answer, str):
            raise TypeError(f"the function must return str or LLMResponse, not {type(answer).__name__}")
        if not answer.strip():
            raise LLMError(f"empty answer from function model {self.model!r}")
        return LLMResponse(
            text=answer,
            model=self.model,
            finish_reason="stop",
            usage={"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
            response_format="json_schema" if schema is not None else "text",
            duration_ms=(time.perf_counter() - started) * 1000.0,
        )
