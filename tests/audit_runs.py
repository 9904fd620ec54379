"""Begin a run in an audit log for tests that drive the executor (or the log) directly.

A run's first record is ``run_started`` and the log refuses anything else first
(`pte._audit._writer`); the engine writes a full one (catalogue, policy, prompts). Tests below the
engine write a bare one with this.
"""

from __future__ import annotations

from pte import AuditLog


def begun(log: AuditLog) -> AuditLog:
    """`log` after a bare ``run_started`` record (valid by the audit schema): its run has begun."""
    log.append("run_started", mode="run", request=None, tools=[], config={})
    return log
