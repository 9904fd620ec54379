"""The one call gate of a run: what a person decided about its calls, as the executor asks it.

Two points of each call (`pte._execution.CallGate`): before its intent is recorded, the plan's
endorsement point (`pte._policy.EndorsementPoint`: pause, refuse, or record the endorsement the
call consumes); before its side effect, the approval gate's consumption (`ApprovalGate.before_call`:
a non-idempotent write consumes its approval exactly once, in the store, before the tool is
called). The run loop builds one per plan it executes (`RunCallGate.for_plan`) and passes it to
`Executor.run(gate=...)`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pte._audit import RecordSink
from pte._catalogue import ToolSpec
from pte._execution import CallHook
from pte._plan import PlanStep
from pte._policy import EndorsementPoint

__all__ = ["RunCallGate"]


@dataclass(frozen=True)
class RunCallGate:
    """A run's `CallGate`: the plan's endorsement point and the approval gate's consumption."""

    #: The endorsement point of the plan being executed; None: no call of it needs one.
    endorsement: EndorsementPoint | None
    #: The approval gate's point before a side effect (`ApprovalGate.before_call`); None: none.
    approval: CallHook | None

    @classmethod
    def for_plan(
        cls,
        endorsements: Any,
        approval: CallHook | None,
        audit: RecordSink,
        plan_hash: str,
        needs: Mapping[str, Mapping[str, str]] | None,
        decisions: Mapping[str, Sequence[Mapping[str, Any]]],
    ) -> RunCallGate | None:
        """The gate of plan `plan_hash`: its endorsement point when a call of it `needs` one and
        there is an endorsement gate, and the approval's consumption; None when neither is there."""
        point = None
        if needs and endorsements:
            point = EndorsementPoint(endorsements, audit, plan_hash, needs, decisions=decisions)
        return cls(point, approval) if point is not None or approval is not None else None

    def calls_to_check(self, step_ids: Iterable[str]) -> frozenset[str]:
        if self.endorsement is None:
            return frozenset()
        return self.endorsement.calls_to_check(step_ids)

    def check_call(
        self,
        step_id: str,
        tool: str,
        args: Mapping[str, Any],
        outputs: Mapping[str, Any] | None = None,
        hidden: Sequence[str | None] = (),
    ) -> None:
        if self.endorsement is not None:
            self.endorsement.check_call(step_id, tool, args, outputs, hidden)

    def before_effect(self, spec: ToolSpec, args: dict[str, Any], step: PlanStep) -> None:
        if self.approval is not None:
            self.approval(spec, args, step)
