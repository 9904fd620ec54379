"""Benchmark: `pte replay` throughput (records/s) on a long log, next to the run that wrote it.

Generates one long run: a plan of --steps calculator and shaping steps (a chain: each
calculator step adds 1 to the previous one's value through a reference; every fourth step
is a `format_text` of the latest value), executed with `pte.Engine(...).execute`
into an `AuditLog` at a temp path (durability "none", so the figures are the engine's cost
and not the disk's). Each step writes two records, so the log has about 2 x steps records.

Then, over that same log, it times

- the baseline measured in the same run: the original execution (records written per second),
- plain `pte.verify(path)` (chain, canonical form and schema of every record),
- `pte.runs.replay_file(path)`: the engine re-driven from the log alone (recorded tool
  schemas, recorded policy, recorded outputs), every decision compared with the record,

and prints records/s for each and the ratios replay/execute and replay/verify. Replay is
the same engine as execution (compile, reference resolution, argument and output
validation), minus the tool calls and the file writes, plus one comparison per record.

    PYTHONPATH=. python bench/bench_replay.py [--steps 5000] [--repeat 3] [--keep FILE]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pte import AuditLog, Engine, EngineConfig, Registry, load_registry, verify
from pte.plan import Limits
from pte.runs import replay_file


def plan_text(steps: int) -> str:
    """A `steps`-step plan: a calculator chain, with a `format_text` of the latest value every 4th step."""
    doc_steps: list[dict[str, Any]] = []
    last_calc: str | None = None
    for i in range(steps):
        step_id = f"s{i}"
        if i % 4 == 3 and last_calc is not None:
            doc_steps.append(
                {
                    "id": step_id,
                    "tool": "format_text",
                    "args": {"template": "total {v}", "values": {"v": {"$ref": f"{last_calc}/value"}}},
                }
            )
            continue
        x: Any = {"$ref": f"{last_calc}/value"} if last_calc is not None else "0"
        doc_steps.append(
            {"id": step_id, "tool": "calculator", "args": {"expression": "x + 1", "variables": {"x": x}}}
        )
        last_calc = step_id
    return json.dumps({"pte_plan": "1", "steps": doc_steps, "result": {"$ref": f"{last_calc}/value"}})


def execute(registry: Registry, text: str, steps: int, path: Path) -> tuple[float, int, str]:
    """Run the plan into a fresh log at `path`; return (seconds, records written, final value)."""
    limits = Limits(max_steps=max(steps, 1000), max_bytes=max(len(text) * 2, 1_000_000), max_values=len(text))
    engine = Engine(registry, None, config=EngineConfig(limits=limits, llm_answer=False))
    path.unlink(missing_ok=True)
    with AuditLog(path, durability="none") as audit:
        started = time.perf_counter()
        result = engine.execute(text, audit)
        elapsed = time.perf_counter() - started
        records = audit.next_seq
    if not result.ok:
        raise SystemExit(f"the run failed closed: {result.reason} {result.message}")
    return elapsed, records, str(result.result)


def timed(func: Callable[[], Any]) -> tuple[float, Any]:
    """(seconds, return value) of one call."""
    started = time.perf_counter()
    value = func()
    return time.perf_counter() - started, value


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments, generate the log, time the three passes and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--steps", type=int, default=5000, help="plan steps (default 5000; 2 records each)")
    parser.add_argument("--repeat", type=int, default=3, help="timed passes of each kind (default 3)")
    parser.add_argument("--keep", metavar="FILE", help="keep the log in FILE (default: a temp file)")
    args = parser.parse_args(argv)
    if args.steps < 2 or args.repeat < 1:
        parser.error("--steps must be at least 2 and --repeat at least 1")

    registry = load_registry(["calculator", "shaping"])
    text = plan_text(args.steps)
    with tempfile.TemporaryDirectory(prefix="pte-bench-replay-") as tmp:
        path = Path(args.keep) if args.keep else Path(tmp) / "long-run.jsonl"
        runs: dict[str, list[float]] = {"execute": [], "verify": [], "replay": []}
        records = 0
        for _ in range(args.repeat):
            # Interleaved, so drifting machine load hits all three alike.
            seconds, records, value = execute(registry, text, args.steps, path)
            runs["execute"].append(seconds)
            seconds, report = timed(lambda: verify(path))
            if not report.ok:
                raise SystemExit(f"the log does not verify: {report.issue}")
            runs["verify"].append(seconds)
            seconds, replay = timed(lambda: replay_file(path))
            if not replay.ok or [r.outcome for r in replay.runs] != ["same"]:
                raise SystemExit(f"replay diverged:\n{replay.render()}")
            runs["replay"].append(seconds)
        size_mb = path.stat().st_size / 1e6

    rate = {name: records / statistics.median(t) for name, t in runs.items()}
    best = {name: records / min(t) for name, t in runs.items()}
    print(f"Python {platform.python_version()} on {platform.machine()} ({sys.platform})")
    print(
        f"log: {args.steps} steps, {records} records, {size_mb:.1f} MB (result {value}); "
        f"{args.repeat} interleaved pass(es) each"
    )
    labels = {
        "execute": "original execution (baseline: Engine.execute, log written)",
        "verify": "pte._audit._verify.verify (chain + canonical form + schema)",
        "replay": "pte._replay._replayer.replay_file (engine re-driven, every decision compared)",
    }
    print(f"  {'':<68} {'records/s':>11} {'best':>11}")
    for name, label in labels.items():
        print(f"  {label:<68} {rate[name]:11,.0f} {best[name]:11,.0f}")
    print(f"  replay / execute = {rate['replay'] / rate['execute']:.2f}x (median records/s)")
    print(f"  replay / verify  = {rate['replay'] / rate['verify']:.2f}x (median records/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
