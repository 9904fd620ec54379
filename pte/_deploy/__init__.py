"""Runs in a store: paused runs and decisions, workers, requeue.

This module is the area's face: other areas import only what it re-exports.
"""

from __future__ import annotations

from pte._deploy._deployment import Deployment, recorded_fingerprint
from pte._deploy._deployment_discovery import DEFAULT_FOLDER, DEPLOYMENT_ENV, find_deployment_folder
from pte._deploy._deployment_document import DOCUMENT_NAME, DeploymentDocument, resolve_store_url
from pte._deploy._deployment_init import init_deployment
from pte._deploy._jobs import (
    deployment_job_key,
    deployment_public_key,
    deployment_signing_key,
    job_fingerprint,
    job_refusal,
    redact_job,
    sign_job,
)
from pte._deploy._pack_imports import (
    IMPORT_PREFIXES,
    forget_imports,
    import_spec,
    is_import_spec,
    spec_file,
    spec_with_command_words,
)
from pte._deploy._process import is_expired, process_run
from pte._deploy._replaying import replay_file, replay_run, resume_file
from pte._deploy._requeue import (
    end_stranded,
    list_runs,
    requeue,
    requeue_problem,
    stranded,
)
from pte._deploy._runs import (
    PausedRun,
    awaiting_plan,
    decide,
    end_run,
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
    make_app,
    submit_job,
)

__all__ = [
    "DEFAULT_FOLDER",
    "DEPLOYMENT_ENV",
    "DOCUMENT_NAME",
    "IMPORT_PREFIXES",
    "MAX_APPROVAL_TTL_S",
    "QUEUE",
    "Deployment",
    "DeploymentDocument",
    "PausedRun",
    "WorkerConfig",
    "awaiting_plan",
    "decide",
    "deployment_job_key",
    "deployment_public_key",
    "deployment_signing_key",
    "end_run",
    "end_stranded",
    "enqueue",
    "find_deployment_folder",
    "forget_imports",
    "import_spec",
    "init_deployment",
    "is_expired",
    "is_import_spec",
    "job_engine",
    "job_fingerprint",
    "job_refusal",
    "list_runs",
    "make_app",
    "pausing_gate",
    "process_run",
    "recorded_fingerprint",
    "redact_job",
    "replay_file",
    "replay_run",
    "requeue",
    "requeue_problem",
    "resolve_store_url",
    "resume_file",
    "resume_run",
    "run_in_store",
    "sign_job",
    "spec_file",
    "spec_with_command_words",
    "stranded",
    "submit_job",
]
