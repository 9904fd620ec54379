"""Data blocks within a budget: cut at record boundaries, never in the middle of a string.

A data block shown to a stage planner, a replanner or the finalizer is JSON (or plain text).
When it is larger than its budget it is cut where a reader can tell what is missing:

- a list keeps its first records that fit and ends with the string
  ``"… N more records not shown"``;
- an object keeps every key; the values that do not fit are cut the same way (small
  values are placed first, so one large field does not hide the others);
- a string is shown whole or replaced by ``"[text of N characters not shown]"``: a model
  never sees half an IBAN or half a sentence that reads as a whole one;
- plain text (a block whose value is a string) is cut after its last whole line that fits,
  with ``… N more lines not shown``.

The result is always valid JSON of the same shape, so a reference path a planner reads off
a shown record is the path of that record in the real value (records are dropped only at
the end of a list, never in the middle).
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["DEFAULT_DATA_BUDGET", "LEGACY_DATA_CHARS", "fit_json", "fit_text", "render_budgeted"]

#: Characters a data block may hold by default (four times the old clip).
DEFAULT_DATA_BUDGET = 16_000
#: The character clip of logs recorded before the budget existed (``data_budget=None``).
LEGACY_DATA_CHARS = 4000
#: Room kept for a "N more records not shown" marker.
_MARKER_ROOM = 40


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def _more(n: int) -> str:
    return f"… {n} more record{'s' if n != 1 else ''} not shown"


def _hidden_text(text: str) -> str:
    return f"[text of {len(text)} characters not shown]"


def fit_json(value: Any, budget: int) -> Any:
    """`value` cut to serialise in about `budget` characters (see the module docstring)."""
    text_len = len(_dumps(value))
    if text_len <= budget:
        return value
    return _fit(value, budget)


def _fit(value: Any, budget: int) -> Any:
    if isinstance(value, list):
        return _fit_list(value, budget)
    if isinstance(value, dict):
        return _fit_dict(value, budget)
    if isinstance(value, str):
        return value if len(_dumps(value)) <= budget else _hidden_text(value)
    return value  # a number, boolean or null: always short


def _fit_list(items: list[Any], budget: int) -> list[Any]:
    out: list[Any] = []
    used = 2  # the brackets
    room = max(budget - _MARKER_ROOM, 0)
    for index, item in enumerate(items):
        size = len(_dumps(item)) + 2  # ", "
        if used + size <= room:
            out.append(item)
            used += size
            continue
        left = room - used
        if not out and isinstance(item, dict | list) and left > _MARKER_ROOM:
            # The first record alone is too large: show it cut rather than nothing at all.
            out.append(_fit(item, left))
            index += 1
        remaining = len(items) - index
        if remaining:
            out.append(_more(remaining))
        return out
    return out


def _fit_dict(record: dict[str, Any], budget: int) -> dict[str, Any]:
    sizes = {key: len(_dumps(value)) for key, value in record.items()}
    used = 2 + sum(len(_dumps(key)) + 4 for key in record)  # braces, keys, ": " and ", "
    fitted: dict[str, Any] = {}
    # Smallest values first: the identifiers and dates a planner needs survive a large body.
    order = sorted(record, key=lambda key: sizes[key])
    for position, key in enumerate(order):
        left = budget - used
        if sizes[key] <= left:
            fitted[key] = record[key]
            used += sizes[key]
            continue
        # Share what is left among this value and the (larger) ones after it.
        share = max(left // (len(order) - position), 0)
        fitted[key] = _fit(record[key], share)
        used += len(_dumps(fitted[key]))
    return {key: fitted[key] for key in record}


def fit_text(text: str, budget: int) -> str:
    """Plain text cut after its last whole line within `budget` (with how many lines are left)."""
    if len(text) <= budget:
        return text
    lines = text.split("\n")
    kept: list[str] = []
    used = 0
    for line in lines:
        if used + len(line) + 1 > budget - _MARKER_ROOM:
            break
        kept.append(line)
        used += len(line) + 1
    rest = len(lines) - len(kept)
    if not kept:
        return _hidden_text(text)
    return "\n".join(kept) + f"\n… {rest} more line{'s' if rest != 1 else ''} not shown"


def render_budgeted(value: Any, budget: int | None) -> str:
    """The text of a data block holding `value`: JSON (or the string itself) within `budget`.

    ``budget=None`` is the old rendering (clipped at `LEGACY_DATA_CHARS` characters,
    wherever that falls): what logs recorded before the budget existed show, so that their
    replay builds the same prompts.
    """
    text = value if isinstance(value, str) else _dumps(value)
    if budget is None:
        if len(text) > LEGACY_DATA_CHARS:
            text = text[:LEGACY_DATA_CHARS] + f"… [{len(text) - LEGACY_DATA_CHARS} more characters clipped]"
        return text
    if len(text) <= budget:
        return text
    if isinstance(value, str):
        return fit_text(value, budget)
    return _dumps(_fit(value, budget))
