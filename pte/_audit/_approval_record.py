"""An approval as a value: what a person approved (plan, catalogue, run), its id and its signature.

The approval store, the gate and `approve` (pte._policy._approval, pte._policy._gate) build on it; the
audit area checks the ``approval`` records of a log with it (pte._audit._content).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pte._core import SignedDecision, canonical_json, check_signature_fields

__all__ = ["APPROVAL_FORMAT", "PROCEDURE_APPROVAL_FORMAT", "Approval", "ProcedureApproval"]

APPROVAL_FORMAT = "3"
#: Format 2 approved a plan (any run of it); format 3 approves one run of it.
_PLAN_FORMAT = "2"
_DOMAINS = {"2": b"pte-approval-v2\n", "3": b"pte-approval-v3\n"}
_HASH_RE = re.compile(r"[0-9a-f]{64}")
_RUN_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")  # pte.stores.RUN_ID_PATTERN
# ISO-8601 UTC, as `approve` writes it; no newline or quote can occur. ASCII digits only: `\d`
# and `strptime` also read other scripts' digits (``٢٠٢٦``), which no other reader of the store does.
_TIME_RE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,6})?Z")
_APPROVAL_KEYS_V2 = frozenset(
    {"pte_approval", "plan_hash", "catalogue", "by", "at", "expires", "key_id", "public_key", "signature"}
)
_APPROVAL_KEYS = _APPROVAL_KEYS_V2 | {"run"}


def utc_now() -> datetime:
    return datetime.now(UTC)


def format_time(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse_time(text: str) -> datetime:
    return datetime.strptime(text if "." in text else text[:-1] + ".0Z", "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=UTC
    )


def check_by(by: Any) -> None:
    if not isinstance(by, str) or not by.strip():
        raise ValueError("by must name the person approving (a non-empty string)")
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in by):
        raise ValueError(f"by must not contain control characters: {by!r}")


class _Signed(SignedDecision):
    """A signed decision that expires (approvals of runs and of procedures); the signature
    checks are `SignedDecision`'s."""

    by: str
    at: str
    expires: str

    def to_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    def _check_fields(self, hashes: tuple[str, str]) -> None:
        """The checks every approval kind shares: `hashes` (its two hash members), `by`, the
        times and the signature's shape (ValueError naming the first that is wrong)."""
        for name in hashes:
            value = getattr(self, name)
            if not isinstance(value, str) or not _HASH_RE.fullmatch(value):
                raise ValueError(f"{name} must be 64 lowercase hex digits, not {value!r}")
        check_by(self.by)
        for name in ("at", "expires"):
            value = getattr(self, name)
            if not isinstance(value, str) or not _TIME_RE.fullmatch(value):
                raise ValueError(f"{name} must be an ISO-8601 UTC time such as 2026-11-01T09:30:00Z")
        check_signature_fields(self.key_id, self.public_key, self.signature)

    @property
    def id(self) -> str:
        """SHA-256 of its canonical JSON: what consumption records name."""
        return hashlib.sha256(canonical_json(self.to_dict()).encode()).hexdigest()

    def expired(self, now: datetime) -> bool:
        return now >= _parse_time(self.expires)


@dataclass(frozen=True)
class Approval(_Signed):
    """One person's approval of one run of one plan against one catalogue, until `expires`.

    `run`: the run id it approves (format 3). Only that run may execute the plan's approved
    writes, once; an approval without one (format 2, PTE < 0.4) approved a plan, is kept
    readable as evidence and never lets anything run.
    """

    plan_hash: str
    #: `catalogue_fingerprint` of the plan's tools as the approver reviewed them.
    catalogue: str
    by: str
    #: When it was given and until when it counts: ISO-8601 UTC (``2026-11-01T09:30:00.000000Z``).
    at: str
    expires: str
    #: SHA-256 of the signer's raw public key (hex), its raw public key (hex) and the
    #: Ed25519 signature (hex) of `message`; all None for an unsigned approval.
    key_id: str | None = None
    public_key: str | None = None
    signature: str | None = None
    run: str | None = None

    def __post_init__(self) -> None:
        if self.run is not None and (not isinstance(self.run, str) or not _RUN_RE.fullmatch(self.run)):
            raise ValueError(f"run must be a run id, not {self.run!r}")
        self._check_fields(("plan_hash", "catalogue"))

    @property
    def format(self) -> str:
        """``3`` (binds a run) or ``2`` (binds only a plan: evidence, never authority)."""
        return APPROVAL_FORMAT if self.run is not None else _PLAN_FORMAT

    def message(self) -> bytes:
        """The exact bytes that are signed (see the module docs)."""
        signed = {
            "pte_approval": self.format,
            "plan_hash": self.plan_hash,
            "catalogue": self.catalogue,
            "by": self.by,
            "at": self.at,
            "expires": self.expires,
            "key_id": self.key_id,
        }
        if self.run is not None:
            signed["run"] = self.run
        return _DOMAINS[self.format] + canonical_json(signed).encode("utf-8")

    def to_dict(self) -> dict[str, Any]:
        """The store's JSON form."""
        data: dict[str, Any] = {
            "pte_approval": self.format,
            "plan_hash": self.plan_hash,
            "catalogue": self.catalogue,
            "by": self.by,
            "at": self.at,
            "expires": self.expires,
            "key_id": self.key_id,
            "public_key": self.public_key,
            "signature": self.signature,
        }
        if self.run is not None:
            data["run"] = self.run
        return data

    @classmethod
    def from_dict(cls, data: Any) -> Approval:
        """Parse the store's JSON form (ValueError when it is malformed)."""
        if not isinstance(data, dict):
            raise ValueError("an approval is a JSON object")
        version = data.get("pte_approval")
        keys = {APPROVAL_FORMAT: _APPROVAL_KEYS, _PLAN_FORMAT: _APPROVAL_KEYS_V2}.get(str(version))
        if keys is None:
            raise ValueError(f"unknown approval format {version!r}")
        if set(data) != keys:
            raise ValueError(f"an approval (format {version}) has exactly the keys {sorted(keys)}")
        if version == APPROVAL_FORMAT and data["run"] is None:
            raise ValueError("a format 3 approval names the run it approves")
        return cls(**{k: v for k, v in data.items() if k != "pte_approval"})

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Approval:
        """Rebuild one from an ``approval`` audit record, whose members are those of `to_dict`
        but the format (ValueError or TypeError when malformed)."""
        fields: dict[str, Any] = {k: record.get(k) for k in _APPROVAL_KEYS - {"pte_approval"}}
        return cls(**fields)


