"""Runs in a store: approvals that pause a run, decisions, and resuming the same run by id.

A run whose accepted plan calls a tool that requires approval, and that no approval
counts for yet, is not failed: the approval gate appends ``run_paused`` (the plan hash, the
tools needing approval, until when an approval counts), makes it durable and stops. The
store then lists the run as ``awaiting_approval`` with its compiled plan and hash
(``pte approvals list``). A person decides (``pte approve RUN_ID --by NAME`` or
``--reject``); the decision goes to the store, bound to the run and the exact plan hash.
``pte resume RUN_ID`` continues *the same run*: its recorded part is verified and re-driven
(nothing already done runs again), ``run_resumed`` marks the hand-over, and

- approved (before the deadline): ``approval`` is recorded and the plan runs;
- rejected: ``approval_rejected`` is recorded and the run ends
  ``failed_closed(approval_rejected)``;
- no decision by the deadline: the run ends ``failed_closed(approval_missing)``.

Authority comes from the deployment: decisions are read from the store, never from the
run's own records. An approving decision carries a full approval (`pte._policy._approval`): it binds
the plan hash and the catalogue fingerprint of the plan's tools, expires, and is Ed25519
signed by the approver's key; it counts only when it verifies under the deployment's
trusted keys (when configured) and binds the deployment's catalogue and policy.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pte._audit import Approval, RecordSink
from pte._audit import records as rec
from pte._catalogue import Registry
from pte._core import (
    ApprovalMissing,
    ApprovalRejected,
    FailedClosed,
    ReasonCode,
    ReplayDivergence,
    RunPaused,
    SigningKey,
    TrustedKeys,
)
from pte._execution import LiveInvoker
from pte._plan import Plan
from pte._policy import ApprovalGate, ApprovalStore, catalogue_fingerprint, make_approval, requires_approval
from pte._replay import (
    CheckingAuditLog,
    ResumingInvoker,
    RunView,
    drive_run,
    engine_for,
    llm_for,
    recorded_policy,
    recorded_registry,
)
from pte._run import Engine, LLMClient, RunResult, seal_refused
from pte.stores import Decision, Store, StoreError, check_run_id

__all__ = [
    "DEFAULT_APPROVAL_TTL",
    "PausedRun",
    "PausingGate",
    "awaiting_plan",
    "decide",
    "end_run",
    "pausing_gate",
    "resume_run",
    "run_in_store",
]

#: How long a paused run waits for a decision by default.
DEFAULT_APPROVAL_TTL = timedelta(hours=24)


@dataclass
class PausedRun:
    """The result of a run that stopped to wait for a person (`RunResult`'s counterpart)."""

    run_id: str
    plan_hash: str
    tools: list[str]
    expires_at: str
    status: str = "awaiting_approval"

    ok = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "status": self.status,
            "plan_hash": self.plan_hash,
            "tools": self.tools,
            "expires_at": self.expires_at,
        }


def _parse_time(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)


