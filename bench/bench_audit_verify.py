"""Benchmark: verify() throughput on a large audit log, against a parse-only baseline.

Writes a log of --records records (default 1,000,000) with AuditLog (durability "none"), in
runs of --run-size records shaped like real ones (run_started, llm_call, plan_accepted, pairs
of step_started/step_finished, run_finished). Then times, over the same file:

- the baseline: ``json.loads`` of every line, nothing else (parse-only);
- the floor: orjson parse + SHA-256 of every line, nothing else;
- ``verify(path)``: canonical form, hash chain, run structure and schema of every record
  (the fast path of pte/_audit/_fast.py where it proves a line, the reference path else);
- ``verify(path, check_schema=False)``: the same without the schema;
- ``verify(path)`` with the fast path off (the reference path alone, as before it).

Times are process CPU time (the machine is shared: wall time would measure the neighbours),
each the best of --repeat runs. It prints records/s, each as a ratio of the floor, and
whether verify() with the schema meets the 200k records/s target on one core. Then the wall
time of ``verify(path)`` in one process against ``verify(path, jobs=N)`` (--jobs, default
one per CPU as ``pte audit verify``: the file verified in N parts at once, pte/_audit/_parallel.py),
and whether that meets the target; wall time, so it needs a quiet machine (the load average
is printed). The floor of one process is the orjson parse + SHA-256 above; N processes
cannot beat N times it. Then the log size per run,
format 1 (the catalogue and policy inline in every ``run_started``) against format 2
(fingerprints, the catalogue and policy stored once per log), for a 30-tool catalogue and
the records of a real run. Usage:

    PYTHONPATH=. python bench/bench_audit_verify.py [--records N] [--run-size N] [--path FILE]
        [--repeat N] [--jobs N]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pte import AuditLog, verify
from pte.audit import VerifyReport, hash_json

PLAN = {
    "pte_plan": "1",
    "steps": [
        {"id": "inv", "tool": "list_overdue_invoices", "args": {"days": 30}},
        {
            "id": "total",
            "tool": "calculator",
            "args": {"expression": "sum(a)", "variables": {"a": {"$ref": "inv"}}},
        },
    ],
    "result": {"$ref": "total/value"},
}
TOOLS = [
    {"name": "list_overdue_invoices", "effect": "read", "idempotent": True, "timeout_s": 10},
    {"name": "calculator", "effect": "read", "idempotent": True, "timeout_s": 1},
]
FINISH: dict[str, Any] = {
    "status": "succeeded",
    "reason": None,
    "message": None,
    "answer": "Total overdue: 205.49",
    "result": "205.49",
    "llm_calls": 1,
}


def write_log(path: Path, records: int, run_size: int) -> None:
    """Append `records` records to `path`, in runs of about `run_size` records."""
    plan_hash = hash_json(PLAN)
    written = 0
    run = 0
    while written < records:
        # A run needs at least run_started and run_finished; the last run takes what is left.
        size = min(run_size, records - written)
        with AuditLog(path, run_id=f"run{run:08d}", durability="none") as log:
            log.append("run_started", mode="run", request="remind overdue invoices", tools=TOOLS, config={})
            body = size - 2
            if body >= 2:
                log.append(
                    "llm_call",
                    role="planner",
                    model="bench",
                    messages=[{"role": "user", "content": "remind overdue invoices"}],
                    response_format="json_schema",
                    response=json.dumps(PLAN),
                    finish_reason="stop",
                    usage={"prompt_tokens": 800, "completion_tokens": 120, "total_tokens": 920},
                    error=None,
                    attempts=1,
                    duration_ms=900.0,
                )
                log.append(
                    "plan_accepted", origin="planner", plan_hash=plan_hash, plan=PLAN, order=["inv", "total"]
                )
                body -= 2
            steps = 0
            while body >= 2:
                log.append(
                    "step_started",
                    step_id="inv",
                    tool="list_overdue_invoices",
                    effect="read",
                    args={"days": 30, "n": steps},
                    plan_hash=plan_hash,
                )
                log.append(
                    "step_finished",
                    step_id="inv",
                    tool="list_overdue_invoices",
                    status="ok",
                    output={"ids": [101, 102, 107], "amounts": ["120.00", "75.50", "9.99"]},
                    duration_ms=3.2,
                )
                body -= 2
                steps += 1
            if body == 1:
                log.append(
                    "approval", plan_hash=plan_hash, by="bench", at="2026-11-22T02:30:31Z", signed=False
                )
            if size >= 2:
                log.append("run_finished", steps_run=steps, **FINISH)
            written += size
            run += 1


def parse_only(path: Path) -> int:
    """The baseline: parse every line, check nothing."""
    count = 0
    loads = json.loads
    with open(path, "rb") as fh:
        for line in fh:
            loads(line)
            count += 1
    return count


def parse_only_orjson(path: Path) -> int:
    """A second baseline: orjson, the parser verify uses."""
    import orjson

    count = 0
    loads = orjson.loads
    with open(path, "rb") as fh:
        for line in fh:
            loads(line)
            count += 1
    return count


def floor(path: Path) -> int:
    """The floor of any verifier of this format in CPython: parse each line (orjson) and
    SHA-256 it, nothing else (no canonical check, no chain, no schema)."""
    import hashlib

    import orjson

    count = 0
    loads = orjson.loads
    sha256 = hashlib.sha256
    with open(path, "rb") as fh:
        for line in fh:
            loads(line)
            sha256(line).hexdigest()
            count += 1
    return count


TARGET = 200_000  # records/s for verify() with the schema check (issue 14)


def run_sizes() -> tuple[int, int, int, int, int, int]:
    """Bytes per run for a 30-tool catalogue.

    (format 1 run, format 2 first run, format 2 later run, tools, format 1 run_started,
    format 2 later run_started).
    """
    from pte import Policy, Registry
    from pte._catalogue import run_started_fields
    from pte._cli import demo_registry
    from pte._core import canonical_bytes
    from pte.catalogue import ToolSpec

    demo = demo_registry()
    entries = demo.describe()
    extra = [
        ToolSpec.from_record({**entries[i], "name": f"{entries[i]['name']}_copy"})
        for i in range(30 - len(entries))
    ]
    registry = Registry([*demo, *extra])
    policy = Policy.from_registry(registry).to_document()
    sample = Path(__file__).resolve().parents[1] / "audit_samples" / "success.jsonl"
    rest = sum(len(line) for line in sample.read_bytes().splitlines(keepends=True)[1:])
    common = {
        "seq": 0,
        "run_id": "0" * 32,
        "ts": "2026-11-22T02:30:31.123456Z",
        "prev": "0" * 64,
        "hash": "0" * 64,
    }
    request, config = (
        "How much is outstanding on invoice INV-1006?",
        {"max_replans": 2, "model": "gpt-4o-mini"},
    )
    v1 = {
        **common,
        "type": "run_started",
        "mode": "run",
        "request": request,
        "tools": registry.describe(),
        "config": {**config, "policy": policy},
    }
    fields = run_started_fields(registry, policy)
    v2 = {
        **common,
        "type": "run_started",
        "format": "pte-audit/2",
        "pte_version": "0.1.0",
        "mode": "run",
        "request": request,
        "config": config,
        **fields,
    }
    v2_later = {**v2, "stored": {}}
    size = lambda record: len(canonical_bytes(record)) + 1  # noqa: E731
    return size(v1) + rest, size(v2) + rest, size(v2_later) + rest, len(registry), size(v1), size(v2_later)


def timed(fn: Callable[[], Any], repeat: int = 1) -> tuple[float, Any]:
    """Best process CPU time of `repeat` calls, and the last result."""
    best = float("inf")
    result = None
    for _ in range(repeat):
        start = time.process_time()
        result = fn()
        best = min(best, time.process_time() - start)
    return best, result


def reference_verify(path: Path) -> VerifyReport:
    """verify() with the fast path off: every line through the reference checks."""
    import pte._audit._scan as audit_verify

    compiled = audit_verify._fast_path
    audit_verify._fast_path = lambda: None  # type: ignore[assignment]
    try:
        return verify(path)
    finally:
        audit_verify._fast_path = compiled


def wall(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    """Best wall-clock time of `repeat` calls (work in other processes counts), and the last result."""
    best = float("inf")
    result = None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def in_parts(path: Path, count: int, jobs: int, repeat: int, floor_rate: float) -> bool:
    """Wall time of verify() in one process and in `jobs` parts (pte._audit._parallel)."""
    one_s, _ = wall(lambda: verify(path), repeat)
    parts_s, report = wall(lambda: verify(path, jobs=jobs), repeat)
    if not report.ok or report.records != count:
        print(f"verify(jobs={jobs}) failed: {report.to_dict()}", file=sys.stderr)
        return False
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    rate = count / parts_s
    print(
        f"\nverify in parts (as `pte audit verify`: one process per CPU), wall time, best of {repeat}, "
        f"load average {load:.2f}:"
    )
    print(f"  verify(), one process        {one_s:>7.2f} s {count / one_s:>12,.0f} records/s")
    print(
        f"  verify(jobs={jobs})              {parts_s:>7.2f} s {rate:>12,.0f} records/s "
        f"({one_s / parts_s:.2f}x one process; the floor on {jobs} cores would be {jobs * floor_rate:,.0f}/s)"
    )
    print(
        f"verify(jobs={jobs}) with the schema check: {rate:,.0f} records/s on {jobs} processes; "
        f"target {TARGET:,}/s: {'met' if rate >= TARGET else 'MISSED'}"
    )
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--records", type=int, default=1_000_000, help="records to write (default 1,000,000)")
    parser.add_argument("--run-size", type=int, default=1000, help="records per run (default 1000)")
    parser.add_argument(
        "--path", type=Path, help="write the log here and keep it (default: a temporary file)"
    )
    parser.add_argument("--log", type=Path, help="measure this existing bench log instead of writing one")
    parser.add_argument("--repeat", type=int, default=2, help="runs of each phase; the best counts")
    parser.add_argument(
        "--jobs",
        type=int,
        default=min(os.cpu_count() or 1, 8),
        help="processes for verify in parts (default: one per CPU, up to 8, as `pte audit verify`)",
    )
    args = parser.parse_args(argv)
    if args.records < 2 or args.run_size < 2:
        parser.error("--records and --run-size must be at least 2")

    tmp = None
    if args.log is not None:
        path = args.log
    elif args.path is None:
        tmp = tempfile.TemporaryDirectory(prefix="pte-bench-")
        path = Path(tmp.name) / "audit.jsonl"
    else:
        path = args.path
        if path.exists():
            parser.error(f"{path} exists; give a new file")
    try:
        rows: list[tuple[str, float]] = []
        if args.log is None:
            write_s, _ = timed(lambda: write_log(path, args.records, args.run_size))
            rows.append(("write (AuditLog, durability none)", write_s))
        size_mb = os.path.getsize(path) / 1e6
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        repeat = max(1, args.repeat)
        verify(path, check_schema=False)  # compile the schema once, outside the timings
        base_s, count = timed(lambda: parse_only(path), repeat)
        rows.append(("baseline: json.loads per line", base_s))
        orjson_s, _ = timed(lambda: parse_only_orjson(path), repeat)
        rows.append(("baseline: orjson.loads per line", orjson_s))
        floor_s, _ = timed(lambda: floor(path), repeat)
        rows.append(("floor: orjson.loads + sha256 per line", floor_s))
        phases: list[tuple[str, Callable[[], VerifyReport]]] = [
            ("verify()", lambda: verify(path)),
            ("verify(check_schema=False)", lambda: verify(path, check_schema=False)),
            ("verify(), reference path only", lambda: reference_verify(path)),
        ]
        for label, run in phases:
            seconds, report = timed(run, repeat)
            assert isinstance(report, VerifyReport)
            if not report.ok or report.records != count:
                print(f"verify failed: {report.to_dict()}", file=sys.stderr)
                return 1
            rows.append((label, seconds))

        floor_rate = count / floor_s
        print(
            f"audit log: {count:,} records, {size_mb:,.1f} MB, runs of {args.run_size}; "
            f"{os.cpu_count()} CPUs, load average {load:.2f} at the start; process CPU time, best of {repeat}"
        )
        print(f"{'phase':<38} {'CPU s':>8} {'records/s':>12} {'vs floor':>9}")
        for label, seconds in rows:
            rate = count / seconds
            print(f"{label:<38} {seconds:>8.2f} {rate:>12,.0f} {rate / floor_rate:>8.3f}x")
        verify_rate = count / dict(rows)["verify()"]
        reference_rate = count / dict(rows)["verify(), reference path only"]
        print(
            f"verify() with the schema check: {verify_rate:,.0f} records/s on one core, "
            f"{verify_rate / floor_rate:.2f}x the floor ({floor_rate:,.0f}/s), "
            f"{verify_rate / reference_rate:.2f}x the reference path ({reference_rate:,.0f}/s); "
            f"target {TARGET:,}/s on one core: {'met' if verify_rate >= TARGET else 'MISSED'}"
        )
        if not in_parts(path, count, args.jobs, repeat, floor_rate):
            return 1
        v1, first, later, tools, v1_started, v2_started = run_sizes()
        print(f"\nlog size per run, {tools}-tool catalogue (a run like audit_samples/success.jsonl):")
        print(f"  format 1 (catalogue and policy in every run_started): {v1:>9,} bytes")
        print(f"  format 2, the log's first run (stores them):          {first:>9,} bytes")
        print(
            f"  format 2, every later run (refers to them by hash):   {later:>9,} bytes "
            f"({later / v1:.2f}x, {100 * (1 - later / v1):.0f}% smaller)"
        )
        print(
            f"  run_started alone: {v1_started:,} -> {v2_started:,} bytes ({v2_started / v1_started:.2f}x); "
            "the rest is mostly the planner prompt, which lists the catalogue for the LLM"
        )
    finally:
        if tmp is not None:
            tmp.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
