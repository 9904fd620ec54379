"""The deployment a `pte` command runs under, and the flags that may only narrow it.

Found once per command (``$PTE_DEPLOYMENT``, else the nearest ``pte-deployment.json`` upward,
`pte.Deployment.discover`). Under a deployment, authority comes only from it: a flag naming
another approval store, endorsement store, approver keys, policy, manifest, procedures,
specialists, run store or model endpoint than the deployment's is refused (usage error), as
is a pack outside its packs or a tool outside its allow-list; ``--tools`` and ``--allow``
may narrow it. The same holds for the environment variables that used to name those.
"""

from __future__ import annotations

import argparse
import os
import shlex
from pathlib import Path
from typing import Any

from pte._cli._support import UsageError
from pte._core import DeploymentError
from pte._deploy import DOCUMENT_NAME, Deployment

__all__ = [
    "NO_DEPLOYMENT",
    "current_deployment",
    "deployment_of",
    "forget_deployment",
    "init_command",
    "no_deployment_message",
]

_UNSET: Any = object()
#: The deployment of the running command, found on first use (`forget_deployment` resets it).
_found: Any = _UNSET

#: Flags (argparse dests) naming a file the deployment names, with the document key.
_FILE_FLAGS = {
    "manifest": "manifest",
    "policy": "policy",
    "procedures": "procedures",
    "specialists": "specialists",
    "approval_keys": "approval_keys",
    "approvals": "approvals",
    "endorsements": "endorsements",
}
#: Variables that named authority before deployments: under one they must agree with it.
_ENV_FILES = {
    "PTE_APPROVAL_PUBLIC_KEYS_FILE": "approval_keys",
    "PTE_ANCHORS_FILE": "anchors",
    "PTE_DEPLOYMENT_KEY_FILE": "key",
}


def current_deployment() -> Deployment | None:
    """The deployment in force for this command (None: there is none); found once."""
    global _found
    if _found is _UNSET:
        try:
            _found = Deployment.discover()
        except DeploymentError as exc:
            raise UsageError(str(exc)) from None
    return _found  # type: ignore[no-any-return]


def forget_deployment() -> None:
    """Forget the deployment found (a command has ended; the next one finds its own)."""
    global _found
    _found = _UNSET


#: The reason code of a command refused for want of a deployment (in its message).
NO_DEPLOYMENT = "no_deployment"

#: Flags (argparse dests) that `pte init` takes as the command took them.
_INIT_FLAGS = ("allow", "manifest", "policy", "procedures", "specialists", "approval_keys", "approvals")


def init_command(args: argparse.Namespace | None = None) -> str:
    """The ``pte init`` that makes the deployment `args` describes with its flags (its packs,
    allow-list, files, stores and approver keys), as a command that runs as printed: after it,
    the same command runs again unchanged (repeating a deployment's own value is accepted)."""
    words: list[str] = []
    for pack in getattr(args, "tools", None) or ():
        words += ["--tools", str(pack)]
    for dest in _INIT_FLAGS:
        value = getattr(args, dest, None)
        for item in value if isinstance(value, list) else [value] if value else []:
            words += [f"--{dest.replace('_', '-')}", str(item)]
    keys = os.environ.get("PTE_APPROVAL_PUBLIC_KEYS_FILE")
    if keys and not getattr(args, "approval_keys", None):
        words += ["--approval-keys", keys]
    endorsements = getattr(args, "endorsements", None)
    if endorsements:
        words += ["--endorsements", str(endorsements)]
    store = getattr(args, "store", None)
    if store:
        words += ["--store", str(store)]
    command = "pte " + shlex.join(["init", *words])  # as `_hints.pte_command` (which imports this)
    if not store and os.environ.get("PTE_STORE"):
        # The shell has it (and it may hold a password, never printed): the deployment names it.
        command += ' --store "$PTE_STORE"'
    return command


