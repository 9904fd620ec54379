"""OpenTelemetry spans for runs, LLM calls and steps; their ids go into the audit records.

With ``opentelemetry-api`` installed (``pip install 'plan-then-execute[otel]'``) and a tracer provider
configured by the application, each run gets a ``pte.run`` span (a child of whatever span
is current when the run starts), with one child span per LLM call and one per step:

- LLM calls follow the GenAI semantic conventions: span ``chat {model}``,
  ``gen_ai.operation.name``, ``gen_ai.request.model``, ``gen_ai.response.model``,
  ``gen_ai.usage.input_tokens`` / ``output_tokens``, ``gen_ai.response.finish_reasons``.
- Steps are ``execute_tool {tool}`` spans with ``gen_ai.tool.name``, ``pte.step.id``,
  ``pte.tool.effect``, ``pte.step.status`` and ``pte.step.duration_ms`` (and ``pte.step.path``,
  ``call/step``, for a step inlined from a procedure call). They start when the
  step's ``step_started`` record is written: before the call for a ``write`` step (write-ahead),
  after it for a ``read`` step (the executor writes records in plan order), whose span then
  lasts the recorded duration.

The ``run_started``, ``llm_call``, ``step_started`` and ``step_finished`` records of a traced
run carry ``trace_id`` and ``span_id`` (W3C hex), so a trace links to its audit records and
back. They are observability, not decisions: replay does not compare them
(`pte._audit._records.TRACE_FIELDS`).

Span attributes and status descriptions go through the run's `Redactor` (the audit log's),
so a secret in an LLM error's text or a tool name is scrubbed in the trace exactly as in the log.

Without opentelemetry, or with no provider configured (the API's non-recording default),
nothing is added to any record and every hook costs one attribute check.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pte._audit import Record, traced
from pte._core import __version__
from pte._plan import PATH_SEPARATOR, step_path

if TYPE_CHECKING:
    from pte._audit import RecordSink
    from pte._core import Redactor

__all__ = ["RunTracer", "TracedAudit"]

try:
    from opentelemetry import trace as _trace
    from opentelemetry.trace import Status, StatusCode
except ImportError:  # the optional extra is not installed: every hook is a no-op
    _trace = None  # type: ignore[assignment]


def _tracer(provider: Any) -> Any:
    if _trace is None:
        return None
    return _trace.get_tracer("pte", __version__, tracer_provider=provider)


def _links(origin: Mapping[str, str] | None) -> list[Any]:
    """A span link to the crashed run's ``pte.run`` span (resume), from its recorded ids."""
    if _trace is None or not origin:
        return []
    try:
        context = _trace.SpanContext(
            trace_id=int(origin["trace_id"], 16),
            span_id=int(origin["span_id"], 16),
            is_remote=True,
            trace_flags=_trace.TraceFlags(_trace.TraceFlags.SAMPLED),
        )
    except (KeyError, TypeError, ValueError):  # ids from a log: only hex ones make a link
        return []
    if not context.is_valid:
        return []
    return [_trace.Link(context, {"pte.link": "resumed_from"})]


def _ids(span: Any) -> dict[str, str]:
    if span is None or not span.is_recording():
        return {}
    context = span.get_span_context()
    return {"trace_id": f"{context.trace_id:032x}", "span_id": f"{context.span_id:016x}"}


