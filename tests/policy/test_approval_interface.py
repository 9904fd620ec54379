"""What `Engine(approval=...)` is given is a declared interface (#35), not an attribute looked up:
a `PlanApproval` checks each plan before it runs; a `ConsumingApproval` also has `before_call`,
which the run's call gate asks before each call's side effect. A gate declares which it is."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pte import AuditLog, Engine, Plan
from pte.audit import RecordSink
from pte.errors import ApprovalMissing
from pte.policy import ApprovalStore, ConsumingApproval, PlanApproval, approval_hook
from tests._two_step_tools import CALLED, REGISTRY

PLAN = json.dumps(
    {
        "pte_plan": "1",
        "steps": [
            {"id": "read_balance", "tool": "balance", "args": {}},
            {"id": "send_transfer", "tool": "transfer", "args": {"cents": {"$ref": "read_balance/cents"}}},
        ],
        "result": {"$ref": "send_transfer/id"},
    }
)


class Counting(ConsumingApproval):
    """A consuming gate of its own: notes the plans it checks and the calls it is asked about."""

    def __init__(self, refuse_at: str | None = None) -> None:
        self.plans: list[str] = []
        self.calls: list[str] = []
        self.refuse_at = refuse_at

    def __call__(self, plan: Plan, audit: RecordSink) -> None:
        self.plans.append(plan.hash)

    def before_call(self, spec: Any, args: dict[str, Any], step: Any) -> None:
        self.calls.append(step.id)
        if step.id == self.refuse_at:
            raise ApprovalMissing(f"no approval left for {step.id}")


def test_a_consuming_gate_is_asked_before_each_calls_side_effect() -> None:
    CALLED.clear()
    gate = Counting()
    result = Engine(REGISTRY, approval=gate).execute(PLAN, AuditLog())
    assert result.ok and len(gate.plans) == 1
    assert gate.calls == ["read_balance", "send_transfer"] and CALLED == ["balance", "transfer"]


def test_its_refusal_stops_the_write_before_its_call() -> None:
    CALLED.clear()
    gate = Counting(refuse_at="send_transfer")
    result = Engine(REGISTRY, approval=gate).execute(PLAN, AuditLog())
    assert result.status == "failed_closed" and result.reason is not None
    assert result.reason.value == "approval_missing" and CALLED == ["balance"]


def test_a_plan_check_alone_is_a_plan_approval_and_consumes_nothing() -> None:
    CALLED.clear()
    checked: list[str] = []

    def check(plan: Plan, audit: RecordSink) -> None:
        checked.append(plan.hash)

    engine = Engine(REGISTRY, approval=check)
    assert not isinstance(check, ConsumingApproval) and engine.consume_approval is None
    assert engine.execute(PLAN, AuditLog()).ok and len(checked) == 1 and CALLED == ["balance", "transfer"]


def test_the_deployments_gate_declares_that_it_consumes(tmp_path: Path) -> None:
    gate: PlanApproval = approval_hook(ApprovalStore(tmp_path / "approvals.jsonl"), registry=REGISTRY)
    assert isinstance(gate, ConsumingApproval)
    assert Engine(REGISTRY, approval=gate).consume_approval == gate.before_call
