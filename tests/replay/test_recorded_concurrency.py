"""A resume runs as its run recorded it ran, or narrower (#33).

``run_started.config`` records ``max_concurrency`` and ``serial_writes``; a resume (of a log,
or of a run in a store) runs its live part with those, and a value the caller gives may only
narrow them: a smaller limit, serial writes turned on. A wider one is refused before anything
runs (the CLI: exit 2). A log recorded before they were recorded replays and resumes as it
always did (tests/data/older_pte, tests/replay/test_older_prompts.py).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

import pte
from pte.errors import DeploymentError
from tests._cli_run import cli

#: (event, step) as the tools start and end, to see what overlapped.
EVENTS: list[tuple[str, str]] = []
LOCK = threading.Lock()
OLDER = Path(__file__).resolve().parents[1] / "data" / "older_pte"


@pte.tool
def fetch_first() -> dict[str, int]:
    """The step the cut log keeps."""
    return {"n": 1}


@pte.tool
def slow_read(side: str) -> dict[str, str]:
    """A read that takes a while (overlaps whatever runs beside it)."""
    with LOCK:
        EVENTS.append(("start", side))
    time.sleep(0.3)
    with LOCK:
        EVENTS.append(("end", side))
    return {"side": side}


REGISTRY = pte.Registry([fetch_first, slow_read])
PLAN = """{"pte_plan": "1", "steps": [
 {"id": "first", "tool": "fetch_first", "args": {}},
 {"id": "left", "tool": "slow_read", "args": {"side": "left"}},
 {"id": "right", "tool": "slow_read", "args": {"side": "right"}}
], "result": {"left": {"$ref": "left/side"}, "right": {"$ref": "right/side"}}}"""


#: The same tools as a pack file, for the CLI.
PACK = """
import time

import pte


@pte.tool
def pack_first() -> dict[str, int]:
    \"\"\"The step the cut log keeps.\"\"\"
    return {"n": 1}


@pte.tool
def pack_slow_read(side: str) -> dict[str, str]:
    \"\"\"A read that takes a while.\"\"\"
    time.sleep(0.1)
    return {"side": side}
