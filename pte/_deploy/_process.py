"""What a worker does with one run id: check the job, then start, resume or end the run.

Everything it acts on comes from its own deployment (`pte.Deployment`: its packs, policy,
approver keys, approval and endorsement stores, anchors and key) or, without one, from
``pte worker``'s flags; never from the job or the message. A job counts only when signed with
the deployment key for this run (`pte._deploy._jobs`); a run that cannot continue under this
deployment ends ``failed_closed(deployment_mismatch)`` on the record instead of failing in the
worker's log.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from pte._audit import anchors_from_env
from pte._catalogue import Registry
from pte._core import FailedClosed, PublicKey, ReasonCode, ToolPackError
from pte._deploy._jobs import deployment_public_key, job_fingerprint, job_refusal
from pte._deploy._runs import (
    DEFAULT_APPROVAL_TTL,
    PausedRun,
    end_run,
    job_engine,
    pausing_gate,
    resume_run,
    run_in_store,
)
from pte._plan import load_procedures
from pte._run import LLMClient
from pte.stores import Store, check_run_id

__all__ = ["is_expired", "process_run"]

_log = logging.getLogger("pte.worker")


def _narrowed(registry: Registry, allow: Sequence[str]) -> Registry:
    """`registry` narrowed to a job's `allow`, with the procedures whose bodies (and the
    procedures they call) use only what is still allowed: a narrower allow-list never lets a
    procedure reach a tool it no longer holds."""
    narrowed = registry.allow(list(allow))
    procedures = dict(registry.procedures)
    while True:
        kept = {
            name: proc
            for name, proc in procedures.items()
            if all(
                str(step.get("tool")) in narrowed or step.get("tool") in procedures
                for step in proc.body["steps"]
            )
        }
        if kept == procedures:
            break
        procedures = kept
    return (
        narrowed.with_procedures(load_procedures(list(procedures.values()), narrowed))
        if procedures
        else narrowed
    )


def _job_registry(job: Mapping[str, Any], served: Sequence[str], registry: Registry) -> Registry:
    wanted = [p for p in job.get("tools") or () if isinstance(p, str)]
    extra = sorted(set(wanted) - set(served))
    if extra:
        raise FailedClosed(
            ReasonCode.TOOL_NOT_ALLOWED,
            f"the job asks for tool packs {extra} this worker does not serve ({', '.join(served)})",
        )
    allow = job.get("allow")
    if not allow:
        return registry
    try:
        return _narrowed(registry, [a for a in allow if isinstance(a, str)])
    except ToolPackError as exc:
        raise FailedClosed(
            ReasonCode.TOOL_NOT_ALLOWED, f"the job allows tools this worker does not serve: {exc}"
        ) from None


def _check_job_policy(job: Mapping[str, Any], policy: Any) -> None:
    """Refuse a job whose policy differs from the worker's: policy is never taken from a job.

    Whoever can submit a job (or write the store) could otherwise open a guarded sink.
    """
    from pte._core import canonical_json

    carried = job.get("policy")
    if carried is not None and canonical_json(carried) != canonical_json(policy):
        raise FailedClosed(
            ReasonCode.POLICY_VIOLATION,
            "the job carries a policy that differs from this worker's (pte worker --policy); "
            "policy comes from the deployment, never from a job",
        )


@dataclass(frozen=True)
class _Authority:
    """What the worker acts under for one run: from its deployment, else from its flags."""

    keys: Any
    job_key: PublicKey | None
    anchors: Any
    fingerprint: str | None
    approvals: Any = None
    endorsements: Any = None
    deployment: Any = None

    @classmethod
    def of(cls, deployment: Any, keys: Any, job_key: PublicKey | None, store: Store) -> _Authority:
        if deployment is None:
            # The worker's deployment key (its environment), never the job's; the chain in the run
            # store when the deployment keeps it there (shared by every worker machine).
            return cls(keys, job_key, anchors_from_env(store=store), None)
        from pte._policy import ApprovalStore

        return cls(
            deployment.approval_keys(),
            deployment_public_key(deployment),
            deployment.anchors(),
            deployment.fingerprint,
            ApprovalStore(deployment.approvals_path),
            deployment.endorsement_gate(),
            deployment,
        )

    def policy(self, registry: Registry) -> Any:
        return self.deployment.policy(registry) if self.deployment is not None else None


def process_run(
    store: Store,
    run_id: str,
    registry: Registry,
    served: Sequence[str],
    *,
    owner: str,
    keys: Any = None,
    ttl: timedelta = DEFAULT_APPROVAL_TTL,
    llm: LLMClient | None = None,
    policy: Any = None,
    execution: Mapping[str, Any] | None = None,
    job_key: PublicKey | None = None,
    require_signed: bool = False,
    deployment: Any = None,
) -> str:
    """Take run `run_id` one step further; returns what happened.

    ``"busy"`` (another worker holds it: retry later), ``"unknown"``, ``"done"`` (already
    ended), ``"waiting"`` (paused, no decision yet), ``"refused"`` (a run whose records cannot
    be trusted: left as it is, for ``pte audit verify``), or the status it reached:
    ``"succeeded"``, ``"failed_closed"``, ``"awaiting_approval"``, ``"awaiting_endorsement"``.

    `deployment` (`pte.Deployment`, `registry` being its registry): the worker acts under it:
    its approver keys, approval and endorsement stores, anchors and key (`keys`, `job_key`
    and `policy` are then not used). Without one: `keys` and `policy` (a document) are the
    worker's flags', the anchors its environment's.
    `job_key`: the deployment's public key; a submitted job counts only when signed by it for
    this run (`pte._deploy._jobs`), else the run ends ``failed_closed(job_signature_invalid)``.
    `require_signed` (``pte worker``): refuse every job when there is no key to check it with.
    No key and False: the caller trusts its store (a library caller that wrote the jobs itself).
    """
    check_run_id(run_id)
    if not store.claim(run_id, owner):
        return "busy"
    try:
        info = store.run(run_id)
        if info is None:
            return "unknown"
        if info.status in ("succeeded", "failed_closed"):
            return "done"
        authority = _Authority.of(deployment, keys, job_key, store)
        anchors = authority.anchors
        job = info.job or {}
        # A started run's authority is its (anchored) records; a job, when there is one, must
        # still be the signed one. A run started by `pte execute --store` has none.
        checking = authority.job_key is not None or require_signed or deployment is not None
        if checking and (info.records == 0 or info.job is not None):
            problem = (
                job_refusal(info.job, run_id, authority.job_key)
                if authority.job_key is not None
                else "this worker has no deployment key to check jobs with (pte init): it runs no job"
            )
            if problem is not None:
                return _end(store, run_id, FailedClosed(ReasonCode.JOB_SIGNATURE_INVALID, problem), anchors)
        if info.status == "awaiting_endorsement" and authority.endorsements is None:
            # Without the deployment's endorsement store, only `pte resume RUN_ID` after
            # `pte endorse` continues it (docs/endorsement.md): re-driving it would pause it again.
            return "waiting"
        if (
            info.status == "awaiting_approval"
            and not store.decisions(run_id)
            and not is_expired(info.expires_at)
        ):
            return "waiting"
        try:
            job_registry = _job_registry(job, served, registry)
            if deployment is None:
                _check_job_policy(job, policy)
            if info.records == 0 and authority.job_key is not None:
                _check_job_deployment(job, authority.fingerprint or job_fingerprint(job_registry, policy))
        except FailedClosed as refused:
            return _end(store, run_id, refused, anchors)
        run_policy = authority.policy(job_registry)
        gate = pausing_gate(
            store,
            job_registry,
            keys=authority.keys,
            ttl=ttl,
            approvals=authority.approvals,
            policy=run_policy,
        )
        if info.records == 0:
            return _start(store, run_id, job, job_registry, gate, llm, policy, execution, authority)
        try:
            result = resume_run(
                store,
                run_id,
                job_registry,
                gate=gate,
                llm=llm,
                anchors=anchors,
                policy=run_policy,
                endorsements=authority.endorsements,
                deployment=deployment,
                # The run's recorded concurrency, capped by the worker's own limits.
                **dict(execution or {}),
                cap_execution=True,
            )
        except FailedClosed as refused:
            if refused.reason is ReasonCode.DEPLOYMENT_MISMATCH:
                return _end(store, run_id, refused, anchors)
            _log.warning("run %s not resumed: %s", run_id, refused.message)
            return "refused"
        return result.status if isinstance(result, PausedRun) else str(result.status)
    finally:
        store.release(run_id, owner)


def _start(
    store: Store,
    run_id: str,
    job: Mapping[str, Any],
    registry: Registry,
    gate: Any,
    llm: LLMClient | None,
    policy: Any,
    execution: Mapping[str, Any] | None,
    authority: _Authority,
) -> str:
    """Start a queued job's run: under the deployment's engine, else the flags' policy."""
    if authority.deployment is not None:
        from pte._run import EngineConfig

        engine = authority.deployment.engine(
            llm,
            registry=registry,
            config=EngineConfig(llm_answer=False),
            approval=gate,
            **dict(execution or {}),
        )
    else:
        engine = job_engine(job, registry, gate, llm, policy, execution)
    if job.get("plan_text") is not None:
        result = run_in_store(
            engine, store, run_id=run_id, plan_text=str(job["plan_text"]), anchors=authority.anchors
        )
    elif llm is not None and isinstance(job.get("request"), str):
        result = run_in_store(engine, store, run_id=run_id, request=job["request"], anchors=authority.anchors)
    else:
        refused = FailedClosed(
            ReasonCode.LLM_ERROR,
            "workers run plan files; a request needs an LLM endpoint and this worker has none",
        )
        return _end(store, run_id, refused, authority.anchors)
    return result.status if isinstance(result, PausedRun) else str(result.status)


def _check_job_deployment(job: Mapping[str, Any], here: str) -> None:
    """Refuse a signed job submitted under another deployment than `here` (its fingerprint)."""
    signed_for = job.get("deployment")
    if signed_for is None:
        return
    if signed_for != here:
        raise FailedClosed(
            ReasonCode.DEPLOYMENT_MISMATCH,
            f"the job was submitted under deployment {str(signed_for)[:16]}…, this worker's is {here[:16]}…: "
            "its tools, their code, the policy or the procedures differ; "
            "submit it again under this deployment",
        )


def is_expired(expires_at: str | None) -> bool:
    from datetime import UTC, datetime

    if expires_at is None:
        return False
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ") > expires_at


def _end(store: Store, run_id: str, refused: FailedClosed, anchors: Any) -> str:
    """End a job the worker will not run, on the record (`end_run`); "refused" when it cannot be."""
    if end_run(store, run_id, refused, anchors=anchors):
        _log.warning("run %s ended failed_closed(%s): %s", run_id, refused.reason.value, refused.message)
        return "failed_closed"
    _log.warning("run %s not run (%s) and not ended: its records do not verify", run_id, refused.message)
    return "refused"
