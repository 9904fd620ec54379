"""Replay and resume: the live engine, re-driven from an audit log (Temporal's replayer, in spirit).

Replay is not a second implementation. It runs the same `Engine` with

- a `ReplayClient` serving the recorded LLM answers,
- a `RecordedInvoker` serving the recorded tool outputs,
- a `CheckingAuditLog` that, instead of writing, compares every record the engine
  produces with the next recorded one and stops at the first divergence,

so the engine must reach the same decisions from the same inputs: the same plans accepted
or rejected (same reasons, same hashes), the same steps in the same order with the same
resolved arguments, the same statuses and the same end. Timestamps and durations are not
compared.

Resume is replay that goes live where the log ends: the recorded prefix is re-driven and
checked, then new records are appended to the same log. A `write` step that was started but
never finished is re-run only if its tool is idempotent; otherwise the run ends
`failed_closed(needs_review)` naming the step.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pte.audit import AuditLog, read_records
from pte.canonical import canonical_json
from pte.engine import Engine, EngineConfig, RunResult
from pte.errors import (
    ApprovalMissing,
    ApprovalRejected,
    FailedClosed,
    LLMError,
    PTEError,
    ReasonCode,
    ToolError,
)
from pte.executor import LiveInvoker, ToolInvoker
from pte.fingerprint import expand_run_started, stored_contents
from pte.llm import LLMClient, LLMResponse, ReplayClient
from pte.plan import Plan, PlanStep
from pte.policy import Policy
from pte.redaction import REDACTED
from pte.tools import Registry, ToolSpec

__all__ = [
    "CheckingAuditLog",
    "RecordedInvoker",
    "ReplayDivergence",
    "ReplayReport",
    "RunReplay",
    "replay_file",
    "replay_run",
    "resume_file",
]

#: Per record type, the fields that carry decisions. Everything else (time, hashes,
#: durations, token counts, the prompts) is context, not a decision.
DECISION_FIELDS: Mapping[str, tuple[str, ...]] = {
    "run_started": ("mode", "request"),
    "llm_call": ("role", "error"),
    "plan_accepted": ("origin", "plan_hash", "order"),
    "plan_rejected": ("origin", "reason", "message", "path"),
    "approval": ("plan_hash", "by"),
    "approval_rejected": ("plan_hash", "by", "note"),
    "step_started": ("step_id", "tool", "effect", "args"),
    "step_finished": ("step_id", "tool", "status", "output", "error"),
    "replan": ("attempt", "failed_step", "error", "completed"),
    "run_finished": ("status", "reason", "result", "answer", "steps_run", "llm_calls"),
    # pte.control
    "condition": ("step_id", "kind", "outcome", "values", "error", "plan_hash"),
    "for_each": ("step_id", "tool", "items", "error", "plan_hash"),
    "stage": ("stage", "plan_hash", "values", "labels"),
}
#: Annotations written by resume; the engine itself never produces them.
_ANNOTATIONS = frozenset({"run_resumed", "run_paused"})


class ReplayDivergence(PTEError):
    """The engine made a different decision than the one recorded."""

    def __init__(self, line: int, record_type: str, field_name: str, recorded: Any, replayed: Any) -> None:
        super().__init__(
            f"line {line}: {record_type}.{field_name} differs: recorded {recorded!r}, replayed {replayed!r}"
        )
        self.line = line
        self.record_type = record_type
        self.field = field_name
        self.recorded = recorded
        self.replayed = replayed

    def to_dict(self) -> dict[str, Any]:
        return {
            "line": self.line,
            "record_type": self.record_type,
            "field": self.field,
            "recorded": self.recorded,
            "replayed": self.replayed,
        }


class _LogEnded(PTEError):
    """The engine wants to go on where the recorded log ends (a crashed, unsealed run)."""


def _compare(line: int, recorded: Mapping[str, Any], replayed: Mapping[str, Any]) -> None:
    if recorded.get("type") != replayed.get("type"):
        raise ReplayDivergence(
            line, str(recorded.get("type")), "type", recorded.get("type"), replayed.get("type")
        )
    for name in DECISION_FIELDS.get(str(recorded["type"]), ()):
        if recorded.get(name) != replayed.get(name):
            raise ReplayDivergence(line, str(recorded["type"]), name, recorded.get(name), replayed.get(name))


class _RedactedPlanHashes:
    """Plan hashes that cannot be re-derived because the recorded plan holds redacted values.

    A secret written into a plan (a `password` argument) is recorded as ``[REDACTED]``, so
    the replayed plan, compiled from the recorded text, hashes differently from the original.
    When the two plans are the same record for record (both redacted) and the recorded one
    holds a redaction, the replayed hash stands for the recorded one from then on; any other
    difference is still a divergence.
    """

    def __init__(self) -> None:
        self._aliases: dict[str, str] = {}

    def translate(self, recorded: Mapping[str, Any], replayed: dict[str, Any]) -> dict[str, Any]:
        if (
            replayed.get("type") == "plan_accepted"
            and recorded.get("type") == "plan_accepted"
            and isinstance(recorded.get("plan_hash"), str)
            and isinstance(replayed.get("plan_hash"), str)
            and recorded.get("plan") == replayed.get("plan")
            and REDACTED in canonical_json(recorded.get("plan"))
        ):
            self._aliases[replayed["plan_hash"]] = recorded["plan_hash"]
        if not self._aliases:
            return replayed
        return {
            k: self._aliases.get(v, v) if isinstance(v, str) and k != "hash" else v
            for k, v in replayed.items()
        }


class CheckingAuditLog(AuditLog):
    """An in-memory audit log that checks each record against the recorded one.

    With `forward`, records past the end of the recording are appended there instead (resume),
    after one `run_resumed` annotation.
    """

    def __init__(
        self,
        expected: Iterable[tuple[int, Mapping[str, Any]]],
        *,
        run_id: str,
        forward: AuditLog | None = None,
    ) -> None:
        super().__init__(None, run_id=run_id, keep=True)
        self._expected = deque((line, rec) for line, rec in expected if rec.get("type") not in _ANNOTATIONS)
        self._forward = forward
        self._redacted_hashes = _RedactedPlanHashes()
        self.checked = 0
        self.resumed_at: int | None = None

    def append(self, type: str, /, **fields: Any) -> dict[str, Any]:
        record = super().append(type, **fields)
        if self._expected:
            line, recorded = self._expected.popleft()
            _compare(line, recorded, self._redacted_hashes.translate(recorded, record))
            self.checked += 1
            return record
        if self._forward is None:
            raise _LogEnded(f"the recorded run ends after {self.checked} record(s) without run_finished")
        if self.resumed_at is None:
            self.resumed_at = self.checked
            self._forward.append("run_resumed", after_records=self.checked)
        return self._forward.append(type, **fields)

    def sync(self) -> None:
        if self._forward is not None:
            self._forward.sync()

    @property
    def pending(self) -> int:
        """Recorded records not yet matched."""
        return len(self._expected)


@dataclass
class OutputDiff:
    """A `--live` re-run whose output differs from the recorded one."""

    step_id: str
    tool: str
    recorded: Any
    live: Any

    def to_dict(self) -> dict[str, Any]:
        return {"step_id": self.step_id, "tool": self.tool, "recorded": self.recorded, "live": self.live}


class RecordedInvoker:
    """Serves recorded tool outputs (and errors) by step id.

    - `live`: with `live_reads`, re-run `read` tools for real (and `write` tools too with
      `allow_writes`) and collect the outputs that differ; the recorded output is still
      what the engine gets, so the rest of the run stays comparable.
    - `resume`: steps with no recorded end are run live, except an in-flight write of a
      non-idempotent tool, which ends the run `needs_review`.
    """

    def __init__(
        self,
        records: Iterable[Mapping[str, Any]],
        *,
        live: ToolInvoker | None = None,
        live_reads: bool = False,
        allow_writes: bool = False,
        resume: bool = False,
    ) -> None:
        records = list(records)
        # Queues, not maps: a replan may reuse the id of a step that failed, so one id can have
        # several recorded calls; the engine makes them in the same order.
        self._finished: dict[str, deque[Mapping[str, Any]]] = {}
        self._started: dict[str, int] = {}
        for record in records:
            if record.get("type") == "step_finished":
                self._finished.setdefault(record["step_id"], deque()).append(record)
            elif record.get("type") == "step_started":
                self._started[record["step_id"]] = self._started.get(record["step_id"], 0) + 1
        self._calls: dict[str, int] = {}
        self._live = live
        self._live_reads = live_reads
        self._allow_writes = allow_writes
        self._resume = resume
        self.diffs: list[OutputDiff] = []
        self.live_calls: list[str] = []

    def __call__(self, spec: ToolSpec, args: dict[str, Any], step: PlanStep) -> Any:
        self._calls[step.id] = self._calls.get(step.id, 0) + 1
        queue = self._finished.get(step.id)
        if not queue:
            return self._unrecorded(spec, args, step)
        recorded = queue.popleft()
        if self._live is not None and self._live_reads and (spec.effect == "read" or self._allow_writes):
            self._diff(spec, args, step, recorded)
        if recorded.get("status") == "ok":
            return recorded.get("output")
        error = recorded.get("error") or {}
        raise ToolError.from_dict(error)

    def _diff(
        self, spec: ToolSpec, args: dict[str, Any], step: PlanStep, recorded: Mapping[str, Any]
    ) -> None:
        assert self._live is not None
        self.live_calls.append(step.id)
        try:
            live: Any = self._live(spec, args, step)
            spec.validate_output(live)
            live_view: Any = {"status": "ok", "output": live}
        except ToolError as exc:
            live_view = {"status": "failed", "error": exc.to_dict()}
        recorded_view: Any = (
            {"status": "ok", "output": recorded.get("output")}
            if recorded.get("status") == "ok"
            else {"status": "failed", "error": recorded.get("error")}
        )
        if live_view != recorded_view:
            self.diffs.append(OutputDiff(step.id, spec.name, recorded_view, live_view))

    def _unrecorded(self, spec: ToolSpec, args: dict[str, Any], step: PlanStep) -> Any:
        # Resume's decision for an interrupted non-idempotent write; replay of a resumed log
        # must reach the same one.
        in_flight = self._started.get(step.id, 0) >= self._calls[step.id]
        if in_flight and spec.effect == "write" and not spec.idempotent:
            raise FailedClosed(
                ReasonCode.NEEDS_REVIEW,
                f"step {step.id!r} ({spec.name}) was started before the interruption and may or may not have "
                f"taken effect; {spec.name} is not idempotent, so it is not re-run. Check its effect, then "
                "finish the work with a new plan.",
                f"$.steps[?(@.id=={step.id!r})]",
            )
        if not self._resume or self._live is None:
            raise _LogEnded(f"no recorded output for step {step.id!r}")
        self.live_calls.append(step.id)
        return self._live(spec, args, step)


class _ResumingLLM:
    """Recorded LLM answers first, then a live client (resume)."""

    def __init__(self, recorded: ReplayClient, live: LLMClient | None) -> None:
        self._recorded = recorded
        self._live = live
        self.model = live.model if live is not None else recorded.model

    def complete(
        self,
        messages: Sequence[Mapping[str, str]],
        *,
        schema: Mapping[str, Any] | None = None,
        schema_name: str = "pte_plan",
    ) -> LLMResponse:
        if self._recorded.remaining:
            return self._recorded.complete(messages, schema=schema, schema_name=schema_name)
        if self._live is None:
            raise LLMError(
                "the run needs another LLM call to go on; give a model/endpoint (or --replay-responses)"
            )
        return self._live.complete(messages, schema=schema, schema_name=schema_name)


def _recorded_registry(run_started: Mapping[str, Any]) -> Registry:
    return Registry(ToolSpec.from_record(entry) for entry in run_started.get("tools", ()))


def _recorded_approvals(
    records: Sequence[Mapping[str, Any]], registry: Registry
) -> Callable[[Plan, AuditLog], None]:
    """Approvals as recorded: a plan approved in the run is approved again in its replay."""
    by_hash = {r["plan_hash"]: r for r in records if r.get("type") == "approval"}
    rejected = {r["plan_hash"]: r for r in records if r.get("type") == "approval_rejected"}

    def hook(plan: Plan, audit: AuditLog) -> None:
        rejection = rejected.get(plan.hash)
        if rejection is not None:  # a paused run a person rejected (pte.runs)
            audit.append(
                "approval_rejected",
                plan_hash=plan.hash,
                by=rejection["by"],
                at=rejection["at"],
                note=rejection["note"],
            )
            raise ApprovalRejected(f"plan {plan.hash} was rejected by {rejection['by']} (recorded run)")
        approval = by_hash.get(plan.hash)
        if approval is not None:
            audit.append(
                "approval",
                plan_hash=plan.hash,
                by=approval["by"],
                at=approval["at"],
                signed=approval["signed"],
            )
            return
        needing = sorted(
            {s.tool for s in plan.steps if s.tool in registry and registry[s.tool].requires_approval}
        )
        if needing:
            raise ApprovalMissing(
                f"plan {plan.hash} was not approved (recorded run); {needing} require approval"
            )

    return hook


def _engine_for(
    run_records: Sequence[Mapping[str, Any]],
    registry: Registry | None,
    llm: LLMClient,
    invoker: ToolInvoker,
    checks_factory: Callable[[Registry, Mapping[str, Any]], Sequence[Any]] | None,
    *,
    approval: Callable[[Plan, AuditLog], None] | None = None,
) -> Engine:
    started = expand_run_started(run_records[0], stored_contents(run_records))
    registry = registry if registry is not None else _recorded_registry(started)
    config = EngineConfig.from_dict(started.get("config") or {})
    # Resuming a paused run takes the deployment's gate (pte.runs); replay the recorded one.
    approvals = approval if approval is not None else _recorded_approvals(run_records, registry)
    recorded = started.get("config") or {}
    checks = checks_factory(registry, recorded) if checks_factory else ()
    policy = None
    if recorded.get("policy") is not None:
        # The policy in force when the run was made, not whatever the files say today.
        policy = Policy.from_registry(registry).with_document(
            recorded["policy"], source="<recorded policy>", ignore_unknown=True
        )
    return Engine(
        registry, llm, config=config, invoker=invoker, checks=checks, policy=policy, approval=approvals
    )


def _drive(engine: Engine, started: Mapping[str, Any], audit: AuditLog) -> RunResult:
    mode = started.get("mode")
    config = started.get("config") or {}
    if mode == "execute":
        return engine.execute(str(config.get("plan_text", "")), audit)
    if mode == "plan":
        return engine.plan(str(started.get("request") or ""), audit)
    return engine.run(str(started.get("request") or ""), audit)


@dataclass
class RunReplay:
    """The outcome of replaying one run."""

    run_id: str
    records: int
    #: "same" (identical decisions to the end), "same_incomplete" (consistent up to where the
    #: recorded run stops, e.g. a crash), or "diverged".
    outcome: str
    status: str | None = None
    reason: str | None = None
    divergence: ReplayDivergence | None = None
    diffs: list[OutputDiff] = field(default_factory=list)
    note: str | None = None

    @property
    def ok(self) -> bool:
        return self.outcome != "diverged" and not self.diffs

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "records": self.records,
            "outcome": self.outcome,
            "status": self.status,
            "reason": self.reason,
            "divergence": self.divergence.to_dict() if self.divergence else None,
            "output_diffs": [d.to_dict() for d in self.diffs],
            "note": self.note,
        }


def replay_run(
    run_records: Sequence[tuple[int, Mapping[str, Any]]],
    *,
    registry: Registry | None = None,
    live: bool = False,
    allow_writes: bool = False,
    checks_factory: Callable[[Registry, Mapping[str, Any]], Sequence[Any]] | None = None,
) -> RunReplay:
    """Replay one run (its records with their line numbers) through the engine."""
    records = [r for _, r in run_records]
    started = records[0]
    run_id = str(started["run_id"])
    if started.get("type") != "run_started":
        return RunReplay(run_id, len(records), "diverged", note="the run does not begin with run_started")
    invoker = RecordedInvoker(
        records, live=LiveInvoker() if live else None, live_reads=live, allow_writes=allow_writes
    )
    engine = _engine_for(records, registry, ReplayClient.from_audit(records), invoker, checks_factory)
    audit = CheckingAuditLog(run_records, run_id=run_id)
    try:
        result = _drive(engine, started, audit)
    except ReplayDivergence as divergence:
        return RunReplay(run_id, len(records), "diverged", divergence=divergence, diffs=invoker.diffs)
    except _LogEnded as ended:
        sealed = any(r.get("type") == "run_finished" for r in records)
        outcome = "diverged" if sealed else "same_incomplete"
        return RunReplay(run_id, len(records), outcome, diffs=invoker.diffs, note=str(ended))
    if audit.pending:
        line, recorded = audit._expected[0]
        missing = ReplayDivergence(
            line, str(recorded.get("type")), "type", recorded.get("type"), "(run ended)"
        )
        return RunReplay(run_id, len(records), "diverged", divergence=missing, diffs=invoker.diffs)
    return RunReplay(
        run_id,
        len(records),
        "same",
        status=result.status,
        reason=result.reason.value if result.reason else None,
        diffs=invoker.diffs,
    )


@dataclass
class ReplayReport:
    """Replays of every run in a log."""

    path: str
    runs: list[RunReplay]

    @property
    def ok(self) -> bool:
        return bool(self.runs) and all(r.ok for r in self.runs)

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": "ok" if self.ok else "diverged",
            "log": self.path,
            "runs": [r.to_dict() for r in self.runs],
        }

    def render(self) -> str:
        lines = []
        for run in self.runs:
            if run.outcome == "same":
                lines.append(
                    f"run {run.run_id}: same decisions ({run.records} records) -> {run.status}"
                    + (f"({run.reason})" if run.reason else "")
                )
            elif run.outcome == "same_incomplete":
                lines.append(f"run {run.run_id}: same decisions as far as the log goes ({run.note})")
            else:
                lines.append(f"run {run.run_id}: DIVERGED")
                if run.divergence is not None:
                    d = run.divergence
                    lines.append(f"  at line {d.line}: {d.record_type}.{d.field}")
                    lines.append(f"    recorded: {d.recorded!r}")
                    lines.append(f"    replayed: {d.replayed!r}")
                elif run.note:
                    lines.append(f"  {run.note}")
            for diff in run.diffs:
                lines.append(f"  live output differs for step {diff.step_id} ({diff.tool}):")
                lines.append(f"    recorded: {diff.recorded!r}")
                lines.append(f"    live:     {diff.live!r}")
        return "\n".join(lines) if lines else f"{self.path}: no runs"


def _numbered(path: str | Path) -> list[tuple[int, dict[str, Any]]]:
    records = read_records(path, skip_partial_tail=True)
    # Format 2 stores the catalogue and policy once per log: give each run_started its own.
    contents = stored_contents(records)
    return [
        (i + 1, expand_run_started(r, contents) if r.get("type") == "run_started" else r)
        for i, r in enumerate(records)
    ]


def _runs(numbered: Sequence[tuple[int, dict[str, Any]]]) -> list[list[tuple[int, dict[str, Any]]]]:
    grouped: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    for line, record in numbered:
        grouped.setdefault(str(record.get("run_id")), []).append((line, record))
    return list(grouped.values())


def replay_file(
    path: str | Path,
    *,
    registry: Registry | None = None,
    live: bool = False,
    allow_writes: bool = False,
    checks_factory: Callable[[Registry, Mapping[str, Any]], Sequence[Any]] | None = None,
) -> ReplayReport:
    """Replay every run in an audit log. Without `registry`, the recorded tool schemas are used."""
    runs = [
        replay_run(
            run, registry=registry, live=live, allow_writes=allow_writes, checks_factory=checks_factory
        )
        for run in _runs(_numbered(path))
    ]
    return ReplayReport(str(path), runs)


def resume_file(
    path: str | Path,
    registry: Registry,
    *,
    llm: LLMClient | None = None,
    checks_factory: Callable[[Registry, Mapping[str, Any]], Sequence[Any]] | None = None,
) -> RunResult:
    """Finish the last run of a log that has no `run_finished`, appending to the same log.

    Completed steps are not re-run (their recorded outputs are used); an in-flight `write`
    step of a non-idempotent tool ends the run `failed_closed(needs_review)` (see the module
    docs). Raises `FailedClosed` when the log holds no run or its last run is already sealed.
    """
    runs = _runs(_numbered(path))
    if not runs:
        raise FailedClosed(ReasonCode.NEEDS_REVIEW, f"{path} holds no run to resume")
    run = runs[-1]
    records = [r for _, r in run]
    if any(r.get("type") == "run_finished" for r in records):
        raise FailedClosed(
            ReasonCode.NEEDS_REVIEW, f"the last run in {path} is already finished; nothing to resume"
        )
    run_id = str(records[0]["run_id"])
    invoker = RecordedInvoker(records, live=LiveInvoker(), resume=True)
    engine = _engine_for(
        records, registry, _ResumingLLM(ReplayClient.from_audit(records), llm), invoker, checks_factory
    )
    with AuditLog(path, run_id=run_id, repair_partial_tail=True) as forward:
        audit = CheckingAuditLog(run, run_id=run_id, forward=forward)
        return _drive(engine, records[0], audit)
