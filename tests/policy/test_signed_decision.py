"""Every signed decision (an approval of a run, of a procedure, an endorsement) is checked by
one copy of the signature checks (`pte._core._signing.SignedDecision`) and signed by one path
(`pte._core._signing.sign_decision`): a fix to one is a fix to all. Tamper property over all kinds."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pte import SigningKey, TrustedKeys

# private: the record builders, to write records by hand
from pte._audit import records as rec

# private: signed decisions, built by hand
from pte._core import SignedDecision, sign_decision

# private: approvals built by hand (tamper tests); endorsements built by hand (tamper tests)
from pte._policy import make_approval, make_endorsement
from pte.audit import Approval, ProcedureApproval
from pte.policy import Endorsement

_KEY = SigningKey.generate()
_OTHER = SigningKey.generate()
_AT = datetime(2026, 11, 1, 9, 30, tzinfo=UTC)
_HASH = "ab" * 32


def _approval(key: SigningKey | None) -> SignedDecision:
    return make_approval(_HASH, "ana", catalogue="cd" * 32, run="run-1", signing_key=key, at=_AT)


def _procedure_approval(key: SigningKey | None) -> SignedDecision:
    fields: dict[str, Any] = {
        "procedure": "refund",
        "version": "ef" * 32,
        "catalogue": "cd" * 32,
        "by": "ana",
        "at": "2026-11-01T09:30:00.000000Z",
        "expires": "2026-11-02T09:30:00.000000Z",
    }
    return sign_decision(ProcedureApproval, fields, key)


def _endorsement(key: SigningKey | None) -> SignedDecision:
    return make_endorsement("run-1", "pay", None, _HASH, "ana", signing_key=key, at=_AT)


_MAKERS: list[Callable[[SigningKey | None], SignedDecision]] = [_approval, _procedure_approval, _endorsement]


@pytest.mark.parametrize("cls", [Approval, ProcedureApproval, Endorsement])
def test_every_signed_decision_uses_the_one_copy_of_the_checks(cls: type) -> None:
    assert issubclass(cls, SignedDecision)
    for name in ("signed", "self_consistent", "verify"):
        assert getattr(cls, name) is getattr(SignedDecision, name), f"{cls.__name__} overrides {name}"


@pytest.mark.parametrize("make", _MAKERS)
def test_signed_verifies_only_under_its_trusted_key(
    make: Callable[[SigningKey | None], SignedDecision],
) -> None:
    decision = make(_KEY)
    assert decision.signed and decision.self_consistent()
    assert decision.verify(TrustedKeys([_KEY.public_key]))
    assert not decision.verify(TrustedKeys([_OTHER.public_key]))
    unsigned = make(None)
    assert not unsigned.signed and not unsigned.self_consistent()
    assert not unsigned.verify(TrustedKeys([_KEY.public_key]))


@settings(max_examples=60, deadline=None)
@given(kind=st.sampled_from(_MAKERS), data=st.data())
def test_property_any_edited_field_of_a_signed_decision_fails_verification(
    kind: Callable[[SigningKey | None], SignedDecision], data: st.DataObject
) -> None:
    decision = kind(_KEY)
    trusted = TrustedKeys([_KEY.public_key])
    fields = dataclasses.asdict(decision)  # type: ignore[call-overload]
    name = data.draw(st.sampled_from(sorted(fields)))
    value = fields[name]
    edited: Any
    if name == "public_key":
        edited = _OTHER.public_key.raw.hex()
    elif name == "signature":
        edited = _OTHER.sign(decision.message()).hex()
    elif name in ("key_id", "version", "catalogue", "plan_hash", "value_hash"):
        edited = "0" * 64 if value != "0" * 64 else "1" * 64
    elif name in ("at", "expires"):
        edited = "2030-01-01T00:00:00.000000Z"
    elif name == "element":
        edited = 3
    elif name == "decision":
        edited = "rejected" if value == "endorsed" else "endorsed"
    elif name == "note":
        edited = "a note"
    elif name == "step_id":
        edited = "refund"
    else:  # run, by, procedure
        edited = value + "x"
    tampered = dataclasses.replace(decision, **{name: edited})  # type: ignore[type-var]
    assert not tampered.verify(trusted)


@pytest.mark.parametrize("signed", [True, False])
def test_an_approval_is_rebuilt_from_its_audit_record_by_its_own_class(signed: bool) -> None:
    """The members of an ``approval`` record are named once, by the approval's class (the audit
    check and replay both rebuild it with `from_record`)."""
    key = _KEY if signed else None
    approval = _approval(key)
    assert isinstance(approval, Approval)
    record = rec.approval(approval.to_dict(), approval_id=approval.id, signed=signed)
    assert Approval.from_record({"type": "approval", "run_id": "run-1", **record.fields}) == approval
    procedure = _procedure_approval(key)
    assert isinstance(procedure, ProcedureApproval)
    record = rec.procedure_approval(
        procedure.to_dict(), approval_id=procedure.id, signed=signed, plan_hash=_HASH, steps=["pay"]
    )
    assert ProcedureApproval.from_record({"type": "approval", **record.fields}) == procedure


def test_a_record_missing_a_member_of_the_approval_is_malformed() -> None:
    approval = _approval(_KEY)
    assert isinstance(approval, Approval)
    record = dict(rec.approval(approval.to_dict(), approval_id="x", signed=True).fields)
    del record["plan_hash"]
    with pytest.raises(ValueError, match="plan_hash"):
        Approval.from_record(record)
