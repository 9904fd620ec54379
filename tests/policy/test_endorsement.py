"""Endorsements (#26): a person vouches for one exact value at one call of one run, once.

Plans are written the way a model writes them (`pte.testing.ScriptedModel`), through the
public API. "Pay the bill in this file": the IBAN and amount exist only in the bill
(untrusted); the policy lets a person endorse them. The run pauses at the payment showing
both values and their source; an endorsement of exactly those values by a trusted key lets
it pay once; a tampered one, a reused one, one for another value, another step or another
run does not count; a rejection ends ``failed_closed(endorsement_rejected)``.
"""

from __future__ import annotations

import contextlib
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import pte
from pte import AuditLog, Deployment, Engine, Policy, Registry, SigningKey, TrustedKeys, tool, verify

# private: endorsements built by hand (tamper tests)
from pte._policy import make_endorsement
from pte.audit import read_records
from pte.errors import RunPaused
from pte.policy import (
    Endorsement,
    EndorsementGate,
    EndorsementRequest,
    EndorsementStore,
    endorse,
    pending_endorsement,
)
from pte.runs import resume_file
from pte.testing import ScriptedModel

BILL_IBAN = "DE44500105175407324931"
OTHER_IBAN = "GB29NWBK60161331926819"
PAID: list[dict[str, str]] = []


class Bill(BaseModel):
    iban: str
    amount: str
    text: str


class Receipt(BaseModel):
    payment_id: str


@tool(provenance="untrusted")
def read_bill(file: str) -> Bill:
    """Read a bill file (third-party text)."""
    return Bill(iban=BILL_IBAN, amount="120.50", text=f"Please pay EUR 120.50 to {BILL_IBAN} ({file})")


@tool(effect="write")
def pay(iban: str, amount: str, reference: str = "") -> Receipt:
    """Pay (guarded by the default policy: every parameter accepts only request/trusted data)."""
    PAID.append({"iban": iban, "amount": amount, "reference": reference})
    return Receipt(payment_id=f"P-{len(PAID)}")


REGISTRY = Registry([read_bill, pay])
ENDORSE = {"pte_policy": "1", "tools": {"pay": {"on_violation": {"iban": "endorse", "amount": "endorse"}}}}
POLICY = Policy.from_registry(REGISTRY).with_document(ENDORSE)
REQUEST = "Pay the bill in bill-december.txt"


def bill_plan(step: str = "pay_bill", reference: str = "bill-december") -> dict[str, Any]:
    """The plan a model writes for REQUEST: the bill's IBAN and amount by reference."""
    return {
        "pte_plan": "1",
        "steps": [
            {"id": "bill", "tool": "read_bill", "args": {"file": "bill-december.txt"}},
            {
                "id": step,
                "tool": "pay",
                "args": {
                    "iban": {"$ref": "bill/iban"},
                    "amount": {"$ref": "bill/amount"},
                    "reference": reference,
                },
            },
        ],
        "result": {"$ref": f"{step}/payment_id"},
    }


@pytest.fixture(autouse=True)
def _no_payments() -> None:
    PAID.clear()


@pytest.fixture
def signer() -> SigningKey:
    return SigningKey.generate()


@pytest.fixture
def gate(tmp_path: Path, signer: SigningKey) -> EndorsementGate:
    return EndorsementGate(
        EndorsementStore(tmp_path / "endorsements.jsonl"), keys=TrustedKeys([signer.public_key])
    )


def start(
    log: Path, gate: EndorsementGate | None, plan: dict[str, Any] | None = None
) -> pte.RunResult | None:
    """Run REQUEST with a model that writes `plan`; None when the run paused."""
    # max_replans=0: a refused plan is not sent back for repair (the script has one plan).
    engine = Engine(
        REGISTRY,
        ScriptedModel(planner=[plan or bill_plan()]),
        config=pte.EngineConfig(max_replans=0),
        policy=POLICY,
        endorsement=gate,
    )
    with AuditLog(log) as audit:
        try:
            return engine.run(REQUEST, audit)
        except RunPaused:
            return None


