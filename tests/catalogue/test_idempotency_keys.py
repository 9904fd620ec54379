"""Idempotency keys (pte._catalogue._idempotency): exactly-once for non-idempotent writes across a crash.

The fixture world's `pay` is a payment API with idempotency keys: it keeps the keys it has
seen next to its payments, in the same SQLite file, and a call with a known key pays nothing.
A run is killed with SIGKILL at every record boundary (before and after each record is
written), then resumed: every payment is made exactly once, including the one whose call
had taken effect (or not) between its write-ahead record and its result.
"""

from __future__ import annotations

import json
import os
import sqlite3
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

import pte
from pte import AuditLog, Engine, PlanRejected, ReasonCode, Registry, compile_plan, load_registry, verify

# private: idempotency key derivation; a tool's spec from its function
from pte._catalogue import derive_key, spec_of
from pte.audit import canonical_json, read_records
from pte.catalogue import ToolSpec
from pte.errors import ToolRegistrationError
from pte.runs import replay_file, resume_file
from tests._services import run_python
from tests.audit.test_audit_samples import _rehash
from tests.packs import world
from tests.replay.test_control_resume import CHILD

REPO = Path(__file__).resolve().parents[2]
PACK = str(Path(world.__file__))
#: The user's transactions, newest first (tests/packs/world.py): paid again, each once.
EXPECTED = [
    ("DE02100100100006820101", "19.99"),
    ("DE02120300000000202051", "54.90"),
    ("DE89370400440532013000", "1200.00"),
]
EACH = {
    "pte_plan": "1",
    "steps": [
        {"id": "tx", "tool": "transactions", "args": {"n": 3}},
        {
            "id": "pay",
            "tool": "pay",
            "for_each": {"$ref": "tx/transactions"},
            "max_items": 5,
            "args": {
                "iban": {"$ref": "tx/transactions/*/iban"},
                "amount": {"$ref": "tx/transactions/*/amount"},
                "subject": "Repeat payment",
            },
        },
    ],
    "result": {"$ref": "pay"},
}
PLAIN = {
    "pte_plan": "1",
    "steps": [
        {"id": "tx", "tool": "transactions", "args": {"n": 1}},
        {
            "id": "pay",
            "tool": "pay",
            "args": {
                "iban": {"$ref": "tx/transactions/0/iban"},
                "amount": {"$ref": "tx/transactions/0/amount"},
                "subject": "Repeat payment",
            },
        },
    ],
    "result": {"$ref": "pay"},
}


@pytest.fixture(scope="module")
def registry() -> Registry:
    return load_registry([PACK])


def _crash(tmp: Path, plan: dict[str, Any], kill_at: int, mode: str, db: Path) -> tuple[Path, int]:
    log = tmp / f"run-{mode}-{kill_at}.jsonl"
    env = {**os.environ, "PTE_WORLD": str(db), "KILL_AT": str(kill_at), "KILL_MODE": mode}
    # The same child as the for_each crash test: it kills itself at record `KILL_AT`.
    code = CHILD.format(repo=str(REPO), pack=PACK, plan=json.dumps(plan))
    child = run_python(code, str(log), env=env, timeout=120, warm=[PACK])
    return log, child.returncode


