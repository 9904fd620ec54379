"""Approvals: Ed25519-signed, bound to the plan hash and the catalogue fingerprint, expiring, consumed."""

from __future__ import annotations

import json
import multiprocessing
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from pydantic import BaseModel

from pte import (
    AuditLog,
    Engine,
    Plan,
    Policy,
    ReasonCode,
    Registry,
    SigningKey,
    TrustedKeys,
    approve,
    compile_plan,
    tool,
    verify,
)

# private: the approval gate and its checks driven directly; keys from the environment
from pte._policy import (
    ApprovalGate,
    ProcedureCover,
    check_approval,
    public_keys_from_env,
    requires_approval,
    signing_key_from_env,
)
from pte.audit import Approval, canonical_json, read_records
from pte.engine import ReplayClient
from pte.errors import ApprovalConsumed, ApprovalMissing, KeyFileError
from pte.policy import ApprovalStore, approval_hook, catalogue_fingerprint
from tests.audit_runs import begun

SIGNER = SigningKey.generate()
KEYS = TrustedKeys([SIGNER.public_key])
OTHER = SigningKey.generate()
AT = datetime(2026, 11, 1, 9, 30, tzinfo=UTC)
CALLS: list[str] = []


class Receipt(BaseModel):
    payment_id: str


class Supplier(BaseModel):
    iban: str


@tool
def get_supplier(supplier_id: str) -> Supplier:
    """Trusted supplier lookup."""
    CALLS.append("get_supplier")
    if supplier_id == "missing":
        raise ValueError("no such supplier")
    return Supplier(iban="DE89370400440532013000")


@tool(effect="write", requires_approval=True, sinks={"iban": ["request", "trusted"]})
def send_payment(iban: str, amount: str) -> Receipt:
    """Pay (needs an approved plan)."""
    CALLS.append("send_payment")
    return Receipt(payment_id="P-1")


REGISTRY = Registry([get_supplier, send_payment])


def _other_send_payment() -> Any:
    # Same name, same schema, same flags: different code (another pack).
    @tool(effect="write", requires_approval=True, sinks={"iban": ["request", "trusted"]}, name="send_payment")
    def send_payment(iban: str, amount: str) -> Receipt:
        """Pay (needs an approved plan)."""
        CALLS.append("other_send_payment")
        return Receipt(payment_id="P-EVIL")

    return send_payment


def plan_text(supplier: str = "S1", amount: str = "120.00") -> str:
    return json.dumps(
        {
            "pte_plan": "1",
            "steps": [
                {"id": "sup", "tool": "get_supplier", "args": {"supplier_id": supplier}},
                {
                    "id": "pay",
                    "tool": "send_payment",
                    "args": {"iban": {"$ref": "sup/iban"}, "amount": amount},
                },
            ],
            "result": {"$ref": "pay/payment_id"},
        }
    )


LOOKUP_ONLY = json.dumps(
    {"pte_plan": "1", "steps": [{"id": "sup", "tool": "get_supplier", "args": {"supplier_id": "S1"}}]}
)


def compiled(text: str | None = None) -> Plan:
    return compile_plan(text or plan_text(), REGISTRY)


def fingerprint(plan: Plan, registry: Registry = REGISTRY) -> str:
    return catalogue_fingerprint(registry, plan, Policy.from_registry(registry))


def give(
    plan: Plan, store: ApprovalStore, by: str = "alice", key: SigningKey | None = SIGNER, **kw: Any
) -> Approval:
    kw.setdefault("at", datetime.now(UTC))
    return approve(plan, by, store, catalogue=fingerprint(plan), signing_key=key, **kw)


def gate(
    store: ApprovalStore, keys: TrustedKeys | None = KEYS, registry: Registry = REGISTRY
) -> ApprovalGate:
    return approval_hook(store, registry=registry, keys=keys, policy=Policy.from_registry(registry))


@pytest.fixture(autouse=True)
def _reset_calls() -> None:
    CALLS.clear()


@pytest.fixture
def store(tmp_path: Path) -> ApprovalStore:
    return ApprovalStore(tmp_path / "approvals.jsonl")


def rewrite(store: ApprovalStore, **changes: Any) -> None:
    """Edit the (single) stored approval as an attacker with write access to the file would."""
    (line,) = store.path.read_text(encoding="utf-8").splitlines()
    store.path.write_text(json.dumps({**json.loads(line), **changes}) + "\n", encoding="utf-8")


