"""Replay and resume: the live engine, re-driven from an audit log (Temporal's replayer, in spirit).

Replay is not a second implementation. It runs the same `Engine` with

- a `ReplayClient` serving the recorded LLM answers,
- a `RecordedInvoker` serving the recorded tool outputs,
- a `CheckingAuditLog` that, instead of writing, compares every record the engine
  produces with the next recorded one and stops at the first divergence,

so the engine must reach the same records from the same inputs. *Every* field of every
record is compared (plans and their hashes, approvals, config, catalogue, policy, LLM
requests and answers, arguments, outputs, errors, ends), except the clocks (``ts``,
``duration_ms``) and the chain fields (``seq``, ``prev``, ``hash``), which `verify` checks.

A log never grants authority. Before anything is re-driven, the whole log is verified
(chain, canonical bytes, schema, structure): a log that is not intact is refused. The tool
catalogue and the policy are the *deployment's* when given (always for resume and
``--live``): a recorded catalogue or policy that differs is a divergence, never a grant.
Recorded ``approval`` records are evidence: replay re-checks them (signature, catalogue
fingerprint, expiry) and never lets a plan run on their word; resume and
``replay --live --allow-writes`` take approvals from the approval store exactly as
``execute`` does (`pte._policy._gate.ApprovalGate`), consumption included.

Resume is replay that goes live where the log ends: the recorded prefix is re-driven and
checked, then new records are appended to the same log. A `write` step that was started but
never finished is re-run only if its tool is idempotent, or takes an idempotency key (then
with the same key, `pte._catalogue._idempotency`); otherwise the run ends `failed_closed(needs_review)`
naming the step.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pte._audit import (
    FAILED,
    FORMAT_2_ADDED,
    NOT_AVAILABLE,
    TRACE_FIELDS,
    AuditLog,
    Record,
    RecordSink,
    Verdict,
    current_config,
    iter_records,
    record_format,
    verdict,
)
from pte._catalogue import Registry, ToolSpec, expand_run_started, stored_contents
from pte._core import (
    REDACTED,
    AuditFormatError,
    FailedClosed,
    LogEnded,
    LogNotIntact,
    PTEError,
    ReasonCode,
    Redactor,
    ReplayDivergence,
    ToolError,
    canonical_json,
)
from pte._execution import CallOutcome, LiveInvoker, ToolInvoker
from pte._plan import PlanStep
from pte._replay._authority import (
    authority_of,
    engine_for,
    llm_for,
)
from pte._replay._prior_prompts import RecordedPrompts
from pte._run import Engine, RunResult, record_resumed

__all__ = [
    "DECISION_FIELDS",
    "IGNORED_FIELDS",
    "CheckingAuditLog",
    "RecordedInvoker",
    "ReplayReport",
    "ResumingInvoker",
    "RunReplay",
    "replay_file",
    "replay_run",
]

#: Fields replay does not compare: clocks, and the chain (checked by `verify` beforehand).
# Clocks, the chain's own fields, and OpenTelemetry ids (`pte._audit._records.TRACE_FIELDS`): a new
# trace every run, observability rather than decisions. "stored": content a log already
# holds is not stored again, so a replay may store what the recording referred to; "tools"
# fingerprints carry code hashes a replay without code cannot reproduce (the hashes in
# "catalogue" and "policy" are still compared).
IGNORED_FIELDS: frozenset[str] = frozenset(
    {"ts", "duration_ms", "seq", "prev", "hash", *TRACE_FIELDS, "stored", "tools"}
)
#: Per record type, the fields that carry the run's decisions, for comparing two *different*
#: runs of the same plan (e.g. with steps finishing in another order). Replay compares more:
#: every field except `IGNORED_FIELDS`.
DECISION_FIELDS: Mapping[str, tuple[str, ...]] = {
    "run_started": ("mode", "request"),
    "llm_call": ("role", "error"),
    "plan_accepted": ("origin", "plan_hash", "order"),
    "plan_rejected": ("origin", "reason", "message", "path"),
    "approval": ("plan_hash", "by"),
    "approval_rejected": ("plan_hash", "by", "note"),
    # pte._policy._endorsement
    "endorsement": ("step_id", "element", "value_hash", "by"),
    "endorsement_rejected": ("step_id", "element", "value_hash", "by", "note"),
    "step_started": ("step_id", "tool", "effect", "args"),
    "step_finished": ("step_id", "tool", "status", "output", "error"),
    "replan": ("attempt", "failed_step", "error", "completed"),
    "run_finished": ("status", "reason", "result", "answer", "steps_run", "llm_calls"),
    # pte._plan._control
    "condition": ("step_id", "kind", "outcome", "values", "error", "plan_hash"),
    "for_each": ("step_id", "tool", "items", "error", "plan_hash"),
    "stage": ("stage", "plan_hash", "values", "labels"),
    # pte._run._repair
    "repair": ("attempt", "origin", "reason", "message", "path"),
}
#: Annotations written by resume; the engine itself never produces them.
_ANNOTATIONS = frozenset({"run_resumed", "run_paused"})


def _compare(line: int, recorded: Mapping[str, Any], replayed: Mapping[str, Any]) -> None:
    if recorded.get("type") != replayed.get("type"):
        # A different record altogether: show both whole (a refusal's reason and message too).
        raise ReplayDivergence(line, str(recorded.get("type")), "type", _shown(recorded), _shown(replayed))
    names = dict.fromkeys([*recorded, *replayed])
    for name in names:
        if name in IGNORED_FIELDS:
            continue
        if name not in recorded or name not in replayed or not _same(recorded[name], replayed[name]):
            raise ReplayDivergence(
                line,
                str(recorded["type"]),
                name,
                recorded.get(name, "(absent)"),
                replayed.get(name, "(absent)"),
            )


def _in_format_of(recorded: Mapping[str, Any], replayed: dict[str, Any]) -> dict[str, Any]:
    """`replayed` as the recorded format writes it, so that a format 1 log still replays.

    Format 1 recorded the catalogue and policy inline and nothing of what produced the run;
    the live code writes format 2, so its ``run_started`` is expanded from its own stored
    contents and stripped of format 2's fields. Every other record is the same in both.
    """
    if replayed.get("type") != "run_started" or record_format(recorded) == 2:
        return replayed
    expanded = expand_run_started(replayed, stored_contents([replayed]))
    return {k: v for k, v in expanded.items() if k not in FORMAT_2_ADDED}


#: ``run_started.config``'s execution settings (#33, `pte._run._setup.started_config`).
_EXECUTION = ("max_concurrency", "serial_writes")


def _execution_as_recorded(
    recorded: Mapping[str, Any], replayed: dict[str, Any], *, resuming: bool
) -> dict[str, Any]:
    """`replayed` (a ``run_started``) with the run's execution settings as recorded, when it is
    a resume whose live part runs narrower than the run (`pte._replay._authority.run_execution`
    refuses wider): that is how the resume runs, not what the run was. Anything else compares."""
    config, shown = recorded.get("config"), replayed.get("config")
    if not resuming or not isinstance(config, Mapping) or not isinstance(shown, Mapping):
        return replayed
    ran, runs = current_config(config), current_config(shown)
    limit, resumed_limit = ran.get("max_concurrency"), runs.get("max_concurrency")
    serial, resumed_serial = ran.get("serial_writes"), runs.get("serial_writes")
    if not (isinstance(limit, int) and isinstance(resumed_limit, int)) or not (
        isinstance(serial, bool) and isinstance(resumed_serial, bool)
    ):
        return replayed  # a malformed setting: compared as it is (a divergence)
    if resumed_limit > limit or (serial and not resumed_serial):
        return replayed  # wider than the run: compared as it is (a divergence)
    out = {k: v for k, v in shown.items() if k not in _EXECUTION}
    out.update({k: v for k, v in config.items() if k in _EXECUTION})
    return {**replayed, "config": out}


def _shown(record: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k not in IGNORED_FIELDS and k != "run_id"}


def _same(a: Any, b: Any) -> bool:
    """JSON equality: ``1 == 1.0 == True`` in Python, but not in a log."""
    if type(a) is not type(b):
        return (
            isinstance(a, (int, float))
            and isinstance(b, (int, float))
            and not (isinstance(a, bool) or isinstance(b, bool))
            and a == b
            and canonical_json(a) == canonical_json(b)
        )
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


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


class CheckingAuditLog:
    """Replay's `RecordSink`: it checks each record against the recorded one instead of writing it.

    Each record is built as a log would write it (an in-memory `AuditLog` of the same run
    adds the common fields and redacts), then compared. With `forward`, records past the end
    of the recording are written there instead (resume), after one `run_resumed` annotation.
    """

    def __init__(
        self,
        expected: Iterable[tuple[int, Mapping[str, Any]]],
        *,
        run_id: str,
        forward: RecordSink | None = None,
    ) -> None:
        self._log = AuditLog(None, run_id=run_id, keep=True)
        self._expected = deque(
            (line, recorded) for line, recorded in expected if recorded.get("type") not in _ANNOTATIONS
        )
        self._forward = forward
        self._redacted_hashes = _RedactedPlanHashes()
        self.checked = 0
        self.resumed_at: int | None = None
        started = next(
            (recorded for _, recorded in self._expected if recorded.get("type") == "run_started"), None
        )
        self._origin_trace: dict[str, str] | None = (
            {k: str(started[k]) for k in TRACE_FIELDS}
            if forward is not None and started is not None and all(k in started for k in TRACE_FIELDS)
            else None
        )
        #: What of the run's model calls is compared (pte._replay._prior_prompts).
        self.prompts = RecordedPrompts()

    @property
    def run_id(self) -> str:
        return self._log.run_id

    @property
    def redactor(self) -> Redactor:
        return self._log.redactor

    @property
    def broken(self) -> bool:
        return self._log.broken

    @property
    def replaying(self) -> bool:
        """Whether the next record is re-read from the recording (not a fresh execution)."""
        return bool(self._expected)

    @property
    def continues_run(self) -> bool:
        """Resume: the run continues (an approval it consumed earlier is its own, step by step)."""
        return self._forward is not None

    @property
    def origin_trace(self) -> Mapping[str, str] | None:
        """Resume: the crashed run's span ids (its run_started record), for a span link."""
        return self._origin_trace

    @property
    def pending(self) -> int:
        """Recorded records not yet matched."""
        return len(self._expected)

    @property
    def next_expected(self) -> tuple[int, Mapping[str, Any]] | None:
        """The next recorded record not yet matched, with its line number (None at the end)."""
        return self._expected[0] if self._expected else None

    def write(self, record: Record) -> dict[str, Any]:
        built = self._log.write(record)
        if self._expected:
            line, recorded = self._expected.popleft()
            replayed = self._redacted_hashes.translate(recorded, built)
            if recorded.get("type") == "run_started":
                replayed = self.prompts.at_run_started(recorded, replayed)
                replayed = _execution_as_recorded(recorded, replayed, resuming=self._forward is not None)
            elif recorded.get("type") == "llm_call":
                replayed = self.prompts.at_llm_call(recorded, replayed)
            _compare(line, recorded, _in_format_of(recorded, replayed))
            self.checked += 1
            return built
        return self._past_the_recording().write(record)

    def write_records(self, records: Sequence[Record]) -> list[dict[str, Any]]:
        # Each recorded one is checked in turn; the rest (resume) go to the log together.
        checked = min(len(records), len(self._expected))
        written = [self.write(record) for record in records[:checked]]
        rest = records[checked:]
        if rest:
            self._log.write_records(rest)  # as `write` does: every record is built here first
            written += self._past_the_recording().write_records(rest)
        return written

    def _past_the_recording(self) -> RecordSink:
        """Where records past the end of the recording go: resume's log, after its
        ``run_resumed``; a replay's recording has no more (`LogEnded`)."""
        if self._forward is None:
            raise LogEnded(f"the recorded run ends after {self.checked} record(s) without run_finished")
        if self.resumed_at is None:
            self.resumed_at = self.checked
            record_resumed(self._forward, self.checked)
        return self._forward

    def sync(self) -> None:
        # Only once the recording is used up: a sync while recorded records are still being
        # checked would anchor the log's end, records this replay has not re-derived yet.
        if self._forward is not None and not self._expected:
            self._forward.sync()


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
        # A read with effects is never re-run (pte._run._exposure): replaying it would repeat them.
        rerun = not spec.read_effects and (spec.effect == "read" or self._allow_writes)
        if self._live is not None and self._live_reads and rerun:
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

    def goes_live(self, spec: ToolSpec, step: PlanStep) -> bool:
        """Whether the next call of `step` calls the tool for real (`pte._execution.GoesLive`): the
        executor then asks the run's call gate before it (an approval is consumed by a re-run
        write). A recorded call re-run for comparison, or (resume) an unrecorded one."""
        if self._live is None:
            return False
        if not self._finished.get(step.id):
            # Unrecorded: live on resume, unless `check_unrecorded` refuses it (before any gate).
            in_flight = self._started.get(step.id, 0) >= self._calls.get(step.id, 0) + 1
            unsafe = spec.effect == "write" and not spec.idempotent and spec.idempotency_key is None
            return self._resume and not (in_flight and (unsafe or spec.read_effects))
        rerun = not spec.read_effects and (spec.effect == "read" or self._allow_writes)
        return self._live_reads and rerun

    def recorded(self, step_id: str) -> bool:
        """Whether the next call of `step_id` has a recorded outcome (served, never called)."""
        return bool(self._finished.get(step_id))

    def _unrecorded(self, spec: ToolSpec, args: dict[str, Any], step: PlanStep) -> Any:
        self.check_unrecorded(spec, step)
        if not self._resume or self._live is None:
            raise LogEnded(f"no recorded output for step {step.id!r}")
        self.live_calls.append(step.id)
        return self._live(spec, args, step)

    def check_unrecorded(self, spec: ToolSpec, step: PlanStep) -> None:
        """`FailedClosed(needs_review)` for an unrecorded call that must not run again: a
        non-idempotent write (or a read with effects) started before the interruption."""
        # Resume's decision for an interrupted non-idempotent write; replay of a resumed log
        # must reach the same one.
        in_flight = self._started.get(step.id, 0) >= self._calls[step.id]
        # A tool with an idempotency key is re-called with the same key (pte._catalogue._idempotency).
        unsafe = spec.effect == "write" and not spec.idempotent and spec.idempotency_key is None
        if in_flight and (unsafe or spec.read_effects):  # a read with effects: as a write
            why = "has effects" if spec.read_effects else "is not idempotent"
            raise FailedClosed(
                ReasonCode.NEEDS_REVIEW,
                f"step {step.id!r} ({spec.name}) was started before the interruption and may or may not have "
                f"taken effect; {spec.name} {why}, so it is not re-run. Check its effect, then "
                "finish the work with a new plan.",
                f"$.steps[?(@.id=={step.id!r})]",
            )