class RunTracer:
    """The spans of one run. Every method is a no-op when tracing is off.

    `redactor` (the run's audit log's) scrubs every string attribute and status description
    before it is set: a span is exported as written, outside the log's redaction.
    """

    def __init__(
        self,
        run_id: str,
        mode: str,
        provider: Any = None,
        redactor: Redactor | None = None,
        *,
        link: Mapping[str, str] | None = None,
    ) -> None:
        tracer = _tracer(provider)
        self._tracer = tracer
        self._redactor = redactor
        self._run: Any = None
        self._steps: dict[str, Any] = {}
        self._replayed: set[str] = set()
        #: The run may call procedures (pte._plan._procedures): a nested step's span carries its path.
        self.procedures = False
        if tracer is None:
            return
        attributes: dict[str, Any] = {"pte.run_id": run_id, "pte.mode": mode}
        links = _links(link)
        if links:
            attributes["pte.resumed"] = True
        span = tracer.start_span("pte.run", attributes=self._attrs(attributes), links=links)
        if span.is_recording():
            self._run = span
            self._parent = _trace.set_span_in_context(span)

    @classmethod
    def disabled(cls) -> RunTracer:
        """A tracer that records nothing (before a run starts, or without OpenTelemetry)."""
        tracer = cls.__new__(cls)
        tracer._tracer, tracer._run, tracer._steps, tracer._redactor = None, None, {}, None
        tracer._replayed = set()
        return tracer

    def _text(self, text: str) -> str:
        """`text` as a span may carry it: through the run's redaction rules."""
        return text if self._redactor is None else self._redactor.redact_text(text)

    def _attrs(self, attributes: Mapping[str, Any]) -> dict[str, Any]:
        """Span attributes with every string (and string in a list) redacted."""
        out: dict[str, Any] = {}
        for key, value in attributes.items():
            if isinstance(value, str):
                value = self._text(value)
            elif isinstance(value, list | tuple):
                value = [self._text(v) if isinstance(v, str) else v for v in value]
            out[key] = value
        return out

    def _set(self, span: Any, key: str, value: Any) -> None:
        span.set_attributes(self._attrs({key: value}))

    def _status(self, span: Any, code: Any, description: str | None = None) -> None:
        span.set_status(Status(code, None if description is None else self._text(description)))

    @property
    def active(self) -> bool:
        return self._run is not None

    def run_ids(self) -> dict[str, str]:
        """Fields for the ``run_started`` record."""
        return _ids(self._run)

    def finish(self, status: str, reason: str | None) -> None:
        """End the run span (and any step span a failure left open)."""
        if self._run is None:
            return
        for span in self._steps.values():
            self._status(span, StatusCode.ERROR, "the run ended before the step finished")
            span.end()
        self._steps.clear()
        self._set(self._run, "pte.status", status)
        if reason:
            self._set(self._run, "pte.reason", reason)
            self._status(self._run, StatusCode.ERROR, reason)
        else:
            self._status(self._run, StatusCode.OK)
        self._run.end()
        self._run = None

    # -- LLM calls ------------------------------------------------------------------------------

    def llm_start(self, role: str, model: str) -> Any:
        """A span for one LLM call (end it with `llm_end`)."""
        if self._run is None:
            return None
        return self._tracer.start_span(
            f"chat {model}",
            context=self._parent,
            kind=_trace.SpanKind.CLIENT,
            attributes=self._attrs(
                {"gen_ai.operation.name": "chat", "gen_ai.request.model": model, "pte.llm.role": role}
            ),
        )

    def llm_end(
        self,
        span: Any,
        *,
        model: str | None = None,
        usage: Mapping[str, int] | None = None,
        finish_reason: str | None = None,
        attempts: int = 1,
        error: str | None = None,
    ) -> dict[str, str]:
        """End an LLM span; the fields for its ``llm_call`` record."""
        if span is None:
            return {}
        ids = _ids(span)
        if model:
            self._set(span, "gen_ai.response.model", model)
        if usage:
            span.set_attribute("gen_ai.usage.input_tokens", int(usage.get("prompt_tokens", 0)))
            span.set_attribute("gen_ai.usage.output_tokens", int(usage.get("completion_tokens", 0)))
        if finish_reason:
            self._set(span, "gen_ai.response.finish_reasons", [finish_reason])
        span.set_attribute("pte.llm.attempts", attempts)
        if error is not None:
            span.set_attribute("error.type", "llm_error")
            # Redacted whole, then cut: a cut first could split a secret past the rules' reach.
            self._status(span, StatusCode.ERROR, self._text(error)[:200])
        span.end()
        return ids

    # -- steps: hooked where their records are written ------------------------------------------

    def _nested(self, step_id: str) -> bool:
        return self.procedures and PATH_SEPARATOR in step_id

    def step_fields(
        self,
        record_type: str,
        fields: Mapping[str, Any],
        *,
        replayed: bool = False,
        ran_ms: float | None = None,
    ) -> dict[str, str]:
        """Start or end a step's span from its ``step_started`` / ``step_finished`` fields; its ids.

        `replayed`: the record is re-read from the log on resume, not a fresh execution; the
        span carries ``pte.replayed`` (true when the step's end was re-read too, false when the
        step ran on after the resume). `ran_ms`: a ``step_started`` written with its
        ``step_finished`` (a read's pair, after the call): the span starts that long ago.
        """
        if self._run is None:
            return {}
        step_id = str(fields.get("step_id"))
        if record_type == "step_started":
            tool = str(fields.get("tool"))
            span = self._tracer.start_span(
                f"execute_tool {tool}",
                context=self._parent,
                kind=_trace.SpanKind.INTERNAL,
                start_time=time.time_ns() - int(ran_ms * 1_000_000) if ran_ms is not None else None,
                attributes=self._attrs(
                    {
                        "gen_ai.operation.name": "execute_tool",
                        "gen_ai.tool.name": tool,
                        "pte.step.id": step_id,
                        "pte.tool.effect": str(fields.get("effect")),
                        **({"pte.replayed": True} if replayed else {}),
                        **({"pte.step.path": step_path(step_id)} if self._nested(step_id) else {}),
                    }
                ),
            )
            self._steps[step_id] = span
            if replayed:
                self._replayed.add(step_id)
            return _ids(span)
        if record_type == "step_finished":
            span = self._steps.pop(step_id, None)
            if span is None:
                return {}
            ids = _ids(span)
            status = str(fields.get("status"))
            self._set(span, "pte.step.status", status)
            if step_id in self._replayed:  # started from the log: did it also end there?
                self._replayed.discard(step_id)
                span.set_attribute("pte.replayed", replayed)
            duration = fields.get("duration_ms")
            if isinstance(duration, int | float):
                span.set_attribute("pte.step.duration_ms", float(duration))
            error = fields.get("error")
            if status != "ok":
                kind = error.get("kind") if isinstance(error, Mapping) else None
                self._set(span, "error.type", str(kind or "step_failed"))
                self._status(span, StatusCode.ERROR, str(kind or status))
            span.end(end_time=self._step_end(span, duration))
            return ids
        return {}

    @staticmethod
    def _step_end(span: Any, duration_ms: Any) -> int | None:
        """When a step span ends: its start plus the step's recorded duration, if that is earlier.

        The executor writes a read step's two records together once the step and every earlier
        one finished (its sequencer keeps the log in plan order), so such a span starts at record
        time; ending it after the recorded duration keeps the span's length the step's own.
        """
        start = getattr(span, "start_time", None)
        if not isinstance(start, int) or not isinstance(duration_ms, int | float):
            return None
        end = start + int(duration_ms * 1_000_000)
        return end if end < time.time_ns() else None