def _paid(db: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(db) as conn:
        return [(r[0], r[1]) for r in conn.execute("SELECT iban, amount FROM payments ORDER BY id")]


def _keys(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        return int(conn.execute("SELECT count(*) FROM payment_keys").fetchone()[0])


def _killed_everywhere_then_resumed(
    tmp: Path, registry: Registry, monkeypatch: pytest.MonkeyPatch, plan: dict[str, Any], expected: list[Any]
) -> int:
    """Kill before and after every record; resume; every payment exactly once. Returns how many
    crashes left a payment made but unrecorded (the case a key is for)."""
    db = tmp / "clean.sqlite"
    world.reset(str(db))
    log, code = _crash(tmp, plan, 10_000, "after", db)
    assert code == 0 and _paid(db) == expected
    total = len(read_records(log))
    unrecorded_effects = 0
    boundaries = [(k, "after") for k in range(total - 1)] + [(k, "before") for k in range(1, total)]
    for kill_at, mode in boundaries:
        db = tmp / f"world-{mode}-{kill_at}.sqlite"
        world.reset(str(db))
        log, code = _crash(tmp, plan, kill_at, mode, db)
        assert code == -9, f"the child was not killed at {mode} {kill_at}"
        records = read_records(log)
        finished = sum(1 for r in records if r["type"] == "step_finished" and r["step_id"].startswith("pay"))
        before = _paid(db)
        unrecorded_effects += len(before) > finished
        monkeypatch.setenv("PTE_WORLD", str(db))
        result = resume_file(log, registry)
        assert result.ok, (mode, kill_at, result.reason, result.message)
        assert _paid(db) == expected, (mode, kill_at)  # each payment exactly once
        assert _keys(db) == len(expected)
        assert verify(log).ok
        assert replay_file(log).ok, (mode, kill_at)
        # The keys recorded are the ones the run's id, plan and step give.
        resumed = read_records(log)
        run_id = resumed[0]["run_id"]
        plan_hash = next(r["plan_hash"] for r in resumed if r["type"] == "plan_accepted")
        for record in resumed:
            if record["type"] == "step_started" and record["step_id"].startswith("pay"):
                assert record["args"]["idempotency_key"] == derive_key(run_id, plan_hash, record["step_id"])
    return unrecorded_effects


def test_for_each_over_a_keyed_write_killed_at_every_record_pays_each_element_exactly_once(
    tmp_path: Path, registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _killed_everywhere_then_resumed(tmp_path, registry, monkeypatch, EACH, EXPECTED) >= 3


def test_plain_keyed_write_killed_at_every_record_pays_exactly_once(
    tmp_path: Path, registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _killed_everywhere_then_resumed(tmp_path, registry, monkeypatch, PLAIN, EXPECTED[:1]) >= 1


def _run(tmp: Path, registry: Registry, plan: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Path:
    tmp.mkdir(exist_ok=True)
    db = tmp / "world.sqlite"
    world.reset(str(db))
    monkeypatch.setenv("PTE_WORLD", str(db))
    log = tmp / "run.jsonl"
    with AuditLog(log) as audit:
        assert Engine(registry).execute(json.dumps(plan), audit).ok
    return log


def test_keys_are_per_run_and_per_element_and_recorded_before_the_call(
    tmp_path: Path, registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = read_records(_run(tmp_path / "a", registry, EACH, monkeypatch))
    second = read_records(_run(tmp_path / "b", registry, EACH, monkeypatch))

    def keys(records: list[dict[str, Any]]) -> list[str]:
        started = [r for r in records if r["type"] == "step_started" and "[" in r["step_id"]]
        return [r["args"]["idempotency_key"] for r in started]

    assert len(set(keys(first))) == 3 and all(k.startswith("pte-") for k in keys(first))
    assert not set(keys(first)) & set(keys(second))  # two runs of one plan: two sets of payments
    # What the tool was given is what the write-ahead record says.
    outputs = [r["output"]["id"] for r in first if r["type"] == "step_finished" and "[" in r["step_id"]]
    assert outputs == [1, 2, 3]


@pytest.mark.parametrize(
    "args",
    [
        {"idempotency_key": "pte-0000"},
        {"idempotency_key": {"$ref": "tx/transactions/*/subject"}},
    ],
)
def test_a_plan_or_data_cannot_set_the_key(registry: Registry, args: dict[str, Any]) -> None:
    plan = json.loads(json.dumps(EACH))
    plan["steps"][1]["args"].update(args)
    with pytest.raises(PlanRejected) as caught:
        compile_plan(json.dumps(plan), registry)
    assert caught.value.reason is ReasonCode.INVALID_ARGS
    assert "idempotency key" in caught.value.message
    plain = json.loads(json.dumps(PLAIN))
    plain["steps"][1]["args"]["idempotency_key"] = "pte-0000"
    with pytest.raises(PlanRejected):
        compile_plan(json.dumps(plain), registry)


def test_the_planner_is_not_shown_the_key_and_replay_rebuilds_it(registry: Registry) -> None:
    spec = registry["pay"]
    shown = spec.catalogue_entry()["input_schema"]
    assert "idempotency_key" not in shown["properties"] and "idempotency_key" not in shown["required"]
    rebuilt = ToolSpec.from_record(spec.describe())
    assert rebuilt.idempotency_key == "idempotency_key"
    assert rebuilt.catalogue_entry() == spec.catalogue_entry()


def test_registration_refuses_a_key_that_cannot_work() -> None:
    def read(key: str) -> int:
        return 1

    def numeric(key: int) -> int:
        return 1

    with pytest.raises(ToolRegistrationError, match="write tools"):
        pte.tool(idempotency_key="key")(read)
    with pytest.raises(ToolRegistrationError, match="str parameter"):
        pte.tool(effect="write", idempotency_key="key")(numeric)
    with pytest.raises(ToolRegistrationError, match="not a parameter"):
        pte.tool(effect="write", idempotency_key="other")(read)
    with pytest.raises(ToolRegistrationError, match="sink"):
        pte.tool(effect="write", idempotency_key="key", sinks={"key": "trusted"})(read)
    assert spec_of(pte.tool(effect="write", idempotency_key="key")(read)).idempotency_key == "key"


def test_an_edited_key_fails_verification_and_a_rechained_one_diverges(
    tmp_path: Path, registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    full = read_records(_run(tmp_path, registry, EACH, monkeypatch))
    # Cut after pay[1]'s write-ahead record, so that resume would call it again, with its key.
    cut = next(i for i, r in enumerate(full) if r["type"] == "step_started" and r["step_id"] == "pay[1]") + 1
    records = [dict(r) for r in full[:cut]]
    records[-1]["args"] = {**records[-1]["args"], "idempotency_key": "pte-" + "0" * 64}
    edited = tmp_path / "edited.jsonl"
    edited.write_text("".join(canonical_json(r) + "\n" for r in records), encoding="utf-8")
    assert not verify(edited).intact
    paid = _paid(tmp_path / "world.sqlite")
    with pytest.raises(pte.PTEError):
        resume_file(edited, registry)
    rechained = tmp_path / "rechained.jsonl"
    _rehash(records, rechained)
    assert verify(rechained).intact
    with pytest.raises(pte.PTEError) as caught:
        resume_file(rechained, registry)
    assert "idempotency_key" in str(caught.value) or "diverge" in str(caught.value).lower()
    assert _paid(tmp_path / "world.sqlite") == paid  # nothing was paid on the edited log's word
    # The same cut, unedited, resumes: pay[1] is called again with its own key and pays nothing new.
    honest = tmp_path / "honest.jsonl"
    _rehash([dict(r) for r in full[:cut]], honest)
    assert resume_file(honest, registry).ok
    assert _paid(tmp_path / "world.sqlite") == paid == EXPECTED
    assert Decimal(paid[0][1]) == Decimal("19.99")
