"""One model call of a run: the client asked under its role, its span, and what its ``llm_call``
record says, as a decision the run loop (pte._run._loop) writes.

`call_model` never raises for a client's failure (a custom client may raise anything: a bug,
its SDK's own errors): the failure comes back as an `LLMError` beside the record's values, so
the loop records the failed call and seals the run ``failed_closed(llm_error)``, never leaving
a traceback and an unsealed log. KeyboardInterrupt and SystemExit are not Exceptions: they pass.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from pte._core import LLMError, call_role, well_formed
from pte._run._llm import LLMClient, LLMResponse, _usage
from pte._run._otel import RunTracer

__all__ = ["ModelCall", "call_model"]


@dataclass(frozen=True)
class ModelCall:
    """A model call as it went: the answer or the failure, and its ``llm_call`` record's values
    (`logged`: the keyword arguments of `pte._audit.records.llm_call`)."""

    answer: LLMResponse | None
    failure: LLMError | None
    logged: Mapping[str, Any]


def checked_response(response: Any) -> LLMResponse:
    """A client's answer as the log records it (and replay re-reads it): token counts complete."""
    if not isinstance(response, LLMResponse):
        raise LLMError(f"the model client returned {type(response).__name__}, not an LLMResponse")
    usage = _usage(response.usage)
    # The answer is recorded and compiled as one text: a lone surrogate in it (JSON's "\\ud800"
    # decoded) would make its llm_call record unwritable, so both see it as `well_formed` makes it.
    text = well_formed(response.text) if isinstance(response.text, str) else response.text
    if usage == response.usage and text is response.text:
        return response
    return replace(response, usage=usage, text=text)


def describe(exc: Exception) -> str:
    """A raised exception as a one-line message: its type and text."""
    text = well_formed(" ".join(str(exc).split()))
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def call_model(
    llm: LLMClient, tracer: RunTracer, role: str, messages: list[dict[str, str]], schema: Any
) -> ModelCall:
    """Ask `llm` as `role` (a span around it); the answer or the failure, and the record's values."""
    started = time.perf_counter()
    span = tracer.llm_start(role, llm.model)
    try:
        with call_role(role):
            response = checked_response(llm.complete(messages, schema=schema))
    except Exception as raised:  # any client failure ends the run, recorded and sealed
        failure = raised if isinstance(raised, LLMError) else LLMError(describe(raised))
        trace = tracer.llm_end(span, attempts=failure.attempts, error=failure.message)
        logged: dict[str, Any] = {
            "role": role,
            "model": llm.model,
            "messages": messages,
            "response_format": None,
            "response": None,
            "finish_reason": None,
            "usage": {},
            "error": failure.message,
            "attempts": failure.attempts,
            "duration_ms": (time.perf_counter() - started) * 1000,
            "trace": trace,
        }
        return ModelCall(None, failure, logged)
    trace = tracer.llm_end(
        span,
        model=response.model,
        usage=response.usage,
        finish_reason=response.finish_reason,
        attempts=response.attempts,
    )
    logged = {
        "role": role,
        "model": response.model,
        "messages": messages,
        "response_format": response.response_format,
        "response": response.text,
        "finish_reason": response.finish_reason,
        "usage": response.usage,
        "error": None,
        "attempts": response.attempts,
        "duration_ms": response.duration_ms,
        "trace": trace,
    }
    return ModelCall(response, None, logged)
