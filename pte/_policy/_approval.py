"""Approvals: a person approves one run of one exact plan, reviewed against one exact catalogue, once.

An approval binds

- the run id (format 3): approving a plan is approving one run of it, which executes the
  plan's approved writes once; a copy of the approval (a store row, a file line) names that
  run and lets no other run do anything,
- the plan hash (SHA-256 of the plan's canonical JSON: any change to any step, argument or
  reference is a different plan),
- the *catalogue fingerprint* of the tools that plan calls (`catalogue_fingerprint`: their
  names, schemas, effects, idempotency, approval flags, provenance and sinks as the policy
  in force sets them, and a hash of each tool's code), so the same plan run against another
  pack whose tools merely share the names is not approved,
- an expiry time,

and is signed with Ed25519 (`pte._core._signing`) by the approver's private key. Executing
machines hold only public keys (`TrustedKeys`): a signature counts only when it verifies
under one of them. Without any public key configured, unsigned approvals count and the
store's own access control is the only protection (a development setting; the README says
so).

An approval is *consumed*: every non-idempotent ``write`` step of the approved plan runs
at most once per approval. The consumption is written to the approval store, under an
exclusive file lock, *before* the tool is called, so two processes racing for the same
approval cannot both run the step, and a crash after the call cannot make it run again.

The store is a JSON Lines file: approvals (``{"pte_approval": "2", ...}``) and consumptions
(``{"consumed": APPROVAL_ID, ...}``). Lines of the old HMAC format (PTE < 0.2) are read but
never count; the refusal says so and how to re-approve.

The signed message is the ASCII line ``pte-approval-v3`` followed by ``\\n`` and the
canonical JSON (`pte._core._canonical`) of ``{"pte_approval", "plan_hash", "catalogue", "by", "at",
"expires", "key_id", "run"}`` (format 2: ``pte-approval-v2`` and no ``run``; such approvals
are read as evidence and never count). Each ``approval`` audit record carries all those fields, the public
key and the signature, so an auditor can check it with nothing but the log and the key.
"""

from __future__ import annotations

import hashlib
import os
import threading
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from pte._audit import (
    Approval,
    ProcedureApproval,
    check_by,
    format_time,
    utc_now,
)
from pte._catalogue import Registry, ToolSpec
from pte._core import (
    ApprovalConsumed,
    ApprovalStoreError,
    SigningKey,
    append_line,
    canonical_json,
    read_shared,
    sign_decision,
)
from pte._core import strict_json as strict_json
from pte._plan import Plan

__all__ = [
    "DEFAULT_VALIDITY",
    "LEGACY_KEY_ENV",
    "PUBLIC_KEYS_ENV",
    "PUBLIC_KEYS_FILE_ENV",
    "SIGNING_KEY_ENV",
    "SIGNING_KEY_FILE_ENV",
    "ApprovalStore",
    "Consumption",
    "approve",
    "catalogue_fingerprint",
    "make_approval",
    "requires_approval",
    "tool_code_hash",
]

#: How long an approval stays valid unless `approve` is told otherwise.
DEFAULT_VALIDITY = timedelta(hours=24)

#: PEM text of the approvers' public keys (one or more blocks) / a file holding them.
PUBLIC_KEYS_ENV = "PTE_APPROVAL_PUBLIC_KEYS"
PUBLIC_KEYS_FILE_ENV = "PTE_APPROVAL_PUBLIC_KEYS_FILE"
#: PEM text of the approver's private key / a file holding it (for `pte approve` only).
SIGNING_KEY_ENV = "PTE_APPROVAL_SIGNING_KEY"
SIGNING_KEY_FILE_ENV = "PTE_APPROVAL_SIGNING_KEY_FILE"
#: The old HMAC key variable: refused with a clear message.
LEGACY_KEY_ENV = "PTE_APPROVAL_KEY"


_LEGACY_KEYS = frozenset({"plan_hash", "by", "at", "signature"})
_CONSUMED_KEYS = frozenset({"consumed", "plan_hash", "step_id", "run_id", "at"})


@dataclass(frozen=True)
class Consumption:
    """A store line: `approval` was used to run step `step_id` of `plan_hash` in run `run_id`."""

    approval: str
    plan_hash: str
    step_id: str
    run_id: str
    at: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "consumed": self.approval,
            "plan_hash": self.plan_hash,
            "step_id": self.step_id,
            "run_id": self.run_id,
            "at": self.at,
        }


@dataclass
class _StoreContents:
    approvals: list[Approval] = field(default_factory=list)
    #: `by` of each old-format (HMAC) approval line, by plan hash.
    legacy: dict[str, list[str]] = field(default_factory=dict)
    #: (approval id, step id) -> the consumption.
    consumed: dict[tuple[str, str], Consumption] = field(default_factory=dict)
    #: Approvals of procedure versions (bound to no run; pte._policy._procedure_approval).
    procedure_approvals: list[ProcedureApproval] = field(default_factory=list)
    #: (approval id, run id, step id) -> the consumption: a procedure approval serves many runs,
    #: each of which runs each of its writes once.
    consumed_in_run: dict[tuple[str, str, str], Consumption] = field(default_factory=dict)


