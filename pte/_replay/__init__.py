"""Replay and resume of recorded runs, the run view that folds a run's records, and the HTML report.

This module is the area's face: other areas import only what it re-exports.
"""

from __future__ import annotations

from pte._replay._authority import (
    authority_of,
    engine_for,
    llm_for,
    recorded_policy,
    recorded_registry,
    recorded_run_parts,
    run_execution,
)
from pte._replay._replayer import (
    DECISION_FIELDS,
    IGNORED_FIELDS,
    CheckingAuditLog,
    RecordedInvoker,
    ReplayReport,
    ResumingInvoker,
    RunReplay,
    drive_run,
    iter_runs,
    replay_file,
    replay_run,
)
from pte._replay._report import (
    render_report,
    render_store_report,
    write_report,
)
from pte._replay._resume import (
    check_anchors,
    check_deployment,
    recheck_unsigned_tail,
    resume_file,
)
from pte._replay._run_view import (
    RunView,
)
from pte._replay._steps_text import (
    StepsSummary,
    render_steps,
    status_text,
)

__all__ = [
    "DECISION_FIELDS",
    "IGNORED_FIELDS",
    "CheckingAuditLog",
    "RecordedInvoker",
    "ReplayReport",
    "ResumingInvoker",
    "RunReplay",
    "RunView",
    "StepsSummary",
    "authority_of",
    "check_anchors",
    "check_deployment",
    "drive_run",
    "engine_for",
    "iter_runs",
    "llm_for",
    "recheck_unsigned_tail",
    "recorded_policy",
    "recorded_registry",
    "recorded_run_parts",
    "render_report",
    "render_steps",
    "render_store_report",
    "replay_file",
    "replay_run",
    "resume_file",
    "run_execution",
    "status_text",
    "write_report",
]
