"""The data-operations cookbook: realistic tasks written as honest plans, run against fixture packs.

A `Task` is a request, the plan a planner should write for it *without having seen the
data*, and the exact outcome. `run_task` compiles the plan against the domain's fixture
pack (`pte.testing.domains`) plus every stock pack, runs it, and returns the result;
`dishonest_literals` lists literals the plan could only know from the data. A task marked
`guarded` must also compile under the default guarded policy: the domain's own labels
(third parties' free text untrusted, the rest trusted), every parameter of a write tool
accepting only request or trusted data.

A `ModelTask` is a task as a model plays it through the whole engine: what the model
answers as planner, stage planner, repairer or replanner (`pte.testing.ScriptedModel`), written
the way models write plans (descriptive ids, ``null`` defaults, a wrong pointer the compiler
sends back), and the exact end: status, reason, result and the records that show it.
`run_model_task` runs one with the default engine config and policy, writes its audit log,
and checks that the log verifies and replays the same.

The honesty rule, mechanically checked: every literal string or number given to a
domain tool, every `value` a stock matching tool compares with, and every number in a
calculator expression must occur in the request (case-insensitive). Field names, ops,
patterns, formats and durations are the plan's own vocabulary (they come from the
catalogue, not from the data) and are not checked.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pte._audit import AuditLog, read_records, verify
from pte._catalogue import STOCK_PACKS, Registry, load_pack, load_registry
from pte._execution import ExecutionResult, Executor
from pte._plan import Plan, compile_plan, is_reference
from pte._policy import Policy
from pte._run import Engine, EngineConfig, RunResult

__all__ = [
    "ModelTask",
    "Task",
    "cookbook_registry",
    "dishonest_literals",
    "ref",
    "run_model_task",
    "run_task",
    "step",
]

#: Stock tools whose `value` argument is data to compare with (it must come from the request).
_MATCHING_TOOLS = ("filter_records", "filter_values", "text_match")


def ref(pointer: str) -> dict[str, str]:
    """``{"$ref": pointer}``."""
    return {"$ref": pointer}


def step(step_id: str, tool: str, **args: Any) -> dict[str, Any]:
    """One plan step."""
    return {"id": step_id, "tool": tool, "args": args}


@dataclass(frozen=True)
class Task:
    """One cookbook task: a request, its honest plan, and the exact expected outcome."""

    name: str
    domain: str
    request: str
    steps: list[dict[str, Any]]
    #: The plan's `result` (references allowed); None for a plan without one.
    result: Any = None
    #: The exact value of the resolved result.
    expect_result: Any = None
    #: step id -> the exact output that step must produce (typically the write steps).
    expect_outputs: Mapping[str, Any] = field(default_factory=dict)
    #: The plan must compile under the default guarded policy (`Policy.from_registry`).
    guarded: bool = False

    def document(self) -> dict[str, Any]:
        """The plan document."""
        doc: dict[str, Any] = {"pte_plan": "1", "steps": self.steps}
        if self.result is not None:
            doc["result"] = self.result
        return doc


def cookbook_registry(domain: str) -> Registry:
    """The domain's fixture pack merged with every stock pack."""
    registry = load_pack(f"pte.testing.domains.{domain}")
    return registry.merged(load_registry(STOCK_PACKS))


def run_task(task: Task, registry: Registry | None = None) -> tuple[Plan, ExecutionResult]:
    """Compile and execute a task's plan (raises `PlanRejected` if it does not compile)."""
    registry = registry or cookbook_registry(task.domain)
    checks = [Policy.from_registry(registry).check()] if task.guarded else []
    plan = compile_plan(json.dumps(task.document()), registry, checks=checks)
    return plan, Executor(registry).run(plan)


@dataclass(frozen=True)
class ModelTask:
    """A task as a model plays it: its answers per role, and the exact end of the run."""

    name: str
    domain: str
    request: str
    #: The plan documents (or texts) the model answers, per role, in order.
    planner: list[Any]
    stage: list[Any] = field(default_factory=list)
    repair: list[Any] = field(default_factory=list)
    replanner: list[Any] = field(default_factory=list)
    expect_status: str = "succeeded"
    expect_reason: str | None = None
    #: The exact result value of a run that succeeds.
    expect_result: Any = None
    #: record type -> how many of them the log holds (e.g. {"repair": 1}).
    expect_records: Mapping[str, int] = field(default_factory=dict)
    #: A text the run's message must contain (why it ended).
    expect_message: str | None = None
    #: The reasons of the run's plan rejections, in order (what the compiler sent back).
    expect_rejected: tuple[str, ...] = ()


def run_model_task(
    task: ModelTask, log: Path, registry: Registry | None = None
) -> tuple[RunResult, list[dict[str, Any]]]:
    """Run `task` through the engine with a `ScriptedModel`; return the result and the records.

    The default `EngineConfig` (repair on, `max_replans` 2) and the domain's default policy,
    with the answer rendered from the result (no finalizer). Raises AssertionError if the log
    does not verify or replay the same, or if the script was not used exactly.
    """
    from pte.runs import replay_file
    from pte.testing._scripted_model import ScriptedModel

    registry = registry or cookbook_registry(task.domain)
    model = ScriptedModel(
        planner=task.planner, stage=task.stage, repair=task.repair, replanner=task.replanner
    )
    engine = Engine(registry, model, config=EngineConfig(llm_answer=False))
    with AuditLog(log) as audit:
        result = engine.run(task.request, audit)
    assert verify(log).ok, f"{task.name}: the audit log does not verify"
    report = replay_file(log, registry=registry)
    assert report.ok, f"{task.name}: {report.render()}"
    assert model.unused() == {}, f"{task.name}: the run did not ask for {model.unused()}"
    return result, read_records(log)


def _literals(value: Any) -> Iterator[Any]:
    if is_reference(value):
        return
    if isinstance(value, dict):
        for item in value.values():
            yield from _literals(item)
    elif isinstance(value, list):
        for item in value:
            yield from _literals(item)
    elif isinstance(value, (str, int, float)) and not isinstance(value, bool):
        yield value


def _occurs(literal: Any, request: str) -> bool:
    text = literal if isinstance(literal, str) else format(literal, "g")
    return text.casefold() in request.casefold()


def dishonest_literals(task: Task) -> list[str]:
    """Literals in the plan that the request does not give (an honest plan has none)."""
    domain_tools = set(load_pack(f"pte.testing.domains.{task.domain}").names)
    problems = []
    for item in task.steps:
        args = item.get("args", {})
        checked: list[Any] = []
        if item.get("tool") in domain_tools:
            checked = list(_literals(args))
        elif item.get("tool") in _MATCHING_TOOLS and "value" in args:
            checked = list(_literals(args["value"]))
        elif item.get("tool") == "coalesce" and "default" in args:
            checked = list(_literals(args["default"]))  # the fallback value is data too
        elif item.get("tool") == "calculator":
            checked = re.findall(r"\d+(?:\.\d+)?", str(args.get("expression", "")))
        problems += [f"{item['id']}: {lit!r}" for lit in checked if not _occurs(lit, task.request)]
    return problems
