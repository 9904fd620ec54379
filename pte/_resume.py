"""Resume: finish an interrupted run, acting only on a verified log and the deployment's authority."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from pte._approval import requires_approval
from pte._audit import AuditLog
from pte._engine import RunResult
from pte._errors import ApprovalMissing, FailedClosed, ReasonCode
from pte._executor import LiveInvoker
from pte._fingerprint import stored_contents
from pte._llm import LLMClient
from pte._plan import Plan
from pte._registry import Registry
from pte._replay import CheckingAuditLog, RecordedInvoker, _drive, _iter_runs, _verified
from pte._replay_authority import Deployment, _engine_for, _llm_for

__all__ = ["resume_file"]


def resume_file(
    path: str | Path,
    registry: Registry,
    *,
    llm: LLMClient | None = None,
    checks_factory: Callable[[Registry, Mapping[str, Any]], Sequence[Any]] | None = None,
    deployment: Deployment | None = None,
) -> RunResult:
    """Finish the last run of a log that has no `run_finished`, appending to the same log.

    The log is verified first (`LogNotIntact`). Catalogue, policy, config and approvals are
    the deployment's (`deployment`; by default `registry` with its own guarded policy, the
    recorded engine config and no approval store, so a plan needing approval fails closed):
    the recorded prefix must be what this deployment decides, else `ReplayDivergence` and
    nothing is appended. Completed steps are not re-run; an in-flight `write` step of a
    non-idempotent tool ends the run `failed_closed(needs_review)`. Raises `FailedClosed`
    when the log holds no run or its last run is already sealed.
    """
    _verified(path)
    run: list[tuple[int, dict[str, Any]]] = []
    stored: dict[str, Any] = {}  # contents earlier runs stored (format 2 stores each once per log)
    for each in _iter_runs(path):
        run = each  # the last run: only it can be unfinished
        stored.update(stored_contents(record for _, record in each))
    if not run:
        raise FailedClosed(ReasonCode.NEEDS_REVIEW, f"{path} holds no run to resume")
    records = [r for _, r in run]
    if any(r.get("type") == "run_finished" for r in records):
        raise FailedClosed(
            ReasonCode.NEEDS_REVIEW, f"the last run in {path} is already finished; nothing to resume"
        )
    deployment = deployment if deployment is not None else Deployment()
    deployment = replace(deployment, registry=registry)
    gate = deployment.approvals
    run_id = str(records[0]["run_id"])
    live_invoker = gate.guard(LiveInvoker()) if gate is not None else LiveInvoker()
    invoker = RecordedInvoker(records, live=live_invoker, resume=True)
    engine = _engine_for(
        records,
        deployment,
        _llm_for(records, llm, deployment, stored=stored),
        invoker,
        checks_factory,
        gate=gate or _no_gate(registry),
        stored=stored,
    )
    with AuditLog(path, run_id=run_id, repair_partial_tail=True) as forward:
        audit = CheckingAuditLog(run, run_id=run_id, forward=forward)
        return _drive(engine, records[0], audit)


def _no_gate(registry: Registry) -> Callable[[Plan, AuditLog], None]:
    """No approval store: a plan that needs approval fails closed, whatever the log says."""

    def hook(plan: Plan, audit: AuditLog) -> None:
        needing = requires_approval(plan, registry)
        if needing:
            raise ApprovalMissing(
                f"plan {plan.hash} calls {needing}, which require an approved plan, and no approval "
                "store is configured"
            )

    return hook
