"""The `pte` commands for run stores, paused approvals and workers (wired up in `pte._cli._main`).

Store URLs (``sqlite:///abs/path.db``, ``sqlite:rel.db``, ``postgresql://…``) are accepted
wherever a command reads runs: ``pte audit verify|show``, ``pte replay`` and ``pte resume``
take ``URL --run RUN_ID`` as well as a JSON Lines file. ``--store`` defaults to
``$PTE_STORE`` and ``--broker`` to ``$PTE_BROKER``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import timedelta
from typing import Any

from pte._cli._deployment import _llm, _packs, _registry
from pte._cli._imports import is_import_spec
from pte._cli._support import (
    MAX_APPROVAL_TTL_S,
    MAX_SUBMIT_COUNT,
    MAX_VISIBILITY_TIMEOUT_S,
    MAX_WORKER_PROCESSES,
    InputFileError,
    UsageError,
    add_execution_flags,
    bounded_float,
    bounded_int,
    broker_problem,
    check_broker_url,
    execution_settings,
    non_empty_text,
    read_bounded,
    resume_execution_settings,
    store_file,
)
from pte._core import DeploymentError, FailedClosed, PTEError
from pte.stores import Store, StoreError, open_store

__all__ = ["add_commands"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class _Usage(Exception):
    pass


def _usage_error() -> type[Exception]:
    return UsageError


def _deployment_store() -> str | None:
    """The run store of the deployment in force (None: no deployment, or it names none)."""
    from pte._cli._deployment_in_force import current_deployment

    deployment = current_deployment()
    return deployment.store_url if deployment is not None else None


def _store(url: str | None, *, evidence: bool = False) -> Store:
    """The run store a command works on: under a deployment, its store (a --store or $PTE_STORE
    naming another is refused); `evidence`: a store given to read (audit verify/show, replay)."""
    if not evidence:
        from pte._cli._deployment_in_force import deployment_store

        url = deployment_store(url) or url
    url = url or os.environ.get("PTE_STORE")
    if not url:
        raise _usage_error()("--store is required (or set PTE_STORE): sqlite:///path.db or postgresql://…")
    store_file(url, existing=evidence)
    try:
        return open_store(url)
    except StoreError as exc:
        raise _usage_error()(str(exc)) from None


def uses_store(args: argparse.Namespace, target: str | None = None) -> bool:
    """Whether a command that takes ``--store`` works on the run store.

    ``--store URL`` says so; without it, ``$PTE_STORE`` does, unless the command's positional
    argument names an existing file (``pte approve plan.json`` or ``pte resume run.jsonl``
    with ``PTE_STORE`` set in the shell still mean the file). A run id is never a path.
    """
    if getattr(args, "store", None) is not None:
        return True
    if not os.environ.get("PTE_STORE") and _deployment_store() is None:
        return False
    return target is None or not os.path.lexists(target)


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, ensure_ascii=False, default=str))


def _run_ids(store: Store, run: str | None) -> list[str]:
    if run is not None:
        try:
            known = store.run(run) is not None or bool(list(store.lines(run)))
        except StoreError as exc:
            raise _usage_error()(str(exc)) from None
        if not known:
            raise _usage_error()(f"no run {run!r} in {store.describe()}")
        return [run]
    return [info.run_id for info in store.runs()]


# --- audit verify / show, replay on a store ----------------------------------------------------


def audit_verify(args: argparse.Namespace) -> int:
    """``pte audit verify URL [--run ID]``: every run (or one) verified as stored."""
    from pte._audit import stored_verdict

    anchors = _anchors()
    with _store(args.log, evidence=True) as store:
        try:
            run_ids = _run_ids(store, args.run)
            results = []
            for run_id in run_ids:
                # The verdict `pte audit verify` gives a log, the report shows and replay acts on.
                found = stored_verdict(store, run_id, anchors=anchors)
                report = found.report
                info = store.run(run_id)
                status = found.status
                tampered = found.problem if report.intact and status == "tampered" else None
                if found.ok and not report.complete:  # paused for a person: say for what
                    status = info.status if info is not None else "awaiting_approval"
                # The chain's own report first: its "ok" (sealed and intact) must not replace
                # this one, which also counts a run paused for approval as ok.
                results.append(
                    {
                        **report.to_dict(),
                        **found.to_dict(),
                        "run_id": run_id,
                        "status": status,
                        "database_check": tampered,
                    }
                )
        except StoreError as exc:
            print(f"cannot verify {store.describe()}: {exc}", file=sys.stderr)
            return EXIT_FAILED
    bad = [r for r in results if not r["ok"]]
    if args.json:
        _print_json({"store": store.describe(), "runs": len(results), "failed": len(bad), "results": results})
    else:
        for r in results:
            if not r["ok"] or args.run is not None:
                issue = r["database_check"] or (r["issue"] or {}).get("message") or ""
                print(
                    f"{r['run_id']}: {r['status'].upper() if not r['ok'] else r['status']}"
                    + (f": {issue}" if issue else f" ({r['records']} records)")
                )
        print(f"{len(results) - len(bad)} of {len(results)} run(s) verified in {store.describe()}")
    return EXIT_OK if results and not bad else EXIT_FAILED


def audit_show(args: argparse.Namespace) -> int:
    from pte._audit import render_timeline
    from pte._catalogue import stored_contents
    from pte._replay import RunView, render_steps

    if args.run is None:
        raise _usage_error()("--run RUN_ID is required with a store URL")
    with _store(args.log, evidence=True) as store:
        _run_ids(store, args.run)
        records = store.records(args.run)
        print(render_timeline(records))
        print("\n".join(render_steps(RunView.fold(args.run, records, stored_contents(records)))))
    return EXIT_OK


def replay(args: argparse.Namespace, registry: Any) -> int:
    from pte._audit import stored_verdict
    from pte._deploy import replay_run
    from pte._replay import ReplayReport

    anchors = _anchors()
    with _store(args.log, evidence=True) as store:
        runs = []
        verdicts = []
        for run_id in _run_ids(store, args.run):
            # Verify before act, as a log file's replay does: the verdict `pte audit verify` gives.
            found = stored_verdict(store, run_id, anchors=anchors)
            if found.status == "tampered":
                if args.json:
                    _print_json(
                        {"status": "refused", "log": store.describe(), "run_id": run_id, **found.to_dict()}
                    )
                else:
                    print(f"replay refused: run {run_id} does not verify: {found.problem}", file=sys.stderr)
                return EXIT_FAILED
            verdicts.append(found)
            records = store.records(run_id)
            runs.append(
                replay_run(
                    list(enumerate(records, 1)),
                    registry=registry,
                    live=args.live,
                    allow_writes=args.allow_writes,
                )
            )
    report = ReplayReport(store.describe(), runs, verdicts[0] if len(verdicts) == 1 else None)
    if args.json:
        _print_json(report.to_dict())
    else:
        print(report.render())
    return EXIT_OK if report.ok else EXIT_FAILED


# --- running in a store, pausing, deciding, resuming -------------------------------------------


def _gate(store: Store, registry: Any, args: argparse.Namespace) -> Any:
    from pte._cli._deployment import _approval_keys, _approvals_path, _in_force, _policy
    from pte._deploy import pausing_gate
    from pte._policy import ApprovalStore

    deployment = _in_force(args)
    given = deployment is not None or getattr(args, "approvals", None)
    approvals = ApprovalStore(_approvals_path(args)) if given else None
    ttl = timedelta(seconds=getattr(args, "approval_ttl", None) or 86400)
    # Approvals bind the policy in force (catalogue fingerprint): the deployment's file, if given.
    policy = _policy(registry, args) if deployment is not None or getattr(args, "policy", None) else None
    return pausing_gate(
        store, registry, keys=_approval_keys(args), ttl=ttl, approvals=approvals, policy=policy
    )


def report(result: Any, args: argparse.Namespace, store: Store) -> int:
    from pte._deploy import PausedRun

    if isinstance(result, PausedRun) and result.status == "awaiting_endorsement":
        from pte._cli._hints import (
            approver,
            deployment_flags,
            pte_command,
            signing_flags,
            signing_note,
            store_flags,
        )
        from pte._policy import pending_endorsement

        records = store.records(result.run_id)
        request = pending_endorsement(records)
        # Why the decisions found did not count (the pause's message says, from the gate).
        message = str(records[-1].get("message") or "") if records else ""
        not_counted = message.split("; not counted: ", 1)[1] if "; not counted: " in message else None
        if args.json:
            _print_json(
                {
                    **result.to_dict(),
                    **(request.to_dict() if request else {}),
                    "not_counted": not_counted,
                    "store": store.describe(),
                }
            )
        else:
            run_id, at = result.run_id, [*store_flags(args, store), *_endorsements_flag(args)]
            signed = signing_flags(args)
            shown = request.describe() if request else f"run {run_id} waits for an endorsement"
            print(
                f"awaiting_endorsement: {shown}\n"
                + (f"  not counted: {not_counted}\n" if not_counted else "")
                + f"  review:  {pte_command('endorse', run_id, *at)}\n"
                f"  endorse: {pte_command('endorse', run_id, '--by', approver(), *at, *signed)}\n"
                + _noted(signing_note(args))
                + f"  then:    {pte_command('resume', run_id, *at, *deployment_flags(args))}"
            )
        return EXIT_OK
    if isinstance(result, PausedRun):
        if args.json:
            _print_json({**result.to_dict(), "store": store.describe()})
        else:
            from pte._cli._hints import (
                approver,
                deployment_flags,
                pte_command,
                signing_flags,
                signing_note,
                store_flags,
            )

            at, signed = store_flags(args, store), signing_flags(args)
            print(
                f"awaiting_approval: run {result.run_id} waits for a person to approve plan "
                f"{result.plan_hash} ({', '.join(result.tools)}) until {result.expires_at}.\n"
                f"  review:  {pte_command('approvals', 'list', '--plans', *at)}\n"
                f"  approve: {pte_command('approve', result.run_id, '--by', approver(), *at, *signed)}\n"
                + _noted(signing_note(args))
                + f"  then:    {pte_command('resume', result.run_id, *at, *deployment_flags(args))}"
            )
        return EXIT_OK
    from pte._cli._deployment import _report_run

    return int(_report_run(result, args, f"{store.describe()} run {result.run_id}"))


def _noted(note: str | None) -> str:
    """A hint's note as its own line (none: nothing)."""
    return f"{note}\n" if note else ""


