"""Peak memory of `audit show`, `verify` and `replay` on a long log, against its largest record.

Writes one log of --runs small runs (a --steps-step calculator chain each) plus one run
with a large record (a `format_text` step whose template is --big-kb KB, so its
plan_accepted and step records are large), executed with `pte.Engine.execute`
(durability "none"). Then measures, with `tracemalloc` (Python allocations only), the peak
while

- ``audit show`` renders every record (`iter_records` + `render_record`, as the CLI does);
- ``verify(path)`` checks the whole log;
- ``replay_file(path)`` re-drives every run from the log (each must replay "same"),

and prints each peak as a ratio of the largest record's size on disk, and of the largest
run's size (replay holds one run's records at a time: it re-drives the engine over them).
The numbers are ratios, not timings: a log 10x longer must not move them.

    PYTHONPATH=. python bench/bench_memory.py [--runs 400] [--steps 20] [--big-kb 90]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pte import AuditLog, Engine, EngineConfig, load_registry, verify
from pte._audit import render_record
from pte.audit import iter_records
from pte.plan import Limits
from pte.runs import replay_file


def _chain(steps: int) -> str:
    doc = [{"id": "s0", "tool": "calculator", "args": {"expression": "1"}}]
    for i in range(1, steps):
        args = {"expression": "x + 1", "variables": {"x": {"$ref": f"s{i - 1}/value"}}}
        doc.append({"id": f"s{i}", "tool": "calculator", "args": args})
    return json.dumps({"pte_plan": "1", "steps": doc, "result": {"$ref": f"s{steps - 1}/value"}})


def _big(kb: int) -> str:
    template = "x" * (kb * 1000) + " {v}"
    steps = [{"id": "t", "tool": "format_text", "args": {"template": template, "values": {"v": 1}}}]
    return json.dumps({"pte_plan": "1", "steps": steps, "result": {"$ref": "t/text"}})


def _peak(func: Callable[[], Any]) -> int:
    tracemalloc.start()
    try:
        func()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _show(path: Path) -> None:
    for _, record in iter_records(path, skip_partial_tail=True):
        render_record(record)


def _replay(path: Path) -> None:
    # Every run must replay to the same decisions: a replay that stops at a divergence does
    # less work and would understate the peak.
    report = replay_file(path)
    assert report.ok and all(run.outcome == "same" for run in report.runs), report.render()[:2000]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=400)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--big-kb", type=int, default=90, help="under format_text's 100,000-character cap")
    args = parser.parse_args()
    registry = load_registry(["calculator", "shaping"])
    limits = Limits(max_bytes=4 * args.big_kb * 1000 + 1_000_000)
    engine = Engine(registry, None, config=EngineConfig(limits=limits, llm_answer=False))
    with tempfile.TemporaryDirectory(prefix="pte-bench-memory-") as tmp:
        path = Path(tmp) / "long.jsonl"
        small = _chain(args.steps)
        for i in range(args.runs):
            for text in [_big(args.big_kb), small] if i == args.runs // 2 else [small]:
                with AuditLog(path, durability="none") as audit:  # one run per session
                    result = engine.execute(text, audit)
                assert result.ok, result.message
        lines = path.read_bytes().splitlines()
        largest_record = max(len(line) for line in lines)
        run_sizes: dict[str, int] = {}
        for line in lines:
            run_id = json.loads(line).get("run_id", "")
            run_sizes[run_id] = run_sizes.get(run_id, 0) + len(line)
        largest_run = max(run_sizes.values())
        size = path.stat().st_size
        print(
            f"log: {len(lines):,} records, {size / 1e6:.1f} MB, {len(run_sizes)} runs; "
            f"largest record {largest_record / 1e3:.0f} KB, largest run {largest_run / 1e3:.0f} KB"
        )
        checks: dict[str, Callable[[], Any]] = {
            "audit show": lambda: _show(path),
            "verify": lambda: verify(path),
            "replay": lambda: _replay(path),
        }
        for name, func in checks.items():
            peak = _peak(func)
            print(
                f"  {name:<11} peak {peak / 1e6:6.1f} MB = {peak / largest_record:5.1f} x the largest "
                f"record, {peak / largest_run:5.1f} x the largest run, {peak / size:5.3f} x the log"
            )


if __name__ == "__main__":
    main()