class ResumingInvoker(LiveInvoker):
    """Resume's invoker: a step the log recorded is served from it (no gate, no call); every
    other step runs live, scheduled by the executor like any live run's, as many at a time as
    its `max_concurrency` and `serial_writes` allow.

    The records do not depend on the order calls end in (the executor's sequencer writes them
    in plan order), so a resumed run checks against its recorded prefix and replays alike.
    """

    def __init__(self, records: Iterable[Mapping[str, Any]], live: LiveInvoker) -> None:
        super().__init__()
        self._recorded = recorded = RecordedInvoker(records, live=live, resume=True)
        self._live_invoker = live
        self.live_calls = recorded.live_calls

    def served(self, spec: ToolSpec, args: dict[str, Any], step: PlanStep) -> CallOutcome | None:
        if self._recorded.recorded(step.id):
            try:
                return CallOutcome(output=self._recorded(spec, args, step))
            except ToolError as exc:
                return CallOutcome(error=exc)
        # Counted as a call of the step (an in-flight write is refused before the call gate is asked).
        self._recorded._calls[step.id] = self._recorded._calls.get(step.id, 0) + 1
        self._recorded.check_unrecorded(spec, step)
        self.live_calls.append(step.id)
        return None

    def start(
        self, spec: ToolSpec, args: dict[str, Any], step: PlanStep, done: Callable[[CallOutcome], None]
    ) -> Any:
        return self._live_invoker.start(spec, args, step, done)


