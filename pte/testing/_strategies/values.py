"""Values from a JSON Schema: arguments a tool accepts, some of them references to earlier steps.

Numbers within bounds and multiples, strings matching patterns (fast paths for the
patterns of ids, codes and decimals), formats, arrays, objects, ``anyOf``/``oneOf``;
with a `_Wiring`, a position may instead be a reference whose output type fits it.
"""

from __future__ import annotations

import functools
import json
import math
import re
import string
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jsonschema
from hypothesis import reject
from hypothesis import strategies as st
from hypothesis.strategies import DrawFn, SearchStrategy

from pte._catalogue import schema_types as types
from pte._core import DECIMAL_STRING_PATTERN
from pte._plan import STEP_ID_RE
from pte.testing._strategies.base import (
    _ASCII,
    _KEYS,
    _PERCENT,
    _SIZES,
    _UTF8,
    Json,
    _choice,
    _copy,
    _draw_plain,
    _percent,
    _ref,
    _subset,
    _thaw,
)
from pte.testing._strategies.catalogue import (
    _FORMATS,
    _Catalogue,
    _Tool,
    _Unsupported,
)

# --- values from a JSON Schema --------------------------------------------------------------------


@dataclass
class _Wiring:
    """What a value being generated may refer to: steps that run before its step."""

    catalogue: _Catalogue
    earlier: list[tuple[str, _Tool]]
    chance: int = 30


_MAX_DEPTH = 8


def _bounds(schema: Mapping[str, Any]) -> tuple[float | None, float | None, bool, bool]:
    """(low, high, low is exclusive, high is exclusive) from the numeric keywords."""
    low, high = schema.get("minimum"), schema.get("maximum")
    low_open = high_open = False
    if "exclusiveMinimum" in schema and (low is None or schema["exclusiveMinimum"] >= low):
        low, low_open = schema["exclusiveMinimum"], True
    if "exclusiveMaximum" in schema and (high is None or schema["exclusiveMaximum"] <= high):
        high, high_open = schema["exclusiveMaximum"], True
    return low, high, low_open, high_open


def _integer_range(schema: Mapping[str, Any]) -> tuple[int | None, int | None]:
    low, high, low_open, high_open = _bounds(schema)
    lo = None if low is None else (math.floor(low) + 1 if low_open else math.ceil(low))
    hi = None if high is None else (math.ceil(high) - 1 if high_open else math.floor(high))
    return lo, hi