def no_deployment_message(what: str, args: argparse.Namespace | None = None) -> str:
    """What a command that can call a write says when there is no deployment: the reason code,
    why, and the `pte init` that makes one (then the same command runs)."""
    return (
        f"{NO_DEPLOYMENT}: {what} and there is no deployment; a write runs only under one (its "
        "tools, policy, approver keys and stores, and the key that anchors its runs), so that every "
        "later command and hint acts under the same authority. Commands find it from its folder and "
        "below (or set $PTE_DEPLOYMENT). Nothing was run. Make one here, then run this command "
        f"again: {init_command(args)}"
    )


def _same_path(given: str, named: Path | None) -> bool:
    return named is not None and os.path.realpath(os.path.expanduser(given)) == os.path.realpath(named)


def _document_path(deployment: Deployment, key: str) -> Path | None:
    if key == "approvals":
        return deployment.approvals_path
    if key == "anchors":
        return deployment.anchors_path
    if key == "key":
        return deployment.key_path
    return deployment.path(getattr(deployment.document, key))


def _refuse(flag: str, given: str, deployment: Deployment, named: Any) -> UsageError:
    return UsageError(
        f"{flag} {given!r} is not the deployment's ({named if named is not None else 'none'}, in "
        f"{deployment.folder / DOCUMENT_NAME}): under a deployment, flags may narrow what a command "
        "does, never widen or replace its authority; drop the flag, or change the deployment"
    )


def _same_store(given: str, deployment: Deployment) -> bool:
    named = deployment.store_url
    if named is None:
        return False
    from pte._deploy import resolve_store_url

    return bool(resolve_store_url(Path.cwd(), given) == named or given == named)


def deployment_of(args: argparse.Namespace) -> Deployment | None:
    """The deployment in force, narrowed by ``--tools``/``--allow``, after refusing every flag
    (and variable) that names other authority than the deployment's; None: no deployment."""
    cached = getattr(args, "_pte_deployment", _UNSET)
    if cached is not _UNSET:
        return cached  # type: ignore[no-any-return]
    found = current_deployment()
    if found is not None:
        if os.environ.get("PTE_APPROVAL_KEY"):
            raise UsageError(
                "PTE_APPROVAL_KEY (an HMAC key) is no longer supported: approvals are signed with Ed25519; "
                "unset it and name the approvers' public keys in the deployment (its approval_keys)"
            )
        for dest, key in _FILE_FLAGS.items():
            given = getattr(args, dest, None)
            if given and not _same_path(str(given), _document_path(found, key)):
                raise _refuse(f"--{dest.replace('_', '-')}", str(given), found, _document_path(found, key))
        for name, key in _ENV_FILES.items():
            given = os.environ.get(name)
            if given and not _same_path(given, _document_path(found, key)):
                raise _refuse(f"${name}", given, found, _document_path(found, key))
        store = getattr(args, "store", None)
        if store and not _same_store(str(store), found):
            raise _refuse("--store", str(store), found, found.store_url)
        env_store = os.environ.get("PTE_STORE")
        if env_store and not _same_store(env_store, found):
            raise _refuse("$PTE_STORE", env_store, found, found.store_url)
        for dest, value in (("model", found.document.model), ("base_url", found.document.base_url)):
            given = getattr(args, dest, None)
            if given and value is not None and given != value:
                raise _refuse(f"--{dest.replace('_', '-')}", str(given), found, value)
        try:
            packs = [_as_written(pack, found) for pack in getattr(args, "tools", None) or ()]
            found = found.narrowed(packs=packs, allow=getattr(args, "allow", None))
        except DeploymentError as exc:
            raise UsageError(str(exc)) from None
    args._pte_deployment = found
    return found


def _as_written(pack: str, deployment: Deployment) -> str:
    """A ``--tools`` value as the deployment's document writes it when `pte init` would have
    written it so from here (a file it names placed: `pte init`'s hint runs the command again
    unchanged); else as given, narrowing by its text (never widening)."""
    from pte._cli._deployment_init import placed_tool

    if pack in deployment.packs or not pack.startswith(("mcp:", "openapi:")):
        return pack
    try:
        placed = placed_tool(pack, deployment.folder)
    except UsageError:
        return pack
    return placed if placed in deployment.packs else pack


