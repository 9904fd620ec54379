"""The engine around the executor: LLM clients, all prompt text, stages, repair, planner exposure, run
state and tracing.

This module is the area's face: other areas import only what it re-exports.
"""

from __future__ import annotations

from pte._run import _prompts as prompts
from pte._run._engine import (
    Engine,
    render_result,
)
from pte._run._finalizer_view import (
    dependency_distances,
    dependency_ranking,
)
from pte._run._label_reach import (
    LabelReach,
    label_reach,
)
from pte._run._llm import (
    DEFAULT_MAX_TOKENS,
    RUNAWAY_STOPS,
    LLMClient,
    LLMResponse,
    OpenAIClient,
)
from pte._run._llm_endpoint import (
    ENDPOINTS_FILE,
    EndpointMemory,
    context_tokens,
    props_url,
)
from pte._run._llm_replay import (
    RecordedReply,
    ReplayClient,
)
from pte._run._loop import RunLoop
from pte._run._otel import (
    RunTracer,
    TracedAudit,
)
from pte._run._prompts import (
    DATA_CLOSE,
    DATA_OPEN,
    LABEL_RULE,
    catalogue_text,
    data_block,
    finalizer_messages,
    planner_messages,
    replanner_messages,
    specialist_of,
    stage_messages,
    static_prompt,
)
from pte._run._run_records import (
    RUN_RECORDS,
    record_resumed,
    seal_refused,
)
from pte._run._state import (
    EngineConfig,
    RunResult,
)

__all__ = [
    "DATA_CLOSE",
    "DATA_OPEN",
    "DEFAULT_MAX_TOKENS",
    "ENDPOINTS_FILE",
    "LABEL_RULE",
    "RUNAWAY_STOPS",
    "RUN_RECORDS",
    "EndpointMemory",
    "Engine",
    "EngineConfig",
    "LLMClient",
    "LLMResponse",
    "LabelReach",
    "OpenAIClient",
    "RecordedReply",
    "ReplayClient",
    "RunLoop",
    "RunResult",
    "RunTracer",
    "TracedAudit",
    "catalogue_text",
    "context_tokens",
    "data_block",
    "dependency_distances",
    "dependency_ranking",
    "finalizer_messages",
    "label_reach",
    "planner_messages",
    "prompts",
    "props_url",
    "record_resumed",
    "render_result",
    "replanner_messages",
    "seal_refused",
    "specialist_of",
    "stage_messages",
    "static_prompt",
]
