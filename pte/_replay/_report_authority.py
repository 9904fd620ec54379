"""The report's account of authority, in an auditor's words: who or what allowed each flow of
data into a sink (the policy, a person's endorsement) and each call that needed an approval,
what a paused run waits for and from whom, and which text on the page is PTE's own.

Read from the run's records only: ``plan_accepted.needs_endorsement`` names the parameters the
policy did not accept on its own (their values come from data it does not let through), and
the ``endorsement``/``approval`` records name the people who allowed them. A parameter of an
accepted plan not listed there was allowed by the policy: compile refuses a plan whose sinks
would receive data they do not accept.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

from pte._replay._run_view import PlanView, StepView, plan_references

__all__ = ["PTE_DECISIONS", "approval_lines", "flow_lines", "pause_text", "result_is_trusted"]

#: Reasons whose message is PTE's own decision on a plan (compile, policy, approval), not text
#: from a tool, a model or a person: the report shows it plainly, as the decision it is.
PTE_DECISIONS = frozenset(
    {
        "invalid_json",
        "schema_violation",
        "duplicate_step_id",
        "tool_not_allowed",
        "invalid_args",
        "bad_reference",
        "plan_cycle",
        "plan_too_large",
        "policy_violation",
        "approval_missing",
        "approval_consumed",
    }
)


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _person(value: Any) -> str:
    """A person's name as recorded: their own text, so framed as text from outside PTE."""
    return f'<span class="untrusted" title="a name as recorded, shown as text">{_e(value)}</span>'


def _signature(record: Mapping[str, Any]) -> str:
    if not record.get("signature"):
        return "not signed"
    return "signed, key checked by the deployment" if record.get("signed") else "signed, key not checked"


def _needs_endorsement(records: Sequence[Mapping[str, Any]], plan: PlanView) -> dict[str, set[str]]:
    accepted = next(
        (r for r in records if r.get("type") == "plan_accepted" and r.get("plan_hash") == plan.plan_hash),
        None,
    )
    needs = (accepted or {}).get("needs_endorsement") or {}
    return {str(step): {str(p) for p in params} for step, params in needs.items() if isinstance(params, list)}


def _endorsement_of(records: Sequence[Mapping[str, Any]], step_id: str) -> Mapping[str, Any] | None:
    return next(
        (
            r
            for r in reversed(records)
            if r.get("type") in ("endorsement", "endorsement_rejected") and r.get("step_id") == step_id
        ),
        None,
    )


def _allowed_by(
    records: Sequence[Mapping[str, Any]], step: StepView, param: str, needs: Mapping[str, set[str]]
) -> tuple[str, str]:
    """(who or what allowed the flow into `step`'s `param`: policy, endorsement or none; in words)."""
    if param not in needs.get(step.id.split("[")[0], set()):
        return "policy", "the policy: every source's label is one this parameter accepts"
    decision = _endorsement_of(records, step.id.split("[")[0])
    if decision is None:
        return "none", (
            "nobody yet: the policy does not accept this data here on its own, and no person has "
            "endorsed the value (the call does not run until one does)"
        )
    when = _e(decision.get("at"))
    if decision.get("type") == "endorsement_rejected" or decision.get("decision") == "rejected":
        return (
            "none",
            f"nobody: {_person(decision.get('by'))} rejected the value at {when}, so the call did not run",
        )
    return "endorsement", (
        f"an endorsement: the policy does not accept this data here on its own; "
        f"{_person(decision.get('by'))} endorsed the exact value at {when} ({_signature(decision)})"
    )


def flow_lines(records: Sequence[Mapping[str, Any]], plan: PlanView) -> list[str]:
    """One list item per sink parameter of the plan: its sources, and who or what allowed it."""
    steps = {s.id: s for s in plan.steps}
    needs = _needs_endorsement(records, plan)
    out = []
    for step in plan.steps:
        args = step.plan_args if isinstance(step.plan_args, dict) else {}
        for sink in step.sinks or []:
            if not isinstance(sink, list) or len(sink) != 2:
                continue
            param, accepted = sink
            sources = []
            for ref in plan_references(args.get(param)):
                source = steps.get(ref.partition("/")[0])
                label = source.provenance if source is not None else "an earlier stage's"
                sources.append(f"{_e(ref)} ← {_e(source.tool if source else '?')} ({_e(label)} data)")
            if not sources:
                sources.append("a value written in the plan")
            kind, words = _allowed_by(records, step, str(param), needs)
            out.append(
                f'<li class="flow" data-step-id="{_e(step.id)}" data-param="{_e(param)}" '
                f'data-allowed-by="{kind}"><code>{_e(step.tool)}.{_e(param)}</code> accepts '
                f"{_e(', '.join(map(str, accepted)))} data; receives {'; '.join(sources)}. "
                f"<b>Allowed by</b> {words}.</li>"
            )
    return out


def approval_lines(records: Sequence[Mapping[str, Any]], plan: PlanView) -> list[str]:
    """One list item per call of the plan that needs an approval: who approved the plan, if anyone."""
    approvals = [
        r for r in records if r.get("type") == "approval" and r.get("plan_hash") in (plan.plan_hash, None)
    ]
    rejected = next((r for r in records if r.get("type") == "approval_rejected"), None)
    out = []
    for step in plan.steps:
        if not step.requires_approval or step.tool is None:
            continue
        if approvals:
            last = approvals[-1]
            words = (
                f"an approval: {_person(last.get('by'))} approved this plan at {_e(last.get('at'))} "
                f"({_signature(last)})"
            )
            kind = "approval"
        elif rejected is not None:
            words, kind = f"nobody: {_person(rejected.get('by'))} rejected the plan", "none"
        else:
            words, kind = "nobody: no approval of this plan is recorded, so the call did not run", "none"
        out.append(
            f'<li class="flow approval-needed" data-step-id="{_e(step.id)}" data-allowed-by="{kind}">'
            f"<code>{_e(step.tool)}</code> (step <code>{_e(step.id)}</code>) needs an approved plan. "
            f"<b>Allowed by</b> {words}.</li>"
        )
    return out


def pause_text(record: Mapping[str, Any], plans: Sequence[PlanView]) -> str:
    """What a paused run waits for, and from whom."""
    until = f" (until {_e(record.get('expires_at'))})" if record.get("expires_at") else ""
    if record.get("reason") == "awaiting_endorsement":
        asked = record.get("endorsement") or {}
        params = ", ".join(f"{asked.get('tool')}.{name}" for name in (asked.get("values") or {}))
        return (
            f"the run waits for a person to endorse the exact values of {_e(params)} before "
            f"<code>{_e(asked.get('tool'))}</code> is called at step <code>{_e(asked.get('step_id'))}</code>"
            f"{until}: the policy does not accept where they come from on its own"
        )
    plan = next((p for p in plans if p.plan_hash == record.get("plan_hash")), None)
    tools = sorted({s.tool for s in plan.steps if s.requires_approval and s.tool}) if plan else []
    needing = f": {_e(', '.join(tools))} needs an approved plan" if tools else ""
    return (
        f"the run waits for a person to approve plan <code>{_e(str(record.get('plan_hash'))[:16])}…</code>"
        f"{needing}{until}"
    )


def result_is_trusted(plan: PlanView | None) -> bool:
    """True when the plan's result is made only of outputs of tools the deployment trusts."""
    if plan is None:
        return False
    refs = plan_references(plan.plan.get("result"))
    steps = {s.id: s for s in plan.steps}
    sources = [steps.get(ref.partition("/")[0]) for ref in refs]
    return bool(sources) and all(s is not None and s.provenance == "trusted" for s in sources)
