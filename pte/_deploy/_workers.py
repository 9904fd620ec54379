"""Many runs across machines: Celery workers with a Redis broker, over one shared store.

Celery is an existing, widely run distributed task engine; PTE adds no queue of its own.
``pte submit`` writes each job (a plan or a request, the tool packs, the policy document)
to the store as a ``queued`` run and enqueues only its run id. ``pte worker`` consumes run
ids; everything a worker acts on comes from its own deployment, never from the message:
its store (``--store``), the tool packs it serves (``--tools``: a job naming another pack
is refused) and the approval key. Someone who can write to the broker can only make a
worker look at runs that the store already holds.

Exactly-once effects from at-least-once delivery:

- late acknowledgement (``task_acks_late``, ``task_reject_on_worker_lost``, prefetch 1): a
  message is acknowledged only after its run is stored as ended (or paused); a worker
  that dies leaves it unacknowledged and the broker delivers it again (after the
  visibility timeout, for Redis);
- one worker per run: a worker claims the run in the store first (PostgreSQL: an advisory
  lock that dies with the worker's connection; SQLite: a lease), so a second delivery
  of a run that is still going waits and retries;
- a delivery of a run that already has records resumes it from the store (`pte._deploy._runs`):
  completed steps are not run again, an interrupted idempotent write is re-run, and an
  interrupted non-idempotent write ends the run ``needs_review`` instead of risking a
  second effect; a delivery of an ended run does nothing.
"""

from __future__ import annotations

import json
import logging
import math
import os
import socket
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from pte._audit import anchors_from_env
from pte._catalogue import Registry, load_registry
from pte._core import FailedClosed, PTEError, PublicKey, ReasonCode, SigningKey, ToolPackError
from pte._deploy._jobs import deployment_job_key, job_fingerprint, job_refusal, sign_job
from pte._deploy._runs import (
    DEFAULT_APPROVAL_TTL,
    PausedRun,
    end_run,
    job_engine,
    pausing_gate,
    resume_run,
    run_in_store,
)
from pte._execution import DEFAULT_CONCURRENCY
from pte._plan import load_procedures
from pte._run import LLMClient
from pte.stores import Store, StoreError, check_run_id, open_store

__all__ = ["TASK_NAME", "WorkerConfig", "enqueue", "make_app", "process_run", "submit_job"]

#: The Celery task every run goes through; its only argument is the run id.
TASK_NAME = "pte.run"
QUEUE = "pte"
_log = logging.getLogger("pte.worker")


#: Longest a paused run may wait for a decision (``pte worker --approval-ttl``): 365 days.
MAX_APPROVAL_TTL_S = 365 * 86_400.0


@dataclass(frozen=True)
class WorkerConfig:
    """What a worker serves: set from ``pte worker``'s flags (the deployment), not from jobs."""

    store_url: str
    tools: tuple[str, ...]
    approval_ttl_s: float = DEFAULT_APPROVAL_TTL.total_seconds()
    #: The worker's LLM endpoint for request jobs, as JSON (``pte worker --model/--base-url``;
    #: the key comes from the worker's environment, never from here). "{}": none.
    llm: str = "{}"
    #: The worker's own policy document (``pte worker --policy``), as JSON; "null": the
    #: packs' defaults. Policy is the deployment's authority: a job never brings its own.
    policy: str = "null"
    #: Most steps of a run at once, and whether a write runs alone (``pte worker
    #: --max-concurrency/--serial-writes``; `pte.Executor`).
    max_concurrency: int = DEFAULT_CONCURRENCY
    serial_writes: bool = False
    #: The deployment's procedure folder (``pte worker --procedures DIR``, absolute); "": none.
    procedures: str = ""

    def __post_init__(self) -> None:
        # Checked when the worker is configured, not per task: a NaN or infinite TTL made
        # every paused run fail (timedelta refuses it) long after `pte worker` started.
        ttl = self.approval_ttl_s
        if not (isinstance(ttl, int | float) and math.isfinite(ttl) and 0 < ttl <= MAX_APPROVAL_TTL_S):
            raise ValueError(
                f"approval TTL must be a number of seconds in (0, {MAX_APPROVAL_TTL_S:g}], not {ttl!r}"
            )
        if not (isinstance(self.max_concurrency, int) and self.max_concurrency >= 1):
            raise ValueError(f"max_concurrency must be a whole number >= 1, not {self.max_concurrency!r}")

    def to_env(self) -> dict[str, str]:
        return {
            "PTE_WORKER_STORE": self.store_url,
            "PTE_WORKER_TOOLS": ",".join(self.tools),
            "PTE_WORKER_APPROVAL_TTL": str(self.approval_ttl_s),
            "PTE_WORKER_LLM": self.llm,
            "PTE_WORKER_POLICY": self.policy,
            "PTE_WORKER_MAX_CONCURRENCY": str(self.max_concurrency),
            "PTE_WORKER_SERIAL_WRITES": "1" if self.serial_writes else "0",
            "PTE_WORKER_PROCEDURES": self.procedures,
        }

    @classmethod
    def from_env(cls) -> WorkerConfig:
        try:
            return cls(
                os.environ["PTE_WORKER_STORE"],
                tuple(t for t in os.environ["PTE_WORKER_TOOLS"].split(",") if t),
                float(os.environ.get("PTE_WORKER_APPROVAL_TTL", DEFAULT_APPROVAL_TTL.total_seconds())),
                os.environ.get("PTE_WORKER_LLM", "{}"),
                os.environ.get("PTE_WORKER_POLICY", "null"),
                int(os.environ.get("PTE_WORKER_MAX_CONCURRENCY", DEFAULT_CONCURRENCY)),
                os.environ.get("PTE_WORKER_SERIAL_WRITES", "0") == "1",
                os.environ.get("PTE_WORKER_PROCEDURES", ""),
            )
        except KeyError as exc:
            raise PTEError(f"worker configuration missing: {exc}") from None
        except ValueError as exc:
            raise PTEError(f"worker configuration is invalid: {exc}") from None


