"""PTE: a strict plan-then-execute engine.

An LLM compiles a request into a JSON plan; `compile_plan` validates it completely before
anything runs; a deterministic executor runs only allow-listed tools and records every
step in a tamper-evident audit log.

Everything an application needs is importable from here (``pte.Engine``, ``pte.AuditLog``,
``pte.verify``, ``pte.replay``, ...), including every exception PTE raises on purpose. The
importers (`pte.importers.mcp`, `.openapi`, `.langchain`) and test doubles (`pte.testing`)
are separate modules because they pull in optional dependencies. Implementation modules
(``pte._engine``, ``pte._executor``, ...) are private and may change without notice.
"""

from __future__ import annotations

import importlib
from typing import Any

from pte._approval import ApprovalStore, approve
from pte._approval_gate import approval_hook
from pte._approval_record import Approval, ProcedureApproval
from pte._audit import AuditLog, Durability
from pte._audit_scan import VerifyReport
from pte._audit_verify import iter_records, read_records, verify
from pte._canonical import canonical_json, hash_json
from pte._checkpoint import Checkpoint, CheckpointReport, verify_checkpoints, write_checkpoint
from pte._compile_context import DEFAULT_LIMITS, Limits
from pte._compiler import compile_plan
from pte._endorsement import (
    Endorsement,
    EndorsementGate,
    EndorsementRejected,
    EndorsementRequest,
    EndorsementStore,
    endorse,
    pending_endorsement,
)
from pte._errors import (
    ApprovalConsumed,
    ApprovalMissing,
    ApprovalRejected,
    ApprovalStoreError,
    AuditFormatError,
    AuditWriteError,
    CheckpointError,
    ConditionNotMet,
    EndorsementStoreError,
    FailedClosed,
    ImportRefused,
    ImportSourceError,
    KeyFileError,
    LLMError,
    MCPError,
    OpenAPIError,
    PlanRejected,
    PolicyError,
    ProcedureError,
    PTEError,
    ReasonCode,
    ReportError,
    RunPaused,
    SpecialistError,
    ToolError,
    ToolPackError,
    ToolRegistrationError,
    TransientError,
)
from pte._executor import Executor
from pte._flow import Decided
from pte._generics import ExtendedBy, FieldName, FieldOf, PickOf, RegexGroups, RegexPattern
from pte._labels import LabelTree, provenance
from pte._logs import configure_logging
from pte._plan import Plan, PlanDocument, PlanStep, Reference, StepModel, plan_schema
from pte._policy import Policy, load_policy
from pte._procedure_approval import approve_procedure, procedure_fingerprint
from pte._procedures import Procedure, load_procedures
from pte._record_sink import RecordSink
from pte._redaction import Redactor
from pte._registry import Registry, load_pack, load_registry
from pte._report import render_report, render_store_report, write_report
from pte._run_view import RunView
from pte._selection import Selection
from pte._specialists import Specialist, load_specialists
from pte._step_results import ExecutionResult, StepResult
from pte._tool_schema import SchemaTool, tool_from_schema
from pte._tool_spec import ToolSpec
from pte._tools import tool
from pte._version import __version__
from pte.stores import JsonlStore, RunInfo, SQLiteStore, Store, StoreError, open_store

# What needs the LLM client (the engine, replay, runs) is imported on first use, so that a
# process that only imports the executor never loads an LLM SDK (tests/test_executor_isolation.py).
# Type checkers read the same names, eagerly, from __init__.pyi (the lazy-loader convention).
_LAZY: dict[str, tuple[str, str]] = {
    "Engine": ("pte._engine", "Engine"),
    "EngineConfig": ("pte._run_state", "EngineConfig"),
    "RunResult": ("pte._run_state", "RunResult"),
    "render_result": ("pte._engine", "render_result"),
    "LLMClient": ("pte._llm", "LLMClient"),
    "LLMResponse": ("pte._llm", "LLMResponse"),
    "OpenAIClient": ("pte._llm", "OpenAIClient"),
    "ReplayClient": ("pte._llm_replay", "ReplayClient"),
    "ReplayDataError": ("pte._errors", "ReplayDataError"),
    "LogNotIntact": ("pte._errors", "LogNotIntact"),
    "ReplayDivergence": ("pte._errors", "ReplayDivergence"),
    "RequeueRefused": ("pte._errors", "RequeueRefused"),
    "ReplayReport": ("pte._replay", "ReplayReport"),
    "replay": ("pte._replay", "replay_file"),
    "replay_file": ("pte._replay", "replay_file"),
    "resume_file": ("pte._resume", "resume_file"),
    "AnchorError": ("pte._errors", "AnchorError"),
    "Anchors": ("pte._anchors", "Anchors"),
    "anchors_from_env": ("pte._anchors", "anchors_from_env"),
    "PausedRun": ("pte._runs", "PausedRun"),
    "decide": ("pte._runs", "decide"),
    "pausing_gate": ("pte._runs", "pausing_gate"),
    "resume_run": ("pte._runs", "resume_run"),
    "run_in_store": ("pte._runs", "run_in_store"),
}


