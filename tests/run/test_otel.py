"""OpenTelemetry: the span tree of a run (in-memory exporter) and the ids in the audit records."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

pytest.importorskip("opentelemetry.sdk", reason="OpenTelemetry is optional: 'plan-then-execute[otel]'")

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from pte import AuditLog, Engine, EngineConfig, ReasonCode, Registry, tool, verify
from pte.audit import read_records
from pte.engine import LLMResponse
from pte.runs import replay_file
from pte.testing import FunctionCall, FunctionClient


class Value(BaseModel):
    value: int


@tool
def add_one(value: int) -> Value:
    """value + 1."""
    return Value(value=value + 1)


@tool
def explode(value: int) -> Value:
    """Always fails."""
    raise RuntimeError("boom")


REGISTRY = Registry([add_one, explode])
PLAN: dict[str, Any] = {
    "pte_plan": "1",
    "steps": [
        {"id": "a", "tool": "add_one", "args": {"value": 1}},
        {"id": "b", "tool": "add_one", "args": {"value": {"$ref": "a/value"}}},
    ],
    "result": {"$ref": "b/value"},
}


def _planner(messages: list[dict[str, str]], call: FunctionCall) -> LLMResponse:
    text = json.dumps(PLAN) if call.wants_json else "It is 3."
    usage = {"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150}
    return LLMResponse(text, "planner-model-1", "stop", usage, "json_schema" if call.wants_json else "text")


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> TracerProvider:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


def _hex(value: int, width: int) -> str:
    return f"{value:0{width}x}"


def _by_name(spans: tuple[ReadableSpan, ...]) -> dict[str, list[ReadableSpan]]:
    out: dict[str, list[ReadableSpan]] = {}
    for span in spans:
        out.setdefault(span.name, []).append(span)
    return out


def test_span_tree_and_ids_in_the_audit_records(
    tmp_path: Path, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    log = tmp_path / "run.jsonl"
    outer = provider.get_tracer("app").start_as_current_span("handle-request")
    with outer as request_span, AuditLog(log) as audit:
        result = Engine(REGISTRY, FunctionClient(_planner), tracer_provider=provider).run("add", audit)
    assert result.ok, result.message
    spans = exporter.get_finished_spans()
    named = _by_name(spans)
    (run,) = named["pte.run"]
    # The run is a child of the application's current span; LLM calls and steps are children of the run.
    assert run.parent is not None and run.parent.span_id == request_span.get_span_context().span_id
    assert run.attributes is not None and run.attributes["pte.run_id"] == audit.run_id
    assert run.attributes["pte.status"] == "succeeded"
    llm = named["chat function"]
    steps = named["execute_tool add_one"]
    assert len(llm) == 2 and len(steps) == 2
    for child in [*llm, *steps]:
        assert child.parent is not None and child.parent.span_id == run.context.span_id
        assert child.context.trace_id == run.context.trace_id
    planner = llm[0].attributes or {}
    assert planner["gen_ai.operation.name"] == "chat"
    assert planner["gen_ai.request.model"] == "function"
    assert planner["gen_ai.response.model"] == "planner-model-1"
    assert planner["gen_ai.usage.input_tokens"] == 120
    assert planner["gen_ai.usage.output_tokens"] == 30
    assert planner["pte.llm.role"] == "planner"
    assert {(s.attributes or {})["pte.step.id"] for s in steps} == {"a", "b"}
    for span in steps:
        attributes = span.attributes or {}
        assert attributes["gen_ai.tool.name"] == "add_one"
        assert attributes["pte.tool.effect"] == "read"
        assert attributes["pte.step.status"] == "ok"
        assert isinstance(attributes["pte.step.duration_ms"], float)

    # The records point at the spans, and the spans at the records.
    trace_id = _hex(run.context.trace_id, 32)
    records = list(read_records(log))
    by_type: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        by_type.setdefault(record["type"], []).append(record)
    assert by_type["run_started"][0]["trace_id"] == trace_id
    assert by_type["run_started"][0]["span_id"] == _hex(run.context.span_id, 16)
    assert [r["span_id"] for r in by_type["llm_call"]] == [_hex(s.context.span_id, 16) for s in llm]
    step_span = {(s.attributes or {})["pte.step.id"]: _hex(s.context.span_id, 16) for s in steps}
    for kind in ("step_started", "step_finished"):
        for record in by_type[kind]:
            assert record["trace_id"] == trace_id
            assert record["span_id"] == step_span[record["step_id"]]
    # Still a valid, verifiable log that replays (trace ids are not decisions).
    assert verify(log).ok
    assert replay_file(log).ok


def test_failed_steps_and_llm_calls_are_error_spans(
    tmp_path: Path, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    plan = {"pte_plan": "1", "steps": [{"id": "x", "tool": "explode", "args": {"value": 1}}]}
    with AuditLog(tmp_path / "a.jsonl") as audit:
        engine = Engine(REGISTRY, tracer_provider=provider, config=EngineConfig(llm_answer=False))
        result = engine.execute(json.dumps(plan), audit)
    assert result.reason is ReasonCode.STEP_FAILED
    named = _by_name(exporter.get_finished_spans())
    (step,) = named["execute_tool explode"]
    assert step.status.status_code is StatusCode.ERROR
    assert (step.attributes or {})["pte.step.status"] == "failed"
    (run,) = named["pte.run"]
    assert run.status.status_code is StatusCode.ERROR
    assert (run.attributes or {})["pte.reason"] == "step_failed"

    exporter.clear()
    from pte.errors import LLMError

    def down(messages: list[dict[str, str]], call: FunctionCall) -> str:
        raise LLMError("endpoint down", attempts=3)

    with AuditLog(tmp_path / "b.jsonl") as audit:
        Engine(REGISTRY, FunctionClient(down), tracer_provider=provider).run("x", audit)
    (chat,) = _by_name(exporter.get_finished_spans())["chat function"]
    assert chat.status.status_code is StatusCode.ERROR
    assert (chat.attributes or {})["pte.llm.attempts"] == 3


def test_no_provider_means_no_ids_in_the_records(tmp_path: Path) -> None:
    # The global provider is the API's non-recording default here: nothing is added.
    assert not trace.get_tracer("x").start_span("probe").is_recording()
    with AuditLog(tmp_path / "a.jsonl") as audit:
        assert Engine(REGISTRY, config=EngineConfig(llm_answer=False)).execute(json.dumps(PLAN), audit).ok
    assert not any("trace_id" in r or "span_id" in r for r in read_records(tmp_path / "a.jsonl"))


def test_without_opentelemetry_installed_runs_are_untraced(tmp_path: Path) -> None:
    log = str(tmp_path / "a.jsonl")
    script = f"""
