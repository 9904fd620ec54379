"""Checks of a format 2 log's content beyond the chain: stored content and approvals.

`verify` (pte._audit._verify) runs them on ``run_started`` and ``approval`` records
(docs/audit-format.md, sections 5 and 7).
"""

from __future__ import annotations

from collections.abc import Mapping
from hashlib import sha256 as _sha256
from typing import Any

from pte._audit._approval_record import Approval, ProcedureApproval
from pte._core import KeyFileError, PublicKey, canonical_bytes, canonical_json

__all__ = ["approval_problem", "content_problem", "endorsement_problem"]


#: Fingerprint members that must equal the catalogue entry's (docs/audit-format.md).
_FINGERPRINT_FIELDS = ("effect", "idempotent", "timeout_s", "provenance", "requires_approval", "sinks")


#: What a check of a record's content may raise on a value of the wrong type or range (a list
#: where a hash belongs, an integer JCS cannot write): a verify reports it, never raises it.
_MALFORMED = (TypeError, KeyError, ValueError, AttributeError, OverflowError, RecursionError)


def content_problem(record: Mapping[str, Any], stored: dict[str, Any]) -> str | None:
    """Format 2 ``run_started``: stored content, the references to it, the tool fingerprints.

    `stored` (content hash -> value, for the whole log so far) gains this record's contents.
    A field of the wrong type is a problem named, never an exception.
    """
    try:
        return _content_problem(record, stored)
    except _MALFORMED as exc:
        return f"run_started content is malformed ({type(exc).__name__})"


def _content_problem(record: Mapping[str, Any], stored: dict[str, Any]) -> str | None:
    fresh = record.get("stored") or {}
    if not isinstance(fresh, dict):
        return "stored is not an object of content by hash"
    for name in ("catalogue", "policy"):
        if record.get(name) is not None and not isinstance(record.get(name), str):
            return f"{name} is not a content hash"
    for key, value in fresh.items():
        try:
            # Read from the log: every number is a double (JCS writes 4.026231202385854e16 as
            # 40262312023858540, which reads back as an integer no double holds exactly).
            actual = _sha256(canonical_bytes(value, from_text=True)).hexdigest()
        except (ValueError, TypeError, RecursionError):
            actual = None
        if actual != key:
            return f"stored content {key[:12]}… does not hash to its key"
        stored[key] = value
    for name in ("catalogue", "policy"):
        ref = record.get(name)
        if ref is not None and ref not in stored:
            return f"{name} {ref[:12]}… is not stored in the log"
    if "catalogue" not in record:
        return None
    catalogue = stored[record["catalogue"]]
    if not isinstance(catalogue, list) or not all(isinstance(e, dict) for e in catalogue):
        return "the stored catalogue is not a list of tools"
    by_name = {entry.get("name"): entry for entry in catalogue}
    tools = record.get("tools") or []
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        return "tools is not a list of tools"
    if len(tools) != len(catalogue) or {t.get("name") for t in tools} != set(by_name):
        return "tools and the stored catalogue name different tools"
    for tool in tools:
        entry = by_name[tool.get("name")]
        schemas = {"input_schema": entry.get("input_schema"), "output_schema": entry.get("output_schema")}
        if tool.get("schema_hash") != _sha256(canonical_bytes(schemas, from_text=True)).hexdigest():
            return f"tool {tool.get('name')}: schema_hash does not match the stored catalogue"
        for name in _FINGERPRINT_FIELDS:
            if name in tool and canonical_bytes(tool[name], from_text=True) != canonical_bytes(
                entry.get(name), from_text=True
            ):
                return f"tool {tool.get('name')}: {name} differs from the stored catalogue"
    return None


def approval_problem(record: Mapping[str, Any]) -> str | None:
    """An ``approval`` record: its id is its hash, and a signature verifies under its own key.

    Whether that key is one the deployment trusts is a question for the deployment (resume,
    replay with ``--approval-key``), not for the log; what the log can show is that nobody
    edited a signed approval, and that ``signed`` is never claimed without a signature.
    """

    try:
        return _approval_problem(record)
    except _MALFORMED as exc:
        return f"approval is malformed ({type(exc).__name__})"


def _approval_problem(record: Mapping[str, Any]) -> str | None:
    approval: Approval | ProcedureApproval
    try:
        if "procedure" in record:  # an approval of a procedure version, bound to no run
            approval = ProcedureApproval.from_record(record)
        else:
            approval = Approval.from_record(record)
    except (TypeError, ValueError) as exc:
        return f"approval is malformed: {exc}"
    if approval.id != record.get("approval_id"):
        return "approval_id is not the hash of the approval"
    if isinstance(approval, Approval) and approval.run is not None and approval.run != record.get("run_id"):
        return "the approval approves another run"
    if approval.signature is None:
        return "approval marked signed carries no signature" if record.get("signed") is True else None
    if not approval.self_consistent():
        return "approval signature does not verify under its own public key"
    return None


def endorsement_problem(record: Mapping[str, Any]) -> str | None:
    """An ``endorsement``/``endorsement_rejected`` record: its id is its hash, it names its own
    run, and a signature verifies under its own key (docs/audit-format.md, section 7b).

    Checked from the record alone (as verifier/verify.mjs does), not through the module that
    makes endorsements."""
    try:
        return _endorsement_problem(record)
    except _MALFORMED as exc:
        return f"endorsement is malformed ({type(exc).__name__})"


def _endorsement_problem(record: Mapping[str, Any]) -> str | None:
    if record.get("run") != record.get("run_id"):
        return "the endorsement is about another run"
    stored: dict[str, Any] = {"pte_endorsement": "1"}
    for name in (*_ENDORSEMENT_SIGNED, "public_key", "signature"):
        stored[name] = record.get(name)
    if _sha256(canonical_json(stored).encode("utf-8")).hexdigest() != record.get("endorsement_id"):
        return "endorsement_id is not the hash of the endorsement"
    signature, public = record.get("signature"), record.get("public_key")
    if signature is None:
        return "endorsement marked signed carries no signature" if record.get("signed") is True else None
    try:
        raw, sig = bytes.fromhex(str(public)), bytes.fromhex(str(signature))
        key = PublicKey.from_raw(raw)
    except (ValueError, KeyFileError):
        return "endorsement signature or public key is malformed"
    if _sha256(raw).hexdigest() != record.get("key_id"):
        return "endorsement key_id does not name its public key"
    signed = {"pte_endorsement": "1", **{name: record.get(name) for name in _ENDORSEMENT_SIGNED}}
    if not key.verify(sig, b"pte-endorsement-v1\n" + canonical_json(signed).encode("utf-8")):
        return "endorsement signature does not verify under its own public key"
    return None


#: The signed members of an endorsement record (pte._policy._endorsement, verifier/verify.mjs).
_ENDORSEMENT_SIGNED = ("run", "step_id", "element", "value_hash", "decision", "by", "at", "note", "key_id")
