"""What a run is given by its engine, and how ``run_started`` states it.

`RunSetup` holds a deployment's parts as the engine hands them to one run (pte._run._loop's
`RunLoop` changes none of it); `started_config` is the ``run_started.config`` the run records,
and replay recompiles with.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pte._audit import RecordSink, current_config
from pte._catalogue import Registry
from pte._execution import CallHook, Executor
from pte._plan import CompileCheck, Plan, procedures_record
from pte._policy import PlanApproval
from pte._run._llm import DescribedClient, LLMClient
from pte._run._state import Planning

__all__ = ["RunSetup", "started_config"]


@dataclass(frozen=True)
class RunSetup:
    """What a run is given by its engine (the deployment's parts); the loop changes none of it."""

    planning: Planning
    llm: LLMClient | None
    executor: Executor
    approval: PlanApproval
    #: The approval gate's point before a call's side effect (it consumes the approval), or None.
    consume_approval: CallHook | None
    before_execute: tuple[Callable[[Plan, RecordSink], None], ...]
    checks: tuple[CompileCheck, ...]
    #: The endorsement gate (pte._policy._endorsement), or None.
    endorsement: Any
    tracer_provider: Any
    #: ``run_started.deployment`` (pte._audit._binding), or None.
    deployment: Any

    @property
    def registry(self) -> Registry:
        return self.planning.registry


def started_config(setup: RunSetup, mode: str, plan_text: str | None) -> dict[str, Any]:
    """``run_started.config``: the engine's config, the model, and what replay recompiles with."""
    config: dict[str, Any] = setup.planning.config.to_dict()
    if setup.llm is not None:
        config["model"] = setup.llm.model
        described = setup.llm.describe if isinstance(setup.llm, DescribedClient) else None
        if isinstance(described, dict):  # endpoint, timeout, retries: never the key
            config["llm"] = described
    if mode == "execute":
        config["plan_text"] = plan_text
    if setup.registry.procedures:  # what plans may call and replay recompiles with (pte._plan._procedures)
        config["procedures"] = procedures_record(setup.registry.procedures)
    if setup.endorsement is not None:  # replay compiles as the run did (pte._policy._endorsement)
        config["endorsement"] = True
    # How its steps overlap: a resume runs the rest of the run so, or narrower (#33). Left out
    # where it is what a config without it means (pte._audit._older_records, its table ADDED).
    meant = current_config({})
    for name, value in (
        ("max_concurrency", setup.executor.max_concurrency),
        ("serial_writes", setup.executor.serial_writes),
    ):
        if value != meant[name]:
            config[name] = value
    return config
