"""Approvals: a person approves an exact plan hash; signed with HMAC-SHA256 when a key is set."""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from pte.approval import (
    APPROVAL_KEY_ENV,
    Approval,
    ApprovalStore,
    approval_hook,
    approval_key_from_env,
    approve,
    check_approval,
    requires_approval,
    sign,
)
from pte.audit import AuditLog, read_records, verify
from pte.compiler import compile_plan
from pte.engine import Engine
from pte.errors import ApprovalMissing, ReasonCode
from pte.llm import ReplayClient
from pte.plan import Plan
from pte.tools import Registry, tool

KEY = b"compliance-approval-key"
AT = "2026-11-01T09:30:00.000000Z"
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


@pytest.fixture(autouse=True)
def _reset_calls() -> None:
    CALLS.clear()


@pytest.fixture
def store(tmp_path: Path) -> ApprovalStore:
    return ApprovalStore(tmp_path / "approvals.jsonl")


def rewrite(store: ApprovalStore, **changes: Any) -> None:
    """Edit the (single) stored approval as an attacker with write access to the file would."""
    (line,) = store.path.read_text(encoding="utf-8").splitlines()
    record = {**json.loads(line), **changes}
    store.path.write_text(json.dumps(record) + "\n", encoding="utf-8")


# --- approve / check -----------------------------------------------------------------------


def test_requires_approval_lists_the_plans_guarded_tools() -> None:
    assert requires_approval(compiled(), REGISTRY) == ["send_payment"]
    assert requires_approval(compiled(LOOKUP_ONLY), REGISTRY) == []


def test_a_plan_without_guarded_tools_needs_no_approval(store: ApprovalStore) -> None:
    assert check_approval(compiled(LOOKUP_ONLY), REGISTRY, store) is None
    assert check_approval(compiled(LOOKUP_ONLY), REGISTRY, store, key=KEY) is None


def test_unsigned_approval_counts_without_a_key(store: ApprovalStore) -> None:
    plan = compiled()
    approval = approve(plan, "alice", store, at=AT)
    assert approval == Approval(plan.hash, "alice", AT, None)
    assert not approval.signed
    assert json.loads(store.path.read_text()) == {
        "plan_hash": plan.hash,
        "by": "alice",
        "at": AT,
        "signature": None,
    }
    assert check_approval(plan, REGISTRY, store) == approval


def test_signed_approval_is_the_hmac_of_hash_by_and_at(store: ApprovalStore) -> None:
    plan = compiled()
    approval = approve(plan, "alice", store, key=KEY, at=AT)
    expected = hmac.new(KEY, f"{plan.hash}\nalice\n{AT}".encode(), hashlib.sha256).hexdigest()
    assert approval.signature == expected == sign(plan.hash, "alice", AT, KEY)
    assert approval.verify(KEY) and not approval.verify(b"other key")
    assert check_approval(plan, REGISTRY, store, key=KEY) == approval
    assert check_approval(plan, REGISTRY, store) == approval  # no key configured: any approval counts


def test_default_time_is_now_in_utc(store: ApprovalStore) -> None:
    approval = approve(compiled(), "alice", store)
    assert approval.at.endswith("Z") and approval.at[:2] == "20"


def test_approval_of_a_different_hash_does_not_count(store: ApprovalStore) -> None:
    approve(compiled(plan_text(amount="1.00")), "alice", store, key=KEY)
    plan = compiled(plan_text(amount="9999.00"))
    with pytest.raises(ApprovalMissing) as info:
        check_approval(plan, REGISTRY, store, key=KEY)
    assert info.value.reason is ReasonCode.APPROVAL_MISSING
    assert "send_payment requires an approved plan" in info.value.message
    assert f"no approval is recorded for plan {plan.hash}" in info.value.message


def test_tampered_signature_is_refused(store: ApprovalStore) -> None:
    plan = compiled()
    approval = approve(plan, "alice", store, key=KEY, at=AT)
    assert approval.signature is not None
    flipped = ("0" if approval.signature[0] != "0" else "1") + approval.signature[1:]
    rewrite(store, signature=flipped)
    with pytest.raises(ApprovalMissing, match=r"bad signature \(by alice\)"):
        check_approval(plan, REGISTRY, store, key=KEY)


