"""Human-readable rendering of audit records (`pte audit show`).

Everything in a record may come from untrusted text (a tool's output, a model's answer), so
every rendered line goes through `visible`: control characters (C0, DEL, C1, which carry
ESC/CSI/OSC sequences that move the cursor, retitle or recolour the terminal, or hide text),
bidirectional overrides and isolates (which reorder what the reader sees) and invisible
format characters are shown as escapes (``\\x1b``, ``\\u202e``) instead of being obeyed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from pte._audit._scan import _COMMON_FIELDS
from pte._core import canonical_json

# ---------------------------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------------------------

_ELIDE = 60

# C0 controls, DEL and C1 controls; ALM, LRM/RLM; bidi embeddings/overrides (LRE..RLO) and
# isolates (LRI..PDI); zero-width and other invisible format characters, line/paragraph
# separators, the BOM and interlinear annotation characters.
_INVISIBLE = re.compile(
    r"[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\ufff9-\ufffb]"
)
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def visible(text: str) -> str:
    """`text` with every control, bidi and invisible format character shown as an escape."""
    return _INVISIBLE.sub(_escape, text)


def _short(value: Any, limit: int = _ELIDE) -> str:
    """One-line, length-limited text of a value (strings unquoted)."""
    text = visible(value if isinstance(value, str) else _json_text(value))
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
    if kind == "run_paused" and get("reason") == "awaiting_endorsement":
        asked = get("endorsement")
        asked = asked if isinstance(asked, Mapping) else {}
        where = f"{asked.get('step_id')}" + (
            f"[{asked.get('element')}]" if asked.get("element") is not None else ""
        )
        return (
            f"awaiting endorsement at {where} ({_short(asked.get('tool'))}) of {_short(asked.get('values'))} "
            f"until {_short(get('expires_at'))}"
        )
    if kind in ("endorsement", "endorsement_rejected"):
        where = f"{get('step_id')}" + (f"[{get('element')}]" if get("element") is not None else "")
        signed = "signed" if get("signed") else "unsigned"
        value = _hash_prefix(get("value_hash"))
        return f"{get('decision')} at {where} value {value} by {_short(get('by'))} {signed}"
    if kind == "run_paused":
        return (
            f"awaiting approval of plan {_hash_prefix(get('plan_hash'))} ({_ids(get('tools'))}) "
            f"until {_short(get('expires_at'))}"
        )
    if kind == "approval_rejected":
        note = f": {_short(get('note'))}" if get("note") else ""
        by, at = _short(get("by")), _short(get("at"))
        return f"plan {_hash_prefix(get('plan_hash'))} rejected by {by} at {at}{note}"
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
    if kind == "repair":  # pte._run._repair
        return (
            f"attempt {get('attempt')}: the {get('origin')}'s plan sent back ({get('reason')} at "
            f"{get('path')}: {_short(get('message'), 80)})"
        )
    # pte._plan._control / pte._run._stages
    if kind == "condition":
        tail = _error_text(get("error")) if get("error") else _short(get("values"))
        return f"{get('step_id')} {get('kind')} {get('outcome')} {tail}"
    if kind == "for_each":
        tail = f" {_error_text(get('error'))}" if get("error") else ""
        return f"{get('step_id')} {get('tool')} items={get('items')}{tail}"
    if kind == "stage":
        return f"stage {get('stage')} values={_short(get('labels'))}"
    if kind == "run_finished":
        status = get("status")
        head = (
            f"{status}({get('reason')})" if status not in ("succeeded", "condition_not_met") else str(status)
        )
        tail = f" steps={get('steps_run')} llm_calls={get('llm_calls')}"
        if status == "succeeded":
            return head + tail + (f" answer={_short(get('answer'))}" if get("answer") is not None else "")
        if status == "condition_not_met":
            return head + tail + f": {_short(get('message'))}"
        return head + tail + (f": {_short(get('message'))}" if get("message") else "")
    extra = {k: v for k, v in record.items() if k not in _COMMON_FIELDS}
    return _short(extra)


def render_record(record: Mapping[str, Any]) -> str:
    """One timeline line for `record` (see `render_timeline`); safe to print to a terminal."""
    ts = record.get("ts")
    when = ts[11:23] if isinstance(ts, str) and len(ts) >= 23 and ts[10] == "T" else str(ts)
    seq = record.get("seq")
    return visible(f"{seq!s:>6}  {when:<12}  {record.get('type')!s:<14} {_summary(record)}")


def iter_timeline(records: Iterable[Mapping[str, Any]]) -> Iterator[str]:
    """`render_record` for each record, lazily: memory stays bounded by the largest record."""
    for record in records:
        yield render_record(record)


def render_timeline(records: Iterable[Mapping[str, Any]]) -> str:
    """A human-readable timeline (``pte audit show``): one line per record.

    ``seq  time  type  summary``, e.g. ``3  02:30:31.123  step_finished  inv
    list_overdue_invoices ok 3.2 ms -> {...}``; long values are elided with "…". Never
    fails on malformed records: missing fields show as None. Control characters and bidi
    overrides from the records are shown escaped (see `visible`), never sent raw.
    """
    return "\n".join(iter_timeline(records))
