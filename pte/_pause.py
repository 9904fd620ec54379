"""The pause: a run stops to wait for a person (an approval or an endorsement) without ending."""

from __future__ import annotations

from typing import Any

from pte._errors import PTEError

__all__ = ["RunPaused"]


class RunPaused(PTEError):
    """Raised after ``run_paused`` is recorded (and made durable): the run waits for a person.

    The approval gate of store runs (`pte._runs.pausing_gate`) raises it before a plan runs;
    the endorsement gate (`pte._endorsement`) at the call whose value needs a person.
    """

    def __init__(
        self, run_id: str, plan: Any, tools: list[str], expires_at: str, reason: str = "awaiting_approval"
    ) -> None:
        super().__init__(f"run {run_id} awaits a person's decision on plan {plan.hash} ({', '.join(tools)})")
        self.run_id = run_id
        self.plan = plan
        self.tools = tools
        self.expires_at = expires_at
        #: ``awaiting_approval`` or ``awaiting_endorsement`` (the ``run_paused`` record's reason).
        self.reason = reason