class ApprovalStore:
    """A JSON Lines file of approvals and consumptions. A missing file holds none.

    Every read takes a shared lock and every write an exclusive one (``flock`` on the file),
    so a consumption is checked and recorded atomically even across processes. A malformed
    line makes every read fail (`ApprovalStoreError`) and approval checks then fail closed.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()

    # -- reading ------------------------------------------------------------------------------

    def _parse(self, text: str) -> _StoreContents:
        contents = _StoreContents()
        for number, line in enumerate(text.split("\n"), start=1):
            if not line.strip():
                continue
            try:
                data = strict_json.loads(line)
                if isinstance(data, dict) and "consumed" in data:
                    if set(data) != _CONSUMED_KEYS or not all(isinstance(v, str) for v in data.values()):
                        raise ValueError(f"a consumption has exactly the keys {sorted(_CONSUMED_KEYS)}")
                    used = Consumption(
                        data["consumed"], data["plan_hash"], data["step_id"], data["run_id"], data["at"]
                    )
                    contents.consumed.setdefault((used.approval, used.step_id), used)
                    contents.consumed_in_run.setdefault((used.approval, used.run_id, used.step_id), used)
                elif isinstance(data, dict) and "pte_procedure_approval" in data:
                    contents.procedure_approvals.append(ProcedureApproval.from_dict(data))
                elif isinstance(data, dict) and set(data) == _LEGACY_KEYS:
                    contents.legacy.setdefault(str(data["plan_hash"]), []).append(str(data["by"]))
                else:
                    contents.approvals.append(Approval.from_dict(data))
            except ValueError as exc:
                raise ApprovalStoreError(f"approval store {str(self.path)!r} line {number}: {exc}") from None
        return contents

    def contents(self) -> _StoreContents:
        """Everything in the store (approvals, old-format lines, consumptions)."""
        try:
            text = read_shared(self.path)
        except (OSError, UnicodeDecodeError) as exc:
            raise ApprovalStoreError(f"cannot read approval store {str(self.path)!r}: {exc}") from None
        return _StoreContents() if text is None else self._parse(text)

    def __iter__(self) -> Any:
        """Every approval in the store, oldest first."""
        return iter(self.contents().approvals)

    def find(self, plan_hash: str) -> list[Approval]:
        """Every approval recorded for `plan_hash`, oldest first (signatures not checked)."""
        return [a for a in self if a.plan_hash == plan_hash]

    # -- writing ------------------------------------------------------------------------------

    def _append(self, line: str, check: Callable[[_StoreContents], None] | None = None) -> None:
        def checked(text: str) -> bool:
            if check is not None:
                check(self._parse(text))  # raises to refuse
            return True

        with self._lock:
            try:
                append_line(self.path, line, None if check is None else checked)
            except UnicodeDecodeError as exc:
                raise ApprovalStoreError(f"cannot read approval store {str(self.path)!r}: {exc}") from None
            except OSError as exc:
                raise ApprovalStoreError(f"cannot write approval store {str(self.path)!r}: {exc}") from None

    def add(self, approval: Approval | ProcedureApproval) -> None:
        """Append one approval (fsynced: an approval someone was told about must not vanish)."""
        self._append(canonical_json(approval.to_dict()) + "\n")

    def consume(
        self,
        approval: Approval | ProcedureApproval,
        plan_hash: str,
        step_id: str,
        run_id: str,
        *,
        recall: bool = False,
    ) -> Consumption:
        """Record that `approval` runs `step_id` now; `ApprovalConsumed` if it already ran it.

        Check and write happen under one exclusive lock on the store file: of two processes
        racing for the same approval and step, exactly one gets it. `recall`: the step's tool
        takes an idempotency key and this is the same run calling the same step again (resume
        after a crash): the earlier consumption stands for it, the tool applies the key once,
        and nothing is appended. A procedure approval (`ProcedureApproval`) serves many runs:
        its consumption is keyed by run and step, so each run runs each write once.
        """
        used = Consumption(approval.id, plan_hash, step_id, run_id, format_time(utc_now()))
        again: list[Consumption] = []
        per_run = isinstance(approval, ProcedureApproval)

        def check(contents: _StoreContents) -> None:
            earlier = (
                contents.consumed_in_run.get((approval.id, run_id, step_id))
                if per_run
                else contents.consumed.get((approval.id, step_id))
            )
            if earlier is None:
                return
            if recall and earlier.run_id == run_id and earlier.plan_hash == plan_hash:
                again.append(earlier)
                raise _Recalled
            raise ApprovalConsumed(_consumed_message(approval, earlier, run_id))

        try:
            self._append(canonical_json(used.to_dict()) + "\n", check)
        except _Recalled:
            return again[0]
        return used


class _Recalled(Exception):
    """Internal: a keyed re-call of a step its run already consumed the approval for."""


def _consumed_message(
    approval: Approval | ProcedureApproval, earlier: Consumption, run_id: str | None = None
) -> str:
    if run_id is not None and earlier.run_id == run_id:
        # The same run, the same step again: its first call may have taken effect. Approving
        # again would pay twice; a person must look at what happened.
        return (
            f"run {run_id} already used its approval by {approval.by} to start step {earlier.step_id!r} "
            f"({earlier.at}); that call's effect is unknown and the tool takes no idempotency key, so "
            "it is not called again: check whether it took effect (the run needs review); do not "
            "approve it again to retry"
        )
    if isinstance(approval, ProcedureApproval):
        return (
            f"run {earlier.run_id} already used the approval of procedure {approval.procedure} by "
            f"{approval.by} to run step {earlier.step_id!r} ({earlier.at}); each run runs each write once"
        )
    return (
        f"the approval of plan {approval.plan_hash} by {approval.by} was already used to run step "
        f"{earlier.step_id!r} (run {earlier.run_id}, {earlier.at}); a non-idempotent write runs at most "
        "once per approval (an approval approves one run)"
    )


# --- what an approval binds -----------------------------------------------------------------------


def tool_code_hash(spec: ToolSpec) -> str:
    """SHA-256 of a tool's code (`ToolSpec.code_sha256`)."""
    return spec.code_sha256