def _ran_ms(record: Record, following: Sequence[Record]) -> float | None:
    """How long ago `record`'s step started, when it is a ``step_started`` written with its
    ``step_finished`` (`following`): that record's duration. None otherwise."""
    if record.type != "step_started" or not following:
        return None
    finished = following[0]
    duration = finished.fields.get("duration_ms")
    if finished.type != "step_finished" or finished.fields.get("step_id") != record.fields.get("step_id"):
        return None
    return float(duration) if isinstance(duration, int | float) else None


class TracedAudit:
    """A run's `RecordSink` as the executor sees it while tracing: step records get their span's ids.

    A step's span starts when its ``step_started`` is written and ends with its
    ``step_finished`` (`RunTracer.step_fields`); every other record, and everything else a
    sink does, is the wrapped sink's.
    """

    def __init__(self, sink: RecordSink, tracer: RunTracer) -> None:
        self._sink = sink
        self._tracer = tracer

    @property
    def run_id(self) -> str:
        return self._sink.run_id

    @property
    def redactor(self) -> Redactor:
        return self._sink.redactor

    @property
    def broken(self) -> bool:
        return self._sink.broken

    @property
    def replaying(self) -> bool:
        return self._sink.replaying

    @property
    def continues_run(self) -> bool:
        return self._sink.continues_run

    @property
    def origin_trace(self) -> Mapping[str, str] | None:
        return self._sink.origin_trace

    def write(self, record: Record) -> dict[str, Any]:
        # Resume re-reads the log: a re-read step's span says so (`pte.replayed`).
        ids = self._tracer.step_fields(record.type, record.fields, replayed=self._sink.replaying)
        return self._sink.write(traced(record, ids))

    def write_records(self, records: Sequence[Record]) -> list[dict[str, Any]]:
        if self._sink.replaying:
            # Resume: the recording may end inside the batch; a span says which of its
            # records were re-read, so each is written as it is.
            return [self.write(record) for record in records]
        ids = [
            self._tracer.step_fields(r.type, r.fields, ran_ms=_ran_ms(r, records[k + 1 : k + 2]))
            for k, r in enumerate(records)
        ]
        return self._sink.write_records([traced(r, i) for r, i in zip(records, ids, strict=True)])

    def sync(self) -> None:
        self._sink.sync()
