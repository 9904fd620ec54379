"""Runs in a store: paused runs and decisions, workers, requeue.

This module is the area's face: other areas import only what it re-exports.
"""

from __future__ import annotations

from pte._deploy._requeue import (
    list_runs,
    requeue,
    requeue_problem,
)
from pte._deploy._runs import (
    PausedRun,
    awaiting_plan,
    decide,
    job_engine,
    pausing_gate,
    resume_run,
    run_in_store,
)
from pte._deploy._workers import (
    MAX_APPROVAL_TTL_S,
    QUEUE,
    WorkerConfig,
    enqueue,
    is_expired,
    make_app,
    process_run,
    served_registry,
    submit_job,
)

__all__ = [
    "MAX_APPROVAL_TTL_S",
    "QUEUE",
    "PausedRun",
    "WorkerConfig",
    "awaiting_plan",
    "decide",
    "enqueue",
    "is_expired",
    "job_engine",
    "list_runs",
    "make_app",
    "pausing_gate",
    "process_run",
    "requeue",
    "requeue_problem",
    "resume_run",
    "run_in_store",
    "served_registry",
    "submit_job",
]
