"""`pte audit report LOG -o run.html`: one self-contained HTML page an auditor reads.

The page holds, per run: a summary (status, steps by outcome, writes, people, policy
decisions); the request; each plan as a DAG (inline SVG) and a table with every step's true
outcome (read from `pte._replay._run_view.RunView`: a `for_each` step with its elements, a `when`
skipped or run with its condition, a `require` met or not) and, behind a disclosure, its
arguments as planned and as called; approvals with signer and signature state; every policy
decision; replans; the LLM calls with tokens; a collapsible timeline; and, at the top,
whether the chain (and a signed checkpoint, when one is given) verifies. No script, no
network, no external asset: a Content-Security-Policy of ``default-src 'none'`` forbids
them, so the page shows the same thing offline forever. A run of a run store is reported
the same way (`render_store_report`).

Everything taken from the log is escaped (`html.escape`). Text from a source the deployment
does not trust (LLM answers, outputs of tools not declared trusted, error messages) is also
*marked*: shown in a ``.untrusted`` frame labelled as such; trusted tools' outputs and PTE's
own text are shown plainly, so the frame keeps its meaning.
"""

from __future__ import annotations

import html
import json
import os
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from string import Template
from typing import Any

from pte._audit import (
    Verdict,
    approval_problem,
    endorsement_problem,
    iter_records,
    stored_verdict,
    verdict,
)
from pte._catalogue import stored_contents
from pte._core import AuditFormatError, ReportError, well_formed
from pte._replay._report_authority import (
    PTE_DECISIONS,
    approval_lines,
    flow_lines,
    pause_text,
    result_is_trusted,
)
from pte._replay._run_view import PlanView, RunView, StepView
from pte._replay._steps_text import status_text

__all__ = ["render_report", "render_store_report", "write_report"]

_TEMPLATE = Path(__file__).with_name("report_template.html")


def _e(value: Any) -> str:
    """`value` as HTML text. A lone surrogate (a tampered log's ``"\\ud800"``) shows as U+FFFD:
    the page is UTF-8, which cannot hold one."""
    return html.escape(well_formed(str(value)), quote=True)


def _untrusted(text: Any, *, block: bool = False) -> str:
    """Outside text: escaped, and framed as untrusted so no one mistakes it for the report's."""
    body = text if isinstance(text, str) else json.dumps(text, ensure_ascii=False, indent=1)
    tag = "pre" if block else "span"
    return f'<{tag} class="untrusted" title="untrusted text from the log, shown as text">{_e(body)}</{tag}>'


def _json(value: Any) -> str:
    return _e(json.dumps(value, ensure_ascii=False, sort_keys=True))


def _ts(value: Any) -> datetime | None:
    try:
        return datetime.strptime(str(value), "%Y-%m-%dT%H:%M:%S.%fZ")
    except ValueError:
        return None


