"""Human-readable rendering of audit records (`pte audit show`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pte.audit_verify import _COMMON_FIELDS
from pte.canonical import canonical_json

# ---------------------------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------------------------

_ELIDE = 60


def _short(value: Any, limit: int = _ELIDE) -> str:
    """One-line, length-limited text of a value (strings unquoted)."""
    text = value if isinstance(value, str) else _json_text(value)
    text = text.replace("\r", "\\r").replace("\n", "\\n").replace("\t", " ")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _json_text(value: Any) -> str:
    try:
        return canonical_json(value)
    except (TypeError, ValueError):
        return repr(value)


def _ms(value: Any) -> str:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return "? ms"
    return f"{value / 1000:.2f} s" if value >= 1000 else f"{value:.1f} ms"


def _hash_prefix(value: Any) -> str:
    return value[:12] + "…" if isinstance(value, str) and len(value) > 12 else str(value)


def _ids(value: Any) -> str:
    if not isinstance(value, list):
        return "-"
    return _short(",".join(str(v) for v in value), 40) if value else "-"


def _error_text(error: Any) -> str:
    if isinstance(error, Mapping):
        return _short(f"{error.get('kind', '?')}: {error.get('message', '')}")
    return _short(error)


def _summary(record: Mapping[str, Any]) -> str:
    kind = record.get("type")
    get = record.get
    if kind == "run_started":
        tools = get("tools")
        count = len(tools) if isinstance(tools, list) else "?"
        parts = [f"run {get('run_id')}", f"mode={get('mode')}", f"tools={count}"]
        if get("resumes"):
            parts.append(f"resumes={get('resumes')}")
        if get("request") is not None:
            parts.append(f"request={_short(get('request'))}")
        return " ".join(parts)
    if kind == "run_resumed":
        return f"resumed after {get('after_records')} re-driven record(s)"
    if kind == "llm_call":
        head = f"{get('role')} {get('model')} attempts={get('attempts')} {_ms(get('duration_ms'))}"
        if get("error") is not None:
            return f"{head} error: {_short(get('error'))}"
        usage = get("usage")
        tokens = usage.get("total_tokens") if isinstance(usage, Mapping) else None
        return f"{head} {get('finish_reason')}" + (f" tokens={tokens}" if tokens is not None else "")
    if kind == "plan_accepted":
        order = get("order")
        steps = len(order) if isinstance(order, list) else "?"
        return f"{get('origin')} plan {_hash_prefix(get('plan_hash'))} steps={steps} order={_ids(order)}"
    if kind == "plan_rejected":
        return f"{get('reason')} at {get('path')}: {_short(get('message'))}"
    if kind == "approval":
        signed = "signed" if get("signed") else "unsigned"
        return f"plan {_hash_prefix(get('plan_hash'))} by {get('by')} at {get('at')} {signed}"
    if kind == "step_started":
        return f"{get('step_id')} {get('tool')} {get('effect')} {_short(get('args'))}"
    if kind == "step_finished":
        head = f"{get('step_id')} {get('tool')} {get('status')} {_ms(get('duration_ms'))}"
        if get("status") == "ok":
            return f"{head} -> {_short(get('output'), 40)}"
        return f"{head} {_error_text(get('error'))}"
    if kind == "replan":
        return (
            f"attempt {get('attempt')} after {get('failed_step')} failed ({_error_text(get('error'))}) "
            f"completed={_ids(get('completed'))}"
        )
    if kind == "run_finished":
        status = get("status")
        head = f"{status}({get('reason')})" if status != "succeeded" else str(status)
        tail = f" steps={get('steps_run')} llm_calls={get('llm_calls')}"
        if status == "succeeded":
            return head + tail + (f" answer={_short(get('answer'))}" if get("answer") is not None else "")
        return head + tail + (f": {_short(get('message'))}" if get("message") else "")
    extra = {k: v for k, v in record.items() if k not in _COMMON_FIELDS}
    return _short(extra)


def render_timeline(records: Iterable[Mapping[str, Any]]) -> str:
    """A human-readable timeline (``pte audit show``): one line per record.

    ``seq  time  type  summary``, e.g. ``3  02:30:31.123  step_finished  inv
    list_overdue_invoices ok 3.2 ms -> {...}``; long values are elided with "…". Never
    fails on malformed records: missing fields show as None.
    """
    lines = []
    for record in records:
        ts = record.get("ts")
        when = ts[11:23] if isinstance(ts, str) and len(ts) >= 23 and ts[10] == "T" else str(ts)
        seq = record.get("seq")
        lines.append(f"{seq!s:>6}  {when:<12}  {record.get('type')!s:<14} {_summary(record)}")
    return "\n".join(lines)
