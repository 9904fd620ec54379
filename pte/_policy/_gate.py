"""The approval gate: which approval lets a plan run here, and its consumption by the writes it runs.

`ApprovalGate` plugs into `Engine(approval=...)` (see `pte._policy._approval` for what an approval
binds). It reads approvals from the deployment's `ApprovalStore` only, checks each against the
deployment's catalogue fingerprint, trusted keys and clock, records the approval it uses in
the audit log, and is asked before each call's side effect (`before_call`, a `CallHook` the run
loop puts in the executor's call gate) so that a non-idempotent write consumes the approval
(under the store's lock) before its call starts.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from pte._audit import Approval, ProcedureApproval, RecordSink, utc_now
from pte._audit import records as rec
from pte._catalogue import Registry, ToolSpec
from pte._core import (
    ApprovalConsumed,
    ApprovalMissing,
    ApprovalStoreError,
    KeyFileError,
    SigningKey,
    TrustedKeys,
)
from pte._plan import Plan, PlanStep
from pte._policy._approval import (
    LEGACY_KEY_ENV,
    PUBLIC_KEYS_ENV,
    PUBLIC_KEYS_FILE_ENV,
    SIGNING_KEY_ENV,
    SIGNING_KEY_FILE_ENV,
    ApprovalStore,
    _consumed_message,
    catalogue_fingerprint,
    consumable_steps,
    requires_approval,
)
from pte._policy._procedure_approval import ProcedureCover, procedure_cover, procedure_fingerprint

__all__ = [
    "ApprovalGate",
    "ConsumingApproval",
    "PlanApproval",
    "approval_hook",
    "check_approval",
    "public_keys_from_env",
    "signing_key_from_env",
]


class PlanApproval(Protocol):
    """What `Engine(approval=...)` is given: asked with each accepted plan before any step of it
    runs; raising (`ApprovalMissing`, any `FailedClosed`) stops the run there."""

    def __call__(self, plan: Plan, audit: RecordSink, /) -> None: ...


@runtime_checkable
class ConsumingApproval(PlanApproval, Protocol):
    """A `PlanApproval` whose approvals are spent by the writes they let run: `Engine` puts its
    `before_call` (a `pte._execution.CallHook`) in each run's call gate (pte._run._call_gate),
    asked before each call's side effect, so a non-idempotent write consumes its approval
    exactly once, whatever the invoker. `ApprovalGate` is one; a gate without `before_call`
    only checks plans."""

    def before_call(self, spec: ToolSpec, args: dict[str, Any], step: PlanStep) -> None:
        """Before the side effect of `step`'s call: consume what it runs under, or raise."""
        ...


