"""The cookbook's model-written tasks (tests/cookbook/model_written.py): each runs through the
whole engine with a `ScriptedModel`, ends exactly as it says, verifies and replays the same."""

from __future__ import annotations

from pathlib import Path

import pytest

from pte.testing.cookbook import ModelTask, run_model_task
from tests.cookbook.model_written import MODEL_TASKS


def test_the_model_written_cookbook_covers_what_models_write() -> None:
    assert len(MODEL_TASKS) >= 10
    assert len({t.name for t in MODEL_TASKS}) == len(MODEL_TASKS), "task names must be unique"
    ids = [s["id"] for t in MODEL_TASKS for p in t.planner if isinstance(p, dict) for s in p["steps"]]
    assert max(len(i) for i in ids) > 32  # descriptive ids, as models name steps
    assert any(t.repair for t in MODEL_TASKS) and any(t.stage for t in MODEL_TASKS)


@pytest.mark.parametrize("task", MODEL_TASKS, ids=[t.name for t in MODEL_TASKS])
def test_model_task_ends_as_it_says(task: ModelTask, tmp_path: Path) -> None:
    result, records = run_model_task(task, tmp_path / "run.jsonl")
    reason = result.reason.value if result.reason else None
    assert (result.status, reason) == (task.expect_status, task.expect_reason), result.message
    if task.expect_status == "succeeded":
        assert result.result == task.expect_result
    if task.expect_message is not None:
        assert task.expect_message in (result.message or "")
    assert tuple(r["reason"] for r in records if r["type"] == "plan_rejected") == task.expect_rejected
    for kind, n in task.expect_records.items():
        assert sum(r["type"] == kind for r in records) == n, kind