def _dag_svg(steps: Sequence[StepView]) -> str:
    """The plan as a layered DAG: a column per dependency depth, arrows from inputs to users."""
    ids = {s.id for s in steps}
    depth: dict[str, int] = {}
    for step in steps:  # plan order is a topological order once compiled
        depth[step.id] = 1 + max((depth.get(d, 0) for d in step.deps if d in ids), default=-1)
    columns: dict[int, list[StepView]] = {}
    for step in steps:
        columns.setdefault(depth[step.id], []).append(step)
    box_w, box_h, gap_x, gap_y = 210, 74, 60, 18
    pos: dict[str, tuple[int, int]] = {}
    for col, members in columns.items():
        for row, step in enumerate(members):
            pos[step.id] = (10 + col * (box_w + gap_x), 10 + row * (box_h + gap_y))
    width = 20 + (max(columns, default=0) + 1) * (box_w + gap_x)
    height = 20 + max((len(m) for m in columns.values()), default=1) * (box_h + gap_y)
    parts = [
        f'<svg class="dag" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="plan DAG">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#555"/></marker></defs>',
    ]
    for step in steps:
        x2, y2 = pos[step.id]
        for dep in step.deps:
            if dep in pos:
                x1, y1 = pos[dep]
                parts.append(
                    f'<line class="edge" data-from="{_e(dep)}" data-to="{_e(step.id)}" x1="{x1 + box_w}" '
                    f'y1="{y1 + box_h // 2}" x2="{x2}" y2="{y2 + box_h // 2}" stroke="#555" '
                    'marker-end="url(#arrow)"/>'
                )
    for step in steps:
        x, y = pos[step.id]
        parts.append(
            f'<g class="node status-{_e(step.status.replace(" ", "-"))}" data-step-id="{_e(step.id)}">'
            f'<rect x="{x}" y="{y}" width="{box_w}" height="{box_h}" rx="6"/>'
            f'<text x="{x + 8}" y="{y + 18}" class="sid">{_e(step.id)}</text>'
            f'<text x="{x + 8}" y="{y + 36}">{_e(step.tool)}</text>'
            f'<text x="{x + 8}" y="{y + 54}" class="small">{_e(step.effect)} · {_e(step.provenance)}'
            f"{' · sink' if step.sinks else ''}{' · approval' if step.requires_approval else ''}</text>"
            f'<text x="{x + 8}" y="{y + 68}" class="small">{_e(step.status)}</text></g>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _badge(kind: str, text: str) -> str:
    return f'<span class="badge {_e(kind)}">{_e(text)}</span>'


def _framed(value: Any, trusted: bool) -> str:
    """A value from the log: framed as untrusted unless its source is trusted."""
    if trusted:
        body = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, indent=1)
        return f'<pre class="data">{_e(body)}</pre>'
    return _untrusted(value, block=True)


def _condition_text(step: StepView) -> str:
    written = step.require if step.kind == "require" else step.when
    if written is None:
        return ""
    text = f"<code>{_json(written)}</code>"
    if step.condition is not None:
        text += f" → <b>{_e(step.condition.outcome.replace('_', ' '))}</b>"
        if step.condition.values is not None:
            text += f' <span class="meta">(operands {_json(step.condition.values)})</span>'
    else:
        text += " → not evaluated"
    return text


def _step_details(step: StepView) -> str:
    """The collapsible detail of one step: condition, arguments as written and as called, result."""
    trusted = step.provenance == "trusted"
    parts = []
    condition = _condition_text(step)
    if condition:
        label = "require" if step.kind == "require" else "when"
        parts.append(f'<p class="condition"><b>{label}</b> {condition}</p>')
        if step.kind == "require" and step.status == "not met":
            parts.append(f"<p>message: {_e(step.message or '')}</p>")
    if step.kind == "for_each":
        parts.append(f'<p class="loop"><b>for_each</b> <code>{_json(step.for_each)}</code></p>')
    if step.plan_args is not None:
        parts.append(
            f'<p><b>arguments as planned</b></p><pre class="data">{_e(_pretty(step.plan_args))}</pre>'
        )
    if step.kind == "for_each":
        rows = "".join(
            f'<tr class="element" data-step-id="{_e(step.id)}[{e.index}]" data-index="{e.index}" '
            f'data-status="{_e(e.status)}"><td>{e.index}</td>'
            f"<td>{_badge(e.status, e.status)}</td><td>{_duration(e.duration_ms)}</td>"
            f"<td>{_args(f'{step.id}[{e.index}]', e.args)}</td>"
            f"<td>{_framed(e.error, False) if e.error is not None else _framed(e.output, trusted)}</td></tr>"
            for e in step.elements
        )
        parts.append(
            f"<p><b>{step.items if step.items is not None else 0} element(s)</b></p>"
            '<table class="elements"><thead><tr><th>#</th><th>status</th><th>duration</th>'
            f"<th>arguments (resolved)</th><th>output / error</th></tr></thead><tbody>{rows}</tbody></table>"
        )
    elif step.args is not None:
        parts.append(f"<p><b>arguments (resolved)</b></p>{_args(step.id, step.args)}")
    if step.error is not None:
        parts.append(f"<p><b>error</b></p>{_untrusted(step.error, block=True)}")
    elif step.output is not None:
        parts.append(f"<p><b>output</b> ({_e(step.provenance)})</p>{_framed(step.output, trusted)}")
    if not parts:
        return ""
    return f"<details><summary>details</summary>{''.join(parts)}</details>"


