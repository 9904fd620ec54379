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
import shlex
from typing import Any

__all__ = ["approver", "deployment_flags", "pte_command", "store_flags"]

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
