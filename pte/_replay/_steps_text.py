"""The plain-text steps summary of a run (`pte audit show`), folded by `RunView`.

`pte audit show` prints a log record by record; an auditor also needs what became of each
plan step, and reading that off the records by hand misleads (a `for_each` step has no
``step_finished`` of its own, a skipped `when` has only a ``condition``, a `require` calls no
tool). This module prints the same statuses the HTML report shows (`status_text` is shared
with it): each step with its status, a `when`/`require` with its condition, outcome and
operands, a `for_each` with its element count and each element's status and resolved
arguments.

Every value may be untrusted text (a tool's output, a model's plan), so every line goes
through the audit area's `visible`, as the timeline's lines do: control, bidi and invisible
format characters are shown as escapes, never sent to the terminal.

`StepsSummary` keeps, per run, only the records `RunView` folds into steps, so a show stays
bounded by a run's steps, not by the size of the run or the log.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from pte._audit import visible
from pte._catalogue import stored_contents
from pte._core import canonical_json
from pte._replay._run_view import RunView, StepView

__all__ = ["STEP_RECORDS", "StepsSummary", "render_steps", "status_text"]

#: The record types `RunView` folds into a run's steps (and its final status).
STEP_RECORDS = frozenset(
    {"run_started", "plan_accepted", "condition", "for_each", "step_started", "step_finished", "run_finished"}
)

_ELIDE = 80


def status_text(step: StepView) -> str:
    """A step's status as the report shows it: a `for_each` with its elements done, ``ok (6/6 elements)``."""
    if step.kind == "for_each" and step.items is not None:
        done = sum(1 for e in step.elements if e.status == "ok")
        return f"{step.status} ({done}/{step.items} elements)"
    return step.status


def _short(value: Any, limit: int = _ELIDE) -> str:
    if isinstance(value, str):
        text = value
    else:
        try:
            text = canonical_json(value)
        except (TypeError, ValueError):
            text = repr(value)
    text = visible(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _condition(step: StepView) -> str:
    written = step.require if step.kind == "require" else step.when
    if written is None:
        return ""
    text = f"  {'require' if step.kind == 'require' else 'when'} {_short(written)} -> "
    condition = step.condition
    if condition is None:
        return text + "not evaluated"
    text += condition.outcome.replace("_", " ")
    if condition.error is not None:
        return text + f" error {_short(condition.error)}"
    if condition.values is not None:
        text += f" (operands {_short(condition.values)})"
    if step.kind == "require" and step.status == "not met" and step.message:
        text += f": {_short(step.message)}"
    return text


def _step_lines(step: StepView) -> Iterator[str]:
    head = f"    {step.id}  {step.tool or step.kind}  {status_text(step)}"
    if step.kind == "for_each":
        head += f"  for_each {_short(step.for_each)}"
    head += _condition(step)
    if step.kind != "for_each" and step.args is not None:
        head += f"  args {_short(step.args)}"
    if step.error is not None:
        head += f"  error {_short(step.error)}"
    yield head
    for element in step.elements:
        line = f"      {step.id}[{element.index}]  {element.status}"
        if element.args is not None:
            line += f"  args {_short(element.args)}"
        if element.error is not None:
            line += f"  error {_short(element.error)}"
        yield line


def render_steps(view: RunView) -> Iterator[str]:
    """The steps summary of one run, line by line; every line escaped by `visible`."""
    yield visible(f"steps of run {view.run_id}: {view.status}")
    if not view.plans:
        yield "  (no plan accepted)"
    for plan in view.plans:
        yield visible(f"  plan {plan.index} ({plan.origin}) {plan.plan_hash[:12]}…")
        for step in plan.steps:
            for line in _step_lines(step):
                yield visible(line)


class StepsSummary:
    """Streams a log's records and yields each run's steps summary once its records end.

    Feed every record in log order to `add` (it returns the lines of the run that just ended,
    if the record begins another) and call `finish` at the end. Only the records `RunView`
    folds into steps are kept, one run at a time; stored contents (a format 2 log stores a
    catalogue once per log) are kept across runs, as replay keeps them.
    """

    def __init__(self) -> None:
        self._run_id: Any = None
        self._records: list[Mapping[str, Any]] = []
        self._stored: dict[str, Any] = {}

    def add(self, record: Mapping[str, Any]) -> list[str]:
        """Take `record`; the summary lines of the previous run when `record` begins another."""
        lines: list[str] = []
        run_id = record.get("run_id")
        if self._records and run_id != self._run_id:
            lines = self.finish()
        if not self._records:
            self._run_id = run_id
        if record.get("type") in STEP_RECORDS or not self._records:
            self._records.append(record)
        return lines

    def finish(self) -> list[str]:
        """The summary lines of the run being read (none when no record was added since)."""
        if not self._records:
            return []
        records, self._records = self._records, []
        self._stored.update(stored_contents(records))
        return list(render_steps(RunView.fold(str(self._run_id), records, self._stored)))
