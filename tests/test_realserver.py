"""Against a real model server that no one here wrote: llama.cpp's, with Gemma 3 270M.

Opt-in (``pytest -m realserver``; see tests/realserver.py for what it needs): the server
builds from source and a small model on 2 cores is slow, so the default run leaves it out.
It shows that PTE's plan request is bounded (an output-token bound and runaway-whitespace
stops on the request the server gets) and that an answer that runs away ends the run as
``invalid_json`` within seconds, leaving the server free for the next request.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from pte.audit import AuditLog
from pte.engine import Engine
from pte.llm import OpenAIClient
from pte.testing import example_registry
from tests.realserver import RealServerUnavailable, llama_server

pytestmark = pytest.mark.realserver


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    try:
        with llama_server() as url:
            yield url
    except RealServerUnavailable as exc:
        pytest.fail(f"the real-server tests need llama.cpp's server and a model: {exc}")


def _llm_calls(log: AuditLog) -> list[dict[str, object]]:
    return [r for r in log.records if r["type"] == "llm_call"]


def test_the_plan_request_is_bounded(base_url: str) -> None:
    bound = 256
    client = OpenAIClient("gemma-3-270m", base_url=base_url, timeout_s=120, max_retries=0, max_tokens=bound)
    log = AuditLog(None)
    started = time.monotonic()
    result = Engine(example_registry(), client).run("What is 2 + 2? Use the calculator.", log)
    elapsed = time.monotonic() - started
    calls = _llm_calls(log)
    assert calls, log.records
    for call in calls:
        usage = call["usage"]
        assert isinstance(usage, dict)
        assert usage["completion_tokens"] <= bound, call
    # Whatever the small model answered, the run ended, and within the bound's time.
    assert result.status in ("succeeded", "failed_closed")
    assert elapsed < 120 * len(calls)


def test_a_runaway_answer_ends_invalid_json_within_seconds(base_url: str) -> None:
    # A tiny bound stands for any answer that would run on: the server stops at the bound,
    # says finish_reason=length, and the engine rejects the cut-off answer at once.
    client = OpenAIClient("gemma-3-270m", base_url=base_url, timeout_s=60, max_retries=0, max_tokens=8)
    log = AuditLog(None)
    started = time.monotonic()
    result = Engine(example_registry(), client).run(
        "List every overdue invoice of every customer, each with a separate step, for all 1000 customers.",
        log,
    )
    elapsed = time.monotonic() - started
    assert result.status == "failed_closed"
    assert result.reason is not None and result.reason.value == "invalid_json", result.message
    assert elapsed < 30, elapsed
    [call] = _llm_calls(log)
    assert call["finish_reason"] == "length"
    # The server is not still busy with the abandoned generation: the next request is answered
    # as fast as the first.
    again = time.monotonic()
    client.complete([{"role": "user", "content": "Say OK."}])
    assert time.monotonic() - again < max(30.0, 3 * elapsed)


def test_runaway_whitespace_is_stopped_by_the_server(base_url: str) -> None:
    # Ask for JSON that is mostly whitespace: the stop sequences end the generation long
    # before the token bound, and the text is rejected as invalid JSON.
    client = OpenAIClient("gemma-3-270m", base_url=base_url, timeout_s=120, max_retries=0, max_tokens=2048)
    started = time.monotonic()
    response = client.complete(
        [
            {"role": "system", "content": "Answer with a JSON object."},
            {
                "role": "user",
                "content": "Write the JSON object with three empty lines between every token, "
                "and 100 spaces of indentation: " + json.dumps({"a": [1, 2, 3]}),
            },
        ],
        schema={"type": "object"},
    )
    elapsed = time.monotonic() - started
    assert response.usage["completion_tokens"] < 2048
    assert elapsed < 120
