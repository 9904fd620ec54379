"""`RunView`: one run's audit records folded into what happened to each step.

A log is a flat sequence of records; an auditor (and the report, `pte audit show`) wants
the run as plans of steps, each with its true outcome. Folding is where that goes wrong
when every reader does it by hand: a `for_each` step has no ``step_finished`` of its own
(its elements ``id[0]``, ``id[1]``… do), a skipped `when` step has only a ``condition``
record, and a `require` step has no tool at all. This module is the one place that knows
how those records combine:

- a tool step's status is its ``step_finished`` status (``ok``/``failed``/``needs_review``…),
  ``started`` if it began and never finished, ``skipped`` when its `when` was false, and
  ``not run`` only when no record names it;
- a `require` step is ``met`` / ``not met`` (or ``error``) from its ``condition`` record;
- a `for_each` step carries its elements (each with its own status, resolved arguments and
  output) and its status sums them up (``ok`` when every element ran ok);
- every step keeps the arguments it was called with (resolved references), from its
  ``step_started`` record, next to the arguments the plan wrote.

It reads records only; it never decides whether a log is genuine (`verify` does that).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pte._catalogue import expand_run_started
from pte._core import array_index
from pte._plan import PATH_SEPARATOR, step_path

__all__ = ["ConditionView", "ElementView", "PlanView", "RunView", "StepView", "plan_references"]

#: ``step[i]``: a for_each element's step id, its index as the executor writes it (`array_index`).
_ELEMENT_ID = re.compile(r"(?P<step>.+)\[(?P<index>[^\[\]]+)\]", re.DOTALL)
#: Statuses of a step that ended without doing its work.
NOT_DONE = frozenset({"not run", "started", "failed", "needs_review", "not met", "error"})


def plan_references(value: Any) -> list[str]:
    """The paths of every ``{"$ref": ...}`` inside `value` (a plan's arguments or conditions)."""
    found: list[str] = []
    if isinstance(value, dict):
        if set(value) == {"$ref"} and isinstance(value["$ref"], str):
            return [value["$ref"]]
        for item in value.values():
            found += plan_references(item)
    elif isinstance(value, list):
        for item in value:
            found += plan_references(item)
    return found


@dataclass(frozen=True)
class ConditionView:
    """A `when` or `require` as evaluated: its outcome and the operand values it compared."""

    kind: str
    outcome: str
    values: Any = None
    error: Any = None


@dataclass
class ElementView:
    """One element of a `for_each` step: an ordinary call, ``id[i]``."""

    index: int
    status: str = "started"
    args: Any = None
    output: Any = None
    error: Any = None
    duration_ms: float | None = None


@dataclass
class StepView:
    """One plan step and what became of it."""

    id: str
    kind: str  # "tool", "for_each" or "require"
    tool: str | None
    deps: list[str]
    plan_args: Any = None
    when: Any = None
    require: Any = None
    for_each: Any = None
    message: str | None = None
    effect: str = "read"
    provenance: str = "trusted"
    sinks: list[Any] | None = None
    requires_approval: bool = False
    status: str = "not run"
    condition: ConditionView | None = None
    args: Any = None
    output: Any = None
    error: Any = None
    duration_ms: float | None = None
    items: int | None = None
    elements: list[ElementView] = field(default_factory=list)
    #: A step inlined from a procedure call (pte._plan._procedures): its path, ``call/step``; else None.
    path: str | None = None

    @property
    def is_write(self) -> bool:
        return self.effect == "write"

    def calls(self) -> int:
        """How many tool calls this step made (elements for a `for_each`)."""
        if self.kind == "for_each":
            return sum(1 for e in self.elements if e.status != "started" or e.args is not None)
        return 1 if self.args is not None else 0


@dataclass
class PlanView:
    """An accepted plan and its steps."""

    index: int
    origin: str
    plan_hash: str
    plan: Mapping[str, Any]
    steps: list[StepView]


@dataclass
class RunView:
    """One run folded from its records (see the module docstring)."""

    run_id: str
    started: Mapping[str, Any]
    records: Sequence[Mapping[str, Any]]
    plans: list[PlanView]
    status: str
    finished: Mapping[str, Any] | None

    @classmethod
    def fold(
        cls, run_id: str, records: Sequence[Mapping[str, Any]], contents: Mapping[str, Any] | None = None
    ) -> RunView:
        """Fold `records` (one run's, in log order) into a view; `contents` are the log's stored contents."""
        started = expand_run_started(records[0], contents or {}) if records else {}
        tools = {str(t.get("name")): t for t in _list(started.get("tools")) if isinstance(t, dict)}
        finished = next((r for r in reversed(records) if r.get("type") == "run_finished"), None)
        status = str(finished.get("status")) if finished else "unfinished"
        plans = [
            _fold_plan(index, accepted, _records_of_plan(records, position), tools)
            for index, (position, accepted) in enumerate(
                ((i, r) for i, r in enumerate(records) if r.get("type") == "plan_accepted"), start=1
            )
        ]
        config = started.get("config")
        # The run could call procedures or delegate to specialists (pte._run._delegation): nested steps.
        if isinstance(config, dict) and (config.get("procedures") or config.get("specialists")):
            for step in (s for p in plans for s in p.steps):
                if PATH_SEPARATOR in step.id:
                    step.path = step_path(step.id)
        return cls(run_id, started, records, plans, status, finished)

    @property
    def paused(self) -> Mapping[str, Any] | None:
        """The ``run_paused`` record the run waits at (its last record), else None."""
        last = self.records[-1] if self.records else None
        return last if last is not None and last.get("type") == "run_paused" else None

    @property
    def tools(self) -> dict[str, Mapping[str, Any]]:
        return {str(t.get("name")): t for t in _list(self.started.get("tools")) if isinstance(t, dict)}

    def of_type(self, *types: str) -> list[Mapping[str, Any]]:
        return [r for r in self.records if r.get("type") in types]

    def autonomy(self) -> dict[str, int]:
        """Write calls that ran without a person, and those a person allowed: the tool needs
        an approved plan, or the call consumed an endorsement (the record just before it)."""
        tools = self.tools
        alone = person = 0
        previous: Mapping[str, Any] = {}
        for record in self.records:
            if record.get("type") == "step_started" and record.get("effect") == "write":
                endorsed = previous.get("type") == "endorsement"
                if endorsed or (tools.get(str(record.get("tool"))) or {}).get("requires_approval"):
                    person += 1
                else:
                    alone += 1
            previous = record
        return {"writes_without_person": alone, "writes_with_person": person}

    def summary(self) -> dict[str, Any]:
        """What an auditor reads first: outcome, steps by outcome, writes, people, policy decisions."""
        steps = [s for p in self.plans for s in p.steps]
        outcomes = Counter(s.status for s in steps)
        writes = [s for s in steps if s.is_write]
        return {
            "status": self.status,
            "reason": (self.finished or {}).get("reason"),
            "plans": len(self.plans),
            "steps": len(steps),
            "outcomes": dict(sorted(outcomes.items())),
            "write_calls": sum(s.calls() for s in writes),
            "write_steps": len(writes),
            "approvals": len(self.of_type("approval")),
            "approvals_rejected": len(self.of_type("approval_rejected")),
            "pauses": len(self.of_type("run_paused")),
            "endorsements": len(self.of_type("endorsement")),
            **self.autonomy(),
            "policy_decisions": len(self.of_type("plan_rejected")),
            "replans": len(self.of_type("replan")),
            "repairs": len(self.of_type("repair")),
            "llm_calls": len(self.of_type("llm_call")),
        }


def _records_of_plan(records: Sequence[Mapping[str, Any]], position: int) -> list[Mapping[str, Any]]:
    """The records after the plan_accepted at `position`, up to the next plan_accepted."""
    out = []
    for r in records[position + 1 :]:
        if r.get("type") == "plan_accepted":
            break
        out.append(r)
    return out


def _list(value: Any) -> list[Any]:
    """`value` if it is a list, else no items: a record read from a log may hold anything."""
    return value if isinstance(value, list) else []


def _plan_step(raw: Mapping[str, Any], tools: Mapping[str, Mapping[str, Any]]) -> StepView:
    tool_name = raw.get("tool")
    kind = "require" if "require" in raw else ("for_each" if "for_each" in raw else "tool")
    deps = plan_references([raw.get("args"), raw.get("when"), raw.get("require"), raw.get("for_each")])
    deps = [ref.partition("/")[0] for ref in deps]
    deps += [d for d in _list(raw.get("after")) if isinstance(d, str)]
    tool = tools.get(str(tool_name), {}) if tool_name is not None else {}
    return StepView(
        id=str(raw.get("id")),
        kind=kind,
        tool=str(tool_name) if tool_name is not None else None,
        deps=list(dict.fromkeys(deps)),
        plan_args=raw.get("args"),
        when=raw.get("when"),
        require=raw.get("require"),
        for_each=raw.get("for_each"),
        message=str(raw["message"]) if raw.get("message") is not None else None,
        effect=str(tool.get("effect", "read")) if tool_name is not None else "control",
        provenance=str(tool.get("provenance", "trusted")) if tool_name is not None else "-",
        sinks=tool.get("sinks") or None,
        requires_approval=bool(tool.get("requires_approval", False)),
    )


def _fold_plan(
    index: int,
    accepted: Mapping[str, Any],
    records: Iterable[Mapping[str, Any]],
    tools: Mapping[str, Mapping[str, Any]],
) -> PlanView:
    plan = accepted.get("plan") if isinstance(accepted.get("plan"), dict) else {}
    steps = [_plan_step(raw, tools) for raw in _list((plan or {}).get("steps")) if isinstance(raw, dict)]
    by_id = {s.id: s for s in steps}
    for r in records:
        kind = r.get("type")
        step_id = str(r.get("step_id"))
        element = _ELEMENT_ID.fullmatch(step_id)
        position = array_index(element["index"]) if element else None
        if (
            element
            and position is not None
            and element["step"] in by_id
            and kind in ("step_started", "step_finished")
        ):
            _fold_element(by_id[element["step"]], position, r)
            continue
        step = by_id.get(step_id)
        if step is None:
            continue
        if kind == "condition":
            step.condition = ConditionView(
                str(r.get("kind")), str(r.get("outcome")), r.get("values"), r.get("error")
            )
            step.status = _condition_status(step, step.condition)
        elif kind == "for_each":
            step.items = r.get("items") if isinstance(r.get("items"), int) else None
            step.error = r.get("error")
            step.status = "failed" if r.get("error") else ("ok" if step.items == 0 else "started")
        elif kind == "step_started":
            step.args = r.get("args")
            step.status = "started"
        elif kind == "step_finished":
            step.status = str(r.get("status"))
            step.output = r.get("output")
            step.error = r.get("error")
            step.duration_ms = r.get("duration_ms") if isinstance(r.get("duration_ms"), int | float) else None
    for step in steps:
        if step.kind == "for_each" and step.items:
            step.status = _elements_status(step)
    return PlanView(index, str(accepted.get("origin")), str(accepted.get("plan_hash")), plan or {}, steps)


def _condition_status(step: StepView, condition: ConditionView) -> str:
    if condition.kind == "require":
        return {"met": "met", "not_met": "not met"}.get(condition.outcome, condition.outcome)
    if condition.outcome == "skipped":
        return "skipped"
    if condition.outcome == "error":
        return "error"
    return step.status  # "run": what the call then records decides


#: The most elements a `for_each` can have (the plan language's largest ``max_items``).
MAX_ELEMENTS = 1000


def _fold_element(step: StepView, index: int, record: Mapping[str, Any]) -> None:
    # An element the list never had (past its recorded item count, or past what any plan may
    # iterate) is no element: a record naming ``x[999999999]`` must not pad the view with
    # empty elements (nor the report and `pte audit show` with lines, nor memory without end).
    if index >= (step.items if step.items is not None else MAX_ELEMENTS):
        return
    while len(step.elements) <= index:
        step.elements.append(ElementView(len(step.elements), status="not run"))
    element = step.elements[index]
    if record.get("type") == "step_started":
        element.args = record.get("args")
        element.status = "started"
    else:
        element.status = str(record.get("status"))
        element.output = record.get("output")
        element.error = record.get("error")
        duration = record.get("duration_ms")
        element.duration_ms = duration if isinstance(duration, int | float) else None


def _elements_status(step: StepView) -> str:
    """A `for_each` step's status: ``ok`` when all its elements ran ok, else the first that did not."""
    ran = step.elements[: step.items or 0]
    if len(ran) == (step.items or 0) and all(e.status == "ok" for e in ran):
        return "ok"
    for element in ran:
        if element.status != "ok":
            return element.status
    return "started"
