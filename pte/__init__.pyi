"""Type stub of `pte`: the same names as __init__.py, with the lazily imported ones imported eagerly."""

from pte._anchors import Anchors as Anchors
from pte._anchors import anchors_from_env as anchors_from_env
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
    Endorsement as Endorsement,
)
from pte._endorsement import (
    EndorsementGate as EndorsementGate,
)
from pte._endorsement import (
    EndorsementRejected as EndorsementRejected,
)
from pte._endorsement import (
    EndorsementRequest as EndorsementRequest,
)
from pte._endorsement import (
    EndorsementStore as EndorsementStore,
)
from pte._endorsement import (
    endorse as endorse,
)
from pte._endorsement import (
    pending_endorsement as pending_endorsement,
)
from pte._engine import Engine as Engine
from pte._engine import render_result as render_result
from pte._errors import AnchorError as AnchorError
from pte._errors import (
    ApprovalConsumed,
    ApprovalMissing,
    ApprovalRejected,
    ApprovalStoreError,
    AuditFormatError,
    AuditWriteError,
    CheckpointError,
    ConditionNotMet,
    FailedClosed,
    ImportRefused,
    ImportSourceError,
    LLMError,
    MCPError,
    OpenAPIError,
    PlanRejected,
    PolicyError,
    ProcedureError,
    PTEError,
    ReasonCode,
    ReportError,
    SpecialistError,
    ToolError,
    ToolPackError,
    ToolRegistrationError,
    TransientError,
)
from pte._errors import EndorsementStoreError as EndorsementStoreError
from pte._errors import KeyFileError as KeyFileError
from pte._errors import LogNotIntact as LogNotIntact
from pte._errors import ReplayDataError as ReplayDataError
from pte._errors import ReplayDivergence as ReplayDivergence
from pte._errors import RequeueRefused as RequeueRefused
from pte._errors import RunPaused as RunPaused
from pte._executor import Executor
from pte._flow import Decided
from pte._generics import ExtendedBy, FieldName, FieldOf, PickOf, RegexGroups, RegexPattern
from pte._labels import LabelTree, provenance
from pte._llm import LLMClient as LLMClient
from pte._llm import LLMResponse as LLMResponse
from pte._llm import OpenAIClient as OpenAIClient
from pte._llm_replay import ReplayClient as ReplayClient
from pte._logs import configure_logging
from pte._plan import Plan, PlanDocument, PlanStep, Reference, StepModel, plan_schema
from pte._policy import Policy, load_policy
from pte._procedure_approval import approve_procedure, procedure_fingerprint
from pte._procedures import Procedure, load_procedures
from pte._record_sink import RecordSink
from pte._redaction import Redactor
from pte._registry import Registry, load_pack, load_registry
from pte._replay import ReplayReport as ReplayReport
from pte._replay import replay_file as replay
from pte._replay import replay_file as replay_file
from pte._report import render_report, render_store_report, write_report
from pte._resume import resume_file as resume_file
from pte._run_state import EngineConfig as EngineConfig
from pte._run_state import RunResult as RunResult
from pte._run_view import RunView
from pte._runs import PausedRun as PausedRun
from pte._runs import decide as decide
from pte._runs import pausing_gate as pausing_gate
from pte._runs import resume_run as resume_run
from pte._runs import run_in_store as run_in_store
from pte._selection import Selection
from pte._specialists import Specialist, load_specialists
from pte._step_results import ExecutionResult, StepResult
from pte._tool_schema import SchemaTool, tool_from_schema
from pte._tool_spec import ToolSpec
from pte._tools import tool
from pte.stores import JsonlStore, RunInfo, SQLiteStore, Store, StoreError, open_store

__version__: str
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