def check(
    plan: Plan, store: ApprovalStore, keys: TrustedKeys | None = KEYS
) -> Approval | ProcedureCover | None:
    return check_approval(plan, REGISTRY, store, keys=keys, policy=Policy.from_registry(REGISTRY))


def records_of(path: Path, kind: str) -> list[dict[str, Any]]:
    return [r for r in read_records(path) if r["type"] == kind]


# --- approve / check -----------------------------------------------------------------------


def test_requires_approval_lists_the_plans_guarded_tools() -> None:
    assert requires_approval(compiled(), REGISTRY) == ["send_payment"]
    assert requires_approval(compiled(LOOKUP_ONLY), REGISTRY) == []


def test_a_plan_without_guarded_tools_needs_no_approval(store: ApprovalStore) -> None:
    assert check(compiled(LOOKUP_ONLY), store) is None


def test_a_signed_approval_is_the_ed25519_signature_of_the_documented_message(store: ApprovalStore) -> None:
    plan = compiled()
    approval = give(plan, store, at=AT, valid_for=timedelta(hours=2))
    assert approval.expires == "2026-11-01T11:30:00.000000Z"
    assert approval.run is not None  # a new run, the one this approval lets execute
    message = (
        b"pte-approval-v3\n"
        + canonical_json(
            {
                "pte_approval": "3",
                "plan_hash": plan.hash,
                "catalogue": fingerprint(plan),
                "by": "alice",
                "at": "2026-11-01T09:30:00.000000Z",
                "expires": "2026-11-01T11:30:00.000000Z",
                "key_id": SIGNER.public_key.key_id,
                "run": approval.run,
            }
        ).encode()
    )
    assert approval.message() == message
    # Checked with nothing but the cryptography package and the approval's own fields.
    Ed25519PublicKey.from_public_bytes(bytes.fromhex(str(approval.public_key))).verify(
        bytes.fromhex(str(approval.signature)), message
    )


def test_unsigned_approval_counts_only_without_keys(store: ApprovalStore) -> None:
    plan = compiled()
    approval = give(plan, store, key=None)
    assert not approval.signed
    assert check(plan, store, keys=None) == approval
    with pytest.raises(ApprovalMissing, match="unsigned, while approval public keys are configured"):
        check(plan, store)


def test_approval_of_a_different_hash_does_not_count(store: ApprovalStore) -> None:
    give(compiled(plan_text(amount="1.00")), store)
    with pytest.raises(ApprovalMissing, match="no approval is recorded"):
        check(compiled(), store)


@pytest.mark.parametrize(
    "changes",
    [
        {"by": "mallory"},
        {"at": "2026-11-01T09:31:00.000000Z"},
        {"expires": "2099-01-01T00:00:00.000000Z"},
        {"signature": "0" * 128},
    ],
)
def test_any_edit_of_a_stored_approval_breaks_its_signature(store: ApprovalStore, changes: Any) -> None:
    plan = compiled()
    give(plan, store)
    rewrite(store, **changes)
    with pytest.raises(ApprovalMissing, match="bad signature"):
        check(plan, store)


def test_a_signature_copied_to_another_plan_does_not_count(store: ApprovalStore) -> None:
    give(compiled(), store)
    other = compiled(plan_text(amount="9800.00"))
    rewrite(store, plan_hash=other.hash)
    with pytest.raises(ApprovalMissing, match="bad signature"):
        check(other, store)


def test_a_key_that_is_not_trusted_is_refused(store: ApprovalStore) -> None:
    plan = compiled()
    give(plan, store, key=OTHER)  # a perfectly valid signature, by someone not trusted
    with pytest.raises(ApprovalMissing, match="not a trusted approval key"):
        check(plan, store)
    # The attacker swaps in a trusted key id but keeps their own public key and signature.
    rewrite(store, key_id=SIGNER.public_key.key_id)
    with pytest.raises(ApprovalMissing, match="bad signature"):
        check(plan, store)


def test_an_expired_approval_is_refused(store: ApprovalStore) -> None:
    plan = compiled()
    give(plan, store, at=datetime.now(UTC) - timedelta(hours=25))
    with pytest.raises(ApprovalMissing, match="expired at"):
        check(plan, store)


