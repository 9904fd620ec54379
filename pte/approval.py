"""Approvals: a person approves the exact hash of a plan before tools that require it may run.

A plan is identified by the SHA-256 of its canonical JSON, so an approval covers exactly
one plan: any change to any step, argument or reference is a different hash and needs a
new approval. Approvals live in a JSON Lines file (`ApprovalStore`), one object a line:
``{"plan_hash", "by", "at", "signature"}``.

With a key (``PTE_APPROVAL_KEY``), each approval is signed with
HMAC-SHA256(key, ``"{plan_hash}\\n{by}\\n{at}"``) and only correctly signed approvals count,
so someone who can write to the store but does not hold the key cannot approve a plan.
Without a key, any recorded approval of the hash counts (the store's own access control is
then the only protection).

`approval_hook` plugs the check into `Engine(approval=...)`: an accepted plan that
calls a tool with ``requires_approval=True`` runs only if its hash is approved; otherwise
the run fails closed with ``approval_missing`` before any of its steps runs.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pte import _json as strict_json
from pte.audit import AuditFormatError, AuditLog, iter_records
from pte.errors import ApprovalMissing, PTEError
from pte.plan import Plan
from pte.tools import Registry

__all__ = [
    "APPROVAL_KEY_ENV",
    "Approval",
    "ApprovalStore",
    "ApprovalStoreError",
    "approval_hook",
    "approval_key_from_env",
    "approve",
    "check_approval",
    "requires_approval",
    "sign",
]

#: The environment variable the CLI reads the HMAC key from.
APPROVAL_KEY_ENV = "PTE_APPROVAL_KEY"

_HASH_RE = re.compile(r"[0-9a-f]{64}")
_SIGNATURE_RE = re.compile(r"[0-9a-f]{64}")
# ISO-8601 UTC, as `approve` writes it; newlines are impossible, which the signed message relies on.
_AT_RE = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?Z")


class ApprovalStoreError(PTEError):
    """The approval store cannot be read or written, or holds a malformed line."""


@dataclass(frozen=True)
class Approval:
    """One person's approval of one exact plan hash, signed when a key was configured."""

    plan_hash: str
    by: str
    #: When it was given: ISO-8601 UTC (``2026-11-01T09:30:00.000000Z``).
    at: str
    #: HMAC-SHA256 hex digest of ``"{plan_hash}\\n{by}\\n{at}"``, or None (unsigned).
    signature: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.plan_hash, str) or not _HASH_RE.fullmatch(self.plan_hash):
            raise ValueError(f"plan_hash must be 64 lowercase hex digits, not {self.plan_hash!r}")
        _check_by(self.by)
        if not isinstance(self.at, str) or not _AT_RE.fullmatch(self.at):
            raise ValueError(f"at must be an ISO-8601 UTC time such as 2026-11-01T09:30:00Z, not {self.at!r}")
        if self.signature is not None and (
            not isinstance(self.signature, str) or not _SIGNATURE_RE.fullmatch(self.signature)
        ):
            raise ValueError("signature must be 64 lowercase hex digits or null")

    @property
    def signed(self) -> bool:
        """Whether the approval carries a signature (not whether it is valid: see `verify`)."""
        return self.signature is not None

    def verify(self, key: bytes) -> bool:
        """True when the signature is the HMAC of this approval under `key` (constant-time compare)."""
        if self.signature is None:
            return False
        return hmac.compare_digest(self.signature, sign(self.plan_hash, self.by, self.at, key))

    def to_dict(self) -> dict[str, Any]:
        """The store's JSON form."""
        return {"plan_hash": self.plan_hash, "by": self.by, "at": self.at, "signature": self.signature}

    @classmethod
    def from_dict(cls, data: Any) -> Approval:
        """Parse the store's JSON form (ValueError when it is malformed)."""
        if not isinstance(data, dict):
            raise ValueError("an approval must be a JSON object")
        expected = {"plan_hash", "by", "at", "signature"}
        if set(data) != expected:
            raise ValueError(f"an approval has exactly the keys {sorted(expected)}, not {sorted(data)}")
        return cls(data["plan_hash"], data["by"], data["at"], data["signature"])


