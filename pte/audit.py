"""The hash-chained audit log: writing, reading and verifying it; checkpoints and deployment anchors;
the signed approvals its records carry; the canonical JSON and hashing it is built on.
"""

from __future__ import annotations

from pte._audit import (
    Anchors,
    Approval,
    AuditLog,
    Checkpoint,
    CheckpointReport,
    Durability,
    ProcedureApproval,
    RecordSink,
    VerifyReport,
    anchors_from_env,
    iter_records,
    read_records,
    verify,
    verify_checkpoints,
    write_checkpoint,
)
from pte._core import (
    Redactor,
    canonical_json,
    hash_json,
)

__all__ = [
    "Anchors",
    "Approval",
    "AuditLog",
    "Checkpoint",
    "CheckpointReport",
    "Durability",
    "ProcedureApproval",
    "RecordSink",
    "Redactor",
    "VerifyReport",
    "anchors_from_env",
    "canonical_json",
    "hash_json",
    "iter_records",
    "read_records",
    "verify",
    "verify_checkpoints",
    "write_checkpoint",
]
