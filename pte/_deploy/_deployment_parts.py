"""What a replay or a resume acts under: a deployment's parts, read from its folder or given.

`pte.Deployment` is the only source of an engine's authority. Replay and resume (pte._replay,
an area below this one) take it as the mapping `authority` gives: the catalogue, policy, engine
config, approval and endorsement gates, trusted keys, anchors, model, specialists and the
deployment in hand (for the binding check). A part that is None is the run's recorded one
(replay) or none at all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from pte._core import DeploymentError

__all__ = ["PARTS", "folder_parts", "given_parts", "recorded_parts"]

#: The parts replay and resume read (`pte.Deployment.of` takes each as a keyword).
PARTS = (
    "registry",  # the tool catalogue (None: the recorded one; resume needs one)
    "policy",  # the data-flow policy (None: the registry's own, guarded; without a registry the recorded one)
    "config",  # the engine config (None: the recorded one)
    "approvals",  # the approval gate over the deployment's approval store
    "keys",  # trusted approval public keys: recorded approvals' signatures are checked under them
    "model",  # the model name (None: the recorded one)
    "llm",  # the endpoint description (``run_started.config.llm``; None: the recorded one)
    "anchors",  # the deployment's anchors (`pte.Anchors`)
    "tracer_provider",  # where a resumed run's spans go (None: the global provider)
    "endorsements",  # the endorsement gate (None: recorded endorsements are re-checked as evidence)
    "fingerprint",  # the deployment in hand: a run started under another one is refused (None: no check)
    "specialists",  # the deployment's specialists (None: the recorded ones)
)


def given_parts(parts: Mapping[str, Any]) -> Mapping[str, Any]:
    """`parts` checked (only known names) and frozen, every missing part None."""
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        raise TypeError(
            f"Deployment.of() got unknown part(s) {', '.join(unknown)}; parts: {', '.join(PARTS)}"
        )
    specialists = parts.get("specialists")
    frozen = {name: parts.get(name) for name in PARTS}
    if specialists is not None:
        frozen["specialists"] = tuple(specialists)
    return MappingProxyType(frozen)


def folder_parts(deployment: Any) -> Mapping[str, Any]:
    """The parts of a deployment read from its folder (`pte.Deployment`, narrowed as it is)."""
    registry = deployment.registry() if deployment.packs else None
    policy = deployment.policy(registry) if registry is not None else None
    return given_parts(
        {
            "registry": registry,
            "policy": policy,
            "approvals": deployment.approval_gate(registry, policy) if registry is not None else None,
            "keys": deployment.approval_keys(),
            "model": deployment.document.model,
            "anchors": deployment.anchors(),
            "endorsements": deployment.endorsement_gate(),
            "fingerprint": deployment,
            "specialists": deployment.specialists(registry),
        }
    )


def recorded_parts(
    records: Sequence[Mapping[str, Any]], stored: Mapping[str, Any] | None
) -> Mapping[str, Any]:
    """What a run recorded (its ``run_started``): its catalogue, policy, engine config, model and
    endpoint. Evidence for a replay that runs nothing: no approval or endorsement store, no keys,
    no anchors (a recorded approval is re-checked, never trusted)."""
    from pte._replay import recorded_run_parts

    if not records or records[0].get("type") != "run_started":
        raise DeploymentError("a run's records begin with its run_started record")
    return given_parts(recorded_run_parts(records, stored))