def _format_time(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def pausing_gate(
    store: Store,
    registry: Registry,
    *,
    keys: TrustedKeys | None = None,
    policy: Any = None,
    ttl: timedelta = DEFAULT_APPROVAL_TTL,
    approvals: ApprovalStore | None = None,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> PausingGate:
    """The approval gate for `Engine(approval=...)` of runs kept in `store` (a `PausingGate`).

    A plan that needs no approval passes. Otherwise the decisions the store holds for this
    run and this exact plan hash decide: a rejection ends the run `approval_rejected`; an
    approval given before the deadline that binds this plan and this deployment's catalogue
    (and verifies under `keys` when configured) is recorded and the plan runs. The
    deployment's approval store `approvals` (the ``pte approve PLAN_FILE`` and ``pte approve
    --procedure FILE`` way) also counts: an approval of this run's plan, or approvals of the
    procedure versions every step needing approval was inlined from; their non-idempotent
    writes consume them (keyed by run and step, `PausingGate.before_call`). With none of
    these the run pauses (see the module docs); once the deadline has passed it ends
    `approval_missing` instead.
    """
    from pte._policy import Policy

    policy = policy if policy is not None else Policy.from_registry(registry)
    plan_approvals = (
        ApprovalGate(approvals, registry, keys=keys, policy=policy, clock=clock)
        if approvals is not None
        else None
    )
    # Checks decisions' approvals exactly as a file-store approval is checked (no consumption:
    # a decision is bound to its run, whose completed steps never run again).
    checker = ApprovalGate(ApprovalStore(os.devnull), registry, keys=keys, policy=policy, clock=clock)
    return PausingGate(store, registry, keys, ttl, plan_approvals, checker, clock)


@dataclass(frozen=True)
class PausingGate:
    """The approval gate of runs in a store (`pausing_gate` builds it): `Engine(approval=...)`.

    Its `before_call` is asked before each call's side effect (the run's call gate,
    `pte._run._call_gate`; `resume_run` too): a write that runs under an approval of the
    deployment's approval store consumes it before the call starts, exactly as for a log run
    (`pte._policy._gate.ApprovalGate`).
    """

    store: Store
    registry: Registry
    keys: TrustedKeys | None
    ttl: timedelta
    plan_approvals: ApprovalGate | None
    checker: ApprovalGate
    clock: Callable[[], datetime]

    def before_call(self, spec: Any, args: dict[str, Any], step: Any) -> None:
        """Consume the deployment-store approval a non-idempotent write of this run runs under."""
        if self.plan_approvals is not None:
            self.plan_approvals.before_call(spec, args, step)

    def __call__(self, plan: Plan, audit: RecordSink) -> None:
        store, keys, checker, plan_approvals = self.store, self.keys, self.checker, self.plan_approvals
        tools = requires_approval(plan, self.registry)
        if not tools:
            return
        run_id = audit.run_id
        info = store.run(run_id)
        paused_for_this_plan = (
            info is not None and info.status == "awaiting_approval" and info.plan_hash == plan.hash
        )
        deadline = info.expires_at if paused_for_this_plan and info is not None else None
        for decision in store.decisions(run_id):
            if decision.plan_hash != plan.hash:
                continue
            if decision.decision == "rejected":
                audit.write(
                    rec.approval_rejected(
                        plan_hash=plan.hash, by=decision.by, at=decision.at, note=decision.note
                    )
                )
                raise ApprovalRejected(
                    f"plan {plan.hash} ({', '.join(tools)}) was rejected by {decision.by} at {decision.at}"
                    + (f": {decision.note}" if decision.note else "")
                )
        for decision in store.decisions(run_id):
            if decision.plan_hash != plan.hash or decision.decision != "approved":
                continue
            if deadline is not None and decision.at > deadline:
                continue  # given after the deadline: does not count
            approval = _decision_approval(store, decision, plan, checker, run_id)
            if approval is None:
                continue
            audit.write(rec.approval(approval.to_dict(), approval_id=approval.id, signed=keys is not None))
            return
        if plan_approvals is not None:
            try:
                plan_approvals(plan, audit)
                return
            except ApprovalMissing:
                pass
        now = self.clock()
        if deadline is not None and now > _parse_time(deadline):
            raise ApprovalMissing(
                f"plan {plan.hash} ({', '.join(tools)}) was not approved before its deadline {deadline}"
            )
        expires_at = deadline or _format_time(now + self.ttl)
        audit.write(
            rec.run_paused(
                reason="awaiting_approval",
                plan_hash=plan.hash,
                tools=tools,
                expires_at=expires_at,
                message=f"{', '.join(tools)} require an approved plan; waiting for a person "
                f"(pte approve {run_id}) until {expires_at}",
            )
        )
        audit.sync()
        raise RunPaused(run_id, plan, tools, expires_at)


def _decision_approval(
    store: Store, decision: Decision, plan: Plan, checker: ApprovalGate, run_id: str
) -> Approval | None:
    """The stored approval behind an approving decision, if it lets `plan` run here as `run_id`.

    A decision row is a pointer, not evidence: what counts is an approval that names this
    run itself (under the approver's signature when keys are configured). A row copied to
    another run, or an approval of another run of the same plan, lets nothing run.
    """
    for data in getattr(store, "approvals_data", lambda _h: [])(decision.plan_hash):
        try:
            approval = Approval.from_dict(data)
        except ValueError:
            continue  # an old (HMAC) or malformed approval never counts
        if (
            approval.run == run_id
            and approval.by == decision.by
            and approval.at == decision.at
            and checker.refusal(approval, plan, run_id) is None
        ):
            return approval
    return None


def awaiting_plan(store: Store, run_id: str) -> tuple[str, dict[str, Any]]:
    """The plan hash and plan run `run_id` waits with, read from its verified records.

    Never from the ``pte_runs`` columns (a copy any writer of the database can change): the
    run's chain must verify, its last record must be ``run_paused``, and the plan shown is the
    ``plan_accepted`` record's plan whose canonical JSON hashes to the paused plan hash. So what
    a person reviews is exactly what the hash they sign names, and what resume re-drives.
    `StoreError` when the run cannot show such a plan.
    """
    from pte._core import canonical_json, sha256_hex

    report = store.verify(run_id)
    if not report.intact:
        raise StoreError(f"run {run_id} does not verify in {store.describe()}: {report.issue}")
    view = RunView.fold(run_id, store.records(run_id))
    if view.paused is None:
        raise StoreError(f"run {run_id} is not waiting for approval (its last record is not run_paused)")
    plan_hash = view.paused.get("plan_hash")
    for accepted in reversed(view.plans):
        plan = accepted.plan
        if (
            accepted.plan_hash == plan_hash
            and isinstance(plan, dict)
            and sha256_hex(canonical_json(plan)) == plan_hash
        ):
            return str(plan_hash), plan
    raise StoreError(
        f"run {run_id} records no plan that hashes to {plan_hash} (a redacted or rewritten plan): "
        "there is nothing a person could review and approve"
    )


def decide(
    store: Store,
    run_id: str,
    *,
    by: str,
    approve: bool,
    note: str | None = None,
    signing_key: SigningKey | None = None,
    plan_hash: str | None = None,
    now: datetime | None = None,
    valid_for: timedelta | None = None,
) -> Decision:
    """Record a person's decision on the plan `run_id` waits with. Raises `StoreError` when the
    run is not awaiting approval, `plan_hash` (what the person reviewed) is not the plan that
    waits, or the deadline has passed."""
    check_run_id(run_id)
    info = store.run(run_id)
    if info is None:
        raise StoreError(f"no run {run_id} in {store.describe()}")
    if info.status == "awaiting_endorsement":
        raise StoreError(
            f"run {run_id} is awaiting_endorsement: it waits for a person to endorse a value, not for an "
            f"approval of its plan (review it with: pte endorse {run_id})"
        )
    if info.status != "awaiting_approval" or info.plan_hash is None:
        raise StoreError(f"run {run_id} is {info.status}, not awaiting approval")
    # What waits is what the run's verified records say, never the run table's copy.
    waiting_hash, waiting_plan = awaiting_plan(store, run_id)
    if plan_hash is not None and plan_hash != waiting_hash:
        raise StoreError(
            f"run {run_id} waits with plan {waiting_hash}, not {plan_hash}: review the plan it waits with"
        )
    moment = now if now is not None else datetime.now(UTC)
    if info.expires_at is not None and moment > _parse_time(info.expires_at):
        raise StoreError(
            f"run {run_id}'s approval deadline {info.expires_at} has passed; resume it to end it"
        )
    # The approval binds the catalogue the run was planned against (its recorded tools and
    # policy): if the deployment's differs by the time the run resumes, it does not count.
    records = store.records(run_id)
    started = records[0] if records else {}
    recorded = recorded_registry(started)
    tools = [s.get("tool") for s in waiting_plan.get("steps", ()) if isinstance(s, dict)]
    missing = [t for t in tools if not isinstance(t, str) or t not in recorded]
    if missing:
        raise StoreError(f"run {run_id}'s plan calls tools its record does not describe: {missing}")
    catalogue = catalogue_fingerprint(recorded, [str(t) for t in tools], _run_policy(records, recorded))
    if valid_for is None and info.expires_at is not None:
        valid_for = max(_parse_time(info.expires_at) - moment, timedelta(seconds=1))
    approval = make_approval(
        waiting_hash,
        by,
        catalogue=catalogue,
        run=run_id,
        signing_key=signing_key,
        at=moment,
        valid_for=valid_for or DEFAULT_APPROVAL_TTL,
    )
    decision = Decision(run_id, waiting_hash, "approved" if approve else "rejected", by, approval.at, note)
    store.decide(decision, approval.to_dict() if approve else None)
    return decision


def _run_policy(records: Sequence[Mapping[str, Any]], recorded: Registry) -> Any:
    """The policy the run was planned under, as its gate fingerprints it.

    Format 2 stores the policy by hash (``run_started.policy``, the document in ``stored``);
    `expand_run_started` puts it back in ``config.policy``. A run that recorded none ran under
    its tools' own guarded declarations (`Policy.from_registry`), which is what the gate uses.
    """
    from pte._catalogue import expand_run_started, stored_contents
    from pte._policy import Policy

    started = expand_run_started(records[0], stored_contents(records)) if records else {}
    document = (started.get("config") or {}).get("policy")
    if document is None:
        return Policy.from_registry(recorded)
    return recorded_policy(recorded, document)


def run_in_store(
    engine: Engine,
    store: Store,
    *,
    run_id: str | None = None,
    plan_text: str | None = None,
    request: str | None = None,
    anchors: Any = None,
) -> RunResult | PausedRun:
    """Start a run in `store`: `engine.execute(plan_text)` or `engine.run(request)`.

    `anchors`: the deployment's anchors (`pte._audit._anchors`): the run signs its progress there."""
    with store.audit_log(run_id, anchors=anchors) as audit:
        try:
            if plan_text is not None:
                return engine.execute(plan_text, audit)
            return engine.run(request or "", audit)
        except RunPaused as pause:
            return PausedRun(pause.run_id, pause.plan.hash, pause.tools, pause.expires_at, pause.reason)


def resume_run(
    store: Store,
    run_id: str,
    registry: Registry,
    *,
    gate: Callable[[Plan, RecordSink], None] | None = None,
    llm: LLMClient | None = None,
    checks_factory: Callable[[Registry, Mapping[str, Any]], Sequence[Any]] | None = None,
    policy: Any = None,
    anchors: Any = None,
    endorsements: Any = None,
    deployment: Any = None,
    max_concurrency: int | None = None,
    serial_writes: bool | None = None,
    cap_execution: bool = False,
) -> RunResult | PausedRun:
    """Continue run `run_id` of `store`: verify it, re-drive its records, go on live.

    `max_concurrency`, `serial_writes`: how its live steps run, narrowing the run's recorded ones
    (`pte.resume_file`); `cap_execution`: they are a worker's own limits, which cap the run's
    instead of being refused when wider.

    `deployment`: the deployment in hand (its fingerprint, `pte.Deployment.fingerprint`): a run
    that started under another one is refused, naming what differs (`pte._replay.check_deployment`).

    `anchors`: the deployment's anchors (`pte._audit._anchors`): a run that falls short of them or
    was rewritten is refused, the reads of its unsigned tail are called again, and what the
    resume appends is anchored.

    The run's stored chain must verify first (a tampered run is never acted on). Completed
    steps are not re-run; an interrupted non-idempotent write ends it `needs_review` (as
    `pte.resume_file`). `gate` is the deployment's approval gate (`pausing_gate`);
    `endorsements` its endorsement gate (`pte.EndorsementGate`): a run paused at a call for an
    endorsement continues when a decision in its store binds that call's values.
    """
    check_run_id(run_id)
    report = store.verify(run_id)
    if not report.intact:
        raise FailedClosed(
            ReasonCode.NEEDS_REVIEW, f"run {run_id} does not verify in {store.describe()}: {report.issue}"
        )
    records = store.records(run_id)
    if not records:
        raise FailedClosed(ReasonCode.NEEDS_REVIEW, f"run {run_id} has no records to resume")
    if RunView.fold(run_id, records).finished is not None:
        raise FailedClosed(ReasonCode.NEEDS_REVIEW, f"run {run_id} is already finished; nothing to resume")
    from pte._replay import check_anchors, check_deployment

    _check_same_deployment(run_id, records[0], deployment)
    check_deployment(records, deployment, f"run {run_id} in {store.describe()}")
    anchored, unsigned_after = check_anchors(anchors, run_id, records, f"run {run_id} in {store.describe()}")
    numbered = list(enumerate(records, start=1))
    if unsigned_after is not None:
        from pte._replay import recheck_unsigned_tail

        recheck_unsigned_tail(records, registry, unsigned_after, f"run {run_id} in {store.describe()}")
    # The gate's `before_call` consumes the deployment-store approvals the live part's writes run
    # under (a procedure approval: keyed by run and step, so a resumed write is refused, not
    # re-run); the engine asks it through the run's call gate.
    invoker = ResumingInvoker(records, LiveInvoker())
    from pte._deploy._deployment import Deployment

    # The deployment's parts the caller (a worker, the CLI) holds; its engine is made there.
    parts = {"registry": registry, "policy": policy, "endorsements": endorsements}
    engine = engine_for(
        records,
        Deployment.of(**parts),
        llm_for(records, llm, parts),
        invoker,
        checks_factory,
        gate=gate,
        max_concurrency=max_concurrency,
        serial_writes=serial_writes,
        cap_execution=cap_execution,
    )
    with store.audit_log(run_id, anchors=anchors) as forward:
        forward.anchored = anchored
        audit = CheckingAuditLog(numbered, run_id=run_id, forward=forward)
        try:
            return drive_run(engine, records[0], audit)
        except RunPaused as pause:
            return PausedRun(pause.run_id, pause.plan.hash, pause.tools, pause.expires_at, pause.reason)
        except ReplayDivergence as divergence:
            # Nothing was forwarded: the re-driven records differ before any new one is written.
            raise _not_continuable(run_id, divergence) from None


def _check_same_deployment(run_id: str, started: Mapping[str, Any], deployment: Any) -> None:
    """`FailedClosed(deployment_mismatch)` when the run started under another deployment than
    `deployment`: it cannot continue here (`pte runs` lists it, `pte runs end` ends it)."""
    from pte._audit import deployment_problem

    try:
        problem = deployment_problem(started, deployment)
    except ValueError:
        return  # an unreadable binding: check_deployment refuses it (needs_review)
    if problem is not None:
        raise FailedClosed(ReasonCode.DEPLOYMENT_MISMATCH, problem)


def _not_continuable(run_id: str, divergence: ReplayDivergence) -> FailedClosed:
    """Why a stored run does not go on here: a different ``run_started`` (its tools, their
    catalogue or policy) is another deployment; anything later is a record that does not replay."""
    if divergence.record_type == "run_started":
        return FailedClosed(
            ReasonCode.DEPLOYMENT_MISMATCH,
            f"run {run_id} was started under another deployment than this one: {divergence.field} "
            f"differs (recorded {str(divergence.recorded)[:80]!r}, here {str(divergence.replayed)[:80]!r}); "
            "its tools, their code or the policy changed since",
        )
    return FailedClosed(ReasonCode.NEEDS_REVIEW, f"run {run_id}'s records do not replay here: {divergence}")


def end_run(store: Store, run_id: str, refused: FailedClosed, *, anchors: Any = None) -> bool:
    """End stored run `run_id` ``failed_closed(refused.reason)`` on the record, nothing run.

    For a run that cannot go on here (`DEPLOYMENT_MISMATCH`, a job that does not verify): its
    chain must verify and reach its anchors, then ``run_resumed`` and ``run_finished`` extend
    it. False (nothing written) when the run is ended already or its records cannot be trusted
    (a tampered run is left for a person: ``pte audit verify`` reports it).
    """
    from pte._core import AnchorError

    check_run_id(run_id)
    if not store.verify(run_id).intact:
        return False
    records = store.records(run_id)
    if RunView.fold(run_id, records).finished is not None:
        return False
    try:
        anchored = anchors.check(run_id, records)[0] if anchors is not None else 0
    except AnchorError:
        return False
    with store.audit_log(run_id, anchors=anchors) as audit:
        audit.anchored = anchored
        seal_refused(audit, refused, after_records=len(records))
    return True


def job_engine(
    job: Mapping[str, Any],
    registry: Registry,
    gate: Callable[[Plan, RecordSink], None],
    llm: LLMClient | None = None,
    policy_document: Any = None,
    execution: Mapping[str, Any] | None = None,
) -> Engine:
    """The engine for a submitted job, under the *worker's* policy document (if any) over `registry`.

    `execution`: the worker's ``max_concurrency``/``serial_writes`` (`Engine`), never the job's.

    A job's own ``policy`` is never applied (workers refuse a job whose policy differs from
    theirs). The answer is the plan's result rendered deterministically (no finalizer call).
    Made by `pte.Deployment.engine` (the one place an engine is made), of a deployment given by
    the worker's parts: a worker under a deployment folder uses that deployment's instead."""
    from pte._deploy._deployment import Deployment
    from pte._deploy._jobs import job_policy
    from pte._run import EngineConfig

    worker = Deployment.of(registry=registry, policy=job_policy(registry, policy_document), approvals=gate)
    engine: Engine = worker.engine(llm, config=EngineConfig(llm_answer=False), **dict(execution or {}))
    return engine
