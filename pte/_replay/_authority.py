"""What a replay may take from a log and what only from the deployment.

A log is evidence, never authority. What the deployment says (its catalogue, policy, engine
config, model, approval and endorsement stores, trusted keys) comes from a `pte.Deployment`
(its `authority`: `authority_of`); `engine_for` builds the replaying engine from those parts,
falling back to the recorded values only where a replay runs nothing. Recorded ``approval``
records are re-checked as evidence (`_RecordedApprovals`): signature, catalogue fingerprint,
expiry; a recorded refusal is reproduced word for word (repeating a refusal grants nothing).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from pte._audit import (
    Approval,
    ProcedureApproval,
    RecordSink,
    current_config,
    current_policy,
    current_run_started,
    record_format,
)
from pte._audit import records as rec
from pte._catalogue import Registry, ToolSpec, expand_run_started, stored_contents
from pte._core import (
    ApprovalConsumed,
    ApprovalMissing,
    ApprovalRejected,
    FailedClosed,
    LLMError,
    LogEnded,
    ReasonCode,
    TrustedKeys,
    canonical_json,
    canonical_json_v1,
)
from pte._execution import ToolInvoker
from pte._plan import Plan, recorded_procedures
from pte._policy import (
    Endorsement,
    EndorsementRejected,
    EndorsementRequest,
    Policy,
    catalogue_fingerprint,
    procedure_cover,
    procedure_fingerprint,
    requires_approval,
)
from pte._run import Engine, EngineConfig, LLMClient, LLMResponse, ReplayClient

__all__ = ["authority_of", "engine_for", "llm_for", "recorded_run_parts", "resolved", "run_execution"]


def recorded_registry(run_started: Mapping[str, Any]) -> Registry:
    # Format 2: the full catalogue is stored by hash (in this record, or an earlier run's).
    expanded = current_run_started(expand_run_started(run_started, stored_contents([run_started])))
    registry = Registry(ToolSpec.from_record(entry) for entry in expanded.get("tools", ()))
    procedures = recorded_procedures(expanded.get("config") or {}, registry)
    return registry.with_procedures(procedures) if procedures else registry


def recorded_policy(registry: Registry, recorded: Any) -> Policy:
    # Read through the reader of older records (its mode stated); None: the run recorded none.
    base = Policy.from_registry(registry, default="open")
    if recorded is None:
        return base
    return base.with_document(current_policy(recorded), source="<recorded policy>", ignore_unknown=True)


def authority_of(deployment: Any) -> dict[str, Any]:
    """The parts a replay or resume acts under: `deployment.authority` (a `pte.Deployment`, from
    a folder, given by its parts or from a run's record; `pte._deploy._deployment_parts.PARTS`),
    or none at all (every part the run's recorded one)."""
    return dict(deployment.authority) if deployment is not None else {}


def resolved(parts: Mapping[str, Any], started: Mapping[str, Any]) -> tuple[Registry, Policy, EngineConfig]:
    """The registry, policy and engine config a replay runs with: the deployment's parts, the
    recorded ones where it gives none (a replay that runs nothing)."""
    recorded = started.get("config") or {}
    given = parts.get("registry")
    registry = given if given is not None else recorded_registry(started)
    if parts.get("policy") is not None:
        policy = parts["policy"]
    elif given is not None:
        policy = Policy.from_registry(registry)
    else:
        policy = recorded_policy(registry, recorded.get("policy"))
    config = parts["config"] if parts.get("config") is not None else EngineConfig.from_dict(recorded)
    if parts.get("specialists") is not None:
        config = replace(config, specialists=tuple(parts["specialists"]))
    return registry, policy, config


def run_execution(
    recorded: Mapping[str, Any],
    max_concurrency: int | None = None,
    serial_writes: bool | None = None,
    *,
    cap: bool = False,
) -> tuple[int, bool]:
    """How a re-driven run's steps overlap: its ``run_started.config`` (`recorded`, read through
    `pte._audit.current_config`), narrowed by what the caller gives (a smaller `max_concurrency`,
    `serial_writes` turned on); None: the run's own. A wider value is refused
    (`DeploymentError`), or with `cap` (a worker's own settings: its limit, not a request)
    narrowed to the run's."""
    from pte._core import DeploymentError

    config = current_config(recorded)
    own_limit, own_serial = config["max_concurrency"], config["serial_writes"]
    if type(own_limit) is not int or own_limit < 1 or type(own_serial) is not bool:
        raise DeploymentError(
            f"the run's recorded max_concurrency {own_limit!r} / serial_writes {own_serial!r} "
            "are not a positive whole number and a boolean: not resumed"
        )
    limit = own_limit if max_concurrency is None else max_concurrency
    if limit > own_limit:
        if not cap:
            raise DeploymentError(
                f"max_concurrency {limit} is wider than the {own_limit} the run recorded: a resume may "
                "only narrow how its run runs (a smaller limit)"
            )
        limit = own_limit
    serial = own_serial if serial_writes is None else serial_writes
    if own_serial and not serial:
        if not cap:
            raise DeploymentError(
                "serial_writes off, but the run recorded serial_writes on: a resume may only narrow "
                "how its run runs (turn serial writes on, never off)"
            )
        serial = True
    return limit, serial


def recorded_run_parts(
    records: Sequence[Mapping[str, Any]], stored: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """What a run recorded, as `pte.Deployment.from_run_record` gives it: its catalogue, policy,
    engine config, model and endpoint."""
    started = _expanded(records, stored, required=True)
    registry, policy, config = resolved({}, started)
    recorded = started.get("config") or {}
    model, llm = recorded.get("model"), recorded.get("llm")
    return {
        "registry": registry,
        "policy": policy,
        "config": config,
        "model": model if isinstance(model, str) else None,
        "llm": dict(llm) if isinstance(llm, Mapping) else None,
    }


_APPROVAL_REASONS = frozenset(
    {
        ReasonCode.APPROVAL_MISSING.value,
        ReasonCode.APPROVAL_CONSUMED.value,
        ReasonCode.APPROVAL_REJECTED.value,
    }
)


class _RecordedApprovals:
    """Replay's approval gate: recorded approvals are evidence, re-checked, never trusted.

    For each plan that needs approval (by the replay's catalogue), the next recorded
    ``approval`` record of that plan hash is rebuilt into an `Approval` and must bind this
    plan and this catalogue's fingerprint, carry a signature that verifies (under `keys`
    when given, else under its own public key, noted in `unchecked`; unsigned only when no
    keys are given) and not be expired when it was recorded. The record the engine then writes is rebuilt from
    the checked approval, so every recorded field (by, at, signed, ...) is compared.
    """

    def __init__(
        self,
        records: Sequence[Mapping[str, Any]],
        registry: Registry,
        policy: Policy,
        keys: TrustedKeys | None,
    ) -> None:
        self._recorded: dict[str, deque[Mapping[str, Any]]] = {}
        self._rejected: dict[str, Mapping[str, Any]] = {}
        for record in records:
            if record.get("type") == "approval":
                self._recorded.setdefault(str(record.get("plan_hash")), deque()).append(record)
            elif record.get("type") == "approval_rejected":
                self._rejected[str(record.get("plan_hash"))] = record
        self._registry = registry
        self._policy = policy
        self._keys = keys if keys else None
        #: Signed approvals checked only under the key their record embeds (no trusted keys).
        self.unchecked: list[str] = []
        # A format 1 run's approvals bound a fingerprint taken over format 1's canonical JSON.
        first = records[0] if records else {}
        self._canonical = canonical_json if record_format(first) == 2 else canonical_json_v1
        # How the run ended, when it ended for want of an approval: replay reproduces that
        # refusal word for word (repeating a refusal grants nothing).
        self._refusal: Mapping[str, Any] | None = None
        for record in records:
            if record.get("type") == "run_finished" and record.get("reason") in _APPROVAL_REASONS:
                self._refusal = record

    def __call__(self, plan: Plan, audit: RecordSink) -> None:
        rejection = self._rejected.get(plan.hash)
        if rejection is not None:  # a paused run a person rejected (pte._deploy): refusing grants nothing
            audit.write(
                rec.approval_rejected(
                    plan_hash=plan.hash,
                    by=rejection.get("by"),
                    at=rejection.get("at"),
                    note=rejection.get("note"),
                )
            )
            ended = self._refusal
            if ended is not None and ended.get("reason") == ReasonCode.APPROVAL_REJECTED.value:
                raise ApprovalRejected(str(ended.get("message") or ""))
            raise ApprovalRejected(f"plan {plan.hash} was rejected by {rejection.get('by')} (recorded run)")
        needing = requires_approval(plan, self._registry)
        if not needing:
            return
        queue = self._recorded.get(plan.hash)
        if not queue:
            if self._refusal is not None:
                message = str(self._refusal.get("message") or "")
                if self._refusal.get("reason") == ReasonCode.APPROVAL_CONSUMED.value:
                    raise ApprovalConsumed(message)
                raise ApprovalMissing(message)
            raise ApprovalMissing(
                f"plan {plan.hash} was not approved (recorded run); {needing} require approval"
            )
        if "procedure" in queue[0]:
            self._procedure_approvals(plan, audit, queue, needing)
            return
        record = queue.popleft()
        try:
            approval = Approval.from_record(record)
        except (TypeError, ValueError) as exc:
            raise ApprovalMissing(f"the recorded approval of plan {plan.hash} is malformed: {exc}") from None
        if approval.run is not None and approval.run != audit.run_id:
            raise ApprovalMissing(
                f"the recorded approval of plan {plan.hash} approves run {approval.run}, "
                f"not this run {audit.run_id}"
            )
        fingerprint = catalogue_fingerprint(self._registry, plan, self._policy, canonical=self._canonical)
        if approval.catalogue != fingerprint:
            raise ApprovalMissing(
                f"the recorded approval of plan {plan.hash} binds catalogue {approval.catalogue}, "
                f"but the replayed tools and policy fingerprint to {fingerprint}"
            )
        signed = self._checked(approval, record, f"the recorded approval of plan {plan.hash}")
        audit.write(rec.approval(approval.to_dict(), approval_id=approval.id, signed=signed))

    def _procedure_approvals(
        self, plan: Plan, audit: RecordSink, queue: deque[Mapping[str, Any]], needing: list[str]
    ) -> None:
        """The plan ran under approvals of procedure versions: one recorded record per version its
        approval-needing steps were inlined from (in plan order), each re-checked against the
        replayed plan's inlining (never against the record's `steps` or `version` alone)."""
        cover = procedure_cover(plan, self._registry)
        if cover is None:
            raise ApprovalMissing(
                f"plan {plan.hash} ran under procedure approvals (recorded run), but {needing} "
                "are not all inlined from procedure calls in the replayed plan"
            )
        for (name, version), step_ids in cover.items():
            what = f"the recorded approval of procedure {name} for plan {plan.hash}"
            if not queue or "procedure" not in queue[0]:
                raise ApprovalMissing(f"{what} is missing")
            record = queue.popleft()
            try:
                approval = ProcedureApproval.from_record(record)
            except (TypeError, ValueError) as exc:
                raise ApprovalMissing(f"{what} is malformed: {exc}") from None
            if (approval.procedure, approval.version) != (name, version):
                raise ApprovalMissing(
                    f"{what} approves {approval.procedure} version {approval.version}, but the replayed "
                    f"plan's steps {step_ids} come from version {version}"
                )
            procedure = self._registry.procedures.get(name)
            if procedure is None:  # the origins come from these procedures: defensive
                raise ApprovalMissing(f"{what}: the replayed deployment has no procedure {name}")
            fingerprint = procedure_fingerprint(
                self._registry, procedure, self._policy, canonical=self._canonical
            )
            if approval.catalogue != fingerprint:
                raise ApprovalMissing(
                    f"{what} binds catalogue {approval.catalogue}, but the replayed tools of its body and "
                    f"policy fingerprint to {fingerprint}"
                )
            signed = self._checked(approval, record, what)
            audit.write(
                rec.procedure_approval(
                    approval.to_dict(),
                    approval_id=approval.id,
                    signed=signed,
                    plan_hash=plan.hash,
                    steps=step_ids,
                )
            )

    def _checked(self, approval: Approval | ProcedureApproval, record: Mapping[str, Any], what: str) -> bool:
        """Its signature and expiry, as replay can check them; the `signed` to record."""
        if self._keys is not None:
            if not approval.verify(self._keys):
                raise ApprovalMissing(
                    f"{what} by {approval.by} does not verify under any trusted approval key"
                )
            signed = True
        elif approval.signed:
            if not approval.self_consistent():
                raise ApprovalMissing(f"{what} has a bad signature")
            # No trusted keys: the signature verifies under the key the record embeds, which
            # proves the approval is unaltered since signing, not who signed. The recorded
            # `signed` (verified under the deployment's keys when the run was made) is
            # reproduced, and the report says the approver's key was not checked. A replay
            # without keys runs nothing, so it grants nothing.
            signed = record.get("signed") is True
            self.unchecked.append(f"{approval.by} (key {approval.key_id})")
        else:
            signed = False
        when = record.get("ts")
        if isinstance(when, str):
            try:
                expired = approval.expired(datetime.fromisoformat(when.replace("Z", "+00:00")))
            except ValueError:
                expired = True
            if expired:
                raise ApprovalMissing(f"{what} had expired when it was used")
        return signed


class _ReplayLLM:
    """The recorded LLM answers, presenting the model the run was started with."""

    def __init__(self, recorded: ReplayClient, live: LLMClient | None, model: str | None) -> None:
        self._recorded = recorded
        self._live = live
        self.model = model if model is not None else (live.model if live is not None else recorded.model)
        self.describe: dict[str, Any] | None = None

    def complete(
        self,
        messages: Sequence[Mapping[str, str]],
        *,
        schema: Mapping[str, Any] | None = None,
        schema_name: str = "pte_plan",
    ) -> LLMResponse:
        if self._recorded.remaining:
            return self._recorded.complete(messages, schema=schema, schema_name=schema_name)
        if self._live is None:
            raise LLMError(
                "the run needs another LLM call to go on; give a model/endpoint (or --replay-responses)"
            )
        return self._live.complete(messages, schema=schema, schema_name=schema_name)


def _expanded(
    records: Sequence[Mapping[str, Any]], stored: Mapping[str, Any] | None, *, required: bool = False
) -> dict[str, Any]:
    """The run's ``run_started`` in full, from its own stored contents or earlier runs' (`stored`).

    `required`: the recorded catalogue and policy are what the replay will use (no deployment
    catalogue), so a reference to content that is not at hand is an error, not a silent
    replay against the fingerprints alone.
    """
    contents = stored_contents(records)
    if stored:
        contents = {**stored, **contents}
    first = records[0]
    if required:
        missing = [
            h
            for h in (first.get("catalogue"), first.get("policy"))
            if isinstance(h, str) and h not in contents
        ]
        if missing:
            raise ValueError(
                f"the run refers to stored content {', '.join(missing)} that the log does not hold before it"
            )
    return current_run_started(expand_run_started(first, contents))


def llm_for(
    records: Sequence[Mapping[str, Any]],
    live: LLMClient | None,
    parts: Mapping[str, Any],
    *,
    stored: Mapping[str, Any] | None = None,
) -> _ReplayLLM | None:
    """The replaying LLM: the recorded answers, then `live`; the model of the deployment's
    `parts` (`authority_of`), else the recorded one."""
    started = _expanded(records, stored)
    config = started.get("config") or {}
    if "model" not in config and live is None and parts.get("model") is None:
        return None  # the run had no LLM (execute): neither has its replay
    model = parts["model"] if parts.get("model") is not None else config.get("model")
    llm = _ReplayLLM(ReplayClient.from_audit(records), live, model if isinstance(model, str) else None)
    described = parts["llm"] if parts.get("llm") is not None else config.get("llm")
    if isinstance(described, Mapping):
        llm.describe = dict(described)  # the endpoint the run was started with (no secrets)
    return llm


def engine_for(
    run_records: Sequence[Mapping[str, Any]],
    deployment: Any,
    llm: LLMClient | None,
    invoker: ToolInvoker,
    checks_factory: Callable[[Registry, Mapping[str, Any]], Sequence[Any]] | None,
    *,
    registry: Registry | None = None,
    gate: Callable[[Plan, RecordSink], None] | None = None,
    stored: Mapping[str, Any] | None = None,
    max_concurrency: int | None = None,
    serial_writes: bool | None = None,
    cap_execution: bool = False,
) -> Engine:
    """The engine re-driving `run_records`, made by `deployment.engine` (a `pte.Deployment`: the
    one place an engine is made; this area, below it, cannot make one). Its parts, the run's
    recorded ones where it names none (`resolved`: a replay that runs nothing); `registry`: the
    catalogue the caller re-drives with (a narrowing of the deployment's, when it names one).
    `max_concurrency`, `serial_writes`: how the live part of a resume runs, narrowing the run's
    recorded ones (`run_execution`; None: the run's own; `cap_execution`: cap, never refuse)."""
    if deployment is None:
        raise TypeError(
            "replay and resume need a pte.Deployment to make their engine "
            "(pte.Deployment.of() for the run's recorded authority: pte.replay_file gives that one)"
        )
    parts = authority_of(deployment)
    if registry is not None:
        parts["registry"] = registry
    started = _expanded(run_records, stored, required=parts.get("registry") is None)
    registry, policy, config = resolved(parts, started)
    approvals = (
        gate if gate is not None else _RecordedApprovals(run_records, registry, policy, parts.get("keys"))
    )
    checks = checks_factory(registry, started.get("config") or {}) if checks_factory else ()
    limit, serial = run_execution(
        started.get("config") or {}, max_concurrency, serial_writes, cap=cap_execution
    )
    endorsement = None
    if (started.get("config") or {}).get("endorsement") is True:  # the run could pause for a person
        live = parts.get("endorsements")
        resuming = getattr(live, "resuming", None)  # a request expires when its pause says (#33)
        live = resuming(run_records) if callable(resuming) else live
        endorsement = live or RecordedEndorsements(run_records, parts.get("keys"))
    engine: Engine = deployment.engine(
        llm,
        registry=registry,
        config=config,
        invoker=invoker,
        checks=checks,
        # The deployment's own policy when it names one; else the recorded one (`resolved`).
        policy=policy if parts.get("policy") is None else None,
        approval=approvals,
        endorsement=endorsement,  # None: the run could not pause for a person, nor can its replay
        tracer_provider=parts.get("tracer_provider"),
        # The run's recorded concurrency (what replay compares), narrowed for a resume's live part.
        max_concurrency=limit,
        serial_writes=serial,
        # The run's binding as recorded: resume compared it with the deployment in hand first
        # (`check_deployment`); replay reproduces it (it is evidence, not authority).
        recorded=started,
    )
    return engine


class RecordedEndorsements:
    """Replay's endorsement gate: recorded endorsements are evidence, re-checked, never trusted.

    Each call that needs endorsement takes the next recorded ``endorsement`` (or
    ``endorsement_rejected``) record for its step and element; it must bind this run, step,
    element and the replayed values' hash, and its signature must verify (under `keys` when
    given, else under the key the record embeds). A call the recording has no decision for
    is where the recorded run paused: the replay ends there.
    """

    def __init__(self, records: Sequence[Mapping[str, Any]], keys: TrustedKeys | None = None) -> None:
        self._recorded: dict[tuple[str, Any], list[Mapping[str, Any]]] = {}
        for record in records:
            if record.get("type") in ("endorsement", "endorsement_rejected"):
                key = (str(record.get("step_id")), record.get("element"))
                self._recorded.setdefault(key, []).append(record)
        self.keys = keys if keys else None

    def at_call(self, request: EndorsementRequest, audit: RecordSink) -> None:
        queue = self._recorded.get((request.step_id, request.element))
        if not queue:
            raise LogEnded(
                f"the recorded run paused for an endorsement at step {request.step_id!r} ({request.tool})"
            )
        record = queue.pop(0)
        try:
            made = Endorsement.from_record(record)
        except (TypeError, ValueError) as exc:
            raise FailedClosed(
                ReasonCode.NEEDS_REVIEW, f"a recorded endorsement is malformed: {exc}"
            ) from None
        if not made.binds(audit.run_id, request.step_id, request.element, request.value_hash):
            raise FailedClosed(
                ReasonCode.NEEDS_REVIEW,
                f"the recorded endorsement by {made.by} does not bind this run's call at step "
                f"{request.step_id!r} with these values",
            )
        if self.keys is not None:
            if not made.verify(self.keys):
                raise FailedClosed(
                    ReasonCode.NEEDS_REVIEW,
                    f"the recorded endorsement by {made.by} does not verify under any trusted approval key",
                )
            signed = True
        elif made.signed:
            if not made.self_consistent():
                raise FailedClosed(
                    ReasonCode.NEEDS_REVIEW, f"the recorded endorsement by {made.by} has a bad signature"
                )
            signed = record.get("signed") is True
        else:
            signed = False
        if made.decision == "rejected":
            audit.write(rec.endorsement_rejected(made.to_dict(), endorsement_id=made.id, signed=signed))
            raise EndorsementRejected(
                f"{made.by} rejected the value of {request.tool} at step {request.step_id!r}"
                + (f": {made.note}" if made.note else "")
            )
        audit.write(rec.endorsement(made.to_dict(), endorsement_id=made.id, signed=signed))
