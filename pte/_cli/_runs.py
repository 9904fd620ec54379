"""``pte runs``: the store's runs by status; ``pte runs requeue``: stranded runs back on the broker."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from pte._cli._store import EXIT_FAILED, EXIT_OK, _broker, _print_json, _store, _usage_error, add_store
from pte._cli._support import broker_problem, non_empty_text
from pte.stores import RUN_STATES, StoreError, check_run_id

__all__ = ["add_runs_command"]


def runs_list(args: argparse.Namespace) -> int:
    """``pte runs [--status S]``: id, status, created/updated, plan hash (short), oldest first."""
    from pte._cli._deployment import _in_force
    from pte._cli._hints import pte_command, store_flags
    from pte._deploy import list_runs

    with _store(args.store) as store:
        rows = list_runs(store, args.status, deployment=_in_force(args))
        where = store.describe()
        at = store_flags(args, store)
        verdicts = _verdicts(store, [row.run_id for row in rows]) if args.verify else {}
    if args.json:
        _print_json([{**row.to_dict(), **_verdict_json(verdicts.get(row.run_id))} for row in rows])
        return EXIT_OK
    if not rows:
        print(f"no {args.status + ' ' if args.status else ''}run in {where}")
        return EXIT_OK
    print(f"{'RUN_ID':<32}  {'STATUS':<24}  {'CREATED':<27}  {'UPDATED':<27}  PLAN")
    for row in rows:
        status = row.status + (f"({row.reason})" if row.reason else "")
        plan = row.plan_hash[:12] if row.plan_hash else "-"
        requeued = f"  requeued {row.requeues}x" if row.requeues else ""
        print(
            f"{row.run_id:<32}  {status:<24}  {row.created_at or '-':<27}  {row.updated_at or '-':<27}  "
            f"{plan}{requeued}"
        )
        if row.run_id in verdicts:
            found = verdicts[row.run_id]
            print(
                f"  verdict: {found.status}: {found.summary()}"
                + (f": {found.problem}" if found.problem else "")
            )
        if row.cannot_continue is not None:
            # Nothing stranded silently: why, and the command that ends it (as printed).
            print(f"  CANNOT CONTINUE here: {row.cannot_continue}")
            print(f"  end it: {pte_command('runs', *at, 'end', row.run_id)}")
    stranded = sum(row.cannot_continue is not None for row in rows)
    print(f"{len(rows)} run(s)" + (f", {stranded} cannot continue under this deployment" if stranded else ""))
    return EXIT_OK


def _verdicts(store: Any, run_ids: list[str]) -> dict[str, Any]:
    """``--verify``: each run's verdict, the one `pte audit verify` gives (the deployment's anchors)."""
    from pte._audit import stored_verdict
    from pte._cli._store import _anchors

    anchors = _anchors()
    return {run_id: stored_verdict(store, run_id, anchors=anchors) for run_id in run_ids}


def _verdict_json(found: Any) -> dict[str, Any]:
    return {} if found is None else {"verdict": found.to_dict()}


def runs_end(args: argparse.Namespace) -> int:
    """``pte runs end RUN_ID…``: end runs that cannot continue under the deployment in force,
    ``failed_closed(deployment_mismatch)`` on the record (nothing of them runs)."""
    from pte._cli._deployment import _in_force
    from pte._core import RequeueRefused
    from pte._deploy import end_stranded

    for run_id in args.run_ids:
        try:
            check_run_id(run_id)
        except StoreError as exc:
            raise _usage_error()(f"RUN_ID: {exc}") from None
    deployment = _in_force(args)
    if deployment is None:
        raise _usage_error()(
            "pte runs end ends runs that cannot continue under the deployment in force, and there is "
            "none: run it where the deployment is found (pte init made it; or set $PTE_DEPLOYMENT)"
        )
    failed = False
    ended = []
    with _store(args.store) as store:
        for run_id in args.run_ids:
            try:
                reason = end_stranded(store, run_id, deployment, by=args.by)
            except RequeueRefused as exc:
                print(f"not ended: {exc}", file=sys.stderr)
                failed = True
                continue
            ended.append(
                {"run_id": run_id, "status": "failed_closed", "reason": "deployment_mismatch", "why": reason}
            )
    if args.json:
        _print_json({"ended": ended})
    else:
        for item in ended:
            print(f"run {item['run_id']} ended failed_closed(deployment_mismatch): {item['why']}")
    return EXIT_FAILED if failed else EXIT_OK


def runs_requeue(args: argparse.Namespace) -> int:
    """``pte runs requeue RUN_ID…``: enqueue stranded queued/crashed runs again (recorded)."""
    from pte._cli._deployment import _in_force
    from pte._core import RequeueRefused
    from pte._deploy import make_app, requeue, requeue_problem

    for run_id in args.run_ids:
        try:
            check_run_id(run_id)
        except StoreError as exc:
            raise _usage_error()(f"RUN_ID: {exc}") from None
    broker = _broker(args)
    with _store(args.store) as store:
        # The runs first: a run that cannot be requeued is the operator's news, whatever the broker.
        deployment = _in_force(args)
        from pte._cli._hints import signing_flags, signing_note

        signing = signing_flags(args)
        refused = [
            p
            for p in (requeue_problem(store, run_id, deployment, signing=signing) for run_id in args.run_ids)
            if p
        ]
        problem = refused[0] if refused else broker_problem(broker)
        if problem is not None:
            note = signing_note(args) if "pte approve" in problem else None
            print(f"not requeued: {problem}" + (f"\n{note}" if note else ""), file=sys.stderr)
            return EXIT_FAILED
        try:
            done = requeue(store, make_app(broker), args.run_ids, by=args.by, deployment=deployment)
        except RequeueRefused as exc:
            print(f"not requeued: {exc}", file=sys.stderr)
            return EXIT_FAILED
    if args.json:
        _print_json({"requeued": done})
    else:
        for run_id in done:
            print(f"run {run_id} queued again")
    return EXIT_OK


def add_runs_command(sub: Any, add_json: Any) -> None:
    """Register ``pte runs`` and ``pte runs requeue``."""
    p = sub.add_parser("runs", help="list the store's runs (by status); requeue stranded ones")
    p.add_argument(
        "--status",
        choices=RUN_STATES,
        metavar="STATUS",
        help=f"only runs in this status: {', '.join(RUN_STATES)}",
    )
    p.add_argument(
        "--verify",
        action="store_true",
        help="also each run's verdict: the checks pte audit verify makes (chain, schema, sealed, anchors)",
    )
    add_store(p)
    add_json(p)
    p.set_defaults(func=runs_list)
    actions = p.add_subparsers(dest="runs_command", metavar="ACTION")
    q = actions.add_parser(
        "requeue", help="put queued or crashed runs back on the broker (after a broker flush; safe to repeat)"
    )
    q.add_argument("run_ids", nargs="+", metavar="RUN_ID")
    # Suppressed default: `pte runs --store URL requeue RUN_ID` keeps the --store given before.
    q.add_argument("--store", metavar="URL", default=argparse.SUPPRESS, help="run store (default $PTE_STORE)")
    q.add_argument("--broker", help="Celery broker URL (default $PTE_BROKER)")
    q.add_argument(
        "--by", type=non_empty_text, metavar="NAME", help="who requeues (recorded; default: your login)"
    )
    add_json(q)
    q.set_defaults(func=runs_requeue)
    e = actions.add_parser(
        "end", help="end runs that cannot continue under this deployment (failed_closed(deployment_mismatch))"
    )
    e.add_argument("run_ids", nargs="+", metavar="RUN_ID")
    e.add_argument("--store", metavar="URL", default=argparse.SUPPRESS, help="run store (default $PTE_STORE)")
    e.add_argument(
        "--by", type=non_empty_text, metavar="NAME", help="who ends them (recorded; default: your login)"
    )
    add_json(e)
    e.set_defaults(func=runs_end)
