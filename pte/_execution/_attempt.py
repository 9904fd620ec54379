"""One attempt of a tool call, and its result as ``(output, error, transient)``.

Shared by the places an attempt runs: a worker thread or the run's own thread
(`pte._execution._invoke`, `pte._execution._owner`) and a tool's worker process (`pte._execution._process`).
"""

from __future__ import annotations

from typing import Any

from pte._catalogue import ToolSpec
from pte._core import ToolError, TransientError

__all__ = ["Attempt", "attempt_sync", "classify"]


#: One attempt's result: (output, error, transient).
Attempt = tuple[Any, ToolError | None, bool]


def classify(spec: ToolSpec, exc: BaseException) -> Attempt:
    """An exception raised by a tool, as an attempt result."""
    if isinstance(exc, ToolError):
        return None, exc, isinstance(exc, TransientError)
    text = f"{type(exc).__name__}: {exc}"
    if not isinstance(exc, Exception):  # SystemExit, KeyboardInterrupt, ...: the run stops there
        return (
            None,
            ToolError("tool_error", f"{text} (a BaseException: the run is stopped)", fatal=True),
            False,
        )
    return None, ToolError("tool_error", text), isinstance(exc, spec.retry_on)


def attempt_sync(spec: ToolSpec, args: dict[str, Any]) -> Attempt:
    """One attempt of a plain tool, in the calling thread; never raises."""
    try:
        return spec.invoke(args), None, False
    except BaseException as exc:  # every way a tool can end is a result here
        return classify(spec, exc)
