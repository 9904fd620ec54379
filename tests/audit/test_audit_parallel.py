"""`verify` in parts (pte._audit._parallel) gives the report of one pass, wherever the file is cut.

The parts are scanned from what their first lines claim and joined; a join that does not
fit, or a part that finds a problem, hands the log back to one pass. So the properties are:
on an intact log (complete or not) the parts always join and the report is the one-pass
report, anchors included; on a tampered log the parts never report a log intact that one
pass rejects, and `verify(jobs=N)` words the same first problem. Cuts are drawn anywhere:
inside a run, at a run's first line, next to content stored by an earlier part, inside a run
that a later part resumes.
"""

from __future__ import annotations

import multiprocessing
import os
import tempfile
import threading
from hashlib import sha256
from pathlib import Path
from typing import Any

import orjson
import pytest
import rfc8785
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

# private: the parallel verifier's parts, white-box
import pte._audit._parallel as parallel
from pte import verify

# private: the parallel verifier's parts, white-box
from pte._audit._parallel import join_parts, scan_part, verify_in_parts
from pte.audit import VerifyReport
from pte.cli import main

SAMPLES = Path(__file__).resolve().parents[2] / "audit_samples"
ANCHORS = frozenset(range(0, 200, 9))


def _records(name: str) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in (SAMPLES / f"{name}.jsonl").read_bytes().splitlines()]


def _rechain(records: list[dict[str, Any]], prev: str = "0" * 64, first_seq: int = 0) -> list[bytes]:
    """JCS lines for `records` with seq, prev and hash recomputed from `prev`."""
    out = []
    for seq, record in enumerate(records, start=first_seq):
        body = {k: v for k, v in record.items() if k != "hash"}
        body["seq"], body["prev"] = seq, prev
        prev = sha256(prev.encode() + rfc8785.dumps(body)).hexdigest()
        out.append(rfc8785.dumps({**body, "hash": prev}) + b"\n")
    return out


def _log_records(*, crashed: bool = True) -> list[dict[str, Any]]:
    """Runs as a writer leaves them in one file: content stored once (later runs refer to it),
    a run that crashed and one that resumes it, paused approvals, stages, failures."""
    records: list[dict[str, Any]] = []
    stored: set[str] = set()

    def add(name: str, suffix: str, **run_started: Any) -> str:
        run_id = ""
        for record in _records(name):
            run_id = f"{record['run_id']}-{suffix}" if suffix else str(record["run_id"])
            record = dict(record, run_id=run_id)
            if record["type"] == "run_started":
                record.update(run_started)
                fresh = {k: v for k, v in (record.get("stored") or {}).items() if k not in stored}
                stored.update(fresh)
                if fresh:
                    record["stored"] = fresh
                else:
                    record.pop("stored", None)
            records.append(record)
        return run_id

    add("success", "a")
    add("replan", "b")
    if crashed:
        lost = add("crashed_mid_run", "c")
        add("success_with_write", "d", resumes=lost)
    add("paused_then_approved", "")  # its approval signs its run id: keep it (used once)
    add("staged", "f")
    add("policy_violation", "g")
    add("success", "h")
    if crashed:
        add("crashed_mid_run", "i")  # never resumed: the log is intact but incomplete
    return records


INTACT = _rechain(_log_records())
COMPLETE = _rechain(_log_records(crashed=False))


def _write(lines: list[bytes], directory: str) -> Path:
    path = Path(directory) / "audit.jsonl"
    path.write_bytes(b"".join(lines))
    return path


def _in_parts(path: Path, cuts: list[int], lines: list[bytes]) -> VerifyReport | None:
    """Scan the parts starting at line indexes `cuts` in this process, and join them."""
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    starts = sorted({0, *(c for c in cuts if 0 < c < len(lines))})
    bounds = [(offsets[a], offsets[b]) for a, b in zip(starts, [*starts[1:], len(lines)], strict=True)]
    return join_parts([scan_part(str(path), lo, hi, True, ANCHORS) for lo, hi in bounds])


def _one_pass(path: Path) -> VerifyReport:
    return verify(path, anchors=ANCHORS)


def _agree(path: Path, cuts: list[int], lines: list[bytes]) -> VerifyReport | None:
    whole = _one_pass(path)
    joined = _in_parts(path, cuts, lines)
    if joined is not None:
        assert joined.to_dict() == whole.to_dict()
        assert dict(joined.anchors) == dict(whole.anchors)
    elif whole.intact:
        raise AssertionError(f"an intact log did not join at cuts {cuts}: {whole}")
    return joined


