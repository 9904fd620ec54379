"""The data-operations cookbook: every task is an honest plan that runs to exactly its outcome.

Tasks live in tests/cookbook/<domain>.py (one TASKS list per domain); add a task there and
it is run here. The fixture packs are pte.testing.domains.*.
"""

from __future__ import annotations

import importlib
from typing import Any

import pytest

from pte.testing.cookbook import Task, cookbook_registry, dishonest_literals, run_task
from pte.testing.domains import DOMAINS

TASKS: list[Task] = [
    task for domain in DOMAINS for task in importlib.import_module(f"tests.cookbook.{domain}").TASKS
]


def test_the_cookbook_covers_every_domain() -> None:
    assert len(TASKS) >= 20
    assert {task.domain for task in TASKS} == set(DOMAINS)
    assert len({task.name for task in TASKS}) == len(TASKS), "task names must be unique"


@pytest.mark.parametrize("task", TASKS, ids=[t.name for t in TASKS])
def test_task_plan_is_honest(task: Task) -> None:
    assert dishonest_literals(task) == []


@pytest.mark.parametrize("task", TASKS, ids=[t.name for t in TASKS])
def test_task_runs_to_its_exact_outcome(task: Task) -> None:
    _, result = run_task(task)
    assert result.ok, result.failure
    if task.result is not None:
        assert result.result_value() == task.expect_result
    for step_id, expected in task.expect_outputs.items():
        assert result.outputs[step_id] == expected, step_id
    assert task.result is not None or task.expect_outputs, "a task must assert an outcome"


def test_the_honesty_check_catches_a_copied_value() -> None:
    from pte.testing.cookbook import ref, step

    copied = Task(
        "copied",
        "travel",
        "Book the highest-rated hotel in Paris from 2024-06-01 to 2024-06-03.",
        [step("b", "reserve_hotel", hotel="Hotel Lumiere", start_day="2024-06-01", end_day="2024-06-03")],
    )
    assert dishonest_literals(copied) == ["b: 'Hotel Lumiere'"]
    honest = Task(
        "x",
        "banking",
        "pay 75.00",
        [step("c", "calculator", expression="a + 75.00", variables={"a": ref("x")})],
    )
    assert dishonest_literals(honest) == []


def _registry(domain: str) -> Any:
    return cookbook_registry(domain)


def test_every_stock_data_operation_is_used_by_some_task() -> None:
    used = {step["tool"] for task in TASKS for step in task.steps}
    for wanted in (
        "first",
        "sort_records",
        "filter_records",
        "pluck",
        "entries",
        "get_key",
        "extract_into",
        "extract",
        "extract_amounts",
        "extract_dates",
        "section",
        "parse_fields",
        "difference",
        "count_by",
        "extreme_by",
        "filter_values",
        "time_between",
        "add_duration",
        "format_datetime",
        "to_number",
        "sum_field",
        "calculator",
    ):
        assert wanted in used, wanted


GUARDED = [task for task in TASKS if task.guarded]


def test_model_written_tasks_use_the_new_operations_under_the_guarded_policy() -> None:
    """Issue #25/#26: at least ten tasks written as a model writes them (descriptive step ids),
    each compiled under the default guarded policy (run_task applies it) with its outcome asserted."""
    assert len(GUARDED) >= 10
    used = {step.get("tool") for task in GUARDED for step in task.steps}
    for wanted in ("zip_lists", "join_records", "clock", "concat", "coalesce", "top_key", "extreme_by"):
        assert wanted in used, wanted
    assert any(step.get("default", 0) is None for task in GUARDED for step in task.steps)  # a null default
    for task in GUARDED:
        assert all(len(step["id"]) >= 8 for step in task.steps), task.name


@pytest.mark.parametrize(
    ("name", "step_id", "field", "untrusted_field"),
    [
        ("pay_back_latest_sent_transaction", "latest_sent_transaction", "field", "subject"),
        ("delete_largest_file", "largest_file", "field", "filename"),
        ("tip_a_payee_only_if_i_paid_them_before", "sent_to_that_payee", "field", "subject"),
    ],
)
def test_the_same_task_selecting_by_an_untrusted_field_is_refused(
    name: str, step_id: str, field: str, untrusted_field: str
) -> None:
    """The guarded tasks pass because their selections read trusted fields only: the same plan
    choosing its record by a third party's text fails closed before anything runs."""
    from pte import PlanRejected, ReasonCode

    task = next(t for t in GUARDED if t.name == name)
    steps = [dict(s, args=dict(s["args"])) for s in task.steps]
    next(s for s in steps if s["id"] == step_id)["args"][field] = untrusted_field
    steered = Task(task.name, task.domain, task.request, steps, task.result, guarded=True)
    with pytest.raises(PlanRejected) as caught:
        run_task(steered)
    assert caught.value.reason is ReasonCode.POLICY_VIOLATION
    assert "untrusted" in caught.value.message


@pytest.mark.parametrize("task", GUARDED, ids=[t.name for t in GUARDED])
def test_guarded_tasks_run_through_the_engine_and_replay_from_the_log(task: Task, tmp_path: Any) -> None:
    """The engine enforces the default guarded policy on its own; the run's log replays exactly
    (the clock's reading, a skipped step's null default, the selections' labels)."""
    import json

    from pte import AuditLog, Engine, EngineConfig
    from pte.engine import ReplayClient
    from pte.runs import replay_file

    registry = cookbook_registry(task.domain)
    log = tmp_path / "task.jsonl"
    engine = Engine(
        registry, ReplayClient([json.dumps(task.document())]), config=EngineConfig(llm_answer=False)
    )
    with AuditLog(log) as audit:
        result = engine.run(task.request, audit)
    assert result.status == "succeeded", result.message
    for step_id, expected in task.expect_outputs.items():
        assert result.outputs[step_id] == expected, step_id
    assert replay_file(log).ok
