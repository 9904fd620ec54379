"""Authority: provenance labels, the policy document, approvals, endorsements, and the keys that sign them."""

from __future__ import annotations

from pte._core import (
    SigningKey,
    TrustedKeys,
)
from pte._policy import (
    ApprovalStore,
    ConsumingApproval,
    Decided,
    Endorsement,
    EndorsementGate,
    EndorsementRequest,
    EndorsementStore,
    LabelTree,
    PlanApproval,
    Policy,
    PolicyCheck,
    approval_hook,
    approve,
    approve_procedure,
    catalogue_fingerprint,
    endorse,
    load_policy,
    pending_endorsement,
    procedure_fingerprint,
    provenance,
)

__all__ = [
    "ApprovalStore",
    "ConsumingApproval",
    "Decided",
    "Endorsement",
    "EndorsementGate",
    "EndorsementRequest",
    "EndorsementStore",
    "LabelTree",
    "PlanApproval",
    "Policy",
    "PolicyCheck",
    "SigningKey",
    "TrustedKeys",
    "approval_hook",
    "approve",
    "approve_procedure",
    "catalogue_fingerprint",
    "endorse",
    "load_policy",
    "pending_endorsement",
    "procedure_fingerprint",
    "provenance",
]