def drive_run(engine: Engine, started: Mapping[str, Any], audit: RecordSink) -> RunResult:
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
    deployment: Any = None,
    stored: Mapping[str, Any] | None = None,
) -> RunReplay:
    """Replay one run (its records with their line numbers) through the engine.

    The run must come from a log `verify` found intact (`replay_file` checks that first).
    `stored`: the contents (catalogues, policies) stored earlier in the same log, by hash; a
    format 2 log stores each once, so a later run's ``run_started`` only refers to them.
    `deployment`: the `pte.Deployment` the replay acts under (None: the run's recorded
    authority, which runs nothing); `registry`: its catalogue, where it names none.
    """
    parts = authority_of(deployment)
    if parts.get("registry") is not None:
        registry = None  # the deployment's catalogue: `registry` is for where it names none
    elif registry is not None:
        parts["registry"] = registry
    records = [r for _, r in run_records]
    started = records[0]
    run_id = str(started["run_id"])
    if started.get("type") != "run_started":
        return RunReplay(run_id, len(records), "diverged", note="the run does not begin with run_started")
    if allow_writes and parts.get("approvals") is None and any(r.get("type") == "approval" for r in records):
        return RunReplay(
            run_id,
            len(records),
            "diverged",
            note="re-running writes of an approved plan needs the deployment's approval store",
        )
    gate = parts.get("approvals") if (live and allow_writes) else None
    live_invoker: ToolInvoker | None = None
    if live:
        live_invoker = LiveInvoker()  # the gate is asked by the executor (RecordedInvoker.goes_live)
    invoker = RecordedInvoker(records, live=live_invoker, live_reads=live, allow_writes=allow_writes)
    try:
        llm = llm_for(records, None, parts, stored=stored)
        engine = engine_for(
            records, deployment, llm, invoker, checks_factory, registry=registry, gate=gate, stored=stored
        )
    except (PTEError, ValueError, TypeError, KeyError) as exc:
        return RunReplay(run_id, len(records), "diverged", note=f"cannot rebuild the run's engine: {exc}")
    audit = CheckingAuditLog(run_records, run_id=run_id)
    try:
        result = drive_run(engine, started, audit)
    except ReplayDivergence as divergence:
        return RunReplay(
            run_id, len(records), "diverged", divergence=_detached(divergence), diffs=invoker.diffs
        )
    except LogEnded as ended:
        sealed = any(r.get("type") == "run_finished" for r in records)
        outcome = "diverged" if sealed else "same_incomplete"
        return RunReplay(run_id, len(records), outcome, diffs=invoker.diffs, note=str(ended))
    unmatched = audit.next_expected
    if unmatched is not None:
        line, recorded = unmatched
        missing = ReplayDivergence(
            line, str(recorded.get("type")), "type", recorded.get("type"), "(run ended)"
        )
        return RunReplay(run_id, len(records), "diverged", divergence=missing, diffs=invoker.diffs)
    notes = [n for n in (audit.prompts.note(), _unchecked_keys_note(engine)) if n]
    return RunReplay(
        run_id,
        len(records),
        "same",
        status=result.status,
        reason=result.reason.value if result.reason else None,
        diffs=invoker.diffs,
        note="; ".join(notes) or None,
    )


