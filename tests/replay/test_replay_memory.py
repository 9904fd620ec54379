"""Replay and resume hold one run at a time: memory bounded by the largest run, not by the log.

Each replayed run gets its own engine, `RecordedInvoker` and `CheckingAuditLog` over its
records. Once the run's `RunReplay` is made, nothing may keep them reachable: not the report
(a recorded divergence keeps the finding, never the traceback whose frames hold the engine),
not a cache. The check is deterministic: weak references to every run's invoker (the engine
holds it, so a dead invoker means a dead engine too) must be dead when the next run starts
and when the replay returns. The garbage collector is off meanwhile: the runs hold no
reference cycles, so reference counting alone frees them, at once and deterministically (a
cycle would hold a whole run until some later collector pass).

A format 2 log stores its catalogue and policy once, in the first run that uses them; the
later runs refer to them by hash, and replay without a deployment catalogue reads them from
where they were stored.
"""

from __future__ import annotations

import gc
import hashlib
import json
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# private: the replayer's parts, white-box
import pte._replay._replayer
from pte import AuditLog, Deployment, Engine, EngineConfig, ToolError, load_registry, verify

# private: the replayer's parts, white-box
from pte._replay._replayer import RecordedInvoker, replay_run
from pte.audit import canonical_json, read_records
from pte.engine import ReplayClient
from pte.runs import replay_file, resume_file

PACKS = ["calculator", "shaping"]
RUNS = 12


def _chain(steps: int, start: int) -> str:
    doc = [{"id": "s0", "tool": "calculator", "args": {"expression": str(start)}}]
    for i in range(1, steps):
        args = {"expression": "x + 1", "variables": {"x": {"$ref": f"s{i - 1}/value"}}}
        doc.append({"id": f"s{i}", "tool": "calculator", "args": args})
    return json.dumps({"pte_plan": "1", "steps": doc, "result": {"$ref": f"s{steps - 1}/value"}})


def _long_log(path: Path, runs: int = RUNS) -> None:
    """`runs` sealed runs, one session each, alternating `execute` and `run` (a recorded LLM)."""
    registry = load_registry(PACKS)
    for i in range(runs):
        with AuditLog(path, durability="none") as audit:
            if i % 2:
                llm = ReplayClient([_chain(4, i)])
                engine = Engine(registry, llm, config=EngineConfig(llm_answer=False))
                result = engine.run(f"count up from {i}", audit)
            else:
                engine = Engine(registry, None, config=EngineConfig(llm_answer=False))
                result = engine.execute(_chain(4, i), audit)
        assert result.ok, result.message


class _Tracked:
    """Weak references to every `RecordedInvoker` replay makes, checked as each is made."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.refs: list[weakref.ref[RecordedInvoker]] = []
        self.alive_at_start: list[int] = []
        tracked = self

        class Invoker(RecordedInvoker):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, **kwargs)
                tracked.alive_at_start.append(tracked.alive())
                tracked.refs.append(weakref.ref(self))

        # Resume's invoker (`ResumingInvoker`) makes its `RecordedInvoker` in this module too.
        monkeypatch.setattr(pte._replay._replayer, "RecordedInvoker", Invoker)

    def alive(self) -> int:
        return sum(ref() is not None for ref in self.refs)


@pytest.fixture(autouse=True)
def _no_collector() -> Iterator[None]:
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@pytest.fixture
def long_log(tmp_path: Path) -> Path:
    path = tmp_path / "long.jsonl"
    _long_log(path)
    return path


def test_every_run_of_a_long_log_replays_without_the_deployment_catalogue(long_log: Path) -> None:
    # Only the first run stores the catalogue; every later run must still find it.
    stored = [bool(r.get("stored")) for r in read_records(long_log) if r["type"] == "run_started"]
    assert stored[0] and not any(stored[1:])
    report = replay_file(long_log)
    assert [run.outcome for run in report.runs] == ["same"] * RUNS, report.render()
    assert report.ok


@pytest.mark.parametrize(
    ("packs", "outcome"),
    [
        (None, "same"),  # the recorded catalogue
        (PACKS, "same"),  # the deployment's, the same
        (["calculator"], "diverged"),  # another catalogue: every run diverges at run_started
    ],
)
def test_replay_lets_go_of_each_run_before_the_next(
    long_log: Path, monkeypatch: pytest.MonkeyPatch, packs: list[str] | None, outcome: str
) -> None:
    tracked = _Tracked(monkeypatch)
    registry = load_registry(packs) if packs else None
    report = replay_file(long_log, registry=registry)
    assert [run.outcome for run in report.runs] == [outcome] * RUNS, report.render()
    assert len(tracked.refs) == RUNS
    # When each run's invoker is made, no earlier run's is still alive...
    assert tracked.alive_at_start == [0] * RUNS
    # ...and none outlives the replay, though the report (and its divergences) is still held.
    assert tracked.alive() == 0
    if outcome == "diverged":
        divergence = report.runs[-1].divergence
        assert divergence is not None and divergence.field == "catalogue"
        assert divergence.__traceback__ is None and divergence.__context__ is None


def _forged(path: Path) -> None:
    """Change the output of every run's step s1, then re-hash the chain (what a forger does)."""
    records = read_records(path)
    for record in records:
        if record["type"] == "step_finished" and record["step_id"] == "s1":
            record["output"] = {"value": -1}
    prev = records[0]["prev"]
    for record in records:
        record["prev"] = prev
        body = {k: v for k, v in record.items() if k != "hash"}
        record["hash"] = prev = hashlib.sha256((prev + canonical_json(body)).encode()).hexdigest()
    path.write_text("".join(canonical_json(r) + "\n" for r in records), encoding="utf-8")


