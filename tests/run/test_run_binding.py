"""Issue 33: every run is bound to its deployment and anchored at its start, with its plan.

The red team's case: with the deployment key set, a run that crashed before its first write
had no anchor; a log (or database) writer swapped its plan for one paying an IBAN of their
choice, re-hashed the chain, and `pte resume` (or the worker the run was redelivered to)
paid it. Now the run's start and each plan are signed before any tool runs, and resume
refuses a run whose start the deployment never signed, a plan recorded after the last
anchor, and a run that started under another deployment (naming what differs).

A crash is reproduced as what it leaves behind: the log (or store rows) and the anchors file
as they were at that moment (both are append-only, and an anchor names only durable records).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import pte
from pte import AuditLog, Deployment, Engine, FailedClosed, Registry, SigningKey, tool

# private: the deployment binding a run records
from pte._audit import deployment_binding
from pte.audit import Anchors, canonical_json
from pte.deployment import resume_run, run_in_store
from pte.stores import Store
from tests._chain import relinked
from tests._services import postgres_url, store_fixture, write_tables  # noqa: F401 - postgres_url: the session fixture

KEY = SigningKey.generate()
PAID: list[tuple[str, str]] = []
ATTACKER = "GB33BUKB20201555555555"


class Payee(BaseModel):
    iban: str


class Paid(BaseModel):
    payment_id: str


@tool(effect="read")
def get_payee(name: str) -> Payee:
    """The payee's IBAN from the deployment's own records."""
    return Payee(iban="DE89370400440532013000")


@tool(effect="write")
def wire(iban: str, amount: str) -> Paid:
    """Pay `amount` EUR to `iban` (a write the deployment lets run without a person)."""
    PAID.append((iban, amount))
    return Paid(payment_id=f"P{len(PAID)}")


REGISTRY = Registry([get_payee, wire])


def _plan(iban: Any, amount: str) -> str:
    return json.dumps(
        {
            "pte_plan": "1",
            "steps": [
                {"id": "payee", "tool": "get_payee", "args": {"name": "ACME"}},
                {"id": "pay", "tool": "wire", "args": {"iban": iban, "amount": amount}},
            ],
            "result": {"$ref": "pay/payment_id"},
        }
    )


HONEST = _plan({"$ref": "payee/iban"}, "120.00")
SWAPPED = _plan(ATTACKER, "5000.00")


@pytest.fixture(autouse=True)
def _no_payments() -> Iterator[None]:
    PAID.clear()
    yield
    PAID.clear()


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _rechain(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Records re-hashed into a chain that verifies, as a writer without the key can."""
    return relinked(records)


def _write_log(path: Path, records: list[dict[str, Any]]) -> None:
    path.write_text("".join(canonical_json(r) + "\n" for r in records), encoding="utf-8")


def _before(records: list[dict[str, Any]], kind: str, step: str | None = None) -> int:
    return next(
        i for i, r in enumerate(records) if r["type"] == kind and (step is None or r.get("step_id") == step)
    )


def _crash_anchors(path: Path, run_id: str, records: int) -> None:
    """The anchors file as it was when `run_id` had written `records` records."""
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    kept = [ln for ln in lines if json.loads(ln)["run_id"] != run_id or json.loads(ln)["seq"] < records]
    path.write_text("".join(kept), encoding="utf-8")


def _execute(log: Path, plan: str, run_id: str, anchors: Any, deployment: Any = None) -> Any:
    with AuditLog(log, run_id=run_id, anchors=anchors) as audit:
        return Engine(REGISTRY, deployment=deployment).execute(plan, audit)


def _resume(log: Path, anchors: Any, fingerprint: Any = None) -> Any:
    return pte.runs.resume_file(
        log, REGISTRY, deployment=Deployment.of(anchors=anchors, fingerprint=fingerprint)
    )


def _swapped_log(tmp_path: Path, run_id: str, cut: int) -> list[dict[str, Any]]:
    """What the writer puts in place: the same run id, their plan, cut where the crash was."""
    scratch = tmp_path / "attacker.jsonl"
    assert _execute(scratch, SWAPPED, run_id, None).ok
    PAID.clear()
    return _rechain(_records(scratch)[:cut])