def _unchecked_keys_note(engine: Engine) -> str | None:
    """What a replay without trusted keys could not check about signed approvals (or None)."""
    unchecked = getattr(engine.approval, "unchecked", None)
    if not unchecked:
        return None
    return (
        f"signed approval(s) by {', '.join(unchecked)} verified under the public key recorded in the "
        "log only, which shows they are unaltered, not who signed them; give --approval-keys "
        "(the deployment's approver keys) to check the signer"
    )


def _detached(divergence: ReplayDivergence) -> ReplayDivergence:
    """The same finding, never raised. A raised one keeps its traceback, whose frames hold the
    run's engine, invoker and records: kept in the report, it would keep every diverged run."""
    d = divergence
    return ReplayDivergence(d.line, d.record_type, d.field, d.recorded, d.replayed)


@dataclass
class ReplayReport:
    """Replays of every run in a log."""

    path: str
    runs: list[RunReplay]
    #: The log's verdict (`pte._audit.Verdict`): which checks were made before replaying it.
    verdict: Verdict | None = None

    @property
    def ok(self) -> bool:
        return bool(self.runs) and all(r.ok for r in self.runs)

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": "ok" if self.ok else "diverged",
            "log": self.path,
            "runs": [r.to_dict() for r in self.runs],
            "checks": self.verdict.to_dict()["checks"] if self.verdict is not None else None,
        }

    def render(self) -> str:
        lines = []
        for run in self.runs:
            if run.outcome == "same":
                lines.append(
                    f"run {run.run_id}: same decisions ({run.records} records) -> {run.status}"
                    + (f"({run.reason})" if run.reason else "")
                )
                if run.note:
                    lines.append(f"  note: {run.note}")
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
        if self.verdict is not None:
            lines.append(f"log checks: {self.verdict.summary()}")
            missing = self.verdict.check("anchors")
            if missing is not None and missing.state == NOT_AVAILABLE:
                lines.append(f"  anchors: {missing.detail}")
        return "\n".join(lines) if lines else f"{self.path}: no runs"


