"""A run's binding to its deployment: what ``run_started.deployment`` records, and resume's check.

A run records the fingerprint of the deployment it starts under (`pte.Deployment`), and the
fingerprints of that deployment's parts when the deployment names them (catalogue, policy,
approver keys, stores, ...). The record is anchored with the run's start (`pte._audit._anchors`),
so a log or store writer cannot change it without the deployment key. Whoever continues the
run (resume, a worker taking it over) compares it with the deployment in hand first, and
refuses a run that started under another one, naming the parts that differ.

A run that names no deployment (``deployment`` null: what a record without it means, as the
reader of older records, `pte._audit._older_records`, says) is not refused for it: its anchors,
when the deployment has a key, still decide whether it is the deployment's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pte._audit._older_records import current_run_started

__all__ = ["deployment_binding", "deployment_problem"]

# What a fingerprint or a part's name may look like: printable, no spaces, bounded.
_FINGERPRINT = re.compile(r"[A-Za-z0-9][A-Za-z0-9:_.+/=-]{0,199}")
_PART = re.compile(r"[a-z][a-z0-9_]{0,63}")


def deployment_binding(deployment: Any) -> dict[str, Any] | None:
    """``{"fingerprint": F, "parts": {name: fingerprint}}`` for `deployment`, as ``run_started``
    records it; None for None.

    `deployment`: a fingerprint (str), a mapping with ``fingerprint`` and optional ``parts``,
    or an object with those attributes (`pte.Deployment`). `ValueError` for anything else.
    """
    if deployment is None:
        return None
    fingerprint: Any
    parts: Any
    if isinstance(deployment, str):
        fingerprint, parts = deployment, {}
    elif isinstance(deployment, Mapping):
        fingerprint, parts = deployment.get("fingerprint"), deployment.get("parts") or {}
    else:
        fingerprint = getattr(deployment, "fingerprint", None)
        parts = getattr(deployment, "parts", None) or {}
    if not isinstance(fingerprint, str) or _FINGERPRINT.fullmatch(fingerprint) is None:
        raise ValueError(
            f"a deployment fingerprint is 1-200 printable characters without spaces, not {fingerprint!r}"
        )
    if not isinstance(parts, Mapping) or not all(
        isinstance(k, str) and _PART.fullmatch(k) and isinstance(v, str) and _FINGERPRINT.fullmatch(v)
        for k, v in parts.items()
    ):
        raise ValueError("a deployment's parts map names (a-z, 0-9, _) to fingerprints")
    return {"fingerprint": fingerprint, "parts": dict(sorted(parts.items()))}


def deployment_problem(started: Mapping[str, Any], deployment: Any) -> str | None:
    """Why the run begun by `started` (its ``run_started`` record) may not continue under
    `deployment` (as `deployment_binding` takes it); None when it may.

    None also when either side names no deployment (a run whose record binds none, or a caller
    that has no deployment). Otherwise the fingerprints must be equal; when they
    differ, the message names the parts that differ (or that only one side has).
    """
    recorded = current_run_started(started)["deployment"]
    in_hand = deployment_binding(deployment)
    if recorded is None or in_hand is None:
        return None
    run = started.get("run_id")
    if not isinstance(recorded, Mapping) or not isinstance(recorded.get("fingerprint"), str):
        return f"run {run} records no readable deployment fingerprint"
    if recorded["fingerprint"] == in_hand["fingerprint"]:
        return None
    parts = recorded.get("parts")
    was: Mapping[str, Any] = parts if isinstance(parts, Mapping) else {}
    now: Mapping[str, Any] = in_hand["parts"]
    differ = sorted(name for name in {*was, *now} if was.get(name) != now.get(name))
    what = f"; what differs: {', '.join(differ)}" if differ else ""
    return (
        f"run {run} started under deployment {_short(recorded['fingerprint'])}, not the deployment in "
        f"hand ({_short(in_hand['fingerprint'])}){what}. Continue it under the deployment it started "
        "under, or end it"
    )


def _short(fingerprint: str) -> str:
    return fingerprint if len(fingerprint) <= 20 else fingerprint[:16] + "…"
