"""Instructions counted by valgrind's callgrind, in segments of one child process.

A child marks where each segment begins and where the last one ends with `mark()`: a call
of ``os.getppid``, before which callgrind is told to dump its counters
(``--dump-before=os_getppid``, the C function behind it; a CPython whose symbols valgrind
can read is needed). The parent reads each dump's total, so one run under valgrind measures
several things after one import, without counting the imports. Instruction counts do not
move with other processes' load, which wall time on a shared machine does.

`tree_at` gives an earlier revision of this repository as a directory, so a bench can run
the same child against the code before and after a change in one run (PYTHONPATH).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def mark() -> None:
    """The start of the next segment (and the end of the one before)."""
    os.getppid()


def segments(argv: Sequence[str], env: Mapping[str, str] | None = None) -> list[int]:
    """Run ``python argv...`` under callgrind; the instructions of each segment between two
    `mark` calls, in order (what runs before the first mark and after the last is dropped)."""
    return [counts["Ir"] for counts in segment_events(argv, env)]


def segment_events(
    argv: Sequence[str], env: Mapping[str, str] | None = None, *, simulate: bool = False
) -> list[dict[str, int]]:
    """`segments` with every event callgrind counted per segment: ``Ir`` (instructions) and,
    with `simulate`, its cache and branch simulation's (``I1mr``: L1 instruction misses,
    ``D1mr``/``D1mw``: L1 data misses, ``Bcm``/``Bim``: mispredicted branches, ...)."""
    if shutil.which("valgrind") is None:
        raise SystemExit("needs valgrind (Debian's valgrind package)")
    simulation = ["--cache-sim=yes", "--branch-sim=yes"] if simulate else []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cg"
        done = subprocess.run(
            ["valgrind", "--tool=callgrind", *simulation, "--dump-before=os_getppid",
             f"--callgrind-out-file={out}", sys.executable, *argv],
            capture_output=True, text=True, env={**os.environ, **(env or {}), "PYTHONHASHSEED": "0"},
        )  # fmt: skip
        if done.returncode != 0:
            raise SystemExit(f"the child failed under callgrind:\n{done.stderr[-3000:]}")
        dumps = sorted(Path(tmp).glob("cg.*"), key=lambda p: int(p.suffix[1:]))
        totals = []
        for dump in dumps:
            text = dump.read_text(errors="replace")
            events = re.search(r"^events: (.+)$", text, re.M)
            found = re.search(r"^(?:summary|totals): (.+)$", text, re.M)
            if events is None or found is None:
                raise SystemExit(f"no totals in callgrind's dump {dump.name}")
            totals.append(dict(zip(events.group(1).split(), map(int, found.group(1).split()), strict=False)))
    if len(totals) < 2:
        raise SystemExit("no segments: callgrind found no os_getppid to dump at (a Python without symbols?)")
    return totals[1:]  # dump k >= 2 holds what ran between mark k-1 and mark k


def tree_at(revision: str, into: Path) -> Path:
    """The files of `revision` of this repository, extracted under `into` (git archive)."""
    tree = into / revision.replace("/", "_")
    tree.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", revision], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree
