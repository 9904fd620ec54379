"""``pte endorse LOG``: a person sees what a paused run asks them to vouch for, and decides.

The request is read from the log's verified records (the last run's ``run_paused`` with
reason ``awaiting_endorsement``): the exact values, their hash and where they come from. The
decision is signed with the approver's key (``--signing-key``, else
``$PTE_APPROVAL_SIGNING_KEY_FILE``) and appended to the endorsement store (``--endorsements``);
``pte resume LOG --endorsements FILE`` then continues the run (docs/endorsement.md).

A run in a run store: ``pte endorse RUN_ID --store URL`` (or ``$PTE_STORE``) reads the request
from the run's verified records in the store (`pte._cli._store.endorse`), never from its
``pte_runs`` row; the decision goes to the same endorsement store, and ``pte resume RUN_ID
--store URL --endorsements FILE`` continues the run.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from pte._cli._support import UsageError, input_file, output_file

__all__ = ["add_endorse_command", "decide_request", "endorsement_gate", "report_pause"]

DEFAULT_STORE = "pte_endorsements.jsonl"
EXIT_OK, EXIT_FAILED = 0, 1


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, ensure_ascii=False, default=str))


def _store_path(args: argparse.Namespace) -> str:
    from pte._cli._deployment_in_force import deployment_of

    deployment = deployment_of(args)
    if deployment is not None:
        if deployment.endorsements_path is None:
            raise UsageError(
                f'the deployment in {deployment.folder} names no endorsement store (its "endorsements")'
            )
        return str(deployment.endorsements_path)
    path = getattr(args, "endorsements", None) or DEFAULT_STORE
    output_file(path, "endorsement store")
    return str(path)


def endorsement_gate(args: argparse.Namespace, keys: Any) -> Any:
    """The deployment's endorsement gate (``--endorsements FILE``), or None without the option."""
    from pte._cli._deployment_in_force import deployment_of

    deployment = deployment_of(args)
    if deployment is not None:
        return deployment.endorsement_gate()
    if not getattr(args, "endorsements", None):
        return None
    from pte._policy import EndorsementGate, EndorsementStore

    return EndorsementGate(EndorsementStore(_store_path(args)), keys=keys)


def report_pause(log: str, args: argparse.Namespace) -> int:
    """A run paused for an endorsement: say what it waits for and how to decide."""
    from pte._audit import read_records
    from pte._policy import pending_endorsement

    records = read_records(log, skip_partial_tail=True)
    run_id = records[-1].get("run_id") if records else None
    request = pending_endorsement([r for r in records if r.get("run_id") == run_id])
    if request is None:
        print(f"the run in {log} paused (see pte audit show {log})", file=sys.stderr)
        return EXIT_OK
    if getattr(args, "json", False):
        _print_json(
            {"status": "awaiting_endorsement", "run_id": request.run_id, **request.to_dict(), "audit": log}
        )
    else:
        from pte._cli._hints import approver, pte_command, signing_flags, signing_note

        at = _endorsements_flag(args)
        note = signing_note(args)
        print(
            f"awaiting_endorsement: {request.describe()}\n"
            f"  review:  {pte_command('endorse', log, *at)}\n"
            f"  endorse: {pte_command('endorse', log, '--by', approver(), *at, *signing_flags(args))}\n"
            + (f"{note}\n" if note else "")
            + f"  then:    {_resume_log_command(log, args)}"
        )
    return EXIT_OK


def _endorsements_flag(args: argparse.Namespace) -> list[str]:
    """``--endorsements FILE`` for a hint; none under a deployment (it names the store)."""
    from pte._cli._deployment_in_force import deployment_of

    return [] if deployment_of(args) is not None else ["--endorsements", _store_path(args)]


def _resume_log_command(log: str, args: argparse.Namespace) -> str:
    """``pte resume LOG`` with what the run needs: nothing more under a deployment; else the
    deployment flags this command was given (``--tools``… and ``--endorsements``)."""
    from pte._cli._hints import deployment_flags, pte_command

    flags = deployment_flags(args)
    if "--endorsements" not in flags:
        flags += _endorsements_flag(args)
    return pte_command("resume", log, *flags)


