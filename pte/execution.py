"""Running a compiled plan: the deterministic executor and its results. Never reaches an LLM client."""

from __future__ import annotations

from pte._execution import (
    ExecutionResult,
    Executor,
    StepResult,
)

__all__ = [
    "ExecutionResult",
    "Executor",
    "StepResult",
]
