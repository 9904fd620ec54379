"""Against a real model server that no one here wrote: llama.cpp's, with Gemma 3 270M.

Opt-in (``pytest -m realserver``; see tests/realserver.py for what it needs and docs/hardening.md,
"Real model servers", for how to run it): the server builds from source and a small model on 2 shared
cores is slow, so the default run leaves it out. It shows that PTE's plan request is
bounded (the server stops at the output-token bound PTE sends) and that an answer that runs
away ends the run as ``invalid_json`` within seconds, leaving the server free for the next
request. The runs plan against a two-tool catalogue with a deterministic final answer
(``llm_answer=False``): every request then shares the planner prompt's ~3k-token prefix,
which the server reads once (the warm-up) and reuses.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from pte import AuditLog, Engine, EngineConfig, OpenAIClient, RunResult
from tests.realserver import RealServerUnavailable, llama_server, small_registry

pytestmark = pytest.mark.realserver

MODEL = "gemma-3-270m"
REQUEST = "What is 2 + 2? Use the calculator."


def _run(base_url: str, max_tokens: int, request: str = REQUEST) -> tuple[RunResult, AuditLog, float]:
    client = OpenAIClient(MODEL, base_url=base_url, timeout_s=600, max_retries=0, max_tokens=max_tokens)
    log = AuditLog(None)
    started = time.monotonic()
    result = Engine(small_registry(), client, config=EngineConfig(llm_answer=False)).run(request, log)
    return result, log, time.monotonic() - started


def _llm_calls(log: AuditLog) -> list[dict[str, object]]:
    return [r for r in log.records if r["type"] == "llm_call"]


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    try:
        with llama_server() as url:
            _run(url, 1)  # warm-up: the server reads the planner prompt once (tens of seconds here)
            yield url
    except RealServerUnavailable as exc:
        pytest.fail(f"the real-server tests need llama.cpp's server and a model: {exc}")


def test_the_plan_request_is_bounded(base_url: str) -> None:
    bound = 32
    result, log, _ = _run(base_url, bound)
    [call] = _llm_calls(log)
    assert call["error"] is None, call
    usage = call["usage"]
    assert isinstance(usage, dict)
    # The server honoured the bound PTE sent: the answer stopped at it (or ended before).
    assert 0 < usage["completion_tokens"] <= bound, call
    if call["finish_reason"] == "length":  # cut off: rejected at once, never parsed as a plan
        assert result.status == "failed_closed"
        assert result.reason is not None and result.reason.value == "invalid_json", result.message
    assert result.status in ("succeeded", "failed_closed")
    # No wall-clock bound here: on 2 shared cores a 32-token answer took from 20 s to 7 min.
    # The answer ended at the bound, not at the client's 600 s timeout (error is None above).


def test_a_runaway_answer_ends_invalid_json_within_seconds(base_url: str) -> None:
    # Asked for a thousand steps, the model would write for many minutes; a bound of 8 tokens
    # stands for any bound an answer runs into. The server stops there, says
    # finish_reason=length, and the engine rejects the cut-off answer without parsing it.
    result, log, elapsed = _run(
        base_url, 8, "Compute n * 2 for every n from 1 to 1000, each with a separate calculator step."
    )
    assert result.status == "failed_closed"
    assert result.reason is not None and result.reason.value == "invalid_json", result.message
    [call] = _llm_calls(log)
    assert call["finish_reason"] == "length"
    assert isinstance(call["usage"], dict) and call["usage"]["completion_tokens"] <= 8
    assert elapsed < 60, elapsed  # ~10 s on 2 cores under a load average of ~8
    # The server is not still busy with an abandoned generation: the next request is answered.
    again, _, seconds = _run(base_url, 1)
    assert again.reason is not None and again.reason.value == "invalid_json"
    assert seconds < 60, seconds
