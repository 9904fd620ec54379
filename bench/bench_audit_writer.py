"""The audit writer against its floor, counted in instructions (valgrind's callgrind).

A step writes two records. The floor is what a record cannot avoid: encode (canonical JSON),
hash (SHA-256) and append (one write) — `bench_executor.floor_timing`. The writer is
`AuditLog.write` of the two records a step of a chain writes (`step_started` with its
arguments, `step_finished` with its output), redaction on, as the executor calls it. Each is
run N times in a child process under callgrind, and so is the same child doing nothing after
its imports; instructions per step are (mode - nothing) / N, and the ratio writer / floor is
the figure to bring down (target ≤ 3). Instruction counts do not move with other processes'
load, which wall time on a shared two-CPU machine does (docs/benchmarks.md).

    python bench/bench_audit_writer.py [--steps 2000]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def child(mode: str, steps: int) -> None:
    sys.path.insert(0, str(HERE))
    import bench_executor as b

    from pte import AuditLog
    from pte._audit import records as rec

    tmp = Path(tempfile.mkdtemp())
    log = b.begun(AuditLog(tmp / "a.jsonl", durability="none"))
    plan_hash = "a" * 64
    if mode == "floor":
        b.floor_timing(tmp, steps)
    elif mode == "writer":
        for i in range(steps):
            args = {"x": i - 1}
            log.write(
                rec.step_started(step_id=f"s{i}", tool="noop", effect="read", args=args, plan_hash=plan_hash)
            )
            log.write(
                rec.step_finished(step_id=f"s{i}", tool="noop", status="ok", duration_ms=0.012, output=i)
            )
    log.close()
    shutil.rmtree(tmp)


def instructions(mode: str, steps: int) -> int:
    done = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, __file__,
         "--child", mode, "--steps", str(steps)],
        capture_output=True, text=True, check=True, env={**os.environ, "PYTHONHASHSEED": "0"},
    )  # fmt: skip
    found = re.search(r"Collected : ([\d,]+)", done.stderr)
    if found is None:
        raise SystemExit(f"no instruction count from callgrind:\n{done.stderr[-2000:]}")
    return int(found.group(1).replace(",", ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--child", choices=["nothing", "floor", "writer"])
    args = parser.parse_args()
    if args.child:
        child(args.child, args.steps)
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("needs valgrind (Debian's valgrind package)")
    counts = {mode: instructions(mode, args.steps) for mode in ("nothing", "floor", "writer")}
    floor = (counts["floor"] - counts["nothing"]) / args.steps
    writer = (counts["writer"] - counts["nothing"]) / args.steps
    print(f"instructions per step ({args.steps} steps, two records each, redaction on)")
    print(f"  floor (encode + hash + append)   {floor:10.0f}")
    print(f"  AuditLog.write                   {writer:10.0f}")
    print(
        f"  writer / floor = {writer / floor:.2f}; target ≤ 3: {'met' if writer / floor <= 3 else 'MISSED'}"
    )


if __name__ == "__main__":
    main()
