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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pte._core import RequeueRefused
from pte._deploy._workers import enqueue, is_expired
from pte._replay import RunView
from pte.stores import RunInfo, Store, check_run_id
from pte.stores._base import utc_now

__all__ = ["ENDED", "RunRow", "list_runs", "requeue", "requeue_problem"]

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

    def to_dict(self) -> dict[str, Any]:
        return {
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


def list_runs(store: Store, status: str | None = None) -> list[RunRow]:
    """The store's runs (or those in `status`), oldest first."""
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
        )
        for info in store.runs(status)
    ]


def requeue_problem(store: Store, run_id: str) -> str | None:
    """Why `run_id` cannot be requeued, or None when it can."""
    info = store.run(check_run_id(run_id))
    if info is None:
        return f"no run {run_id!r} in {store.describe()}"
    if info.status in ENDED:
        why = f"({info.reason})" if info.reason else ""
        return f"run {run_id} has ended ({info.status}{why}): nothing to requeue"
    if info.status == "awaiting_endorsement":
        # Only a person's signed endorsement (the deployment's endorsement store, which workers do
        # not read) lets it go on: a worker would only pause it again.
        return (
            f"run {run_id} waits for a person to endorse a value: pte endorse {run_id} --by NAME "
            f"--store {store.describe()} --endorsements FILE, then pte resume {run_id} --store "
            f"{store.describe()} --endorsements FILE (with the --tools it was started with)"
        )
    if info.status == "awaiting_approval" and not store.decisions(run_id) and not is_expired(info.expires_at):
        return (
            f"run {run_id} waits for a person's decision on plan {info.plan_hash} until {info.expires_at}: "
            f"pte approve {run_id} --by NAME --store {store.describe()} (with --broker it is queued)"
        )
    if info.records == 0 and not info.job:
        return f"run {run_id} has no records and no submitted job: there is nothing a worker could run"
    return None


def requeue(store: Store, app: Any, run_ids: Sequence[str], *, by: str | None = None) -> list[str]:
    """Put `run_ids` back on the broker of `app`, each recorded in the store first.

    Raises `RequeueRefused` (nothing enqueued, nothing recorded) when any of them cannot be
    requeued. Returns the run ids enqueued.
    """
    who = by or getpass.getuser()
    infos = []
    for run_id in run_ids:
        problem = requeue_problem(store, run_id)
        if problem is not None:
            raise RequeueRefused(problem)
        infos.append(store.run(run_id))
    for info in infos:
        assert info is not None
        # Recorded before the message goes out: a requeue that reached a worker is on record.
        store.record_requeue(info.run_id, status=info.status, by=who, at=utc_now())
    enqueue(app, [info.run_id for info in infos if info is not None])
    return list(run_ids)
