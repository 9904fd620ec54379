"""Many runs across machines: Celery workers with a Redis broker, over one shared store.

Celery is an existing, widely run distributed task engine; PTE adds no queue of its own.
``pte submit`` writes each job (a plan or a request, the tool packs, signed with the
deployment key) to the store as a ``queued`` run and enqueues only its run id. ``pte worker``
consumes run ids; it runs only under a deployment (`pte.Deployment`), and everything it acts
on comes from that deployment, never from the message or its environment: its store, the tool
packs it serves (``--tools`` may narrow them: a job naming another pack is refused), its
policy, procedures, approver keys, stores, anchors and key. Someone who can write to the
broker can only make a worker look at runs that the store already holds.

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

from pte._core import PTEError, SigningKey
from pte._deploy._jobs import deployment_public_key, sign_job
from pte._deploy._process import process_run
from pte._deploy._runs import (
    DEFAULT_APPROVAL_TTL,
)
from pte._execution import DEFAULT_CONCURRENCY
from pte._run import LLMClient
from pte.stores import Store, StoreError, check_run_id, open_store

__all__ = ["TASK_NAME", "WorkerConfig", "enqueue", "make_app", "submit_job"]

#: The Celery task every run goes through; its only argument is the run id.
TASK_NAME = "pte.run"
QUEUE = "pte"
_log = logging.getLogger("pte.worker")


#: Longest a paused run may wait for a decision (``pte worker --approval-ttl``): 365 days.
MAX_APPROVAL_TTL_S = 365 * 86_400.0


#: Variables that once gave a worker its authority without a deployment: refused, never read.
_AUTHORITY_VARIABLES = ("PTE_WORKER_STORE", "PTE_WORKER_POLICY", "PTE_WORKER_PROCEDURES")


@dataclass(frozen=True)
class WorkerConfig:
    """What a worker serves: its deployment (`pte.Deployment`, the folder, absolute), which names
    its store, packs, policy, procedures, approver keys, stores, anchors and key; the rest only
    narrows it or says how the worker runs (set from ``pte worker``'s flags, never from jobs)."""

    deployment: str
    #: Narrows the deployment's packs (``pte worker --tools``); empty: all of them.
    tools: tuple[str, ...] = ()
    approval_ttl_s: float = DEFAULT_APPROVAL_TTL.total_seconds()
    #: The worker's LLM endpoint for request jobs, as JSON (``pte worker --model/--base-url``,
    #: which the deployment's own endpoint refuses to differ from; the key comes from the
    #: worker's environment, never from here). "{}": the deployment's, if it names one.
    llm: str = "{}"
    #: Most steps of a run at once, and whether a write runs alone (``pte worker
    #: --max-concurrency/--serial-writes``; `pte.Executor`).
    max_concurrency: int = DEFAULT_CONCURRENCY
    serial_writes: bool = False

    def __post_init__(self) -> None:
        if not (isinstance(self.deployment, str) and self.deployment):
            raise ValueError(
                "a worker acts only under a deployment (its folder, `pte init`): its authority "
                "(store, packs, policy, keys) comes from nowhere else"
            )
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
            # How the worker's processes find their deployment (`pte.Deployment.discover`).
            "PTE_DEPLOYMENT": self.deployment,
            "PTE_WORKER_TOOLS": ",".join(self.tools),
            "PTE_WORKER_APPROVAL_TTL": str(self.approval_ttl_s),
            "PTE_WORKER_LLM": self.llm,
            "PTE_WORKER_MAX_CONCURRENCY": str(self.max_concurrency),
            "PTE_WORKER_SERIAL_WRITES": "1" if self.serial_writes else "0",
        }

    @classmethod
    def from_env(cls) -> WorkerConfig:
        """The configuration ``pte worker`` gave its processes; `PTEError` without a deployment
        or with a variable that used to name authority (it would silently not count)."""
        named = [name for name in _AUTHORITY_VARIABLES if os.environ.get(name)]
        if named:
            raise PTEError(
                f"worker configuration: {', '.join(named)} no longer configure a worker: its store, "
                "policy and procedures are its deployment's ($PTE_DEPLOYMENT); unset them"
            )
        try:
            return cls(
                os.environ.get("PTE_DEPLOYMENT", ""),
                tuple(t for t in os.environ.get("PTE_WORKER_TOOLS", "").split(",") if t),
                float(os.environ.get("PTE_WORKER_APPROVAL_TTL", DEFAULT_APPROVAL_TTL.total_seconds())),
                os.environ.get("PTE_WORKER_LLM", "{}"),
                int(os.environ.get("PTE_WORKER_MAX_CONCURRENCY", DEFAULT_CONCURRENCY)),
                os.environ.get("PTE_WORKER_SERIAL_WRITES", "0") == "1",
            )
        except ValueError as exc:
            raise PTEError(f"worker configuration is invalid: {exc}") from None


class _Context:
    """Per worker process: its store connection, registry and gate (opened after a fork), all
    from its deployment: its store, packs (narrowed by ``--tools``), policy, approver keys,
    approval and endorsement stores, anchors, key and model endpoint."""

    def __init__(self, config: WorkerConfig) -> None:
        from pte._deploy._deployment import Deployment

        self.config = config
        self.pid = os.getpid()
        self.owner = f"{socket.gethostname()}:{self.pid}:{uuid.uuid4().hex[:8]}"
        self.llm = worker_llm(json.loads(config.llm))
        deployment = Deployment.from_folder(config.deployment)
        if config.tools:
            deployment = deployment.narrowed(packs=config.tools)
        url = deployment.store_url
        if url is None:
            raise PTEError(f"the deployment in {deployment.folder} names no run store: workers need one")
        self.deployment = deployment
        self.store = open_store(url)
        self.registry = deployment.registry()
        self.served = deployment.packs
        self.job_key = deployment_public_key(deployment)
        if self.llm is None and (deployment.document.model or deployment.document.base_url):
            self.llm = deployment.llm()


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
                context.served,
                owner=context.owner,
                keys=None,
                ttl=timedelta(seconds=context.config.approval_ttl_s),
                llm=context.llm,
                policy=None,
                execution={
                    "max_concurrency": context.config.max_concurrency,
                    "serial_writes": context.config.serial_writes,
                },
                job_key=context.job_key,
                require_signed=True,
                deployment=context.deployment,
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