class ApprovalGate(ConsumingApproval):
    """The approval check for `Engine(approval=...)`, and the consumption guard for its tool calls.

    Called with each accepted plan before any of its steps runs: when the plan calls a tool
    with ``requires_approval``, it finds the newest approval in the store that

    - approves this plan hash, against this deployment's catalogue fingerprint of the plan's tools;
    - verifies under one of `keys` (when keys are configured; else unsigned ones count too);
    - has not expired, and has not been used by another run for any step it would be consumed by;

    appends an ``approval`` record carrying the whole approval (enough to re-check its
    signature) and remembers it for the plan's steps. Otherwise `ApprovalMissing` (or
    `ApprovalConsumed`) ends the run before anything runs.

    `before_call` is the run's call gate's point before a side effect: before a non-idempotent
    write step of an approved plan is called, its consumption is recorded in the store (atomically); a second
    use of the same approval for the same step raises `ApprovalConsumed` instead of calling.
    """

    def __init__(
        self,
        store: ApprovalStore,
        registry: Registry,
        *,
        keys: TrustedKeys | None = None,
        policy: Any = None,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self.store = store
        self.registry = registry
        self.keys = keys if keys else None
        self.policy = policy
        self.clock = clock
        self._lock = threading.Lock()
        # id(step) -> (step, approval, plan hash, run id); the step is kept so its id stays unique.
        self._steps: OrderedDict[int, tuple[PlanStep, Approval | ProcedureApproval, str, str]] = OrderedDict()

    def __call__(self, plan: Plan, audit: RecordSink) -> None:
        approval = self.check(plan, run_id=audit.run_id, resuming=audit.continues_run)
        if approval is None:
            return
        signed = self.keys is not None
        if isinstance(approval, ProcedureCover):
            for each, steps in approval.approvals:
                audit.write(
                    rec.procedure_approval(
                        each.to_dict(), approval_id=each.id, signed=signed, plan_hash=plan.hash, steps=steps
                    )
                )
        else:
            audit.write(rec.approval(approval.to_dict(), approval_id=approval.id, signed=signed))
        with self._lock:
            for step in plan.steps:
                used = (
                    approval.approval_of(plan, step.id) if isinstance(approval, ProcedureCover) else approval
                )
                if used is None:
                    continue  # not inside a call of an approved procedure: nothing to consume
                entry = (step, used, plan.hash, audit.run_id)
                self._steps[id(step)] = entry
                # A for_each step runs as element sub-steps ``id[i]`` (pte._execution._control_run): copies
                # of the step sharing its private `_args` mapping. Each element consumes on its own.
                self._steps[id(step._args)] = entry
            while len(self._steps) > 8192:
                self._steps.popitem(last=False)

    def check(
        self, plan: Plan, *, run_id: str | None = None, resuming: bool = False
    ) -> Approval | ProcedureCover | None:
        """The approval that lets `plan` run as run `run_id` (None when none is needed); raises
        when none does. `run_id` None: any run's (the CLI picks the run `pte approve` created).
        `resuming`: the run continues, and the writes it already consumed the approval for are
        refused step by step (`before_call`) rather than here; a fresh start of a run id that
        consumed its approval is refused here, before anything runs.

        Without an approval of the plan itself, a plan whose every step needing approval was
        inlined from a call of a procedure (`pte._policy._procedure_approval.procedure_cover`) runs
        under approvals of those procedure versions (a `ProcedureCover`)."""
        tools = requires_approval(plan, self.registry)
        if not tools:
            return None
        needs = f"{', '.join(tools)} require{'s' if len(tools) == 1 else ''} an approved plan"
        try:
            contents = self.store.contents()
        except ApprovalStoreError as exc:
            raise ApprovalMissing(f"{needs}, and the approval store cannot be read: {exc}") from None
        found = [a for a in contents.approvals if a.plan_hash == plan.hash]
        legacy = contents.legacy.get(plan.hash, [])
        cover = procedure_cover(plan, self.registry)
        if not found and cover is not None:
            return self._check_procedures(plan, cover, contents, needs, run_id, resuming)
        if not found:
            hint = (
                f"; the store holds old HMAC approval(s) by {', '.join(legacy)}, which no longer count: "
                "approve the plan again with an Ed25519 signing key (pte keys generate)"
                if legacy
                else " (a person approves it with pte approve and its plan file, then the run starts again)"
            )
            raise ApprovalMissing(f"{needs}; no approval is recorded for plan {plan.hash}{hint}")
        fingerprint = catalogue_fingerprint(self.registry, plan, self.policy)
        now = self.clock()
        steps = consumable_steps(plan, self.registry)
        reasons: list[str] = []
        valid: list[Approval] = []
        for approval in reversed(found):
            why = self._why_not(approval, fingerprint, now, run_id)
            if why is None:
                valid.append(approval)
            else:
                reasons.append(f"{approval.by} ({approval.at}): {why}")
        if not valid:
            raise ApprovalMissing(f"{needs}; no approval of plan {plan.hash} counts: {'; '.join(reasons)}")
        wanted = set(steps)
        for approval in valid:
            used = [
                c
                for (approval_id, step_id), c in contents.consumed.items()
                if approval_id == approval.id
                and step_id.split("[", 1)[0] in wanted  # a step, or an element ``id[i]`` of it
                # Resume of the run that used it: the guard decides step by step.
                and not (resuming and c.run_id == run_id)
            ]
            if not used:
                return approval
            earlier = used[0]
        raise ApprovalConsumed(_consumed_message(valid[-1], earlier))

    def refusal(self, approval: Approval, plan: Plan, run_id: str | None = None) -> str | None:
        """Why `approval` does not let `plan` run here as run `run_id` (None: it does, consumption aside)."""
        if approval.plan_hash != plan.hash:
            return f"it approves plan {approval.plan_hash}, not {plan.hash}"
        fingerprint = catalogue_fingerprint(self.registry, plan, self.policy)
        return self._why_not(approval, fingerprint, self.clock(), run_id)

    def _check_procedures(
        self,
        plan: Plan,
        cover: dict[tuple[str, str], list[str]],
        contents: Any,
        needs: str,
        run_id: str | None,
        resuming: bool,
    ) -> ProcedureCover:
        """Each (procedure, version) the plan's approval-needing steps were inlined from needs a
        counting approval of that version in the store; a run that already used one for a step
        starts again only as a resume (its steps are then refused one by one, `before_call`)."""
        now = self.clock()
        chosen: list[tuple[ProcedureApproval, tuple[str, ...]]] = []
        for (name, version), step_ids in cover.items():
            where = f"{needs}: step(s) {', '.join(step_ids)} of procedure {name} (version {version[:12]}…)"
            procedure = self.registry.procedures.get(name)
            if procedure is None or procedure.version != version:  # origins come from these: defensive
                raise ApprovalMissing(f"{where}: this deployment has no such procedure version")
            fingerprint = procedure_fingerprint(self.registry, procedure, self.policy)
            candidates = [a for a in contents.procedure_approvals if a.procedure == name]
            if not candidates:
                raise ApprovalMissing(
                    f"{where}; no approval of procedure {name} is recorded (a person approves the procedure "
                    "with pte approve --procedure and its file, or the plan with pte approve and its file)"
                )
            reasons = []
            approval = None
            for candidate in reversed(candidates):
                why = self._why_not_procedure(candidate, version, fingerprint, now)
                if why is None:
                    approval = candidate
                    break
                reasons.append(f"{candidate.by} ({candidate.at}): {why}")
            if approval is None:
                raise ApprovalMissing(
                    f"{where}; no approval of procedure {name} counts: {'; '.join(reasons)}"
                )
            if run_id is not None and not resuming:
                used = [
                    c
                    for (approval_id, run, step_id), c in contents.consumed_in_run.items()
                    if approval_id == approval.id and run == run_id
                ]
                if used:
                    raise ApprovalConsumed(_consumed_message(approval, used[0], run_id))
            chosen.append((approval, tuple(step_ids)))
        return ProcedureCover(tuple(chosen))

    def _why_not_procedure(
        self, approval: ProcedureApproval, version: str, fingerprint: str, now: datetime
    ) -> str | None:
        if approval.version != version:
            return (
                f"it approves version {approval.version[:12]}…, not this deployment's {version[:12]}… "
                "(the procedure was edited: approve the new version)"
            )
        if approval.catalogue != fingerprint:
            return (
                f"approved against catalogue {approval.catalogue[:12]}…, but this deployment's tools of "
                f"the procedure's body (and policy) fingerprint to {fingerprint[:12]}…"
            )
        return self._signature_or_expiry(approval, now)

    def _why_not(self, approval: Approval, fingerprint: str, now: datetime, run_id: str | None) -> str | None:
        if approval.run is None:
            return (
                "it approves a plan, not a run (format 2, PTE < 0.4): approve it again "
                "(pte approve PLAN_FILE binds the run that then executes)"
            )
        if approval.catalogue != fingerprint:
            return (
                f"approved against catalogue {approval.catalogue[:12]}…, but this deployment's tools "
                f"(and policy) fingerprint to {fingerprint[:12]}…"
            )
        why = self._signature_or_expiry(approval, now)
        if why is not None:
            return why
        if run_id is not None and approval.run != run_id:
            return f"it approves run {approval.run}, not run {run_id}"
        return None

    def _signature_or_expiry(self, approval: Approval | ProcedureApproval, now: datetime) -> str | None:
        if self.keys is not None:
            if not approval.signed:
                return "unsigned, while approval public keys are configured"
            if approval.key_id not in self.keys:
                return f"signed by key {str(approval.key_id)[:16]}…, which is not a trusted approval key"
            if not approval.verify(self.keys):
                return "bad signature"
        elif approval.signed and not approval.self_consistent():
            return "bad signature"
        if approval.expired(now):
            return f"expired at {approval.expires}"
        return None

    def before_call(self, spec: ToolSpec, args: dict[str, Any], step: PlanStep) -> None:
        """The gate's `CallHook` (`Engine` puts it in each run's call gate, pte._run._call_gate):
        a non-idempotent write step consumes the approval, recorded before its call starts;
        `ApprovalConsumed` stops the run instead of starting it."""
        self.consume_for(spec, step)

    def consume_for(self, spec: ToolSpec, step: PlanStep) -> None:
        if spec.effect != "write" or spec.idempotent:
            return
        with self._lock:
            entry = self._steps.get(id(step))
            if entry is None or entry[0] is not step:
                entry = self._steps.get(id(step._args))
        if entry is None or (entry[0] is not step and entry[0]._args is not step._args):
            return  # a plan that needed no approval: nothing to consume
        _, approval, plan_hash, run_id = entry
        try:
            self.store.consume(approval, plan_hash, step.id, run_id, recall=spec.idempotency_key is not None)
        except ApprovalStoreError as exc:
            raise ApprovalMissing(
                f"cannot record the use of the approval of plan {plan_hash}: {exc}"
            ) from None


def approval_hook(
    store: ApprovalStore, *, registry: Registry, keys: TrustedKeys | None = None, policy: Any = None
) -> ApprovalGate:
    """The approval gate for `Engine(approval=...)` (see `ApprovalGate`)."""
    return ApprovalGate(store, registry, keys=keys, policy=policy)


def check_approval(
    plan: Plan,
    registry: Registry,
    store: ApprovalStore,
    *,
    keys: TrustedKeys | None = None,
    policy: Any = None,
) -> Approval | ProcedureCover | None:
    """None when no tool of `plan` needs approval; else the approval that lets it run (or raise)."""
    return ApprovalGate(store, registry, keys=keys, policy=policy).check(plan)


# --- keys from the environment ------------------------------------------------------------------------


def _refuse_legacy(env: Mapping[str, str]) -> None:
    if env.get(LEGACY_KEY_ENV):
        raise KeyFileError(
            f"{LEGACY_KEY_ENV} (an HMAC key) is no longer supported: approvals are signed with Ed25519. "
            f"Create a key pair with `pte keys generate`, give approvers the private key "
            f"({SIGNING_KEY_FILE_ENV}) and executing machines the public key ({PUBLIC_KEYS_FILE_ENV}), "
            f"unset {LEGACY_KEY_ENV}, and approve pending plans again"
        )


def public_keys_from_env(
    path: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None
) -> TrustedKeys | None:
    """The trusted approval keys: from `path`, else ``$PTE_APPROVAL_PUBLIC_KEYS_FILE``, else PEM
    text in ``$PTE_APPROVAL_PUBLIC_KEYS``; None when none is configured. `KeyFileError` on bad keys."""
    env = os.environ if environ is None else environ
    _refuse_legacy(env)
    source = path or env.get(PUBLIC_KEYS_FILE_ENV) or None
    if source:
        return TrustedKeys.load(source)
    text = env.get(PUBLIC_KEYS_ENV, "")
    return TrustedKeys.from_pem(text.encode(), source=f"${PUBLIC_KEYS_ENV}") if text.strip() else None


def signing_key_from_env(
    path: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None
) -> SigningKey | None:
    """The approver's private key: from `path`, else ``$PTE_APPROVAL_SIGNING_KEY_FILE``, else PEM
    text in ``$PTE_APPROVAL_SIGNING_KEY``; None when none is configured."""
    env = os.environ if environ is None else environ
    _refuse_legacy(env)
    source = path or env.get(SIGNING_KEY_FILE_ENV) or None
    if source:
        return SigningKey.load(source)
    text = env.get(SIGNING_KEY_ENV, "")
    return SigningKey.from_pem(text.encode(), source=f"${SIGNING_KEY_ENV}") if text.strip() else None


@dataclass(frozen=True)
class NoApprovals(PlanApproval):
    """No approval store: a plan that calls a tool requiring approval fails closed.

    An object, not a bound method of the engine: the engine holding its own method would be
    a reference cycle, freed only by a garbage-collector pass instead of when it is dropped.
    """

    registry: Registry

    def __call__(self, plan: Plan, audit: RecordSink) -> None:
        needing = sorted({s.tool for s in plan.tool_steps() if self.registry[s.tool].requires_approval})
        if needing:
            raise ApprovalMissing(
                f"plan {plan.hash} calls {needing}, which require an approved plan, and no approval "
                "store is configured (a deployment names one: pte init)"
            )
