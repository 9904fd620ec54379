"""Hints the CLI prints are commands that run as printed.

A hint names the values the user gave (the plan file, the run id) instead of placeholders,
quoted for a POSIX shell. Under a deployment (`pte.Deployment`) a hint carries no authority:
the next command reads the same deployment, so only the flags that narrowed it (``--tools``,
``--allow``) are repeated. Without one, the deployment's flags the command was given (packs,
allow-list, manifest, procedures, policy, approval store and keys, the store) are carried.
tests/cli/test_cli_hints.py executes each one.
"""

from __future__ import annotations

import argparse
import getpass
import os
import shlex
from pathlib import Path
from typing import Any

__all__ = ["approver", "deployment_flags", "pte_command", "signing_flags", "signing_note", "store_flags"]

#: Options that say what a deployment is: carried from the command into the hint.
_DEPLOYMENT_OPTIONS = ("manifest", "procedures", "policy", "approvals", "approval_keys")


def pte_command(*words: str) -> str:
    """``pte WORD…`` quoted for a shell."""
    return "pte " + shlex.join(words)


def approver() -> str:
    """The name a hint suggests for ``--by``: the login of whoever reads it."""
    try:
        return getpass.getuser() or "operator"
    except (KeyError, OSError):  # no passwd entry and no $USER (some containers)
        return "operator"


def deployment_flags(args: argparse.Namespace, *, approvals: bool = True) -> list[str]:
    """The deployment flags `args` was given, as arguments for another `pte` command (under a
    deployment: only the narrowing ones, ``--tools`` and ``--allow``)."""
    from pte._cli._deployment_in_force import deployment_of

    under_deployment = deployment_of(args) is not None
    flags: list[str] = []
    for pack in getattr(args, "tools", None) or ():
        flags += ["--tools", pack]
    for tool in getattr(args, "allow", None) or ():
        flags += ["--allow", tool]
    for name in () if under_deployment else _DEPLOYMENT_OPTIONS:
        value = getattr(args, name, None)
        if value and (approvals or name != "approvals"):
            flags += [f"--{name.replace('_', '-')}", str(value)]
    return flags


def store_flags(args: argparse.Namespace, store: Any) -> list[str]:
    """``--store URL`` as given (none when it came from ``$PTE_STORE``, which the shell still has).

    A URL with a password is never printed: the hint then relies on ``$PTE_STORE``.
    """
    from pte._cli._deployment_in_force import deployment_of

    url = getattr(args, "store", None)
    if url is None or store.describe() != url or deployment_of(args) is not None:
        return []
    return ["--store", url]


#: Where an approver's private key is named for `pte approve` and `pte endorse` (`pte._policy`).
_SIGNING_KEY_FILE = "PTE_APPROVAL_SIGNING_KEY_FILE"
_SIGNING_KEY_TEXT = "PTE_APPROVAL_SIGNING_KEY"


def signing_flags(args: argparse.Namespace) -> list[str]:
    """``--signing-key PATH`` for a printed ``pte approve``/``pte endorse``, so that it runs as
    printed under a deployment with approver keys (an unsigned decision is refused there):
    the key ``$PTE_APPROVAL_SIGNING_KEY_FILE`` names, else an approver's key found on this
    machine (`approver_key_here`); none when neither is known (`signing_note` says what to do)."""
    if os.environ.get(_SIGNING_KEY_TEXT, "").strip():
        return []  # the key is in the environment as text: the command signs with it
    named = os.environ.get(_SIGNING_KEY_FILE)
    if named:
        return ["--signing-key", os.path.abspath(os.path.expanduser(named))]
    found = approver_key_here(args)
    return ["--signing-key", str(found)] if found is not None else []


def signing_note(args: argparse.Namespace) -> str | None:
    """A line to print under a ``pte approve``/``pte endorse`` hint that cannot run as printed
    here (None: it can): under approver keys, when no signing key is named and this machine
    holds none of the approvers' private keys, why, and what an approver runs it with. (No
    ``export`` line: output is redacted, and a ``…_KEY_FILE=`` assignment would be.)"""
    if os.environ.get(_SIGNING_KEY_TEXT, "").strip() or os.environ.get(_SIGNING_KEY_FILE):
        return None
    keys_file = _approver_keys_file(args)
    if keys_file is None or approver_key_here(args) is not None:
        return None
    return (
        f"  (only a decision signed by an approver's key of {keys_file} counts, and this machine "
        "holds none of their private keys: an approver runs it where their key is, with "
        f"--signing-key, or with ${_SIGNING_KEY_FILE} naming it)"
    )


def _approver_keys_file(args: argparse.Namespace) -> Path | None:
    from pte._cli._deployment_in_force import deployment_of

    deployment = deployment_of(args)
    if deployment is None:
        return None
    return deployment.path(deployment.document.approval_keys)


def approver_key_here(args: argparse.Namespace) -> Path | None:
    """An approver's private key on this machine: beside the deployment's approver public keys
    file, under the name ``pte keys generate KEY`` gives it (``KEY`` for ``KEY.pub``), when it is
    one of the deployment's approver keys; None otherwise."""
    from pte._core import PTEError, SigningKey, TrustedKeys

    keys_file = _approver_keys_file(args)
    if keys_file is None or keys_file.suffix != ".pub":
        return None
    candidate = keys_file.with_suffix("")
    if not candidate.is_file():
        return None
    try:
        key = SigningKey.load(candidate)
        trusted = TrustedKeys.load(keys_file)
    except (PTEError, OSError, ValueError):
        return None
    return candidate if key.public_key.key_id in trusted else None
