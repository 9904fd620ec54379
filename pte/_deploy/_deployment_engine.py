"""How a deployment makes its engine: the one ``Engine(...)`` of `pte` (`made_engine`).

`pte.Deployment.engine` (pte._deploy._deployment) decides every part (its registry, narrowed
only; its policy, never replaced; its gates; the run's binding) and hands them here;
tests/e2e/test_architecture.py fails on an ``Engine(`` in any other module of `pte`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pte._catalogue import Registry
from pte._core import DeploymentError

__all__ = ["OWN", "made_engine", "narrowing", "recorded_binding", "with_specialists", "within_document"]

#: `Deployment.engine`'s default endorsement gate: the deployment's own (None is none at all).
OWN: Any = object()


def narrowing(registry: Registry, own: Registry, whose: str) -> Registry:
    """`registry` when it narrows `own` (each tool one of its tools, with the same code and
    schemas; each procedure one of its procedures); else `DeploymentError`: never widen."""
    if registry is own:
        return registry
    extra = [name for name in registry.names if name not in own]
    changed = [
        name for name in registry.names if name in own and registry[name].describe() != own[name].describe()
    ]
    procedures = [name for name in registry.procedures if name not in own.procedures]
    if extra or changed or procedures:
        named = ", ".join([*extra, *changed, *procedures])
        raise DeploymentError(
            f"{named}: not served by {whose} (or served with other code or schemas); a caller may "
            "narrow the deployment's tools, never widen them"
        )
    return registry


def with_specialists(config: Any, specialists: tuple[Any, ...]) -> Any:
    """`config` (default `EngineConfig()`) with the deployment's specialists, when it names some."""
    from dataclasses import replace

    from pte._run import EngineConfig

    config = config or EngineConfig()
    return replace(config, specialists=specialists) if specialists else config


def recorded_binding(started: Mapping[str, Any]) -> Any:
    """``run_started.deployment`` when it is a binding the engine records again; else None (and
    replay reports the difference at ``run_started``)."""
    from pte._audit import deployment_binding

    recorded = started.get("deployment")
    try:
        return deployment_binding(recorded) if isinstance(recorded, Mapping) else None
    except ValueError:
        return None


def made_engine(
    registry: Registry,
    llm: Any,
    *,
    config: Any,
    policy: Any,
    approval: Any,
    endorsement: Any,
    binding: Any,
    invoker: Any,
    checks: Sequence[Any],
    execution: Mapping[str, Any],
) -> Any:
    """The one ``Engine(...)`` of `pte`, with the parts `Deployment.engine` decided."""
    from pte._run import Engine

    extra: dict[str, Any] = {"invoker": invoker} if invoker is not None else {}
    return Engine(
        registry,
        llm,
        config=config,
        policy=policy,
        approval=approval,
        endorsement=endorsement,
        checks=checks,
        deployment=binding,
        **extra,
        **execution,
    )


def within_document(execution: Mapping[str, Any], document: Any) -> dict[str, Any]:
    """`execution` (an engine's ``max_concurrency``/``serial_writes``/…) within what the
    deployment document names: its limit caps, its serial writes stay on. The document is the
    deployment's authority; a flag, a worker's settings or a run's recorded settings (a log a
    writer could edit and re-hash) may narrow it, never widen it."""
    from pte._execution import DEFAULT_CONCURRENCY

    out = dict(execution)
    if document.max_concurrency is not None:
        asked = out.get("max_concurrency")
        asked = DEFAULT_CONCURRENCY if asked is None else asked
        out["max_concurrency"] = min(asked, document.max_concurrency)
    if document.serial_writes:
        out["serial_writes"] = True
    return out
