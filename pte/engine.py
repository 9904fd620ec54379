"""The engine around the executor, and the model clients: the engine asks a model for a plan,
compiles and runs it, and writes the answer.

Importing this module loads the LLM client code (`pte.execution` does not).
"""

from __future__ import annotations

from pte._core import (
    configure_logging,
)
from pte._run import (
    Engine,
    EngineConfig,
    LLMClient,
    LLMResponse,
    OpenAIClient,
    ReplayClient,
    RunResult,
    render_result,
)

__all__ = [
    "Engine",
    "EngineConfig",
    "LLMClient",
    "LLMResponse",
    "OpenAIClient",
    "ReplayClient",
    "RunResult",
    "configure_logging",
    "render_result",
]
