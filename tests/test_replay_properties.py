"""Property: any re-hashed edit of any non-clock field of a real run's log is a replay divergence.

The logs are real runs (audit_samples/, made by the engine with the demo's recorded LLM
answers). An edit changes one leaf of one record — a string, number, boolean, null or empty
container anywhere, the catalogue, policy and config in ``run_started`` included — then the
chain is re-hashed, as a forger would, so that ``verify`` passes. Replay against the
deployment (its catalogue, policy, engine config and model) must report a divergence for
every such edit.

Not generated: the clocks and chain fields (``ts``, ``duration_ms``, ``seq``, ``prev``,
``hash``), and the LLM provider's own metadata in ``llm_call`` (``model`` as answered,
``usage``, ``attempts``, ``finish_reason``, ``response_format``): observations that no
decision depends on, which replay cannot re-derive (see README, "Replay and resume").
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pte.audit import read_records, verify
from pte.canonical import canonical_json
from pte.demo import SCENARIOS, demo_registry
from pte.engine import EngineConfig
from pte.llm import ReplayClient
from pte.policy import Policy
from pte.replay import IGNORED_FIELDS, Deployment, LogNotIntact, replay_file

SAMPLES = Path(__file__).resolve().parents[1] / "audit_samples"
#: sample -> the demo scenario that made it (audit_samples/generate.py).
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
    return Deployment(
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


def edit_points(sample: str) -> list[tuple[str, int, tuple[Any, ...]]]:
    points = []
    for index, record in enumerate(read_records(SAMPLES / f"{sample}.jsonl")):
        for name, value in record.items():
            if name in IGNORED_FIELDS or name == "run_id":
                continue
            if record["type"] == "llm_call" and name in PROVIDER_METADATA:
                continue
            points.extend((sample, index, (name, *leaf)) for leaf in _leaves(value))
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
    """Whether `pte replay` reports the edit: refused (the edit breaks the audit schema, which
    `verify` checks after the chain) or a divergence (exit 1 either way)."""
    if not verify(forged).intact:
        with pytest.raises(LogNotIntact, match="schema"):
            replay_file(forged, deployment=deployment(sample))
        return True
    return not replay_file(forged, deployment=deployment(sample)).ok


POINTS = [point for sample in MADE_BY for point in edit_points(sample)]


@pytest.mark.parametrize("sample", sorted(MADE_BY))
def test_the_unedited_samples_replay_the_same_against_the_deployment(sample: str) -> None:
    report = replay_file(SAMPLES / f"{sample}.jsonl", deployment=deployment(sample))
    assert report.ok, report.render()


@settings(
    max_examples=100,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(point=st.sampled_from(POINTS))
def test_every_rehashed_edit_of_a_non_clock_field_is_a_divergence(
    point: tuple[str, int, tuple[Any, ...]], tmp_path: Path
) -> None:
    sample, index, path = point
    records = read_records(SAMPLES / f"{sample}.jsonl")
    forged = tmp_path / "forged.jsonl"
    forge(records, index, path, forged)
    assert reported(forged, sample), (sample, index, path)


def test_every_rehashed_edit_outside_run_started_of_one_run_is_a_divergence(tmp_path: Path) -> None:
    """Exhaustively, for one run with an approval: every leaf of every later record."""
    sample = "approved_payment"
    records = read_records(SAMPLES / f"{sample}.jsonl")
    escaped = []
    points = [p for p in edit_points(sample) if records[p[1]]["type"] != "run_started"]
    assert len(points) > 50
    for _, index, path in points:
        forged = tmp_path / "forged.jsonl"
        forge(records, index, path, forged)
        if not reported(forged, sample):
            escaped.append((records[index]["type"], path))
    assert escaped == []