def _procedure_path(step: StepView) -> str:
    """A step inlined from a procedure call or a delegation: its path under the call."""
    if step.path is None:
        return ""
    return f'<br><small class="procedure-path" title="inlined from a procedure call">{_e(step.path)}</small>'


def _args(step_id: str, args: Any) -> str:
    """Resolved arguments, as JSON; PTE resolved them, but their values may come from anywhere."""
    text = json.dumps(args, ensure_ascii=False, indent=1, sort_keys=True)
    return f'<pre class="data args" data-step-id="{_e(step_id)}">{_e(text)}</pre>'


def _pretty(value: Any) -> str:
    return (
        value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, indent=1, sort_keys=True)
    )


def _duration(value: float | None) -> str:
    return f"{float(value):.1f} ms" if isinstance(value, int | float) else "-"


def _summary(view: RunView) -> str:
    s = view.summary()
    outcomes = ", ".join(f"{n} {_e(k)}" for k, n in s["outcomes"].items()) or "none"
    rows = [
        (
            "status",
            _badge(s["status"], s["status"]) + (f" <code>{_e(s['reason'])}</code>" if s["reason"] else ""),
        ),
        ("plans", _e(s["plans"])),
        ("steps by outcome", outcomes),
        ("writes", f"{_e(s['write_calls'])} call(s) in {_e(s['write_steps'])} write step(s)"),
        (
            "autonomy",
            f"{_e(s['writes_without_person'])} write call(s) without a person, "
            f"{_e(s['writes_with_person'])} allowed by a person (approval or endorsement)",
        ),
        (
            "people",
            f"{_e(s['approvals'])} approval(s), {_e(s['approvals_rejected'])} rejection(s), "
            f"{_e(s['pauses'])} pause(s), {_e(s['endorsements'])} endorsement(s)",
        ),
        ("policy and compile decisions", f"{_e(s['policy_decisions'])} plan(s) refused"),
        ("replans and repairs", f"{_e(s['replans'])} replan(s), {_e(s['repairs'])} repair(s)"),
        ("LLM calls", _e(s["llm_calls"])),
    ]
    body = "".join(f'<tr data-key="{_e(k)}"><th>{_e(k)}</th><td>{v}</td></tr>' for k, v in rows)
    return f'<table class="summary">{body}</table>'