def _endorsements_flag(args: argparse.Namespace) -> list[str]:
    """``--endorsements FILE`` for a hint; none under a deployment (it names the store)."""
    from pte._cli._deployment import _in_force
    from pte._cli._endorse import _store_path

    return [] if _in_force(args) is not None else ["--endorsements", _store_path(args)]


def run_or_execute(
    args: argparse.Namespace, engine_factory: Any, *, plan_text: str | None, request: str | None
) -> int:
    """``pte execute|run … --store URL``: the run is kept in the store and may pause."""
    from pte._deploy import run_in_store

    with _store(args.store) as store:
        engine = engine_factory(_gate_factory(store, args))
        result = run_in_store(
            engine, store, run_id=args.run_id, plan_text=plan_text, request=request, anchors=_anchors()
        )
        return report(result, args, store)


def _anchors() -> Any:
    from pte._cli._deployment import _deployment_anchors

    return _deployment_anchors()


def _gate_factory(store: Store, args: argparse.Namespace) -> Any:
    return lambda registry: _gate(store, registry, args)


def approvals_list(args: argparse.Namespace) -> int:
    """``pte approvals list``: the waiting runs, each with the plan its verified records hold.

    The plan hash and plan come from the run's hash-verified ``plan_accepted`` record
    (`pte._deploy._runs.awaiting_plan`), never from the ``pte_runs`` columns; a run whose records do
    not show one is listed as unreviewable, with the reason, and no plan.
    """
    from pte._deploy import awaiting_plan

    shown: list[tuple[Any, str | None, dict[str, Any] | None, str | None]] = []
    with _store(args.store) as store:
        for info in store.runs("awaiting_approval"):
            try:
                shown.append((info, *awaiting_plan(store, info.run_id), None))
            except StoreError as exc:
                shown.append((info, None, None, str(exc)))
    if args.json:
        _print_json(
            [
                {**info.to_dict(), "plan_hash": hash_, "plan": plan, "problem": problem}
                for info, hash_, plan, problem in shown
            ]
        )
        return EXIT_OK
    if not shown:
        print("no run is awaiting approval")
    for info, hash_, plan, problem in shown:
        if problem is not None:
            print(f"{info.run_id}  CANNOT BE REVIEWED: {problem}")
            continue
        print(f"{info.run_id}  plan {hash_}  tools {','.join(info.tools)}  until {info.expires_at}")
        if args.plans and plan is not None:
            print(json.dumps(plan, indent=2, ensure_ascii=False))
    return EXIT_OK


