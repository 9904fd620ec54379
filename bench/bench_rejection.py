"""Worst-case cost of compiling hostile planner text, up to the byte limit.

An LLM's answer is untrusted text: whatever it is, `compile` must accept or reject it
quickly. This bench compiles families of crafted texts, each sized to a limit of
`DEFAULT_LIMITS` or just past it: deep nesting of every kind around each depth threshold;
wide documents (arrays, objects, keys, numbers, strings) at the byte limit and at the value
limit; escape-heavy and long strings; duplicate keys; junk; the most steps and the most
values a plan may hold, valid, and invalid at the very last step. It prints the slowest
text, the median and maximum of each family, and the worst case against a small valid plan.

Times are CPU time of this process (the best of `--repeat` runs), so other load on a shared
machine does not count; the issue's bar is "well under 50 ms" for the worst case.

    PYTHONPATH=. python bench/bench_rejection.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections.abc import Iterator

from pte import PlanRejected, compile_plan
from pte.plan import DEFAULT_LIMITS
from pte.testing._catalogue import example_registry

LIMIT = DEFAULT_LIMITS.max_bytes
STEPS = DEFAULT_LIMITS.max_steps
VALUES = DEFAULT_LIMITS.max_values


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
    yield "many numbers", _step(_array(["1"] * (LIMIT // 2 - 100)))
    # At the value limit: as wide as a plan may be and still be parsed.
    wide = VALUES - 20
    yield "values: many keys", _step("{" + ",".join(f'"k{i}":1' for i in range(wide)) + "}")
    yield "values: tiny arrays", _step(_array(["[]"] * wide))
    yield "values: many numbers", _step(_array(["1"] * wide))
    yield "values: one past", _step(_array(["1"] * VALUES))
    variables = ",".join(f'"x{i}":{i}' for i in range(wide))
    yield "values: variables", _step('{"expression":"x0","variables":{' + variables + "}}")
    # At the step limit: the longest chain of references, valid and broken at its very end.
    yield "steps: valid chain", _chain(STEPS)
    yield "steps: chain, last bad", _chain(STEPS).replace(f'"s{STEPS - 2}/value"', f'"s{STEPS - 2}/nope"')
    yield "steps: one past", _chain(STEPS + 1)
    per_step = (VALUES - 10) // STEPS - 8
    yield "steps x values: valid", _chain(STEPS, extra=per_step)


def _array(items: list[str]) -> str:
    return '{"expression":"1","variables":{"x":[' + ",".join(items) + "]}}"


def _chain(count: int, extra: int = 0) -> str:
    """`count` calculator steps, each reading the one before; `extra` more variables each."""
    more = "".join(f',"v{j}":{j}' for j in range(extra))
    steps = ",".join(
        f'{{"id":"s{i}","tool":"calculator","args":{{"expression":"x+1","variables":{{"x":'
        + (f'{{"$ref":"s{i - 1}/value"}}' if i else "1")
        + more
        + "}}}"
        for i in range(count)
    )
    return '{"pte_plan":"1","steps":[' + steps + f'],"result":{{"$ref":"s{count - 1}/value"}}}}'


def _time(text: str, repeat: int) -> tuple[float, str]:
    registry = example_registry()
    best = float("inf")
    outcome = "accepted"
    for _ in range(repeat):
        started = time.process_time()
        try:
            compile_plan(text, registry)
            outcome = "accepted"
        except PlanRejected as rejection:
            outcome = rejection.reason.value
        best = min(best, time.process_time() - started)
    return best, outcome


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    small = json.dumps(
        {"pte_plan": "1", "steps": [{"id": "a", "tool": "calculator", "args": {"expression": "1"}}]}
    )
    baseline, _ = _time(small, 20)
    families: dict[str, list[tuple[float, str]]] = {}
    worst = (0.0, "", "", 0)
    for family, text in texts():
        size = len(text.encode("utf-8"))
        assert size <= LIMIT, (family, size)
        seconds, outcome = _time(text, args.repeat)
        families.setdefault(family, []).append((seconds, outcome))
        if seconds > worst[0]:
            worst = (seconds, family, outcome, size)
    print(f"limits: {DEFAULT_LIMITS}")
    print(f"small valid plan: {baseline * 1e3:.2f} ms CPU (baseline)")
    for family, runs in families.items():
        times = [seconds for seconds, _ in runs]
        outcomes = ", ".join(sorted({outcome for _, outcome in runs}))
        print(
            f"  {family:<26} median {statistics.median(times) * 1e3:7.2f} ms   "
            f"max {max(times) * 1e3:7.2f} ms   {outcomes}"
        )
    seconds, family, outcome, size = worst
    print(
        f"worst case: {seconds * 1e3:.1f} ms ({family}, {size:,} bytes, {outcome}) = "
        f"{seconds / baseline:.0f} x the small plan"
    )


if __name__ == "__main__":
    main()
