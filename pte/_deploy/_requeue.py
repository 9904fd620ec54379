"""Stored runs for the operator: list them by status, put stranded ones back on the broker.

A run is on the broker only as its id (`pte._deploy._workers`). When the broker loses its messages
(a flush, a failover without persistence), ``queued`` runs and runs whose worker died
(``running`` with no worker) stay stranded in the store. `requeue` enqueues such a run
again and records who did it and when in the store (``pte_requeues``). Requeueing is safe
to repeat: a worker claims a run before it acts, resumes it from its records (completed
steps are not re-run, an interrupted write is handled by the write-ahead rule) and does
nothing for a run that already ended, so a second message costs one look at the store.
"""

from __future__ import annotations

import getpass
import json
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pte._core import RequeueRefused
from pte._deploy._process import is_expired
from pte._deploy._workers import enqueue
from pte._replay import RunView
from pte.stores import RunInfo, Store, check_run_id
from pte.stores._base import utc_now

__all__ = ["ENDED", "RunRow", "end_stranded", "list_runs", "requeue", "requeue_problem", "stranded"]

#: Statuses a run never leaves: requeueing one would do nothing, so it is refused.
ENDED = frozenset({"succeeded", "failed_closed", "needs_review", "interrupted"})


@dataclass(frozen=True)
class RunRow:
    """One line of ``pte runs``."""

    run_id: str
    status: str
    reason: str | None
    records: int
    created_at: str | None
    updated_at: str | None
    plan_hash: str | None
    requeues: int
    #: Why the run cannot continue under the deployment in hand (`stranded`); None: it can.
    cannot_continue: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "cannot_continue": self.cannot_continue,
            "run_id": self.run_id,
            "status": self.status,
            "reason": self.reason,
            "records": self.records,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "plan_hash": self.plan_hash,
            "requeues": self.requeues,
        }


def _plan_hash(store: Store, info: RunInfo) -> str | None:
    """The hash of the run's latest accepted plan, folded by `RunView` (None: no plan yet)."""
    if info.plan_hash is not None:
        return info.plan_hash
    # `pte runs` lists every run: only the lines a plan is folded from are parsed (the first,
    # run_started, and those naming plan_accepted); RunView decides which are plans.
    records = [
        json.loads(line)
        for index, line in enumerate(store.lines(info.run_id))
        if index == 0 or b'"plan_accepted"' in line
    ]
    plans = RunView.fold(info.run_id, records).plans
    return plans[-1].plan_hash if plans else None


def list_runs(store: Store, status: str | None = None, *, deployment: Any = None) -> list[RunRow]:
    """The store's runs (or those in `status`), oldest first; with `deployment` (`pte.Deployment`),
    each says whether it can continue under it (`stranded`)."""
    return [
        RunRow(
            info.run_id,
            info.status,
            info.reason,
            info.records,
            info.created_at,
            info.updated_at,
            _plan_hash(store, info),
            len(store.requeues(info.run_id)),
            stranded(store, info, deployment),
        )
        for info in store.runs(status)
    ]


def stranded(store: Store, info: RunInfo, deployment: Any) -> str | None:
    """Why run `info` cannot continue under `deployment` (its fingerprint differs from the one
    the run started, or its job was submitted, under); None when it can, when it has ended, or
    when either side names no deployment (a run of flags only is checked when a worker takes it:
    a changed catalogue then ends it ``failed_closed(deployment_mismatch)``)."""
    from pte._audit import deployment_problem

    if deployment is None or info.status in ENDED:
        return None
    here = str(deployment.fingerprint)
    if info.records == 0:
        signed_for = (info.job or {}).get("deployment")
        if isinstance(signed_for, str) and signed_for != here:
            return (
                f"run {info.run_id}'s job was submitted under deployment {signed_for[:16]}…, not the "
                f"deployment in hand ({here[:16]}…)"
            )
        return None
    first = next(iter(store.lines(info.run_id)), None)
    try:
        started = json.loads(first) if first else {}
        return deployment_problem(started, deployment) if isinstance(started, dict) else None
    except ValueError as exc:
        return f"run {info.run_id}: {exc}"