def approvals_expire(args: argparse.Namespace, registry: Any) -> int:
    """``pte approvals expire``: end every paused run whose deadline passed with no decision.

    Each is resumed: the gate finds no counting approval after the deadline and the run ends
    ``failed_closed(approval_missing)`` on the record. Run it from cron, or any time.
    """
    from pte._deploy import is_expired, resume_run

    ended = []
    with _store(args.store) as store:
        for info in store.runs("awaiting_approval"):
            if not is_expired(info.expires_at) or store.decisions(info.run_id):
                continue
            try:
                result = resume_run(
                    store, info.run_id, registry, gate=_gate(store, registry, args), anchors=_anchors()
                )
            except FailedClosed as exc:
                print(f"{info.run_id}: cannot end it: {exc.message}", file=sys.stderr)
                continue
            ended.append(
                {
                    "run_id": info.run_id,
                    "status": result.status,
                    "reason": getattr(getattr(result, "reason", None), "value", None),
                }
            )
    if args.json:
        _print_json(ended)
    else:
        for item in ended:
            print(f"{item['run_id']}: {item['status']}({item['reason']})")
        print(f"{len(ended)} expired run(s) ended")
    return EXIT_OK


def decide(args: argparse.Namespace, *, approve: bool) -> int:
    from pte._core import KeyFileError
    from pte._deploy import decide as record_decision
    from pte._policy import signing_key_from_env

    try:
        signing_key = signing_key_from_env(getattr(args, "signing_key", None))
    except KeyFileError as exc:
        print(f"not recorded: {exc}", file=sys.stderr)
        return EXIT_FAILED
    if approve:
        from pte._cli._deployment_in_force import require_signer

        require_signer(args, signing_key, "approval")

    with _store(args.store) as store:
        try:
            decision = record_decision(
                store,
                args.target,
                by=args.by,
                approve=approve,
                note=getattr(args, "note", None),
                signing_key=signing_key,
                plan_hash=getattr(args, "plan_hash", None),
            )
        except (StoreError, ValueError) as exc:
            print(f"not recorded: {exc}", file=sys.stderr)
            return EXIT_FAILED
        print(
            f"{decision.decision}: plan {decision.plan_hash} of run {decision.run_id} by {decision.by} "
            f"at {decision.at}"
        )
        print(_after_decision(args, store, decision.run_id, approve=approve))
    return EXIT_OK