def resume(log: Path, gate: EndorsementGate) -> pte.RunResult:
    deployment = Deployment.of(policy=POLICY, endorsements=gate)
    return resume_file(log, REGISTRY, llm=ScriptedModel(finalizer=["Paid."]), deployment=deployment)


def request_of(log: Path) -> EndorsementRequest:
    request = pending_endorsement(read_records(log))
    assert request is not None
    return request


def test_the_run_pauses_at_the_payment_showing_the_values_and_their_source(
    tmp_path: Path, gate: EndorsementGate
) -> None:
    log = tmp_path / "run.jsonl"
    assert start(log, gate) is None
    assert PAID == []
    records = read_records(log)
    accepted = next(r for r in records if r["type"] == "plan_accepted")
    assert accepted["needs_endorsement"] == {"pay_bill": ["amount", "iban"]}
    assert [r.get("step_id") for r in records if r["type"] == "step_finished"] == ["bill"]
    request = request_of(log)
    assert request.step_id == "pay_bill" and request.element is None and request.tool == "pay"
    assert dict(request.values) == {"amount": "120.50", "iban": BILL_IBAN}
    assert "pay.iban ← bill/iban ← read_bill (untrusted)" in request.provenance["iban"]
    shown = request.describe()
    assert BILL_IBAN in shown and "120.50" in shown and "read_bill (untrusted)" in shown
    assert verify(log).intact


def test_endorsed_it_resumes_and_pays_once_and_replays(
    tmp_path: Path, gate: EndorsementGate, signer: SigningKey
) -> None:
    log = tmp_path / "run.jsonl"
    start(log, gate)
    made = endorse(gate.store, request_of(log), "alice", signing_key=signer)
    result = resume(log, gate)
    assert result.status == "succeeded", result.message
    assert PAID == [{"iban": BILL_IBAN, "amount": "120.50", "reference": "bill-december"}]
    types = [r["type"] for r in read_records(log)]
    assert types.index("endorsement") == types.index("step_started", types.index("run_resumed")) - 1
    record = next(r for r in read_records(log) if r["type"] == "endorsement")
    assert record["endorsement_id"] == made.id and record["signed"] is True
    assert verify(log).ok
    # Replay re-checks the signature and its binding to the replayed values, and runs nothing.
    report = pte.runs.replay_file(
        log, registry=REGISTRY, deployment=Deployment.of(policy=POLICY, keys=gate.keys)
    )
    assert report.ok, report.render()
    assert len(PAID) == 1
    # Resume of a finished run does nothing: the endorsement is never asked for or used again.
    with pytest.raises(pte.FailedClosed):
        resume(log, gate)
    assert len(PAID) == 1


def test_rejected_ends_failed_closed_endorsement_rejected(
    tmp_path: Path, gate: EndorsementGate, signer: SigningKey
) -> None:
    log = tmp_path / "run.jsonl"
    start(log, gate)
    endorse(gate.store, request_of(log), "bob", reject=True, note="not our supplier", signing_key=signer)
    result = resume(log, gate)
    assert (result.status, result.reason) == ("failed_closed", pte.ReasonCode.ENDORSEMENT_REJECTED)
    assert "not our supplier" in (result.message or "")
    assert PAID == []
    assert "endorsement_rejected" in [r["type"] for r in read_records(log)]
    assert verify(log).ok


def _still_paused(log: Path, gate: EndorsementGate, why: str) -> None:
    paid = len(PAID)
    with pytest.raises(RunPaused):
        resume(log, gate)
    assert len(PAID) == paid
    last = read_records(log)[-1]
    assert last["type"] == "run_paused" and last["reason"] == "awaiting_endorsement"
    assert why in last["message"], last["message"]


def test_a_tampered_endorsement_is_refused(tmp_path: Path, gate: EndorsementGate, signer: SigningKey) -> None:
    log = tmp_path / "run.jsonl"
    start(log, gate)
    made = endorse(EndorsementStore(tmp_path / "scratch.jsonl"), request_of(log), "alice", signing_key=signer)
    fields = {k: v for k, v in made.to_dict().items() if k != "pte_endorsement"}
    gate.store.add(Endorsement(**{**fields, "by": "mallory"}))  # the signer's name edited
    _still_paused(log, gate, "bad signature")