class _Context:
    """Per worker process: its store connection, registry and gate (opened after a fork)."""

    def __init__(self, config: WorkerConfig) -> None:
        from pte._policy import public_keys_from_env

        self.config = config
        self.pid = os.getpid()
        self.owner = f"{socket.gethostname()}:{self.pid}:{uuid.uuid4().hex[:8]}"
        self.store = open_store(config.store_url)
        self.registry = served_registry(config)
        self.keys = public_keys_from_env()
        # The deployment key's public half: a job counts only when signed with it (`_jobs`).
        self.job_key = deployment_job_key()
        self.llm = worker_llm(json.loads(config.llm))
        self.policy: Any = json.loads(config.policy)


def worker_llm(settings: Mapping[str, Any]) -> LLMClient | None:
    """The worker's LLM client for request jobs (None: it runs plan files only)."""
    if not settings:
        return None
    if settings.get("replay_responses"):
        from pte._run import ReplayClient

        return ReplayClient.from_file(settings["replay_responses"])
    from pte._run import OpenAIClient

    return OpenAIClient(
        settings.get("model"),
        base_url=settings.get("base_url"),
        timeout_s=float(settings.get("timeout", 60.0)),
        max_retries=int(settings.get("max_retries", 2)),
    )


_context: _Context | None = None


def _get_context() -> _Context:
    global _context
    if _context is None or _context.pid != os.getpid():
        _context = _Context(WorkerConfig.from_env())
    return _context