def test_an_approval_binds_the_catalogue_code_included(store: ApprovalStore, tmp_path: Path) -> None:
    plan = compiled()
    given = give(plan, store)
    other = Registry([get_supplier, _other_send_payment()])
    assert fingerprint(plan, other) != fingerprint(plan)
    log = tmp_path / "audit.jsonl"
    result = Engine(other, None, approval=gate(store, registry=other)).execute(
        plan_text(), AuditLog(log, run_id=given.run)
    )
    assert result.reason is ReasonCode.APPROVAL_MISSING and CALLS == []
    assert "fingerprint" in (result.message or "")
    # A weaker policy is a different catalogue too.
    opened = Policy.from_registry(REGISTRY, default="open").with_document(
        {
            "pte_policy": "1",
            "tools": {"send_payment": {"sinks": {"iban": ["request", "trusted", "untrusted"]}}},
        }
    )
    assert catalogue_fingerprint(REGISTRY, plan, opened) != fingerprint(plan)


def test_the_latest_valid_approval_is_returned(store: ApprovalStore) -> None:
    plan = compiled()
    give(plan, store, by="alice")
    bob = give(plan, store, by="bob")
    give(plan, store, by="mallory", key=OTHER)
    assert check(plan, store) == bob


def test_a_missing_store_holds_no_approvals(tmp_path: Path) -> None:
    store = ApprovalStore(tmp_path / "nope.jsonl")
    assert list(store) == []
    with pytest.raises(ApprovalMissing, match="no approval is recorded"):
        check(compiled(), store)


@pytest.mark.parametrize(
    "line",
    ["{not json", "[]", '{"consumed": "x"}', '{"pte_approval": "2", "plan_hash": "abc"}'],
)
def test_a_malformed_store_fails_closed(store: ApprovalStore, line: str) -> None:
    plan = compiled()
    give(plan, store)
    with store.path.open("a", encoding="utf-8") as fh:
        fh.write(line + "\n")
    with pytest.raises(ApprovalMissing, match=r"approval store cannot be read.*line 2"):
        check(plan, store)


def test_an_old_hmac_approval_is_named_and_refused(store: ApprovalStore) -> None:
    plan = compiled()
    old = {"plan_hash": plan.hash, "by": "alice", "at": "2026-11-01T00:00:00Z", "signature": "ab" * 32}
    store.path.write_text(json.dumps(old) + "\n", encoding="utf-8")
    with pytest.raises(ApprovalMissing, match=r"old HMAC approval.*by alice.*approve the plan again"):
        check(plan, store)


@pytest.mark.parametrize("by", ["", "   ", "alice\n2026-11-01T00:00:00Z", "bob\r", "eve\x00"])
def test_names_with_control_characters_are_refused(store: ApprovalStore, by: str) -> None:
    with pytest.raises(ValueError, match="by must"):
        give(compiled(), store, by=by)
    assert not store.path.exists()


def test_unicode_names_are_stored_as_one_line(store: ApprovalStore) -> None:
    plan = compiled()
    approval = give(plan, store, by="Zoë\u2028Müller")
    assert store.path.read_text(encoding="utf-8").count("\n") == 1
    assert check(plan, store) == approval


def test_keys_from_files_and_environment(tmp_path: Path) -> None:
    private, public = tmp_path / "k.pem", tmp_path / "k.pub"
    private.write_bytes(SIGNER.to_pem())
    public.write_bytes(SIGNER.public_key.to_pem() + OTHER.public_key.to_pem())
    assert public_keys_from_env(environ={}) is None
    keys = public_keys_from_env(public, environ={})
    assert keys is not None and set(keys) == {SIGNER.public_key.key_id, OTHER.public_key.key_id}
    env = {"PTE_APPROVAL_PUBLIC_KEYS": SIGNER.public_key.to_pem().decode()}
    assert set(public_keys_from_env(environ=env) or ()) == {SIGNER.public_key.key_id}
    loaded = signing_key_from_env(environ={"PTE_APPROVAL_SIGNING_KEY_FILE": str(private)})
    assert loaded is not None and loaded.public_key.key_id == SIGNER.public_key.key_id
    assert "PRIVATE" not in repr(loaded)
    with pytest.raises(KeyFileError, match="no PEM public key"):
        public_keys_from_env(private, environ={})
    with pytest.raises(KeyFileError, match=r"HMAC key.*no longer supported"):
        public_keys_from_env(environ={"PTE_APPROVAL_KEY": "old-secret"})


# --- engine integration: gate, evidence, consumption -----------------------------------------