def test_an_unsigned_or_untrusted_endorsement_is_refused(tmp_path: Path, gate: EndorsementGate) -> None:
    log = tmp_path / "run.jsonl"
    start(log, gate)
    endorse(gate.store, request_of(log), "anyone")  # a store writer without a key
    endorse(gate.store, request_of(log), "eve", signing_key=SigningKey.generate())
    _still_paused(log, gate, "not a trusted approval key")
    assert "unsigned" in read_records(log)[-1]["message"]


def test_an_endorsement_of_another_value_is_refused(
    tmp_path: Path, gate: EndorsementGate, signer: SigningKey
) -> None:
    log = tmp_path / "run.jsonl"
    start(log, gate)
    request = request_of(log)
    other = {**request.values, "iban": OTHER_IBAN}
    endorse(
        gate.store,
        EndorsementRequest(
            **{**request.__dict__, "values": other, "value_hash": pte._policy._endorsement.value_hash(other)}
        ),
        "alice",
        signing_key=signer,
    )
    _still_paused(log, gate, "another value")


def test_an_endorsement_of_another_step_does_not_count(
    tmp_path: Path, gate: EndorsementGate, signer: SigningKey
) -> None:
    log = tmp_path / "run.jsonl"
    start(log, gate)
    request = request_of(log)
    endorse(
        gate.store, EndorsementRequest(**{**request.__dict__, "step_id": "bill"}), "alice", signing_key=signer
    )
    endorse(gate.store, EndorsementRequest(**{**request.__dict__, "element": 0}), "alice", signing_key=signer)
    _still_paused(log, gate, "needs a person's endorsement")


def test_an_endorsement_is_never_authority_for_another_run(
    tmp_path: Path, gate: EndorsementGate, signer: SigningKey
) -> None:
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    start(first, gate)
    start(second, gate)  # the same plan, the same values: another run
    endorse(gate.store, request_of(first), "alice", signing_key=signer)
    _still_paused(second, gate, "needs a person's endorsement")
    assert resume(first, gate).ok
    assert len(PAID) == 1
    # A copy of the consumed endorsement, rewritten to name the second run, breaks its signature.
    made = next(iter(gate.store))
    copied = Endorsement(
        **{k: v for k, v in made.to_dict().items() if k != "pte_endorsement"}
        | {"run": request_of(second).run_id}
    )
    gate.store.add(copied)
    _still_paused(second, gate, "bad signature")
    assert len(PAID) == 1


def test_a_consumed_endorsement_is_not_reused_by_another_call(
    tmp_path: Path, gate: EndorsementGate, signer: SigningKey
) -> None:
    """Single use in the store: a consumption line names the call that used it."""
    log = tmp_path / "run.jsonl"
    start(log, gate)
    made = endorse(gate.store, request_of(log), "alice", signing_key=signer)
    assert gate.store.consume(made, "another-run", "pay_bill", None) is None  # used elsewhere first
    _still_paused(log, gate, "already used")
    assert PAID == []


def test_replay_refuses_a_rewritten_endorsement_record(
    tmp_path: Path, gate: EndorsementGate, signer: SigningKey
) -> None:
    """Tamper: the endorsement record edited (another signer) and the chain re-hashed."""
    log = tmp_path / "run.jsonl"
    start(log, gate)
    endorse(gate.store, request_of(log), "alice", signing_key=signer)
    resume(log, gate)
    records = [dict(r) for r in read_records(log)]
    for record in records:
        if record["type"] == "endorsement":
            record["by"] = "mallory"
    log.write_bytes(_rechain(records))
    assert not verify(log).ok  # the id and the signature no longer match


def _rechain(records: list[dict[str, Any]]) -> bytes:
    """The records with seq, prev and hash recomputed: a consistent rewrite of the log."""
    from hashlib import sha256

    import rfc8785

    prev, out = "0" * 64, b""
    for seq, record in enumerate(records):
        body = {k: v for k, v in record.items() if k != "hash"}
        body["seq"], body["prev"] = seq, prev
        prev = sha256(prev.encode() + rfc8785.dumps(body)).hexdigest()
        out += rfc8785.dumps({**body, "hash": prev}) + b"\n"
    return out