def __getattr__(name: str) -> Any:
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'pte' has no attribute {name!r}")
    value = getattr(importlib.import_module(target[0]), target[1])
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


#: `pte.compile` reads as the docs say; `compile_plan` avoids shadowing the builtin in user code.
compile = compile_plan

__all__ = [
    "DEFAULT_LIMITS",
    "AnchorError",
    "Anchors",
    "Approval",
    "ApprovalConsumed",
    "ApprovalMissing",
    "ApprovalRejected",
    "ApprovalStore",
    "ApprovalStoreError",
    "AuditFormatError",
    "AuditLog",
    "AuditWriteError",
    "Checkpoint",
    "CheckpointError",
    "CheckpointReport",
    "ConditionNotMet",
    "Decided",
    "Durability",
    "Endorsement",
    "EndorsementGate",
    "EndorsementRejected",
    "EndorsementRequest",
    "EndorsementStore",
    "EndorsementStoreError",
    "Engine",
    "EngineConfig",
    "ExecutionResult",
    "Executor",
    "ExtendedBy",
    "FailedClosed",
    "FieldName",
    "FieldOf",
    "ImportRefused",
    "ImportSourceError",
    "JsonlStore",
    "KeyFileError",
    "LLMClient",
    "LLMError",
    "LLMResponse",
    "LabelTree",
    "Limits",
    "LogNotIntact",
    "MCPError",
    "OpenAIClient",
    "OpenAPIError",
    "PTEError",
    "PausedRun",
    "PickOf",
    "Plan",
    "PlanDocument",
    "PlanRejected",
    "PlanStep",
    "Policy",
    "PolicyError",
    "Procedure",
    "ProcedureApproval",
    "ProcedureError",
    "ReasonCode",
    "RecordSink",
    "Redactor",
    "Reference",
    "RegexGroups",
    "RegexPattern",
    "Registry",
    "ReplayClient",
    "ReplayDataError",
    "ReplayDivergence",
    "ReplayReport",
    "ReportError",
    "RequeueRefused",
    "RunInfo",
    "RunPaused",
    "RunResult",
    "RunView",
    "SQLiteStore",
    "SchemaTool",
    "Selection",
    "Specialist",
    "SpecialistError",
    "StepModel",
    "StepResult",
    "Store",
    "StoreError",
    "ToolError",
    "ToolPackError",
    "ToolRegistrationError",
    "ToolSpec",
    "TransientError",
    "VerifyReport",
    "__version__",
    "anchors_from_env",
    "approval_hook",
    "approve",
    "approve_procedure",
    "canonical_json",
    "compile",
    "compile_plan",
    "configure_logging",
    "decide",
    "endorse",
    "hash_json",
    "iter_records",
    "load_pack",
    "load_policy",
    "load_procedures",
    "load_registry",
    "load_specialists",
    "open_store",
    "pausing_gate",
    "pending_endorsement",
    "plan_schema",
    "procedure_fingerprint",
    "provenance",
    "read_records",
    "render_report",
    "render_result",
    "render_store_report",
    "replay",
    "replay_file",
    "resume_file",
    "resume_run",
    "run_in_store",
    "tool",
    "tool_from_schema",
    "verify",
    "verify_checkpoints",
    "write_checkpoint",
    "write_report",
]
