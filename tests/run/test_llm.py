"""LLM clients through the real HTTP path: `OpenAIClient` (the openai SDK) against
`FakeOpenAIServer` on loopback, and `ReplayClient` from its three sources."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pte import OpenAIClient, ReasonCode
from pte.engine import LLMClient, LLMResponse, ReplayClient
from pte.errors import LLMError, ReplayDataError
from pte.testing._openai_server import FakeOpenAIServer, Reply

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"pte_plan": {"type": "string", "const": "1"}, "steps": {"type": "array"}},
    "required": ["pte_plan", "steps"],
    "additionalProperties": False,
}
PLAN_TEXT = '{"pte_plan": "1", "steps": []}'
MESSAGES = [
    {"role": "system", "content": "You compile requests into plans."},
    {"role": "user", "content": "List overdue invoices."},
]
SECRET = "sk-test-SECRET-0123456789abcdef"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # The developer's own endpoint settings must not leak into these tests.
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "PTE_MODEL", "OPENAI_MODEL", "OPENAI_CUSTOM_HEADERS"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as srv:
        yield srv


#: The clients `_client` made in the running test, closed after it (an open pool holds a socket).
_CLIENTS: list[OpenAIClient] = []


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    yield
    while _CLIENTS:
        _CLIENTS.pop().close()


def _client(server: FakeOpenAIServer, **kwargs: Any) -> OpenAIClient:
    kwargs.setdefault("timeout_s", 5.0)
    kwargs.setdefault("max_retries", 0)
    client = OpenAIClient("test-model", base_url=server.base_url, **kwargs)
    _CLIENTS.append(client)
    return client


# -- OpenAIClient over HTTP -------------------------------------------------------------------


def test_schema_call_asks_for_strict_structured_outputs(server: FakeOpenAIServer) -> None:
    server.add(Reply(PLAN_TEXT, usage={"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}))
    client = _client(server, api_key=SECRET, max_tokens=256, seed=7)

    response = client.complete(MESSAGES, schema=SCHEMA)

    assert isinstance(client, LLMClient)
    assert response.text == PLAN_TEXT
    assert response.finish_reason == "stop"
    assert response.usage == {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
    assert response.response_format == "json_schema"
    assert response.model == "fake-model"  # as the server reported it
    assert response.attempts == 1
    assert response.duration_ms > 0
    assert client.structured_outputs_supported is True

    [request] = server.requests
    assert request["model"] == "test-model"
    assert request["messages"] == MESSAGES
    assert request["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "pte_plan", "schema": SCHEMA, "strict": True},
    }
    assert request["temperature"] == 0.0
    assert request["seed"] == 7
    assert request["max_tokens"] == 256  # a local server: the widely understood parameter
    assert server.request_headers[0]["authorization"] == f"Bearer {SECRET}"


def test_text_call_sends_no_response_format_and_default_usage(server: FakeOpenAIServer) -> None:
    server.add("Three invoices are overdue.")
    client = _client(server, temperature=None, extra_headers={"X-Team": "finops"})

    response = client.complete(MESSAGES)

    assert response.text == "Three invoices are overdue."
    assert response.response_format == "text"
    assert response.usage["completion_tokens"] == len("Three invoices are overdue.") // 4
    request = server.requests[0]
    assert "response_format" not in request
    assert "temperature" not in request
    assert server.request_headers[0]["x-team"] == "finops"
    # No key given and a base URL set: a placeholder, never a missing-credentials error.
    assert server.request_headers[0]["authorization"] == "Bearer not-needed"


def test_json_schema_refusal_falls_back_to_json_object_once_and_for_good() -> None:
    with FakeOpenAIServer([PLAN_TEXT, PLAN_TEXT], refuse_json_schema=True) as server:
        client = _client(server)
        assert client.structured_outputs_supported is None

        first = client.complete(MESSAGES, schema=SCHEMA)

        assert first.text == PLAN_TEXT
        assert first.response_format == "json_object"
        assert first.attempts == 2  # the refused request and the answered one
        assert client.structured_outputs_supported is False
        refused, answered = server.requests
        assert refused["response_format"]["type"] == "json_schema"
        assert answered["response_format"] == {"type": "json_object"}
        # The schema travels in the (single, leading) system message instead.
        system = [m for m in answered["messages"] if m["role"] == "system"]
        assert len(system) == 1 and answered["messages"][0] is not None
        assert system[0]["content"].startswith(MESSAGES[0]["content"])
        assert json.dumps(SCHEMA, separators=(",", ":")) in system[0]["content"]
        assert answered["messages"][1:] == MESSAGES[1:]

        second = client.complete(MESSAGES, schema=SCHEMA)

        assert second.response_format == "json_object"
        assert second.attempts == 1
        assert len(server.requests) == 3
        assert server.requests[2]["response_format"] == {"type": "json_object"}


def test_fallback_without_system_message_adds_one(server: FakeOpenAIServer) -> None:
    server.refuse_json_schema = True
    server.add(PLAN_TEXT)
    _client(server).complete([{"role": "user", "content": "hi"}], schema=SCHEMA)
    messages = server.requests[1]["messages"]
    assert messages[0]["role"] == "system" and "JSON Schema" in messages[0]["content"]
    assert messages[1] == {"role": "user", "content": "hi"}


def test_openai_style_400_schema_refusal_also_falls_back(server: FakeOpenAIServer) -> None:
    body = json.dumps(
        {
            "error": {
                "message": "Invalid schema for response_format 'pte_plan': "
                "'additionalProperties' is required",
                "type": "invalid_request_error",
                "param": "response_format",
                "code": None,
            }
        }
    )
    server.add(Reply("", status=400, error_body=body), PLAN_TEXT)
    response = _client(server).complete(MESSAGES, schema=SCHEMA)
    assert response.response_format == "json_object"


def test_other_400_does_not_fall_back(server: FakeOpenAIServer) -> None:
    body = json.dumps({"error": {"message": "This model's maximum context length is 8192 tokens"}})
    server.add(Reply("", status=400, error_body=body), PLAN_TEXT)
    client = _client(server)
    with pytest.raises(LLMError, match=r"HTTP 400.*maximum context length"):
        client.complete(MESSAGES, schema=SCHEMA)
    assert len(server.requests) == 1
    assert client.structured_outputs_supported is None


def test_finish_reason_length_is_passed_through(server: FakeOpenAIServer) -> None:
    server.add(Reply('{"pte_plan": "1", "st', finish_reason="length"))
    response = _client(server).complete(MESSAGES, schema=SCHEMA)
    assert response.finish_reason == "length"
    assert response.text == '{"pte_plan": "1", "st'


def test_empty_answer_is_an_llm_error(server: FakeOpenAIServer) -> None:
    server.add(Reply("  "))
    with pytest.raises(LLMError, match="empty answer") as info:
        _client(server, max_retries=2).complete(MESSAGES)
    assert info.value.reason is ReasonCode.LLM_ERROR
    assert len(server.requests) == 1  # an answer arrived: never retried


def test_timeout_raises_quickly(server: FakeOpenAIServer) -> None:
    server.add(Reply(PLAN_TEXT, delay_s=2))
    started = time.monotonic()
    with pytest.raises(LLMError, match=r"timed out after 0\.3s"):
        _client(server, timeout_s=0.3, max_retries=0).complete(MESSAGES, schema=SCHEMA)
    assert time.monotonic() - started < 1.5
    assert len(server.requests) == 1


def test_a_timed_out_request_is_not_retried(server: FakeOpenAIServer) -> None:
    # The server may still be generating the answer: a retry would pile a second generation
    # on a server that is busy with the first.
    server.add(Reply(PLAN_TEXT, delay_s=2), Reply(PLAN_TEXT, delay_s=2))
    with pytest.raises(LLMError, match=r"timed out.*not retried") as caught:
        _client(server, timeout_s=0.3, max_retries=3).complete(MESSAGES, schema=SCHEMA)
    assert caught.value.attempts == 1
    assert len(server.requests) == 1


def test_every_request_is_bounded_and_json_answers_stop_on_runaway_whitespace(
    server: FakeOpenAIServer,
) -> None:
    # private: the client's defaults
    from pte._run import DEFAULT_MAX_TOKENS, RUNAWAY_STOPS

    server.add(PLAN_TEXT, "an answer")
    client = _client(server)
    client.complete(MESSAGES, schema=SCHEMA)
    client.complete(MESSAGES)
    plan_request, text_request = server.requests
    assert plan_request["max_tokens"] == text_request["max_tokens"] == DEFAULT_MAX_TOKENS
    assert plan_request["stop"] == list(RUNAWAY_STOPS)
    assert "stop" not in text_request
    assert 1 <= len(RUNAWAY_STOPS) <= 4  # OpenAI takes at most four
    # No stop sequence can occur in a plan as json.dumps writes it, compact or indented.
    for indent in (None, 1, 2, 4, "\t"):
        text = json.dumps(json.loads(PLAN_TEXT), indent=indent)
        assert not any(stop in text for stop in RUNAWAY_STOPS)


def test_transport_retry_then_success_reports_attempts(server: FakeOpenAIServer) -> None:
    server.add(Reply("", status=503), PLAN_TEXT)
    response = _client(server, max_retries=2).complete(MESSAGES, schema=SCHEMA)
    assert response.text == PLAN_TEXT
    assert response.attempts == 2
    assert len(server.requests) == 2


def test_http_500_is_an_llm_error(server: FakeOpenAIServer) -> None:
    server.add(Reply("", status=500, error_body='{"error": {"message": "CUDA out of memory"}}'))
    with pytest.raises(LLMError, match=r"HTTP 500.*CUDA out of memory"):
        _client(server).complete(MESSAGES, schema=SCHEMA)


@pytest.mark.parametrize("body", ["this is not JSON", '{"object": "chat.completion", "choices": []}'])
def test_unusable_200_is_an_llm_error_and_not_retried(server: FakeOpenAIServer, body: str) -> None:
    server.add(Reply("", error_body=body))
    with pytest.raises(LLMError):
        _client(server, max_retries=2).complete(MESSAGES)
    assert len(server.requests) == 1


def test_exhausted_script_is_an_http_500(server: FakeOpenAIServer) -> None:
    with pytest.raises(LLMError, match="no scripted reply left"):
        _client(server).complete(MESSAGES)


def test_401_never_shows_the_key(server: FakeOpenAIServer) -> None:
    # Servers quote keys back; the client must not pass that on.
    body = json.dumps(
        {"error": {"message": f"Incorrect API key provided: {SECRET}", "code": "invalid_api_key"}}
    )
    server.add(Reply("", status=401, error_body=body))
    client = _client(server, api_key=SECRET, max_retries=2)
    with pytest.raises(LLMError, match="HTTP 401") as info:
        client.complete(MESSAGES)
    assert SECRET not in str(info.value)
    assert SECRET not in repr(client) and SECRET not in json.dumps(client.describe)
    assert len(server.requests) == 1  # 4xx is not a transport failure


def test_connection_refused_is_an_llm_error() -> None:
    with FakeOpenAIServer() as srv:
        base_url = srv.base_url  # a port that was just free and is closed again
    with pytest.raises(LLMError, match="cannot reach"):
        OpenAIClient("m", base_url=base_url, max_retries=0, timeout_s=2).complete(MESSAGES)


def test_missing_api_key_without_base_url(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(LLMError, match="OPENAI_API_KEY is not set"):
        OpenAIClient()
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    assert OpenAIClient().describe["base_url"].startswith("https://api.openai.com")


def test_configuration_from_environment(monkeypatch: pytest.MonkeyPatch, server: FakeOpenAIServer) -> None:
    monkeypatch.setenv("OPENAI_MODEL", "from-openai-model")
    assert OpenAIClient(base_url=server.base_url).model == "from-openai-model"
    monkeypatch.setenv("PTE_MODEL", "from-pte-model")
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    client = OpenAIClient(timeout_s=3, max_retries=1)
    assert client.describe == {
        "model": "from-pte-model",
        "base_url": server.base_url,
        "timeout_s": 3.0,
        "max_retries": 1,
        "max_tokens": 16_384,
    }
    assert OpenAIClient("explicit", base_url=server.base_url).model == "explicit"
    assert OpenAIClient(api_key="k").describe["model"] == "from-pte-model"


def test_max_tokens_parameter_for_openai_hosts() -> None:
    client = OpenAIClient("m", api_key="k", max_tokens=10)
    assert client._max_tokens_param == "max_completion_tokens"
    azure = OpenAIClient("m", api_key="k", base_url="https://acme.openai.azure.com/openai/v1/")
    assert azure._max_tokens_param == "max_completion_tokens"


def test_fake_server_models_and_404(server: FakeOpenAIServer) -> None:
    client = _client(server)
    models = client._sdk.models.list()
    assert [m.id for m in models.data] == ["fake-model"]
    with pytest.raises(Exception, match="404"):
        client._sdk.get("/nowhere", cast_to=object)


def test_fake_server_stops_promptly_with_a_sleeping_reply() -> None:
    srv = FakeOpenAIServer([Reply(PLAN_TEXT, delay_s=30)]).start()
    with pytest.raises(LLMError):
        OpenAIClient("m", base_url=srv.base_url, timeout_s=0.2, max_retries=0).complete(MESSAGES)
    started = time.monotonic()
    srv.stop()
    assert time.monotonic() - started < 1.0


def test_a_stopped_fake_server_ends_the_connection_a_client_keeps_alive() -> None:
    """Its handler thread, waiting on the kept-alive connection for a next request, ended only
    when the client was collected: a later test's thread, socket and ResourceWarning."""
    before = set(threading.enumerate())
    with (
        FakeOpenAIServer([PLAN_TEXT]) as srv,
        OpenAIClient("m", base_url=srv.base_url, max_retries=0) as client,
    ):
        assert client.complete(MESSAGES).text == PLAN_TEXT  # its pool keeps the connection open
        handlers = [t for t in set(threading.enumerate()) - before if t.name != "FakeOpenAIServer"]
        assert handlers
        srv.stop()  # the client is still open
        for handler in handlers:
            handler.join(5)
        assert not any(handler.is_alive() for handler in handlers)