def _after_decision(args: argparse.Namespace, store: Store, run_id: str, *, approve: bool) -> str:
    """What really happens to a decided run next: queued (and how a worker ends or continues
    it), or the command that does it; a run that cannot continue under the deployment in hand
    is ended by ``pte runs end``, whatever the decision (a worker would end it the same way)."""
    from pte._cli._deployment import _in_force
    from pte._cli._hints import pte_command, store_flags
    from pte._deploy import stranded

    info = store.run(run_id)
    reason = stranded(store, info, _in_force(args)) if info is not None else None
    queued = bool(getattr(args, "broker", None) or os.environ.get("PTE_BROKER"))
    if reason is not None:
        end = pte_command("runs", *store_flags(args, store), "end", run_id)
        if queued:
            _enqueue(args, [run_id])
            return (
                f"run {run_id} queued, but {reason}: a worker ends it failed_closed(deployment_mismatch), "
                f"nothing runs (or end it now: {end})"
            )
        return f"{reason}: it cannot continue here, nothing runs; end it with: {end}"
    if queued:
        _enqueue(args, [run_id])
        if approve:
            return f"run {run_id} queued to resume: a worker continues it under the approved plan"
        return f"run {run_id} queued: a worker ends it failed_closed(approval_rejected); nothing runs"
    return _resume_hint(args, store, run_id)