def catalogue_fingerprint(
    registry: Registry,
    tools: Iterable[str] | Plan,
    policy: Any = None,
    *,
    canonical: Callable[[Any], str] = canonical_json,
) -> str:
    """SHA-256 of what a reviewer of a plan relied on about its tools.

    For each tool (sorted by name): its `describe()` entry (name, description, effect,
    idempotency, timeout, provenance, sinks, approval flag, input and output schemas), the
    hash of its code, and, with a `pte.Policy`, the policy's entry for it (output
    provenance and effective sinks, guarded defaults included). `canonical`: the JSON form
    hashed (`pte._core._canonical.canonical_json_v1` to check an approval of a format 1 log).
    """
    names = sorted({s.tool for s in tools.tool_steps()} if isinstance(tools, Plan) else set(tools))
    entries = []
    for name in names:
        spec = registry[name]
        entry = spec.describe()  # includes the code hash
        if policy is not None:
            entry["policy"] = policy.entry_document(name, registry)
        entries.append(entry)
    return hashlib.sha256(canonical(entries).encode("utf-8")).hexdigest()


def approve(
    plan: Plan,
    by: str,
    store: ApprovalStore,
    *,
    catalogue: str,
    run: str | None = None,
    signing_key: SigningKey | None = None,
    at: datetime | None = None,
    valid_for: timedelta = DEFAULT_VALIDITY,
) -> Approval:
    """Record that `by` approves one run of exactly `plan` against `catalogue`
    (`pte.policy.catalogue_fingerprint(registry, plan, policy)`: what the reviewer relied on).

    `run`: the run id it approves (default: a new one, ``approval.run``); only a run with that
    id can use it, so the run executes with ``AuditLog(..., run_id=approval.run)``.
    Signed with `signing_key` when given. Valid from `at` (default now) for `valid_for`.
    """
    approval = make_approval(
        plan.hash, by, catalogue=catalogue, run=run, signing_key=signing_key, at=at, valid_for=valid_for
    )
    store.add(approval)
    return approval


def make_approval(
    plan_hash: str,
    by: str,
    *,
    catalogue: str,
    run: str | None = None,
    signing_key: SigningKey | None = None,
    at: datetime | None = None,
    valid_for: timedelta = DEFAULT_VALIDITY,
) -> Approval:
    """An approval of run `run` (default: a new run id) of `plan_hash` against `catalogue`
    (signed with `signing_key` when given), not stored."""
    when, expires = validity(by, at, valid_for)
    fields: dict[str, Any] = {
        "run": run if run is not None else uuid.uuid4().hex,
        "plan_hash": plan_hash,
        "catalogue": catalogue,
        "by": by,
        "at": when,
        "expires": expires,
    }
    return sign_decision(Approval, fields, signing_key)


def validity(by: str, at: datetime | None, valid_for: timedelta) -> tuple[str, str]:
    """(at, expires) of an approval `by` gives at `at` (default now) for `valid_for` (checked)."""
    check_by(by)
    if valid_for <= timedelta(0):
        raise ValueError("valid_for must be positive")
    when = at if at is not None else utc_now()
    return format_time(when), format_time(when + valid_for)


def requires_approval(plan: Plan, registry: Registry) -> list[str]:
    """The tools of `plan` that run only in an approved plan, in plan order, each once."""
    names = dict.fromkeys(step.tool for step in plan.tool_steps())
    return [name for name in names if registry[name].requires_approval]


def consumable_steps(plan: Plan, registry: Registry) -> list[str]:
    """Ids of the steps of `plan` an approval is consumed by: its non-idempotent writes."""
    return [
        s.id
        for s in plan.tool_steps()
        if s.tool in registry and registry[s.tool].effect == "write" and not registry[s.tool].idempotent
    ]
