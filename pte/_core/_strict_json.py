"""One strict JSON loader for every input that carries authority or decisions.

Plans, policies, tool manifests, approvals and importer manifests are read with `loads`,
never with a bare `json.loads`, because Python's defaults accept three things that make one
document mean two things to two readers:

- duplicate keys (``{"deny": ["x"], "deny": []}``: Python keeps the last, other parsers the
  first, so a reviewer and the engine could read different rules);
- ``NaN``, ``Infinity`` and ``-Infinity``, which are not JSON and cannot be hashed canonically
  (nor a number like ``1e400`` that Python would read as infinity);
- unbounded nesting, which ends in a `RecursionError` deep inside the parser.

Each is refused with a `StrictJSONError` that says what and where.
"""

from __future__ import annotations

import json
import math
from typing import Any

from pte._core._errors import StrictJSONError

__all__ = ["DEFAULT_MAX_DEPTH", "loads"]

#: Deepest nesting of arrays and objects accepted by default (plans have their own, lower, limit).
DEFAULT_MAX_DEPTH = 128


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise StrictJSONError("duplicate_key", f"duplicate key {key!r} in an object")
        out[key] = value
    return out


def _constant(name: str) -> Any:
    raise StrictJSONError("constant", f"{name} is not valid JSON")


def _float(text: str) -> float:
    # 1e400 is valid JSON that Python reads as inf: the infinity the constants above refuse.
    value = float(text)
    if not math.isfinite(value):
        raise StrictJSONError("constant", f"the number {text[:40]} is beyond a double's range")
    return value


def _depth(value: Any) -> int:
    """Deepest nesting of containers in a parsed value (iterative: no recursion limit)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, level)
        stack.extend((child, level + 1) for child in children if isinstance(child, dict | list))
    return deepest


def loads(text: str | bytes, *, max_depth: int = DEFAULT_MAX_DEPTH) -> Any:
    """Parse one JSON document strictly; raise `StrictJSONError` on anything ambiguous.

    Refused: syntax errors and trailing text, duplicate keys at any depth, ``NaN`` and the
    infinities, and nesting deeper than `max_depth`.
    """
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise StrictJSONError("syntax", f"not UTF-8: {exc}") from None
    try:
        value = json.loads(text, object_pairs_hook=_pairs, parse_constant=_constant, parse_float=_float)
    except StrictJSONError:
        raise
    except json.JSONDecodeError as exc:
        raise StrictJSONError("syntax", f"{exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise StrictJSONError("too_deep", f"nesting is deeper than {max_depth} levels") from None
    except ValueError as exc:  # e.g. an integer literal longer than Python's digit limit
        raise StrictJSONError("syntax", str(exc)) from None
    if _depth(value) > max_depth:
        raise StrictJSONError("too_deep", f"nesting is deeper than {max_depth} levels")
    return value