import sys, json
sys.modules["opentelemetry"] = None  # as if the optional extra were not installed
from pte import Registry, tool
from pte._audit._writer import AuditLog
from pte._audit._verify import read_records
from pte._run._engine import Engine, EngineConfig
import pte._run._otel
assert pte._run._otel._trace is None

@tool
def add_one(value: int) -> int:
    return value + 1

plan = {{"pte_plan": "1", "steps": [{{"id": "a", "tool": "add_one", "args": {{"value": 1}}}}]}}
with AuditLog({log!r}) as audit:
    engine = Engine(Registry([add_one]), config=EngineConfig(llm_answer=False))
    result = engine.execute(json.dumps(plan), audit)
assert result.ok, result.message
assert not any("trace_id" in r for r in read_records({log!r}))
print("untraced")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "untraced"


@tool
def slow_read(value: int) -> int:
    """Sleeps 60 ms."""
    import time

    time.sleep(0.06)
    return value


@tool(effect="write", idempotent=True)
def slow_write(value: int) -> int:
    """Sleeps 60 ms (a write: recorded before it runs)."""
    import time

    time.sleep(0.06)
    return value


def test_step_spans_last_as_long_as_the_steps(
    tmp_path: Path, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    plan = {
        "pte_plan": "1",
        "steps": [
            {"id": "r", "tool": "slow_read", "args": {"value": 1}},
            {"id": "w", "tool": "slow_write", "args": {"value": {"$ref": "r"}}},
        ],
    }
    with AuditLog(tmp_path / "a.jsonl") as audit:
        engine = Engine(
            Registry([slow_read, slow_write]), tracer_provider=provider, config=EngineConfig(llm_answer=False)
        )
        assert engine.execute(json.dumps(plan), audit).ok
    named = _by_name(exporter.get_finished_spans())
    for name in ("execute_tool slow_read", "execute_tool slow_write"):
        (span,) = named[name]
        assert span.start_time is not None and span.end_time is not None
        length_ms = (span.end_time - span.start_time) / 1e6
        recorded = (span.attributes or {})["pte.step.duration_ms"]
        assert isinstance(recorded, float) and recorded >= 55
        assert length_ms >= 55, (name, length_ms, recorded)


def test_an_llm_errors_secret_is_redacted_in_the_span_as_in_the_log(
    tmp_path: Path, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    # A provider's error often echoes the credential it refused. The log redacted it; the
    # span status used to carry the raw text to the collector.
    from pte.errors import LLMError
    from tests.secrets_corpus import FREE_TEXT

    texts = [
        (text, secret) for provider_name, text, secret in FREE_TEXT if provider_name in {"openai", "github"}
    ]
    for index, (text, secret) in enumerate(texts):
        exporter.clear()

        def down(messages: list[dict[str, str]], call: FunctionCall, text: str = text) -> str:
            raise LLMError(f"401 Unauthorized: {text}", attempts=1)

        log = tmp_path / f"{index}.jsonl"
        with AuditLog(log) as audit:
            Engine(REGISTRY, FunctionClient(down), tracer_provider=provider).run("x", audit)
        assert secret not in log.read_text()
        for span in exporter.get_finished_spans():
            assert secret not in (span.status.description or ""), span.name
            assert secret not in json.dumps(dict(span.attributes or {})), span.name
        (chat,) = _by_name(exporter.get_finished_spans())["chat function"]
        assert "[REDACTED]" in (chat.status.description or "")


def test_resume_links_to_the_crashed_runs_span_and_marks_re_read_steps(
    tmp_path: Path, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    from pte import Deployment
    from pte.runs import resume_file

    log = tmp_path / "crashed.jsonl"
    with AuditLog(log) as audit:
        engine = Engine(REGISTRY, tracer_provider=provider, config=EngineConfig(llm_answer=False))
        assert engine.execute(json.dumps(PLAN), audit).ok
    # The crash: the log ends after step b started (its end and the run's end never written).
    lines = log.read_text(encoding="utf-8").splitlines(keepends=True)
    types = [json.loads(line)["type"] for line in lines]
    cut = next(i for i, (t, line) in enumerate(zip(types, lines, strict=True))
               if t == "step_started" and json.loads(line)["step_id"] == "b") + 1  # fmt: skip
    log.write_text("".join(lines[:cut]), encoding="utf-8")
    (original,) = _by_name(exporter.get_finished_spans())["pte.run"]
    started = read_records(log)[0]
    assert started["trace_id"] == _hex(original.context.trace_id, 32)
    exporter.clear()

    result = resume_file(log, REGISTRY, deployment=Deployment.of(registry=REGISTRY, tracer_provider=provider))
    assert result.ok and result.result == 3
    named = _by_name(exporter.get_finished_spans())
    (resumed,) = named["pte.run"]
    assert (resumed.attributes or {})["pte.resumed"] is True
    (link,) = resumed.links
    assert (link.context.trace_id, link.context.span_id) == (
        original.context.trace_id,
        original.context.span_id,
    )
    steps = {(s.attributes or {})["pte.step.id"]: s for s in named["execute_tool add_one"]}
    # Step a was only re-read from the log; step b, in flight at the crash, ran again.
    assert (steps["a"].attributes or {})["pte.replayed"] is True
    assert (steps["b"].attributes or {})["pte.replayed"] is False
    assert verify(log.read_text(encoding="utf-8").encode().splitlines(keepends=True)).ok


@pytest.mark.parametrize(
    "origin",
    [{"trace_id": "zz", "span_id": "1"}, {"trace_id": "0" * 32, "span_id": "0" * 16}, {"span_id": "ab"}, {}],
)
def test_a_tampered_origin_in_the_log_makes_no_link(
    provider: TracerProvider, exporter: InMemorySpanExporter, origin: dict[str, str]
) -> None:
    # private: tracing, white-box
    from pte._run import RunTracer

    tracer = RunTracer("r", "execute", provider, link=origin)
    tracer.finish("succeeded", None)
    (span,) = exporter.get_finished_spans()
    assert not span.links and "pte.resumed" not in (span.attributes or {})


def test_the_cli_traces_to_the_global_provider_as_opentelemetry_instrument_sets_it(tmp_path: Path) -> None:
    """`opentelemetry-instrument pte …` configures the global tracer provider before `pte`
    runs; the CLI's engine uses it (docs/operator.md). Done here by hand, as its sitecustomize does."""
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({**PLAN, "steps": PLAN["steps"][:1], "result": {"$ref": "a/value"}}))
    pack = tmp_path / "pack.py"
    pack.write_text(
        "from pydantic import BaseModel\nimport pte\n\nclass Value(BaseModel):\n    value: int\n\n"
        "@pte.tool\ndef add_one(value: int) -> Value:\n    '''value + 1.'''\n"
        "    return Value(value=value + 1)\n"
    )
    code = f"""
import json
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
from pte._cli._main import main
log = {str(tmp_path / "run.jsonl")!r}
code = main(["--quiet", "execute", {str(plan)!r}, "--tools", {str(pack)!r}, "--audit", log])
print(json.dumps([code, sorted(s.name for s in exporter.get_finished_spans())]))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    exit_code, names = json.loads(done.stdout.splitlines()[-1])
    assert exit_code == 0 and names == ["execute_tool add_one", "pte.run"]
    assert len(read_records(tmp_path / "run.jsonl")[0]["trace_id"]) == 32
