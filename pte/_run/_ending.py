"""How a run's plans end: decisions the run loop (pte._run._loop) asks for, as functions.

Whether a failed step may be replanned around (`stop_if_effect_unknown`), the labels its error
carries to the replanner (`error_labels_of`), the plan's result value (`result_value`), the
answer without a finalizer (`render_result`) and how many writes a person allowed
(`count_autonomy`); what the finalizer is shown is pte._run._finalizer_view's.
They read the run's state and write nothing: the loop writes every record.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from pte._core import FailedClosed, ReasonCode
from pte._execution import StepResult, resolve_result, stop_if_partial
from pte._run._prompts import _as_logged

if TYPE_CHECKING:
    from collections.abc import Mapping

    from pte._catalogue import Registry
    from pte._plan import Plan
    from pte._run._state import RunResult, RunState

__all__ = [
    "count_autonomy",
    "error_labels_of",
    "render_result",
    "result_value",
    "stop_if_effect_unknown",
]

_UNTRUSTED = frozenset({"untrusted"})


def stop_if_effect_unknown(failure: StepResult, registry: Registry) -> None:
    """How a failed step ends the run when nothing may be tried after it: the one place a run
    (before a replan) and execute decide it.

    A non-idempotent write that timed out may or may not have taken effect (and a write
    for_each failed after earlier elements took effect): a replan could repeat it, so the
    run ends needs_review and a person must look first. A tool that raised SystemExit,
    KeyboardInterrupt or another BaseException (`ToolError.fatal`) ends the run: it is not
    replanned around."""
    if failure.error is not None and failure.error.fatal:
        raise FailedClosed(
            ReasonCode.STEP_FAILED,
            f"step {failure.step_id!r} ({failure.tool}) failed: {failure.error.message}; the run is stopped",
        )
    stop_if_partial(failure, registry)  # pte._plan._control: a write for_each half applied
    spec = registry.get(failure.tool)
    if (
        spec is not None  # a require step's condition names no tool (pte._plan._control)
        and spec.effect == "write"
        and not spec.idempotent
        and failure.error
        and failure.error.kind == "timeout"
    ):
        raise FailedClosed(
            ReasonCode.NEEDS_REVIEW,
            f"step {failure.step_id!r} ({failure.tool}) timed out; it is not idempotent and may or may "
            "not have taken effect, so the run is not replanned. Check its effect before going on.",
        )


def error_labels_of(run: RunState, failure: StepResult) -> frozenset[str]:
    """The labels of a failed step's error message, for the replanner (pte._run._exposure).

    An error message is tool output like any other: it may quote third-party text the
    tool read, or the arguments it was given. So it carries the labels of the tool's
    output provenance joined with those of the step's arguments; shown to a planner,
    untrusted error text exposes every later plan exactly as an untrusted output does.
    """
    output = run.labels.get(failure.step_id)
    inputs = run.input_labels.get(failure.step_id)
    if output is None or inputs is None:
        return _UNTRUSTED  # unknown: assume the worst
    return output | inputs


def result_value(plan: Plan, outputs: Mapping[str, Any]) -> Any:
    """The plan's result over the run's outputs; FailedClosed if it selects nothing."""
    try:
        return resolve_result(plan, outputs)
    except (KeyError, IndexError, TypeError) as exc:
        raise FailedClosed(
            ReasonCode.STEP_FAILED, f"the plan's result selects nothing at run time: {exc}"
        ) from None


def render_result(result: Any) -> str:
    """The deterministic answer: the result value as text (JSON for structured values)."""
    if result is None:
        return "The plan completed. It declares no result."
    if isinstance(result, str):
        return result
    # As the log holds it (a whole-number float as an integer): replay renders it from the log.
    return json.dumps(_as_logged(result), indent=2, sort_keys=True, ensure_ascii=False)


def count_autonomy(result: RunResult, registry: Registry, endorsed: Collection[str]) -> None:
    """Write calls made without a person, and those an approval or endorsement allowed."""
    writes = [s for s in result.steps if s.tool in registry and registry[s.tool].effect == "write"]
    person = sum(1 for s in writes if registry[s.tool].requires_approval or s.step_id in endorsed)
    result.writes_with_person, result.writes_without_person = person, len(writes) - person