def served_registry(config: WorkerConfig) -> Registry:
    """What a worker serves: its packs and, with ``--procedures``, the deployment's procedures
    (checked against those packs as at ``pte worker`` start)."""
    registry = load_registry(list(config.tools))
    if not config.procedures:
        return registry
    return registry.with_procedures(load_procedures(config.procedures, registry))


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
) -> str:
    """Take run `run_id` one step further; returns what happened.

    ``"busy"`` (another worker holds it: retry later), ``"unknown"``, ``"done"`` (already
    ended), ``"waiting"`` (paused, no decision yet), ``"refused"`` (a run whose records cannot
    be trusted: left as it is, for ``pte audit verify``), or the status it reached:
    ``"succeeded"``, ``"failed_closed"``, ``"awaiting_approval"``, ``"awaiting_endorsement"``.

    `job_key`: the deployment's public key; a submitted job counts only when signed by it for
    this run (`pte._deploy._jobs`), else the run ends ``failed_closed(job_signature_invalid)``.
    `require_signed` (``pte worker``): refuse every job when there is no key to check it with.
    None and False: the caller trusts its store (a library caller that wrote the jobs itself).
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
        # The worker's deployment key (its environment), never the job's; the chain in the run
        # store when the deployment keeps it there (shared by every worker machine).
        anchors = anchors_from_env(store=store)
        job = info.job or {}
        # A started run's authority is its (anchored) records; a job, when there is one, must
        # still be the signed one. A run started by `pte execute --store` has none.
        if (job_key is not None or require_signed) and (info.records == 0 or info.job is not None):
            problem = (
                job_refusal(info.job, run_id, job_key)
                if job_key is not None
                else "this worker has no deployment key to check jobs with (pte init, then "
                "PTE_DEPLOYMENT_KEY_FILE): it runs no job"
            )
            if problem is not None:
                return _end(store, run_id, FailedClosed(ReasonCode.JOB_SIGNATURE_INVALID, problem), anchors)
        if info.status == "awaiting_endorsement":
            # A worker has no endorsement store: only `pte resume RUN_ID --endorsements FILE`
            # after `pte endorse` continues it (docs/endorsement.md). Re-driving it here would
            # only pause it again.
            return "waiting"
        if (
            info.status == "awaiting_approval"
            and not store.decisions(run_id)
            and not is_expired(info.expires_at)
        ):
            return "waiting"
        try:
            job_registry = _job_registry(job, served, registry)
            _check_job_policy(job, policy)
            if info.records == 0 and job_key is not None:
                _check_job_deployment(job, job_registry, policy)
        except FailedClosed as refused:
            return _end(store, run_id, refused, anchors)
        gate = pausing_gate(store, job_registry, keys=keys, ttl=ttl)
        if info.records == 0:
            engine = job_engine(job, job_registry, gate, llm, policy, execution)
            if job.get("plan_text") is not None:
                result = run_in_store(
                    engine, store, run_id=run_id, plan_text=str(job["plan_text"]), anchors=anchors
                )
            elif llm is not None and isinstance(job.get("request"), str):
                result = run_in_store(engine, store, run_id=run_id, request=job["request"], anchors=anchors)
            else:
                return _end(
                    store,
                    run_id,
                    FailedClosed(
                        ReasonCode.LLM_ERROR,
                        "workers run plan files; a request needs an LLM endpoint and this worker has none",
                    ),
                    anchors,
                )
        else:
            try:
                result = resume_run(store, run_id, job_registry, gate=gate, llm=llm, anchors=anchors)
            except FailedClosed as refused:
                if refused.reason is ReasonCode.DEPLOYMENT_MISMATCH:
                    return _end(store, run_id, refused, anchors)
                _log.warning("run %s not resumed: %s", run_id, refused.message)
                return "refused"
        return result.status if isinstance(result, PausedRun) else str(result.status)
    finally:
        store.release(run_id, owner)


def _check_job_deployment(job: Mapping[str, Any], registry: Registry, policy: Any) -> None:
    """Refuse a signed job submitted under another deployment (catalogue, policy, procedures)."""
    signed_for = job.get("deployment")
    if signed_for is None:
        return
    here = job_fingerprint(registry, policy)
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


def make_app(broker: str, *, visibility_timeout: float = 60.0) -> Any:
    """The Celery app: late acks, prefetch 1, JSON only, one queue, no result backend."""
    from celery import Celery

    app = Celery("pte", broker=broker, set_as_current=False)
    app.conf.update(
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_serializer="json",
        accept_content=["json"],
        task_ignore_result=True,
        task_default_queue=QUEUE,
        broker_connection_retry_on_startup=True,
        # An unacknowledged run (its worker died) is delivered again after visibility_timeout;
        # sweep for such runs often enough that a short timeout really is short.
        broker_transport_options={
            "visibility_timeout": visibility_timeout,
            "unacked_restore_interval": max(1, min(10, int(visibility_timeout / 4))),
            "unacked_restore_throttle": 1,
        },
        worker_hijack_root_logger=False,
        worker_send_task_events=False,
    )

    @app.task(name=TASK_NAME, bind=True, max_retries=None, acks_late=True, shared=False)  # type: ignore[untyped-decorator]
    def run_task(self: Any, run_id: Any) -> str:
        try:
            check_run_id(run_id)
        except StoreError:
            return "refused: bad run id"  # from the broker, never retried, never reaches the store
        context = _get_context()
        try:
            outcome = process_run(
                context.store,
                run_id,
                context.registry,
                context.config.tools,
                owner=context.owner,
                keys=context.keys,
                ttl=timedelta(seconds=context.config.approval_ttl_s),
                llm=context.llm,
                policy=context.policy,
                execution={
                    "max_concurrency": context.config.max_concurrency,
                    "serial_writes": context.config.serial_writes,
                },
                job_key=context.job_key,
                require_signed=True,
            )
        except StoreError:
            # The store is unreachable or refused a write: leave the run to a retry.
            raise self.retry(countdown=2) from None
        if outcome == "busy":
            raise self.retry(countdown=1)
        return outcome

    return app


def submit_job(
    store: Store,
    job: Mapping[str, Any],
    *,
    run_id: str | None = None,
    signing_key: SigningKey | None = None,
) -> str:
    """Record `job` in `store` as a ``queued`` run; returns its run id.

    `signing_key`: the deployment key; the job is stored signed for this run id (`sign_job`),
    which is the only form a worker with the deployment's key acts on."""
    run_id = check_run_id(run_id if run_id is not None else uuid.uuid4().hex)
    store.submit(run_id, sign_job(job, run_id, signing_key) if signing_key is not None else job)
    return run_id


def enqueue(app: Any, run_ids: Sequence[str]) -> None:
    """Put run ids on the broker (one message each)."""
    task = app.tasks[TASK_NAME]
    for run_id in run_ids:
        task.apply_async((check_run_id(run_id),), queue=QUEUE)
