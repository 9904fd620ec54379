"""`pte replay` and `pte resume`: re-drive the engine from a log, with the deployment's authority.

Exit codes as for every command: 0 same decisions (or resumed to success), 1 a divergence, a
refusal or a failed run, 2 usage.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from pte._catalogue import Registry
from pte._cli._deployment import (
    EXIT_FAILED,
    EXIT_OK,
    _add_approvals,
    _add_json,
    _add_llm,
    _add_tools,
    _approval_keys,
    _gate,
    _in_force,
    _llm,
    _policy,
    _print_json,
    _registry,
    _report_run,
    add_procedures_option,
    add_specialists_option,
    specialists_of,
)
from pte._cli._store import add_store
from pte._cli._support import UsageError, add_execution_flags, input_file, resume_execution_settings
from pte._core import FailedClosed, PTEError

__all__ = ["add_replay_commands"]


def _deployment(args: argparse.Namespace, registry: Registry | None) -> Any:
    """The `pte.Deployment` a replay or resume acts under: the parts the deployment in force (or,
    without one, the flags) name, narrowed to `registry` (None: the run's recorded catalogue)."""
    from pte._deploy import Deployment

    policy = _policy(registry, args) if registry is not None else None
    if registry is None and args.policy is not None:
        raise UsageError("--policy needs --tools (the policy applies to the deployment's tools)")
    gate = _gate(registry, args, policy) if registry is not None else None
    from pte._cli._deployment import _deployment_anchors
    from pte._cli._endorse import endorsement_gate

    return Deployment.of(
        registry=registry,
        policy=policy,
        approvals=gate,
        keys=_approval_keys(args),
        anchors=_deployment_anchors(),  # replay checks the log against them, as verify does
        endorsements=endorsement_gate(args, _approval_keys(args)) if registry is not None else None,
        specialists=specialists_of(args, registry),
        fingerprint=_in_force(args),  # the deployment in force: a run started under another is refused
    )


def _refusal(what: str, log: str, exc: Exception, args: argparse.Namespace) -> int:
    if getattr(args, "json", False):
        _print_json({"status": "refused", "log": log, "message": str(exc)})
    else:
        print(f"{what} refused: {exc}", file=sys.stderr)
    return EXIT_FAILED


def cmd_replay(args: argparse.Namespace) -> int:
    from pte._core import AuditFormatError, LogNotIntact
    from pte._deploy import replay_file
    from pte.stores import is_store_url

    if is_store_url(args.log):
        import pte._cli._store as cli_store

        return cli_store.replay(args, _registry(args) if args.tools else None)
    input_file(args.log, "audit log")
    # Live, the tools run for real: --tools names them, or the deployment in force does.
    named = args.tools or (args.live and _in_force(args) is not None)
    registry = _registry(args) if named else None
    if args.live and registry is None:
        raise UsageError("--live needs --tools (or a deployment, pte init) to run the read tools for real")
    if args.allow_writes and not args.live:
        raise UsageError("--allow-writes only applies with --live")
    deployment = _deployment(args, registry)
    try:
        report = replay_file(args.log, live=args.live, allow_writes=args.allow_writes, deployment=deployment)
    except LogNotIntact as exc:
        return _refusal("replay", args.log, exc, args)
    except AuditFormatError as exc:
        print(f"cannot replay {args.log}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    if args.json:
        _print_json(report.to_dict())
    else:
        print(report.render())
    return EXIT_OK if report.ok else EXIT_FAILED


def cmd_resume(args: argparse.Namespace) -> int:
    import pte._cli._store as cli_store
    from pte._core import AuditFormatError, DeploymentError, LogNotIntact, ReplayDivergence, RunPaused
    from pte._deploy import resume_file

    if cli_store.uses_store(args, args.log):  # pte resume RUN_ID [--store URL, or $PTE_STORE]
        llm = _llm(args) if (args.replay_responses or args.model or args.base_url) else None
        return cli_store.resume(args, _registry(args), llm)
    input_file(args.log, "audit log")
    registry = _registry(args)
    _writes_need_a_deployment(args, registry)
    deployment = _deployment(args, registry)
    llm = _llm(args) if (args.replay_responses or args.model or args.base_url) else None
    try:
        execution = resume_execution_settings(args)
        result = resume_file(args.log, registry, llm=llm, deployment=deployment, **execution)
    except DeploymentError as exc:  # a flag wider than the run's recorded concurrency: nothing ran
        raise UsageError(f"cannot resume {args.log}: {exc}") from None
    except RunPaused:  # at a call whose value a person must endorse (pte._policy._endorsement)
        from pte._cli._endorse import report_pause

        return report_pause(args.log, args)
    except FailedClosed as exc:  # nothing to resume (no run, or the last one is sealed)
        print(f"cannot resume {args.log}: {exc.message}", file=sys.stderr)
        return EXIT_FAILED
    except LogNotIntact as exc:
        return _refusal("resume", args.log, exc, args)
    except ReplayDivergence as exc:
        return _refusal(
            "resume",
            args.log,
            PTEError(
                f"the log does not match what this deployment (tools, policy, approval store) decides, "
                f"so nothing was run or appended: {exc}"
            ),
            args,
        )
    except AuditFormatError as exc:
        print(f"cannot resume {args.log}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    return _report_run(result, args, args.log)


def _writes_need_a_deployment(args: argparse.Namespace, registry: Registry) -> None:
    """Safe by default: resuming a log whose plans call a write needs a deployment with a key."""
    from pte._audit import read_records
    from pte._cli._deployment_in_force import (
        require_bound_deployment,
        require_deployment_for_writes,
        tools_named,
    )

    try:
        records = read_records(args.log, skip_partial_tail=True)
    except (PTEError, OSError, ValueError):
        return  # resume refuses a log it cannot read, with its reason
    require_bound_deployment(args, records, f"the run in {args.log}")
    plans = [r for r in records if r.get("type") == "plan_accepted"]
    require_deployment_for_writes(args, registry, tools_named(plans), f"the run in {args.log}")


def add_replay_commands(sub: Any) -> None:
    """Register ``pte replay`` and ``pte resume`` on `sub` (an argparse sub-parsers action)."""
    p = sub.add_parser("replay", help="re-drive the engine from a log and check it makes the same decisions")
    p.add_argument("log", metavar="LOG|STORE_URL")
    p.add_argument("--run", metavar="RUN_ID", help="with a store URL: one run (default: every run)")
    p.add_argument(
        "--tools", action="append", metavar="PACK", help="the deployment's packs (else the recorded schemas)"
    )
    p.add_argument("--policy", metavar="FILE", help="the deployment's policy file (with --tools)")
    add_procedures_option(p)
    add_specialists_option(p)
    p.add_argument("--live", action="store_true", help="re-run read tools for real and diff their outputs")
    p.add_argument("--allow-writes", action="store_true", help="with --live: re-run write tools too")
    _add_approvals(p)
    _add_json(p)
    p.set_defaults(func=cmd_replay, allow=None, manifest=None)

    p = sub.add_parser("resume", help="finish a run whose log has no run_finished (or a stored run)")
    p.add_argument("log", metavar="LOG|RUN_ID", help="an audit log, or with --store a run id")
    _add_tools(p)
    add_specialists_option(p)
    add_store(p)
    _add_llm(p)
    _add_approvals(p)
    add_execution_flags(p)  # how the live part runs; the records do not depend on it
    _add_json(p)
    p.set_defaults(func=cmd_resume)