#: Store lines and records of procedure approvals carry ``{"pte_procedure_approval": "1"}``.
PROCEDURE_APPROVAL_FORMAT = "1"
_PROCEDURE_DOMAIN = b"pte-procedure-approval-v1\n"
_NAME_RE = re.compile(r"[A-Za-z][A-Za-z0-9_.\-]{0,63}")  # schemas/procedure.schema.json
_PROCEDURE_APPROVAL_KEYS = frozenset(
    {
        "pte_procedure_approval",
        "procedure",
        "version",
        "catalogue",
        "by",
        "at",
        "expires",
        "key_id",
        "public_key",
        "signature",
    }
)


@dataclass(frozen=True)
class ProcedureApproval(_Signed):
    """One person's approval of one procedure version against one catalogue, until `expires`.

    Bound to no run: it covers the writes of every call of exactly that version (the SHA-256
    of the procedure's file, `pte.plan.Procedure.version`), for any arguments the procedure's
    parameters and the deployment's policy accept, in any run. Each run consumes it once per
    write step (the store keys its consumption by run and step). An edited procedure is
    another version, which this approval does not cover.

    Signed message: ``pte-procedure-approval-v1\\n`` + the canonical JSON of
    ``{"pte_procedure_approval", "procedure", "version", "catalogue", "by", "at", "expires", "key_id"}``.
    """

    procedure: str
    #: `Procedure.version` of the approved file.
    version: str
    #: `catalogue_fingerprint` of the body's tools (and the policy's entries for them) as reviewed.
    catalogue: str
    by: str
    at: str
    expires: str
    key_id: str | None = None
    public_key: str | None = None
    signature: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.procedure, str) or not _NAME_RE.fullmatch(self.procedure):
            raise ValueError(f"procedure must be a procedure name, not {self.procedure!r}")
        self._check_fields(("version", "catalogue"))

    def _signed_fields(self) -> dict[str, Any]:
        return {
            "pte_procedure_approval": PROCEDURE_APPROVAL_FORMAT,
            "procedure": self.procedure,
            "version": self.version,
            "catalogue": self.catalogue,
            "by": self.by,
            "at": self.at,
            "expires": self.expires,
            "key_id": self.key_id,
        }

    def message(self) -> bytes:
        """The exact bytes that are signed (see the class docs)."""
        return _PROCEDURE_DOMAIN + canonical_json(self._signed_fields()).encode("utf-8")

    def to_dict(self) -> dict[str, Any]:
        """The store's JSON form."""
        return {**self._signed_fields(), "public_key": self.public_key, "signature": self.signature}

    @classmethod
    def from_dict(cls, data: Any) -> ProcedureApproval:
        """Parse the store's JSON form (ValueError when it is malformed)."""
        if not isinstance(data, dict):
            raise ValueError("a procedure approval is a JSON object")
        if data.get("pte_procedure_approval") != PROCEDURE_APPROVAL_FORMAT:
            raise ValueError(f"unknown procedure approval format {data.get('pte_procedure_approval')!r}")
        if set(data) != _PROCEDURE_APPROVAL_KEYS:
            raise ValueError(f"a procedure approval has exactly the keys {sorted(_PROCEDURE_APPROVAL_KEYS)}")
        return cls(**{k: v for k, v in data.items() if k != "pte_procedure_approval"})

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> ProcedureApproval:
        """Rebuild one from a procedure ``approval`` audit record, whose members are those of
        `to_dict` but the format (ValueError or TypeError when malformed)."""
        fields: dict[str, Any] = {
            k: record.get(k) for k in _PROCEDURE_APPROVAL_KEYS - {"pte_procedure_approval"}
        }
        return cls(**fields)