"""


def _cut_after_first(tmp_path: Path, **execution: object) -> Path:
    """A log of PLAN run with `execution` in full, cut after step ``first``: a crash there."""
    full = tmp_path / "full.jsonl"
    with pte.AuditLog(full) as audit:
        assert pte.Engine(REGISTRY, **execution).execute(PLAN, audit).ok  # type: ignore[arg-type]
    records = pte.audit.read_records(full)
    keep = 1 + next(
        i for i, r in enumerate(records) if r["type"] == "step_finished" and r["step_id"] == "first"
    )
    cut = tmp_path / "cut.jsonl"
    cut.write_text(
        "".join(full.read_text(encoding="utf-8").splitlines(keepends=True)[:keep]), encoding="utf-8"
    )
    EVENTS.clear()
    return cut


def _overlapped() -> bool:
    position = {event: i for i, event in enumerate(EVENTS)}
    return (
        position[("start", "left")] < position[("end", "right")]
        and position[("start", "right")] < position[("end", "left")]
    )


def test_run_started_records_how_the_runs_steps_overlap(tmp_path: Path) -> None:
    with pte.AuditLog(tmp_path / "a.jsonl") as audit:
        assert pte.Engine(REGISTRY, max_concurrency=3, serial_writes=True).execute(PLAN, audit).ok
    config = pte.audit.read_records(tmp_path / "a.jsonl")[0]["config"]
    assert (config["max_concurrency"], config["serial_writes"]) == (3, True)
    assert pte.runs.replay_file(tmp_path / "a.jsonl").ok


@pytest.mark.parametrize(("recorded", "overlaps"), [(1, False), (4, True)])
def test_a_resume_given_nothing_runs_as_the_run_recorded(
    tmp_path: Path, recorded: int, overlaps: bool
) -> None:
    log = _cut_after_first(tmp_path, max_concurrency=recorded)
    result = pte.runs.resume_file(log, REGISTRY)
    assert result.ok, result.message
    assert _overlapped() is overlaps, EVENTS
    assert pte.verify(log).ok and pte.runs.replay_file(log).ok


def test_a_smaller_limit_narrows_the_resume(tmp_path: Path) -> None:
    log = _cut_after_first(tmp_path, max_concurrency=4)
    result = pte.runs.resume_file(log, REGISTRY, max_concurrency=1)
    assert result.ok, result.message
    assert not _overlapped(), EVENTS
    # The run's record still says how it started; the finished log replays so.
    assert pte.audit.read_records(log)[0]["config"]["max_concurrency"] == 4
    assert pte.verify(log).ok and pte.runs.replay_file(log).ok


@pytest.mark.parametrize(
    ("recorded", "given"),
    [
        ({"max_concurrency": 1}, {"max_concurrency": 4}),
        ({"max_concurrency": 2, "serial_writes": True}, {"serial_writes": False}),
    ],
    ids=["a-larger-limit", "serial-writes-off"],
)
def test_a_wider_setting_is_refused_and_nothing_runs(
    tmp_path: Path, recorded: dict[str, object], given: dict[str, object]
) -> None:
    log = _cut_after_first(tmp_path, **recorded)
    before = log.read_bytes()
    with pytest.raises(DeploymentError, match="only narrow"):
        pte.runs.resume_file(log, REGISTRY, **given)  # type: ignore[arg-type]
    assert log.read_bytes() == before and EVENTS == []


def test_the_cli_refuses_a_wider_flag_with_exit_2_and_takes_a_narrower_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PTE_DEPLOYMENT", raising=False)
    monkeypatch.delenv("PTE_STORE", raising=False)
    pack = tmp_path / "pack.py"
    pack.write_text(PACK, encoding="utf-8")
    plan = tmp_path / "plan.json"
    plan.write_text(PLAN.replace("slow_read", "pack_slow_read").replace("fetch_first", "pack_first"), "utf-8")
    code, out, err = cli(
        capsys, "execute", str(plan), "--tools", str(pack), "--audit", "full.jsonl", "--max-concurrency", "2"
    )
    assert code == 0, out + err
    lines = (tmp_path / "full.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    keep = 1 + next(i for i, line in enumerate(lines) if '"step_finished"' in line and '"first"' in line)
    (tmp_path / "cut.jsonl").write_text("".join(lines[:keep]), encoding="utf-8")
    before = (tmp_path / "cut.jsonl").read_bytes()
    code, out, err = cli(capsys, "resume", "cut.jsonl", "--tools", str(pack), "--max-concurrency", "3")
    assert code == 2 and "only narrow" in err and "Traceback" not in err, out + err
    assert (tmp_path / "cut.jsonl").read_bytes() == before
    code, out, err = cli(capsys, "resume", "cut.jsonl", "--tools", str(pack), "--max-concurrency", "1")
    assert code == 0 and "succeeded" in out, out + err


def test_a_store_resume_honours_the_record_and_a_worker_caps_rather_than_refuses(tmp_path: Path) -> None:
    full = _cut_after_first(tmp_path, max_concurrency=1).with_name("full.jsonl")
    records = pte.audit.read_records(full)
    keep = 1 + next(
        i for i, r in enumerate(records) if r["type"] == "step_finished" and r["step_id"] == "first"
    )
    run_id = records[0]["run_id"]
    store = pte.stores.open_store(f"sqlite:///{tmp_path / 'runs.db'}")
    with store.audit_log(run_id) as audit:
        own = ("type", "seq", "ts", "prev", "hash", "run_id", "format", "pte_version")
        for record in records[:keep]:
            audit.append(record["type"], **{k: v for k, v in record.items() if k not in own})
    with pytest.raises(DeploymentError, match="only narrow"):
        pte.deployment.resume_run(store, run_id, REGISTRY, max_concurrency=8)
    EVENTS.clear()
    # A worker's own settings are its limit: wider than the run's, they are capped to it.
    result = pte.deployment.resume_run(store, run_id, REGISTRY, max_concurrency=8, cap_execution=True)
    assert getattr(result, "ok", False), result
    assert not _overlapped(), EVENTS
    assert store.verify(run_id).intact


@pytest.mark.parametrize("name", ["success.jsonl", "staged.jsonl"])
def test_a_log_recorded_before_these_were_recorded_replays_and_resumes_from_the_defaults(
    tmp_path: Path, name: str
) -> None:
    """An earlier pte's log (main 5aa60c6) records neither: it ran with the engine's defaults, as
    a resume given nothing did (the reader of older records says so), and replays the same."""
    records = pte.audit.read_records(OLDER / name)
    assert "max_concurrency" not in (records[0].get("config") or {})
    assert pte.runs.replay_file(OLDER / name).ok
    # private: how a re-driven run's settings are found from its record
    from pte._replay import run_execution

    config = records[0].get("config") or {}
    assert run_execution(config) == (8, False)
    assert run_execution(config, 2, True) == (2, True)
    with pytest.raises(DeploymentError, match="only narrow"):
        run_execution(config, 32, None)


def test_the_defaults_are_left_out_so_a_default_run_records_what_an_older_one_did(tmp_path: Path) -> None:
    with pte.AuditLog(tmp_path / "a.jsonl") as audit:
        assert pte.Engine(REGISTRY).execute(PLAN, audit).ok
    config = pte.audit.read_records(tmp_path / "a.jsonl")[0]["config"]
    assert not {"max_concurrency", "serial_writes"} & set(config)


def test_an_edited_recorded_setting_rehashed_is_refused_under_the_deployments_anchors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Tamper: a log writer raises the recorded limit (or turns serial writes off) and re-hashes
    the chain, so that a resume would run wider. Replay cannot tell (the records do not depend
    on it); the deployment's anchors, which sign a run's start before any tool runs, do."""
    import hashlib

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PTE_STORE", raising=False)
    (tmp_path / "pack.py").write_text(PACK, encoding="utf-8")
    assert cli(capsys, "init", "dep", "--tools", str(tmp_path / "pack.py"), "--no-store")[0] == 0
    monkeypatch.setenv("PTE_DEPLOYMENT", str(tmp_path / "dep"))
    plan = PLAN.replace("slow_read", "pack_slow_read").replace("fetch_first", "pack_first")
    (tmp_path / "plan.json").write_text(plan, encoding="utf-8")
    code, out, err = cli(capsys, "execute", "plan.json", "--audit", "run.jsonl", "--max-concurrency", "1")
    assert code == 0, out + err
    assert cli(capsys, "audit", "verify", "run.jsonl")[0] == 0
    for key, value in (("max_concurrency", 8), ("serial_writes", True)):
        records = pte.audit.read_records(tmp_path / "run.jsonl")
        records[0]["config"][key] = value
        prev = records[0]["prev"]
        for record in records:
            record["prev"] = prev
            body = {k: v for k, v in record.items() if k != "hash"}
            record["hash"] = prev = hashlib.sha256(
                (prev + pte.audit.canonical_json(body)).encode()
            ).hexdigest()
        forged = tmp_path / f"forged-{key}.jsonl"
        forged.write_text("".join(pte.audit.canonical_json(r) + "\n" for r in records), encoding="utf-8")
        assert pte.verify(forged).intact  # the chain alone: re-hashed, it holds
        code, out, err = cli(capsys, "audit", "verify", str(forged))
        assert code == 1, (key, out, err)
