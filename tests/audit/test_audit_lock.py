"""One writer per log file, across processes: two writers racing on one log never fork its chain.

Each round both processes try to open the log for writing (holding their view of its chain)
and append; the file's lock, taken at open and held until close, lets exactly one of them
in, and the other is refused with a named error (`AuditWriteError`), at open.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from pte import AuditLog, verify
from pte.errors import AuditWriteError

ROUNDS = 1_000


def _writer(path: str, name: str, barrier: Any, results: Any) -> None:
    written = 0
    refused = 0
    for round_no in range(ROUNDS):
        # Both writers open the log (and read its last hash) before either appends: each
        # round, both hold the same view of the chain and race to extend it.
        log: AuditLog | None
        try:
            log = AuditLog(path, run_id=f"{name}-{round_no}", durability="none")
        except AuditWriteError as exc:
            assert "being written by another writer" in str(exc)
            log = None
        barrier.wait()
        if log is None:
            refused += 1
        else:
            log.append("run_started", mode="execute", request=None, tools=[], config={"round": round_no})
            written += 1
            log.close()
        barrier.wait()
    results.put((name, written, refused))


@pytest.mark.skipif(sys.platform == "win32", reason="advisory locks are POSIX here")
def test_two_processes_appending_never_fork_the_chain(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(2)
    results = ctx.Queue()
    workers = [ctx.Process(target=_writer, args=(str(path), name, barrier, results)) for name in "ab"]
    for worker in workers:
        worker.start()
    outcome = [results.get(timeout=300) for _ in workers]
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    written = sum(w for _, w, _ in outcome)
    refused = sum(r for _, _, r in outcome)
    # Each round exactly one writer extends the chain and the other is refused (the first
    # holds the file): never both, which would leave two records claiming the same predecessor.
    assert written == ROUNDS
    assert refused == ROUNDS
    report = verify(path, check_schema=False)
    assert report.intact, report.issue
    assert report.records == ROUNDS


def test_a_log_dropped_without_close_frees_the_file(tmp_path: Path) -> None:
    """A writer that is never closed (an exception path, a forgotten log) must not keep every
    later writer of the file out until the process exits: collected, it lets go."""
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path, run_id="dropped", durability="none")
    log.append("run_started", mode="execute", request=None, tools=[], config={})
    with pytest.raises(AuditWriteError, match="being written by another writer"):
        AuditLog(path, run_id="next", durability="none")
    del log
    gc.collect()
    later = AuditLog(path, run_id="next", durability="none")
    later.append("run_started", mode="execute", request=None, tools=[], config={})
    later.close()
    report = verify(path)
    assert report.intact and report.records == 2 and report.runs == 2


def test_a_closed_log_collected_later_closes_nothing_else(tmp_path: Path) -> None:
    """close() closes the descriptor once: the collector must not close it again, by then
    perhaps another file's descriptor of the same number."""
    log = AuditLog(tmp_path / "a.jsonl", run_id="a", durability="none")
    log.close()
    other = os.open(tmp_path / "b.txt", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        del log
        gc.collect()
        os.fstat(other)  # still open (a second close of a reused number would break it)
        assert os.write(other, b"x") == 1
    finally:
        os.close(other)
