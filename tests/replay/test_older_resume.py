"""A run an earlier pte recorded, cut short by a crash, resumes under today's pte (#35).

tests/data/older_pte holds main 5aa60c6's samples (its prompts hash, no deployment binding).
Its ``success`` run is cut after its third step, as a crash leaves it, and resumed: the
recorded part is re-driven and compared, the three completed steps are served from the log,
a ``run_resumed`` record marks the hand-over, the two calculator steps and the finalizer run
live, and the run ends ``succeeded``; the finished log verifies and replays (docs/replay.md).

Its catalogue is grafted from today's packs (the stock tools changed since, and resume takes
the catalogue from the deployment in hand, which must be the one the run started under); in
the ``before_b41399c`` variant its config is also cut back to what a pte before planner data,
the data budget, repair and the value cap wrote. The run is resumed only if the config the
reader of older records (pte._audit._older_records) reads from it is written back identically:
a reader that gave a missing field another meaning than the writer's (repair on, say) would
diverge at ``run_started.config``.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import pte
from pte import load_registry, verify
from pte.audit import AuditLog
from pte.engine import EngineConfig
from pte.errors import FailedClosed, ReplayDivergence
from pte.runs import replay_file, resume_file
from pte.testing import ScriptedModel
from tests._chain import OLDER_PTE, records_of, write_relinked

SUCCESS = OLDER_PTE / "success.jsonl"
PACKS = ["backoffice", "calculator", "shaping"]
#: The records a crash after the third step keeps: run_started, the planner, the plan, a, b, c.
KEPT = 9
#: What a pte before b41399c (planner data, budget), 519be35 (repair), 6ec5301 (value cap) wrote.
LATER_CONFIG = ("planner_data", "data_budget", "repair")


def _todays_catalogue(registry: pte.Registry, tmp: Path) -> dict[str, Any]:
    """The catalogue members today's pte records for `registry` (from a run of it)."""
    plan = '{"pte_plan": "1", "steps": [{"id": "one", "tool": "calculator", "args": {"expression": "1"}}]}'
    with AuditLog(tmp / "today.jsonl") as audit:
        assert pte.Engine(registry).execute(plan, audit).ok
    started = records_of(tmp / "today.jsonl")[0]
    return {k: started[k] for k in ("tools", "catalogue", "policy", "stored")}


def _crashed_older_run(tmp: Path, registry: pte.Registry, *, config_before_b41399c: bool) -> Path:
    records = records_of(SUCCESS)[:KEPT]
    started = {**records[0], **_todays_catalogue(registry, tmp)}
    assert "deployment" not in started  # 5aa60c6 bound no run to a deployment
    if config_before_b41399c:
        config = {k: v for k, v in started["config"].items() if k not in LATER_CONFIG}
        config["limits"] = {k: v for k, v in config["limits"].items() if k != "max_values"}
        started["config"] = config
    return write_relinked([started, *records[1:]], tmp / "crashed.jsonl")


@pytest.fixture(scope="module")
def registry() -> pte.Registry:
    return load_registry(PACKS)


@pytest.mark.parametrize("config_before_b41399c", [False, True], ids=["5aa60c6", "before_b41399c"])
def test_a_crashed_run_of_an_older_pte_resumes_and_ends_as_documented(
    tmp_path: Path, registry: pte.Registry, config_before_b41399c: bool
) -> None:
    log = _crashed_older_run(tmp_path, registry, config_before_b41399c=config_before_b41399c)
    assert not verify(log).ok  # unsealed: a crash
    model = ScriptedModel(model="recorded-demo-responses", finalizer=["C016 is 15.04% of the three."])
    result = resume_file(log, registry, llm=model)
    assert result.status == "succeeded", result.message
    assert result.result["c016_share_pct"] == "15.04"
    records = records_of(log)
    kinds = [r["type"] for r in records]
    assert kinds[:KEPT] == [r["type"] for r in records_of(SUCCESS)[:KEPT]]
    assert kinds[KEPT:] == [
        "run_resumed",
        "step_started",
        "step_finished",
        "step_started",
        "step_finished",
        "llm_call",
        "run_finished",
    ]
    # Steps a, b, c were served from the log: each started once in the whole log.
    started = [r["step_id"] for r in records if r["type"] == "step_started"]
    assert started == ["a", "b", "c", "total", "share"]
    # The live steps computed what the older pte's run did.
    older = {r["step_id"]: r["output"] for r in records_of(SUCCESS) if r["type"] == "step_finished"}
    resumed = {r["step_id"]: r["output"] for r in records if r["type"] == "step_finished"}
    assert resumed == older
    assert verify(log).ok
    report = replay_file(log)
    assert report.ok, report.render()
    assert "recorded under the prompts of pte 0.1.0" in (report.runs[0].note or "")


@pytest.mark.parametrize("field", ["repair", "planner_data", "data_budget"])
def test_a_reader_that_misread_a_missing_field_would_refuse_the_resume(
    tmp_path: Path, registry: pte.Registry, field: str
) -> None:
    """The check above has teeth: a run resumed under the config the reader reads, with one
    field read otherwise, diverges at run_started.config and appends nothing."""
    log = _crashed_older_run(tmp_path, registry, config_before_b41399c=True)
    read = EngineConfig.from_dict(records_of(log)[0]["config"])
    assert (read.repair, read.planner_data, read.data_budget) == (False, "shown", None)
    misread = {
        "repair": replace(read, repair=True),
        "planner_data": replace(read, planner_data="handles"),
        "data_budget": replace(read, data_budget=16_000),
    }[field]
    before = log.read_bytes()
    deployment = pte.Deployment.of(registry=registry, config=misread)
    with pytest.raises(ReplayDivergence, match=r"run_started\.config"):
        resume_file(log, registry, deployment=deployment, llm=ScriptedModel(finalizer=["-"]))
    assert log.read_bytes() == before


def test_an_older_run_under_todays_stock_packs_is_refused_with_nothing_appended(
    tmp_path: Path, registry: pte.Registry
) -> None:
    """Resume under a catalogue other than the run's (5aa60c6's stock tools differ from today's)
    is refused at run_started.catalogue, as docs/replay.md says, and appends nothing."""
    log = tmp_path / "crashed.jsonl"
    log.write_text("".join(SUCCESS.read_text(encoding="utf-8").splitlines(keepends=True)[:KEPT]))
    before = log.read_bytes()
    with pytest.raises((ReplayDivergence, FailedClosed), match="catalogue"):
        resume_file(log, registry, llm=ScriptedModel(finalizer=["-"]))
    assert log.read_bytes() == before