def end_stranded(store: Store, run_id: str, deployment: Any, *, by: str | None = None) -> str:
    """End run `run_id`, which cannot continue under `deployment`, ``failed_closed(deployment_mismatch)``
    on the record (nothing runs); returns the reason. `RequeueRefused` when it can continue here
    (nothing to end) or its records cannot be trusted (left for ``pte audit verify``)."""
    from pte._core import FailedClosed, ReasonCode
    from pte._deploy._runs import end_run

    info = store.run(check_run_id(run_id))
    if info is None:
        raise RequeueRefused(f"no run {run_id!r} in {store.describe()}")
    if info.status in ENDED:
        raise RequeueRefused(f"run {run_id} has ended already ({info.status}): nothing to end")
    reason = stranded(store, info, deployment)
    if reason is None:
        raise RequeueRefused(f"run {run_id} can continue under this deployment: nothing to end")
    who = by or getpass.getuser()
    ended = FailedClosed(ReasonCode.DEPLOYMENT_MISMATCH, f"{reason}; ended by {who} (pte runs end)")
    if not end_run(store, run_id, ended, anchors=deployment.anchors()):
        raise RequeueRefused(
            f"run {run_id}'s records do not verify against this deployment's anchors: not ended "
            f"(pte audit verify {store.describe()} --run {run_id})"
        )
    return reason


def requeue_problem(
    store: Store, run_id: str, deployment: Any = None, *, signing: Sequence[str] = ()
) -> str | None:
    """Why `run_id` cannot be requeued, or None when it can (`deployment`: the one in hand;
    `signing`: the ``--signing-key PATH`` the approve it prints needs, as the CLI found it)."""
    info = store.run(check_run_id(run_id))
    if info is None:
        return f"no run {run_id!r} in {store.describe()}"
    if info.status in ENDED:
        why = f"({info.reason})" if info.reason else ""
        return f"run {run_id} has ended ({info.status}{why}): nothing to requeue"
    reason = stranded(store, info, deployment)
    if reason is not None:
        return f"{reason}; a worker cannot continue it. End it: pte runs end {run_id}"
    if info.status == "awaiting_endorsement" and deployment is not None and deployment.endorsements_path:
        return None  # the workers of this deployment read its endorsement store
    if info.status == "awaiting_endorsement":
        # Only the endorsement store of the deployment it runs under lets it go on: a worker
        # without one would only pause it again. Hints name no store: the deployment does.
        return (
            f"run {run_id} waits for a person to endorse a value, which only a deployment with an "
            "endorsement store lets a worker continue: requeue it under the deployment it started "
            "under (from its folder, or with $PTE_DEPLOYMENT set to it)"
        )
    if info.status == "awaiting_approval" and not store.decisions(run_id) and not is_expired(info.expires_at):
        store_flag = "" if deployment is not None else f" --store {shlex.quote(store.describe())}"
        return (
            f"run {run_id} waits for a person's decision on plan {info.plan_hash} until {info.expires_at}; "
            "approve it (with $PTE_BROKER set, that queues it for a worker): "
            f"pte approve {run_id}{store_flag}" + "".join(f" {shlex.quote(w)}" for w in signing)
        )
    if info.records == 0 and not info.job:
        return f"run {run_id} has no records and no submitted job: there is nothing a worker could run"
    return None


def requeue(
    store: Store, app: Any, run_ids: Sequence[str], *, by: str | None = None, deployment: Any = None
) -> list[str]:
    """Put `run_ids` back on the broker of `app`, each recorded in the store first.

    Raises `RequeueRefused` (nothing enqueued, nothing recorded) when any of them cannot be
    requeued. Returns the run ids enqueued.
    """
    who = by or getpass.getuser()
    infos = []
    for run_id in run_ids:
        problem = requeue_problem(store, run_id, deployment)
        if problem is not None:
            raise RequeueRefused(problem)
        infos.append(store.run(run_id))
    for info in infos:
        assert info is not None
        # Recorded before the message goes out: a requeue that reached a worker is on record.
        store.record_requeue(info.run_id, status=info.status, by=who, at=utc_now())
    enqueue(app, [info.run_id for info in infos if info is not None])
    return list(run_ids)