def _run_section(view: RunView) -> str:
    started = view.started
    finished = view.finished
    t0 = _ts(view.records[0].get("ts")) if view.records else None
    out = [f'<section class="run" data-run-id="{_e(view.run_id)}" data-status="{_e(view.status)}">']
    out.append(f"<h2>Run <code>{_e(view.run_id)}</code> {_badge(view.status, view.status)}</h2>")
    out.append(_summary(view))
    if finished and finished.get("reason"):
        out.append(f'<p>Reason: <code class="reason">{_e(finished.get("reason"))}</code></p>')
    request = started.get("request")
    out.append(
        '<h3>Request</h3><div class="request"><pre class="request-text" title="the request, as given">'
        f"{_e(request if request is not None else '(none)')}</pre></div>"
    )
    out.append(
        f'<p class="meta">mode {_e(started.get("mode"))} · PTE {_e(started.get("pte_version", "?"))} · '
        f"{_e(started.get('format', 'format 1'))} · "
        f"model {_e((started.get('config') or {}).get('model', '-'))} · "
        f"{len(view.tools)} tools · catalogue "
        f"<code>{_e(str(started.get('catalogue', 'inline'))[:16])}</code> · "
        f"policy <code>{_e(str(started.get('policy', '-'))[:16])}</code> · prompts "
        f"<code>{_e(str(started.get('prompts', '-'))[:16])}</code></p>"
    )
    for plan in view.plans:
        out.append(f"<h3>Plan {plan.index} ({_e(plan.origin)}) <code>{_e(plan.plan_hash[:16])}</code></h3>")
        out.append(f'<div class="dagbox">{_dag_svg(plan.steps)}</div>')
        out.append(
            '<table class="steps"><thead><tr><th>step</th><th>tool</th><th>effect</th><th>provenance</th>'
            "<th>status</th><th>duration</th><th>details</th></tr></thead><tbody>"
        )
        for step in plan.steps:
            labels = _badge(step.provenance, step.provenance) if step.tool is not None else "-"
            if step.sinks:
                labels += " " + _badge("sink", "sink")
            if step.requires_approval:
                labels += " " + _badge("approval", "needs approval")
            items = f' data-items="{step.items}"' if step.items is not None else ""
            out.append(
                f'<tr class="step" data-step-id="{_e(step.id)}" data-kind="{_e(step.kind)}" '
                f'data-tool="{_e(step.tool or "")}" data-effect="{_e(step.effect)}" '
                f'data-provenance="{_e(step.provenance)}" data-status="{_e(step.status)}"{items}>'
                f"<td><code>{_e(step.id)}</code>{_procedure_path(step)}</td>"
                f"<td>{_e(step.tool or step.kind)}</td>"
                f"<td>{_badge(step.effect, step.effect)}</td><td>{labels}</td>"
                f"<td>{_badge(step.status.replace(' ', '-'), status_text(step))}</td>"
                f"<td>{_duration(step.duration_ms)}</td><td>{_step_details(step)}</td></tr>"
            )
        out.append("</tbody></table>")
        flows = flow_lines(view.records, plan) + approval_lines(view.records, plan)
        if flows:
            out.append(
                '<div class="flows"><p>Who or what allowed each flow of data into a sink (a parameter '
                "that accepts only some labels of data), and each call that needs an approved plan:</p><ul>"
            )
            out += flows
            out.append("</ul></div>")

    records = view.records
    out.append(_policy_decisions(records))
    out.append(_approvals(records, view.plans))
    out.append(_endorsements(records, view.plans))
    out.append(_replans(records))
    out.append(_llm_calls(records))
    out.append(
        f'<details class="timeline"><summary>Timeline ({len(records)} records)</summary>'
        f"{_timeline(records, t0)}</details>"
    )
    if finished is not None:
        out.append('<h3>Outcome</h3><dl class="outcome">')
        out.append(f"<dt>status</dt><dd>{_e(finished.get('status'))}</dd>")
        out.extend(_outcome(view))
        out.append("</dl>")
    out.append("</section>")
    return "\n".join(out)


def _outcome(view: RunView) -> list[str]:
    """The run's reason, message, result and answer, each framed by where it comes from."""
    finished = view.finished or {}
    out = []
    if finished.get("reason") is not None:
        out.append(f'<dt>reason</dt><dd><code class="reason">{_e(finished["reason"])}</code></dd>')
    if finished.get("message") is not None:
        out.append(f"<dt>message</dt><dd>{_decision(finished.get('reason'), finished['message'])}</dd>")
    trusted = result_is_trusted(view.plans[-1] if view.plans else None)
    result = finished.get("result")
    if result is not None:
        source = "made of trusted tools' outputs" if trusted else "from sources the deployment does not trust"
        out.append(f'<dt>result <span class="meta">({source})</span></dt><dd>{_framed(result, trusted)}</dd>')
    answer = finished.get("answer")
    if answer is not None:
        # The finalizer's words are a model's; without one, the answer is PTE's rendering of the result.
        by_model = any(r.get("type") == "llm_call" and r.get("role") == "finalizer" for r in view.records)
        source = "the model's words about the result" if by_model else "the result, as PTE renders it"
        shown = _untrusted(answer, block=True) if by_model or not trusted else _framed(answer, True)
        out.append(f'<dt>answer <span class="meta">({source})</span></dt><dd>{shown}</dd>')
    return out