def test_unapproved_plan_fails_closed_before_any_step(tmp_path: Path, store: ApprovalStore) -> None:
    log = tmp_path / "audit.jsonl"
    result = Engine(REGISTRY, None, approval=gate(store)).execute(plan_text(), AuditLog(log))
    assert (result.status, result.reason) == ("failed_closed", ReasonCode.APPROVAL_MISSING)
    assert result.steps == [] and CALLS == []
    assert verify(log).ok
    assert records_of(log, "step_started") == [] and records_of(log, "approval") == []


def test_the_audit_record_carries_enough_to_check_the_signature(tmp_path: Path, store: ApprovalStore) -> None:
    plan = compiled()
    given = give(plan, store)
    log = tmp_path / "audit.jsonl"
    result = Engine(REGISTRY, None, approval=gate(store)).execute(
        plan_text(), AuditLog(log, run_id=given.run)
    )
    assert result.ok, result.message
    assert CALLS == ["get_supplier", "send_payment"]
    (record,) = records_of(log, "approval")
    assert record["signed"] is True and record["approval_id"] == given.id
    rebuilt = Approval(**{k: record[k] for k in given.to_dict() if k != "pte_approval"})
    assert rebuilt == given and rebuilt.self_consistent() and rebuilt.verify(KEYS)
    kinds = [r["type"] for r in read_records(log)]
    assert kinds.index("plan_accepted") < kinds.index("approval") < kinds.index("step_started")
    assert "PRIVATE KEY" not in log.read_text()


def test_one_approval_pays_once(tmp_path: Path, store: ApprovalStore) -> None:
    """Attack: the same signed approval used three times for a non-idempotent payment."""
    given = give(compiled(), store)
    results = [
        Engine(REGISTRY, None, approval=gate(store)).execute(
            plan_text(), AuditLog(tmp_path / f"{i}.jsonl", run_id=given.run)
        )
        for i in range(3)
    ]
    assert [r.status for r in results] == ["succeeded", "failed_closed", "failed_closed"]
    assert [r.reason for r in results[1:]] == [ReasonCode.APPROVAL_CONSUMED] * 2
    assert "already used to run step 'pay'" in (results[1].message or "")
    assert CALLS.count("send_payment") == 1
    for i in (1, 2):
        assert records_of(tmp_path / f"{i}.jsonl", "step_started") == []
    consumed = [json.loads(line) for line in store.path.read_text().splitlines() if '"consumed"' in line]
    assert [(c["step_id"], c["run_id"]) for c in consumed] == [("pay", results[0].run_id)]
    # Another run of the same plan is not approved by it.
    other = Engine(REGISTRY, None, approval=gate(store)).execute(plan_text(), AuditLog(tmp_path / "o.jsonl"))
    assert other.reason is ReasonCode.APPROVAL_MISSING and f"approves run {given.run}" in (
        other.message or ""
    )
    # A second approval (of a second run) is a second payment, on purpose.
    bob = give(compiled(), store, by="bob")
    again = Engine(REGISTRY, None, approval=gate(store)).execute(
        plan_text(), AuditLog(tmp_path / "4.jsonl", run_id=bob.run)
    )
    assert again.ok and CALLS.count("send_payment") == 2


def _race(path: str, approval: dict[str, Any], queue: Any) -> None:
    store = ApprovalStore(path)
    try:
        store.consume(Approval.from_dict(approval), approval["plan_hash"], "pay", f"run-{id(queue)}")
        queue.put("won")
    except ApprovalConsumed:
        queue.put("lost")


def test_two_processes_racing_for_one_approval_get_it_once(store: ApprovalStore) -> None:
    approval = give(compiled(), store)
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_race, args=(str(store.path), approval.to_dict(), queue)) for _ in range(6)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
    outcomes = sorted(queue.get(timeout=5) for _ in procs)
    assert outcomes == ["lost"] * 5 + ["won"]
    assert store.path.read_text().count('"consumed"') == 1


def test_plans_without_guarded_tools_run_without_approval(tmp_path: Path, store: ApprovalStore) -> None:
    log = tmp_path / "audit.jsonl"
    result = Engine(REGISTRY, None, approval=gate(store)).execute(LOOKUP_ONLY, AuditLog(log))
    assert result.ok and CALLS == ["get_supplier"]
    assert records_of(log, "approval") == []


