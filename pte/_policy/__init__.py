"""Policy: labels and data flow, the policy document, approvals, the approval gate and endorsements.

This module is the area's face: other areas import only what it re-exports.
"""

from __future__ import annotations

from pte._policy._approval import (
    ApprovalStore,
    approve,
    catalogue_fingerprint,
    make_approval,
    requires_approval,
)
from pte._policy._document import (
    Policy,
    PolicyCheck,
    load_policy,
)
from pte._policy._endorsement import (
    Endorsement,
    EndorsementGate,
    EndorsementPoint,
    EndorsementRejected,
    EndorsementRequest,
    EndorsementStore,
    endorse,
    make_endorsement,
    pending_endorsement,
)
from pte._policy._flow import (
    LABELS,
    Decided,
    plan_literals,
)
from pte._policy._gate import (
    ApprovalGate,
    ConsumingApproval,
    NoApprovals,
    PlanApproval,
    approval_hook,
    check_approval,
    public_keys_from_env,
    signing_key_from_env,
)
from pte._policy._handles import (
    HANDLE_KEY,
    WITHHELD_KEY,
    error_view,
    handle_view,
    is_clean,
    schema_at,
)
from pte._policy._labels import (
    LabelTree,
    SchemaLabels,
    parse_field_pointer,
    provenance,
    schema_fields,
)
from pte._policy._procedure_approval import (
    ProcedureCover,
    approve_procedure,
    procedure_cover,
    procedure_fingerprint,
)
from pte._policy._tool_policy import (
    ToolPolicy,
)

__all__ = [
    "HANDLE_KEY",
    "LABELS",
    "WITHHELD_KEY",
    "ApprovalGate",
    "ApprovalStore",
    "ConsumingApproval",
    "Decided",
    "Endorsement",
    "EndorsementGate",
    "EndorsementPoint",
    "EndorsementRejected",
    "EndorsementRequest",
    "EndorsementStore",
    "LabelTree",
    "NoApprovals",
    "PlanApproval",
    "Policy",
    "PolicyCheck",
    "ProcedureCover",
    "SchemaLabels",
    "ToolPolicy",
    "approval_hook",
    "approve",
    "approve_procedure",
    "catalogue_fingerprint",
    "check_approval",
    "endorse",
    "error_view",
    "handle_view",
    "is_clean",
    "load_policy",
    "make_approval",
    "make_endorsement",
    "parse_field_pointer",
    "pending_endorsement",
    "plan_literals",
    "procedure_cover",
    "procedure_fingerprint",
    "provenance",
    "public_keys_from_env",
    "requires_approval",
    "schema_at",
    "schema_fields",
    "signing_key_from_env",
]