def test_the_test_logs_are_what_they_claim() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        incomplete = _one_pass(_write(INTACT, tmp))
        assert incomplete.intact and not incomplete.complete and incomplete.runs == 9
        assert incomplete.issue is not None and "has no run_finished" in incomplete.issue.message
        assert _one_pass(_write(COMPLETE, tmp)).ok
    # Later runs refer to the catalogue stored by the first: the join checks those references.
    assert sum(1 for line in INTACT if b'"catalogue":' in line and b'"stored":' not in line) >= 5


@pytest.mark.parametrize("lines", [INTACT, COMPLETE], ids=["incomplete", "complete"])
def test_every_single_cut_joins_to_the_one_pass_report(lines: list[bytes]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = _write(lines, tmp)
        for cut in range(1, len(lines)):
            assert _agree(path, [cut], lines) is not None


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(min_value=1, max_value=len(INTACT) - 1), min_size=1, max_size=6))
def test_any_cuts_join_to_the_one_pass_report(cuts: list[int]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        assert _agree(_write(INTACT, tmp), cuts, INTACT) is not None


def _tamper(lines: list[bytes], data: st.DataObject) -> list[bytes]:
    lines = list(lines)
    i = data.draw(st.integers(min_value=0, max_value=len(lines) - 1))
    j = data.draw(st.integers(min_value=0, max_value=len(lines) - 1))
    kind = data.draw(
        st.sampled_from(
            [
                "edit",
                "delete",
                "swap",
                "duplicate",
                "truncate",
                "rechain",
                "forged tail",
                "move run",
                "run twice",
            ]
        )
    )
    records = [orjson.loads(line) for line in lines]
    if kind == "edit":
        raw = bytearray(lines[i])
        at = data.draw(st.integers(min_value=0, max_value=len(raw) - 2))
        raw[at] = data.draw(st.integers(min_value=32, max_value=126))
        lines[i] = bytes(raw)
    elif kind == "delete":
        del lines[i]
    elif kind == "swap":
        lines[i], lines[j] = lines[j], lines[i]
    elif kind == "duplicate":
        lines.insert(j, lines[i])
    elif kind == "truncate":
        lines = [*lines[:i], lines[i][: data.draw(st.integers(min_value=0, max_value=len(lines[i]) - 1))]]
    elif kind == "rechain":  # a consistent rewrite from record i on: only the hashes change
        lines = lines[:i] + _rechain(
            [dict(r, ts="2000-01-01T00:00:00.000001Z") for r in records[i:]],
            prev=records[i - 1]["hash"] if i else "0" * 64,
            first_seq=i,
        )
    elif kind == "forged tail":  # a self-consistent chain from record i, hung on the wrong prev
        lines = lines[:i] + _rechain(records[i:], prev="f" * 64, first_seq=i)
    elif kind == "run twice":  # a whole run again at the end, the chain redone
        run = records[i]["run_id"]
        lines = _rechain(records + [r for r in records if r["run_id"] == run])
    else:  # a whole run moved to the end, the chain redone: runs out of order, content moved
        run = records[i]["run_id"]
        kept = [r for r in records if r["run_id"] != run] + [r for r in records if r["run_id"] == run]
        lines = _rechain(kept)
    return [line for line in lines if line]  # a line truncated to nothing is no line


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_a_tampered_log_never_joins_as_intact_and_reads_the_same(data: st.DataObject) -> None:
    base = data.draw(st.sampled_from([INTACT, COMPLETE]))
    lines = _tamper(base, data)
    cuts = data.draw(
        st.lists(st.integers(min_value=1, max_value=max(1, len(lines) - 1)), min_size=1, max_size=4)
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = _write(lines, tmp)
        whole = _one_pass(path)
        joined = _agree(path, cuts, lines)
        if not whole.intact:
            assert joined is None


def test_content_stored_after_a_reference_is_caught_across_parts() -> None:
    """A run_started in the middle refers to a policy stored only by a later run_started:
    the part that holds the reference cannot tell, the join must."""
    records = _log_records(crashed=False)
    starts = [i for i, r in enumerate(records) if r["type"] == "run_started"]
    middle, last = starts[len(starts) // 2], starts[-1]
    policy = {"rules": [{"tool": "send_payment", "max_amount": "100.00"}]}
    key = sha256(rfc8785.dumps(policy)).hexdigest()
    records[middle] = dict(records[middle], policy=key)
    records[last] = dict(records[last], stored={**records[last].get("stored", {}), key: policy})
    lines = _rechain(records)
    with tempfile.TemporaryDirectory() as tmp:
        path = _write(lines, tmp)
        whole = _one_pass(path)
        assert not whole.intact and whole.issue is not None and whole.issue.line == middle + 1
        assert whole.issue.message.startswith("policy ") and "is not stored in the log" in whole.issue.message
        for cut in range(1, middle + 1):  # the reference in a later part than the log's start
            assert _agree(path, [cut], lines) is None
        # Stored before the reference (by the log's first run), the same log verifies in parts.
        records[0] = dict(records[0], stored={**records[0]["stored"], key: policy})
        records[last] = dict(
            records[last], stored={k: v for k, v in records[last]["stored"].items() if k != key}
        )
        if not records[last]["stored"]:
            del records[last]["stored"]
        lines = _rechain(records)
        path = _write(lines, tmp)
        assert _one_pass(path).ok
        for cut in range(1, len(lines)):
            assert _agree(path, [cut], lines) is not None


def test_verify_with_jobs_runs_the_parts_in_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    lines = INTACT * 1  # ~60 KB: parts of 4 KB each for the test
    monkeypatch.setattr(parallel, "MIN_PART_BYTES", 4096)
    with tempfile.TemporaryDirectory() as tmp:
        path = _write(lines, tmp)
        joined = verify_in_parts(path, check_schema=True, anchors=ANCHORS, jobs=4)
        assert joined is not None  # the parts did run (and join) in worker processes
        whole = _one_pass(path)
        assert joined.to_dict() == whole.to_dict() and dict(joined.anchors) == dict(whole.anchors)
        assert verify(path, anchors=ANCHORS, jobs=4).to_dict() == whole.to_dict()
        # A problem in the last part: the processes find it, one pass names it.
        tampered = [*lines[:-3], lines[-2], lines[-3], lines[-1]]
        path.write_bytes(b"".join(tampered))
        assert verify_in_parts(path, check_schema=True, anchors=ANCHORS, jobs=4) is None
        report = verify(path, jobs=4)
        assert report.to_dict() == verify(path).to_dict()
        assert report.issue is not None and report.issue.line == len(lines) - 2


_PARENT = os.getpid()


def _scan_or_die(*args: Any) -> Any:
    """`scan_part` in this process; in a worker, death (as by the OOM killer)."""
    if os.getpid() != _PARENT:
        os._exit(9)
    return scan_part(*args)


def test_a_worker_that_dies_leaves_the_log_to_one_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parallel, "MIN_PART_BYTES", 4096)
    monkeypatch.setattr(parallel, "scan_part", _scan_or_die)
    monkeypatch.setattr(threading, "active_count", lambda: 1)  # fork: the worker runs the patch
    with tempfile.TemporaryDirectory() as tmp:
        path = _write(INTACT, tmp)
        assert verify_in_parts(path, check_schema=True, anchors=ANCHORS, jobs=3) is None
        assert verify(path, anchors=ANCHORS, jobs=3).to_dict() == _one_pass(path).to_dict()


def test_a_process_with_threads_starts_fresh_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    """With other threads running, fork is unsafe: the worker is a new interpreter (spawn)."""
    monkeypatch.setattr(parallel, "MIN_PART_BYTES", 4096)
    monkeypatch.setattr(threading, "active_count", lambda: 2)
    started: list[str] = []
    real = multiprocessing.get_context

    def get_context(method: str) -> Any:
        started.append(method)
        return real(method)

    monkeypatch.setattr(multiprocessing, "get_context", get_context)
    with tempfile.TemporaryDirectory() as tmp:
        path = _write(INTACT, tmp)
        joined = verify_in_parts(path, check_schema=True, anchors=ANCHORS, jobs=2)
        assert started == ["spawn"]
        assert joined is not None and joined.to_dict() == _one_pass(path).to_dict()


def test_a_small_or_format_1_log_is_verified_in_one_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = _write(INTACT, tmp)
        assert verify_in_parts(path, check_schema=True, anchors=ANCHORS, jobs=4) is None  # < 2 parts
        monkeypatch.setattr(parallel, "MIN_PART_BYTES", 1024)
        v1 = Path(__file__).resolve().parents[1] / "data"
        for log in sorted(v1.glob("audit_v1_*.jsonl")):
            assert verify_in_parts(log, check_schema=True, anchors=ANCHORS, jobs=4) is None
            assert verify(log, jobs=4).to_dict() == verify(log).to_dict()


def _cli(*argv: str) -> int:
    try:
        return main(["--quiet", *argv])
    except SystemExit as exc:  # usage errors leave main as argparse's own do
        return int(exc.code or 0)


def test_cli_audit_verify_jobs(capsys: pytest.CaptureFixture[str]) -> None:
    sample = str(SAMPLES / "success.jsonl")
    assert _cli("audit", "verify", sample, "--jobs", "2") == 0
    assert capsys.readouterr().out.startswith("ok: 15 record(s)")
    for bad in ("0", "-1", "two"):
        assert _cli("audit", "verify", sample, "--jobs", bad) == 2
        assert "--jobs must be a positive whole number" in capsys.readouterr().err
