"""PTE: a strict plan-then-execute engine.

An LLM compiles a request into a JSON plan; `compile` validates it completely before anything
runs; a deterministic executor runs only allow-listed tools and records every step in a
tamper-evident audit log.

`pte` holds what a first program needs (`tool`, `Registry`, `Engine`, `AuditLog`, `verify`, ...).
Everything else public lives in the module of its area, each with one `__all__`:

| module | what it holds |
|---|---|
| `pte.catalogue` | tools: `@tool`, `ToolSpec`, `Registry`, packs, generic-operation markers |
| `pte.plan` | the plan model, `compile`, procedures, specialists |
| `pte.policy` | labels, the policy, approvals, endorsements, signing keys |
| `pte.audit` | the audit log: write, read, verify; checkpoints, anchors |
| `pte.execution` | the deterministic executor (never loads an LLM client) |
| `pte.engine` | the engine and the model clients |
| `pte.runs` | replay, resume, `RunView`, reports |
| `pte.deployment` | runs under a deployment that pause and resume |
| `pte.stores` | run stores (JSON Lines, SQLite, PostgreSQL) |
| `pte.errors` | every exception PTE raises on purpose, and `ReasonCode` |
| `pte.cli` | the `pte` command line, callable in-process (`main(argv)` returns the exit code) |
| `pte.importers`, `pte.testing` | tool importers; test doubles (optional dependencies) |

Modules whose names start with an underscore (``pte._run``, ...) are private and may change
without notice.
"""

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING, Any

from pte._core import __version__
from pte.audit import AuditLog, verify
from pte.catalogue import Registry, load_pack, load_registry, tool
from pte.errors import FailedClosed, PlanRejected, PTEError, ReasonCode, ToolError
from pte.execution import Executor
from pte.plan import Plan, compile, compile_plan
from pte.policy import Policy, SigningKey, TrustedKeys, approve, load_policy

if TYPE_CHECKING:
    from pte.deployment import Deployment
    from pte.engine import Engine, EngineConfig, OpenAIClient, RunResult
    from pte.runs import replay

#: The public modules whose names are resolved on first use: they load the LLM client, which a
#: process that only runs plans never does (tests/e2e/test_executor_isolation.py).
_LAZY_MODULES = ("pte.engine", "pte.runs", "pte.deployment")

#: The public modules, listed by ``dir(pte)`` with the names of `__all__`.
_PUBLIC_MODULES = (
    "audit",
    "catalogue",
    "cli",
    "deployment",
    "engine",
    "errors",
    "execution",
    "importers",
    "plan",
    "policy",
    "runs",
    "stores",
    "testing",
)