def _policy_decisions(records: Sequence[Mapping[str, Any]]) -> str:
    rejected = [r for r in records if r.get("type") == "plan_rejected"]
    if not rejected:
        return ""
    out = [
        '<h3>Policy and compile decisions</h3><table class="decisions"><thead><tr><th>origin</th>'
        "<th>reason</th><th>where</th><th>decision (the flow it judged)</th></tr></thead><tbody>"
    ]
    for r in rejected:
        out.append(
            f'<tr class="decision" data-reason="{_e(r.get("reason"))}"><td>{_e(r.get("origin"))}</td>'
            f'<td><code class="reason">{_e(r.get("reason"))}</code></td>'
            f"<td><code>{_e(r.get('path'))}</code></td>"
            f"<td>{_decision(r.get('reason'), r.get('message', ''))}</td></tr>"
        )
    out.append("</tbody></table>")
    return "".join(out)


def _decision(reason: Any, message: Any) -> str:
    """A refusal's message: PTE's own decision shown plainly (its names come from the plan, as
    text); a message carrying a tool's, a model's or a person's words is framed as untrusted."""
    if reason in PTE_DECISIONS:
        return f'<span class="decision" title="PTE\'s decision">{_e(message)}</span>'
    return _untrusted(message)


#: What each kind of record is, in the approvals and endorsements tables.
_WHAT = {
    "run_paused": "paused for an approval",
    "approval": "approved",
    "approval_rejected": "approval refused",
    "endorsement": "endorsed",
    "endorsement_rejected": "endorsement refused",
}


def _approvals(records: Sequence[Mapping[str, Any]], plans: Sequence[PlanView]) -> str:
    rows = [
        r
        for r in records
        if r.get("type") in ("approval", "approval_rejected")
        or (r.get("type") == "run_paused" and r.get("reason") != "awaiting_endorsement")
    ]
    if not rows:
        return ""
    out = [
        '<h3>Approvals</h3><table class="approvals"><thead><tr><th>what</th><th>plan</th><th>signer</th>'
        "<th>at</th><th>signature: verification</th></tr></thead><tbody>"
    ]
    for r in rows:
        kind = str(r.get("type"))
        verified = ""
        if kind == "run_paused":
            state = pause_text(r, plans)
        elif kind == "approval_rejected":
            state = "the person refused to approve this plan: the calls needing it did not run"
        else:
            # Checked here, from the record alone, as `pte audit verify` does (audit format §7).
            problem = approval_problem(r)
            verified = "false" if problem is not None else "true"
            key = _e(str(r.get("key_id") or "")[:16])
            if problem is not None:
                state = f'<b class="bad">does NOT verify</b>: {_e(problem)}'
            elif r.get("signature"):
                trusted = (
                    "a key the deployment trusted when it ran"
                    if r.get("signed")
                    else "a key the deployment did not check (it had no approval keys)"
                )
                state = f"Ed25519 signature verifies under key <code>{key}…</code>, {trusted}"
            else:
                state = "not signed (accepted only where no approval keys are configured)"
        out.append(
            f'<tr class="approval" data-kind="{_e(kind)}" data-signed="{_e(bool(r.get("signed")))}"'
            f' data-verified="{verified}">'
            f"<td>{_e(_WHAT.get(kind, kind))}</td><td><code>{_e(str(r.get('plan_hash'))[:16])}</code></td>"
            f"<td>{_untrusted(r['by']) if r.get('by') else '-'}</td><td>{_e(r.get('at', r.get('ts')))}</td>"
            f"<td>{state}</td></tr>"
        )
    out.append("</tbody></table>")
    return "".join(out)


