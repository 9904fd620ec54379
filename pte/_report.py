"""`pte audit report LOG -o run.html`: one self-contained HTML page an auditor reads.

The page holds, per run: the request; the plan as a DAG (inline SVG) with each step's tool,
effect and provenance; the timeline with durations; approvals with signer and signature
state; every policy decision with the data flows it judged; replans and their reasons; the
LLM calls with tokens; and, at the top, whether the chain (and a signed checkpoint, when one
is given) verifies. No script, no network, no external asset: a Content-Security-Policy of
``default-src 'none'`` forbids them, so the page shows the same thing offline forever.

Everything taken from the log is escaped (`html.escape`). Text that came from outside the
deployment (the request, LLM answers, tool outputs, error messages) is also *marked*:
shown in a ``.untrusted`` frame labelled as such, never as markup.
"""

from __future__ import annotations

import html
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from string import Template
from typing import Any

from pte._audit_verify import AuditFormatError, VerifyReport, approval_problem, iter_records, verify
from pte._errors import PTEError
from pte._fingerprint import expand_run_started, stored_contents

__all__ = ["ReportError", "render_report", "write_report"]

_TEMPLATE = Path(__file__).with_name("report_template.html")


class ReportError(PTEError):
    """The log cannot be reported on (unreadable, no such run)."""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


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


@dataclass
class _Step:
    id: str
    tool: str
    deps: list[str]
    effect: str = "read"
    provenance: str = "trusted"
    sinks: list[Any] | None = None
    requires_approval: bool = False
    status: str = "not run"
    duration_ms: float | None = None
    output: Any = None
    error: Any = None


def _refs(value: Any) -> list[str]:
    """The paths of every ``{"$ref": ...}`` inside `value`."""
    found: list[str] = []
    if isinstance(value, dict):
        if set(value) == {"$ref"} and isinstance(value["$ref"], str):
            return [value["$ref"]]
        for item in value.values():
            found += _refs(item)
    elif isinstance(value, list):
        for item in value:
            found += _refs(item)
    return found


def _plan_steps(plan: Mapping[str, Any], tools: Mapping[str, Mapping[str, Any]]) -> list[_Step]:
    steps = []
    for raw in plan.get("steps") or []:
        if not isinstance(raw, dict):
            continue
        deps = [ref.partition("/")[0] for ref in _refs(raw.get("args"))]
        deps += [d for d in raw.get("after") or [] if isinstance(d, str)]
        tool = tools.get(str(raw.get("tool")), {})
        steps.append(
            _Step(
                id=str(raw.get("id")),
                tool=str(raw.get("tool")),
                deps=list(dict.fromkeys(deps)),
                effect=str(tool.get("effect", "read")),
                provenance=str(tool.get("provenance", "trusted")),
                sinks=tool.get("sinks") or None,
                requires_approval=bool(tool.get("requires_approval", False)),
            )
        )
    return steps


def _dag_svg(steps: Sequence[_Step]) -> str:
    """The plan as a layered DAG: a column per dependency depth, arrows from inputs to users."""
    ids = {s.id for s in steps}
    depth: dict[str, int] = {}
    for step in steps:  # plan order is a topological order once compiled
        depth[step.id] = 1 + max((depth.get(d, 0) for d in step.deps if d in ids), default=-1)
    columns: dict[int, list[_Step]] = {}
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


def _flows(step: _Step, plan_step: Mapping[str, Any], steps: Mapping[str, _Step]) -> list[str]:
    """For each sink parameter of `step`: where its value comes from, with that source's provenance."""
    out = []
    args = plan_step.get("args") if isinstance(plan_step.get("args"), dict) else {}
    for sink in step.sinks or []:
        if not isinstance(sink, list) or len(sink) != 2:
            continue
        param, allowed = sink
        sources = []
        for ref in _refs((args or {}).get(param)):
            source = steps.get(ref.partition("/")[0])
            prov = source.provenance if source is not None else "unknown"
            sources.append(f"{_e(ref)} ← {_e(source.tool if source else '?')} ({_e(prov)})")
        if not sources:
            sources.append("a literal in the plan (request)")
        out.append(
            f"<li><code>{_e(step.tool)}.{_e(param)}</code> accepts {_e(', '.join(map(str, allowed)))}; "
            f"receives {'; '.join(sources)}</li>"
        )
    return out


