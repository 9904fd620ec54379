"""Type stub of `pte`: the same names as __init__.py, with the lazily imported ones imported eagerly."""

from pte._audit import Anchors as Anchors
from pte._audit import (
    Approval,
    AuditLog,
    Checkpoint,
    CheckpointReport,
    Durability,
    ProcedureApproval,
    RecordSink,
    VerifyReport,
    iter_records,
    read_records,
    verify,
    verify_checkpoints,
    write_checkpoint,
)
from pte._audit import anchors_from_env as anchors_from_env
from pte._catalogue import (
    ExtendedBy,
    FieldName,
    FieldOf,
    PickOf,
    RegexGroups,
    RegexPattern,
    Registry,
    SchemaTool,
    Selection,
    ToolSpec,
    load_pack,
    load_registry,
    tool,
    tool_from_schema,
)
from pte._core import AnchorError as AnchorError
from pte._core import (
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
    Redactor,
    ReportError,
    SpecialistError,
    ToolError,
    ToolPackError,
    ToolRegistrationError,
    TransientError,
    canonical_json,
    configure_logging,
    hash_json,
)
from pte._core import DeploymentError as DeploymentError
from pte._core import EndorsementStoreError as EndorsementStoreError
from pte._core import KeyFileError as KeyFileError
from pte._core import LogEnded as LogEnded
from pte._core import LogNotIntact as LogNotIntact
from pte._core import ReplayDataError as ReplayDataError
from pte._core import ReplayDivergence as ReplayDivergence
from pte._core import RequeueRefused as RequeueRefused
from pte._core import RunPaused as RunPaused
from pte._core import SigningKey as SigningKey
from pte._core import TrustedKeys as TrustedKeys
from pte._deploy import Deployment as Deployment
from pte._deploy import PausedRun as PausedRun
from pte._deploy import decide as decide
from pte._deploy import pausing_gate as pausing_gate
from pte._deploy import resume_run as resume_run
from pte._deploy import run_in_store as run_in_store
from pte._execution import ExecutionResult, Executor, StepResult
from pte._plan import (
    DEFAULT_LIMITS,
    Limits,
    Plan,
    PlanDocument,
    PlanStep,
    Procedure,
    Reference,
    Specialist,
    StepModel,
    compile_plan,
    load_procedures,
    load_specialists,
    plan_schema,
)
from pte._policy import (
    ApprovalStore,
    Decided,
    LabelTree,
    Policy,
    approval_hook,
    approve,
    approve_procedure,
    load_policy,
    procedure_fingerprint,
    provenance,
)
from pte._policy import (
    Endorsement as Endorsement,
)
from pte._policy import (
    EndorsementGate as EndorsementGate,
)
from pte._policy import (
    EndorsementRejected as EndorsementRejected,
)
from pte._policy import (
    EndorsementRequest as EndorsementRequest,
)
from pte._policy import (
    EndorsementStore as EndorsementStore,
)
from pte._policy import (
    endorse as endorse,
)
from pte._policy import (
    pending_endorsement as pending_endorsement,
)
from pte._replay import ReplayReport as ReplayReport
from pte._replay import RunView, render_report, render_store_report, write_report
from pte._replay import replay_file as replay
from pte._replay import replay_file as replay_file
from pte._replay import resume_file as resume_file
from pte._run import Engine as Engine
from pte._run import EngineConfig as EngineConfig
from pte._run import LLMClient as LLMClient
from pte._run import LLMResponse as LLMResponse
from pte._run import OpenAIClient as OpenAIClient
from pte._run import ReplayClient as ReplayClient
from pte._run import RunResult as RunResult
from pte._run import render_result as render_result
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
    "Deployment",
    "DeploymentError",
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
    "LogEnded",
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
    "SigningKey",
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
    "TrustedKeys",
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