def _endorsements(records: Sequence[Mapping[str, Any]], plans: Sequence[PlanView]) -> str:
    """Each endorsement a run asked for (the values, their source) and each decision on one."""
    rows = [
        r
        for r in records
        if r.get("type") in ("endorsement", "endorsement_rejected")
        or (r.get("type") == "run_paused" and r.get("reason") == "awaiting_endorsement")
    ]
    if not rows:
        return ""
    out = [
        '<h3>Endorsements</h3><table class="endorsements"><thead><tr><th>what</th><th>call</th>'
        "<th>values and their source</th><th>by</th><th>signature: verification</th></tr></thead><tbody>"
    ]
    for r in rows:
        kind = str(r.get("type"))
        verified = ""
        if kind == "run_paused":
            asked = r.get("endorsement") or {}
            call = f"{asked.get('step_id')}" + (
                f"[{asked['element']}]" if asked.get("element") is not None else ""
            )
            values = asked.get("values") or {}
            sources = asked.get("provenance") or {}
            shown = "".join(
                f"<div><code>{_e(asked.get('tool'))}.{_e(k)}</code> = {_untrusted(v)}"
                f"<br><small>{_e(sources.get(k, ''))}</small></div>"
                for k, v in values.items()
            )
            # What decided that the call runs, as the person saw it (docs/endorsement.md, #38).
            decided = [d for d in asked.get("decisions") or [] if isinstance(d, str)]
            shown += "".join(f'<div class="decision"><small>{_e(d)}</small></div>' for d in decided)
            by, state = (
                "-",
                f"{pause_text(r, plans)} (value hash <code>{_e(str(asked.get('value_hash'))[:16])}</code>)",
            )
        else:
            call = f"{r.get('step_id')}" + (f"[{r['element']}]" if r.get("element") is not None else "")
            shown = f"value hash <code>{_e(str(r.get('value_hash'))[:16])}…</code>"
            by = _untrusted(r.get("by", "-"))
            problem = endorsement_problem(r)
            verified = "false" if problem is not None else "true"
            if problem is not None:
                state = f'<b class="bad">does NOT verify</b>: {_e(problem)}'
            elif r.get("signature"):
                state = f"Ed25519 signature verifies under key <code>{_e(str(r.get('key_id'))[:16])}…</code>"
                state += "" if r.get("signed") else " (the deployment had no approval keys)"
            else:
                state = "not signed (accepted only where no approval keys are configured)"
            if kind == "endorsement_rejected":
                state = "rejected; " + state
        out.append(
            f'<tr class="endorsement" data-kind="{_e(kind)}" data-verified="{verified}">'
            f"<td>{_e('paused for an endorsement' if kind == 'run_paused' else _WHAT.get(kind, kind))}</td>"
            f"<td><code>{_e(call)}</code></td><td>{shown}</td><td>{by}</td>"
            f"<td>{state}</td></tr>"
        )
    out.append("</tbody></table>")
    return "".join(out)


def _replans(records: Sequence[Mapping[str, Any]]) -> str:
    """Replans after a failed step, and repairs: a rejected plan sent back to its planner once."""
    rows = [r for r in records if r.get("type") in ("replan", "repair")]
    if not rows:
        return ""
    out = [
        '<h3>Replans and repairs</h3><table class="replans"><thead><tr><th>kind</th><th>attempt</th>'
        "<th>failed step / rejected at</th><th>reason</th><th>kept</th></tr></thead><tbody>"
    ]
    for r in rows:
        if r.get("type") == "repair":
            out.append(
                f'<tr class="repair" data-reason="{_e(r.get("reason"))}"><td>repair of the '
                f"{_e(r.get('origin'))}'s plan</td><td>{_e(r.get('attempt'))}</td>"
                f"<td><code>{_e(r.get('path'))}</code></td>"
                f"<td><code>{_e(r.get('reason'))}</code> "
                f"{_decision(r.get('reason'), r.get('message', ''))}</td>"
                "<td>-</td></tr>"
            )
            continue
        error = r.get("error") or {}
        out.append(
            f'<tr class="replan"><td>replan</td><td>{_e(r.get("attempt"))}</td>'
            f"<td><code>{_e(r.get('failed_step'))}</code></td>"
            f"<td><code>{_e(error.get('kind'))}</code> {_untrusted(error.get('message', ''))}</td>"
            f"<td>{_e(', '.join(map(str, r.get('completed') or [])) or '-')}</td></tr>"
        )
    out.append("</tbody></table>")
    return "".join(out)


