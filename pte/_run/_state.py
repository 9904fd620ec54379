"""A run's state and configuration, and what its decision functions read of the deployment.

`EngineConfig` (recorded in ``run_started``), `RunResult`, the state of one run (`RunState`, which
only the run loop, pte._run._loop, changes) and `Planning` live here, apart from the loop, so
that the decision functions the loop calls (pte._run._exposure, _repair, _stages, _delegation)
read plain values and never call back into the loop or the engine.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from pte._audit import RecordSink, current_config
from pte._catalogue import Registry
from pte._core import DEFAULT_DATA_BUDGET, ReasonCode
from pte._execution import StepResult
from pte._plan import DEFAULT_LIMITS, Limits, Plan, Specialist, specialists_from_records
from pte._policy import Decided, LabelTree, Policy
from pte._run._otel import RunTracer

__all__ = [
    "PLANNER_DATA",
    "EngineConfig",
    "PlanOrigin",
    "PlannerData",
    "Planning",
    "RunResult",
    "RunState",
    "RunStatus",
]

#: How a stage planner, replanner or repair prompt is shown untrusted data.
PlannerData = Literal["handles", "shown"]
PLANNER_DATA: tuple[str, ...] = ("handles", "shown")

#: condition_not_met: a `require` step's condition was false (pte._plan._control): not a failure.
RunStatus = Literal["succeeded", "failed_closed", "condition_not_met"]
PlanOrigin = Literal["planner", "replanner", "file", "stage", "repair", "specialist"]


@dataclass(frozen=True)
class EngineConfig:
    """How a run is bounded and finished. Recorded in `run_started` so replay can reproduce it."""

    max_replans: int = 2
    limits: Limits = DEFAULT_LIMITS
    #: Phrase the answer with one LLM call (True) or render the plan's result deterministically.
    llm_answer: bool = True
    #: Plans a run may chain with `continue` (pte._run._stages): the first plan is stage 1.
    max_stages: int = 3
    #: What stage planners, replanners and repair prompts are shown of untrusted data
    #: (pte._run._exposure): ``handles`` (a reference, schema and labels in its place; the plan
    #: stays as trusted as the first) or ``shown`` (the text itself; every call of a plan
    #: written after that carries the ``untrusted`` label).
    planner_data: PlannerData = "handles"
    #: Characters per data block shown to a planner or the finalizer, cut at record
    #: boundaries (pte._core._data_budget). None: the 4,000-character clip (`LEGACY_DATA_CHARS`).
    data_budget: int | None = DEFAULT_DATA_BUDGET

    def __post_init__(self) -> None:
        object.__setattr__(self, "specialists", tuple(self.specialists))
        if self.planner_data not in PLANNER_DATA:
            raise ValueError(f"planner_data must be one of {list(PLANNER_DATA)}, not {self.planner_data!r}")
        budget = self.data_budget
        if budget is not None and (type(budget) is not int or not 200 <= budget <= 1_000_000):
            raise ValueError(
                f"data_budget must be an integer from 200 to 1,000,000 characters, not {budget!r}"
            )

    #: Send a plan rejected for a reason the planner can fix back to it once, as a replan
    #: counted against `max_replans` (pte._run._repair); `max_replans=0` disables it too.
    repair: bool = True
    #: The deployment's specialists (pte._plan._specialists): planners a coordinating planner
    #: delegates tasks to (pte._run._delegation). Empty: every planner is shown the whole catalogue.
    specialists: tuple[Specialist, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "max_replans": self.max_replans,
            "limits": self.limits.to_dict(),
            "llm_answer": self.llm_answer,
            "max_stages": self.max_stages,
            # Omitted where they equal what a record without them means (the reader of older
            # records, pte._audit._older_records, says so: its table ADDED).
            **({"planner_data": self.planner_data} if self.planner_data != "shown" else {}),
            **({"data_budget": self.data_budget} if self.data_budget is not None else {}),
        }
        if self.repair:
            out["repair"] = True
        if self.specialists:
            out["specialists"] = [spec.to_dict() for spec in self.specialists]
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EngineConfig:
        """The config a ``run_started.config`` records, read through the reader of older records
        (`pte._audit.current_config`): a field the record lacks means what its table says."""
        current = current_config(data)
        recorded = current.get("limits") or {}
        # max_values None: no value cap (what a config without one means).
        limits: dict[str, Any] = {
            k: None if v is None and k == "max_values" else int(v) for k, v in recorded.items()
        }
        return cls(
            max_replans=int(current.get("max_replans", 2)),
            limits=Limits(**limits),
            llm_answer=bool(current.get("llm_answer", True)),
            max_stages=int(current.get("max_stages", 3)),
            planner_data=cast(PlannerData, current["planner_data"]),
            data_budget=current["data_budget"],
            repair=bool(current["repair"]),
            specialists=specialists_from_records(current["specialists"]),
        )


@dataclass
class RunResult:
    """How a run ended: `succeeded` with an answer, or `failed_closed` with a reason."""

    run_id: str
    status: RunStatus
    reason: ReasonCode | None = None
    message: str | None = None
    answer: str | None = None
    result: Any = None
    outputs: dict[str, Any] = field(default_factory=dict)
    steps: list[StepResult] = field(default_factory=list)
    plans: list[Plan] = field(default_factory=list)
    llm_calls: int = 0
    usage: dict[str, int] = field(default_factory=dict)
    #: Consequential actions (write calls) that ran without a person, and those a person
    #: allowed (the plan's approval, or an endorsement of the call's value).
    writes_without_person: int = 0
    writes_with_person: int = 0

    @property
    def ok(self) -> bool:
        return self.status == "succeeded"

    @property
    def tools_called(self) -> list[str]:
        """The tools called, in order (failed calls included)."""
        return [s.tool for s in self.steps]

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "status": self.status,
            "reason": self.reason.value if self.reason else None,
            "message": self.message,
            "answer": self.answer,
            "result": self.result,
            "steps": [
                {
                    "id": s.step_id,
                    "tool": s.tool,
                    "status": s.status,
                    **({"error": s.error.to_dict()} if s.error else {}),
                }
                for s in self.steps
            ],
            "plan_hashes": [p.hash for p in self.plans],
            "llm_calls": self.llm_calls,
            "usage": self.usage,
            "autonomy": {
                "writes_without_person": self.writes_without_person,
                "writes_with_person": self.writes_with_person,
            },
        }


@dataclass
class RunState:
    """One run's state. Only `pte._run._loop.RunLoop` changes it; decision functions read it."""

    audit: RecordSink
    result: RunResult
    #: Tool name of every completed step, across plans (what a replan may reference).
    prior: dict[str, str] = field(default_factory=dict)
    #: Provenance label set of every step of every accepted plan.
    labels: dict[str, frozenset[str]] = field(default_factory=dict)
    #: Label set of every such step's arguments (what its error message may quote).
    input_labels: dict[str, frozenset[str]] = field(default_factory=dict)
    #: Whether an LLM prompt of this run has shown untrusted data (sticky): later plans'
    #: literals then count as untrusted, except values the first plan already had, and every
    #: call of such a plan carries the untrusted label (pte._run._exposure).
    shown_untrusted: bool = False
    #: Whether a planner prompt of this run has shown trusted data (sticky): later literals
    #: then count as trusted, not as the request (pte._run._exposure).
    shown_trusted: bool = False
    #: Canonical JSON of the literals of plans written before any untrusted data was shown.
    request_literals: frozenset[str] = frozenset()
    #: OpenTelemetry spans of this run (inactive without a tracer provider).
    tracer: RunTracer = field(default_factory=RunTracer.disabled)
    #: Completed for_each steps (their output is a list): pte._plan._control.
    prior_lists: set[str] = field(default_factory=set)
    #: Field-level labels of every step of every accepted plan (pte._policy._labels).
    label_trees: dict[str, LabelTree] = field(default_factory=dict)
    #: The output schema compile inferred for every step of a generic tool of every accepted
    #: plan (its instantiation: `pick` with its fields, `sort_records` of its records, ...).
    #: Later stages and replans check references into completed steps against these; replay
    #: and resume rebuild them by compiling the recorded plans again.
    output_types: dict[str, Any] = field(default_factory=dict)
    #: What decided that the current plan runs at all (docs/labels.md), and what decides that
    #: a plan after it runs: its requires and failures joined in (`PolicyCheck.completion`).
    decided: Decided = field(default_factory=Decided)
    completion: Decided = field(default_factory=Decided)
    #: What decides whether the plan being asked for now runs (see `pte._run._stages.decided_for`).
    deciding: Decided = field(default_factory=Decided)
    #: Per step of every accepted plan: what decides whether it runs and fails (`PolicyCheck.triggers`).
    triggers: dict[str, frozenset[str]] = field(default_factory=dict)
    #: The labels of the failure that triggered the replan being asked for now.
    trigger: frozenset[str] = frozenset()
    #: Replans used so far: after a failed step, or to repair a rejected plan (pte._run._repair).
    replans: int = 0
    #: plan hash -> the steps that need an endorsement (pte._policy._endorsement): step -> {param: why}.
    endorse: dict[str, dict[str, dict[str, str]]] = field(default_factory=dict)
    #: plan hash -> step -> the decisions a person is shown with the call (`PolicyCheck.endorse_decisions`).
    endorse_decisions: dict[str, dict[str, list[dict[str, Any]]]] = field(default_factory=dict)
    #: The calls (step ids, ``id[i]`` for elements) that consumed an endorsement.
    endorsed: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class Planning:
    """What the run's decision functions (pte._run._exposure, _stages, _repair, _delegation) read
    of the deployment: values, never the engine or the loop (no callbacks)."""

    config: EngineConfig
    #: The deployment's catalogue (what plans compile against).
    registry: Registry
    #: The catalogue planners are shown: the coordinator's view when there are specialists.
    planner_registry: Registry
    policy: Policy
