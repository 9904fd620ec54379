"""The audit log: the hash-chained writer, its records' schema, verification (fast, parallel, scan),
tails, checkpoints, deployment anchors and the text view.

This module is the area's face: other areas import only what it re-exports.
"""

from __future__ import annotations

from pte._audit import _records as records
from pte._audit._anchors import (
    ANCHORS_FILE_ENV,
    ANCHORS_IN_STORE,
    ANCHORS_SEEN_ENV,
    DEPLOYMENT_KEY_ENV,
    DEPLOYMENT_PUBLIC_KEY_ENV,
    Anchors,
    anchors_from_env,
    run_problem,
)
from pte._audit._approval_record import (
    Approval,
    ProcedureApproval,
    check_by,
    format_time,
    utc_now,
)
from pte._audit._binding import (
    deployment_binding,
    deployment_problem,
)
from pte._audit._checkpoint import (
    Checkpoint,
    CheckpointReport,
    generate_key,
    load_private_key,
    load_public_key,
    read_checkpoints,
    verify_checkpoints,
    write_checkpoint,
)
from pte._audit._content import (
    approval_problem,
    endorsement_problem,
)
from pte._audit._older_records import (
    ADDED,
    FORMAT_2_ADDED,
    AddedField,
    current_config,
    current_policy,
    current_run_started,
    current_tool_entry,
    record_format,
    stock_selection_undeclared,
)
from pte._audit._record_sink import (
    RecordSink,
)
from pte._audit._records import (
    TRACE_FIELDS,
    Record,
    traced,
)
from pte._audit._scan import (
    GENESIS_HASH,
    VerifyIssue,
    VerifyReport,
)
from pte._audit._schema import (
    load_audit_schema,
)
from pte._audit._show import (
    render_record,
    render_timeline,
    visible,
)
from pte._audit._verdict import (
    CHECKED,
    FAILED,
    NOT_AVAILABLE,
    Check,
    Verdict,
    judge,
    log_runs,
    stored_verdict,
    verdict,
)
from pte._audit._verify import (
    iter_records,
    read_records,
    verify,
)
from pte._audit._writer import (
    AuditLog,
    Durability,
    RecordWriter,
)

__all__ = [
    "ADDED",
    "ANCHORS_FILE_ENV",
    "ANCHORS_IN_STORE",
    "ANCHORS_SEEN_ENV",
    "CHECKED",
    "DEPLOYMENT_KEY_ENV",
    "DEPLOYMENT_PUBLIC_KEY_ENV",
    "FAILED",
    "FORMAT_2_ADDED",
    "GENESIS_HASH",
    "NOT_AVAILABLE",
    "TRACE_FIELDS",
    "AddedField",
    "Anchors",
    "Approval",
    "AuditLog",
    "Check",
    "Checkpoint",
    "CheckpointReport",
    "Durability",
    "ProcedureApproval",
    "Record",
    "RecordSink",
    "RecordWriter",
    "Verdict",
    "VerifyIssue",
    "VerifyReport",
    "anchors_from_env",
    "approval_problem",
    "check_by",
    "current_config",
    "current_policy",
    "current_run_started",
    "current_tool_entry",
    "deployment_binding",
    "deployment_problem",
    "endorsement_problem",
    "format_time",
    "generate_key",
    "iter_records",
    "judge",
    "load_audit_schema",
    "load_private_key",
    "load_public_key",
    "log_runs",
    "read_checkpoints",
    "read_records",
    "record_format",
    "records",
    "render_record",
    "render_timeline",
    "run_problem",
    "stock_selection_undeclared",
    "stored_verdict",
    "traced",
    "utc_now",
    "verdict",
    "verify",
    "verify_checkpoints",
    "visible",
    "write_checkpoint",
]