# --- the red team's case: a crashed run's plan swapped in the log --------------------------------


def test_a_plan_swapped_in_a_log_that_crashed_before_its_write_is_not_paid(tmp_path: Path) -> None:
    anchors_file = tmp_path / "anchors.jsonl"
    log = tmp_path / "audit.jsonl"
    assert _execute(log, HONEST, "r1", Anchors(anchors_file, key=KEY)).ok
    PAID.clear()
    # The crash: after the read, before the payment's write-ahead record.
    cut = _before(_records(log), "step_started", "pay")
    _crash_anchors(anchors_file, "r1", cut)
    assert [json.loads(ln)["seq"] for ln in anchors_file.read_text().splitlines()] == [0, 1]  # start, plan
    _write_log(log, _swapped_log(tmp_path, "r1", cut))
    assert pte.verify(log).intact  # the chain alone cannot tell
    with pytest.raises(FailedClosed, match="not the one the deployment signed"):
        _resume(log, Anchors(anchors_file, key=KEY))
    assert PAID == []


def test_the_honest_crashed_run_resumes_and_pays_once(tmp_path: Path) -> None:
    anchors_file = tmp_path / "anchors.jsonl"
    log = tmp_path / "audit.jsonl"
    assert _execute(log, HONEST, "r1", Anchors(anchors_file, key=KEY)).ok
    PAID.clear()
    cut = _before(_records(log), "step_started", "pay")
    _crash_anchors(anchors_file, "r1", cut)
    _write_log(log, _records(log)[:cut])
    result = _resume(log, Anchors(anchors_file, key=KEY))
    assert result.ok, result.message
    assert PAID == [("DE89370400440532013000", "120.00")]
    # Resumed once, anchored: a second resume of a copy cut back again is refused.
    _write_log(log, _records(log)[:cut])
    with pytest.raises(FailedClosed, match="falls short of its signed anchor"):
        _resume(log, Anchors(anchors_file, key=KEY))
    assert len(PAID) == 1


def test_a_run_the_deployment_never_anchored_is_not_resumed(tmp_path: Path) -> None:
    """A writer appends a whole unfinished run of their own (or the run crashed before its
    first record was signed): with the deployment key, resume refuses it."""
    log = tmp_path / "audit.jsonl"
    _write_log(log, _swapped_log(tmp_path, "made-up", 3))
    with pytest.raises(FailedClosed, match="never anchored run made-up's start"):
        _resume(log, Anchors(tmp_path / "anchors.jsonl", key=KEY))
    assert PAID == []


def test_a_plan_recorded_after_the_last_anchor_is_not_trusted(tmp_path: Path) -> None:
    """The crash came between the plan's record and its anchor: nothing ran under that plan,
    and a writer could have swapped it (re-hashing from there on). Resume refuses."""
    anchors_file = tmp_path / "anchors.jsonl"
    log = tmp_path / "audit.jsonl"
    assert _execute(log, HONEST, "r1", Anchors(anchors_file, key=KEY)).ok
    PAID.clear()
    plan_at = _before(_records(log), "plan_accepted")
    _crash_anchors(anchors_file, "r1", plan_at)  # only the start is signed
    records = _records(log)[: plan_at + 1]
    swapped = _swapped_log(tmp_path, "r1", plan_at + 1)
    _write_log(log, _rechain(records[:plan_at] + swapped[plan_at:]))
    with pytest.raises(FailedClosed, match=r"plan \(record 1\) is recorded after the run's last signed"):
        _resume(log, Anchors(anchors_file, key=KEY))
    assert PAID == []


def test_a_planner_answer_swapped_after_the_runs_start_is_not_paid(tmp_path: Path) -> None:
    """`pte run`: the run crashed after the planner's answer, before its plan was signed. The
    writer puts their plan in the recorded answer and re-hashes; resume would replay it."""
    from pte import EngineConfig
    from pte.testing import ScriptedModel

    anchors_file = tmp_path / "anchors.jsonl"
    log = tmp_path / "audit.jsonl"
    model = ScriptedModel(planner=[json.loads(HONEST)])
    with AuditLog(log, run_id="r1", anchors=Anchors(anchors_file, key=KEY)) as audit:
        engine = Engine(REGISTRY, model, config=EngineConfig(llm_answer=False))
        assert engine.run("Pay ACME's invoice: 120.00 EUR", audit).ok
    PAID.clear()
    records = _records(log)
    answer = _before(records, "llm_call")
    _crash_anchors(anchors_file, "r1", answer + 1)  # the start is signed, the answer not yet
    records = records[: answer + 1]
    records[answer]["response"] = SWAPPED
    _write_log(log, _rechain(records))
    with pytest.raises(FailedClosed, match=r"planner model answer \(record 1\) is recorded after"):
        _resume(log, Anchors(anchors_file, key=KEY))
    assert PAID == []