def _resume_hint(args: argparse.Namespace, store: Store, run_id: str, extra: tuple[str, ...] = ()) -> str:
    """How to continue a decided run, as a command that runs as printed: under a deployment, which
    names everything resume needs, ``pte resume RUN_ID`` (and the flags that narrowed it);
    `extra`: further flags the resume needs (``--endorsements FILE`` without a deployment)."""
    from pte._cli._deployment import _in_force
    from pte._cli._deployment_in_force import init_command
    from pte._cli._hints import deployment_flags, pte_command, store_flags

    if _in_force(args) is not None:
        flags = deployment_flags(args, approvals=False) + list(extra)
        return f"continue it with: {pte_command('resume', run_id, *store_flags(args, store), *flags)}"
    # A paused run waits to write, and a write runs only under a deployment (`no_deployment`);
    # under one, a run that none anchored at its start is refused: it is started again.
    return (
        f"run {run_id} was started without a deployment, so it cannot continue (a write runs only "
        "under one, which never anchored this run's start); run its plan again under a deployment, "
        f"made with: {init_command(args)}"
    )


def resume(args: argparse.Namespace, registry: Any, llm: Any = None) -> int:
    """``pte resume RUN_ID --store URL``: continue the same run (after a crash or a decision)."""
    from pte._deploy import resume_run

    with _store(args.store) as store:
        _run_ids(store, args.log)
        info = store.run(args.log)
        if info is None:
            raise _usage_error()(f"no run {args.log!r} in {store.describe()}")
        from pte._cli._deployment_in_force import (
            require_bound_deployment,
            require_deployment_for_writes,
            tools_named,
        )

        require_bound_deployment(args, store.records(args.log), f"run {args.log}")
        plans = [r for r in store.records(args.log) if r.get("type") == "plan_accepted"]
        require_deployment_for_writes(args, registry, tools_named(plans), f"run {args.log}")
        if info.status == "awaiting_approval" and not store.decisions(args.log):
            from pte._deploy import is_expired

            if not is_expired(info.expires_at):
                from pte._cli._hints import approver, pte_command, signing_flags, signing_note, store_flags

                approve = pte_command(
                    "approve", args.log, "--by", approver(), *store_flags(args, store), *signing_flags(args)
                )
                print(
                    f"run {args.log} is awaiting approval of plan {info.plan_hash} until {info.expires_at}: "
                    f"approve or reject it first: {approve}"
                    + (f"\n{signing_note(args)}" if signing_note(args) else ""),
                    file=sys.stderr,
                )
                return EXIT_FAILED
        try:
            from pte._cli._deployment import _approval_keys, _in_force, _policy
            from pte._cli._endorse import endorsement_gate

            result = resume_run(
                store,
                args.log,
                registry,
                gate=_gate(store, registry, args),
                llm=llm,
                anchors=_anchors(),
                endorsements=endorsement_gate(args, _approval_keys(args)),
                # The deployment's policy file, as the run was started with (--policy).
                policy=_policy(registry, args) if _has_policy(args) else None,
                deployment=_in_force(args),  # a run started under another one is refused
                # How its live steps run: the run's recorded settings, narrowed by the flags.
                **resume_execution_settings(args),
            )
        except DeploymentError as exc:  # a flag wider than the run's recorded concurrency: nothing ran
            raise _usage_error()(f"cannot resume run {args.log}: {exc}") from None
        except FailedClosed as exc:
            print(f"cannot resume: {exc.message}", file=sys.stderr)
            return EXIT_FAILED
        return report(result, args, store)


def _has_policy(args: argparse.Namespace) -> bool:
    from pte._cli._deployment import _in_force

    return _in_force(args) is not None or bool(getattr(args, "policy", None))


def endorse(args: argparse.Namespace) -> int:
    """``pte endorse RUN_ID --store URL``: show or decide what a paused store run waits for.

    The request is read from the run's records after its chain verifies in the store, never
    from its ``pte_runs`` row (a copy any writer of the database can change); the decision is
    signed and bound to run, step, element and value hash (`pte._policy._endorsement`) and goes to the
    deployment's endorsement store (``--endorsements``), which resume checks under the trusted keys.
    """
    from pte._cli._endorse import decide_request
    from pte._policy import pending_endorsement
    from pte.stores import check_run_id

    try:
        run_id = check_run_id(args.log)
    except StoreError as exc:
        raise _usage_error()(f"RUN_ID: {exc}") from None
    with _store(args.store) as store:
        _run_ids(store, run_id)
        report = store.verify(run_id)
        if not report.intact:
            where = store.describe()
            print(
                f"endorse refused: run {run_id} does not verify in {where}: {report.issue}", file=sys.stderr
            )
            return EXIT_FAILED
        try:
            request = pending_endorsement(store.records(run_id))
        except ValueError as exc:
            print(f"endorse refused: run {run_id}: {exc}", file=sys.stderr)
            return EXIT_FAILED
        if request is None or request.run_id != run_id:
            info = store.run(run_id)
            status = info.status if info is not None else "unknown"
            print(
                f"endorse refused: run {run_id} is not waiting for an endorsement (its records end "
                f"{'in a pause for an approval' if status == 'awaiting_approval' else 'otherwise'}; "
                f"status {status})",
                file=sys.stderr,
            )
            return EXIT_FAILED
        hint = _resume_hint(args, store, run_id, tuple(_endorsements_flag(args)))
        return decide_request(args, request, hint.removeprefix("continue it with: "))