def _llm_calls(records: Sequence[Mapping[str, Any]]) -> str:
    rows = [r for r in records if r.get("type") == "llm_call"]
    if not rows:
        return ""
    out = [
        '<h3>LLM calls</h3><table class="llm"><thead><tr><th>role</th><th>model</th><th>tokens in / out</th>'
        "<th>duration</th><th>finish</th><th>exchange</th></tr></thead><tbody>"
    ]
    for r in rows:
        usage: Mapping[str, Any] = r["usage"] if isinstance(r.get("usage"), dict) else {}
        tokens_in = usage.get("prompt_tokens", usage.get("input_tokens", "-"))
        tokens_out = usage.get("completion_tokens", usage.get("output_tokens", "-"))
        exchange = "".join(
            f"<p><b>{_e(m.get('role'))}</b></p>{_untrusted(m.get('content', ''), block=True)}"
            for m in r.get("messages") or []
            if isinstance(m, dict)
        )
        answer = r.get("error") if r.get("error") else r.get("response")
        exchange += f"<p><b>answer</b></p>{_untrusted(answer if answer is not None else '', block=True)}"
        out.append(
            f'<tr class="llm-call" data-role="{_e(r.get("role"))}"><td>{_e(r.get("role"))}</td>'
            f"<td>{_e(r.get('model'))}</td><td>{_e(tokens_in)} / {_e(tokens_out)}</td>"
            f"<td>{_e(r.get('duration_ms', '-'))} ms</td><td>{_e(r.get('finish_reason'))}</td>"
            f"<td><details><summary>messages and answer</summary>{exchange}</details></td></tr>"
        )
    out.append("</tbody></table>")
    return "".join(out)


def _timeline(records: Sequence[Mapping[str, Any]], t0: datetime | None) -> str:
    out = [
        '<h3>Timeline</h3><table class="timeline"><thead><tr><th>seq</th><th>+ms</th><th>record</th>'
        "<th>about</th><th>duration</th></tr></thead><tbody>"
    ]
    longest = max(
        (float(r.get("duration_ms") or 0) for r in records if isinstance(r.get("duration_ms"), int | float)),
        default=0.0,
    )
    for r in records:
        at = _ts(r.get("ts"))
        offset = f"{(at - t0).total_seconds() * 1000:.1f}" if at and t0 else "?"
        about = r.get("step_id") or r.get("role") or r.get("reason") or r.get("status") or ""
        duration = r.get("duration_ms")
        bar = ""
        if isinstance(duration, int | float):
            width = 4 + int(196 * float(duration) / longest) if longest else 4
            bar = f'<span class="bar" style="width:{width}px"></span> {float(duration):.1f} ms'
        out.append(
            f'<tr data-type="{_e(r.get("type"))}"><td>{_e(r.get("seq"))}</td><td>{offset}</td>'
            f"<td>{_e(r.get('type'))}</td><td>{_e(about)}</td><td>{bar}</td></tr>"
        )
    out.append("</tbody></table>")
    return "".join(out)