def cmd_endorse(args: argparse.Namespace) -> int:
    """``pte endorse LOG``: the request from the log's verified records (a store run: `pte._cli._store`)."""
    from pte._audit import read_records, verify
    from pte._policy import pending_endorsement

    input_file(args.log, "audit log")
    report = verify(args.log)
    if not report.intact:
        print(f"endorse refused: {args.log} is not intact: {report.issue}", file=sys.stderr)
        return EXIT_FAILED
    records = read_records(args.log, skip_partial_tail=True)
    run_id = records[-1].get("run_id") if records else None
    request = pending_endorsement([r for r in records if r.get("run_id") == run_id])
    if request is None:
        print(
            f"endorse refused: the last run in {args.log} is not waiting for an endorsement", file=sys.stderr
        )
        return EXIT_FAILED
    return decide_request(args, request, _resume_log_command(args.log, args))


def decide_request(args: argparse.Namespace, request: Any, then: str) -> int:
    """Show `request` (an `EndorsementRequest` read from verified records) or record the decision
    of ``--by`` on it (``--reject``, ``--note``, ``--value-hash``, ``--signing-key``); `then`: how
    the run continues, printed after a decision."""
    from pte._core import EndorsementStoreError, KeyFileError
    from pte._policy import EndorsementStore, endorse, signing_key_from_env

    if args.value_hash is not None and args.value_hash != request.value_hash:
        print(
            f"endorse refused: the run waits with values hashed {request.value_hash}, not {args.value_hash}: "
            "review the values it waits with",
            file=sys.stderr,
        )
        return EXIT_FAILED
    if args.by is None:  # show only
        if getattr(args, "json", False):
            _print_json({"status": "awaiting_endorsement", "run_id": request.run_id, **request.to_dict()})
        else:
            print(request.describe())
        return EXIT_OK
    try:
        key = signing_key_from_env(args.signing_key)
    except KeyFileError as exc:
        raise UsageError(str(exc)) from None
    if not args.reject:  # a rejection only ends the run: it needs no signature to count
        from pte._cli._deployment_in_force import require_signer

        require_signer(args, key, "endorsement")
    try:
        made = endorse(
            EndorsementStore(_store_path(args)),
            request,
            args.by,
            reject=args.reject,
            note=args.note,
            signing_key=key,
        )
    except (ValueError, EndorsementStoreError) as exc:
        print(f"endorse refused: {exc}", file=sys.stderr)
        return EXIT_FAILED
    if args.json:
        _print_json({"status": made.decision, "endorsement_id": made.id, **made.to_dict()})
    else:
        print(request.describe())
        signed = "signed" if made.signed else "unsigned"
        print(f"{made.decision} by {made.by} ({signed}); continue with: {then}")
    return EXIT_OK


def add_endorse_command(sub: Any, add_json: Any) -> argparse.ArgumentParser:
    """Register ``pte endorse`` on `sub` (an argparse sub-parsers action); returns its parser
    (`pte._cli._store.add_endorse_store` adds ``--store``)."""
    p: argparse.ArgumentParser = sub.add_parser(
        "endorse", help="show or decide the value a paused run asks a person to endorse"
    )
    p.add_argument(
        "log",
        metavar="LOG|RUN_ID",
        help="the audit log of the paused run, or with --store (or $PTE_STORE) its run id",
    )
    p.add_argument("--by", metavar="NAME", help="who decides (without it: only show the request)")
    p.add_argument("--reject", action="store_true", help="reject the values (the run fails closed)")
    p.add_argument("--note", metavar="TEXT", help="a note kept with the decision")
    p.add_argument("--value-hash", metavar="HASH", help="the value hash you reviewed (refused if it differs)")
    p.add_argument(
        "--signing-key",
        metavar="FILE",
        help="the approver's Ed25519 key (default $PTE_APPROVAL_SIGNING_KEY_FILE)",
    )
    add_endorsements_option(p)
    add_json(p)
    p.set_defaults(func=cmd_endorse)
    return p


def add_endorsements_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--endorsements",
        metavar="FILE",
        help=f"endorsement store (pte endorse writes {DEFAULT_STORE} by default); with it, a plan may "
        "pause at a call whose value the policy lets a person endorse",
    )