def add_endorse_store(parser: argparse.ArgumentParser) -> None:
    """``pte endorse``'s ``--store``: a run id then names a paused run in the store."""
    add_store(parser)
    parser.set_defaults(func=cmd_endorse)


def cmd_endorse(args: argparse.Namespace) -> int:
    if uses_store(args, args.log):
        return endorse(args)
    from pte._cli._endorse import cmd_endorse as endorse_log

    return endorse_log(args)


# --- workers ----------------------------------------------------------------------------------


def _broker(args: argparse.Namespace) -> str:
    broker = getattr(args, "broker", None) or os.environ.get("PTE_BROKER")
    if not broker:
        raise _usage_error()("--broker is required (or set PTE_BROKER): redis://host:6379/0")
    return check_broker_url(str(broker))


def _enqueue(args: argparse.Namespace, run_ids: list[str]) -> None:
    from pte._deploy import enqueue, make_app

    enqueue(make_app(_broker(args)), run_ids)


#: What `pte worker` and `pte submit` say they do when there is no deployment (`no_deployment`).
_WORKER_WRITES = "a worker runs the writes of the jobs it takes"
_SUBMIT_WRITES = "a submitted job runs on the deployment's workers, which run its writes"


def _deployment_for_workers(args: argparse.Namespace, what: str) -> Any:
    """The deployment `pte worker`/`pte submit` act under, with its key on this machine; a usage
    error (`no_deployment`, exit 2) naming the `pte init` that makes one when there is none:
    workers take their authority from nothing else."""
    from pte._cli._deployment import _in_force
    from pte._cli._deployment_in_force import no_deployment_message

    deployment = _in_force(args)
    if deployment is None:
        raise _usage_error()(no_deployment_message(what, args))
    return deployment


def worker(args: argparse.Namespace, packs: list[str]) -> int:
    from pte._deploy import QUEUE, WorkerConfig, make_app

    deployment = _deployment_for_workers(args, _WORKER_WRITES)
    broker = _broker(args)
    with _store(args.store):  # fail early on a bad store, in the parent
        pass
    if not deployment.has_key:
        raise _usage_error()(
            f"this machine does not hold the deployment's key ({deployment.key_path}): a worker checks "
            "jobs and anchors its runs with it; copy the deployment folder with its key here"
        )
    llm = {
        name: value
        for name, value in (
            ("model", args.model), ("base_url", args.base_url), ("replay_responses", args.replay_responses),
            ("timeout", args.timeout), ("max_retries", args.max_retries),
        )
        if value is not None
    } if (args.model or args.base_url or args.replay_responses) else {}  # fmt: skip
    execution = execution_settings(args)
    config = WorkerConfig(
        # The worker's processes build everything from the deployment (`_workers._Context`).
        str(deployment.folder),
        tuple(packs),
        args.approval_ttl or 86400.0,
        json.dumps(llm),
        execution["max_concurrency"],
        execution["serial_writes"],
    )
    os.environ.update(config.to_env())
    app = make_app(broker, visibility_timeout=args.visibility_timeout)
    argv = [
        "worker",
        "-Q",
        QUEUE,
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
        "--loglevel",
        args.loglevel,
        "-n",
        args.name or f"pte-{os.getpid()}@%h",
    ]
    argv += (
        ["--pool", "solo"] if args.concurrency == 1 else ["--pool", "prefork", "-c", str(args.concurrency)]
    )
    app.worker_main(argv)
    return EXIT_OK


