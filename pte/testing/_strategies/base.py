"""Small building blocks of the plan strategies: JSON aliases, plain values, cheap draws, layouts.

Shared by every generator in this package: plain JSON without references, deep copies of
schema views, ``$ref`` objects, percentage and subset draws, fresh step ids, and the JSON
text layouts a planner might use.
"""

from __future__ import annotations

import functools
import itertools
import json
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from hypothesis import strategies as st
from hypothesis.strategies import DrawFn, SearchStrategy

from pte._plan import Reference

Json = Any
_T = TypeVar("_T")
Doc = dict[str, Any]
Tokens = tuple[str, ...]

# --- small building blocks ----------------------------------------------------------------------

#: Text that survives a trip through UTF-8 (no lone surrogates).
_UTF8 = st.characters(codec="utf-8")
_TEXT = st.text(alphabet=_UTF8, max_size=12)
_ASCII = st.characters(codec="ascii")
#: Object keys for generated values: never "$ref", which would make the object a reference.
_KEYS = st.one_of(st.sampled_from(["a", "b", "amount", "EUR", "x/y", "t~1", ""]), _TEXT).map(
    lambda k: "ref" if k == "$ref" else k
)


_INTS = st.integers(-(2**53 - 1), 2**53 - 1)
_FLOATS = st.floats(allow_nan=False, allow_infinity=False)
_SIZES = st.integers(0, 3)


def _draw_plain(draw: DrawFn, budget: int) -> Json:
    """A small JSON value without references (keys are never ``$ref``); `budget` bounds nesting."""
    kind = draw(_below(7 if budget > 0 else 5))
    if kind == 0:
        return None
    if kind == 1:
        return draw(st.booleans())
    if kind == 2:
        return draw(_INTS)
    if kind == 3:
        return draw(_FLOATS)
    if kind == 4:
        return draw(_TEXT)
    size = draw(_SIZES)
    if kind == 5:
        return [_draw_plain(draw, budget - 1) for _ in range(size)]
    return {draw(_KEYS): _draw_plain(draw, budget - 1) for _ in range(size)}


@functools.cache
def _plain_json(depth: int = 2) -> SearchStrategy[Json]:
    """Small JSON values without references (keys are never ``$ref``)."""

    @st.composite
    def values(draw: DrawFn) -> Json:
        return _draw_plain(draw, depth)

    return values()


def _copy(value: Json) -> Json:
    """A deep copy of a JSON value (plain dicts and lists, never a view into a schema)."""
    return json.loads(json.dumps(value))


def _thaw(value: Any) -> Any:
    """A schema as plain dicts and lists (the registry keeps read-only mapping views)."""
    if isinstance(value, Mapping):
        return {k: _thaw(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_thaw(v) for v in value]
    return value


def _ref(step: str, tokens: Tokens = ()) -> dict[str, str]:
    return {"$ref": str(Reference(step, tokens))}


_PERCENT = st.integers(0, 99)


def _percent(draw: DrawFn, chance: int) -> bool:
    return draw(_PERCENT) < chance


@functools.cache
def _below(n: int) -> SearchStrategy[int]:
    return st.integers(0, n - 1)


def _choice(draw: DrawFn, options: Sequence[_T]) -> _T:
    """One of `options` (shrinking towards the first); cheaper than a fresh `sampled_from`."""
    if len(options) == 1:
        return options[0]
    return options[draw(_below(len(options)))]


def _subset(draw: DrawFn, options: Sequence[_T]) -> list[_T]:
    """Some of `options`, in order, in a single draw (shrinking towards none)."""
    if not options:
        return []
    mask = draw(_below(1 << len(options))) if len(options) <= 16 else (1 << len(options)) - 1
    return [o for i, o in enumerate(options) if mask >> i & 1]


def _fresh(base: str, taken: Mapping[str, Any] | set[str]) -> str:
    """`base` with a suffix that makes it a name not in `taken` (and still a valid step id)."""
    for n in itertools.count(2):
        name = f"{base[:28]}_{n}"
        if name not in taken:
            return name
    raise AssertionError("unreachable")


# --- serialising ----------------------------------------------------------------------------------


def _serialise(draw: DrawFn, doc: Json, *, allow_nan: bool = False) -> str:
    """JSON text for `doc` in one of the layouts a planner might use."""
    indent = draw(st.sampled_from([None, None, 2, 1, "\t"]))
    text = json.dumps(
        doc,
        indent=indent,
        ensure_ascii=draw(st.booleans()),
        sort_keys=draw(st.booleans()),
        allow_nan=allow_nan,
        separators=(",", ":") if indent is None and _percent(draw, 50) else None,
    )
    if _percent(draw, 15):
        text = (
            draw(st.sampled_from([" ", "\n", "\r\n", "\t"])) + text + draw(st.sampled_from(["", "\n", "  "]))
        )
    return text