def _banner(verdict: Verdict) -> str:
    """The verdict at the top of the page: the one `pte audit verify` gives, check by check."""
    report = verdict.report
    if verdict.ok:
        overall, text = "ok", f"verifies: {report.records} records, {report.runs} run(s)"
    elif verdict.status == "incomplete":
        overall, text = "incomplete", f"incomplete: {verdict.problem}"
    else:
        overall, text = "bad", f"DOES NOT VERIFY: {verdict.problem}"
    rows = "".join(
        f'<tr class="check" data-check="{_e(c.name)}" data-state="{_e(c.state)}"><th>{_e(c.name)}</th>'
        f"<td>{_badge(c.state.replace(' ', '-'), c.state)}</td><td>{_e(c.detail)}</td></tr>"
        for c in verdict.checks
    )
    return (
        f'<div id="verification" class="banner {overall}" data-verdict="{_e(verdict.status)}">'
        f'<p class="verdict"><b>Verdict:</b> {_e(text)}</p>'
        f'<table class="checks"><thead><tr><th>check</th><th>state</th><th>what it found</th></tr></thead>'
        f"<tbody>{rows}</tbody></table>"
        '<p class="meta">The checks <code>pte audit verify</code> makes, with the same deployment key and '
        "anchors. <i>not available</i>: the check was not made, for the reason given.</p>"
        f'<p class="meta">format {_e(report.format)} · log id <code>{_e(report.log_id or "-")}</code> · '
        f"head <code>{_e(report.last_hash or '-')}</code></p></div>"
    )


def render_report(
    log: str | os.PathLike[str],
    *,
    run_id: str | None = None,
    checkpoint: str | os.PathLike[str] | None = None,
    public_key: str | None = None,
    anchors: Any = None,
) -> str:
    """The HTML report of `log` (every run, or `run_id`), with the verdict `pte audit verify`
    gives: the chain, the schema, sealing, the deployment's `anchors` (`pte._audit.Anchors`,
    None when no deployment public key is at hand) and the checkpoint, if given."""
    from pte._audit import load_public_key

    if checkpoint is not None and public_key is None:
        raise ReportError("a checkpoint needs the public key to check it")
    key = load_public_key(public_key) if public_key is not None else None
    found = verdict(log, anchors=anchors, checkpoint=checkpoint, public_key=key)
    try:
        records = [r for _, r in iter_records(log, skip_partial_tail=True)]
    except AuditFormatError as exc:
        raise ReportError(f"cannot read {os.fspath(log)}: {exc}") from None
    runs: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        runs.setdefault(str(r.get("run_id")), []).append(r)
    if run_id is not None:
        if run_id not in runs:
            raise ReportError(f"no run {run_id!r} in {os.fspath(log)}")
        runs = {run_id: runs[run_id]}
    title = f"PTE audit report: {Path(log).name}" + (f" / {run_id}" if run_id else "")
    return _page(title, _banner(found), runs, stored_contents(records))


def render_store_report(store: Any, run_id: str, *, anchors: Any = None) -> str:
    """The HTML report of one run of a run store (`pte.stores`), with its verdict as stored."""
    records = store.records(run_id)
    if not records:
        raise ReportError(f"no run {run_id!r} in {store.describe()}")
    title = f"PTE audit report: {store.describe()} / {run_id}"
    found = stored_verdict(store, run_id, anchors=anchors)
    return _page(title, _banner(found), {run_id: records}, stored_contents(records))


def _page(
    title: str, banner: str, runs: Mapping[str, Sequence[Mapping[str, Any]]], contents: Mapping[str, Any]
) -> str:
    sections = "\n".join(_run_section(RunView.fold(rid, rs, contents)) for rid, rs in runs.items())
    return Template(_TEMPLATE.read_text(encoding="utf-8")).substitute(
        title=_e(title), banner=banner, runs=sections or "<p>No runs.</p>"
    )


def write_report(log: str | os.PathLike[str], out: str | os.PathLike[str], **kwargs: Any) -> Path:
    """Render the report of `log` to `out` (UTF-8); returns the path."""
    path = Path(out)
    path.write_text(render_report(log, **kwargs), encoding="utf-8")
    return path
