"""What a command's flags make of the deployment, shared by the `pte` commands.

The tool registry (``--tools``, ``--allow``, ``--manifest``), the policy (``--policy``), the
approval gate (``--approvals``, ``--approval-keys``), the LLM client, the engine and the audit
log, with the flags that name them, and how a run's result is printed. `pte._cli._main` (the parser
and the core commands), `pte._cli._replay`, `pte._cli._store` and `pte._cli._audit` all build
from these, so that every command reads a flag the same way. The redactor of the running
command is set here by `pte._cli._main.main`.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from pte._catalogue import STOCK_PACKS, Registry, load_registry
from pte._cli._support import (
    UsageError,
    execution_settings,
    http_url,
    input_file,
    non_negative_int,
    output_file,
    positive_float,
    positive_int,
    print_json,
)
from pte._core import FailedClosed, LLMError, PTEError, Redactor, ToolPackError, ToolRegistrationError
from pte._run import DEFAULT_MAX_TOKENS

__all__ = ["EXIT_FAILED", "EXIT_OK", "EXIT_USAGE", "current_redactor", "set_redactor"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


#: The redactor of the running command (`pte._cli._main.main` sets it): the audit log's and the output's.
_redactor: Redactor | None = None


def _print_json(value: Any) -> None:
    print_json(value, _redactor)


def set_redactor(redactor: Redactor | None) -> None:
    """Set the redactor of the running command (its audit log's and its output's)."""
    global _redactor
    _redactor = redactor


def current_redactor() -> Redactor | None:
    """The redactor of the running command, if one is running."""
    return _redactor


def _in_force(args: argparse.Namespace) -> Any:
    """The deployment this command runs under, narrowed by its flags (None: no deployment)."""
    from pte._cli._deployment_in_force import deployment_of

    return deployment_of(args)


def _deployment_call(make: Any) -> Any:
    """``make()``, a `DeploymentError` (a path, a pack, a key the deployment names) as a usage error."""
    from pte._core import DeploymentError

    try:
        return make()
    except DeploymentError as exc:
        raise UsageError(str(exc)) from None


def _packs(args: argparse.Namespace) -> list[str]:
    from pte._cli._imports import is_import_spec

    deployment = _in_force(args)
    if deployment is not None:
        return list(deployment.packs)

    # An importer spec (mcp:CMD, openapi:SPEC#a,b) is one value: its commas are its own.
    packs = [
        p for spec in (args.tools or []) for p in ([spec] if is_import_spec(spec) else spec.split(",")) if p
    ]
    if not packs:
        raise UsageError(
            "--tools is required (or run under a deployment: `pte init` with the packs it serves): "
            "a stock pack "
            f"({', '.join(STOCK_PACKS)}), an installed pack, a .py file "
            "or a module (`pte tools` lists them)"
        )
    return packs


def _pack_refs(packs: list[str], args: argparse.Namespace) -> list[str | Registry]:
    """Packs as `load_registry` takes them: an importer spec becomes the registry it imports,
    imported once per command (kept on its `args`): its registry and its policy's whole packs
    are one import, as a deployment object's are, even when the spec's file changes between
    them (imported twice, they could describe two versions of it)."""
    from pte._cli._imports import import_spec, is_import_spec

    imported: dict[str, Registry] = vars(args).setdefault("_imported_specs", {})
    for spec in packs:
        if is_import_spec(spec) and spec not in imported:
            imported[spec] = import_spec(spec)
    return [imported[p] if is_import_spec(p) else p for p in packs]


def _registry(args: argparse.Namespace) -> Registry:
    """The allow-list: the packs named by --tools, narrowed by --allow and --manifest; under a
    deployment, its registry (narrowed by --tools and --allow), after checking its paths."""
    deployment = _in_force(args)
    if deployment is not None:
        from pte._cli._deployment_in_force import checked
        from pte._cli._imports import import_spec

        registry: Registry = _deployment_call(
            lambda: checked(deployment).registry(import_spec_with=import_spec)
        )
        return registry
    packs = _packs(args)
    input_file(getattr(args, "manifest", None), "manifest")
    input_file(getattr(args, "policy", None), "policy file")
    allow = [a for spec in (getattr(args, "allow", None) or []) for a in spec.split(",") if a] or None
    try:
        registry = load_registry(
            _pack_refs(packs, args), allow=allow, manifest=getattr(args, "manifest", None)
        )
    except (ToolPackError, ToolRegistrationError) as exc:
        raise UsageError(str(exc)) from None
    return _with_procedures(registry, args)


def _with_procedures(registry: Registry, args: argparse.Namespace) -> Registry:
    """The registry with the procedures of --procedures DIR (checked against its allow-list)."""
    folder = getattr(args, "procedures", None)
    if not folder:
        return registry
    from pte._core import ProcedureError
    from pte._plan import load_procedures

    try:
        return registry.with_procedures(load_procedures(folder, registry))
    except ProcedureError as exc:
        raise UsageError(str(exc)) from None


def _add_tools(parser: argparse.ArgumentParser, *, required: bool = True) -> None:
    parser.add_argument(
        "--tools",
        action="append",
        metavar="PACK",
        # Required without a deployment (`_packs` says so); under one, its packs, which this narrows.
        help=f"tool pack: a stock pack ({', '.join(STOCK_PACKS)}), an installed pack, a .py file or a "
        "module; repeat or comma-separate (`pte tools` lists them); under a deployment: some of its packs",
    )
    parser.add_argument(
        "--allow", action="append", metavar="TOOL", help="narrow the allow-list to these tools"
    )
    parser.add_argument("--manifest", metavar="FILE", help="a tool manifest narrowing the allow-list")
    add_procedures_option(parser)
    parser.add_argument("--policy", metavar="FILE", help="a data-flow policy file (compliance-owned)")


def add_procedures_option(parser: argparse.ArgumentParser) -> None:
    """--procedures DIR: the deployment's procedure files (docs/procedures.md)."""
    parser.add_argument(
        "--procedures",
        metavar="DIR",
        help="a folder of procedure files (*.json) plans may call like tools (docs/procedures.md)",
    )