def _draw_integer(draw: DrawFn, schema: Mapping[str, Any]) -> int:
    lo, hi = _integer_range(schema)
    # A plan's numbers are doubles (RFC 8785): integers a double holds exactly.
    lo = -(2**53 - 1) if lo is None else max(lo, -(2**53 - 1))
    hi = 2**53 - 1 if hi is None else min(hi, 2**53 - 1)
    step = int(schema.get("multipleOf", 1))
    if step != 1:
        k_lo = None if lo is None else -(-lo // step)
        k_hi = None if hi is None else hi // step
        if k_lo is not None and k_hi is not None and k_lo > k_hi:
            reject()  # no multiple of `step` in range: an unsatisfiable schema
        return int(draw(st.integers(k_lo, k_hi))) * step
    if lo is not None and hi is not None and lo > hi:
        reject()  # an empty range: an unsatisfiable schema
    return draw(st.integers(lo, hi))


def _draw_number(draw: DrawFn, schema: Mapping[str, Any]) -> float | int:
    lo, hi = _integer_range(schema)
    has_integers = lo is None or hi is None or lo <= hi
    if "multipleOf" in schema or (has_integers and _percent(draw, 30)):
        return _draw_integer(draw, schema)
    low, high, low_open, high_open = _bounds(schema)
    return draw(
        st.floats(
            min_value=low,
            max_value=high,
            exclude_min=low_open and low is not None,
            exclude_max=high_open and high is not None,
            allow_nan=False,
            allow_infinity=False,
        )
    )


#: The pattern pydantic gives `Decimal` inputs; drawn as decimal numerals directly.
_DECIMAL_PATTERN = DECIMAL_STRING_PATTERN
_ESCAPES = {"d": string.digits, "w": string.ascii_letters + string.digits + "_", "s": " \t\n\r\f\v"}
_PRINTABLE = "".join(chr(c) for c in range(32, 127)) + "\t\n"


def _decimal_numeral(parts: tuple[str, int, int]) -> str:
    sign, number, places = parts
    digits = str(number).rjust(places + 1, "0")
    return sign + (
        digits[: len(digits) - places] + "." + digits[len(digits) - places :] if places else digits
    )


def _class_chars(body: str) -> str | None:
    """The characters of a regex character class body (without brackets), ASCII only."""
    negate = body.startswith("^")
    body = body[1:] if negate else body
    chars: set[str] = set()
    i = 0
    while i < len(body):
        c = body[i]
        if c == "\\":
            if i + 1 >= len(body):
                return None
            e = body[i + 1]
            if e in _ESCAPES:
                chars.update(_ESCAPES[e])
            elif e.isalnum():
                return None
            else:
                chars.add(e)
            i += 2
            continue
        if i + 2 < len(body) and body[i + 1] == "-":
            end = body[i + 2]
            if end == "\\" or ord(end) < ord(c):
                return None
            chars.update(chr(x) for x in range(ord(c), ord(end) + 1))
            i += 3
            continue
        if c in "[]":
            return None
        chars.add(c)
        i += 1
    if negate:
        chars = set(_PRINTABLE) - chars
    return "".join(sorted(chars)) or None


_ATOM = re.compile(r"\[((?:\\.|[^\]\\])+)\]|\\(.)|([^\\\[\](){}?*+|^$.])")
_QUANT = re.compile(r"\{(\d+)(?:(,)(\d*))?\}|([?*+])")


def _simple_pattern(pattern: str) -> SearchStrategy[str] | None:
    """A fast strategy for anchored sequences of literals and classes with quantifiers, else None.

    One text draw per quantified atom instead of one draw per character: the patterns of
    ids and codes (``^INV-[0-9]{4,8}$``) are drawn many times per plan.
    """
    body = pattern
    if body.startswith("^"):
        body = body[1:]
    if body.endswith("$") and not body.endswith("\\$"):
        body = body[:-1]
    parts: list[SearchStrategy[str]] = []
    i = 0
    while i < len(body):
        atom = _ATOM.match(body, i)
        if atom is None:
            return None
        if atom.group(1) is not None:
            chars = _class_chars(atom.group(1))
        elif atom.group(2) is not None:
            e = atom.group(2)
            chars = _ESCAPES.get(e) or (None if e.isalnum() else e)
        else:
            chars = atom.group(3)
        if not chars:
            return None
        i = atom.end()
        low, high = 1, 1
        quant = _QUANT.match(body, i)
        if quant is not None:
            i = quant.end()
            if quant.group(4):
                low, high = {"?": (0, 1), "*": (0, 8), "+": (1, 9)}[quant.group(4)]
            else:
                low = int(quant.group(1))
                high = low if not quant.group(2) else (int(quant.group(3)) if quant.group(3) else low + 8)
        parts.append(st.text(alphabet=st.sampled_from(chars), min_size=low, max_size=high))
    if not parts:
        return st.just("")
    return st.tuples(*parts).map("".join)


@functools.cache
def _pattern_strings(pattern: str) -> SearchStrategy[str]:
    """Strings that fully match `pattern`, from its ASCII subset.

    ASCII only: Python's `re` and the Rust regex engine of jsonschema-rs agree on it (they
    differ on what \\d, \\w and \\s match beyond ASCII, and on ``$`` before a newline).
    """
    compiled = re.compile(pattern)
    if pattern == _DECIMAL_PATTERN:
        fast: SearchStrategy[str] | None = st.tuples(
            st.sampled_from(["", "-", "+"]), st.integers(0, 10**15), st.integers(0, 6)
        ).map(_decimal_numeral)
    else:
        fast = _simple_pattern(pattern)
    if fast is None:
        return st.from_regex(pattern, fullmatch=True, alphabet=_ASCII)
    return fast.filter(lambda text: compiled.fullmatch(text) is not None)


_STEP_IDS = st.one_of(
    st.sampled_from(
        ["a", "b", "c", "inv", "total", "mail", "step_1", "x" * 64, "family_reunion_emails_oldest_first"]
    ),
    _pattern_strings(STEP_ID_RE.pattern),
)


def _draw_string(draw: DrawFn, schema: Mapping[str, Any]) -> str:
    lo = int(schema.get("minLength", 0))
    hi = schema.get("maxLength")
    if "pattern" in schema:
        pattern = schema["pattern"]
        return draw(_sized(_pattern_strings(pattern), lo, hi))
    if "format" in schema:
        return draw(_FORMATS[schema["format"]])
    hi = lo + 12 if hi is None else min(int(hi), lo + 12)
    return draw(_texts(lo, hi))


@functools.cache
def _texts(lo: int, hi: int) -> SearchStrategy[str]:
    return st.text(alphabet=_UTF8, min_size=lo, max_size=hi)


@functools.cache
def _sized(strategy: SearchStrategy[str], lo: int, hi: int | None) -> SearchStrategy[str]:
    if lo == 0 and hi is None:
        return strategy
    return strategy.filter(lambda s: lo <= len(s) and (hi is None or len(s) <= hi))


def _draw_value(
    draw: DrawFn, schema: types.Schema, root: Mapping[str, Any], wiring: _Wiring, depth: int
) -> Json:
    """A JSON value that `schema` accepts; with `wiring`, maybe a reference whose type fits it."""
    if depth > 2 * _MAX_DEPTH:
        reject()  # a recursive schema that demands ever deeper values
    if wiring.earlier and depth > 0:
        candidates = [
            (step_id, tokens)
            for step_id, producer in wiring.earlier
            for tokens in wiring.catalogue.wiring(producer, schema, root)[0]
        ]
        if candidates:
            roll = draw(_PERCENT)
            if roll < wiring.chance:
                step_id, tokens = candidates[roll % len(candidates)]
                return _ref(step_id, tokens)
    resolved = types.deref(schema, root)
    if resolved is True:
        return _draw_plain(draw, 2)
    assert isinstance(resolved, Mapping), resolved
    if "const" in resolved:
        return _copy(resolved["const"])
    if "enum" in resolved:
        return _copy(_choice(draw, list(resolved["enum"])))
    for key in ("anyOf", "oneOf"):
        if key in resolved:
            branches = list(resolved[key])
            if depth > _MAX_DEPTH:  # prefer a branch that ends the recursion
                simple = [
                    b
                    for b in branches
                    if isinstance(b, Mapping)
                    and "$ref" not in b
                    and types.types_of(b, root) <= {"null", "string"}
                ]
                branches = simple or branches
            value = _draw_value(draw, _choice(draw, branches), root, wiring, depth)
            if key == "oneOf" and not _references_in(value) and _matching(value, branches, root) != 1:
                reject()  # valid under several branches: not valid under oneOf
            return value
    declared = resolved.get("type")
    if declared is None:
        return _draw_plain(draw, 2)
    kind = declared if isinstance(declared, str) else _choice(draw, list(declared))
    if kind == "null":
        return None
    if kind == "boolean":
        return draw(st.booleans())
    if kind == "integer":
        return _draw_integer(draw, resolved)
    if kind == "number":
        return _draw_number(draw, resolved)
    if kind == "string":
        return _draw_string(draw, resolved)
    if kind == "array":
        return _draw_array(draw, resolved, root, wiring, depth)
    if kind == "object":
        return _draw_object(draw, resolved, root, wiring, depth)
    raise _Unsupported(f"type {kind!r}")


def _references_in(value: Json) -> bool:
    if isinstance(value, dict):
        return set(value) == {"$ref"} or any(_references_in(v) for v in value.values())
    if isinstance(value, list):
        return any(_references_in(v) for v in value)
    return False


_BRANCH_VALIDATORS: dict[int, tuple[Any, jsonschema.Draft202012Validator]] = {}


def _matching(value: Json, branches: list[Any], root: Mapping[str, Any]) -> int:
    """How many of `branches` (sub-schemas of `root`) accept `value`."""
    count = 0
    for branch in branches:
        hit = _BRANCH_VALIDATORS.get(id(branch))
        if hit is None or hit[0] is not branch:
            sub = _thaw(branch)
            if isinstance(sub, dict):
                sub = {**sub, "$defs": _thaw(root.get("$defs", {}))}
            hit = _BRANCH_VALIDATORS[id(branch)] = (branch, jsonschema.Draft202012Validator(sub))
        count += hit[1].is_valid(value)
    return count


def _draw_array(
    draw: DrawFn, schema: Mapping[str, Any], root: Mapping[str, Any], wiring: _Wiring, depth: int
) -> Json:
    prefix = list(schema.get("prefixItems", ()))
    items = schema.get("items", True)
    lo = int(schema.get("minItems", 0))
    hi = schema.get("maxItems")
    if items is False:
        hi = len(prefix) if hi is None else min(int(hi), len(prefix))
    hi = (lo + 3 if depth <= _MAX_DEPTH else lo) if hi is None else min(int(hi), lo + 3)
    size = draw(st.integers(lo, hi)) if lo <= hi else reject()
    out = []
    for index in range(size):
        sub = prefix[index] if index < len(prefix) else items
        out.append(_draw_value(draw, sub, root, wiring, depth + 1))
    if schema.get("uniqueItems"):
        texts = [json.dumps(v, sort_keys=True) for v in out]
        if len(set(texts)) != len(texts):
            reject()
    return out


def _draw_object(
    draw: DrawFn, schema: Mapping[str, Any], root: Mapping[str, Any], wiring: _Wiring, depth: int
) -> Json:
    props: Mapping[str, Any] = schema.get("properties", {})
    required = set(schema.get("required", ()))
    out: dict[str, Any] = {}
    optional = [name for name in props if name not in required] if depth <= _MAX_DEPTH else []
    present = required | set(_subset(draw, optional))
    for name, sub in props.items():
        if name in present and name != "$ref":
            out[name] = _draw_value(draw, sub, root, wiring, depth + 1)
    for name in sorted(required - set(props)):
        out[name] = _draw_plain(draw, 2)
    extra = schema.get("additionalProperties", True)
    if extra is not False and depth <= _MAX_DEPTH and (not props or _percent(draw, 20)):
        keys = [k for k in (draw(_KEYS) for _ in range(draw(_SIZES))) if k not in props]
        for key in keys:
            out[key] = _draw_value(draw, extra, root, wiring, depth + 1)
    return out