def _run_section(run_id: str, records: Sequence[Mapping[str, Any]], contents: Mapping[str, Any]) -> str:
    started = expand_run_started(records[0], contents) if records else {}
    tools = {str(t.get("name")): t for t in started.get("tools") or [] if isinstance(t, dict)}
    t0 = _ts(records[0].get("ts")) if records else None
    finished = next((r for r in reversed(records) if r.get("type") == "run_finished"), None)
    status = str(finished.get("status")) if finished else "unfinished"
    out = [f'<section class="run" data-run-id="{_e(run_id)}" data-status="{_e(status)}">']
    out.append(f"<h2>Run <code>{_e(run_id)}</code> {_badge(status, status)}</h2>")
    if finished and finished.get("reason"):
        out.append(f'<p>Reason: <code class="reason">{_e(finished.get("reason"))}</code></p>')
    out.append('<h3>Request</h3><div class="request">')
    out.append(
        _untrusted(started.get("request") if started.get("request") is not None else "(none)", block=True)
    )
    out.append("</div>")
    out.append(
        f'<p class="meta">mode {_e(started.get("mode"))} · PTE {_e(started.get("pte_version", "?"))} · '
        f"{_e(started.get('format', 'format 1'))} · "
        f"model {_e((started.get('config') or {}).get('model', '-'))} · "
        f"{len(tools)} tools · catalogue <code>{_e(str(started.get('catalogue', 'inline'))[:16])}</code> · "
        f"policy <code>{_e(str(started.get('policy', '-'))[:16])}</code> · prompts "
        f"<code>{_e(str(started.get('prompts', '-'))[:16])}</code></p>"
    )

    # Plans, each with its steps' outcomes.
    plans = [r for r in records if r.get("type") == "plan_accepted"]
    finishes: dict[str, Mapping[str, Any]] = {}
    for r in records:
        if r.get("type") == "step_finished":
            finishes[f"{r.get('plan_hash', '')}:{r.get('step_id')}"] = r
            finishes.setdefault(str(r.get("step_id")), r)
    by_started: dict[str, list[Mapping[str, Any]]] = {}
    for r in records:
        if r.get("type") == "step_started":
            by_started.setdefault(str(r.get("plan_hash")), []).append(r)
    for index, accepted in enumerate(plans, start=1):
        plan = accepted.get("plan") if isinstance(accepted.get("plan"), dict) else {}
        steps = _plan_steps(plan or {}, tools)
        ran = {str(r.get("step_id")) for r in by_started.get(str(accepted.get("plan_hash")), [])}
        plan_records = _records_of_plan(records, accepted)
        for step in steps:
            end = next(
                (r for r in plan_records if r.get("type") == "step_finished" and r.get("step_id") == step.id),
                None,
            )
            if end is not None:
                step.status = str(end.get("status"))
                step.duration_ms = end.get("duration_ms")
                step.output = end.get("output")
                step.error = end.get("error")
            elif step.id in ran:
                step.status = "started"
        out.append(
            f"<h3>Plan {index} ({_e(accepted.get('origin'))}) "
            f"<code>{_e(str(accepted.get('plan_hash'))[:16])}</code></h3>"
        )
        out.append(f'<div class="dagbox">{_dag_svg(steps)}</div>')
        out.append(
            '<table class="steps"><thead><tr><th>step</th><th>tool</th><th>effect</th><th>provenance</th>'
            "<th>status</th><th>duration</th><th>output / error</th></tr></thead><tbody>"
        )
        for step in steps:
            detail = (
                _untrusted(step.error, block=True)
                if step.error is not None
                else (_untrusted(step.output, block=True) if step.output is not None else "")
            )
            labels = _badge(step.provenance, step.provenance)
            if step.sinks:
                labels += " " + _badge("sink", "sink")
            if step.requires_approval:
                labels += " " + _badge("approval", "needs approval")
            duration = (
                f"{float(step.duration_ms):.1f} ms" if isinstance(step.duration_ms, int | float) else "-"
            )
            out.append(
                f'<tr class="step" data-step-id="{_e(step.id)}" data-tool="{_e(step.tool)}" '
                f'data-effect="{_e(step.effect)}" data-provenance="{_e(step.provenance)}" '
                f'data-status="{_e(step.status)}"><td><code>{_e(step.id)}</code></td><td>{_e(step.tool)}</td>'
                f"<td>{_badge(step.effect, step.effect)}</td><td>{labels}</td>"
                f"<td>{_badge(step.status.replace(' ', '-'), step.status)}</td><td>{duration}</td>"
                f"<td>{detail}</td></tr>"
            )
        out.append("</tbody></table>")
        flows = []
        raw_steps = {str(s.get("id")): s for s in (plan or {}).get("steps") or [] if isinstance(s, dict)}
        by_id = {s.id: s for s in steps}
        for step in steps:
            flows += _flows(step, raw_steps.get(step.id, {}), by_id)
        if flows:
            out.append('<div class="policy accepted"><p>Policy: every sink receives data it accepts.</p><ul>')
            out += flows
            out.append("</ul></div>")

    out.append(_policy_decisions(records))
    out.append(_approvals(records))
    out.append(_replans(records))
    out.append(_llm_calls(records))
    out.append(_timeline(records, t0))
    if finished is not None:
        out.append('<h3>Outcome</h3><dl class="outcome">')
        out.append(f"<dt>status</dt><dd>{_e(finished.get('status'))}</dd>")
        for name in ("reason", "message", "result", "answer"):
            if finished.get(name) is not None:
                value = finished.get(name)
                out.append(f"<dt>{name}</dt><dd>{_untrusted(value, block=not isinstance(value, str))}</dd>")
        out.append("</dl>")
    out.append("</section>")
    return "\n".join(out)