def _check_by(by: Any) -> None:
    # The signed message separates fields with newlines: a name must not contain any.
    if not isinstance(by, str) or not by.strip():
        raise ValueError("by must name the person approving (a non-empty string)")
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in by):
        raise ValueError(f"by must not contain control characters: {by!r}")


def sign(plan_hash: str, by: str, at: str, key: bytes) -> str:
    """HMAC-SHA256(key, ``"{plan_hash}\\n{by}\\n{at}"``) as lowercase hex."""
    message = f"{plan_hash}\n{by}\n{at}".encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def approval_key_from_env(environ: Mapping[str, str] | None = None) -> bytes | None:
    """The approval key from ``PTE_APPROVAL_KEY`` (its UTF-8 bytes), or None when unset or empty."""
    env = os.environ if environ is None else environ
    value = env.get(APPROVAL_KEY_ENV, "")
    return value.encode("utf-8") if value else None


def _utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class ApprovalStore:
    """A JSON Lines file of approvals. A missing file holds no approvals.

    Appends are one ``write`` of one line under a lock; a malformed line makes every read
    fail (`ApprovalStoreError`), and the approval check then fails closed.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()

    def add(self, approval: Approval) -> None:
        """Append one approval (fsynced: an approval someone was told about must not vanish)."""
        # ASCII only: a name with U+2028 or the like must not look like a line break to any reader.
        line = json.dumps(approval.to_dict(), ensure_ascii=True, sort_keys=True) + "\n"
        with self._lock:
            try:
                with open(self.path, "a", encoding="utf-8") as fh:
                    fh.write(line)
                    fh.flush()
                    os.fsync(fh.fileno())
            except OSError as exc:
                raise ApprovalStoreError(f"cannot write approval store {str(self.path)!r}: {exc}") from None

    def __iter__(self) -> Iterator[Approval]:
        """Every approval in the store, oldest first."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return
        except (OSError, UnicodeDecodeError) as exc:
            raise ApprovalStoreError(f"cannot read approval store {str(self.path)!r}: {exc}") from None
        for number, line in enumerate(text.split("\n"), start=1):
            if not line.strip():
                continue
            try:
                yield Approval.from_dict(strict_json.loads(line))
            except ValueError as exc:
                raise ApprovalStoreError(f"approval store {str(self.path)!r} line {number}: {exc}") from None

    def find(self, plan_hash: str) -> list[Approval]:
        """Every approval recorded for `plan_hash`, oldest first (signatures not checked)."""
        return [a for a in self if a.plan_hash == plan_hash]


def approve(
    plan: Plan, by: str, store: ApprovalStore, *, key: bytes | None = None, at: str | None = None
) -> Approval:
    """Record that `by` approves exactly `plan` (its hash); signed when `key` is given.

    `at` defaults to now (ISO-8601 UTC); pass it only to make tests deterministic.
    """
    _check_by(by)
    when = at if at is not None else _utc_now()
    signature = sign(plan.hash, by, when, key) if key is not None else None
    approval = Approval(plan.hash, by, when, signature)
    store.add(approval)
    return approval


def requires_approval(plan: Plan, registry: Registry) -> list[str]:
    """The tools of `plan` that run only in an approved plan, in plan order, each once."""
    return _needing_approval(plan, lambda name: registry[name].requires_approval)


def _needing_approval(plan: Plan, needs: Callable[[str], bool]) -> list[str]:
    names = dict.fromkeys(step.tool for step in plan.tool_steps())
    return [name for name in names if needs(name)]


