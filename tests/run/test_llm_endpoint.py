"""`OpenAIClient` against llama.cpp-style servers (#28), over real HTTP on loopback.

- The output bound is capped by the context the server reports (llama.cpp's ``/props``);
  a server that reports none (the OpenAI API, vLLM, Ollama: a 404) keeps the configured bound.
- A timed-out request is cancelled: the client closes its connection, and a single-slot
  server that abandons a hung-up request (as llama.cpp does) serves the next one at once.
- A ``json_schema`` refusal (llama.cpp's HTTP 500) is remembered per endpoint and model in
  the deployment directory, so that a new process asks in JSON mode at once.

`pte.testing.FakeOpenAIServer` plays the server: real sockets, the real openai SDK path.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from pte import OpenAIClient

# private: the client's defaults; the endpoint memory, white-box; the endpoint probe, white-box
from pte._run import DEFAULT_MAX_TOKENS, ENDPOINTS_FILE, EndpointMemory, context_tokens, props_url
from pte.errors import LLMError
from pte.testing import FakeOpenAIServer, Reply

PLAN_TEXT = json.dumps({"pte_plan": "1", "steps": [{"id": "a", "tool": "t", "args": {}}]})
SCHEMA = {"type": "object"}
CHAT = [{"role": "system", "content": "plan"}, {"role": "user", "content": "do it"}]
REPO = Path(__file__).resolve().parents[2]


def _bound(server: FakeOpenAIServer, index: int = -1) -> object:
    return server.requests[index].get("max_tokens")


def test_the_output_bound_is_capped_by_the_context_the_server_reports() -> None:
    with FakeOpenAIServer([PLAN_TEXT, "done"], context_tokens=8192) as server:
        client = OpenAIClient("m", base_url=server.base_url)
        client.complete(CHAT, schema=SCHEMA)
        client.complete(CHAT)
        assert [r["max_tokens"] for r in server.requests] == [8192, 8192]
        assert client.context_tokens == 8192 and client.output_bound == 8192
        assert server.props_requests == 1  # asked once per client
        assert client.describe["max_tokens"] == DEFAULT_MAX_TOKENS  # the configuration, as set


def test_a_smaller_configured_bound_stays() -> None:
    with FakeOpenAIServer([PLAN_TEXT], context_tokens=8192) as server:
        OpenAIClient("m", base_url=server.base_url, max_tokens=1000).complete(CHAT, schema=SCHEMA)
        assert _bound(server) == 1000


def test_a_server_that_reports_no_context_keeps_the_configured_bound() -> None:
    with FakeOpenAIServer([PLAN_TEXT]) as server:  # /props is a 404, as on the OpenAI API
        client = OpenAIClient("m", base_url=server.base_url)
        client.complete(CHAT, schema=SCHEMA)
        assert _bound(server) == DEFAULT_MAX_TOKENS and client.context_tokens is None
        assert server.props_requests == 1


def test_no_bound_asks_nothing() -> None:
    with FakeOpenAIServer([PLAN_TEXT], context_tokens=8192) as server:
        OpenAIClient("m", base_url=server.base_url, max_tokens=None).complete(CHAT, schema=SCHEMA)
        assert "max_tokens" not in server.requests[0] and server.props_requests == 0


@pytest.mark.parametrize(
    ("props", "expected"),
    [
        ({"default_generation_settings": {"n_ctx": 4096}}, 4096),
        ({"n_ctx": 2048}, 2048),
        ({"default_generation_settings": {"n_ctx": 0}}, None),
        ({"default_generation_settings": {"n_ctx": True}}, None),
        ({"default_generation_settings": {"n_ctx": "8192"}}, None),
        ([], None),
        ("8192", None),
    ],
)
def test_only_a_positive_integer_context_counts(props: object, expected: int | None) -> None:
    assert context_tokens(props) == expected


def test_props_is_asked_at_the_servers_root() -> None:
    assert props_url("http://h:8080/v1") == "http://h:8080/props"
    assert props_url("http://h:8080/v1/") == "http://h:8080/props"
    assert props_url("http://h/llama/v1?x=1") == "http://h/llama/props"
    assert props_url("http://h:8080") == "http://h:8080/props"


def test_a_timed_out_request_is_cancelled_so_a_single_slot_server_answers_the_next() -> None:
    """The issue's llama.cpp: one slot, a client timeout, and the next request timed out too
    because the abandoned answer was still being generated."""
    with FakeOpenAIServer([Reply(PLAN_TEXT, delay_s=30), PLAN_TEXT], slots=1) as server:
        client = OpenAIClient("m", base_url=server.base_url, timeout_s=0.5, max_retries=0)
        with pytest.raises(LLMError, match="cancelled"):
            client.complete(CHAT, schema=SCHEMA)
        started = time.monotonic()
        response = client.complete(CHAT, schema=SCHEMA)
        assert response.text == PLAN_TEXT and time.monotonic() - started < 0.5
        assert server.cancelled == 1


def _refusing(*replies: str) -> FakeOpenAIServer:
    return FakeOpenAIServer(list(replies), refuse_json_schema=True)


def _formats(server: FakeOpenAIServer) -> list[str]:
    return [r["response_format"]["type"] for r in server.requests]


def test_a_json_schema_refusal_is_remembered_in_the_deployment_dir(tmp_path: Path) -> None:
    with _refusing(PLAN_TEXT, PLAN_TEXT) as server:
        OpenAIClient("m", base_url=server.base_url, deployment_dir=tmp_path).complete(CHAT, schema=SCHEMA)
        assert _formats(server) == ["json_schema", "json_object"]
        # A new client (as in a new process) asks in JSON mode at once: no HTTP 500 again.
        fresh = OpenAIClient("m", base_url=server.base_url, deployment_dir=tmp_path)
        assert fresh.structured_outputs_supported is False
        assert fresh.complete(CHAT, schema=SCHEMA).response_format == "json_object"
        assert _formats(server) == ["json_schema", "json_object", "json_object"]
    # Per endpoint and model: another model on the same server is asked afresh.
    with _refusing(PLAN_TEXT) as other:
        OpenAIClient("m", base_url=other.base_url, deployment_dir=tmp_path).complete(CHAT, schema=SCHEMA)
        assert _formats(other) == ["json_schema", "json_object"]
    saved = json.loads((tmp_path / ENDPOINTS_FILE).read_text(encoding="utf-8"))
    assert len(saved["endpoints"]) == 2 and "not-needed" not in json.dumps(saved)


def test_without_a_deployment_dir_every_process_asks_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PTE_DEPLOYMENT_DIR", raising=False)
    with _refusing(PLAN_TEXT, PLAN_TEXT) as server:
        for _ in range(2):
            OpenAIClient("m", base_url=server.base_url).complete(CHAT, schema=SCHEMA)
        assert _formats(server) == ["json_schema", "json_object"] * 2


def test_a_new_process_does_not_pay_the_refusal_again(tmp_path: Path) -> None:
    script = (
        "import sys\n"
        "from pte._run._llm import OpenAIClient\n"
        "c = OpenAIClient('m', base_url=sys.argv[1])\n"
        "print(c.complete([{'role': 'user', 'content': 'x'}], schema={'type': 'object'}).response_format)\n"
    )
    env = {**os.environ, "PTE_DEPLOYMENT_DIR": str(tmp_path), "PYTHONPATH": str(REPO)}
    with _refusing(PLAN_TEXT, PLAN_TEXT) as server:
        for _ in range(2):
            done = subprocess.run(
                [sys.executable, "-c", script, server.base_url],
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
                check=True,
            )
            assert done.stdout.strip() == "json_object"
        assert _formats(server) == ["json_schema", "json_object", "json_object"]


def test_a_damaged_or_stale_memory_is_ignored(tmp_path: Path) -> None:
    """The file is a cache, not authority: garbage or an old entry only means asking again."""
    memory = EndpointMemory(tmp_path)
    (tmp_path / ENDPOINTS_FILE).write_text("{not json", encoding="utf-8")
    assert not memory.refuses_json_schema("http://h/v1 m")
    memory.remember_json_schema_refusal("http://h/v1 m")  # rewrites the damaged file
    assert memory.refuses_json_schema("http://h/v1 m")
    later = datetime.now(UTC) + timedelta(days=8)
    assert not memory.refuses_json_schema("http://h/v1 m", now=later)
    for bad in (
        {"pte_llm_endpoints": "1", "endpoints": {"http://h/v1 m": {"json_schema": False}}},
        {"pte_llm_endpoints": "2", "endpoints": {}},
        [1, 2],
    ):
        (tmp_path / ENDPOINTS_FILE).write_text(json.dumps(bad), encoding="utf-8")
        assert not memory.refuses_json_schema("http://h/v1 m")


def test_an_unwritable_deployment_dir_does_not_fail_the_call(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("", encoding="utf-8")
    with _refusing(PLAN_TEXT) as server:
        client = OpenAIClient("m", base_url=server.base_url, deployment_dir=blocker / "sub")
        assert client.complete(CHAT, schema=SCHEMA).response_format == "json_object"