def _verified(path: str | Path, anchors: Any = None) -> Verdict:
    """Verify before act: the whole log, from its first record, and the deployment's `anchors`
    (the verdict `pte audit verify` gives), or `LogNotIntact`."""
    try:
        found = verdict(path, anchors=anchors)
    except OSError as exc:
        raise AuditFormatError(path, 0, f"cannot read: {exc}") from None
    report = found.report
    torn_tail = report.issue is not None and report.issue.message.startswith("partial last line")
    if not report.intact and not torn_tail:
        # A torn last line is what a crash leaves (every record before it verified);
        # anything else is damage or tampering.
        raise LogNotIntact(path, report)
    anchored = found.check("anchors")
    if anchored is not None and anchored.state == FAILED:
        raise LogNotIntact(path, found)
    return found


def iter_runs(path: str | Path) -> Iterator[list[tuple[int, dict[str, Any]]]]:
    """The runs of a verified log, one at a time (a verified log keeps each run contiguous)."""
    current: list[tuple[int, dict[str, Any]]] = []
    for line, record in iter_records(path, skip_partial_tail=True):
        if current and record.get("run_id") != current[0][1].get("run_id"):
            yield current
            current = []
        current.append((line, record))
    if current:
        yield current


def replay_file(
    path: str | Path,
    *,
    registry: Registry | None = None,
    live: bool = False,
    allow_writes: bool = False,
    checks_factory: Callable[[Registry, Mapping[str, Any]], Sequence[Any]] | None = None,
    deployment: Any = None,
) -> ReplayReport:
    """Replay every run in an audit log, one run at a time.

    The log is verified first; a log that is not intact raises `LogNotIntact`. Without a
    registry (here or in `deployment`, a `pte.Deployment`), the recorded tool schemas are used.
    """
    found = _verified(path, authority_of(deployment).get("anchors"))
    runs = []
    # Contents earlier runs stored (format 2 stores a catalogue once per log): an entry per
    # catalogue or policy, not per run. Each run is let go before the next is read.
    stored: dict[str, Any] = {}
    for run in iter_runs(path):
        stored.update(stored_contents(record for _, record in run))
        runs.append(
            replay_run(
                run,
                registry=registry,
                live=live,
                allow_writes=allow_writes,
                checks_factory=checks_factory,
                deployment=deployment,
                stored=stored,
            )
        )
    return ReplayReport(str(path), runs, found)