# -- ReplayClient -----------------------------------------------------------------------------


def test_replay_serves_in_order_and_records_calls() -> None:
    recorded = LLMResponse("final", "gpt-x", "length", {"total_tokens": 3}, "text", attempts=2)
    client = ReplayClient([PLAN_TEXT, recorded, "answer"])
    assert isinstance(client, LLMClient)
    assert client.remaining == 3

    first = client.complete(MESSAGES, schema=SCHEMA)
    assert first == LLMResponse(
        PLAN_TEXT,
        "replay",
        "stop",
        {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        "json_schema",
    )
    assert client.complete(MESSAGES) is recorded
    assert client.complete(MESSAGES).response_format == "text"
    assert client.remaining == 0
    assert client.calls[0] == {"messages": MESSAGES, "schema": SCHEMA, "schema_name": "pte_plan"}
    assert client.calls[1]["schema"] is None

    with pytest.raises(LLMError, match=r"replay: no recorded response left \(call 4\)"):
        client.complete(MESSAGES)


def test_replay_raises_recorded_errors() -> None:
    client = ReplayClient([LLMError("timed out after 60s"), PLAN_TEXT])
    with pytest.raises(LLMError, match="timed out after 60s"):
        client.complete(MESSAGES, schema=SCHEMA)
    assert client.complete(MESSAGES, schema=SCHEMA).text == PLAN_TEXT


def test_replay_rejects_other_items() -> None:
    with pytest.raises(TypeError, match="item 1"):
        ReplayClient(["ok", 42])  # type: ignore[list-item]


def test_replay_from_file_list_of_strings(tmp_path: Path) -> None:
    path = tmp_path / "answers.json"
    path.write_text(json.dumps([PLAN_TEXT, "done"]))
    client = ReplayClient.from_file(path)
    assert client.complete(MESSAGES, schema=SCHEMA).text == PLAN_TEXT
    assert client.complete(MESSAGES).text == "done"


def test_replay_from_file_objects(tmp_path: Path) -> None:
    path = tmp_path / "answers.json"
    path.write_text(
        json.dumps(
            [
                {
                    "text": '{"pte_plan"',
                    "finish_reason": "length",
                    "usage": {"prompt_tokens": 5, "completion_tokens": 2},
                },
                {"error": "HTTP 503"},
                {"text": "ok"},
            ]
        )
    )
    client = ReplayClient.from_file(str(path))
    truncated = client.complete(MESSAGES, schema=SCHEMA)
    assert truncated.finish_reason == "length"
    assert truncated.usage == {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}
    with pytest.raises(LLMError, match="HTTP 503"):
        client.complete(MESSAGES, schema=SCHEMA)
    assert client.complete(MESSAGES).finish_reason == "stop"


@pytest.mark.parametrize("content", ['{"text": 1}', "[1]", '[{"answer": "x"}]', "not json"])
def test_replay_from_file_rejects_malformed(tmp_path: Path, content: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(ReplayDataError, match=str(path)):
        ReplayClient.from_file(path)


def test_replay_from_audit_records() -> None:
    records: list[dict[str, Any]] = [
        {"type": "run_started", "seq": 0},
        {
            "type": "llm_call",
            "seq": 1,
            "role": "planner",
            "model": "gpt-4o-mini-2024-07-18",
            "messages": MESSAGES,
            "response_format": "json_object",
            "response": PLAN_TEXT,
            "finish_reason": "stop",
            "usage": {"prompt_tokens": 40, "completion_tokens": 9, "total_tokens": 49},
            "error": None,
            "attempts": 2,
            "duration_ms": 812.5,
        },
        {
            "role": "finalizer",
            "model": "gpt-4o-mini-2024-07-18",
            "messages": MESSAGES,
            "response_format": "text",
            "response": None,
            "finish_reason": None,
            "usage": None,
            "error": "timed out after 60s waiting for model 'gpt-4o-mini'",
            "attempts": 3,
            "duration_ms": 180000.0,
        },
    ]
    client = ReplayClient.from_audit(records)
    assert client.model == "gpt-4o-mini-2024-07-18"
    assert client.remaining == 2
    assert client.complete(MESSAGES, schema=SCHEMA) == LLMResponse(
        text=PLAN_TEXT,
        model="gpt-4o-mini-2024-07-18",
        finish_reason="stop",
        usage={"prompt_tokens": 40, "completion_tokens": 9, "total_tokens": 49},
        response_format="json_object",
        attempts=2,
        duration_ms=812.5,
    )
    with pytest.raises(LLMError, match="timed out after 60s"):
        client.complete(MESSAGES)


def test_replay_from_audit_rejects_a_record_without_answer() -> None:
    with pytest.raises(ReplayDataError, match="neither"):
        ReplayClient.from_audit([{"model": "m", "response": None, "error": None}])