def test_a_divergence_deep_in_a_run_does_not_keep_the_run(
    long_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The engine is in the middle of each run (in the executor, between steps) when the
    # divergence is raised: the traceback then holds the most frames.
    _forged(long_log)
    assert verify(long_log).intact
    tracked = _Tracked(monkeypatch)
    report = replay_file(long_log, registry=load_registry(PACKS))
    assert [run.outcome for run in report.runs] == ["diverged"] * RUNS, report.render()
    for run in report.runs:
        assert run.divergence is not None and run.divergence.record_type in ("step_started", "step_finished")
    assert tracked.alive_at_start == [0] * RUNS and tracked.alive() == 0


def test_a_run_whose_stored_catalogue_is_not_at_hand_is_refused_with_a_reason(long_log: Path) -> None:
    # replay_run on a later run alone, without the contents earlier runs stored: a named
    # refusal, never a replay against the tools' fingerprints.
    # Under the run's recorded authority (Deployment.of(), what replay_file gives): the one
    # place an engine is made needs a deployment (#33).
    runs = list(pte._replay._replayer.iter_runs(long_log))
    recorded = Deployment.of()
    replayed = replay_run(runs[1], deployment=recorded)
    assert replayed.outcome == "diverged"
    assert replayed.note is not None and "does not hold before it" in replayed.note
    assert replay_run(runs[1], stored=runs[0][0][1]["stored"], deployment=recorded).outcome == "same"


def test_resume_of_the_last_run_of_a_long_log(long_log: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Cut the last run before its end: resume re-drives only it (the earlier runs are read,
    # not replayed) and finishes it in the same log.
    lines = long_log.read_bytes().splitlines(keepends=True)
    long_log.write_bytes(b"".join(lines[:-2]))
    tracked = _Tracked(monkeypatch)
    result = resume_file(long_log, load_registry(PACKS))
    assert result.ok, result.message
    assert len(tracked.refs) == 1 and tracked.alive() == 0
    report = replay_file(long_log)
    assert report.ok, report.render()


def test_a_live_run_with_a_failed_step_is_freed_when_it_ends() -> None:
    # The executor keeps a failed step's error in its result; a raised error's traceback
    # holds the frames that caught it, and so the run: a cycle, unless the error is kept as
    # data (kind and message).
    class Invoker:
        def __call__(self, spec: Any, args: dict[str, Any], step: Any) -> Any:
            raise ToolError("tool_error", f"{step.id} failed")

    invoker = Invoker()
    ref = weakref.ref(invoker)
    engine = Engine(load_registry(PACKS), None, config=EngineConfig(llm_answer=False), invoker=invoker)
    del invoker
    result = engine.execute(_chain(3, 1), AuditLog(None))
    assert not result.ok and result.reason is not None and result.reason.value == "step_failed"
    assert result.steps[-1].error is not None and result.steps[-1].error.__traceback__ is None
    del engine
    assert ref() is None