def submit(args: argparse.Namespace, packs: list[str], registry: Any) -> int:
    """``pte submit``: each job redacted, signed with the deployment key for its run id, stored
    ``queued``; only its run id goes on the broker (`pte._deploy._jobs`)."""
    from pte._cli._deployment import current_redactor
    from pte._deploy import redact_job, submit_job

    deployment = _deployment_for_workers(args, _SUBMIT_WRITES)
    if args.count < 1:
        raise _usage_error()("--count must be at least 1")
    if (args.plan_file is None) == (args.request is None):
        raise _usage_error()("give a plan file or --request, not both")
    what = (
        {"mode": "run", "request": args.request}
        if args.request is not None
        else {"mode": "execute", "plan_text": _plan_text(args.plan_file)}
    )
    signing_key = _job_signing_key(deployment)
    # What the worker may do is signed with the job: the allow-list it was narrowed to here and
    # the deployment fingerprint (catalogue, policy, procedures) it was submitted under.
    job, redacted = redact_job(
        {
            **what,
            "tools": packs,
            "allow": sorted(registry.names),
            # The workers apply the deployment's policy, which its fingerprint binds.
            "policy": None,
            "deployment": deployment.fingerprint,
        },
        current_redactor(),
    )
    if redacted:
        print(
            "note: the job holds values the deployment's redaction rules treat as secrets; it is stored "
            "(and runs) with them replaced by [REDACTED], as the run's records would show them. Give a "
            "tool its secrets through its own configuration, never in a plan or request.",
            file=sys.stderr,
        )
    broker = _broker(args)
    problem = broker_problem(broker)  # before anything is stored: no run is left stranded
    if problem is not None:
        print(f"not submitted: {problem}", file=sys.stderr)
        return EXIT_FAILED
    with _store(args.store) as store:
        try:
            run_ids = [
                submit_job(
                    store, job, run_id=args.run_id if args.count == 1 else None, signing_key=signing_key
                )
                for _ in range(args.count)
            ]
        except StoreError as exc:
            print(f"not submitted: {exc}", file=sys.stderr)
            return EXIT_FAILED
    try:
        _enqueue(args, run_ids)
    except Exception as exc:  # the broker went away since the check: say which runs are stored
        print(
            f"stored but not enqueued (the broker {broker!r} failed: {exc}): {' '.join(run_ids)}",
            file=sys.stderr,
        )
        return EXIT_FAILED
    if args.json:
        _print_json({"submitted": run_ids})
    else:
        for run_id in run_ids:
            print(run_id)
    return EXIT_OK


def _job_signing_key(deployment: Any) -> Any:
    """The deployment key that signs jobs; a usage error (exit 2) where this machine does not hold
    it: workers run only signed jobs, so an unsigned one would only end
    ``failed_closed(job_signature_invalid)``."""
    from pte._core import SigningKey

    if not deployment.has_key:
        raise _usage_error()(
            f"this machine does not hold the deployment's key ({deployment.key_path}): pte submit "
            "signs each job with it; submit from a machine that holds the deployment folder with its key"
        )
    try:
        return SigningKey.load(deployment.key_path)
    except PTEError as exc:
        raise _usage_error()(f"the deployment key: {exc}") from None


def _plan_text(path: str) -> str:
    """A plan file: regular, UTF-8, read up to the plan byte limit plus one (the worker's
    compile then rejects a longer text as plan_too_large)."""
    from pte._plan import DEFAULT_LIMITS

    try:
        text, _ = read_bounded(path, "plan file", DEFAULT_LIMITS.max_bytes)
    except InputFileError as exc:
        raise _usage_error()(str(exc)) from None
    return text


# --- the commands' handlers --------------------------------------------------------------------


def cmd_approvals_list(args: argparse.Namespace) -> int:
    return approvals_list(args)


def cmd_approvals_expire(args: argparse.Namespace) -> int:
    return approvals_expire(args, _registry(args))


def cmd_reject(args: argparse.Namespace) -> int:
    from pte._cli._hints import approver

    args.by = args.by or approver()  # who runs the command, as `pte runs requeue` records it
    return decide(args, approve=False)


def _no_imports_for_workers(args: argparse.Namespace) -> None:
    if any(is_import_spec(p) for p in _packs(args)):
        raise UsageError(
            "workers load their packs themselves: --tools mcp:/openapi: works with execute, run, "
            "validate, plan, approve and resume; for workers, write a pack file that imports them"
        )