def test_without_an_endorsement_gate_the_plan_is_refused_as_before(tmp_path: Path) -> None:
    result = start(tmp_path / "run.jsonl", None)
    assert result is not None
    assert (result.status, result.reason) == ("failed_closed", pte.ReasonCode.POLICY_VIOLATION)
    assert PAID == []


def test_a_refuse_sink_still_refuses_the_plan(tmp_path: Path, gate: EndorsementGate) -> None:
    """Only the parameters the policy marks endorse: reference (guarded, refuse) from the bill is refused."""
    plan = bill_plan()
    plan["steps"][1]["args"]["reference"] = {"$ref": "bill/text"}
    result = start(tmp_path / "run.jsonl", gate, plan)
    assert result is not None and result.reason == pte.ReasonCode.POLICY_VIOLATION
    assert PAID == []


def test_injection_an_untrusted_value_never_reaches_an_endorsable_sink_unendorsed(
    tmp_path: Path, gate: EndorsementGate, signer: SigningKey
) -> None:
    """The bill's text asks for another IBAN; whatever the model copies or references, the
    payment runs only with the exact value a person endorsed."""
    plans = [bill_plan()]
    injected = bill_plan()
    injected["steps"][1]["args"]["iban"] = {"$ref": "bill/text"}  # the attacker's text itself
    plans.append(injected)
    for n, plan in enumerate(plans):
        log = tmp_path / f"run{n}.jsonl"
        assert start(log, gate, plan) is None, "an untrusted value reached the sink without a pause"
        assert PAID == []
        # An endorsement a store writer adds for another value, or unsigned, never lets it run.
        endorse(gate.store, request_of(log), "mallory")
        with pytest.raises(RunPaused):
            resume(log, gate)
        assert PAID == []
        paused = read_records(log)[-1]
        assert paused["endorsement"]["values"] == dict(request_of(log).values)


def test_policy_schema_and_cli_schema_know_on_violation(capsys: pytest.CaptureFixture[str]) -> None:
    from pte.cli import main

    assert main(["schema", "policy"]) == 0
    schema = json.loads(capsys.readouterr().out)
    tool_schema = schema["$defs"]["tool"]["properties"]["on_violation"]
    per_param, whole_call = tool_schema["oneOf"][1], tool_schema["oneOf"][0]
    assert per_param["additionalProperties"] == {"enum": ["refuse", "endorse"]}
    assert whole_call == {"enum": ["refuse", "endorse"]}
    with pytest.raises(pte.errors.PolicyError):
        Policy.from_registry(REGISTRY).with_document(
            {"pte_policy": "1", "tools": {"pay": {"on_violation": "allow"}}}
        )
    with pytest.raises(pte.errors.PolicyError):
        Policy.from_registry(REGISTRY).with_document(
            {"pte_policy": "1", "tools": {"pay": {"on_violation": {"iban": "allow"}}}}
        )
    with pytest.raises(pte.errors.PolicyError):
        Policy.from_registry(REGISTRY).with_document(
            {"pte_policy": "1", "tools": {"pay": {"on_violation": {"nope": "endorse"}}}}
        )