def add_specialists_option(parser: argparse.ArgumentParser) -> None:
    """--specialists FILE: the deployment's specialists (docs/specialists.md)."""
    parser.add_argument(
        "--specialists",
        metavar="FILE",
        help="a JSON or YAML file of specialists the planner delegates to (docs/specialists.md)",
    )


def specialists_of(args: argparse.Namespace, registry: Registry | None) -> Any:
    """The specialists of --specialists FILE, checked against the deployment's registry (None:
    no option). A file that does not load or names tools outside the allow-list is a usage error."""
    deployment = _in_force(args)
    if deployment is not None:
        return _deployment_call(lambda: deployment.specialists(registry)) or None
    path = getattr(args, "specialists", None)
    if path is None:
        return None
    from pte._core import SpecialistError
    from pte._plan import check_specialists, load_specialists

    input_file(path, "--specialists file")
    try:
        specialists = load_specialists(path)
        if registry is not None:
            check_specialists(specialists, registry)
    except SpecialistError as exc:
        raise UsageError(f"--specialists {path!r}: {exc}") from None
    return specialists


def _add_approvals(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--approvals", metavar="FILE", help="approval store (default pte_approvals.jsonl)")
    parser.add_argument(
        "--approval-keys",
        metavar="FILE",
        help="trusted approvers' Ed25519 public keys (PEM; default $PTE_APPROVAL_PUBLIC_KEYS_FILE); "
        "with keys, only approvals signed by one of them count",
    )
    from pte._cli._endorse import add_endorsements_option

    add_endorsements_option(parser)


def _add_json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def _policy(registry: Registry, args: argparse.Namespace) -> Any:
    from pte._policy import Policy

    deployment = _in_force(args)
    if deployment is not None:
        from pte._cli._imports import import_spec

        return _deployment_call(lambda: deployment.policy(registry, import_spec_with=import_spec))
    path = getattr(args, "policy", None)
    try:
        if path is None:
            return Policy.from_registry(registry)
        # Tool names in the file are checked against the whole packs (a typo is an error), so
        # one compliance-owned file serves deployments that narrow the allow-list differently.
        policy = Policy.from_registry(load_registry(_pack_refs(_packs(args), args))).with_file(path)
        narrowed = {name: entry for name, entry in policy.tools.items() if name in registry}
        return Policy(narrowed, registry=registry, sources=policy.sources, default=policy.default)
    except PTEError as exc:
        raise UsageError(str(exc)) from None


def _endorsable(args: argparse.Namespace) -> bool:
    """Whether a person may endorse a guarded value here (the deployment, or --endorsements, names
    an endorsement store): plans are compiled so by every command, as the engine compiles them."""
    deployment = _in_force(args)
    if deployment is not None:
        return deployment.endorsements_path is not None
    return bool(getattr(args, "endorsements", None))


def _policy_checks(registry: Registry, args: argparse.Namespace) -> list[Any]:
    return [_policy(registry, args).check(endorsable=_endorsable(args))]


def _deployment_anchors() -> Any:
    """The deployment's anchors (its key and anchors file), else from the environment, or None."""
    from pte._audit import anchors_from_env
    from pte._cli._deployment_in_force import current_deployment
    from pte._core import AnchorError

    deployment = current_deployment()
    if deployment is not None:
        return _deployment_call(deployment.anchors)

    try:
        return anchors_from_env()
    except AnchorError as exc:
        raise UsageError(str(exc)) from None


def _open_audit(path: str, **kwargs: Any) -> Any:
    from pte._audit import AuditLog

    target = output_file(path, "audit log")
    kwargs.setdefault("anchors", _deployment_anchors())
    try:
        return AuditLog(target, redactor=_redactor, **kwargs)
    except FailedClosed as exc:
        raise UsageError(f"cannot open audit log {path!r}: {exc.message}") from None


def _report_run(result: Any, args: argparse.Namespace, audit_path: str | None) -> int:
    if args.json:
        _print_json({**result.to_dict(), "audit": audit_path})
    else:
        if result.ok:
            print(result.answer or "")
            print(
                f"\nsucceeded: {len(result.steps)} step(s), {result.llm_calls} LLM call(s); "
                f"audit log {audit_path}"
            )
        elif result.status == "condition_not_met":  # pte._plan._control: a require was false; not a failure
            print(f"{result.message}\n\ncondition_not_met: nothing after the require step ran")
        else:
            print(f"failed_closed({result.reason.value}): {result.message}", file=sys.stderr)
            plan_file = getattr(args, "plan_file", None)
            if result.reason.value == "approval_missing" and plan_file:
                from pte._cli._hints import deployment_flags, pte_command, signing_flags, signing_note

                # The engine does not know the file; this command does: the approve that runs.
                approve = pte_command("approve", plan_file, *deployment_flags(args), *signing_flags(args))
                note = signing_note(args)
                print(
                    f"approve it: {approve}, then run this command again" + (f"\n{note}" if note else ""),
                    file=sys.stderr,
                )
            if result.result is not None:
                print(json.dumps(result.result, indent=2, ensure_ascii=False))
    return EXIT_OK if result.ok or result.status == "condition_not_met" else EXIT_FAILED


def _approvals_path(args: argparse.Namespace) -> str:
    deployment = _in_force(args)
    if deployment is not None:
        return str(deployment.approvals_path)
    path = getattr(args, "approvals", None) or "pte_approvals.jsonl"
    output_file(path, "approval store")
    return str(path)


def _approval_keys(args: argparse.Namespace) -> Any:
    """The deployment's trusted approval public keys (--approval-keys, else the environment)."""
    from pte._core import KeyFileError
    from pte._policy import public_keys_from_env

    deployment = _in_force(args)
    if deployment is not None:
        return _deployment_call(deployment.approval_keys)
    try:
        return public_keys_from_env(getattr(args, "approval_keys", None))
    except KeyFileError as exc:
        raise UsageError(str(exc)) from None


def _gate(registry: Registry, args: argparse.Namespace, policy: Any) -> Any:
    """The approval gate over the deployment's approval store (never over a log)."""
    from pte._policy import ApprovalGate, ApprovalStore

    store = ApprovalStore(_approvals_path(args))
    return ApprovalGate(store, registry, keys=_approval_keys(args), policy=policy)


def _engine(registry: Registry, llm: Any, args: argparse.Namespace, approval: Any = None) -> Any:
    """The command's engine, from `pte.Deployment.engine` (the one place an engine is made): the
    deployment in force, narrowed to `registry` (its ``--tools``/``--allow``; a wider one is
    refused); without one, a deployment given by the parts the flags name. The flags here
    (replans, repair, planner data, concurrency) say how it behaves, never what it may do."""
    from pte._core import DEFAULT_DATA_BUDGET
    from pte._run import EngineConfig

    config = EngineConfig(
        max_replans=getattr(args, "max_replans", 2),
        repair=not getattr(args, "no_repair", False),
        llm_answer=not getattr(args, "no_llm_answer", False),
        planner_data=getattr(args, "planner_data", "handles"),
        data_budget=getattr(args, "data_budget", DEFAULT_DATA_BUDGET),
    )
    deployment = _in_force(args)
    if deployment is None:
        from pte._cli._endorse import endorsement_gate
        from pte._deploy import Deployment

        policy = _policy(registry, args)
        deployment = Deployment.of(
            registry=registry,
            policy=policy,
            approvals=_gate(registry, args, policy),
            endorsements=endorsement_gate(args, _approval_keys(args)),
            specialists=specialists_of(args, registry) or (),
        )
    return _deployment_call(
        lambda: deployment.engine(
            llm, registry=registry, config=config, approval=approval, **execution_settings(args)
        )
    )


def _llm(args: argparse.Namespace) -> Any:
    deployment = _in_force(args)
    if deployment is not None and not getattr(args, "replay_responses", None):
        # The deployment's endpoint (a --model/--base-url flag may only repeat it, or fill in one
        # it leaves open); the API key from the environment.
        model = deployment.document.model or args.model
        base_url = deployment.document.base_url or args.base_url
        from pte._run import OpenAIClient

        try:
            return OpenAIClient(
                model,
                base_url=base_url,
                timeout_s=args.timeout,
                max_retries=args.max_retries,
                max_tokens=args.max_output_tokens,
                deployment_dir=deployment.folder,
            )
        except LLMError as exc:
            raise UsageError(exc.message) from None
    if getattr(args, "replay_responses", None):
        from pte._core import ReplayDataError
        from pte._run import ReplayClient

        input_file(args.replay_responses, "--replay-responses file")
        try:
            return ReplayClient.from_file(args.replay_responses)
        except (OSError, ReplayDataError, ValueError) as exc:
            raise UsageError(f"cannot use --replay-responses {args.replay_responses!r}: {exc}") from None
    from pte._run import OpenAIClient

    try:
        return OpenAIClient(
            args.model,
            base_url=args.base_url,
            timeout_s=args.timeout,
            max_retries=args.max_retries,
            max_tokens=args.max_output_tokens,
        )
    except LLMError as exc:
        raise UsageError(exc.message) from None


def _add_llm(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", help="model name (default: $PTE_MODEL, $OPENAI_MODEL, gpt-4o-mini)")
    parser.add_argument(
        "--base-url", type=http_url, help="OpenAI-compatible endpoint (default: $OPENAI_BASE_URL or OpenAI)"
    )
    parser.add_argument(
        "--timeout", type=positive_float, default=60.0, help="seconds per LLM request (default 60)"
    )
    parser.add_argument(
        "--max-retries", type=non_negative_int, default=2, help="transport retries per LLM call (default 2)"
    )
    parser.add_argument(
        "--max-output-tokens",
        type=positive_int,
        default=DEFAULT_MAX_TOKENS,
        metavar="N",
        help=f"bound on every LLM answer (default {DEFAULT_MAX_TOKENS})",
    )
    parser.add_argument(
        "--replay-responses",
        metavar="FILE",
        help="serve recorded LLM answers from a JSON file instead of an endpoint",
    )