# --- the store form: a crashed worker run rewritten in the database ------------------------------


store = store_fixture("t_run_binding")


def _crash_store_run(store: Store, run_id: str, cut: int) -> None:
    """The run's rows as a worker killed after record `cut - 1` left them."""
    write_tables(store, "DELETE FROM pte_records WHERE run_id = ? AND seq >= ?", (run_id, cut))
    write_tables(store, "DELETE FROM pte_checkpoints WHERE run_id = ?", (run_id,))
    write_tables(store, "UPDATE pte_runs SET status = 'running', reason = NULL WHERE run_id = ?", (run_id,))


def _rewrite_store_run(store: Store, run_id: str, records: list[dict[str, Any]]) -> None:
    for record in records:
        write_tables(
            store,
            "UPDATE pte_records SET type = ?, prev = ?, hash = ?, line = ? WHERE run_id = ? AND seq = ?",
            (record["type"], record["prev"], record["hash"], canonical_json(record), run_id, record["seq"]),
        )


def test_a_crashed_worker_run_rewritten_in_the_database_is_not_paid_when_redelivered(
    store: Store, tmp_path: Path
) -> None:
    anchors_file = tmp_path / "anchors.jsonl"
    assert run_in_store(
        Engine(REGISTRY), store, run_id="w1", plan_text=HONEST, anchors=Anchors(anchors_file, key=KEY)
    ).ok
    PAID.clear()
    cut = _before(store.records("w1"), "step_started", "pay")
    _crash_store_run(store, "w1", cut)
    _crash_anchors(anchors_file, "w1", cut)
    _rewrite_store_run(store, "w1", _swapped_log(tmp_path, "w1", cut))
    assert store.verify("w1").intact  # the chain alone cannot tell
    with pytest.raises(FailedClosed, match="not the one the deployment signed"):
        resume_run(store, "w1", REGISTRY, anchors=Anchors(anchors_file, key=KEY))  # redelivered
    assert PAID == []
    # Not rewritten, the crashed run is redelivered and pays once.
    other = tmp_path / "other.jsonl"
    assert run_in_store(
        Engine(REGISTRY), store, run_id="w2", plan_text=HONEST, anchors=Anchors(other, key=KEY)
    ).ok
    PAID.clear()
    _crash_store_run(store, "w2", cut)
    _crash_anchors(other, "w2", cut)
    result = resume_run(store, "w2", REGISTRY, anchors=Anchors(other, key=KEY))
    assert not isinstance(result, pte.deployment.PausedRun) and result.ok, result
    assert PAID == [("DE89370400440532013000", "120.00")]


# --- the deployment fingerprint ----------------------------------------------------------------

BINDING = {"fingerprint": "d" * 64, "parts": {"catalogue": "c" * 64, "approver_keys": "k" * 64}}


def test_run_started_records_the_deployment_and_resume_refuses_another(tmp_path: Path) -> None:
    anchors_file = tmp_path / "anchors.jsonl"
    log = tmp_path / "audit.jsonl"
    assert _execute(log, HONEST, "r1", Anchors(anchors_file, key=KEY), deployment=BINDING).ok
    started = _records(log)[0]
    assert started["deployment"] == BINDING
    assert pte.verify(log).ok
    assert pte.replay(log, registry=REGISTRY).ok  # replay reproduces the recorded binding
    PAID.clear()
    cut = _before(_records(log), "step_started", "pay")
    _crash_anchors(anchors_file, "r1", cut)
    _write_log(log, _records(log)[:cut])
    other = {"fingerprint": "e" * 64, "parts": {"catalogue": "c" * 64, "approver_keys": "0" * 64}}
    with pytest.raises(FailedClosed, match=r"started under deployment d{16}….*what differs: approver_keys"):
        _resume(log, Anchors(anchors_file, key=KEY), fingerprint=other)
    with pytest.raises(FailedClosed, match="not the deployment in hand"):
        _resume(log, Anchors(anchors_file, key=KEY), fingerprint="e" * 64)
    assert PAID == []
    result = _resume(log, Anchors(anchors_file, key=KEY), fingerprint="d" * 64)  # the same deployment
    assert result.ok, result.message
    assert len(PAID) == 1


