"""Plans over the compiler's limits: ``plan_too_large``, and `_fits` for every other reason."""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.strategies import DrawFn

from pte._core import count_values
from pte._plan import Limits
from pte.testing._strategies.base import (
    _KEYS,
    Doc,
    Json,
    _copy,
    _percent,
    _plain_json,
    _serialise,
)
from pte.testing._strategies.catalogue import (
    _Catalogue,
)
from pte.testing._strategies.valid import _Drawn


def _depth(value: Json) -> int:
    """Container nesting depth (the compiler's measure: the document itself is depth 1)."""
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


def _fits(text: str, limits: Limits, doc: Json = None) -> bool:
    if len(text.encode("utf-8", "surrogatepass")) > limits.max_bytes:
        return False
    if limits.max_values is not None and count_values(text) > limits.max_values:
        return False
    if isinstance(doc, dict):
        steps = doc.get("steps")
        if isinstance(steps, list) and len(steps) > limits.max_steps:
            return False
        return _depth(doc) <= limits.max_depth
    return True


# plan_too_large ----------------------------------------------------------------------------------


def _nest(draw: DrawFn, value: Json, levels: int) -> Json:
    for _ in range(levels):
        value = [value] if _percent(draw, 50) else {"nested": value}
    return value


def _mutate_plan_too_large(
    draw: DrawFn, catalogue: _Catalogue, drawn: _Drawn, limits: Limits
) -> str | Doc | None:
    doc = drawn.doc
    kinds = ["depth", "depth_result"]
    if limits.max_steps <= 5000:
        kinds.append("steps")
    if limits.max_bytes <= 5_000_000:
        kinds += ["bytes_whitespace", "bytes_string"]
    kind = draw(st.sampled_from(kinds))
    if kind == "steps":
        steps = doc["steps"]
        while len(steps) <= limits.max_steps:
            clone = _copy(steps[len(steps) % len(drawn.tools)])
            clone["id"] = f"s{len(steps)}"
            steps.append(clone)
        return doc
    if kind == "bytes_whitespace":
        text = _serialise(draw, doc)
        size = len(text.encode("utf-8"))
        if size > limits.max_bytes:
            return text
        return text + " " * (limits.max_bytes - size + 1)
    if kind == "bytes_string":
        step = draw(st.sampled_from(doc["steps"]))
        step["args"]["padding"] = "x" * (limits.max_bytes + 1)
        return doc
    if kind == "depth":
        step = draw(st.sampled_from(doc["steps"]))
        # args sit at depth 4 (document > steps > step > args): push a value below max_depth.
        step["args"][draw(_KEYS)] = _nest(draw, draw(_plain_json(1)), limits.max_depth - 3)
        return doc
    doc["result"] = _nest(draw, doc.get("result", 1), limits.max_depth)
    return doc