def test_gate_with_an_in_memory_log(store: ApprovalStore) -> None:
    hook = gate(store)
    plan = compiled()
    audit = begun(AuditLog(None, run_id="r-memory"))
    with pytest.raises(ApprovalMissing):
        hook(plan, audit)
    give(plan, store, run="r-memory")
    hook(plan, audit)
    assert [r["type"] for r in audit.records[1:]] == ["approval"]


def test_a_replanned_plan_needs_its_own_approval(tmp_path: Path, store: ApprovalStore) -> None:
    first = plan_text(supplier="missing")  # its first step fails at run time
    give(compiled(first), store, run="r-replan")
    llm = ReplayClient([first, plan_text(supplier="S2")])
    log = tmp_path / "audit.jsonl"
    result = Engine(REGISTRY, llm, approval=gate(store)).run(
        "pay supplier S1", AuditLog(log, run_id="r-replan")
    )
    assert (result.status, result.reason) == ("failed_closed", ReasonCode.APPROVAL_MISSING)
    assert CALLS == ["get_supplier"]  # the failed lookup; the replanned payment never ran
    assert len(records_of(log, "approval")) == 1
    assert verify(log).ok


class Payee(BaseModel):
    iban: str


class Payees(BaseModel):
    items: list[Payee]


@tool
def list_payees() -> Payees:
    """Trusted payee list."""
    CALLS.append("list_payees")
    return Payees(items=[Payee(iban="DE89370400440532013000"), Payee(iban="FR1420041010050500013M02606")])


def test_a_for_each_payment_consumes_the_approval_per_element(tmp_path: Path, store: ApprovalStore) -> None:
    """A for_each write runs as element steps ``pay[i]``: each consumes, and the plan pays once."""
    registry = Registry([list_payees, send_payment])
    text = json.dumps(
        {
            "pte_plan": "1",
            "steps": [
                {"id": "who", "tool": "list_payees", "args": {}},
                {
                    "id": "pay",
                    "tool": "send_payment",
                    "for_each": {"$ref": "who/items"},
                    "max_items": 5,
                    "args": {"iban": {"$ref": "who/items/*/iban"}, "amount": "10.00"},
                },
            ],
        }
    )
    policy = Policy.from_registry(registry)
    plan = compile_plan(text, registry, checks=[policy.check()])
    given = approve(
        plan, "alice", store, catalogue=catalogue_fingerprint(registry, plan, policy), signing_key=SIGNER
    )
    hook = approval_hook(store, registry=registry, keys=KEYS, policy=policy)
    first = Engine(registry, None, policy=policy, approval=hook).execute(
        text, AuditLog(tmp_path / "1.jsonl", run_id=given.run)
    )
    assert first.ok, first.message
    assert CALLS.count("send_payment") == 2
    consumed = [json.loads(line) for line in store.path.read_text().splitlines() if '"consumed"' in line]
    assert sorted(c["step_id"] for c in consumed) == ["pay[0]", "pay[1]"]
    again = Engine(registry, None, policy=policy, approval=hook).execute(
        text, AuditLog(tmp_path / "2.jsonl", run_id=given.run)
    )
    assert again.reason is ReasonCode.APPROVAL_CONSUMED
    assert CALLS.count("send_payment") == 2


def test_an_engine_with_its_own_invoker_consumes_the_approval_too(
    tmp_path: Path, store: ApprovalStore
) -> None:
    """The approval is consumed by the run's call gate, whatever calls the tools (#35): before,
    only the engine's default invoker carried the approval hook, so an engine given its own
    invoker ran an approved write without recording its use."""
    given = give(compiled(), store)

    def direct(spec: Any, args: dict[str, Any], step: Any) -> Any:
        return spec.func(**args).model_dump()

    engine = Engine(REGISTRY, None, invoker=direct, approval=gate(store))
    result = engine.execute(plan_text(), AuditLog(tmp_path / "0.jsonl", run_id=given.run))
    assert result.ok and CALLS.count("send_payment") == 1
    consumed = [json.loads(line) for line in store.path.read_text().splitlines() if '"consumed"' in line]
    assert [(c["step_id"], c["run_id"]) for c in consumed] == [("pay", result.run_id)]
    again = engine.execute(plan_text(), AuditLog(tmp_path / "1.jsonl", run_id=given.run))
    assert again.reason is ReasonCode.APPROVAL_CONSUMED and CALLS.count("send_payment") == 1