def test_tampered_name_or_time_breaks_the_signature(store: ApprovalStore) -> None:
    plan = compiled()
    approve(plan, "intern", store, key=KEY, at=AT)
    rewrite(store, by="cfo")
    with pytest.raises(ApprovalMissing, match="bad signature"):
        check_approval(plan, REGISTRY, store, key=KEY)
    rewrite(store, by="intern", at="2030-01-01T00:00:00Z")
    with pytest.raises(ApprovalMissing, match="bad signature"):
        check_approval(plan, REGISTRY, store, key=KEY)


def test_a_signature_copied_to_another_plan_does_not_count(store: ApprovalStore) -> None:
    approve(compiled(plan_text(amount="1.00")), "alice", store, key=KEY, at=AT)
    other = compiled(plan_text(amount="9999.00"))
    rewrite(store, plan_hash=other.hash)
    with pytest.raises(ApprovalMissing, match="bad signature"):
        check_approval(other, REGISTRY, store, key=KEY)


def test_signed_with_another_key_is_refused(store: ApprovalStore) -> None:
    plan = compiled()
    approve(plan, "alice", store, key=b"not the key")
    with pytest.raises(ApprovalMissing, match="bad signature"):
        check_approval(plan, REGISTRY, store, key=KEY)


def test_unsigned_approval_does_not_count_when_a_key_is_configured(store: ApprovalStore) -> None:
    plan = compiled()
    approve(plan, "mallory", store)
    with pytest.raises(ApprovalMissing) as info:
        check_approval(plan, REGISTRY, store, key=KEY)
    assert "unsigned while an approval key is configured (by mallory)" in info.value.message
    assert plan.hash in info.value.message


def test_the_latest_valid_approval_is_returned(store: ApprovalStore) -> None:
    plan = compiled()
    first = approve(plan, "alice", store, key=KEY, at="2026-11-01T09:00:00Z")
    approve(plan, "mallory", store)  # unsigned: ignored when a key is configured
    second = approve(plan, "bob", store, key=KEY, at="2026-11-01T10:00:00Z")
    assert store.find(plan.hash)[0] == first
    assert len(store.find(plan.hash)) == 3
    assert check_approval(plan, REGISTRY, store, key=KEY) == second


def test_a_missing_store_holds_no_approvals(tmp_path: Path) -> None:
    store = ApprovalStore(tmp_path / "none.jsonl")
    assert store.find("0" * 64) == []
    with pytest.raises(ApprovalMissing, match="no approval is recorded"):
        check_approval(compiled(), REGISTRY, store)


@pytest.mark.parametrize(
    "line",
    [
        "{not json",
        '{"plan_hash": "abc", "by": "a", "at": "2026-11-01T00:00:00Z", "signature": null}',
        '{"plan_hash": "' + "a" * 64 + '", "by": "a", "at": "yesterday", "signature": null}',
        '{"plan_hash": "' + "a" * 64 + '", "by": "a", "at": "2026-11-01T00:00:00Z"}',
        "[]",
    ],
)
def test_a_malformed_store_fails_closed(store: ApprovalStore, line: str) -> None:
    plan = compiled()
    approve(plan, "alice", store)
    with store.path.open("a", encoding="utf-8") as fh:
        fh.write(line + "\n")
    with pytest.raises(ApprovalMissing, match=r"approval store cannot be read.*line 2"):
        check_approval(plan, REGISTRY, store)


@pytest.mark.parametrize("by", ["", "   ", "alice\n2026-11-01T00:00:00Z", "bob\r", "eve\x00"])
def test_names_that_could_blur_the_signed_message_are_refused(store: ApprovalStore, by: str) -> None:
    with pytest.raises(ValueError, match="by must"):
        approve(compiled(), by, store)
    assert not store.path.exists()


def test_unicode_names_are_stored_as_one_line(store: ApprovalStore) -> None:
    plan = compiled()
    approval = approve(plan, "Zoë\u2028Müller", store, key=KEY)
    assert store.path.read_text(encoding="utf-8").count("\n") == 1
    assert check_approval(plan, REGISTRY, store, key=KEY) == approval


def test_approval_key_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(APPROVAL_KEY_ENV, raising=False)
    assert approval_key_from_env() is None
    monkeypatch.setenv(APPROVAL_KEY_ENV, "")
    assert approval_key_from_env() is None
    monkeypatch.setenv(APPROVAL_KEY_ENV, "s3cret-ä")
    assert approval_key_from_env() == "s3cret-ä".encode()
    assert approval_key_from_env({"PTE_APPROVAL_KEY": "x"}) == b"x"


