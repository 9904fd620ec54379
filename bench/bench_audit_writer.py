"""The audit writer against its floor, counted in instructions (valgrind's callgrind).

A step writes two records. The floor is what a record cannot avoid: encode (canonical JSON),
hash (SHA-256) and append (one write) — `bench_executor.floor_timing`. The writer is
`AuditLog.write` of the two records a step of a chain writes (`step_started` with its
arguments, `step_finished` with its output), redaction on, as the executor calls it, the
record builders included. Both run N steps in one child process under callgrind, each in its
own segment (`callgrind_segments`): instructions per step, and the ratio writer / floor,
the figure to bring down (target ≤ 3). Instruction counts do not move with other processes'
load, which wall time on a shared two-CPU machine does (docs/benchmarks.md).

Then where a step's instructions go: each part of the writer's work run alone on the same
two records, N times, in its own segment (record building, the timestamp and common fields,
the type and number walk, canonical JSON, the redaction check, hashing, the file write, the
lock); what is left of `AuditLog.write` is its own bookkeeping and calls. And the verifier:
`verify` of the log the writer wrote, in instructions per record.

``--before REV``: the same floor and writer, in the same run, on the code of an earlier
revision of this repository (git archive), for a before/after.

Then the same segments timed (``--repeat`` runs of the child's work in this process, wall
and process CPU time, medians): the writer / floor ratio by time beside the one by
instructions, and each part's instructions per ns of CPU time. The two ratios disagree
because an instruction is not a unit of time: callgrind's virtual CPU has no SHA
extensions, so OpenSSL's SHA-256 runs a software path there (about 14k instructions for a
300-byte record, about 1 µs natively with SHA-NI), and orjson's C runs many instructions per
cycle, while the interpreter's own work (dicts, calls, attribute reads) runs few; the floor
is mostly hashing and encoding, the writer's work above it mostly interpreter. Kernel time
(the write system calls) is in neither count of instructions but in both times.

    python bench/bench_audit_writer.py [--steps 2000] [--before REV] [--repeat 9] [--time-only]
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from callgrind_segments import mark, segment_events, segments, tree_at  # noqa: E402

#: The parts of a step's writing measured alone, in the order the child runs them.
PARTS = [
    "record building (the two Record builders)",
    "timestamp and common fields",
    "types and numbers (one walk)",
    "canonical JSON (orjson, sorted keys)",
    "redaction check (secrets, RE2 keyword + key set)",
    "hashing (cut the hash member, SHA-256, the line)",
    "file write (lseek + write)",
    "lock (threading.Lock)",
]


def child(steps: int, parts: bool) -> None:
    import bench_executor as b

    from pte import AuditLog, verify
    from pte._audit import records as rec

    tmp = Path(tempfile.mkdtemp())
    log = b.begun(AuditLog(tmp / "warm.jsonl", durability="none"))
    plan_hash = "a" * 64

    def write(n: int) -> None:
        # As the executor writes a read step's records: both at once (`write_records`), or
        # one by one on a revision without it (`--before`).
        together = getattr(log, "write_records", None)
        for i in range(n):
            args = {"x": i - 1}
            started = rec.step_started(
                step_id=f"s{i}", tool="noop", effect="read", args=args, plan_hash=plan_hash
            )
            finished = rec.step_finished(
                step_id=f"s{i}", tool="noop", status="ok", duration_ms=0.012, output=i
            )
            if together is not None:
                together([started, finished])
            else:
                log.write(started)
                log.write(finished)

    b.floor_timing(tmp, 20)  # warm-up: caches of the rules, the DFA, the allocator
    write(20)
    verify(log.path)
    log.close()
    log = b.begun(AuditLog(tmp / "a.jsonl", durability="none"))
    each_part = Parts(steps, log, tmp) if parts else None
    mark()
    b.floor_timing(tmp, steps)
    mark()
    write(steps)
    mark()
    verify(log.path)  # the log just written: 1 + 2 * steps records
    mark()
    if each_part is not None:
        each_part.run()  # one segment per part, the first begun by the mark above
    log.close()
    shutil.rmtree(tmp)


class Parts:
    """Each part of writing a step's two records alone, `steps` times: `run` ends a segment
    after each (the data they work on is made here, before the first segment)."""

    def __init__(self, steps: int, log: Any, tmp: Path) -> None:
        from pte._audit import records as rec
        from pte._audit._writer import _PLACEHOLDER, _PLACEHOLDER_CUT
        from pte._core._canonical import checked_jcs

        self.steps = steps
        self.redactor = log.redactor
        self.started = rec.step_started(
            step_id="s7", tool="noop", effect="read", args={"x": 6}, plan_hash="a" * 64
        )
        self.finished = rec.step_finished(step_id="s7", tool="noop", status="ok", duration_ms=0.012, output=7)
        common = {"seq": 7, "run_id": "3" * 32, "ts": "2026-11-29T05:00:00.000000Z", "prev": "b" * 64}
        pair = (self.started, self.finished)
        self.records = [dict(r.fields, **common, type=r.type, hash=_PLACEHOLDER) for r in pair]
        self.encodings = [checked_jcs(r) for r in self.records]
        #: What the redaction check searches: the encodings without the placeholder hash member.
        self.searched = [part for encoded in self.encodings for part in encoded.split(_PLACEHOLDER_CUT)]
        self.fd = os.open(tmp / "parts.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def run(self) -> None:
        from pte._audit import records as rec
        from pte._audit._writer import _HASH_KEY, _PLACEHOLDER_CUT, _utc_now
        from pte._core import sha256_hex
        from pte._core._canonical import checked_jcs, numbers_as_jcs

        steps, records, encodings, redactor = self.steps, self.records, self.encodings, self.redactor
        prev = b"b" * 64
        lock = threading.Lock()
        for i in range(steps):
            rec.step_started(step_id="s7", tool="noop", effect="read", args={"x": i}, plan_hash="a" * 64)
            rec.step_finished(step_id="s7", tool="noop", status="ok", duration_ms=0.012, output=i)
        mark()
        for _ in range(steps):
            ts = _utc_now()  # one timestamp for a step's pair (`write_records`)
            for r in (self.started, self.finished):
                _ = dict(r.fields, seq=7, run_id="3" * 32, ts=ts, type=r.type, prev="b" * 64, hash="0" * 64)
        mark()
        for _ in range(steps):
            for r in (self.started, self.finished):
                numbers_as_jcs(r.fields)  # the log's own common fields are checked once a batch
        mark()
        for _ in range(steps):
            for record in records:
                checked_jcs(record)
        mark()
        for _ in range(steps):
            # What `Redactor.clean` adds to the walk and the encodings: one search for the pair.
            joined = b"\n".join(self.searched)
            for secret in redactor._encoded_secrets:
                _ = secret in joined
            redactor._whole_check.Match(joined if joined.isascii() else joined.lower())
        mark()
        for _ in range(steps):
            for encoded in encodings:
                head, tail = encoded.split(_PLACEHOLDER_CUT)
                digest = sha256_hex(b"".join((prev, head, tail)))
                b"".join((head, _HASH_KEY, digest.encode("ascii"), b'",', tail, b"\n"))
        mark()
        for _ in range(steps):
            for encoded in encodings:
                os.lseek(self.fd, 0, os.SEEK_END)
                os.write(self.fd, encoded + b"\n")
        mark()
        for _ in range(steps):
            for _record in records:
                with lock:
                    pass
        mark()
        os.close(self.fd)


def measure(steps: int, parts: bool, tree: Path | None = None) -> list[float]:
    """Instructions per step of each segment the child marks."""
    argv = [__file__, "--child", "--steps", str(steps)] + (["--parts"] if parts else [])
    env = {"PYTHONPATH": str(tree)} if tree is not None else None
    return [count / steps for count in segments(argv, env)]


def timed(steps: int, repeat: int) -> tuple[list[float], list[float]]:
    """The child's segments timed in this process, `repeat` times: µs per step of each, wall
    and process CPU time, medians (the child's work is the same one callgrind counts)."""
    global mark
    counted = mark
    runs: list[list[tuple[float, float]]] = []
    stamps: list[tuple[float, float]] = []

    def stamp() -> None:
        stamps.append((time.perf_counter(), time.process_time()))

    mark = stamp
    try:
        for _ in range(repeat):
            stamps.clear()
            child(steps, True)
            runs.append(list(stamps))
    finally:
        mark = counted
    segments_of = [[(b[0] - a[0], b[1] - a[1]) for a, b in itertools.pairwise(run)] for run in runs]
    count = len(segments_of[0])

    def median(pick: Callable[[tuple[float, float]], float]) -> list[float]:
        return [statistics.median(pick(run[k]) for run in segments_of) / steps * 1e6 for k in range(count)]

    return median(lambda seg: seg[0]), median(lambda seg: seg[1])


def cache_sim(steps: int) -> None:
    """Why the whole write runs fewer instructions per ns than its parts alone: per step, L1
    instruction and data misses and mispredicted branches (callgrind's simulation of them)."""
    argv = [__file__, "--child", "--steps", str(steps), "--parts"]
    rows = segment_events(argv, simulate=True)
    names = ["floor", "AuditLog.write", "verify", *PARTS]
    print(f"callgrind's cache and branch simulation, per step ({steps} steps)")
    print(f"  {'':<52} {'instr.':>8} {'L1i miss':>9} {'L1d miss':>9} {'mispred.':>9}")
    sums = [0.0, 0.0, 0.0, 0.0]
    for k, (name, row) in enumerate(zip(names, rows, strict=False)):
        figures = [
            row.get("Ir", 0) / steps,
            row.get("I1mr", 0) / steps,
            (row.get("D1mr", 0) + row.get("D1mw", 0)) / steps,
            (row.get("Bcm", 0) + row.get("Bim", 0)) / steps,
        ]
        if k >= 3:
            sums = [a + b for a, b in zip(sums, figures, strict=True)]
        print(f"  {name:<52} " + " ".join(f"{f:9.0f}" for f in figures))
    print(f"  {'the parts, summed':<52} " + " ".join(f"{f:9.0f}" for f in sums))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--before", metavar="REV", help="also measure the code of this git revision")
    parser.add_argument("--repeat", type=int, default=9, help="timed runs of the same work (medians)")
    parser.add_argument("--time-only", action="store_true", help="only the timed measurement (no valgrind)")
    parser.add_argument(
        "--cache-sim",
        action="store_true",
        help="only callgrind's cache and branch simulation: misses per step, the write against its parts",
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--parts", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.steps, args.parts)
        return
    if args.cache_sim:
        cache_sim(args.steps)
        return
    per_record = args.steps / (2 * args.steps + 1)  # the verified log: run_started + 2 per step
    counts: list[float] | None = None
    if not args.time_only:
        print(f"instructions per step ({args.steps} steps, two records each, redaction on; callgrind)")
        if args.before:
            with tempfile.TemporaryDirectory() as tmp:
                floor, writer, verified = measure(args.steps, False, tree_at(args.before, Path(tmp)))
            print(f"  before ({args.before}): floor {floor:8.0f}   AuditLog.write {writer:8.0f}   "
                  f"writer / floor {writer / floor:.2f}   "
                  f"verify per record {verified * per_record:7.0f}")  # fmt: skip
        counts = measure(args.steps, True)
        floor, writer, verified = counts[:3]
        verdict = "met" if writer / floor <= 3 else "MISSED"
        print(f"  now:{'':<{len(args.before or '') + 5}} floor {floor:8.0f}   AuditLog.write {writer:8.0f}   "
              f"writer / floor {writer / floor:.2f}   verify per record {verified * per_record:7.0f}"
              f"   (target writer / floor ≤ 3: {verdict})")  # fmt: skip
    load = os.getloadavg()[0]
    wall, cpu = timed(args.steps, args.repeat)
    print(f"\ntimed, the same work in this process ({args.repeat} runs, medians, µs per step; "
          f"load average {load:.2f} at the start, {os.cpu_count()} CPUs)")  # fmt: skip
    verdict = "met" if cpu[1] / cpu[0] <= 3 else "MISSED"
    print(f"  floor {cpu[0]:6.1f} CPU ({wall[0]:6.1f} wall)   AuditLog.write {cpu[1]:6.1f} CPU "
          f"({wall[1]:6.1f} wall)   writer / floor {cpu[1] / cpu[0]:.2f} by CPU time "
          f"({wall[1] / wall[0]:.2f} by wall; target ≤ 3: {verdict} by CPU time)   "
          f"verify {cpu[2] * per_record:5.2f} µs CPU per record")  # fmt: skip
    names = ["floor", "AuditLog.write", *PARTS]
    print("\nwhere a step's writing goes (each part alone, the same two records), both measures")
    print(f"  {'':<52} {'instr.':>8} {'share':>6}   {'CPU µs':>7} {'share':>6}   instr. per ns")
    rest_count = counts[1] if counts else 0.0
    rest_cpu = cpu[1]
    for k, name in enumerate(names):
        at = k if k < 2 else k + 1  # the parts come after floor, write and verify
        count = counts[at] if counts else float("nan")
        if k >= 2:
            rest_count -= count
            rest_cpu -= cpu[at]
        print(f"  {name:<52} {count:8.0f} {count / (counts[1] if counts else 1):6.1%}   "
              f"{cpu[at]:7.2f} {cpu[at] / cpu[1]:6.1%}   {count / cpu[at] / 1000:5.2f}")  # fmt: skip
    name = "the rest: AuditLog.append bookkeeping and calls"
    print(f"  {name:<52} {rest_count:8.0f} {rest_count / (counts[1] if counts else 1):6.1%}   "
          f"{rest_cpu:7.2f} {rest_cpu / cpu[1]:6.1%}")  # fmt: skip


if __name__ == "__main__":
    main()
