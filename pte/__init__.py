"""PTE: a strict plan-then-execute engine.

An LLM compiles a request into a JSON plan; `compile_plan` validates it completely before
anything runs; a deterministic executor runs only allow-listed tools and records every
step in a tamper-evident audit log.
"""

from __future__ import annotations

from pte._tool_schema import SchemaTool, tool_from_schema
from pte._version import __version__
from pte.canonical import canonical_json, hash_json
from pte.compiler import DEFAULT_LIMITS, Limits, compile_plan
from pte.errors import (
    ApprovalMissing,
    AuditWriteError,
    FailedClosed,
    LLMError,
    PlanRejected,
    PTEError,
    ReasonCode,
    ToolError,
    ToolPackError,
    ToolRegistrationError,
    TransientError,
)
from pte.plan import Plan, PlanDocument, PlanStep, Reference, StepModel, plan_schema
from pte.tools import Registry, ToolSpec, load_pack, load_registry, tool

#: `pte.compile` reads as the docs say; `compile_plan` avoids shadowing the builtin in user code.
compile = compile_plan

__all__ = [
    "DEFAULT_LIMITS",
    "ApprovalMissing",
    "AuditWriteError",
    "FailedClosed",
    "LLMError",
    "Limits",
    "PTEError",
    "Plan",
    "PlanDocument",
    "PlanRejected",
    "PlanStep",
    "ReasonCode",
    "Reference",
    "Registry",
    "SchemaTool",
    "StepModel",
    "ToolError",
    "ToolPackError",
    "ToolRegistrationError",
    "ToolSpec",
    "TransientError",
    "__version__",
    "canonical_json",
    "compile",
    "compile_plan",
    "hash_json",
    "load_pack",
    "load_registry",
    "plan_schema",
    "tool",
    "tool_from_schema",
]