# --- engine integration --------------------------------------------------------------------


def records_of(path: Path, kind: str) -> list[dict[str, Any]]:
    return [r for r in read_records(path) if r["type"] == kind]


def test_unapproved_plan_fails_closed_before_any_step(tmp_path: Path, store: ApprovalStore) -> None:
    log = tmp_path / "audit.jsonl"
    engine = Engine(REGISTRY, None, approval=approval_hook(store))
    result = engine.execute(plan_text(), AuditLog(log))
    assert (result.status, result.reason) == ("failed_closed", ReasonCode.APPROVAL_MISSING)
    assert result.steps == [] and CALLS == []
    assert verify(log).ok
    assert records_of(log, "step_started") == []
    assert records_of(log, "approval") == []
    (finished,) = records_of(log, "run_finished")
    assert finished["reason"] == "approval_missing"
    assert compiled().hash in finished["message"]


@pytest.mark.parametrize("key", [None, KEY])
def test_approved_plan_runs_and_the_approval_is_in_the_audit_log(
    tmp_path: Path, store: ApprovalStore, key: bytes | None
) -> None:
    plan = compiled()
    approve(plan, "alice", store, key=key, at=AT)
    log = tmp_path / "audit.jsonl"
    engine = Engine(REGISTRY, None, approval=approval_hook(store, key=key))
    result = engine.execute(plan_text(), AuditLog(log))
    assert result.ok, result.message
    assert CALLS == ["get_supplier", "send_payment"]
    assert verify(log).ok
    (record,) = records_of(log, "approval")
    assert (record["plan_hash"], record["by"], record["at"], record["signed"]) == (
        plan.hash,
        "alice",
        AT,
        key is not None,
    )
    kinds = [r["type"] for r in read_records(log)]
    # The approval is recorded after the plan is accepted and before its first step.
    assert kinds.index("plan_accepted") < kinds.index("approval") < kinds.index("step_started")


def test_engine_refuses_an_unsigned_approval_when_a_key_is_configured(
    tmp_path: Path, store: ApprovalStore
) -> None:
    approve(compiled(), "mallory", store)
    log = tmp_path / "audit.jsonl"
    engine = Engine(REGISTRY, None, approval=approval_hook(store, key=KEY))
    result = engine.execute(plan_text(), AuditLog(log))
    assert result.reason is ReasonCode.APPROVAL_MISSING and CALLS == []
    assert "unsigned" in (result.message or "")
    assert verify(log).ok


def test_plans_without_guarded_tools_run_without_approval(tmp_path: Path, store: ApprovalStore) -> None:
    log = tmp_path / "audit.jsonl"
    result = Engine(REGISTRY, None, approval=approval_hook(store, key=KEY)).execute(
        LOOKUP_ONLY, AuditLog(log)
    )
    assert result.ok and CALLS == ["get_supplier"]
    assert records_of(log, "approval") == []


def test_hook_with_an_explicit_registry_and_an_in_memory_log(store: ApprovalStore) -> None:
    hook = approval_hook(store, registry=REGISTRY)
    plan = compiled()
    audit = AuditLog(None)
    with pytest.raises(ApprovalMissing):
        hook(plan, audit)
    approve(plan, "alice", store)
    hook(plan, audit)
    assert [r["type"] for r in audit.records] == ["approval"]


def test_hook_without_registry_fails_closed_for_tools_the_run_did_not_record(store: ApprovalStore) -> None:
    # No run_started record to learn the catalogue from: every tool counts as guarded.
    with pytest.raises(ApprovalMissing, match="get_supplier requires an approved plan"):
        approval_hook(store)(compiled(LOOKUP_ONLY), AuditLog(None))


def test_a_replanned_plan_needs_its_own_approval(tmp_path: Path, store: ApprovalStore) -> None:
    first = plan_text(supplier="missing")  # its first step fails at run time
    approve(compiled(first), "alice", store, key=KEY)
    llm = ReplayClient([first, plan_text(supplier="S2")])
    engine = Engine(REGISTRY, llm, approval=approval_hook(store, key=KEY))
    log = tmp_path / "audit.jsonl"
    result = engine.run("pay supplier S1", AuditLog(log))
    assert (result.status, result.reason) == ("failed_closed", ReasonCode.APPROVAL_MISSING)
    assert CALLS == ["get_supplier"]  # the failed lookup; the replanned payment never ran
    assert len(records_of(log, "approval")) == 1
    assert verify(log).ok
