"""The deployment's concurrency controls on the command line: ``--max-concurrency N`` and
``--serial-writes`` on ``pte execute``, ``pte run`` and ``pte worker``.

The flags must reach the executor (observed through tools that see what runs beside them,
synchronised with barriers and events rather than timings) and bad values must be usage
errors (exit 2, a message, no traceback, nothing run).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pte import load_registry

# private: the worker and job internals, white-box
from pte._deploy import WorkerConfig, job_engine, process_run, submit_job
from pte.cli import main
from tests._cli_run import make_deployment

# A tool pack that reports, in seen.jsonl next to it, how many calls ran at once.
PACK = '''
import json
import threading
import time
from pathlib import Path

from pte import tool

_LOCK = threading.Lock()
_STATE = {"inflight": 0, "max": 0}
_BARRIERS: dict[int, threading.Barrier] = {}
_READ_RUNNING = threading.Event()
_OUT = Path(__file__).with_name("seen.jsonl")


def _note(**fields):
    with _LOCK, _OUT.open("a") as fh:
        fh.write(json.dumps(fields) + "\\n")


def _enter():
    with _LOCK:
        _STATE["inflight"] += 1
        _STATE["max"] = max(_STATE["max"], _STATE["inflight"])


def _leave():
    with _LOCK:
        _STATE["inflight"] -= 1


@tool(timeout_s=20)
def probe(key: int, parties: int = 0, company: bool = False) -> int:
    """A read. With `parties`, waits until that many probes are running at once; with
    `company`, notes whether another call ran beside it (waiting up to 1 s for one)."""
    _enter()
    try:
        _READ_RUNNING.set()
        if parties:
            with _LOCK:
                barrier = _BARRIERS.setdefault(parties, threading.Barrier(parties, timeout=10))
            barrier.wait()
        joined = False
        if company:
            deadline = time.monotonic() + 1.0
            while not joined and time.monotonic() < deadline:
                joined = _STATE["max"] > 1
                time.sleep(0.01)
    finally:
        _leave()
    _note(tool="probe", key=key, max=_STATE["max"], company=joined)
    return key


@tool(effect="write", idempotent=True, timeout_s=20)
def stamp(key: int) -> int:
    """A write: notes whether a read ran beside it (waiting up to 2 s for one to start)."""
    _enter()
    try:
        beside = _READ_RUNNING.wait(2.0)
    finally:
        _leave()
    _note(tool="stamp", key=key, beside=beside)
    return key
'''


def _pack(tmp_path: Path) -> Path:
    path = tmp_path / "probes.py"
    path.write_text(PACK, encoding="utf-8")
    return path


def _plan(tmp_path: Path, steps: list[dict[str, Any]]) -> Path:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"pte_plan": "1", "steps": steps}), encoding="utf-8")
    return path


def _seen(tmp_path: Path) -> list[dict[str, Any]]:
    lines = (tmp_path / "seen.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def _execute(tmp_path: Path, plan: Path, *flags: str) -> int:
    return main(
        [
            "--quiet",
            "execute",
            str(plan),
            "--tools",
            str(_pack(tmp_path)),
            "--audit",
            str(tmp_path / "audit.jsonl"),
            *flags,
        ]
    )


def _company_plan(tmp_path: Path) -> Path:
    # Two independent probes, each waiting (up to 1 s) for another call to run beside it.
    return _plan(
        tmp_path, [{"id": f"p{i}", "tool": "probe", "args": {"key": i, "company": True}} for i in range(2)]
    )


def test_max_concurrency_one_runs_one_step_at_a_time(tmp_path: Path) -> None:
    assert _execute(tmp_path, _company_plan(tmp_path), "--max-concurrency", "1") == 0
    seen = _seen(tmp_path)
    assert [s["key"] for s in seen] == [0, 1]  # plan order
    assert [s["company"] for s in seen] == [False, False]
    assert max(s["max"] for s in seen) == 1


def test_by_default_independent_reads_run_beside_each_other(tmp_path: Path) -> None:
    # The counterpart of the test above: the flag, not the plan, kept them apart there.
    assert _execute(tmp_path, _company_plan(tmp_path)) == 0
    assert all(s["company"] for s in _seen(tmp_path))


def test_max_concurrency_lets_independent_reads_overlap(tmp_path: Path) -> None:
    # Three probes that each wait until three are running: only possible with 3 slots.
    steps = [{"id": f"p{i}", "tool": "probe", "args": {"key": i, "parties": 3}} for i in range(3)]
    assert _execute(tmp_path, _plan(tmp_path, steps), "--max-concurrency", "3") == 0
    assert max(s["max"] for s in _seen(tmp_path)) == 3


def test_serial_writes_keeps_reads_from_running_beside_a_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    make_deployment(tmp_path, monkeypatch, capsys, "--tools", str(_pack(tmp_path)), "--no-store")  # a write
    # The write comes first in plan order; the reads after it do not depend on it.
    steps = [{"id": "w", "tool": "stamp", "args": {"key": 0}}] + [
        {"id": f"p{i}", "tool": "probe", "args": {"key": i}} for i in range(1, 4)
    ]
    plan = _plan(tmp_path, steps)
    assert _execute(tmp_path, plan, "--serial-writes") == 0
    stamp = next(s for s in _seen(tmp_path) if s["tool"] == "stamp")
    assert stamp["beside"] is False


def test_without_serial_writes_an_independent_read_runs_beside_a_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    make_deployment(tmp_path, monkeypatch, capsys, "--tools", str(_pack(tmp_path)), "--no-store")  # a write
    # The counterpart of the test above: the flag, not the plan, kept the reads back there.
    steps = [{"id": "w", "tool": "stamp", "args": {"key": 0}}] + [
        {"id": f"p{i}", "tool": "probe", "args": {"key": i}} for i in range(1, 4)
    ]
    assert _execute(tmp_path, _plan(tmp_path, steps)) == 0
    stamp = next(s for s in _seen(tmp_path) if s["tool"] == "stamp")
    assert stamp["beside"] is True


@pytest.mark.parametrize("value", ["0", "-1", "two", "1.5", ""])
@pytest.mark.parametrize("command", ["execute", "run", "worker"])
def test_bad_max_concurrency_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, value: str
) -> None:
    plan = _plan(tmp_path, [{"id": "p", "tool": "probe", "args": {"key": 1}}])
    target = {"execute": [str(plan)], "run": ["say hello"], "worker": []}[command]
    with pytest.raises(SystemExit) as exited:
        main([command, *target, "--tools", str(_pack(tmp_path)), "--max-concurrency", value])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "--max-concurrency" in err
    assert "Traceback" not in err
    assert not (tmp_path / "seen.jsonl").exists()  # nothing ran


def test_worker_config_carries_the_execution_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    config = WorkerConfig("/srv/pte", ("calculator",), max_concurrency=3, serial_writes=True)
    for key, value in config.to_env().items():
        monkeypatch.setenv(key, value)
    assert WorkerConfig.from_env() == config
    default = WorkerConfig("/srv/pte", ("calculator",))
    for key, value in default.to_env().items():
        monkeypatch.setenv(key, value)
    assert WorkerConfig.from_env() == default


def test_job_engine_takes_the_workers_settings() -> None:
    registry = load_registry(["calculator"])
    engine = job_engine({}, registry, lambda plan, audit: None, None, None, {"max_concurrency": 2})
    assert engine.executor.max_concurrency == 2
    assert engine.executor.serial_writes is False
    engine = job_engine(
        {}, registry, lambda plan, audit: None, None, None, {"max_concurrency": 1, "serial_writes": True}
    )
    assert (engine.executor.max_concurrency, engine.executor.serial_writes) == (1, True)


def test_a_worker_runs_a_job_one_step_at_a_time_when_told_to(tmp_path: Path) -> None:
    from pte.stores import open_store

    pack = str(_pack(tmp_path))
    registry = load_registry([pack])
    steps = [{"id": f"p{i}", "tool": "probe", "args": {"key": i, "company": True}} for i in range(2)]
    job = {"mode": "execute", "plan_text": json.dumps({"pte_plan": "1", "steps": steps}), "tools": [pack]}
    with open_store(f"sqlite://{tmp_path / 'runs.db'}") as store:
        run_id = submit_job(store, job)
        outcome = process_run(
            store, run_id, registry, (pack,), owner="test", execution={"max_concurrency": 1}
        )
    assert outcome == "succeeded"
    seen = _seen(tmp_path)
    assert [s["key"] for s in seen] == [0, 1]
    assert [s["company"] for s in seen] == [False, False]
