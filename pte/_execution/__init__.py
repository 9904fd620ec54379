"""Running a compiled plan: the deterministic executor, tool invocation, processes and ownership, step
results. Never reaches an LLM client.

This module is the area's face: other areas import only what it re-exports.
"""

from __future__ import annotations

from pte._execution._control_run import (
    is_element,
    note_completed,
    stop_if_partial,
)
from pte._execution._executor import (
    DEFAULT_CONCURRENCY,
    CallGate,
    CallHook,
    Executor,
    GoesLive,
    LiveInvoker,
    ToolInvoker,
)
from pte._execution._invoke import (
    CallOutcome,
)
from pte._execution._step_results import (
    ExecutionResult,
    StepResult,
    resolve_result,
)

__all__ = [
    "DEFAULT_CONCURRENCY",
    "CallGate",
    "CallHook",
    "CallOutcome",
    "ExecutionResult",
    "Executor",
    "GoesLive",
    "LiveInvoker",
    "StepResult",
    "ToolInvoker",
    "is_element",
    "note_completed",
    "resolve_result",
    "stop_if_partial",
]
