"""The audit record vocabulary: one builder per record type, the one place they are spelled.

Every record PTE writes is built here, as a `Record` (its type and its fields), and handed
to a `pte._audit._record_sink.RecordSink`, which adds the common fields (``seq``, ``run_id``,
``ts``, ``prev``, ``hash``) and writes it. No other module spells a record type or a
record's field names when writing (tests/e2e/test_seams.py scans for it), so what a record
holds is decided in one place, next to its contract (schemas/audit-record.schema.json,
docs/audit-format.md).

A builder takes the record's values as keyword arguments and returns its fields, with the
optional ones present exactly when the format says so (an ``output`` for a step that ran ok,
an ``error`` for one that did not, ``attempts`` only after a retry, trace ids only when a
span recorded them). It does not check values: the sink's schema check (``validate``) and
`verify` do. The bytes a record becomes depend only on its fields (canonical JSON sorts the
members), so building a record here instead of at its call site changes nothing on disk.

Readers fold records through `pte._replay._run_view.RunView`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

__all__ = [
    "RECORD_TYPES",
    "TRACE_FIELDS",
    "Record",
    "approval",
    "approval_rejected",
    "condition",
    "endorsement",
    "endorsement_rejected",
    "for_each",
    "llm_call",
    "plan_accepted",
    "plan_rejected",
    "procedure_approval",
    "repair",
    "replan",
    "run_finished",
    "run_paused",
    "run_resumed",
    "run_started",
    "stage",
    "step_finished",
    "step_started",
    "traced",
]

#: Every record type PTE writes (each has its builder below).
RECORD_TYPES = frozenset(
    {
        "run_started",
        "llm_call",
        "plan_accepted",
        "plan_rejected",
        "approval",
        "approval_rejected",
        "step_started",
        "step_finished",
        "condition",
        "for_each",
        "stage",
        "repair",
        "replan",
        "run_paused",
        "run_resumed",
        "endorsement",
        "endorsement_rejected",
        "run_finished",
    }
)

#: Record fields written from the trace context (`pte._run._otel`); replay does not compare them
#: (they differ per run): observability, not decisions.
TRACE_FIELDS = ("trace_id", "span_id")

_NO_TRACE: Mapping[str, str] = {}


class Record(NamedTuple):
    """One record before a sink writes it: its ``type`` and its own fields (no common ones).

    A named tuple: immutable and compared by value like the frozen dataclass it was, at a
    quarter less to build (an executor builds two per step)."""

    type: str
    fields: Mapping[str, Any]


def _ms(duration_ms: float) -> float:
    """A duration as records hold it: milliseconds to the microsecond."""
    return round(duration_ms, 3)


def _trace(trace: Mapping[str, str] | None) -> dict[str, str]:
    """The trace ids of `trace` (a span's, `pte._run._otel`), nothing else."""
    if not trace:
        return {}
    return {key: trace[key] for key in TRACE_FIELDS if key in trace}


def traced(record: Record, trace: Mapping[str, str]) -> Record:
    """`record` with the trace ids of `trace` added (a step's span, started as it is written)."""
    ids = _trace(trace)
    return Record(record.type, {**record.fields, **ids}) if ids else record


# -- a run's frame ---------------------------------------------------------------------------


def run_started(
    *,
    mode: str,
    request: str | None,
    config: Mapping[str, Any],
    content: Mapping[str, Any] | None = None,
    trace: Mapping[str, str] | None = None,
    deployment: Mapping[str, Any] | None = None,
) -> Record:
    """``run_started``: how the run was started and with what.

    `content`: the catalogue, policy and prompts it runs with (``tools``, ``catalogue``,
    ``policy``, ``prompts``, ``stored``: `pte._catalogue._fingerprint.run_started_fields`); None for a run
    refused before it had any (it records no tools). The writer adds ``format`` and
    ``pte_version`` and drops stored content its file already holds. `deployment`: the
    deployment the run is bound to (`pte._audit._binding.deployment_binding`), when it has one.
    """
    fields: dict[str, Any] = {"mode": mode, "request": request, "config": config}
    fields.update(content if content is not None else {"tools": []})
    if deployment is not None:
        fields["deployment"] = dict(deployment)
    return Record("run_started", {**fields, **_trace(trace)})


def run_finished(
    *,
    status: str,
    reason: str | None,
    message: str | None,
    answer: Any,
    result: Any,
    steps_run: int,
    llm_calls: int,
) -> Record:
    """``run_finished``: the run's end, which seals it (nothing of the run may follow)."""
    return Record(
        "run_finished",
        {
            "status": status,
            "reason": reason,
            "message": message,
            "answer": answer,
            "result": result,
            "steps_run": steps_run,
            "llm_calls": llm_calls,
        },
    )


def run_paused(
    *,
    reason: str,
    plan_hash: str,
    tools: Sequence[str],
    expires_at: str,
    message: str,
    endorsement: Mapping[str, Any] | None = None,
) -> Record:
    """``run_paused``: the run waits for a person (an approval, or an `endorsement` request)."""
    fields: dict[str, Any] = {
        "reason": reason,
        "plan_hash": plan_hash,
        "tools": list(tools),
        "expires_at": expires_at,
        "message": message,
    }
    if endorsement is not None:
        fields["endorsement"] = endorsement
    return Record("run_paused", fields)


def run_resumed(*, after_records: int) -> Record:
    """``run_resumed``: an annotation where a resumed run goes on after its re-read records."""
    return Record("run_resumed", {"after_records": after_records})


# -- planning --------------------------------------------------------------------------------


def llm_call(
    *,
    role: str,
    model: str,
    messages: Sequence[Mapping[str, str]],
    response_format: Any,
    response: str | None,
    finish_reason: str | None,
    usage: Mapping[str, Any],
    error: str | None,
    attempts: int,
    duration_ms: float,
    trace: Mapping[str, str] | None = None,
) -> Record:
    """``llm_call``: one model call, what it was shown and what it answered (or its error)."""
    return Record(
        "llm_call",
        {
            "role": role,
            "model": model,
            "messages": messages,
            "response_format": response_format,
            "response": response,
            "finish_reason": finish_reason,
            "usage": dict(usage),
            "error": error,
            "attempts": attempts,
            "duration_ms": _ms(duration_ms),
            **_trace(trace),
        },
    )


def plan_accepted(
    *,
    origin: str,
    plan_hash: str,
    plan: Mapping[str, Any],
    order: Iterable[str],
    needs_endorsement: Mapping[str, Sequence[str]] | None = None,
) -> Record:
    """``plan_accepted``: a plan that compiled, with its execution order (and the calls whose
    values wait for a person's endorsement, when there are any)."""
    fields: dict[str, Any] = {"origin": origin, "plan_hash": plan_hash, "plan": plan, "order": list(order)}
    if needs_endorsement:
        fields["needs_endorsement"] = {sid: list(params) for sid, params in needs_endorsement.items()}
    return Record("plan_accepted", fields)


def plan_rejected(*, origin: str, reason: str, message: str, path: str | None, plan_text: str) -> Record:
    """``plan_rejected``: a plan that did not compile, why, and its text as written."""
    return Record(
        "plan_rejected",
        {"origin": origin, "reason": reason, "message": message, "path": path, "plan_text": plan_text},
    )


def repair(*, attempt: int, origin: str, reason: str, message: str, path: str | None) -> Record:
    """``repair``: the planner is asked to correct a rejected plan."""
    return Record(
        "repair", {"attempt": attempt, "origin": origin, "reason": reason, "message": message, "path": path}
    )


def replan(*, attempt: int, failed_step: str, error: Mapping[str, Any], completed: Iterable[str]) -> Record:
    """``replan``: a step failed; the replanner is asked for a plan for the rest."""
    return Record(
        "replan",
        {"attempt": attempt, "failed_step": failed_step, "error": error, "completed": list(completed)},
    )


def stage(
    *, stage: int, plan_hash: str, values: Mapping[str, Any], labels: Mapping[str, Sequence[str]]
) -> Record:
    """``stage``: a plan hands values (`values`, with their `labels`) to a next planning stage."""
    return Record("stage", {"stage": stage, "plan_hash": plan_hash, "values": values, "labels": labels})


# -- a person's decisions --------------------------------------------------------------------


def _decision(document: Mapping[str, Any], format_key: str) -> dict[str, Any]:
    return {key: value for key, value in document.items() if key != format_key}


def approval(document: Mapping[str, Any], *, approval_id: str, signed: bool) -> Record:
    """``approval``: the approval a plan ran under (`document`: `Approval.to_dict`), its id,
    and whether it was verified under a trusted key."""
    return Record(
        "approval", {**_decision(document, "pte_approval"), "approval_id": approval_id, "signed": signed}
    )


def procedure_approval(
    document: Mapping[str, Any], *, approval_id: str, signed: bool, plan_hash: str, steps: Iterable[str]
) -> Record:
    """``approval`` of the procedure variant: an approved procedure version (`document`:
    `ProcedureApproval.to_dict`), the plan it let run and the steps of that plan it covers."""
    fields = {
        **_decision(document, "pte_procedure_approval"),
        "approval_id": approval_id,
        "signed": signed,
        "plan_hash": plan_hash,
        "steps": list(steps),
    }
    return Record("approval", fields)


def approval_rejected(*, plan_hash: str, by: Any, at: Any, note: Any) -> Record:
    """``approval_rejected``: a person rejected the plan; the run ends."""
    return Record("approval_rejected", {"plan_hash": plan_hash, "by": by, "at": at, "note": note})


def endorsement(document: Mapping[str, Any], *, endorsement_id: str, signed: bool) -> Record:
    """``endorsement``: a person's endorsement a call consumed (`document`: `Endorsement.to_dict`)."""
    fields = {**_decision(document, "pte_endorsement"), "endorsement_id": endorsement_id, "signed": signed}
    return Record("endorsement", fields)


def endorsement_rejected(document: Mapping[str, Any], *, endorsement_id: str, signed: bool) -> Record:
    """``endorsement_rejected``: a person rejected a call's values; the run ends."""
    fields = {**_decision(document, "pte_endorsement"), "endorsement_id": endorsement_id, "signed": signed}
    return Record("endorsement_rejected", fields)


# -- steps -----------------------------------------------------------------------------------


def step_started(*, step_id: str, tool: str, effect: str, args: Any, plan_hash: str) -> Record:
    """``step_started``: a call is about to run (a write's is made durable first), with the
    arguments it is called with (as the plan wrote them when they could not be resolved)."""
    return Record(
        "step_started",
        {"step_id": step_id, "tool": tool, "effect": effect, "args": args, "plan_hash": plan_hash},
    )


def step_finished(
    *,
    step_id: str,
    tool: str,
    status: str,
    duration_ms: float,
    output: Any = None,
    error: Mapping[str, Any] | None = None,
    attempts: int = 1,
    retry_errors: Sequence[Mapping[str, Any]] = (),
) -> Record:
    """``step_finished``: how a call ended: its ``output`` when `error` is None, else its
    ``error``; ``attempts`` and ``retry_errors`` only when it was retried."""
    fields: dict[str, Any] = {"step_id": step_id, "tool": tool, "status": status}
    if error is None:
        fields["output"] = output
    else:
        fields["error"] = error
    if attempts > 1:
        fields["attempts"] = attempts
        fields["retry_errors"] = list(retry_errors)
    fields["duration_ms"] = _ms(duration_ms)
    return Record("step_finished", fields)


def condition(
    *,
    step_id: str,
    kind: str,
    outcome: str,
    values: Sequence[Any],
    error: Mapping[str, Any] | None,
    plan_hash: str,
) -> Record:
    """``condition``: a `when` (``run``/``skipped``) or `require` (``met``/``not_met``) as
    evaluated, with the operand values it compared (or the ``error`` that stopped it)."""
    return Record(
        "condition",
        {
            "step_id": step_id,
            "kind": kind,
            "outcome": outcome,
            "values": list(values),
            "error": error,
            "plan_hash": plan_hash,
        },
    )


def for_each(
    *, step_id: str, tool: str, items: int, error: Mapping[str, Any] | None, plan_hash: str
) -> Record:
    """``for_each``: a per-item step's list as found: how many calls it makes (or why none)."""
    return Record(
        "for_each",
        {"step_id": step_id, "tool": tool, "items": items, "error": error, "plan_hash": plan_hash},
    )
