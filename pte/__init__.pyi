"""Type stub of `pte`: the same names as __init__.py, with the lazily imported ones imported eagerly."""

from pte._generics import ExtendedBy, FieldName, FieldOf, PickOf, RegexGroups, RegexPattern
from pte._tool_schema import SchemaTool, tool_from_schema
from pte.approval import Approval, ApprovalStore, ApprovalStoreError, approval_hook, approve
from pte.audit import AuditLog, Durability
from pte.audit_verify import AuditFormatError, VerifyReport, iter_records, read_records, verify
from pte.canonical import canonical_json, hash_json
from pte.checkpoint import Checkpoint, CheckpointError, CheckpointReport, verify_checkpoints, write_checkpoint
from pte.compiler import DEFAULT_LIMITS, Limits, compile_plan
from pte.control_run import ConditionNotMet
from pte.engine import Engine as Engine
from pte.engine import EngineConfig as EngineConfig
from pte.engine import RunResult as RunResult
from pte.engine import render_result as render_result
from pte.errors import (
    ApprovalConsumed,
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
    TransientError,
)
from pte.executor import ExecutionResult, Executor, StepResult
from pte.labels import LabelTree, provenance
from pte.llm import LLMClient as LLMClient
from pte.llm import LLMResponse as LLMResponse
from pte.llm import OpenAIClient as OpenAIClient
from pte.llm import ReplayClient as ReplayClient
from pte.llm import ReplayDataError as ReplayDataError
from pte.logs import configure_logging
from pte.plan import Plan, PlanDocument, PlanStep, Reference, StepModel, plan_schema
from pte.policy import Policy, PolicyError, load_policy
from pte.redaction import Redactor
from pte.replay import LogNotIntact as LogNotIntact
from pte.replay import ReplayDivergence as ReplayDivergence
from pte.replay import ReplayReport as ReplayReport
from pte.replay import replay_file as replay_file
from pte.replay import resume_file as resume_file
from pte.report import ReportError, render_report, write_report
from pte.runs import PausedRun as PausedRun
from pte.runs import RunPaused as RunPaused
from pte.runs import decide as decide
from pte.runs import pausing_gate as pausing_gate
from pte.runs import resume_run as resume_run
from pte.runs import run_in_store as run_in_store
from pte.signing import KeyFileError as KeyFileError
from pte.stores import JsonlStore, RunInfo, SQLiteStore, Store, StoreError, open_store
from pte.tools import Registry, ToolSpec, load_pack, load_registry, tool

__version__: str
compile = compile_plan

__all__ = [
    "DEFAULT_LIMITS",
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
    "Durability",
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
    "ReasonCode",
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
    "TransientError",
    "VerifyReport",
    "__version__",
    "approval_hook",
    "approve",
    "canonical_json",
    "compile",
    "compile_plan",
    "configure_logging",
    "decide",
    "hash_json",
    "iter_records",
    "load_pack",
    "load_policy",
    "load_registry",
    "open_store",
    "pausing_gate",
    "plan_schema",
    "provenance",
    "read_records",
    "render_report",
    "render_result",
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