def check_approval(
    plan: Plan, registry: Registry, store: ApprovalStore, *, key: bytes | None = None
) -> Approval | None:
    """None when no tool of `plan` needs approval; else the approval that lets it run.

    With a `key`, only approvals whose signature verifies count; the most recent valid one
    is returned. Raises `ApprovalMissing` (naming the tools, the plan hash and why) when
    none counts, and when the store cannot be read.
    """
    return _check(plan, requires_approval(plan, registry), store, key)


def _check(plan: Plan, tools: list[str], store: ApprovalStore, key: bytes | None) -> Approval | None:
    if not tools:
        return None
    needs = f"{', '.join(tools)} require{'s' if len(tools) == 1 else ''} an approved plan"
    try:
        found = store.find(plan.hash)
    except ApprovalStoreError as exc:
        raise ApprovalMissing(f"{needs}, and the approval store cannot be read: {exc}") from None
    if not found:
        raise ApprovalMissing(
            f"{needs}; no approval is recorded for plan {plan.hash} "
            "(approve it with: pte approve PLAN_FILE --by NAME)"
        )
    if key is None:
        return found[-1]
    valid = [a for a in found if a.verify(key)]
    if valid:
        return valid[-1]
    raise ApprovalMissing(f"{needs}; no approval of plan {plan.hash} counts: {_why_invalid(found)}")


def _why_invalid(found: list[Approval]) -> str:
    forged = [a.by for a in found if a.signed]
    unsigned = [a.by for a in found if not a.signed]
    reasons = []
    if forged:
        reasons.append(f"bad signature (by {', '.join(forged)})")
    if unsigned:
        reasons.append(f"unsigned while an approval key is configured (by {', '.join(unsigned)})")
    return "; ".join(reasons)


def approval_hook(
    store: ApprovalStore, *, key: bytes | None = None, registry: Registry | None = None
) -> Callable[[Plan, AuditLog], None]:
    """The approval gate for `Engine(approval=...)`: approved plans get an ``approval`` audit record.

    For each accepted plan that calls a tool requiring approval, the hook runs the approval
    check and appends ``approval`` (plan_hash, by, at, signed) to the audit log; otherwise it
    raises `ApprovalMissing` and the engine ends the run ``failed_closed(approval_missing)``
    before any step of the plan runs. ``signed`` is True only when the signature was
    verified against the configured key.

    Which tools require approval comes from `registry` when given (pass the engine's). The
    engine calls hooks with (plan, audit) only, so without it the hook reads the catalogue
    this run recorded in its ``run_started`` record; a tool not found there counts as
    requiring approval (fail closed).
    """

    def hook(plan: Plan, audit: AuditLog) -> None:
        if registry is not None:
            tools = requires_approval(plan, registry)
        else:
            flags = _recorded_flags(plan, audit)
            # Unknown to the recorded catalogue: require approval rather than guess.
            tools = _needing_approval(plan, lambda name: flags.get(name, True))
        approval = _check(plan, tools, store, key)
        if approval is not None:
            audit.append(
                "approval",
                plan_hash=approval.plan_hash,
                by=approval.by,
                at=approval.at,
                signed=key is not None,
            )

    return hook


def _recorded_flags(plan: Plan, audit: AuditLog) -> dict[str, bool]:
    """Tool name -> requires_approval, from this run's ``run_started`` record."""
    started: dict[str, Any] | None = None
    try:
        if audit.records:
            records: Iterator[dict[str, Any]] = iter(audit.records)
        elif audit.path is not None:
            records = (record for _, record in iter_records(audit.path, skip_partial_tail=True))
        else:
            records = iter(())
        for record in records:
            if record.get("run_id") == audit.run_id and record.get("type") == "run_started":
                started = record
    except (OSError, AuditFormatError) as exc:
        raise ApprovalMissing(
            f"cannot tell which tools of plan {plan.hash} require approval: {exc}"
        ) from None
    flags: dict[str, bool] = {}
    for entry in (started or {}).get("tools") or ():
        if isinstance(entry, dict) and isinstance(entry.get("name"), str):
            flags[entry["name"]] = entry.get("requires_approval") is not False
    return flags
