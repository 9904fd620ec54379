"""A run killed at a random point (SIGKILL) leaves a log that verifies up to its last complete record.

A child process runs `Engine.execute` over a ~30-step plan mixing `read` tools and a
`write` tool whose side effect is a line appended to a file; the parent kills it with
SIGKILL at a random point: once a random number of records (none to all) have reached the
file, after a further random few milliseconds, so the kill lands anywhere in a step, before,
during or after its effect, however slow the machine is. Whatever the moment of death:

- `verify` finds nothing wrong but, at most, a partial last line or an unfinished run, and
  counts every complete line as a verified record;
- no `step_finished` appears without its `step_started` before it;
- write-ahead: every side-effect line has the `step_started` of its write step in the log
  (the intent was logged before the effect happened), and no step performed it twice.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from pte import verify
from pte.audit import read_records

REPO = Path(__file__).resolve().parents[2]
ITERATIONS = 10
STEPS = 30
PARALLEL = 4

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL (POSIX)"),
]

CHILD = textwrap.dedent(
    """
    import json, os, sys, time
    from pte._audit._writer import AuditLog
    from pte._run._engine import Engine
    from pte._catalogue._registry import Registry; from pte._catalogue._tool_decorator import tool

    LOG, EFFECTS, STEPS = sys.argv[1], sys.argv[2], int(sys.argv[3])

    @tool
    def lookup(i: int) -> int:
        time.sleep(0.004)
        return i * 2

    @tool(effect="write")
    def append_line(tag: str) -> bool:
        # Sleep on both sides of the effect so kills land before, during and after it.
        time.sleep(0.003)
        fd = os.open(EFFECTS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (tag + "\\n").encode())
        finally:
            os.close(fd)
        time.sleep(0.003)
        return True

    steps = []
    for i in range(STEPS):
        if i % 3 == 2:
            step = {"id": f"w{i}", "tool": "append_line", "args": {"tag": f"w{i}"}}
        else:
            step = {"id": f"r{i}", "tool": "lookup", "args": {"i": i}}
        if steps:
            step["after"] = [steps[-1]["id"]]
        steps.append(step)
    text = json.dumps({"pte_plan": "1", "steps": steps, "result": {"$ref": steps[0]["id"]}})
    engine = Engine(Registry([lookup, append_line]))
    log = AuditLog(LOG, durability="batch")
    print("ready", flush=True)
    run = engine.execute(text, log)
    log.close()
    print(run.status, flush=True)
    """
)


def _lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def _run_and_kill(tmp: Path, point: tuple[int, float]) -> tuple[Path, Path, bool]:
    """Start the child; once `records` records are in its log (or it has ended), wait `delay` s
    more and kill it; return log, effects file, whether it finished."""
    records, delay = point
    log, effects = tmp / "audit.jsonl", tmp / "effects.txt"
    script = tmp / "child.py"
    script.write_text(CHILD, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with open(tmp / "stderr.txt", "wb") as stderr:
        proc = subprocess.Popen(
            [sys.executable, str(script), str(log), str(effects), str(STEPS)],
            stdout=subprocess.PIPE,
            stderr=stderr,
            cwd=REPO,
            env=env,
        )
        try:
            assert proc.stdout is not None
            ready = proc.stdout.readline()
            assert ready == b"ready\n", (ready, (tmp / "stderr.txt").read_text())
            deadline = time.monotonic() + 60
            while _lines(log) < records and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.001)
            time.sleep(delay)
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    finished = proc.returncode == 0
    return log, effects, finished


def _check(log: Path, effects: Path) -> dict[str, Any]:
    raw = log.read_bytes() if log.exists() else b""
    complete_lines = raw.count(b"\n")
    report = verify(log) if log.exists() else None
    if report is not None:
        # Only the crash may show: a record cut mid-write, or a run with no run_finished.
        if report.issue is not None:
            message = report.issue.message
            assert message.startswith(("partial last line", "incomplete:")), str(report.issue)
            if message.startswith("partial last line"):
                assert report.issue.line == complete_lines + 1
        assert report.records == complete_lines, (report, complete_lines)

    records = read_records(log, skip_partial_tail=True) if log.exists() else []
    started: dict[str, int] = {}
    finished: dict[str, dict[str, Any]] = {}
    for index, record in enumerate(records):
        if record["type"] == "step_started":
            assert record["step_id"] not in started, f"{record['step_id']} started twice"
            started[record["step_id"]] = index
        elif record["type"] == "step_finished":
            sid = record["step_id"]
            assert sid in started and started[sid] < index, f"{sid} finished with no step_started before it"
            finished[sid] = record

    lines = effects.read_text(encoding="utf-8").splitlines() if effects.exists() else []
    assert len(lines) == len(set(lines)), f"a write happened twice: {lines}"
    for tag in lines:
        # Write-ahead: the side effect exists only if its intent was logged first.
        assert tag in started, f"side effect {tag!r} has no step_started in the log"
        assert records[started[tag]]["tool"] == "append_line"
        assert records[started[tag]]["effect"] == "write"
    for sid, record in finished.items():
        if sid.startswith("w") and record["status"] == "ok":
            assert sid in lines, f"{sid} is logged as done but its effect is missing"
    sealed = any(r["type"] == "run_finished" for r in records)
    return {"records": len(records), "started": len(started), "effects": len(lines), "sealed": sealed}


def test_sigkill_at_random_points_leaves_a_verifiable_write_ahead_log(tmp_path: Path) -> None:
    rng = random.Random(20261122)
    # ~30 steps of a few ms each, 63 records: the kill comes after 0 to 63 of them are written
    # and 0-12 ms more (about two steps), so most kills land mid-run, a few at the very start
    # or after the last step; counted in records, not seconds, so a busy machine moves none.
    total = 2 + 2 * STEPS + 1
    points = [(rng.randint(0, total), rng.uniform(0.0, 0.012)) for _ in range(ITERATIONS)]
    dirs = [tmp_path / f"run{i}" for i in range(ITERATIONS)]
    for directory in dirs:
        directory.mkdir()
    started = time.monotonic()
    # Children spend most of their life importing; running a few at once keeps the loop short.
    with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
        runs = list(pool.map(_run_and_kill, dirs, points))
    outcomes = []
    for (log, effects, _), (records, delay) in zip(runs, points, strict=True):
        outcome = _check(log, effects)
        outcome["after"] = records
        outcome["delay"] = round(delay, 4)
        outcomes.append(outcome)
    assert time.monotonic() - started < 60, f"crash loop too slow: {outcomes}"
    # The loop proved something only if kills did land in the middle of runs, after side effects.
    mid_run = [o for o in outcomes if not o["sealed"] and o["started"] > 0]
    assert len(mid_run) >= 3, f"too few kills landed mid-run: {outcomes}"
    assert any(o["effects"] > 0 for o in mid_run), outcomes