#: Names `pte` exported before each area had its public module (#35), and their new home.
#: ``pte.X`` still works for them, with a DeprecationWarning naming the new home; they go in
#: a later release.
_MOVED: dict[str, str] = {
    # pte.audit
    "Anchors": "pte.audit",
    "Approval": "pte.audit",
    "Checkpoint": "pte.audit",
    "CheckpointReport": "pte.audit",
    "Durability": "pte.audit",
    "ProcedureApproval": "pte.audit",
    "RecordSink": "pte.audit",
    "Redactor": "pte.audit",
    "VerifyReport": "pte.audit",
    "anchors_from_env": "pte.audit",
    "canonical_json": "pte.audit",
    "hash_json": "pte.audit",
    "iter_records": "pte.audit",
    "read_records": "pte.audit",
    "verify_checkpoints": "pte.audit",
    "write_checkpoint": "pte.audit",
    # pte.catalogue
    "ExtendedBy": "pte.catalogue",
    "FieldName": "pte.catalogue",
    "FieldOf": "pte.catalogue",
    "PickOf": "pte.catalogue",
    "RegexGroups": "pte.catalogue",
    "RegexPattern": "pte.catalogue",
    "SchemaTool": "pte.catalogue",
    "Selection": "pte.catalogue",
    "ToolSpec": "pte.catalogue",
    "tool_from_schema": "pte.catalogue",
    # pte.deployment
    "PausedRun": "pte.deployment",
    "decide": "pte.deployment",
    "pausing_gate": "pte.deployment",
    "resume_run": "pte.deployment",
    "run_in_store": "pte.deployment",
    # pte.engine
    "LLMClient": "pte.engine",
    "LLMResponse": "pte.engine",
    "ReplayClient": "pte.engine",
    "configure_logging": "pte.engine",
    "render_result": "pte.engine",
    # pte.errors
    "AnchorError": "pte.errors",
    "ApprovalConsumed": "pte.errors",
    "ApprovalMissing": "pte.errors",
    "ApprovalRejected": "pte.errors",
    "ApprovalStoreError": "pte.errors",
    "AuditFormatError": "pte.errors",
    "AuditWriteError": "pte.errors",
    "CheckpointError": "pte.errors",
    "ConditionNotMet": "pte.errors",
    "DeploymentError": "pte.errors",
    "EndorsementRejected": "pte.errors",
    "EndorsementStoreError": "pte.errors",
    "ImportRefused": "pte.errors",
    "ImportSourceError": "pte.errors",
    "KeyFileError": "pte.errors",
    "LLMError": "pte.errors",
    "LogEnded": "pte.errors",
    "LogNotIntact": "pte.errors",
    "MCPError": "pte.errors",
    "OpenAPIError": "pte.errors",
    "PolicyError": "pte.errors",
    "ProcedureError": "pte.errors",
    "ReplayDataError": "pte.errors",
    "ReplayDivergence": "pte.errors",
    "ReportError": "pte.errors",
    "RequeueRefused": "pte.errors",
    "RunPaused": "pte.errors",
    "SpecialistError": "pte.errors",
    "StoreError": "pte.errors",
    "ToolPackError": "pte.errors",
    "ToolRegistrationError": "pte.errors",
    "TransientError": "pte.errors",
    # pte.execution
    "ExecutionResult": "pte.execution",
    "StepResult": "pte.execution",
    # pte.plan
    "DEFAULT_LIMITS": "pte.plan",
    "Limits": "pte.plan",
    "PlanDocument": "pte.plan",
    "PlanStep": "pte.plan",
    "Procedure": "pte.plan",
    "Reference": "pte.plan",
    "Specialist": "pte.plan",
    "StepModel": "pte.plan",
    "load_procedures": "pte.plan",
    "load_specialists": "pte.plan",
    "plan_schema": "pte.plan",
    # pte.policy
    "ApprovalStore": "pte.policy",
    "Decided": "pte.policy",
    "Endorsement": "pte.policy",
    "EndorsementGate": "pte.policy",
    "EndorsementRequest": "pte.policy",
    "EndorsementStore": "pte.policy",
    "LabelTree": "pte.policy",
    "approval_hook": "pte.policy",
    "approve_procedure": "pte.policy",
    "endorse": "pte.policy",
    "pending_endorsement": "pte.policy",
    "procedure_fingerprint": "pte.policy",
    "provenance": "pte.policy",
    # pte.runs
    "ReplayReport": "pte.runs",
    "RunView": "pte.runs",
    "render_report": "pte.runs",
    "render_store_report": "pte.runs",
    "replay_file": "pte.runs",
    "resume_file": "pte.runs",
    "write_report": "pte.runs",
    # pte.stores
    "JsonlStore": "pte.stores",
    "RunInfo": "pte.stores",
    "SQLiteStore": "pte.stores",
    "Store": "pte.stores",
    "open_store": "pte.stores",
}


# Only at run time: type checkers see the names imported above, so a moved name is an error to them.
if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        if name in _PUBLIC_MODULES:  # `import pte` then `pte.engine.ReplayClient`, as for `pte.audit`
            return importlib.import_module(f"pte.{name}")
        if name in __all__:
            for module_name in _LAZY_MODULES:
                module = importlib.import_module(module_name)
                if name in module.__all__:
                    value = getattr(module, name)
                    globals()[name] = value
                    return value
        home = _MOVED.get(name)
        if home is not None:
            warnings.warn(
                f"pte.{name} moved to {home}.{name}; import it from there (pte.{name} goes later)",
                DeprecationWarning,
                stacklevel=2,
            )
            return getattr(importlib.import_module(home), name)
        raise AttributeError(f"module 'pte' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*__all__, *_PUBLIC_MODULES})


__all__ = [
    "AuditLog",
    "Deployment",
    "Engine",
    "EngineConfig",
    "Executor",
    "FailedClosed",
    "OpenAIClient",
    "PTEError",
    "Plan",
    "PlanRejected",
    "Policy",
    "ReasonCode",
    "Registry",
    "RunResult",
    "SigningKey",
    "ToolError",
    "TrustedKeys",
    "__version__",
    "approve",
    "compile",
    "compile_plan",
    "load_pack",
    "load_policy",
    "load_registry",
    "replay",
    "tool",
    "verify",
]
