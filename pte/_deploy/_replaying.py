"""`pte.replay_file` and `pte.resume_file`: replay and resume of a log, under a deployment.

Replay (`pte._replay`, an area below this one) re-drives a run through an engine that
`pte.Deployment.engine` makes, the one place an engine is made; it cannot make a deployment
itself. These public entry points give it one: the caller's, else `Deployment.of()`, whose
every part is the run's recorded one (a replay, which runs nothing) or none at all (a resume:
the caller's registry, no approval store, so a plan needing approval fails closed).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pte._catalogue import Registry
from pte._deploy._deployment import Deployment
from pte._replay import ReplayReport, RunReplay
from pte._replay import replay_file as _replay_file
from pte._replay import replay_run as _replay_run
from pte._replay import resume_file as _resume_file
from pte._run import LLMClient, RunResult

__all__ = ["replay_file", "replay_run", "resume_file"]


def replay_file(
    path: str | Path,
    *,
    registry: Registry | None = None,
    live: bool = False,
    allow_writes: bool = False,
    checks_factory: Callable[[Registry, Mapping[str, Any]], Sequence[Any]] | None = None,
    deployment: Deployment | None = None,
) -> ReplayReport:
    """Replay every run in an audit log, one run at a time.

    The log is verified first; a log that is not intact raises `LogNotIntact`. Without a
    registry (here or in `deployment`, a `pte.Deployment`), the recorded tool schemas are used;
    without a deployment, every part the run recorded (`pte.Deployment.of()`).
    """
    return _replay_file(
        path,
        registry=registry,
        live=live,
        allow_writes=allow_writes,
        checks_factory=checks_factory,
        deployment=deployment if deployment is not None else Deployment.of(),
    )


def replay_run(
    run_records: Sequence[tuple[int, Mapping[str, Any]]],
    *,
    registry: Registry | None = None,
    live: bool = False,
    allow_writes: bool = False,
    checks_factory: Callable[[Registry, Mapping[str, Any]], Sequence[Any]] | None = None,
    deployment: Deployment | None = None,
    stored: Mapping[str, Any] | None = None,
) -> RunReplay:
    """Replay one run (its records with their line numbers), as `replay_file` replays each."""
    return _replay_run(
        run_records,
        registry=registry,
        live=live,
        allow_writes=allow_writes,
        checks_factory=checks_factory,
        deployment=deployment if deployment is not None else Deployment.of(),
        stored=stored,
    )


def resume_file(
    path: str | Path,
    registry: Registry,
    *,
    llm: LLMClient | None = None,
    checks_factory: Callable[[Registry, Mapping[str, Any]], Sequence[Any]] | None = None,
    deployment: Deployment | None = None,
    max_concurrency: int | None = None,
    serial_writes: bool | None = None,
) -> RunResult:
    """Finish the last run of a log that has no `run_finished`, appending to the same log.

    The log is verified first (`LogNotIntact`). Catalogue, policy, config and approvals are
    the deployment's (`deployment`, a `pte.Deployment`: from its folder, `pte.Deployment.of`
    its parts; by default `registry` with its own guarded policy, the recorded engine config
    and no approval store, so a plan needing approval fails closed); `registry` narrows the
    deployment's catalogue, never widens it. The recorded prefix must be what this deployment
    decides, else `ReplayDivergence` and nothing is appended. Completed steps are not re-run;
    an in-flight `write` step of a non-idempotent tool ends the run `failed_closed(needs_review)`.
    Raises `FailedClosed` when the log holds no run or its last run is already sealed.

    `max_concurrency`, `serial_writes`: how the steps that run live run: the run's own, as its
    ``run_started`` recorded them (None); a value given may only narrow them (a smaller limit,
    serial writes turned on), a wider one is refused (`DeploymentError`). A run recorded before
    they were recorded runs as given, else with `pte.Engine`'s defaults, as it always did.
    """
    return _resume_file(
        path,
        registry,
        llm=llm,
        checks_factory=checks_factory,
        deployment=deployment if deployment is not None else Deployment.of(),
        max_concurrency=max_concurrency,
        serial_writes=serial_writes,
    )