def _records_of_plan(
    records: Sequence[Mapping[str, Any]], accepted: Mapping[str, Any]
) -> list[Mapping[str, Any]]:
    """The records after `accepted` up to the next plan_accepted."""
    start = next(i for i, r in enumerate(records) if r is accepted)
    out = []
    for r in records[start + 1 :]:
        if r.get("type") == "plan_accepted":
            break
        out.append(r)
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
            f"<td>{_untrusted(r.get('message', ''))}</td></tr>"
        )
    out.append("</tbody></table>")
    return "".join(out)


def _approvals(records: Sequence[Mapping[str, Any]]) -> str:
    rows = [r for r in records if r.get("type") in ("approval", "approval_rejected", "run_paused")]
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
            state = f"waiting for approval of {_e(', '.join(map(str, r.get('tools') or [])))}"
        elif kind == "approval_rejected":
            state = "rejected"
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
            f"<td>{_e(kind)}</td><td><code>{_e(str(r.get('plan_hash'))[:16])}</code></td>"
            f"<td>{_untrusted(r.get('by', '-'))}</td><td>{_e(r.get('at', r.get('ts')))}</td>"
            f"<td>{state}</td></tr>"
        )
    out.append("</tbody></table>")
    return "".join(out)


def _replans(records: Sequence[Mapping[str, Any]]) -> str:
    rows = [r for r in records if r.get("type") == "replan"]
    if not rows:
        return ""
    out = [
        '<h3>Replans</h3><table class="replans"><thead><tr><th>attempt</th><th>failed step</th>'
        "<th>reason</th><th>kept</th></tr></thead><tbody>"
    ]
    for r in rows:
        error = r.get("error") or {}
        out.append(
            f'<tr class="replan"><td>{_e(r.get("attempt"))}</td>'
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


def _banner(report: VerifyReport, checkpoint: Any) -> str:
    if report.ok:
        chain, text = "ok", f"chain intact: {report.records} records, every run sealed"
    elif report.intact:
        chain, text = "incomplete", f"chain intact but incomplete: {report.issue}"
    else:
        chain, text = "tampered", f"DOES NOT VERIFY: {report.issue}"
    if checkpoint is None:
        cp_state, cp_text = "none", "no checkpoint given: truncation of whole runs cannot be ruled out"
    elif checkpoint.ok:
        cp_state = "ok"
        cp_text = f"{checkpoint.checked} signed checkpoint(s) hold, covering {checkpoint.covered} records"
    else:
        cp_state, cp_text = "failed", f"CHECKPOINT FAILS: {checkpoint.problem}"
    overall = "ok" if chain == "ok" and cp_state in ("ok", "none") else "bad"
    return (
        f'<div id="verification" class="banner {overall}" data-chain="{chain}" data-checkpoint="{cp_state}">'
        f'<p class="chain"><b>Chain:</b> {_e(text)}</p>'
        f'<p class="checkpoint"><b>Checkpoint:</b> {_e(cp_text)}</p>'
        f'<p class="meta">format {_e(report.format)} · log id <code>{_e(report.log_id or "-")}</code> · '
        f"head <code>{_e(report.last_hash or '-')}</code></p></div>"
    )


def render_report(
    log: str | os.PathLike[str],
    *,
    run_id: str | None = None,
    checkpoint: str | os.PathLike[str] | None = None,
    public_key: str | None = None,
) -> str:
    """The HTML report of `log` (every run, or `run_id`), verified (with the checkpoint if given)."""
    from pte._checkpoint import load_public_key, verify_checkpoints

    cp_report = None
    if checkpoint is not None:
        if public_key is None:
            raise ReportError("a checkpoint needs the public key to check it")
        cp_report = verify_checkpoints(log, checkpoint, load_public_key(public_key))
        report = cp_report.log
    else:
        report = verify(log)
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
    contents = stored_contents(records)
    sections = "\n".join(_run_section(rid, rs, contents) for rid, rs in runs.items())
    title = f"PTE audit report: {Path(log).name}" + (f" / {run_id}" if run_id else "")
    return Template(_TEMPLATE.read_text(encoding="utf-8")).substitute(
        title=_e(title), banner=_banner(report, cp_report), runs=sections or "<p>No runs.</p>"
    )


def write_report(log: str | os.PathLike[str], out: str | os.PathLike[str], **kwargs: Any) -> Path:
    """Render the report of `log` to `out` (UTF-8); returns the path."""
    path = Path(out)
    path.write_text(render_report(log, **kwargs), encoding="utf-8")
    return path
