"""Redaction time against input size on adversarial strings: the slope shows it is linear.

Every string PTE logs or prints goes through `Redactor.redact_text`. For each family of
crafted text (the ``a_a_a_…`` that took the old backtracking redactor quadratic time, and
strings built to make each kind of rule match, almost match, or match everywhere) this
times sizes from 16 KB to 1 MB and fits log(time) against log(size): a slope near 1 is
linear growth (2 would be quadratic).

    PYTHONPATH=. python bench/bench_redaction.py [--max-kb 1024] [--repeat 3]
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable

from pte.audit import Redactor

FAMILIES: dict[str, Callable[[int], str]] = {
    "a_a_a_ (issue #10)": lambda n: ("a_" * n)[:n],
    "credential words": lambda n: ("password_token_secret_" * n)[:n],
    "assignments": lambda n: ("password=x " * n)[:n],
    "quoted JSON keys": lambda n: ('\\"api_key\\": \\"' * n)[:n],
    "url userinfo": lambda n: ("https://u:p" + "@" * 64 + "/") * (n // 76 + 1),
    "near-miss prefixes": lambda n: ("sk-AKIAghp_xoxb-hf_glpat-SG.npm_AIza" * n)[:n],
    "matches everywhere": lambda n: ("AKIAIOSFODNN7EXAMPLE " * n)[:n],
    "keyword soup": lambda n: ("key secret token bearer basic pwd ://  " * n)[:n],
    "pem begin lines": lambda n: ("-----BEGIN RSA PRIVATE KEY-----\n" * n)[:n],
    "whitespace": lambda n: " " * n,
}


def _time(redactor: Redactor, text: str, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        redactor._text_cache.clear()
        started = time.perf_counter()
        redactor.redact_text(text)
        best = min(best, time.perf_counter() - started)
    return best


def _slope(sizes: list[int], times: list[float]) -> float:
    xs = [math.log(s) for s in sizes]
    ys = [math.log(max(t, 1e-9)) for t in times]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-kb", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    redactor = Redactor()
    redactor.redact_text("warm up: password=x sk-" + "a" * 40)
    sizes = []
    size = 16 * 1024
    while size <= args.max_kb * 1024:
        sizes.append(size)
        size *= 2
    worst = 0.0
    print(f"sizes: {', '.join(f'{s // 1024} KB' for s in sizes)}")
    for name, make in FAMILIES.items():
        times = [_time(redactor, make(s)[:s], args.repeat) for s in sizes]
        slope = _slope(sizes, times)
        worst = max(worst, slope)
        per_mb = times[-1] / (sizes[-1] / 1_048_576)
        print(f"  {name:<22} slope {slope:4.2f}   {per_mb * 1e3:8.1f} ms per MB at {sizes[-1] // 1024} KB")
    print(f"steepest slope: {worst:.2f} (1 = linear, 2 = quadratic)")


if __name__ == "__main__":
    main()