def test_the_node_verifier_accepts_a_bound_run_and_the_schema_refuses_a_malformed_binding(
    tmp_path: Path,
) -> None:
    import subprocess

    import tests._services as _services

    verifier = Path(__file__).resolve().parents[2] / "verifier" / "verify.mjs"
    log = tmp_path / "audit.jsonl"
    assert _execute(log, HONEST, "r1", None, deployment=BINDING).ok

    def node_ok(path: Path) -> bool:
        out = subprocess.run(
            [_services.node(), str(verifier), str(path), "--json"], capture_output=True, text=True, timeout=60
        )
        assert out.returncode in (0, 1), out.stderr
        return bool(json.loads(out.stdout)["ok"])

    assert node_ok(log) and pte.verify(log).ok
    for bad in ({"fingerprint": "d" * 64}, {"fingerprint": "has space", "parts": {}}, "d" * 64):
        records = _records(log)
        records[0]["deployment"] = bad
        edited = tmp_path / "edited.jsonl"
        _write_log(edited, _rechain(records))
        assert not node_ok(edited)
        assert not pte.verify(edited).ok


def test_a_store_run_under_another_deployment_is_refused_by_resume(store: Store, tmp_path: Path) -> None:
    anchors = Anchors(tmp_path / "anchors.jsonl", key=KEY)
    engine = Engine(REGISTRY, deployment="d" * 64)
    assert run_in_store(engine, store, run_id="w1", plan_text=HONEST, anchors=anchors).ok
    PAID.clear()
    cut = _before(store.records("w1"), "step_started", "pay")
    _crash_store_run(store, "w1", cut)
    _crash_anchors(tmp_path / "anchors.jsonl", "w1", cut)
    with pytest.raises(FailedClosed, match="not the deployment in hand"):
        resume_run(store, "w1", REGISTRY, anchors=anchors, deployment="e" * 64)
    assert PAID == []
    result = resume_run(store, "w1", REGISTRY, anchors=anchors, deployment="d" * 64)
    assert not isinstance(result, pte.deployment.PausedRun) and result.ok, result
    assert len(PAID) == 1


def test_a_run_recorded_before_runs_were_bound_still_resumes(tmp_path: Path) -> None:
    """No ``deployment`` member (an older log): not refused for it; its anchors decide."""
    anchors_file = tmp_path / "anchors.jsonl"
    log = tmp_path / "audit.jsonl"
    assert _execute(log, HONEST, "r1", Anchors(anchors_file, key=KEY)).ok
    assert "deployment" not in _records(log)[0]
    PAID.clear()
    cut = _before(_records(log), "step_started", "pay")
    _crash_anchors(anchors_file, "r1", cut)
    _write_log(log, _records(log)[:cut])
    assert _resume(log, Anchors(anchors_file, key=KEY), fingerprint="d" * 64).ok
    assert len(PAID) == 1


@pytest.mark.parametrize(
    "bad",
    ["", "has space", "x" * 201, {"fingerprint": "d" * 64, "parts": {"Bad Name": "x"}}, {"parts": {}}, 7],
)
def test_a_malformed_deployment_fingerprint_is_refused_before_a_run(bad: Any) -> None:
    with pytest.raises(ValueError, match="deployment"):
        Engine(REGISTRY, deployment=bad)
    with pytest.raises(ValueError):
        deployment_binding(bad)


def test_an_object_with_a_fingerprint_binds_the_run() -> None:
    class Deployed:
        fingerprint = "f" * 64
        parts = {"policy": "p" * 64}

    assert Engine(REGISTRY, deployment=Deployed()).deployment == {
        "fingerprint": "f" * 64,
        "parts": {"policy": "p" * 64},
    }