def cmd_worker(args: argparse.Namespace) -> int:
    _no_imports_for_workers(args)
    _deployment_for_workers(args, _WORKER_WRITES)
    _registry(args)  # a pack that cannot be loaded is a usage error here, not in every task
    if args.replay_responses or args.model or args.base_url:
        _llm(args)  # a bad LLM setting is a usage error here, not in every task
    return worker(args, _packs(args))


def cmd_submit(args: argparse.Namespace) -> int:
    _no_imports_for_workers(args)
    _deployment_for_workers(args, _SUBMIT_WRITES)
    return submit(args, _packs(args), _registry(args))


def add_commands(sub: Any, add_tools: Any, add_json: Any, add_llm: Any) -> None:
    """Register ``approvals``, ``reject``, ``worker`` and ``submit`` (the rest extend existing ones)."""
    approvals = sub.add_parser("approvals", help="runs awaiting approval").add_subparsers(
        dest="approvals_command", metavar="ACTION", required=True
    )
    p = approvals.add_parser("list", help="list the runs that wait for a person's approval")
    add_store(p)
    p.add_argument("--plans", action="store_true", help="print each waiting plan")
    add_json(p)
    p.set_defaults(func=cmd_approvals_list)
    p = approvals.add_parser("expire", help="end the paused runs whose approval deadline has passed")
    add_tools(p)
    add_store(p)
    add_json(p)
    p.set_defaults(func=cmd_approvals_expire)

    p = sub.add_parser("reject", help="reject the plan a paused run waits with (it ends approval_rejected)")
    p.add_argument("target", metavar="RUN_ID")
    p.add_argument(
        "--by", metavar="NAME", type=non_empty_text, help="who rejects (recorded; default: your login)"
    )
    p.add_argument("--note", help="why (recorded)")
    p.add_argument("--plan-hash", help="the plan hash you reviewed (refused if it is not the waiting plan)")
    add_store(p)
    p.add_argument("--broker", help="also queue the run so a worker ends it (default $PTE_BROKER)")
    p.set_defaults(func=cmd_reject)

    p = sub.add_parser("worker", help="start a Celery worker that runs submitted runs from a store")
    add_tools(p)
    add_store(p)
    p.add_argument("--broker", help="Celery broker URL, e.g. redis://127.0.0.1:6379/0 (default $PTE_BROKER)")
    p.add_argument(
        "--concurrency",
        type=bounded_int(1, MAX_WORKER_PROCESSES),
        default=1,
        help=f"worker processes (default 1, at most {MAX_WORKER_PROCESSES})",
    )
    p.add_argument("--name", help="worker node name")
    p.add_argument(
        "--visibility-timeout",
        type=bounded_float(MAX_VISIBILITY_TIMEOUT_S, "seconds"),
        default=60.0,
        help="seconds before an unacknowledged run is delivered again (default 60, at most 7 days)",
    )
    p.add_argument(
        "--approval-ttl",
        type=bounded_float(MAX_APPROVAL_TTL_S, "seconds"),
        help="seconds a paused run waits for a decision (default 86400, at most 365 days: 31536000)",
    )
    p.add_argument(
        "--loglevel",
        default="WARNING",
        type=str.upper,
        choices=["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"],
        help="the worker's log level (default WARNING)",
    )
    add_execution_flags(p)
    add_llm(p)
    p.set_defaults(func=cmd_worker)

    p = sub.add_parser("submit", help="queue runs of a plan file (or a request) for the workers")
    p.add_argument("plan_file", nargs="?", help="a plan file (or give --request)")
    p.add_argument("--request", help="a request the worker plans with its LLM endpoint")
    add_tools(p)
    add_store(p)
    p.add_argument("--broker", help="Celery broker URL (default $PTE_BROKER)")
    p.add_argument(
        "--count",
        type=bounded_int(1, MAX_SUBMIT_COUNT),
        default=1,
        help=f"submit this many runs of the plan (at most {MAX_SUBMIT_COUNT:,})",
    )
    p.add_argument("--run-id", help="the run id (with --count 1)")
    add_json(p)
    p.set_defaults(func=cmd_submit)


def add_store(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store", metavar="URL", help="run store: sqlite:///path.db or postgresql://… (default $PTE_STORE)"
    )


def store_error_exit(exc: PTEError) -> int:
    print(f"store error: {exc}", file=sys.stderr)
    return EXIT_FAILED
