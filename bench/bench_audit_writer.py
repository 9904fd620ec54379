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

    python bench/bench_audit_writer.py [--steps 2000] [--before REV]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from callgrind_segments import mark, segments, tree_at  # noqa: E402

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
        for i in range(n):
            args = {"x": i - 1}
            log.write(
                rec.step_started(step_id=f"s{i}", tool="noop", effect="read", args=args, plan_hash=plan_hash)
            )
            log.write(
                rec.step_finished(step_id=f"s{i}", tool="noop", status="ok", duration_ms=0.012, output=i)
            )

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
        from pte._audit._writer import _PLACEHOLDER
        from pte._core._canonical import checked_jcs

        self.steps = steps
        self.redactor = log.redactor
        self.started = rec.step_started(
            step_id="s7", tool="noop", effect="read", args={"x": 6}, plan_hash="a" * 64
        )
        self.finished = rec.step_finished(step_id="s7", tool="noop", status="ok", duration_ms=0.012, output=7)
        common = {"seq": 7, "run_id": "3" * 32, "ts": "2026-11-29T05:00:00.000000Z", "prev": "b" * 64}
        pair = (self.started, self.finished)
        self.records = [{**common, "type": r.type, **r.fields, "hash": _PLACEHOLDER} for r in pair]
        self.encodings = [checked_jcs(r) for r in self.records]
        self.fd = os.open(tmp / "parts.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def run(self) -> None:
        from pte._audit import records as rec
        from pte._audit._writer import _HASH_KEY, _PLACEHOLDER_MEMBER, _utc_now
        from pte._core import sha256_hex, without_member
        from pte._core._canonical import checked_jcs, numbers_as_jcs

        steps, records, encodings, redactor = self.steps, self.records, self.encodings, self.redactor
        prev = b"b" * 64
        lock = threading.Lock()
        for i in range(steps):
            rec.step_started(step_id="s7", tool="noop", effect="read", args={"x": i}, plan_hash="a" * 64)
            rec.step_finished(step_id="s7", tool="noop", status="ok", duration_ms=0.012, output=i)
        mark()
        for _ in range(steps):
            for r in (self.started, self.finished):
                {"seq": 7, "run_id": "3" * 32, "ts": _utc_now(), "type": r.type, "prev": "b" * 64, **r.fields}
        mark()
        for _ in range(steps):
            for record in records:
                numbers_as_jcs(record)
        mark()
        for _ in range(steps):
            for record in records:
                checked_jcs(record)
        mark()
        for _ in range(steps):
            for encoded in encodings:  # what canonical_if_clean adds to the walk and the encoding
                for secret in redactor._encoded_secrets:
                    _ = secret in encoded
                redactor._whole_check.Match(encoded.lower())
        mark()
        for _ in range(steps):
            for encoded in encodings:
                head, tail = without_member(encoded, _PLACEHOLDER_MEMBER)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--before", metavar="REV", help="also measure the code of this git revision")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--parts", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.steps, args.parts)
        return
    print(f"instructions per step ({args.steps} steps, two records each, redaction on; callgrind)")
    per_record = args.steps / (2 * args.steps + 1)  # the verified log: run_started + 2 per step
    if args.before:
        with tempfile.TemporaryDirectory() as tmp:
            floor, writer, verified = measure(args.steps, False, tree_at(args.before, Path(tmp)))
        print(f"  before ({args.before}): floor {floor:8.0f}   AuditLog.write {writer:8.0f}   "
              f"writer / floor {writer / floor:.2f}   "
              f"verify per record {verified * per_record:7.0f}")  # fmt: skip
    floor, writer, verified, *part_counts = measure(args.steps, True)
    verdict = "met" if writer / floor <= 3 else "MISSED"
    print(f"  now:{'':<{len(args.before or '') + 5}} floor {floor:8.0f}   AuditLog.write {writer:8.0f}   "
          f"writer / floor {writer / floor:.2f}   verify per record {verified * per_record:7.0f}"
          f"   (target writer / floor ≤ 3: {verdict})")  # fmt: skip
    print("\nwhere the writer's instructions per step go (each part alone, the same two records)")
    rest = writer
    for name, count in zip(PARTS, part_counts, strict=True):
        rest -= count
        print(f"  {name:<52} {count:8.0f}  {count / writer:5.1%}")
    print(f"  {'the rest: AuditLog.append bookkeeping and calls':<52} {rest:8.0f}  {rest / writer:5.1%}")
    print(f"  {'AuditLog.write':<52} {writer:8.0f}")


if __name__ == "__main__":
    main()
