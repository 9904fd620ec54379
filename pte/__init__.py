"""PTE: a strict plan-then-execute engine.

An LLM compiles a request into a JSON plan; `compile_plan` validates it completely before
anything runs; a deterministic executor runs only allow-listed tools and records every
step in a tamper-evident audit log.

Everything an application needs is importable from here (``pte.Engine``, ``pte.AuditLog``,
``pte.verify``, ``pte.replay``, ...), including every exception PTE raises on purpose. The
importers (`pte.importers.mcp`, `.openapi`, `.langchain`) and test doubles (`pte.testing`)
are separate modules because they pull in optional dependencies.
"""

from __future__ import annotations

__version__ = "0.1.0"

from pte._tool_schema import SchemaTool, tool_from_schema
from pte.approval import Approval, ApprovalStore, ApprovalStoreError, approval_hook, approve
from pte.audit import AuditLog, Durability
from pte.audit_verify import AuditFormatError, VerifyReport, iter_records, read_records, verify
from pte.canonical import canonical_json, hash_json
from pte.compiler import DEFAULT_LIMITS, Limits, compile_plan
from pte.engine import Engine, EngineConfig, RunResult, render_result
from pte.errors import (
    ApprovalMissing,
    ApprovalRejected,
    AuditWriteError,
    FailedClosed,
    ImportRefused,
    ImportSourceError,
    LLMError,
    MCPError,
    OpenAPIError,
    PlanRejected,
    PTEError,
    ReasonCode,
    ToolError,
    ToolPackError,
    ToolRegistrationError,
)
from pte.executor import ExecutionResult, Executor, StepResult
from pte.llm import LLMClient, LLMResponse, OpenAIClient, ReplayClient, ReplayDataError
from pte.logs import configure_logging
from pte.plan import Plan, PlanDocument, PlanStep, Reference, StepModel, plan_schema
from pte.policy import Policy, PolicyError, load_policy
from pte.redaction import Redactor
from pte.replay import ReplayDivergence, ReplayReport, replay_file, resume_file
from pte.runs import RunPaused
from pte.stores import JsonlStore, RunInfo, SQLiteStore, Store, StoreError, open_store
from pte.tools import Registry, ToolSpec, load_pack, load_registry, tool

#: `pte.compile` reads as the docs say; `compile_plan` avoids shadowing the builtin in user code.
compile = compile_plan
#: `pte.replay(path)`: every run of an audit log re-driven and compared (`replay_file`).
replay = replay_file

__all__ = [
    "DEFAULT_LIMITS",
    "Approval",
    "ApprovalMissing",
    "ApprovalRejected",
    "ApprovalStore",
    "ApprovalStoreError",
    "AuditFormatError",
    "AuditLog",
    "AuditWriteError",
    "Durability",
    "Engine",
    "EngineConfig",
    "ExecutionResult",
    "Executor",
    "FailedClosed",
    "ImportRefused",
    "ImportSourceError",
    "JsonlStore",
    "LLMClient",
    "LLMError",
    "LLMResponse",
    "Limits",
    "MCPError",
    "OpenAIClient",
    "OpenAPIError",
    "PTEError",
    "Plan",
    "PlanDocument",
    "PlanRejected",
    "PlanStep",
    "Policy",
    "PolicyError",
    "ReasonCode",
    "Redactor",
    "Reference",
    "Registry",
    "ReplayClient",
    "ReplayDataError",
    "ReplayDivergence",
    "ReplayReport",
    "RunInfo",
    "RunPaused",
    "RunResult",
    "SQLiteStore",
    "SchemaTool",
    "StepModel",
    "StepResult",
    "Store",
    "StoreError",
    "ToolError",
    "ToolPackError",
    "ToolRegistrationError",
    "ToolSpec",
    "VerifyReport",
    "__version__",
    "approval_hook",
    "approve",
    "canonical_json",
    "compile",
    "compile_plan",
    "configure_logging",
    "hash_json",
    "iter_records",
    "load_pack",
    "load_policy",
    "load_registry",
    "open_store",
    "plan_schema",
    "read_records",
    "render_result",
    "replay",
    "replay_file",
    "resume_file",
    "tool",
    "tool_from_schema",
    "verify",
]