def checked(deployment: Deployment) -> Deployment:
    """`deployment` after checking every path it names (a usage error listing the problems)."""
    try:
        return deployment.check()
    except DeploymentError as exc:
        raise UsageError(str(exc)) from None


def require_signer(args: argparse.Namespace, key: Any, what: str) -> None:
    """Under a deployment with approver keys, refuse to record an unsigned `what` (it would never
    count) or one signed by a key that is not one of them; a usage error saying how to sign."""
    deployment = deployment_of(args)
    if deployment is None:
        return
    try:
        keys = deployment.approval_keys()
    except DeploymentError as exc:
        raise UsageError(str(exc)) from None
    if keys is None:
        return
    named = deployment.path(deployment.document.approval_keys)
    if key is None:
        raise UsageError(
            f"{what} not recorded: this deployment counts only {what}s signed by its approver keys "
            f"({named}); sign it: give the approver's private key with --signing-key (or name it in "
            "$PTE_APPROVAL_SIGNING_KEY_FILE)"
        )
    if key.public_key.key_id not in set(keys):
        raise UsageError(
            f"{what} not recorded: key {key.public_key.key_id[:16]}… is not one of the deployment's "
            f"approver keys ({named}), so it would never count"
        )


def writes_of(registry: Any, names: Any) -> list[str]:
    """The names among `names` that are write tools of `registry` (a procedure counts as one:
    its body may write)."""
    procedures = getattr(registry, "procedures", {}) or {}
    return sorted(
        {
            name
            for name in names
            if name in procedures or (name in registry and registry[name].effect == "write")
        }
    )


def tools_named(document: Any) -> set[str]:
    """Every ``"tool"`` a plan document (or records holding plans) names, at any depth."""
    found: set[str] = set()
    stack = [document]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if isinstance(item.get("tool"), str):
                found.add(item["tool"])
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


def require_deployment_for_writes(args: argparse.Namespace, registry: Any, names: Any, what: str) -> None:
    """Safe by default: a command whose plan calls a write (`names`: the tools it calls) runs only
    under a deployment whose key this machine holds; else a usage error (`NO_DEPLOYMENT`) naming
    the `pte init` that makes one, before anything is appended. Under flags alone, a later
    command (the resume a hint prints) could run under other keys and stores than this one."""
    writes = writes_of(registry, names)
    if not writes:
        return
    deployment = deployment_of(args)
    called = f"{what} calls {', '.join(writes)} ({'a write' if len(writes) == 1 else 'writes'})"
    if deployment is None:
        raise UsageError(no_deployment_message(called, args))
    if not deployment.has_key:
        raise UsageError(
            f"{called}, and this machine does not hold the deployment's key ({deployment.key_path}): "
            "a write runs only where the deployment's key anchors the run; copy the deployment "
            "folder with its key to this machine (docs/deployment.md)"
        )


def deployment_store(given: str | None) -> str | None:
    """The deployment's run store URL (None: no deployment, or it names none); a usage error when
    `given` (``--store``) or ``$PTE_STORE`` names another one."""
    found = current_deployment()
    if found is None:
        return None
    for flag, value in (("--store", given), ("$PTE_STORE", os.environ.get("PTE_STORE"))):
        if value and not _same_store(value, found):
            raise _refuse(flag, value, found, found.store_url)
    return found.store_url


def require_bound_deployment(args: argparse.Namespace, records: Any, what: str) -> None:
    """A run that recorded the deployment it started under continues only under a deployment
    (which resume then checks is that one): with none in force, a usage error naming it."""
    if deployment_of(args) is not None:
        return
    from pte._deploy import recorded_fingerprint

    for record in records:
        if record.get("type") == "run_started" and recorded_fingerprint(record) is not None:
            short = str(recorded_fingerprint(record))[:16]
            raise UsageError(
                f"{what} started under deployment {short}…: continue it under that deployment "
                "(run from its folder, or set $PTE_DEPLOYMENT to it), never under flags alone"
            )
