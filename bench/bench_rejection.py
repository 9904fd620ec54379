"""Worst-case cost of compiling hostile planner text, up to the byte limit.

An LLM's answer is untrusted text: whatever it is, `compile` must accept or reject it
quickly. This bench compiles a family of crafted texts (deep nesting of every kind around
each depth threshold, wide invalid documents, escape-heavy strings, duplicate keys, junk,
a maximal valid plan, ...) sized up to `Limits.max_bytes`, and prints the slowest, the
median of each family and the ratio of the worst case to compiling a small valid plan.

    PYTHONPATH=. python bench/bench_rejection.py [--repeat 3]

What is left: nesting is refused before parsing, but a 1 MB document of ~460k tiny arrays
or ~80k keys is shallow and valid JSON, and building it (the parser, the strict loader's
duplicate-key hook) costs far more than 50 ms. Bounding the number of arrays/objects per
plan (a `Limits` field, checked on the bracket skeleton `pte._nesting` already computes)
would close it.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections.abc import Iterator

from pte import DEFAULT_LIMITS, PlanRejected, compile_plan
from pte.testing._catalogue import example_registry

LIMIT = DEFAULT_LIMITS.max_bytes


def _step(args: str) -> str:
    return '{"pte_plan":"1","steps":[{"id":"a","tool":"calculator","args":' + args + "}]}"


def _fill(unit: str, head: str = "", tail: str = "") -> str:
    count = max(1, (LIMIT - len(head) - len(tail)) // len(unit))
    return head + unit * count + tail


def texts() -> Iterator[tuple[str, str]]:
    """(family, text) pairs, every text at most `LIMIT` bytes."""
    for depth in (5, 11, 12, 13, 20, 30, 36, 40, 47, 48, 49, 60, 100, 300, 1000, 3000, 100_000):
        yield "nested $ref", _step('{"expression":' + '{"$ref":' * depth + '"a/value"' + "}" * depth + "}")
        yield (
            "nested arrays in args",
            _step('{"expression":"1","variables":{"x":' + "[" * depth + "]" * depth + "}}"),
        )
        yield (
            "nested objects in args",
            _step('{"expression":"1","variables":{"x":' + '{"a":' * depth + "1" + "}" * depth + "}}"),
        )
        yield "bare nesting", "[" * depth + "]" * depth
        yield "unclosed nesting", '{"a":' * depth
    group = "[" * 48 + "]" * 48
    yield (
        "wide, 48 deep groups",
        _step('{"expression":"1","variables":{"x":[' + _fill(group + ",", tail="1")[: LIMIT - 200] + "]}}"),
    )
    yield (
        "wide, 12 deep groups",
        _step(
            '{"expression":"1","variables":{"x":['
            + _fill("[" * 12 + "]" * 12 + ",", tail="1")[: LIMIT - 200]
            + "]}}"
        ),
    )
    bad_step = '{{"id":"s{}","tool":"calculator","args":{{"expression":1}}}},'
    yield (
        "1,000 invalid steps",
        '{"pte_plan":"1","steps":[' + "".join(bad_step.format(i) for i in range(1000))[:-1] + "]}",
    )
    yield "escaped quotes string", _step('{"expression":"' + _fill('\\"', tail="")[: LIMIT - 100] + '"}')
    yield "long string", _step('{"expression":"' + "1+" * (LIMIT // 2 - 100) + '1"}')
    yield "many keys", _step("{" + ",".join(f'"k{i}":1' for i in range(LIMIT // 12)) + "}")
    yield "duplicate keys", _step("{" + ",".join('"k":1' for _ in range(LIMIT // 7)) + "}")
    yield "junk brackets", "][" * (LIMIT // 2)
    rng = random.Random(7)
    yield "random printable", "".join(rng.choice('{}[]":,0123456789abc\\ ') for _ in range(LIMIT))
    steps = ",".join(
        f'{{"id":"s{i}","tool":"calculator","args":{{"expression":"x+1","variables":{{"x":'
        + (f'{{"$ref":"s{i - 1}/value"}}' if i else "1")
        + "}}}"
        for i in range(1000)
    )
    yield "valid 1,000-step chain", '{"pte_plan":"1","steps":[' + steps + '],"result":{"$ref":"s999/value"}}'


def _time(text: str, repeat: int) -> tuple[float, str]:
    registry = example_registry()
    best = float("inf")
    outcome = "accepted"
    for _ in range(repeat):
        started = time.perf_counter()
        try:
            compile_plan(text, registry)
            outcome = "accepted"
        except PlanRejected as rejection:
            outcome = rejection.reason.value
        best = min(best, time.perf_counter() - started)
    return best, outcome


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    small = json.dumps(
        {"pte_plan": "1", "steps": [{"id": "a", "tool": "calculator", "args": {"expression": "1"}}]}
    )
    baseline, _ = _time(small, 20)
    families: dict[str, list[float]] = {}
    worst = (0.0, "", "", 0)
    for family, text in texts():
        size = len(text.encode("utf-8"))
        assert size <= LIMIT, (family, size)
        seconds, outcome = _time(text, args.repeat)
        families.setdefault(family, []).append(seconds)
        if seconds > worst[0]:
            worst = (seconds, family, outcome, size)
    print(f"small valid plan: {baseline * 1e3:.2f} ms (baseline)")
    for family, times in families.items():
        print(
            f"  {family:<26} median {statistics.median(times) * 1e3:7.2f} ms   max {max(times) * 1e3:7.2f} ms"
        )
    seconds, family, outcome, size = worst
    print(
        f"worst case: {seconds * 1e3:.1f} ms ({family}, {size:,} bytes, {outcome}) = "
        f"{seconds / baseline:.0f} x the small plan"
    )


if __name__ == "__main__":
    main()
