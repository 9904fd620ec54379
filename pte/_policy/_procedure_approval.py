"""Approving a procedure version once: its writes then run in any run, for any arguments the policy allows.

A `ProcedureApproval` (pte._audit._approval_record) names a procedure, its version (the SHA-256 of its
file, `pte.plan.Procedure.version`) and the catalogue fingerprint of its body's tools and the
policy's entries for them (`procedure_fingerprint`), signed like an approval of a run
(`pte._core._signing.sign_decision`) and stored in the same deployment approval store, bound to no run.

A plan is covered (`procedure_cover`) when every step of it whose tool requires approval was
inlined from a call of a procedure (the innermost call, whose body holds the step: an approval
of an outer procedure does not vouch for the body of one it calls, which can change on its
own) -- as compile's inlining recorded (`Plan.procedure_origin`), never as the step's id reads.
The gate (pte._policy._gate) then needs a counting approval of each such version; the policy
has already checked the call's arguments at compile, and consumption is keyed by run and
step, so every run runs each write once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pte._audit import ProcedureApproval
from pte._catalogue import Registry
from pte._core import SigningKey, canonical_json, sign_decision
from pte._plan import Plan, Procedure
from pte._policy._approval import DEFAULT_VALIDITY, ApprovalStore, catalogue_fingerprint, validity

__all__ = [
    "ProcedureCover",
    "approve_procedure",
    "make_procedure_approval",
    "procedure_cover",
    "procedure_fingerprint",
]


def procedure_fingerprint(
    registry: Registry,
    procedure: Procedure,
    policy: Any = None,
    *,
    canonical: Callable[[Any], str] = canonical_json,
) -> str:
    """`catalogue_fingerprint` of the tools `procedure`'s body calls (not the procedures it calls:
    their writes need approvals of their own) and, with a policy, the policy's entries for them."""
    tools = [t for t in procedure.tools if t in registry]
    return catalogue_fingerprint(registry, tools, policy, canonical=canonical)


def make_procedure_approval(
    procedure: Procedure,
    by: str,
    *,
    catalogue: str,
    signing_key: SigningKey | None = None,
    at: datetime | None = None,
    valid_for: timedelta = DEFAULT_VALIDITY,
) -> ProcedureApproval:
    """An approval of `procedure`'s version against `catalogue` (`procedure_fingerprint`), not stored."""
    when, expires = validity(by, at, valid_for)
    fields: dict[str, Any] = {
        "procedure": procedure.name,
        "version": procedure.version,
        "catalogue": catalogue,
        "by": by,
        "at": when,
        "expires": expires,
    }
    return sign_decision(ProcedureApproval, fields, signing_key)


def approve_procedure(
    procedure: Procedure,
    by: str,
    store: ApprovalStore,
    *,
    catalogue: str,
    signing_key: SigningKey | None = None,
    at: datetime | None = None,
    valid_for: timedelta = DEFAULT_VALIDITY,
) -> ProcedureApproval:
    """Record that `by` approves this version of `procedure` for any run and any arguments its
    parameters and the policy accept, against `catalogue` (`procedure_fingerprint`)."""
    approval = make_procedure_approval(
        procedure, by, catalogue=catalogue, signing_key=signing_key, at=at, valid_for=valid_for
    )
    store.add(approval)
    return approval


def procedure_cover(plan: Plan, registry: Registry) -> dict[tuple[str, str], list[str]] | None:
    """(procedure, version) -> the steps needing approval inlined from its calls, in plan order;
    None when a step needing approval was not inlined from a procedure call (the plan itself
    wrote it), so that only an approval of the plan can let it run."""
    groups: dict[tuple[str, str], list[str]] = {}
    for step in plan.tool_steps():
        if step.tool not in registry or not registry[step.tool].requires_approval:
            continue
        chain = plan.procedure_origin(step.id)
        if not chain:
            return None
        groups.setdefault((chain[-1].procedure, chain[-1].version), []).append(step.id)
    return groups or None


@dataclass(frozen=True)
class ProcedureCover:
    """What lets a plan run under procedure approvals: each approval and the steps it covers."""

    approvals: tuple[tuple[ProcedureApproval, tuple[str, ...]], ...]

    def approval_of(self, plan: Plan, step_id: str) -> ProcedureApproval | None:
        """The approval a step of `plan` runs under: that of the innermost call it was inlined from."""
        chain = plan.procedure_origin(step_id)
        if not chain:
            return None
        for approval, _ in self.approvals:
            if (approval.procedure, approval.version) == (chain[-1].procedure, chain[-1].version):
                return approval
        return None
