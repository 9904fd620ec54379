"""Model clients: `OpenAIClient(http_client=...)`, `FunctionClient`, real attempt counts, library logging."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import structlog
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from pte import AuditLog, Engine, EngineConfig, OpenAIClient, ReasonCode, Registry, tool, verify
from pte.audit import read_records
from pte.engine import LLMClient, LLMResponse, ReplayClient, configure_logging
from pte.errors import LLMError
from pte.runs import replay_file
from pte.testing import FakeOpenAIServer, FunctionCall, FunctionClient, Reply

PLAN = {
    "pte_plan": "1",
    "steps": [{"id": "a", "tool": "add_one", "args": {"value": 41}}],
    "result": {"$ref": "a/value"},
}


class Value(BaseModel):
    value: int


@tool
def add_one(value: int) -> Value:
    """value + 1."""
    return Value(value=value + 1)


REGISTRY = Registry([add_one])


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "PTE_MODEL", "OPENAI_MODEL"):
        monkeypatch.delenv(name, raising=False)
    structlog.reset_defaults()
    yield
    structlog.reset_defaults()


def _chat(content: str) -> dict[str, Any]:
    return {
        "id": "c1",
        "object": "chat.completion",
        "created": 0,
        "model": "transport-model",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    }


# -- OpenAIClient(http_client=...) ------------------------------------------------------------


def test_openai_client_uses_the_callers_http_client() -> None:
    seen: list[httpx2.Request] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        return httpx2.Response(200, json=_chat(json.dumps(PLAN)))

    http = httpx2.Client(transport=httpx2.MockTransport(handler), headers={"x-corp-proxy": "yes"})
    client = OpenAIClient("m", base_url="http://llm.internal.test/v1", http_client=http)
    response = client.complete([{"role": "user", "content": "hi"}], schema={"type": "object"})
    assert response.text == json.dumps(PLAN)
    assert response.model == "transport-model"
    # A local server is asked once for its context (llama.cpp's /props), through the same client.
    assert [r.url.path for r in seen] == ["/props", "/v1/chat/completions"]
    assert all(r.headers["x-corp-proxy"] == "yes" for r in seen)  # the caller's client settings are in force
    client.close()
    assert not http.is_closed  # the caller's client is the caller's to close
    http.close()


def test_openai_client_over_a_real_loopback_server_with_an_http_client() -> None:
    with FakeOpenAIServer([json.dumps(PLAN)]) as server, httpx2.Client(timeout=5.0) as http:
        client = OpenAIClient("m", base_url=server.base_url, http_client=http)
        assert client.complete([{"role": "user", "content": "x"}]).text == json.dumps(PLAN)
        assert len(server.requests) == 1


# -- real attempt counts -----------------------------------------------------------------------


def test_a_failed_llm_call_records_its_real_attempt_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("pte._run._llm.time.sleep", lambda _s: None)  # no backoff waits in the test
    with FakeOpenAIServer([Reply("", status=503)] * 3) as server:
        client = OpenAIClient("m", base_url=server.base_url, max_retries=2, timeout_s=5.0)
        with AuditLog(tmp_path / "a.jsonl") as audit:
            result = Engine(REGISTRY, client).run("add one to 41", audit)
        assert len(server.requests) == 3
    assert result.reason is ReasonCode.LLM_ERROR
    (call,) = [r for r in read_records(tmp_path / "a.jsonl") if r["type"] == "llm_call"]
    assert call["attempts"] == 3
    assert "after 3 attempts" in call["error"]
    # Replay serves the recorded failure with the same attempt count.
    replayed = ReplayClient.from_audit([call])
    with pytest.raises(LLMError) as caught:
        replayed.complete([{"role": "user", "content": "x"}])
    assert caught.value.attempts == 3


# -- FunctionClient ----------------------------------------------------------------------------


def test_function_client_plans_from_the_prompt_and_phrases_the_answer(tmp_path: Path) -> None:
    def model(messages: list[dict[str, str]], call: FunctionCall) -> str:
        prompt = "\n".join(m["content"] for m in messages)
        if call.wants_json:
            assert "add_one" in prompt  # the catalogue was shown
            return json.dumps(PLAN)
        return "The answer is 42." if "42" in prompt else "no result shown"

    client = FunctionClient(model, model="fn-planner")
    assert isinstance(client, LLMClient)
    with AuditLog(tmp_path / "a.jsonl") as audit:
        result = Engine(REGISTRY, client).run("add one to 41", audit)
    assert result.ok, result.message
    assert result.result == 42
    assert result.answer == "The answer is 42."
    assert [c["schema"] is not None for c in client.calls] == [True, False]
    calls = [r for r in read_records(tmp_path / "a.jsonl") if r["type"] == "llm_call"]
    assert [c["model"] for c in calls] == ["fn-planner", "fn-planner"]


def test_function_client_errors() -> None:
    def failing(messages: list[dict[str, str]], call: FunctionCall) -> str:
        raise LLMError("the model is down", attempts=2)

    with pytest.raises(LLMError, match="down"):
        FunctionClient(failing).complete([{"role": "user", "content": "x"}])
    with pytest.raises(LLMError, match="empty answer"):
        FunctionClient(lambda m, c: "  ").complete([{"role": "user", "content": "x"}])
    with pytest.raises(TypeError, match="str or LLMResponse"):
        FunctionClient(lambda m, c: 42).complete([])  # type: ignore[arg-type,return-value]
    full = LLMResponse("t", "m", "length", {"total_tokens": 1}, "text")
    assert FunctionClient(lambda m, c: full).complete([]) is full


def test_function_client_failure_fails_the_run_closed(tmp_path: Path) -> None:
    def failing(messages: list[dict[str, str]], call: FunctionCall) -> str:
        raise LLMError("quota exhausted", attempts=4)

    with AuditLog(tmp_path / "a.jsonl") as audit:
        result = Engine(REGISTRY, FunctionClient(failing)).run("x", audit)
    assert result.reason is ReasonCode.LLM_ERROR
    (call,) = [r for r in read_records(tmp_path / "a.jsonl") if r["type"] == "llm_call"]
    assert call["attempts"] == 4


class _RaisingClient:
    """A custom model client (no FunctionClient, no SDK): fails on call `fail_at` with `error`."""

    model = "custom"

    def __init__(self, error: BaseException | None, fail_at: int, answer: Any = None) -> None:
        self.error, self.fail_at, self.answer, self.calls = error, fail_at, answer, 0

    def complete(self, messages: Any, *, schema: Any = None, schema_name: str = "pte_plan") -> Any:
        self.calls += 1
        if self.calls < self.fail_at:
            text = json.dumps(PLAN) if schema is not None else "done"
            return LLMResponse(text, "custom", "stop", {}, "json_schema" if schema is not None else "text")
        if self.error is not None:
            raise self.error
        return self.answer


@pytest.mark.parametrize(
    ("error", "answer", "message"),
    [
        (RuntimeError("connection pool\nexhausted"), None, "RuntimeError: connection pool exhausted"),
        (KeyError("choices"), None, "KeyError: 'choices'"),
        (ValueError(), None, "ValueError"),
        (None, "a bare string", "the model client returned str, not an LLMResponse"),
    ],
)
@pytest.mark.parametrize("fail_at", [1, 2], ids=["planner", "finalizer"])
def test_a_custom_client_that_raises_ends_the_run_sealed_as_llm_error(
    tmp_path: Path, error: BaseException | None, answer: Any, message: str, fail_at: int
) -> None:
    """#24: any exception from a model client (or a non-response) is a failed LLM call: the run
    ends failed_closed(llm_error), the log is sealed with the failure recorded, and it replays."""
    path = tmp_path / "a.jsonl"
    client = _RaisingClient(error, fail_at, answer)
    with AuditLog(path) as audit:
        result = Engine(REGISTRY, client, config=EngineConfig(llm_answer=True)).run("x", audit)
    assert (result.status, result.reason) == ("failed_closed", ReasonCode.LLM_ERROR)
    assert message in (result.message or "")
    assert verify(path).ok  # sealed with run_finished
    records = read_records(path)
    assert records[-1]["type"] == "run_finished" and records[-1]["reason"] == "llm_error"
    assert [r["error"] for r in records if r["type"] == "llm_call"][-1] == message
    assert replay_file(path).ok


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    kind=st.sampled_from([RuntimeError, ValueError, KeyError, TimeoutError, ConnectionError, AssertionError]),
    text=st.text(max_size=60),
)
def test_any_client_exception_seals_the_run_and_replays(
    tmp_path_factory: pytest.TempPathFactory, kind: type[Exception], text: str
) -> None:
    """Property (#24): whatever a client raises, and whatever its text, the run ends
    failed_closed(llm_error), the log verifies sealed, and it replays the same."""
    path = tmp_path_factory.mktemp("raising") / "a.jsonl"
    with AuditLog(path) as audit:
        result = Engine(REGISTRY, _RaisingClient(kind(text), 1)).run("x", audit)
    assert result.reason is ReasonCode.LLM_ERROR
    assert verify(path).ok
    assert replay_file(path).ok


# -- logging as a library ----------------------------------------------------------------------


def _run(tmp_path: Path) -> None:
    with AuditLog(tmp_path / "a.jsonl") as audit:
        result = Engine(REGISTRY, config=EngineConfig(llm_answer=False)).execute(json.dumps(PLAN), audit)
    assert result.ok


def test_capture_logs_sees_the_engines_events(tmp_path: Path) -> None:
    with structlog.testing.capture_logs() as logs:
        _run(tmp_path)
    events = [(e["event"], e.get("tool")) for e in logs]
    assert ("step_finished", "add_one") in events
    assert events[-1] == ("run_finished", None)
    assert all(e["run_id"] for e in logs)


def test_unconfigured_structlog_prints_nothing_and_stdlib_logging_gets_the_events(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    assert not structlog.is_configured()
    with caplog.at_level(logging.WARNING, logger="pte"):
        _run(tmp_path)
    out, err = capsys.readouterr()
    assert (out, err) == ("", "")  # a library prints nothing on its own
    # Only pte's own loggers: caplog hears the root logger, where another test's leftover event
    # loop in this worker process may warn (asyncio's "socket.send() raised exception").
    assert [r for r in caplog.records if r.name == "pte" or r.name.startswith("pte.")] == []
    with caplog.at_level(logging.INFO, logger="pte"):
        _run(tmp_path)
    assert any("step_finished" in r.getMessage() for r in caplog.records)
    assert not structlog.is_configured()  # PTE configured nothing


def test_the_cli_configuration_writes_json_lines_to_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    configure_logging(json_lines=True)
    _run(tmp_path)
    out, err = capsys.readouterr()
    assert out == ""
    lines = [json.loads(line) for line in err.splitlines()]
    assert {line["event"] for line in lines} >= {"step_finished", "run_finished"}
