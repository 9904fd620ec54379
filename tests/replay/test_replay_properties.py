"""Property: any re-hashed edit of any non-clock field of a real run's log is a replay divergence.

The logs are real runs, made here by the engine on a fresh sample ledger with the demo's
recorded LLM answers (the scenarios behind audit_samples/). An edit changes one leaf of one
record (a string, number, boolean, null or empty container anywhere, the catalogue, policy
and config in ``run_started`` included), then the chain is re-hashed, as a forger would, so
that ``verify`` still passes. Replay against the deployment (its catalogue, policy, engine
config and model) must report every such edit: as a divergence, or by refusing a log whose
edited record breaks the audit schema.

Not generated: the clocks and chain fields (``ts``, ``duration_ms``, ``seq``, ``prev``,
``hash``), and the LLM provider's own metadata in ``llm_call`` (``model`` as answered,
``usage``, ``attempts``, ``finish_reason``, ``response_format``): observations that no
decision depends on, which replay cannot re-derive (see README, "Replay and resume").
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pte import Deployment, EngineConfig, Policy, load_pack, verify

# private: the demo's scenarios; the demo's registry; the demo, run in-process
from pte._cli import SCENARIOS, demo_registry, run_scenario

# private: replay's parts, white-box
from pte._replay import IGNORED_FIELDS
from pte.audit import canonical_json, read_records
from pte.engine import ReplayClient
from pte.errors import LogNotIntact
from pte.runs import replay_file

#: log name -> the demo scenario that makes it (as audit_samples/generate.py does).
MADE_BY = {
    "success": "three_figures_share",
    "success_with_write": "overdue_reminders",
    "replan": "replan_after_failure",
    "policy_violation": "injected_iban_blocked",
    "approved_payment": "payment_approved",
    "replans_exhausted": "replans_exhausted",
}
PROVIDER_METADATA = frozenset({"model", "usage", "attempts", "finish_reason", "response_format"})
REGISTRY = demo_registry()
POLICY = Policy.from_registry(REGISTRY)


def deployment(sample: str) -> Deployment:
    scenario = next(s for s in SCENARIOS if s.name == MADE_BY[sample])
    model = "recorded-demo-responses"
    return Deployment.of(
        registry=REGISTRY,
        policy=POLICY,
        config=EngineConfig(max_replans=scenario.max_replans),
        model=model,
        llm=ReplayClient(scenario.responses, model=model).describe,
    )


def _leaves(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if isinstance(value, dict) and value:
        for key, item in value.items():
            yield from _leaves(item, (*path, key))
    elif isinstance(value, list) and value:
        for index, item in enumerate(value):
            yield from _leaves(item, (*path, index))
    else:
        yield path


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    """One real run per scenario, on a fresh sample ledger."""
    workdir = tmp_path_factory.mktemp("runs")
    module = sys.modules[load_pack("backoffice")["get_supplier"].func.__module__]
    ledger = module.create_sample_ledger(workdir / "ledger.sqlite", overwrite=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PTE_LEDGER", str(ledger))
        out = {}
        for name, scenario_name in MADE_BY.items():
            scenario = next(s for s in SCENARIOS if s.name == scenario_name)
            outcome = run_scenario(scenario, REGISTRY, workdir, audit_path=workdir / f"{name}.jsonl")
            assert outcome.as_expected, name
            out[name] = read_records(outcome.audit_path)
    return out


def edit_points(name: str, records: list[dict[str, Any]]) -> list[tuple[str, int, tuple[Any, ...]]]:
    points: list[tuple[str, int, tuple[Any, ...]]] = []
    for index, record in enumerate(records):
        for field_name, value in record.items():
            if field_name in IGNORED_FIELDS or field_name == "run_id":
                continue
            if record["type"] == "llm_call" and field_name in PROVIDER_METADATA:
                continue
            points.extend((name, index, (field_name, *leaf)) for leaf in _leaves(value))
    return points


def _changed(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value + 0.25
    if isinstance(value, str):
        return value + "~"
    if value is None:
        return "x"
    if isinstance(value, list):
        return [1]
    return {"x": 1}


def forge(records: list[dict[str, Any]], index: int, path: tuple[Any, ...], target: Path) -> None:
    """Edit one leaf, then re-hash the chain from that record on (what a forger does)."""
    edited = json.loads(json.dumps(records))
    holder: Any = edited[index]
    for key in path[:-1]:
        holder = holder[key]
    holder[path[-1]] = _changed(holder[path[-1]])
    prev = edited[index]["prev"]
    for record in edited[index:]:
        record["prev"] = prev
        body = {k: v for k, v in record.items() if k != "hash"}
        record["hash"] = prev = hashlib.sha256((prev + canonical_json(body)).encode()).hexdigest()
    target.write_text("".join(canonical_json(r) + "\n" for r in edited), encoding="utf-8")


def reported(forged: Path, sample: str) -> bool:
    """Whether `pte replay` reports the edit: refused (the edit breaks the audit schema or a
    signed approval, which `verify` checks after the chain) or a divergence (exit 1 either way)."""
    if not verify(forged).intact:
        with pytest.raises(LogNotIntact, match=r"schema|approval"):
            replay_file(forged, deployment=deployment(sample))
        return True
    return not replay_file(forged, deployment=deployment(sample)).ok


@pytest.mark.parametrize("name", sorted(MADE_BY))
def test_the_unedited_logs_replay_the_same_against_the_deployment(
    name: str, logs: dict[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    path = tmp_path / "log.jsonl"
    path.write_text("".join(canonical_json(r) + "\n" for r in logs[name]), encoding="utf-8")
    report = replay_file(path, deployment=deployment(name))
    assert report.ok, report.render()


@settings(
    max_examples=100,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_every_rehashed_edit_of_a_non_clock_field_is_a_divergence(
    data: st.DataObject, logs: dict[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    name = data.draw(st.sampled_from(sorted(MADE_BY)), label="log")
    _, index, path = data.draw(st.sampled_from(edit_points(name, logs[name])), label="edit")
    forged = tmp_path / "forged.jsonl"
    forge(logs[name], index, path, forged)
    assert reported(forged, name), (name, index, path)


def test_every_rehashed_edit_outside_run_started_of_one_run_is_a_divergence(
    logs: dict[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    """Exhaustively, for one run with an approval: every leaf of every later record."""
    name = "approved_payment"
    records = logs[name]
    escaped = []
    points = [p for p in edit_points(name, records) if records[p[1]]["type"] != "run_started"]
    assert len(points) > 50
    for _, index, path in points:
        forged = tmp_path / "forged.jsonl"
        forge(records, index, path, forged)
        if not reported(forged, name):
            escaped.append((records[index]["type"], path))
    assert escaped == []
