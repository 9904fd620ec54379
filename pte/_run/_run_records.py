"""Every run-level record (`RUN_RECORDS`), built and written here and nowhere else.

The run loop (pte._run._loop) decides *when* each is written: it holds a run's `RunRecords`
and calls it as its transitions go, so the order of those calls there is the log's order.
This module decides *what* each says, from the decisions the loop was handed (`Accepted`,
`ModelCall`, `StageHandoff`, a `RunResult`). Replay re-runs both and compares record by
record: a field or an order changed here or there is a divergence from every recorded log.

`seal_refused` and `record_resumed` are the two writes made outside a loop: a stored run
refused before it runs (pte._deploy) and a resumed run's seam (pte._replay).
tests/e2e/test_seams.py fails if another module builds a run-level record, or if a module but
the loop holds a `RunRecords`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pte._audit import RecordSink
from pte._audit import records as rec
from pte._core import FailedClosed
from pte._execution import StepResult
from pte._run._acceptance import Accepted
from pte._run._model_call import ModelCall
from pte._run._stages import StageHandoff
from pte._run._state import RunResult

__all__ = ["RUN_RECORDS", "RunRecords", "record_resumed", "seal_refused"]

#: The records of a run's course, built only here (the executor writes step records, the
#: approval and endorsement gates theirs).
RUN_RECORDS = frozenset(
    {
        "run_started",
        "llm_call",
        "plan_accepted",
        "plan_rejected",
        "replan",
        "stage",
        "repair",
        "run_resumed",
        "run_finished",
    }
)


class RunRecords:
    """A run's run-level records, written to its sink as the loop says."""

    def __init__(self, audit: RecordSink) -> None:
        self.audit = audit

    def started(
        self,
        mode: str,
        request: str | None,
        config: dict[str, Any],
        content: dict[str, Any],
        trace: dict[str, str],
        deployment: Any,
    ) -> None:
        self.audit.write(
            rec.run_started(
                mode=mode, request=request, config=config, content=content, trace=trace, deployment=deployment
            )
        )

    def llm_call(self, call: ModelCall) -> None:
        self.audit.write(rec.llm_call(**call.logged))

    def accepted(self, accepted: Accepted) -> None:
        plan = accepted.plan
        self.audit.write(
            rec.plan_accepted(
                origin=accepted.origin,
                plan_hash=plan.hash,
                plan=plan.to_dict(),
                order=plan.order,
                needs_endorsement=accepted.needs_endorsement,
            )
        )

    def rejected(self, origin: str, text: str, rejection: FailedClosed) -> None:
        self.audit.write(
            rec.plan_rejected(
                origin=origin,
                reason=rejection.reason.value,
                message=rejection.message,
                path=rejection.path,
                plan_text=text,
            )
        )

    def repair(self, attempt: int, origin: str, rejection: FailedClosed) -> None:
        """A plan (or a specialist's sub-plan) goes back to its writer, as replan `attempt`."""
        self.audit.write(
            rec.repair(
                attempt=attempt,
                origin=origin,
                reason=rejection.reason.value,
                message=rejection.message,
                path=rejection.path,
            )
        )

    def replan(self, attempt: int, failure: StepResult, completed: Iterable[str]) -> None:
        assert failure.error is not None
        self.audit.write(
            rec.replan(
                attempt=attempt,
                failed_step=failure.step_id,
                error=failure.error.to_dict(),
                completed=completed,
            )
        )

    def stage(self, handoff: StageHandoff) -> None:
        self.audit.write(
            rec.stage(
                stage=handoff.stage, plan_hash=handoff.plan_hash, values=handoff.values, labels=handoff.labels
            )
        )

    def finished(self, result: RunResult) -> None:
        """``run_finished`` (which seals the log), then a sync: the run is durable once it returns."""
        self.audit.write(
            rec.run_finished(
                status=result.status,
                reason=result.reason.value if result.reason else None,
                message=result.message,
                answer=result.answer,
                result=result.result,
                steps_run=len(result.steps),
                llm_calls=result.llm_calls,
            )
        )
        self.audit.sync()


def seal_refused(audit: RecordSink, refused: FailedClosed, *, after_records: int) -> None:
    """End a stored run that cannot go on here ``failed_closed(refused.reason)``, nothing run:
    ``run_resumed`` after its `after_records` records (or, with none, a ``run_started`` of
    nothing), then ``run_finished`` (pte._deploy's `end_run`)."""
    if after_records:
        audit.write(rec.run_resumed(after_records=after_records))
    else:
        audit.write(rec.run_started(mode="execute", request=None, config={"refused": True}))
    audit.write(
        rec.run_finished(
            status="failed_closed",
            reason=refused.reason.value,
            message=refused.message,
            answer=None,
            result=None,
            steps_run=0,
            llm_calls=0,
        )
    )


def record_resumed(audit: RecordSink, after_records: int) -> None:
    """The ``run_resumed`` record a continuing sink writes where the recorded part of a run ends."""
    audit.write(rec.run_resumed(after_records=after_records))