def test_the_cli_cycle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """pte execute pauses, pte endorse shows and signs, pte resume pays once (file flow)."""
    import sqlite3
    import sys

    # private: the demo's scenario; the demo's policy
    from pte._cli import BILL_PAYMENT, ENDORSE_POLICY
    from pte.cli import main

    module = sys.modules[pte.load_pack("backoffice")["get_invoice"].func.__module__]
    ledger = tmp_path / "ledger.sqlite"
    module.create_sample_ledger(ledger, overwrite=True)
    monkeypatch.setenv("PTE_LEDGER", str(ledger))
    plan, policy = tmp_path / "bill.json", tmp_path / "policy.json"
    plan.write_text(BILL_PAYMENT, encoding="utf-8")
    policy.write_text(json.dumps(ENDORSE_POLICY), encoding="utf-8")
    key, public = tmp_path / "approver.key", tmp_path / "approver.pub"
    signer = SigningKey.generate()
    key.write_bytes(signer.to_pem())
    key.chmod(0o600)
    public.write_bytes(signer.public_key.to_pem())
    log, store, approvals = (
        tmp_path / "run.jsonl",
        tmp_path / "endorsements.jsonl",
        tmp_path / "approvals.jsonl",
    )
    deployment = ["--tools", "backoffice", "--policy", str(policy), "--approvals", str(approvals)]
    keys = ["--approval-keys", str(public), "--endorsements", str(store)]
    base = ["--quiet"]
    approve = ["approve", str(plan), "--by", "alice", "--signing-key", str(key), *deployment]
    from tests._cli_run import make_deployment

    # Under a deployment without an endorsement store the plan is refused...
    make_deployment(tmp_path, monkeypatch, capsys, *deployment, "--approval-keys", str(public),
                    "--no-endorsements", folder="without-endorsements")  # fmt: skip
    assert main([*base, *approve]) == 1
    # ...and approved under one that has it (its flags repeat the deployment's: accepted).
    make_deployment(tmp_path, monkeypatch, capsys, *deployment, *keys)
    assert main([*base, *approve, "--endorsements", str(store)]) == 0
    capsys.readouterr()
    assert main([*base, "execute", str(plan), *deployment, *keys, "--audit", str(log)]) == 0
    out = capsys.readouterr().out
    assert "awaiting_endorsement" in out and "DE62370400440532013001" in out and "612.40" in out
    assert "read_document (untrusted)" in out
    assert main([*base, "endorse", str(log), "--endorsements", str(store)]) == 0  # show only
    assert "send_payment.iban" in capsys.readouterr().out
    assert (
        main(
            [
                *base,
                "endorse",
                str(log),
                "--value-hash",
                "0" * 64,
                "--by",
                "alice",
                "--endorsements",
                str(store),
            ]
        )
        == 1
    )
    argv = ["endorse", str(log), "--by", "alice", "--signing-key", str(key), "--endorsements", str(store)]
    assert main([*base, *argv]) == 0
    capsys.readouterr()
    assert main([*base, "resume", str(log), *deployment, *keys, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["status"] == "succeeded"
    assert result["autonomy"] == {"writes_without_person": 0, "writes_with_person": 1}
    with sqlite3.connect(ledger) as conn:
        assert conn.execute("SELECT count(*) FROM payments_out").fetchone()[0] == 1
    assert main([*base, "audit", "verify", str(log)]) == 0
    capsys.readouterr()
    assert main([*base, "audit", "show", str(log)]) == 0
    shown = capsys.readouterr().out
    assert "awaiting endorsement at pay (send_payment)" in shown and "endorsed at pay" in shown
    assert main([*base, "replay", str(log), "--approval-keys", str(public)]) == 0
    # The run is finished: endorsing it again is refused, and nothing more is paid.
    assert main([*base, *argv]) == 1
    assert main([*base, "resume", str(log), *deployment, *keys]) == 1
    with sqlite3.connect(ledger) as conn:
        assert conn.execute("SELECT count(*) FROM payments_out").fetchone()[0] == 1


def test_a_store_run_pauses_for_an_endorsement_and_resumes_the_same_run(
    tmp_path: Path, gate: EndorsementGate, signer: SigningKey
) -> None:
    """The run store's pause: the run waits in SQLite, a person endorses, the same run pays once."""
    from pte.stores import open_store

    engine = Engine(
        REGISTRY,
        ScriptedModel(planner=[bill_plan()], finalizer=["Paid."]),
        policy=POLICY,
        endorsement=gate,
    )
    with open_store(f"sqlite://{tmp_path / 'runs.db'}") as store:
        paused = pte.deployment.run_in_store(engine, store, run_id="bill-1", request=REQUEST)
        assert isinstance(paused, pte.deployment.PausedRun) and paused.status == "awaiting_endorsement"
        assert PAID == []
        request = pending_endorsement(store.records("bill-1"))
        assert request is not None and dict(request.values)["iban"] == BILL_IBAN
        # Not decided yet: resuming pauses again, nothing is paid.
        again = pte.deployment.resume_run(store, "bill-1", REGISTRY, policy=POLICY, endorsements=gate)
        assert isinstance(again, pte.deployment.PausedRun) and PAID == []
        endorse(gate.store, request, "alice", signing_key=signer)
        done = pte.deployment.resume_run(
            store,
            "bill-1",
            REGISTRY,
            policy=POLICY,
            endorsements=gate,
            llm=ScriptedModel(finalizer=["Paid."]),
        )
        assert isinstance(done, pte.RunResult) and done.ok, done
        assert len(PAID) == 1
        assert (done.writes_with_person, done.writes_without_person) == (1, 0)
        assert store.verify("bill-1").intact
        # The view and the report count the payment as allowed by a person and show the request.
        view = pte.runs.RunView.fold("bill-1", store.records("bill-1"))
        summary = view.summary()
        assert (summary["writes_with_person"], summary["writes_without_person"]) == (1, 0)
        assert summary["endorsements"] == 1
        html = pte.runs.render_store_report(store, run_id="bill-1")
        assert "<h3>Endorsements</h3>" in html and BILL_IBAN in html and "read_bill (untrusted)" in html
        assert 'data-verified="true"' in html


def test_autonomy_counts_writes_that_ran_without_a_person(tmp_path: Path) -> None:
    plan = bill_plan()
    plan["steps"][1]["args"] = {
        "iban": "DE89370400440532013000",
        "amount": "5.00",
    }  # the request's own values
    engine = Engine(REGISTRY, ScriptedModel(planner=[plan], finalizer=["Paid."]), policy=POLICY)
    with AuditLog(tmp_path / "run.jsonl") as audit:
        result = engine.run("Pay EUR 5.00 to DE89370400440532013000", audit)
    assert result.ok and result.to_dict()["autonomy"] == {"writes_without_person": 1, "writes_with_person": 0}
    records = read_records(tmp_path / "run.jsonl")
    assert pte.runs.RunView.fold(result.run_id, records).autonomy() == {
        "writes_without_person": 1,
        "writes_with_person": 0,
    }


BILLS: list[Bill] = []


@tool(provenance="untrusted")
def read_any_bill(file: str) -> Bill:
    """Read a bill whose contents the test chooses (third-party text)."""
    return BILLS[-1]


def test_property_an_endorsement_of_one_value_never_lets_another_run(tmp_path_factory: Any) -> None:
    """For any two different bills, endorsing what the first run showed never pays the second's values."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    registry = Registry([read_any_bill, pay])
    policy = Policy.from_registry(registry).with_document(ENDORSE)
    text = st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,-", min_size=1, max_size=30)

    @settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
    @given(first=st.tuples(text, text), second=st.tuples(text, text))
    def check(first: tuple[str, str], second: tuple[str, str]) -> None:
        if first == second:
            return
        PAID.clear()
        tmp = tmp_path_factory.mktemp("prop")
        signer = SigningKey.generate()
        gate = EndorsementGate(EndorsementStore(tmp / "e.jsonl"), keys=TrustedKeys([signer.public_key]))
        plan = bill_plan()
        plan["steps"][0]["tool"] = "read_any_bill"
        log = tmp / "run.jsonl"
        BILLS.append(Bill(iban=first[0], amount=first[1], text=""))
        engine = Engine(registry, ScriptedModel(planner=[plan]), policy=policy, endorsement=gate)
        with AuditLog(log) as audit, pytest.raises(RunPaused):
            engine.run(REQUEST, audit)
        endorse(gate.store, request_of(log), "alice", signing_key=signer)
        # The bill changed between the pause and the resume (a re-read untrusted source).
        BILLS.append(Bill(iban=second[0], amount=second[1], text=""))
        deployment = Deployment.of(policy=policy, endorsements=gate)
        with contextlib.suppress(RunPaused, pte.errors.ReplayDivergence, pte.FailedClosed):
            resume_file(log, registry, llm=ScriptedModel(finalizer=["Paid."]), deployment=deployment)
        assert all((p["iban"], p["amount"]) == first for p in PAID), PAID
        # Another run showing the second bill: the first run's endorsement is no authority there.
        other = tmp / "other.jsonl"
        engine = Engine(registry, ScriptedModel(planner=[plan]), policy=policy, endorsement=gate)
        with AuditLog(other) as audit, pytest.raises(RunPaused):
            engine.run(REQUEST, audit)
        with pytest.raises(RunPaused):
            resume_file(other, registry, llm=ScriptedModel(finalizer=["Paid."]), deployment=deployment)
        assert all((p["iban"], p["amount"]) == first for p in PAID), PAID

    check()


def test_the_cli_cycle_in_a_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Approve the paused plan, resume, pause again at the payment for the values, endorse, pay once."""
    import sqlite3
    import sys

    # private: the demo's scenario; the demo's policy
    from pte._cli import BILL_PAYMENT, ENDORSE_POLICY
    from pte.cli import main
    from pte.stores import open_store

    module = sys.modules[pte.load_pack("backoffice")["get_invoice"].func.__module__]
    ledger = tmp_path / "ledger.sqlite"
    module.create_sample_ledger(ledger, overwrite=True)
    monkeypatch.setenv("PTE_LEDGER", str(ledger))
    plan, policy = tmp_path / "bill.json", tmp_path / "policy.json"
    plan.write_text(BILL_PAYMENT, encoding="utf-8")
    policy.write_text(json.dumps(ENDORSE_POLICY), encoding="utf-8")
    url, store_file = f"sqlite://{tmp_path / 'runs.db'}", tmp_path / "e.jsonl"
    flags = [
        "--tools",
        "backoffice",
        "--policy",
        str(policy),
        "--store",
        url,
        "--endorsements",
        str(store_file),
    ]
    from tests._cli_run import make_deployment

    make_deployment(tmp_path, monkeypatch, capsys, *flags)  # the flags then repeat the deployment's
    base = ["--quiet"]
    assert main([*base, "execute", str(plan), *flags, "--run-id", "b1"]) == 0
    assert "awaiting_approval" in capsys.readouterr().out
    assert main([*base, "approve", "b1", "--by", "alice", "--store", url]) == 0
    capsys.readouterr()
    assert main([*base, "resume", "b1", *flags]) == 0
    out = capsys.readouterr().out
    assert "awaiting_endorsement" in out and "DE62370400440532013001" in out
    with open_store(url) as store:
        request = pending_endorsement(store.records("b1"))
        assert request is not None
        endorse(EndorsementStore(store_file), request, "alice")
    assert main([*base, "resume", "b1", *flags, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "succeeded"
    assert main([*base, "resume", "b1", *flags]) == 1  # finished: nothing more
    with sqlite3.connect(ledger) as conn:
        assert conn.execute("SELECT count(*) FROM payments_out").fetchone()[0] == 1


def test_resume_after_a_crash_past_the_endorsed_call_does_not_ask_again_or_pay_twice(
    tmp_path: Path, gate: EndorsementGate, signer: SigningKey
) -> None:
    """The run is cut after the endorsed payment was recorded (before the answer): resume
    re-drives the call with its own consumption, serves the recorded payment, and finishes."""
    log = tmp_path / "run.jsonl"
    start(log, gate)
    endorse(gate.store, request_of(log), "alice", signing_key=signer)
    resume(log, gate)
    assert len(PAID) == 1
    lines = log.read_bytes().splitlines(keepends=True)
    types = [json.loads(line)["type"] for line in lines]
    cut = max(i for i, t in enumerate(types) if t == "step_finished") + 1
    log.write_bytes(b"".join(lines[:cut]))  # a crash right after the payment's record
    result = resume(log, gate)
    assert result.ok, result.message
    assert len(PAID) == 1
    assert types.count("endorsement") == 1
    assert [r["type"] for r in read_records(log)].count("run_paused") == 1


def test_a_log_cut_before_the_consumed_endorsement_does_not_let_the_write_run_again(
    tmp_path: Path, gate: EndorsementGate, signer: SigningKey
) -> None:
    """#33: the log is cut back to the pause after the endorsed payment ran (a lost tail, or a
    writer of the log). Re-driven from there, the call is not in the log, so it would run live:
    the store's consumption by this very call must not let it (a non-idempotent write, no key),
    as an approval's does not. The run fails closed for review instead of paying twice."""
    log = tmp_path / "run.jsonl"
    start(log, gate)
    paused = log.read_bytes()
    endorse(gate.store, request_of(log), "alice", signing_key=signer)
    assert resume(log, gate).ok
    assert len(PAID) == 1
    log.write_bytes(paused)  # the log as it was at the pause
    result = resume(log, gate)
    assert result.status == "failed_closed" and result.reason is pte.ReasonCode.NEEDS_REVIEW, result.message
    assert "already consumed by this call" in (result.message or "")
    assert len(PAID) == 1


KEYED_SEEN: dict[str, int] = {}


@tool(effect="write", idempotency_key="key")
def pay_keyed(iban: str, amount: str, key: str) -> Receipt:
    """Pay through an API with idempotency keys: a key seen before pays nothing again."""
    if key not in KEYED_SEEN:
        KEYED_SEEN[key] = len(KEYED_SEEN) + 1
        PAID.append({"iban": iban, "amount": amount, "reference": key})
    return Receipt(payment_id=f"P-{KEYED_SEEN[key]}")


def test_a_keyed_write_may_consume_its_own_endorsement_again_after_a_log_cut(
    tmp_path: Path, gate: EndorsementGate, signer: SigningKey
) -> None:
    """The same cut as above, for a tool with an idempotency key: the repeated call is harmless
    (the key is derived from run, plan and step), so the call passes and the API pays once."""
    registry = Registry([read_bill, pay_keyed])
    policy = Policy.from_registry(registry).with_document(
        {
            "pte_policy": "1",
            "tools": {"pay_keyed": {"on_violation": {"iban": "endorse", "amount": "endorse"}}},
        },
    )
    plan = bill_plan()
    plan["steps"][1] = {**plan["steps"][1], "tool": "pay_keyed"}
    del plan["steps"][1]["args"]["reference"]
    log = tmp_path / "run.jsonl"
    engine = Engine(registry, ScriptedModel(planner=[plan]), policy=policy, endorsement=gate)
    with AuditLog(log) as audit, pytest.raises(RunPaused):
        engine.run(REQUEST, audit)
    paused = log.read_bytes()
    endorse(gate.store, request_of(log), "alice", signing_key=signer)

    def again() -> pte.RunResult:
        deployment = Deployment.of(policy=policy, endorsements=gate)
        return resume_file(log, registry, llm=ScriptedModel(finalizer=["Paid."]), deployment=deployment)

    KEYED_SEEN.clear()
    assert again().ok
    log.write_bytes(paused)
    result = again()
    assert result.ok, result.message
    assert len(PAID) == 1


def test_a_request_expires_when_its_pause_says(tmp_path: Path, signer: SigningKey) -> None:
    """#33: the pause says "waiting until X"; resumed after X, the endorsement made for it does
    not count: the run asks again (a new request, a new X), and only a decision made for that
    request answers it."""
    now = [datetime.now(UTC)]
    gate = EndorsementGate(
        EndorsementStore(tmp_path / "e.jsonl"), keys=TrustedKeys([signer.public_key]), clock=lambda: now[0]
    )
    log = tmp_path / "run.jsonl"
    start(log, gate)
    first = read_records(log)[-1]["expires_at"]

    def decide() -> None:
        asked = request_of(log)
        made = make_endorsement(
            asked.run_id,
            asked.step_id,
            asked.element,
            asked.value_hash,
            "alice",
            signing_key=signer,
            at=now[0],
        )
        gate.store.add(made)

    decide()
    now[0] += timedelta(hours=25)  # past the 24 h the pause waited
    _still_paused(log, gate, "the request expired at")
    assert PAID == []
    assert read_records(log)[-1]["expires_at"] > first
    now[0] += timedelta(minutes=1)
    _still_paused(log, gate, "made for a request that expired at")  # the old one stays void
    decide()
    assert resume(log, gate).ok
    assert len(PAID) == 1
