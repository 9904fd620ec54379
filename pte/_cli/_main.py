"""The `pte` command line.

Exit codes for every command: 0 ok, 1 rejected or failed closed, 2 usage error (a missing
file, a bad flag, a tool pack that cannot be loaded).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import pte._cli._store as cli_store
from pte import __version__
from pte._catalogue import Registry
from pte._cli._audit import add_audit_commands
from pte._cli._deployment import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    _add_approvals,
    _add_json,
    _add_llm,
    _add_tools,
    _approvals_path,
    _endorsable,
    _engine,
    _gate,
    _llm,
    _open_audit,
    _policy,
    _policy_checks,
    _print_json,
    _registry,
    _report_run,
    add_specialists_option,
    current_redactor,
    set_redactor,
    specialists_of,
)
from pte._cli._endorse import add_endorse_command, add_endorsements_option, report_pause
from pte._cli._replay import add_replay_commands
from pte._cli._runs import add_runs_command
from pte._cli._support import (
    MAX_APPROVAL_TTL_S,
    MAX_VALID_FOR_HOURS,
    InputFileError,
    UsageError,
    add_execution_flags,
    bounded_float,
    bounded_int,
    guarded,
    non_empty_text,
    non_negative_int,
    output_file,
    read_bounded,
    redacted_output,
    run_command,
)
from pte._cli._tools import add_tools_command
from pte._core import PlanRejected, Redactor, RunPaused

if TYPE_CHECKING:  # only annotations: the CLI imports the signing code when it signs
    from pte._core import SignedDecision, SigningKey

__all__ = ["main"]


def _read_text(path: str, what: str) -> str:
    """A plan file: a regular file, read up to the plan byte limit plus one (the compiler
    rejects a longer text as plan_too_large without the rest ever being read)."""
    from pte._plan import DEFAULT_LIMITS

    try:
        text, _ = read_bounded(path, what, DEFAULT_LIMITS.max_bytes)
    except InputFileError as exc:
        raise UsageError(str(exc)) from None
    return text


# --- commands ---------------------------------------------------------------------------------


def cmd_schema(args: argparse.Namespace) -> int:
    from pte._core import load_schema

    names = {
        "plan": "plan.schema.json",
        "audit": "audit-record.schema.json",
        "manifest": "tool-manifest.schema.json",
    }
    names["policy"] = "policy.schema.json"
    names["procedure"] = "procedure.schema.json"
    print(json.dumps(load_schema(names[args.which]), indent=2, ensure_ascii=False))
    return EXIT_OK


def cmd_validate(args: argparse.Namespace) -> int:
    from pte._plan import compile_plan

    registry = _registry(args)
    text = _read_text(args.plan_file, "plan file")
    checks = _policy_checks(registry, args)
    try:
        plan = compile_plan(text, registry, checks=checks)
    except PlanRejected as rejection:
        if args.json:
            _print_json({"status": "rejected", **rejection.to_dict()})
        else:
            print(f"rejected: {rejection.reason.value} at {rejection.path}: {rejection.message}")
        return EXIT_FAILED
    if args.json:
        _print_json(
            {"status": "accepted", "plan_hash": plan.hash, "steps": len(plan), "order": list(plan.order)}
        )
    else:
        print(f"accepted: {len(plan)} step(s), plan hash {plan.hash}")
        print("order: " + " → ".join(plan.order))
    return EXIT_OK


def _in_store(registry: Registry, llm: Any, args: argparse.Namespace, **what: str | None) -> int | None:
    """With --store, run in the store (the run may pause for approval); None: use --audit. Under
    a deployment with a run store, runs go to it unless --audit names a log."""
    if not cli_store.uses_store(args) or (args.store is None and args.audit is not None):
        if args.audit is None:
            raise UsageError("--audit LOG or --store URL is required")
        return None
    return cli_store.run_or_execute(
        args,
        lambda gate: _engine(registry, llm, args, gate(registry)),
        plan_text=what.get("plan_text"),
        request=what.get("request"),
    )


def _run_id_arg(args: argparse.Namespace) -> str | None:
    from pte.stores import StoreError, check_run_id

    if args.run_id is None:
        return None
    try:
        return check_run_id(args.run_id)
    except StoreError as exc:
        raise UsageError(f"--run-id: {exc}") from None


def _approved_run(registry: Registry, args: argparse.Namespace, text: str) -> str | None:
    """The run `pte approve PLAN_FILE` created for this plan: the newest approval of it in the
    deployment's store that counts here and has not been used. None: no such approval (the run
    gets a new id, and the gate says why it cannot run if it needs one)."""
    from pte._audit import Approval
    from pte._core import ApprovalConsumed, PTEError
    from pte._plan import compile_plan

    policy = _policy(registry, args)
    gate = _gate(registry, args, policy)
    endorsable = _endorsable(args)  # as the engine will compile it
    try:
        plan = compile_plan(text, registry, checks=[policy.check(endorsable=endorsable)])
        approval = gate.check(plan)
    except ApprovalConsumed:  # its run already ran: run it again, so that it is refused as such
        used = [a for a in gate.store.find(plan.hash) if gate.refusal(a, plan) is None]
        approval = used[-1] if used else None
    except PTEError:
        return None
    return approval.run if isinstance(approval, Approval) else None  # a procedure approval binds no run


def _plan_tools(text: str, registry: Registry) -> set[str]:
    """The tools a plan calls (its procedures inlined); none when it does not compile (the engine
    then rejects it on the record, and nothing runs)."""
    from pte._plan import compile_plan

    try:
        return {step.tool for step in compile_plan(text, registry).tool_steps()}
    except PlanRejected:
        return set()


def cmd_execute(args: argparse.Namespace) -> int:
    from pte._cli._deployment_in_force import require_deployment_for_writes

    registry = _registry(args)
    text = _read_text(args.plan_file, "plan file")
    require_deployment_for_writes(args, registry, _plan_tools(text, registry), "this plan")
    _approvals_path(args)  # checked before the log is created
    # The run `pte approve PLAN_FILE` approved, in a store as in a log (its approval binds it).
    run_id = _run_id_arg(args) or _approved_run(registry, args, text)
    args.run_id = run_id
    stored = _in_store(registry, None, args, plan_text=text)
    if stored is not None:
        return stored
    audit = _open_audit(args.audit, durability=args.durability, run_id=run_id)
    try:
        with audit:
            result = _engine(registry, None, args).execute(text, audit)
    except RunPaused:  # at a call whose value a person must endorse (pte._policy._endorsement)
        return report_pause(args.audit, args)
    return _report_run(result, args, args.audit)


def cmd_run(args: argparse.Namespace) -> int:
    from pte._cli._deployment_in_force import require_deployment_for_writes

    registry = _registry(args)
    # The planner may call any tool it is shown: every write of the allow-list counts.
    require_deployment_for_writes(args, registry, registry.names, "this run (its allow-list)")
    llm = _llm(args)
    _approvals_path(args)  # checked before the log is created
    specialists_of(args, registry)  # refused before any log or store is written (#36)
    stored = _in_store(registry, llm, args, request=args.request)
    if stored is not None:
        return stored
    audit = _open_audit(args.audit, durability=args.durability, run_id=_run_id_arg(args))
    try:
        with audit:
            result = _engine(registry, llm, args).run(args.request, audit)
    except RunPaused:  # at a call whose value a person must endorse (pte._policy._endorsement)
        return report_pause(args.audit, args)
    return _report_run(result, args, args.audit)


def cmd_plan(args: argparse.Namespace) -> int:
    from pte._audit import AuditLog

    registry = _registry(args)
    output = output_file(args.output, "plan file")
    llm = _llm(args)
    specialists_of(args, registry)  # refused before the log is written (#36)
    audit = _open_audit(args.audit) if args.audit else AuditLog(None, redactor=current_redactor())
    with audit:
        result = _engine(registry, llm, args).plan(args.request, audit)
    if not result.ok:
        return _report_run(result, args, args.audit)
    plan = result.plans[-1]
    try:
        output.write_text(plan.to_json() + "\n", encoding="utf-8")
    except OSError as exc:
        print(f"cannot write plan file {args.output!r}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_FAILED
    if args.json:
        _print_json({"status": "accepted", "plan_hash": plan.hash, "output": args.output, "steps": len(plan)})
    else:
        print(f"plan written to {args.output}: {len(plan)} step(s), hash {plan.hash}")
        from pte._cli._deployment_in_force import deployment_of, init_command, writes_of
        from pte._cli._hints import approver, deployment_flags, pte_command, signing_flags, signing_note

        if deployment_of(args) is None and writes_of(registry, {s.tool for s in plan.tool_steps()}):
            # Its writes run only under a deployment, whose approval store is its own: the
            # deployment first, or an approval given now would not count there.
            print(
                f"it calls a write, which runs only under a deployment; make one first: {init_command(args)}"
            )
            args.tools = args.allow = None  # the deployment names them: the hints below need neither
            for name in ("manifest", "procedures", "policy", "approvals", "approval_keys", "specialists"):
                setattr(args, name, None)
            target: list[str] = []  # the deployment `pte init` makes keeps its runs in its store
        else:
            target = _run_target(args)
        flags = deployment_flags(args)
        note = signing_note(args)
        print(
            f"review it, then (if a tool in it needs approval): "
            f"{pte_command('approve', args.output, '--by', approver(), *flags, *signing_flags(args))}\n"
            + (f"{note}\n" if note else "")
            + f"execute it: {pte_command('execute', args.output, *flags, *target)}"
        )
    return EXIT_OK


def _run_target(args: argparse.Namespace) -> list[str]:
    """Where a hinted ``pte execute`` keeps its run: the deployment's run store when it names one
    (no flag: the deployment does), else an audit log (``--audit pte_audit.jsonl``)."""
    from pte._cli._deployment_in_force import deployment_of

    deployment = deployment_of(args)
    if deployment is not None and deployment.store_url is not None:
        return []
    return ["--audit", "pte_audit.jsonl"]


def cmd_approve(args: argparse.Namespace) -> int:
    from datetime import timedelta

    from pte._cli._hints import approver

    args.by = args.by or approver()  # who runs the command, as `pte runs requeue` records it
    from pte._plan import compile_plan
    from pte._policy import ApprovalStore, approve, catalogue_fingerprint

    if (args.plan_file is None) == (args.procedure is None):
        raise UsageError("give a PLAN_FILE (or with --store a RUN_ID), or --procedure FILE, not both")
    if args.procedure is not None:
        return _approve_procedure(args)
    if cli_store.uses_store(args, args.plan_file):  # pte approve RUN_ID [--store URL]: a paused run's plan
        args.target = args.plan_file
        return cli_store.decide(args, approve=True)
    registry = _registry(args)
    text = _read_text(args.plan_file, "plan file")
    policy = _policy(registry, args)
    key = _approval_signing_key(args)
    try:
        # With an endorsement store the deployment pauses such calls for a person (pte._policy._endorsement).
        endorsable = _endorsable(args)
        plan = compile_plan(text, registry, checks=[policy.check(endorsable=endorsable)])
    except PlanRejected as rejection:
        print(f"not approved: the plan is rejected: {rejection}", file=sys.stderr)
        return EXIT_FAILED
    approval = approve(
        plan,
        args.by,
        ApprovalStore(_approvals_path(args)),
        catalogue=catalogue_fingerprint(registry, plan, policy),
        signing_key=key,
        valid_for=timedelta(hours=args.valid_for),
    )
    from pte._cli._hints import deployment_flags, pte_command

    print(
        f"approved run {approval.run} of plan {plan.hash} by {args.by} at {approval.at} until "
        f"{approval.expires}, {_signed_words(approval)}; recorded in {_approvals_path(args)}\n"
        "execute it (once) with: "
        + pte_command("execute", args.plan_file, *deployment_flags(args), *_run_target(args))
    )
    return EXIT_OK


def _approval_signing_key(args: argparse.Namespace) -> SigningKey | None:
    """The signing key of `pte approve` (plan or procedure), after checking ``--valid-for``."""
    from pte._core import KeyFileError
    from pte._policy import signing_key_from_env

    if not args.valid_for > 0:
        raise UsageError("--valid-for must be a positive number of hours")
    try:
        key = signing_key_from_env(args.signing_key)
    except KeyFileError as exc:
        raise UsageError(str(exc)) from None
    from pte._cli._deployment_in_force import require_signer

    require_signer(args, key, "approval")
    return key


def _signed_words(approval: SignedDecision) -> str:
    """How `pte approve` says whether the approval it recorded is signed, and by which key."""
    if approval.signature:
        return f"Ed25519-signed by key {approval.key_id}"
    return "unsigned (give --signing-key or $PTE_APPROVAL_SIGNING_KEY_FILE to sign)"


def _approve_procedure(args: argparse.Namespace) -> int:
    """pte approve --procedure FILE --by NAME: approve that procedure version for any run."""
    from datetime import timedelta

    from pte._core import ProcedureError
    from pte._core import strict_json as strict_json
    from pte._plan import Procedure, load_procedures
    from pte._policy import ApprovalStore, approve_procedure, procedure_fingerprint

    if getattr(args, "store", None) is not None:
        raise UsageError(
            "--procedure approves a procedure file for the approval store (--approvals), not --store"
        )
    registry = _registry(args)
    text = _read_text(args.procedure, "procedure file")
    try:
        document = strict_json.loads(text)
    except ValueError as exc:
        raise UsageError(f"procedure file {args.procedure!r} is not JSON: {exc}") from None
    try:
        procedure = Procedure.from_document(document, Path(args.procedure).name)
        # Checked as the deployment loads it: beside its other procedures (this one replaces a
        # loaded one of its name, the version being approved), against the allow-list.
        others = [p for name, p in registry.procedures.items() if name != procedure.name]
        load_procedures([*others, procedure], registry)
    except ProcedureError as exc:
        raise UsageError(f"procedure file {args.procedure!r}: {exc}") from None
    policy = _policy(registry, args)
    key = _approval_signing_key(args)
    approval = approve_procedure(
        procedure,
        args.by,
        ApprovalStore(_approvals_path(args)),
        catalogue=procedure_fingerprint(registry, procedure, policy),
        signing_key=key,
        valid_for=timedelta(hours=args.valid_for),
    )
    print(
        f"approved procedure {procedure.name} version {procedure.version} by {args.by} at {approval.at} "
        f"until {approval.expires}, {_signed_words(approval)}; recorded in {_approvals_path(args)}\n"
        "its writes now run in any run that calls this version, once per run and step"
    )
    return EXIT_OK


def cmd_keys_generate(args: argparse.Namespace) -> int:
    from pte._core import SigningKey

    # One convention with pte init and pte audit keygen: PATH and PATH.pub; --private/--public
    # name the two files instead.
    if args.path is not None and (args.private or args.public):
        raise UsageError("give PATH (writes PATH and PATH.pub) or --private and --public, not both")
    if args.path is None and not (args.private and args.public):
        raise UsageError("give PATH (writes PATH and PATH.pub), or both --private FILE and --public FILE")
    private = Path(args.path if args.path is not None else args.private)
    public = Path(f"{args.path}.pub" if args.path is not None else args.public)
    for path in (private, public):
        if path.exists() and not args.force:
            raise UsageError(f"{path} exists; use --force to overwrite it")
    key = SigningKey.generate()
    try:
        # The private key file is created readable by its owner only.
        fd = os.open(private, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(key.to_pem())
        public.write_bytes(key.public_key.to_pem())
    except OSError as exc:
        raise UsageError(f"cannot write the key files: {exc}") from None
    print(
        f"Ed25519 approval key {key.public_key.key_id}: private key in {private} (approvers only: "
        f"pte approve --signing-key), public key in {public} (name it in the deployment: pte init "
        f"--approval-keys {public}, or its document's approval_keys)"
    )
    return EXIT_OK


def cmd_init(args: argparse.Namespace) -> int:
    """``pte init [DIR]``: a deployment folder: its document (what runs' authority depends on) and key."""
    from pte._cli._deployment_init import init_command

    return init_command(args)


def cmd_ledger_init(args: argparse.Namespace) -> int:
    from pte._catalogue import load_pack

    module = sys.modules[load_pack("backoffice")["list_overdue_invoices"].func.__module__]
    path = Path(args.path or os.environ.get("PTE_LEDGER", "pte_ledger.sqlite"))
    if path.exists() and not args.force:
        raise UsageError(f"{path} exists; use --force to recreate it")
    module.create_sample_ledger(path, overwrite=True)
    print(f"sample ledger created at {path} (set PTE_LEDGER={path} to use it)")
    return EXIT_OK


def cmd_demo(args: argparse.Namespace) -> int:
    from pte._cli._demo import run_demo

    if args.out is not None and Path(args.out).exists() and not Path(args.out).is_dir():
        raise UsageError(f"--out {args.out!r} exists and is not a directory")
    return run_demo(out_dir=args.out, as_json=args.json)


# --- the parser -------------------------------------------------------------------------------


def _add_run_store(parser: argparse.ArgumentParser) -> None:
    cli_store.add_store(parser)
    parser.add_argument(
        "--run-id",
        help="the run id (default: with --store a new one; else the run `pte approve` created, or a new one)",
    )
    parser.add_argument(
        "--approval-ttl",
        type=bounded_float(MAX_APPROVAL_TTL_S, "seconds"),
        metavar="SECONDS",
        help="with --store: how long a paused run waits (at most 365 days: 31536000)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pte", description="PTE: a strict plan-then-execute engine.")
    parser.add_argument("--version", action="version", version=f"pte {__version__}")
    parser.add_argument(
        "--log-format", choices=["auto", "json", "console"], default="auto", help="engine logs on stderr"
    )
    parser.add_argument("--quiet", action="store_true", help="no engine logs")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("schema", help="print a JSON Schema (the plan schema by default)")
    p.add_argument(
        "which", nargs="?", choices=["plan", "audit", "manifest", "policy", "procedure"], default="plan"
    )
    p.set_defaults(func=cmd_schema)

    p = sub.add_parser("validate", help="compile a plan file without running it")
    p.add_argument("plan_file")
    _add_tools(p)
    _add_json(p)
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("execute", help="compile and execute a plan file (no LLM involved)")
    p.add_argument("plan_file")
    _add_tools(p)
    p.add_argument("--audit", metavar="LOG", help="audit log (JSON Lines) to append to")
    _add_run_store(p)
    _add_approvals(p)
    p.add_argument("--durability", choices=["always", "batch", "none"], default="batch")
    add_execution_flags(p)
    _add_json(p)
    p.set_defaults(func=cmd_execute)

    p = sub.add_parser("run", help="plan a request with an LLM, execute it, and answer")
    p.add_argument("request")
    _add_tools(p)
    p.add_argument("--audit", metavar="LOG")
    _add_run_store(p)
    _add_llm(p)
    add_specialists_option(p)
    p.add_argument("--max-replans", type=non_negative_int, default=2)
    p.add_argument(
        "--no-repair",
        action="store_true",
        help="end the run on any rejected plan instead of sending a fixable one back once (docs/planning.md)",
    )
    p.add_argument(
        "--no-llm-answer", action="store_true", help="render the plan's result instead of an LLM answer"
    )
    p.add_argument(
        "--planner-data",
        choices=["handles", "shown"],
        default="handles",
        help="what later planners see of untrusted data: handles (default) or the text, which "
        "exposes their plans (docs/planner-exposure.md)",
    )
    p.add_argument(
        "--data-budget",
        type=bounded_int(200, 1_000_000),
        default=16_000,
        metavar="CHARS",
        help="characters per data block shown to a planner or the finalizer (default 16000)",
    )
    _add_approvals(p)
    p.add_argument("--durability", choices=["always", "batch", "none"], default="batch")
    add_execution_flags(p)
    _add_json(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("plan", help="compile a request into a plan file for review (nothing runs)")
    p.add_argument("request")
    _add_tools(p)
    p.add_argument("-o", "--output", required=True, metavar="PLAN_FILE")
    p.add_argument("--audit", metavar="LOG", help="also record the planner call")
    add_specialists_option(p)
    _add_llm(p)
    _add_json(p)
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("approve", help="record a person's approval of a plan's exact hash, or of a procedure")
    p.add_argument(
        "plan_file", nargs="?", metavar="PLAN_FILE|RUN_ID", help="a plan file, or with --store a paused run"
    )
    p.add_argument(
        "--procedure",
        metavar="FILE",
        help="approve this procedure file's version instead: its writes run in any run, any arguments the "
        "policy allows",
    )
    p.add_argument(
        "--by", metavar="NAME", type=non_empty_text, help="who approves (recorded; default: your login)"
    )
    p.add_argument("--approvals", metavar="FILE", help="approval store (default pte_approvals.jsonl)")
    add_endorsements_option(p)
    p.add_argument(
        "--signing-key",
        metavar="FILE",
        help="the approver's Ed25519 private key (PEM; default $PTE_APPROVAL_SIGNING_KEY_FILE)",
    )
    p.add_argument(
        "--valid-for",
        type=bounded_float(MAX_VALID_FOR_HOURS, "hours"),
        default=24.0,
        metavar="HOURS",
        help="how long the approval counts (24; at most 8760)",
    )
    _add_tools(p, required=False)
    cli_store.add_store(p)
    p.add_argument("--plan-hash", help="with --store: the plan hash you reviewed")
    p.add_argument("--broker", help="with --store: also queue the run so a worker continues it")
    p.set_defaults(func=cmd_approve)

    from pte._cli._deployment_init import add_init_options

    p = sub.add_parser(
        "init", help="make a deployment: one document naming its tools, policy, keys and stores, and its key"
    )
    add_init_options(p)
    p.set_defaults(func=cmd_init)

    keys = sub.add_parser("keys", help="approval signing keys").add_subparsers(
        dest="keys_command", metavar="ACTION", required=True
    )
    p = keys.add_parser("generate", help="create an Ed25519 key pair for approvals (PATH and PATH.pub)")
    p.add_argument(
        "path",
        nargs="?",
        metavar="PATH",
        help="the private key; the public key is PATH.pub (as pte init writes)",
    )
    p.add_argument("--private", metavar="FILE", help="private key (PEM, mode 0600), instead of PATH")
    p.add_argument("--public", metavar="FILE", help="public key (PEM), instead of PATH.pub")
    p.add_argument("--force", action="store_true")
    p.set_defaults(func=cmd_keys_generate)

    audit = sub.add_parser("audit", help="verify, checkpoint, show or report an audit log").add_subparsers(
        dest="audit_command", metavar="ACTION", required=True
    )

    add_audit_commands(audit)

    add_replay_commands(sub)
    cli_store.add_endorse_store(add_endorse_command(sub, _add_json))

    cli_store.add_commands(sub, _add_tools, _add_json, _add_llm)

    add_tools_command(sub)

    add_runs_command(sub, _add_json)

    p = sub.add_parser("demo", help="run the offline demo scenarios on the back-office pack")
    p.add_argument("--out", metavar="DIR", help="keep the audit logs here (default: a temporary directory)")
    p.add_argument("--verbose", action="store_true", help="also print the engine's log lines (stderr)")
    _add_json(p)
    # The demo's table is its output: engine logs would bury it, so they are opt-in here.
    p.set_defaults(func=cmd_demo, quiet_unless_verbose=True)

    ledger = sub.add_parser("ledger", help="the sample back-office ledger").add_subparsers(
        dest="ledger_command", metavar="ACTION", required=True
    )
    p = ledger.add_parser("init", help="create the sample SQLite ledger")
    p.add_argument("--path", help="default: $PTE_LEDGER or ./pte_ledger.sqlite")
    p.add_argument("--force", action="store_true")
    p.set_defaults(func=cmd_ledger_init)
    return parser


@functools.cache
def _parser() -> argparse.ArgumentParser:
    """`build_parser`'s parser, built once per process: it is the same every time (no default
    read from the environment), parsing leaves it as it was, and building it is most of what an
    in-process `main` call costs (argparse looks up a translation for each of its strings)."""
    return build_parser()


def _fail_usage(parser: argparse.ArgumentParser, message: str) -> NoReturn:
    parser.print_usage(sys.stderr)
    print(f"pte: error: {message}", file=sys.stderr)
    raise SystemExit(EXIT_USAGE)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `pte` console script.

    Everything printed goes through the audit log's redaction (`RedactingWriter`); Ctrl-C
    exits 130 after the run is sealed as ``interrupted``; no input ends in a traceback.
    """
    from pte._cli._deployment_in_force import forget_deployment

    parser = _parser()
    try:
        redactor = _redactor()
    except ValueError as exc:
        _fail_usage(parser, f"cannot load the secret rules: {exc}")
    set_redactor(redactor)
    try:
        with redacted_output(redactor):
            return guarded(lambda: _main(parser, argv), debug=bool(os.environ.get("PTE_DEBUG")))
    finally:
        set_redactor(None)
        forget_deployment()


def _redactor() -> Redactor:
    """The deployment's redactor (its rules added to the environment's), else the environment's.
    A deployment that cannot be read is left for the command to report (exit 2)."""
    from pte._cli._deployment_in_force import current_deployment, forget_deployment
    from pte._core import DeploymentError

    try:
        deployment = current_deployment()
    except UsageError:
        forget_deployment()
        deployment = None
    if deployment is None:
        return Redactor.from_env()
    try:
        return deployment.redactor()
    except DeploymentError as exc:
        raise ValueError(str(exc)) from None


def _main(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> int:
    # A shell cannot pass a NUL byte, but main() can be called with one: no path, URL or
    # name may hold it (open() and friends raise ValueError deep inside a command).
    if argv is not None and any("\x00" in str(arg) for arg in argv):
        _fail_usage(parser, "an argument contains a NUL byte")
    args = parser.parse_args(argv)
    from pte._core import configure_logging, quiet_logging

    if args.quiet or (getattr(args, "quiet_unless_verbose", False) and not args.verbose):
        quiet_logging()
    else:
        json_lines = {"auto": None, "json": True, "console": False}[args.log_format]
        configure_logging(json_lines=json_lines)
    return run_command(args.func, args, lambda message: _fail_usage(parser, message))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
