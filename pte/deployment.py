"""Runs under a deployment: the deployment's authority; runs in a store that pause for a decision
and resume.
"""

from __future__ import annotations

from pte._deploy import (
    Deployment,
    PausedRun,
    decide,
    pausing_gate,
    resume_run,
    run_in_store,
)

__all__ = [
    "Deployment",
    "PausedRun",
    "decide",
    "pausing_gate",
    "resume_run",
    "run_in_store",
]
