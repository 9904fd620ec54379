"""Hypothesis strategies over plans: valid plans, invalid plans of each kind, and planner noise.

Use them to property-test a tool catalogue: every plan `valid_plans` draws must compile
against it, every plan `invalid_plans` draws must be rejected with exactly its reason
code, and nothing `planner_text` or `json_values` draws may make `compile_plan` raise
anything but `PlanRejected`::

    from hypothesis import given
    from pte.testing import valid_plans

    @given(valid_plans(my_registry))
    def test_my_catalogue_admits_generated_plans(doc):
        pte.compile_plan(json.dumps(doc), my_registry)

Arguments are generated from each tool's input JSON Schema (the subset pydantic emits);
some are replaced by references to earlier steps whose output type fits the parameter.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import re
import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta, timezone
from typing import Any, TypeVar

import jsonschema
from hypothesis import reject
from hypothesis import strategies as st
from hypothesis.strategies import DrawFn, SearchStrategy

from pte import _schema_types as types
from pte._compiler import DEFAULT_LIMITS, Limits
from pte._errors import PLAN_REASONS, ReasonCode
from pte._nesting import count_values
from pte._plan import PLAN_FORMAT_VERSION, STEP_ID_RE, TOOL_NAME_RE, Reference
from pte._tools import DECIMAL_STRING_PATTERN, Registry, ToolSpec

__all__ = [
    "COMPILE_REASONS",
    "invalid_plan_cases",
    "invalid_plans",
    "json_values",
    "planner_text",
    "valid_plans",
]

#: The reason codes `invalid_plans` can generate (every compile-time code but policy_violation).
#: A policy violation needs a policy with sinks, which a bare registry may not have.
COMPILE_REASONS: tuple[ReasonCode, ...] = tuple(
    reason for reason in ReasonCode if reason in PLAN_REASONS and reason is not ReasonCode.POLICY_VIOLATION
)

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


# --- which schemas the generator can satisfy ------------------------------------------------------

_ANNOTATIONS = frozenset(
    {
        "title",
        "description",
        "default",
        "examples",
        "$comment",
        "deprecated",
        "readOnly",
        "writeOnly",
        "discriminator",
    }
)
_KEYWORDS = frozenset(
    {
        "$ref",
        "$defs",
        "$schema",
        "type",
        "anyOf",
        "oneOf",
        "enum",
        "const",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "prefixItems",
        "minItems",
        "maxItems",
        "uniqueItems",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minLength",
        "maxLength",
        "pattern",
        "format",
    }
)
_FORMATS: dict[str, SearchStrategy[str]] = {
    "date": st.dates(date(1900, 1, 1), date(2999, 12, 31)).map(date.isoformat),
    "date-time": st.datetimes(
        datetime(1970, 1, 1),
        datetime(2999, 12, 31),
        timezones=st.sampled_from([UTC, timezone(timedelta(hours=2))]),
    ).map(datetime.isoformat),
    "time": st.times().map(lambda t: t.isoformat()),
    "uuid": st.uuids().map(str),
    "email": st.sampled_from(["ap@example.com", "a.b+c@example.org", "billing@initech.example"]),
    "uri": st.sampled_from(["https://example.com/", "https://example.org/a?b=1", "http://localhost:8080/x"]),
    "duration": st.sampled_from(["PT1H", "P1D", "PT0.5S", "P2W"]),
}


class _Unsupported(Exception):
    """A schema uses something the generator cannot satisfy."""


def _check_supported(schema: Any, root: Mapping[str, Any], seen: set[str]) -> None:
    if isinstance(schema, bool):
        if schema is False:
            raise _Unsupported("false schema")
        return
    if not isinstance(schema, Mapping):
        raise _Unsupported(f"not a schema: {schema!r}")
    unknown = set(schema) - _KEYWORDS - _ANNOTATIONS
    if unknown:
        raise _Unsupported(f"keywords {sorted(unknown)}")
    if "$ref" in schema:
        ref = schema["$ref"]
        if not isinstance(ref, str) or not ref.startswith("#/"):
            raise _Unsupported(f"remote $ref {ref!r}")
        if ref not in seen:
            seen.add(ref)
            _check_supported(types.deref({"$ref": ref}, root), root, seen)
    if "format" in schema and schema["format"] not in _FORMATS and "pattern" not in schema:
        raise _Unsupported(f"format {schema['format']!r}")
    if "multipleOf" in schema and not (isinstance(schema["multipleOf"], int) and schema["multipleOf"] > 0):
        raise _Unsupported("non-integer multipleOf")
    if "pattern" in schema:
        try:
            re.compile(schema["pattern"])
        except re.error as exc:
            raise _Unsupported(f"pattern: {exc}") from None
    for key in ("anyOf", "oneOf", "prefixItems"):
        for sub in schema.get(key, ()):
            _check_supported(sub, root, seen)
    for sub in schema.get("properties", {}).values():
        _check_supported(sub, root, seen)
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), Mapping):
            _check_supported(schema[key], root, seen)
    extra = schema.get("additionalProperties", True)
    missing = set(schema.get("required", ())) - set(schema.get("properties", {}))
    if missing and extra is False:
        raise _Unsupported(f"required {sorted(missing)} cannot be present")


# --- the catalogue seen by the generator ---------------------------------------------------------


def _output_pointers(schema: Mapping[str, Any]) -> list[tuple[Tokens, types.Schema]]:
    """Pointers into a tool's output that provably exist, with the schema each selects."""
    found: dict[Tokens, None] = {(): None}

    def walk(node: Any, tokens: Tokens, depth: int) -> None:
        if depth > 4 or len(found) > 64:
            return
        node = types.deref(node, schema)
        if not isinstance(node, Mapping):
            return
        for key in ("anyOf", "oneOf"):
            for branch in node.get(key, ()):
                walk(branch, tokens, depth + 1)
        children: list[tuple[str, Any]] = list(node.get("properties", {}).items())
        if isinstance(node.get("additionalProperties"), Mapping):
            children += [("C001", node["additionalProperties"]), ("a/b~c", node["additionalProperties"])]
        for index, sub in enumerate(node.get("prefixItems", ())):
            children.append((str(index), sub))
        if isinstance(node.get("items"), Mapping):
            children += [("0", node["items"]), ("3", node["items"])]
        for token, sub in children:
            found[(*tokens, token)] = None
            walk(sub, (*tokens, token), depth + 1)

    walk(schema, (), 0)
    out = []
    for tokens in found:
        selected = types.select(schema, schema, tokens)
        if selected is not None:
            out.append((tokens, selected))
    return out


_NO_SUCH_TOKENS: list[Tokens] = [
    ("no_such_field",),
    ("-",),
    ("01",),
    ("0", "zz"),
    ("", ""),
    ("x", "y", "z"),
    ("999",),
]


def _missing_pointers(schema: Mapping[str, Any], pointers: list[tuple[Tokens, types.Schema]]) -> list[Tokens]:
    """Pointers into a tool's output that `select` proves cannot exist."""
    out: dict[Tokens, None] = {}
    for tokens, _ in pointers[:8]:
        for extra in _NO_SUCH_TOKENS:
            if types.select(schema, schema, tokens + extra) is None:
                out[tokens + extra] = None
    return list(out)


@dataclass
class _Tool:
    spec: ToolSpec
    root: Mapping[str, Any]
    pointers: list[tuple[Tokens, types.Schema]]
    usable: bool
    validator: jsonschema.Draft202012Validator
    #: Pointers the output provably cannot have (for bad_reference plans).
    bad_pointers: list[Tokens] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.spec.name


@dataclass
class _Catalogue:
    """Per-registry facts the generators need, computed once per strategy."""

    registry: Registry
    tools: dict[str, _Tool] = field(default_factory=dict)
    # (producer, id(location schema)) -> (the schema, kept alive so its id stays unique; fitting; non-fitting)
    _fits: dict[tuple[str, int], tuple[Any, list[Tokens], list[Tokens]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for spec in self.registry:
            try:
                _check_supported(spec.input_schema, spec.input_schema, set())
                schema = types.deref(spec.input_schema, spec.input_schema)
                usable = isinstance(schema, Mapping) and "object" in types.types_of(schema, spec.input_schema)
                # A generic tool's argument types depend on its inputs: `data_plans` generates those.
                usable = usable and not spec.generic
            except _Unsupported:
                usable = False
            pointers = _output_pointers(spec.output_schema)
            self.tools[spec.name] = _Tool(
                spec=spec,
                root=spec.input_schema,
                pointers=pointers,
                usable=usable,
                validator=jsonschema.Draft202012Validator(_thaw(spec.input_schema)),
                bad_pointers=_missing_pointers(spec.output_schema, pointers),
            )

    @property
    def usable(self) -> list[_Tool]:
        return [t for t in self.tools.values() if t.usable]

    def wiring(
        self, producer: _Tool, location: types.Schema, root: Mapping[str, Any]
    ) -> tuple[list[Tokens], list[Tokens]]:
        """(pointers of `producer` whose type fits `location`, pointers whose type does not)."""
        key = (producer.name, id(location))
        hit = self._fits.get(key)
        if hit is not None and hit[0] is location:
            return hit[1], hit[2]
        good: list[Tokens] = []
        bad: list[Tokens] = []
        for tokens, selected in producer.pointers:
            fits = types.assignable(selected, producer.spec.output_schema, location, root)
            (good if fits else bad).append(tokens)
        self._fits[key] = (location, good, bad)
        return good, bad


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
    st.sampled_from(["a", "b", "c", "inv", "total", "mail", "step_1", "x" * 32]),
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


# --- valid plans ----------------------------------------------------------------------------------


@dataclass
class _Drawn:
    """A generated valid plan and what the generator knows about it."""

    doc: Doc
    #: Tool of each step, in the document's step order.
    tools: list[_Tool]


def _draw_plan(
    draw: DrawFn, catalogue: _Catalogue, min_steps: int, max_steps: int, ref_chance: int = 30
) -> _Drawn:
    usable = catalogue.usable
    count = draw(st.integers(min_steps, max_steps))
    ids: list[str] = []
    for _ in range(count):
        step_id = draw(_STEP_IDS)
        ids.append(step_id if step_id not in ids else _fresh(step_id, set(ids)))
    steps: list[Doc] = []
    chosen: list[_Tool] = []
    for i, step_id in enumerate(ids):
        tool = _choice(draw, usable)
        wiring = _Wiring(catalogue, list(zip(ids[:i], chosen, strict=True)), ref_chance)
        args = _draw_value(draw, tool.root, tool.root, wiring, 0)
        step: Doc = {"id": step_id, "tool": tool.name, "args": args}
        if i and _percent(draw, 30):
            step["after"] = _subset(draw, ids[:i][-12:]) or [ids[i - 1]]
        steps.append(step)
        chosen.append(tool)
    pairs = list(zip(steps, chosen, strict=True))
    if len(pairs) > 1 and _percent(draw, 40):
        # Any order of the same steps is still acyclic: plan order need not be execution order.
        pairs = draw(st.permutations(pairs))
    doc: Doc = {"pte_plan": PLAN_FORMAT_VERSION, "steps": [s for s, _ in pairs]}
    if _percent(draw, 60):
        index = draw(st.integers(0, len(ids) - 1))
        tokens = _choice(draw, [t for t, _ in chosen[index].pointers])
        result: Json = _ref(ids[index], tokens)
        if _percent(draw, 20):
            result = {"answer": result, "steps": len(ids), "note": draw(_TEXT)}
        doc["result"] = result
    return _Drawn(doc, [t for _, t in pairs])


def _catalogue_for(registry: Registry) -> _Catalogue:
    catalogue = _Catalogue(registry)
    if not catalogue.usable:
        raise ValueError(
            "no tool in the registry has an input schema the plan generator can satisfy "
            f"(tools: {registry.names or 'none'})"
        )
    return catalogue


def valid_plans(
    registry: Registry, *, min_steps: int = 1, max_steps: int = 8
) -> SearchStrategy[dict[str, Any]]:
    """Plan documents (JSON-ready dicts) that `compile_plan` accepts against `registry`.

    Each step calls a tool of the registry with arguments drawn from its input schema
    (types, enums, ranges, lengths, patterns, nested models, ``$defs``, dates); some
    arguments, at any depth, are references to earlier steps' outputs whose type fits the
    parameter. Steps may wait on earlier steps through ``after``, may appear in any
    order that keeps the dependencies acyclic, and the plan may have a ``result``.
    Tools whose input schema the generator cannot satisfy are never chosen.
    """
    if not 1 <= min_steps <= max_steps:
        raise ValueError(f"need 1 <= min_steps <= max_steps, got {min_steps}, {max_steps}")
    catalogue = _catalogue_for(registry)

    @st.composite
    def plans(draw: DrawFn) -> Doc:
        return _draw_plan(draw, catalogue, min_steps, max_steps).doc

    return plans()


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


# --- invalid plans --------------------------------------------------------------------------------


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


def _dependents(doc: Doc, index: int) -> set[int]:
    """Steps that (transitively) depend on step `index`, and the step itself."""
    ids = {s["id"]: i for i, s in enumerate(doc["steps"])}
    edges: dict[int, set[int]] = {i: set() for i in range(len(doc["steps"]))}
    for i, step in enumerate(doc["steps"]):
        for dep in _step_deps(step):
            if dep in ids:
                edges[ids[dep]].add(i)
    seen = {index}
    todo = [index]
    while todo:
        for nxt in edges[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def _step_deps(step: Doc) -> list[str]:
    deps: list[str] = list(step.get("after", ()))

    def walk(value: Json) -> None:
        if isinstance(value, dict):
            if set(value) == {"$ref"} and isinstance(value["$ref"], str):
                deps.append(value["$ref"].partition("/")[0])
                return
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(step["args"])
    return deps


def _locations(value: Json, path: tuple[str | int, ...] = ()) -> list[tuple[str | int, ...]]:
    """Paths of every non-reference position below `value` (not `value` itself)."""
    out: list[tuple[str | int, ...]] = []
    if isinstance(value, dict) and set(value) != {"$ref"}:
        for key, item in value.items():
            out.append((*path, key))
            out.extend(_locations(item, (*path, key)))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            out.append((*path, index))
            out.extend(_locations(item, (*path, index)))
    return out


def _set(container: Json, path: tuple[str | int, ...], value: Json) -> None:
    for key in path[:-1]:
        container = container[key]
    container[path[-1]] = value


_Mutation = Callable[[DrawFn, _Catalogue, _Drawn, Limits], "str | Doc | None"]


def _pick_step(draw: DrawFn, drawn: _Drawn, where: Callable[[int], bool] = lambda i: True) -> int | None:
    options = [i for i in range(len(drawn.doc["steps"])) if where(i)]
    return draw(st.sampled_from(options)) if options else None


def _unknown_id(draw: DrawFn, doc: Doc) -> str:
    ids = {s["id"] for s in doc["steps"]}
    found = draw(_STEP_IDS)
    return found if found not in ids else _fresh(found, ids)


def _fresh(base: str, taken: Mapping[str, Any] | set[str]) -> str:
    """`base` with a suffix that makes it a name not in `taken` (and still a valid step id)."""
    for n in itertools.count(2):
        name = f"{base[:28]}_{n}"
        if name not in taken:
            return name
    raise AssertionError("unreachable")


def _new_key(draw: DrawFn, taken: Mapping[str, Any]) -> str:
    key: str = draw(_KEYS)
    return key if key not in taken else _fresh("k" + key[:8].replace("$", "_"), taken)


# invalid_json ------------------------------------------------------------------------------------


def _mutate_invalid_json(
    draw: DrawFn, catalogue: _Catalogue, drawn: _Drawn, limits: Limits
) -> str | Doc | None:
    doc = drawn.doc
    kind = draw(
        st.sampled_from(
            [
                "truncate",
                "trailing",
                "nan",
                "duplicate_key",
                "duplicate_step_key",
                "single_quotes",
                "not_object",
                "surrogate",
                "trailing_comma",
                "comment",
                "empty",
            ]
        )
    )
    if kind == "nan":
        step = draw(st.sampled_from(doc["steps"]))
        key = draw(st.sampled_from(sorted(step["args"]) or ["value"]))
        step["args"][key] = draw(st.sampled_from([math.nan, math.inf, -math.inf]))
        return _serialise(draw, doc, allow_nan=True)
    if kind == "surrogate":
        step = draw(st.sampled_from(doc["steps"]))
        lone = draw(st.sampled_from(["\ud800", "\udfff", "x\udc80y"]))
        step["args"][draw(st.sampled_from(["note", *sorted(step["args"])]))] = lone
        return _serialise(draw, doc)
    if kind == "duplicate_step_key":
        marker = "__pte_duplicate_step__"
        index = draw(st.integers(0, len(doc["steps"]) - 1))
        step = doc["steps"][index]
        doc["steps"][index] = marker
        text = json.dumps(doc)
        body = json.dumps(step)[1:-1]
        key = draw(st.sampled_from(sorted(step)))
        dup = f"{json.dumps(key)}: {json.dumps(step[key])}"
        return text.replace(json.dumps(marker), "{" + body + ", " + dup + "}", 1)
    text = _serialise(draw, doc)
    if kind == "truncate":
        return text.rstrip()[: draw(st.integers(0, len(text.rstrip()) - 1))]
    if kind == "trailing":
        return text + draw(st.sampled_from(["}", "]", ",", " x", "\n{}", '"', "\n```", " null"]))
    if kind == "duplicate_key":
        key = draw(st.sampled_from(sorted(doc)))
        return "{" + json.dumps(key) + ": " + json.dumps(doc[key]) + ", " + text.lstrip()[1:]
    if kind == "single_quotes":
        return text.replace('"pte_plan"', "'pte_plan'", 1)
    if kind == "not_object":
        return draw(
            st.sampled_from(["[" + text + "]", json.dumps(text), "1", "null", '"plan"', "true", "[]"])
        )
    if kind == "trailing_comma":
        stripped = text.rstrip()
        return stripped[:-1] + ",}"
    if kind == "comment":
        return draw(st.sampled_from(["// the plan\n", "/* plan */", "# plan\n"])) + text
    return draw(st.sampled_from(["", " ", "\n", "NaN", "Infinity", "-Infinity", "{", "}", "nul"]))


# schema_violation --------------------------------------------------------------------------------

_BAD_STEP_IDS = [
    "A",
    "1a",
    "a\n",
    "a-b",
    "a b",
    "",
    "x" * 33,
    "é",
    "_a",
    "Step",
    "a.b",
    "a/b",
    5,
    None,
    ["a"],
]
_BAD_TOOL_NAMES = [
    "",
    "1tool",
    "a b",
    "x" * 65,
    "tool!",
    "_tool",
    "-x",
    7,
    None,
    {"name": "calculator"},
    "tool\n",
]
_BAD_REFS: list[Json] = [
    {"$ref": 5},
    {"$ref": None},
    {"$ref": ["a"]},
    {"$ref": {"step": "a"}},
    {"$ref": "A"},
    {"$ref": ""},
    {"$ref": "1a"},
    {"$ref": "a/~2"},
    {"$ref": "a/~"},
    {"$ref": "a\n"},
    {"$ref": "a b"},
    {"$ref": "/a"},
    {"$ref": "x" * 33},
]


def _bad_ref(draw: DrawFn, doc: Doc) -> Json:
    ids = [s["id"] for s in doc["steps"]]
    target = draw(st.sampled_from(ids))
    return draw(
        st.sampled_from(
            [
                *_BAD_REFS,
                {"$ref": target, "x": 1},
                {"$ref": target, "$ref\n": target},
                {"$ref": target + "/~2"},
                {"$ref": target + "/a~"},
                {"$ref": target + "\n"},
            ]
        )
    )


def _mutate_schema_violation(
    draw: DrawFn, catalogue: _Catalogue, drawn: _Drawn, limits: Limits
) -> str | Doc | None:
    doc = drawn.doc
    steps = doc["steps"]
    step = draw(st.sampled_from(steps))
    kind = draw(
        st.sampled_from(
            [
                "version",
                "drop_top",
                "extra_top",
                "steps_type",
                "steps_empty",
                "drop_step_key",
                "extra_step_key",
                "bad_id",
                "bad_tool",
                "args_type",
                "args_reference",
                "after_type",
                "after_duplicate",
                "after_bad_id",
                "bad_ref_in_args",
                "bad_ref_in_result",
                "step_type",
                "ref_key_in_args",
            ]
        )
    )
    if kind == "version":
        doc["pte_plan"] = draw(st.sampled_from(["2", 1, "1.0", None, "", " 1", ["1"], 1.0]))
    elif kind == "drop_top":
        del doc[draw(st.sampled_from(["pte_plan", "steps"]))]
    elif kind == "extra_top":
        doc[draw(st.sampled_from(["version", "plan", "Steps", "$schema", "results", "metadata", ""]))] = draw(
            _plain_json(2)
        )
    elif kind == "steps_type":
        doc["steps"] = draw(st.sampled_from([{}, None, "steps", 3, {"a": steps[0]}, [[]], [None], [1]]))
    elif kind == "steps_empty":
        doc["steps"] = []
    elif kind == "drop_step_key":
        del step[draw(st.sampled_from(["id", "tool", "args"]))]
    elif kind == "extra_step_key":
        step[draw(st.sampled_from(["description", "depends_on", "Id", "$ref", "output", "retries"]))] = draw(
            _plain_json(2)
        )
    elif kind == "bad_id":
        step["id"] = draw(st.sampled_from(_BAD_STEP_IDS))
    elif kind == "bad_tool":
        step["tool"] = draw(st.sampled_from(_BAD_TOOL_NAMES))
    elif kind == "args_type":
        step["args"] = draw(st.sampled_from([[], None, "days=30", 30, True, [{"days": 30}]]))
    elif kind == "args_reference":
        step["args"] = {"$ref": draw(st.sampled_from([s["id"] for s in steps]))}
    elif kind == "after_type":
        step["after"] = draw(st.sampled_from(["a", None, {}, 1, [1], [None], [["a"]]]))
    elif kind == "after_duplicate":
        dep = draw(st.sampled_from([s["id"] for s in steps]))
        step["after"] = [dep, dep]
    elif kind == "after_bad_id":
        step["after"] = [
            *step.get("after", ()),
            draw(st.sampled_from([b for b in _BAD_STEP_IDS if isinstance(b, str)])),
        ]
    elif kind == "bad_ref_in_args":
        spots = _locations(step["args"])
        bad = _bad_ref(draw, doc)
        if spots and _percent(draw, 70):
            _set(step["args"], draw(st.sampled_from(spots)), bad)
        else:
            step["args"][draw(_KEYS)] = bad
    elif kind == "bad_ref_in_result":
        bad = _bad_ref(draw, doc)
        doc["result"] = draw(st.sampled_from([bad, [bad], {"value": bad}]))
    elif kind == "step_type":
        steps[steps.index(step)] = draw(st.sampled_from([None, "step", 1, [], [step]]))
    else:  # an object inside args with a "$ref" key beside others: neither a reference nor a plain object
        spots = [p for p in _locations(step["args"]) if isinstance(_get(step["args"], p[:-1]), dict)]
        target = draw(st.sampled_from([s["id"] for s in steps]))
        value = {"$ref": target, draw(st.sampled_from(["note", "pointer", "$ref2"])): 1}
        if spots:
            _set(step["args"], draw(st.sampled_from(spots)), value)
        else:
            step["args"]["value"] = value
    return doc


def _get(container: Json, path: tuple[str | int, ...]) -> Json:
    for key in path:
        container = container[key]
    return container


# duplicate_step_id -------------------------------------------------------------------------------


def _mutate_duplicate_step_id(
    draw: DrawFn, catalogue: _Catalogue, drawn: _Drawn, limits: Limits
) -> str | Doc | None:
    steps = drawn.doc["steps"]
    if len(steps) == 1 or _percent(draw, 25):
        # A copy of an existing step (same id) at some position.
        source = draw(st.sampled_from(steps))
        steps.insert(draw(st.integers(0, len(steps))), _copy(source))
        return drawn.doc
    first, second = draw(st.lists(st.integers(0, len(steps) - 1), min_size=2, max_size=2, unique=True))
    steps[second]["id"] = steps[first]["id"]
    return drawn.doc


# tool_not_allowed --------------------------------------------------------------------------------

_FOREIGN_TOOL_NAMES = [
    "delete_all_invoices",
    "shell",
    "os.system",
    "http.get",
    "transfer_funds",
    "Calculator",
    "calculator2",
    "send-reminder",
    "python",
    "eval",
]


_FOREIGN_TOOLS = st.one_of(st.sampled_from(_FOREIGN_TOOL_NAMES), _pattern_strings(TOOL_NAME_RE.pattern))


def _mutate_tool_not_allowed(
    draw: DrawFn, catalogue: _Catalogue, drawn: _Drawn, limits: Limits
) -> str | Doc | None:
    names = set(catalogue.registry.names)
    step = draw(st.sampled_from(drawn.doc["steps"]))
    name = draw(_FOREIGN_TOOLS)
    step["tool"] = name if name not in names else _fresh(name[:60], names)
    return drawn.doc


# invalid_args ------------------------------------------------------------------------------------


def _wrong_type_values(schema: types.Schema, root: Mapping[str, Any]) -> list[Json]:
    allowed = types.types_of(schema, root)
    samples: dict[str, Json] = {
        "string": "not the right type",
        "integer": 7,
        "number": 1.5,
        "boolean": True,
        "null": None,
        "array": [1, "two"],
        "object": {"unexpected": 1},
    }
    return [
        v for t, v in samples.items() if t not in allowed and not (t == "integer" and "number" in allowed)
    ]


def _out_of_range_values(schema: types.Schema, root: Mapping[str, Any], seen: int = 0) -> list[Json]:
    schema = types.deref(schema, root)
    if not isinstance(schema, Mapping) or seen > 3:
        return []
    out: list[Json] = []
    for key in ("anyOf", "oneOf"):
        for branch in schema.get(key, ()):
            out += _out_of_range_values(branch, root, seen + 1)
    for key, delta in (("maximum", 1), ("minimum", -1)):
        if isinstance(schema.get(key), (int, float)):
            out.append(schema[key] + delta)
    for key in ("exclusiveMaximum", "exclusiveMinimum"):
        if isinstance(schema.get(key), (int, float)):
            out.append(schema[key])
    if isinstance(schema.get("maxLength"), int):
        out.append("x" * (schema["maxLength"] + 1))
    if schema.get("minLength", 0) > 0:
        out.append("x" * (schema["minLength"] - 1))
    if "pattern" in schema:
        out += ["", "!", "not matching at all", "0", "ZZZ-9"]
    if "enum" in schema or "const" in schema:
        out += ["not-a-member", 0, "EUR ", "Email"]
    if schema.get("minItems", 0) > 0:
        out.append([])
    if isinstance(schema.get("maxItems"), int) and schema["maxItems"] < 100:
        out.append([None] * (schema["maxItems"] + 1))
    return out


def _mutate_invalid_args(
    draw: DrawFn, catalogue: _Catalogue, drawn: _Drawn, limits: Limits
) -> str | Doc | None:
    doc = drawn.doc
    index = draw(st.integers(0, len(doc["steps"]) - 1))
    step, tool = doc["steps"][index], drawn.tools[index]
    schema = types.deref(tool.root, tool.root)
    assert isinstance(schema, Mapping)
    props: Mapping[str, Any] = schema.get("properties", {})
    kind = draw(
        st.sampled_from(["wrong_type", "out_of_range", "missing", "extra", "bad_reference_type", "nested"])
    )
    thawed = _thaw(tool.root)

    def invalid_here(location: types.Schema, value: Json) -> bool:
        sub = _thaw(location) if not isinstance(location, bool) else location
        if isinstance(sub, dict):
            sub = {**sub, "$defs": thawed.get("$defs", {})}
        return not jsonschema.Draft202012Validator(sub).is_valid(value)

    if kind == "missing":
        present = [k for k in schema.get("required", ()) if k in step["args"]]
        if present:
            del step["args"][draw(st.sampled_from(present))]
            return doc
    if kind == "extra" and schema.get("additionalProperties", True) is False:
        step["args"][_new_key(draw, props)] = _draw_plain(draw, 2)
        return doc
    if kind == "bad_reference_type":
        blocked = _dependents(doc, index)
        producers = [
            (doc["steps"][j]["id"], drawn.tools[j]) for j in range(len(doc["steps"])) if j not in blocked
        ]
        options = [
            (name, step_id, tokens)
            for name, sub in props.items()
            for step_id, producer in producers
            for tokens in catalogue.wiring(producer, sub, tool.root)[1]
        ]
        if options:
            name, step_id, tokens = draw(st.sampled_from(options))
            step["args"][name] = _ref(step_id, tokens)
            return doc
    if kind == "nested" and not _step_deps({"args": step["args"]}):
        # Any literal position of a reference-free argument object; checked against the whole.
        spots = _locations(step["args"])
        if spots:
            path = draw(st.sampled_from(spots))
            replacement: Json = draw(st.sampled_from([None, "x", 1.5, -1, [], {}, True, "x" * 600]))
            candidate = _copy(step["args"])
            _set(candidate, path, replacement)
            if not tool.validator.is_valid(candidate):
                step["args"] = candidate
                return doc
    names = list(props)
    if names:
        name = draw(st.sampled_from(names))
        values = _out_of_range_values(props[name], tool.root) if kind == "out_of_range" else []
        values += _wrong_type_values(props[name], tool.root)
        values = [v for v in values if invalid_here(props[name], v)]
        if values:
            step["args"][name] = _copy(draw(st.sampled_from(values)))
            return doc
    if schema.get("additionalProperties", True) is False:
        step["args"][_new_key(draw, props)] = 1
        return doc
    return None


# bad_reference -----------------------------------------------------------------------------------


def _mutate_bad_reference(
    draw: DrawFn, catalogue: _Catalogue, drawn: _Drawn, limits: Limits
) -> str | Doc | None:
    doc = drawn.doc
    steps = doc["steps"]
    kind = draw(st.sampled_from(["unknown_step", "unknown_after", "bad_pointer", "result"]))
    if kind == "unknown_after":
        step = draw(st.sampled_from(steps))
        after = list(step.get("after", ()))
        after.insert(draw(st.integers(0, len(after))), _unknown_id(draw, doc))
        step["after"] = after
        return doc
    index = draw(st.integers(0, len(steps) - 1))
    if kind == "bad_pointer" or (kind == "result" and _percent(draw, 50)):
        # Not into a step that depends on this one: that would add a cycle as a second defect.
        blocked = _dependents(doc, index) if kind == "bad_pointer" else set()
        options = [
            (steps[j]["id"], tokens)
            for j in range(len(steps))
            if j not in blocked
            for tokens in drawn.tools[j].bad_pointers
        ]
        if options:
            ref = _ref(*draw(st.sampled_from(options)))
        else:
            ref = _ref(_unknown_id(draw, doc), draw(st.sampled_from(_NO_SUCH_TOKENS)))
    else:
        ref = _ref(_unknown_id(draw, doc), draw(st.sampled_from([(), *_NO_SUCH_TOKENS])))
    if kind == "result":
        doc["result"] = draw(st.sampled_from([ref, {"total": ref}, [1, ref]]))
        return doc
    args = steps[index]["args"]
    spots = _locations(args)
    if spots and _percent(draw, 80):
        _set(args, draw(st.sampled_from(spots)), ref)
    else:
        args[draw(_KEYS)] = ref
    return doc


# plan_cycle --------------------------------------------------------------------------------------


def _add_edge(draw: DrawFn, step: Doc, target: str) -> None:
    """Make `step` depend on step `target`, through `after` or through a reference in its args."""
    spots = [p for p in _locations(step["args"])]
    if spots and _percent(draw, 50):
        _set(step["args"], draw(st.sampled_from(spots)), _ref(target))
        return
    after = list(step.get("after", ()))
    if target not in after:
        after.insert(draw(st.integers(0, len(after))), target)
    step["after"] = after


def _mutate_plan_cycle(
    draw: DrawFn, catalogue: _Catalogue, drawn: _Drawn, limits: Limits
) -> str | Doc | None:
    steps = drawn.doc["steps"]
    if len(steps) == 1 or _percent(draw, 30):
        step = draw(st.sampled_from(steps))
        tokens = draw(st.sampled_from([(), ("value",), ("0", "a")]))
        if _percent(draw, 50):
            spots = _locations(step["args"])
            if spots:
                _set(step["args"], draw(st.sampled_from(spots)), _ref(step["id"], tokens))
            else:
                step["args"][draw(_KEYS)] = _ref(step["id"], tokens)
        else:
            after = list(step.get("after", ()))
            after.insert(draw(st.integers(0, len(after))), step["id"])
            step["after"] = after
        return drawn.doc
    size = draw(st.integers(2, len(steps)))
    members = draw(st.permutations(range(len(steps))))[:size]
    # c0 waits for c1, c1 for c2, ... and the last for c0: a cycle through every member.
    for position, member in enumerate(members):
        _add_edge(draw, steps[member], steps[members[(position + 1) % size]]["id"])
    return drawn.doc


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


def _sink_flows(catalogue: _Catalogue) -> list[tuple[_Tool, str, _Tool, Tokens, bool]]:
    """(sink tool, parameter, untrusted producer, pointer, wrap in a list) for every way an
    untrusted output can be wired, type-correctly, into a parameter that refuses untrusted data."""
    flows: list[tuple[_Tool, str, _Tool, Tokens, bool]] = []
    sources = [t for t in catalogue.tools.values() if t.spec.provenance == "untrusted" and t.usable]
    for sink in catalogue.usable:
        properties = types.deref(sink.root, sink.root)
        if not isinstance(properties, Mapping):
            continue
        for param, allowed in sink.spec.sinks.items():
            if "untrusted" in allowed or param not in properties.get("properties", {}):
                continue
            location = types.deref(properties["properties"][param], sink.root)
            spots: list[tuple[types.Schema, bool]] = [(location, False)]
            if isinstance(location, Mapping) and isinstance(location.get("items"), Mapping):
                spots.append((location["items"], True))  # [untrusted value] also reaches the sink
            for source in sources:
                for spot, wrap in spots:
                    for tokens in catalogue.wiring(source, spot, sink.root)[0]:
                        flows.append((sink, param, source, tokens, wrap))
    return flows


def _mutate_policy_violation(draw: DrawFn, catalogue: _Catalogue, drawn: _Drawn, limits: Limits) -> Json:
    flows = _sink_flows(catalogue)
    if not flows:
        return None
    sink, param, source, tokens, wrap = _choice(draw, flows)
    doc = drawn.doc
    taken = {step["id"] for step in doc["steps"]}
    source_id = _fresh("untrusted_src", taken)
    sink_id = _fresh("guarded_sink", taken | {source_id})
    no_wiring = _Wiring(catalogue, [])
    source_args = _draw_value(draw, source.root, source.root, no_wiring, 0)
    sink_args = _draw_value(draw, sink.root, sink.root, no_wiring, 0)
    value: Json = _ref(source_id, tokens)
    sink_args[param] = [value] if wrap else value
    doc["steps"] += [
        {"id": source_id, "tool": source.name, "args": source_args},
        {"id": sink_id, "tool": sink.name, "args": sink_args},
    ]
    return doc


_MUTATIONS: dict[ReasonCode, _Mutation] = {
    ReasonCode.POLICY_VIOLATION: _mutate_policy_violation,
    ReasonCode.INVALID_JSON: _mutate_invalid_json,
    ReasonCode.SCHEMA_VIOLATION: _mutate_schema_violation,
    ReasonCode.DUPLICATE_STEP_ID: _mutate_duplicate_step_id,
    ReasonCode.TOOL_NOT_ALLOWED: _mutate_tool_not_allowed,
    ReasonCode.INVALID_ARGS: _mutate_invalid_args,
    ReasonCode.BAD_REFERENCE: _mutate_bad_reference,
    ReasonCode.PLAN_CYCLE: _mutate_plan_cycle,
    ReasonCode.PLAN_TOO_LARGE: _mutate_plan_too_large,
}


def _invalid_plan_strategy(catalogue: _Catalogue, reason: ReasonCode, limits: Limits) -> SearchStrategy[str]:
    mutate = _MUTATIONS[reason]
    # Base plans within the step limit (plan_too_large grows them past it itself).
    most = max(1, min(6, limits.max_steps - 1))

    @st.composite
    def plans(draw: DrawFn) -> str:
        drawn = _draw_plan(draw, catalogue, 1, most)
        drawn.doc = _copy(drawn.doc)
        outcome = mutate(draw, catalogue, drawn, limits)
        if outcome is None:
            reject()
        text = outcome if isinstance(outcome, str) else _serialise(draw, outcome)
        if reason is not ReasonCode.PLAN_TOO_LARGE and not _fits(
            text, limits, None if isinstance(outcome, str) else outcome
        ):
            reject()
        return text

    return plans()


def _reason(reason: ReasonCode | str) -> ReasonCode:
    code = ReasonCode(reason)
    if code not in PLAN_REASONS:
        raise ValueError(f"{code.value!r} is not a reason `compile_plan` gives (it ends runs, not plans)")
    return code


def invalid_plans(
    registry: Registry, reason: ReasonCode | str, *, limits: Limits | None = None
) -> SearchStrategy[str]:
    """Plan text that `compile_plan(text, registry, limits)` rejects with exactly `reason`.

    Each example starts from a plan `valid_plans` could draw and introduces one defect of
    that kind, in many forms: for ``invalid_args`` a literal of the wrong type, a value out
    of range, a missing required or an unexpected argument, or a reference whose output
    type does not fit; for ``bad_reference`` an unknown step (in args, ``after`` or the
    result) or a pointer the producer's output cannot have; for ``plan_cycle`` a
    self-reference or a 2..n cycle through references and ``after``; for
    ``plan_too_large`` too many steps, bytes or nesting levels for `limits`.

    For ``policy_violation``, an untrusted tool's output is wired (type-correctly) into a
    parameter whose declared sink refuses untrusted data: such text is rejected when compiled
    with the tools' own policy, ``checks=[Policy.from_registry(registry).check()]`` (what the
    engine always enforces). It raises `ValueError` when the registry has no such flow.

    `limits` are the limits the text will be compiled with (default: `DEFAULT_LIMITS`);
    plans for other reasons stay within them. Reason codes that only end runs raise `ValueError`.
    """
    code = _reason(reason)
    catalogue = _catalogue_for(registry)
    if code is ReasonCode.POLICY_VIOLATION and not _sink_flows(catalogue):
        raise ValueError("the registry has no untrusted output that fits a guarded sink parameter")
    return _invalid_plan_strategy(catalogue, code, limits or DEFAULT_LIMITS)


def invalid_plan_cases(
    registry: Registry, *, limits: Limits | None = None
) -> SearchStrategy[tuple[ReasonCode, str]]:
    """``(reason, text)`` pairs over every compile-time reason in `COMPILE_REASONS` (see `invalid_plans`)."""
    catalogue = _catalogue_for(registry)
    chosen = limits or DEFAULT_LIMITS
    return st.one_of(
        [_tagged(code, _invalid_plan_strategy(catalogue, code, chosen)) for code in COMPILE_REASONS]
    )


def _tagged(code: ReasonCode, texts: SearchStrategy[str]) -> SearchStrategy[tuple[ReasonCode, str]]:
    return st.tuples(st.just(code), texts)


# --- noise ----------------------------------------------------------------------------------------

_FRAGMENTS = [
    "{",
    "}",
    "[",
    "]",
    ":",
    ",",
    '"',
    " ",
    "\n",
    '"pte_plan"',
    '"1"',
    '"steps"',
    '"id"',
    '"tool"',
    '"args"',
    '"after"',
    '"result"',
    '"$ref"',
    '"a"',
    '"a/0/x"',
    '"calculator"',
    "null",
    "true",
    "false",
    "0",
    "-0",
    "1e999",
    "-1e999",
    "1E400",
    "9" * 400,
    "0.1",
    "NaN",
    "Infinity",
    '"\\ud800"',
    '"\\udc00\\ud800"',
    '"\\u0000"',
    "\\",
    "```json",
    "```",
    "\ufeff",
    "'",
]


@functools.cache
def json_values() -> SearchStrategy[Any]:
    """Arbitrary JSON documents: scalars (huge integers, floats, any text), lists and objects.

    Object keys favour the plan vocabulary (``pte_plan``, ``steps``, ``$ref`` ...) so that
    values often come close to plans, references and near-references.
    """
    keys = st.one_of(
        st.sampled_from(["pte_plan", "steps", "id", "tool", "args", "after", "result", "$ref", "a", "days"]),
        st.text(max_size=8),
    )
    leaves = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=20),
        st.sampled_from(["1", "a", "a/b", "calculator", "inv/amounts", "a/~2", "A"]),
    )
    return st.recursive(
        leaves,
        lambda children: st.one_of(
            st.lists(children, max_size=4), st.dictionaries(keys, children, max_size=4)
        ),
        max_leaves=30,
    )


@functools.cache
def _plan_shaped() -> SearchStrategy[Doc]:
    """Documents shaped like plans over no particular catalogue (random tools, refs, after)."""
    ids = st.sampled_from(["a", "b", "c", "inv", "total"])
    value = st.recursive(
        st.one_of(_plain_json(1), ids.map(lambda i: {"$ref": i}), ids.map(lambda i: {"$ref": i + "/value"})),
        lambda children: st.one_of(
            st.lists(children, max_size=3), st.dictionaries(_KEYS, children, max_size=3)
        ),
        max_leaves=8,
    )
    step = st.fixed_dictionaries(
        {
            "id": ids,
            "tool": st.sampled_from(
                ["calculator", "list_overdue_invoices", "send_reminder", "nope", "shell"]
            ),
            "args": st.dictionaries(_KEYS, value, max_size=3),
        },
        optional={"after": st.lists(ids, max_size=2, unique=True)},
    )
    return st.fixed_dictionaries(
        {"pte_plan": st.just("1"), "steps": st.lists(step, min_size=1, max_size=5)},
        optional={"result": value},
    )


@st.composite
def _mangled(draw: DrawFn) -> str:
    doc = draw(_plan_shaped())
    text = json.dumps(doc, indent=draw(st.sampled_from([None, 2])), ensure_ascii=draw(st.booleans()))
    kind = draw(st.sampled_from(["plain", "fenced", "prose", "truncated", "spliced"]))
    if kind == "fenced":
        return f"```json\n{text}\n```"
    if kind == "prose":
        return draw(_TEXT) + "\nHere is the plan:\n" + text + "\n" + draw(_TEXT)
    if kind == "truncated":
        return text[: draw(st.integers(0, len(text)))]
    if kind == "spliced":
        at = draw(st.integers(0, len(text)))
        return text[:at] + draw(st.sampled_from(_FRAGMENTS)) + text[at:]
    return text


@st.composite
def _deep(draw: DrawFn) -> str:
    levels = draw(st.integers(1, 3000))
    opener, closer = draw(st.sampled_from([("[", "]"), ('{"a":', "}"), ('{"$ref":', "}")]))
    inner = draw(st.sampled_from(["1", '"x"', '{"$ref": 5}', ""]))
    body = opener * levels + inner + closer * draw(st.integers(0, levels))
    return draw(
        st.sampled_from(
            [
                body,
                '{"pte_plan":"1","steps":[{"id":"a","tool":"calculator","args":{"x":' + body + "}}]}",
                '{"pte_plan":"1","steps":[{"id":"a","tool":"calculator","args":{}}],"result":' + body + "}",
            ]
        )
    )


@functools.cache
def planner_text() -> SearchStrategy[str]:
    """Arbitrary planner output: what a confused, truncated or adversarial LLM might return.

    Random text (lone surrogates included), JSON-ish fragments, fenced ``json`` blocks,
    prose around plans, truncated and spliced plans, huge numbers, NaN/Infinity, deep
    nesting, and serialised `json_values`.
    """
    return st.one_of(
        st.text(alphabet=st.characters(exclude_categories=())),
        st.lists(st.sampled_from(_FRAGMENTS), max_size=40).map("".join),
        _mangled(),
        _deep(),
        json_values().map(lambda v: json.dumps(v, ensure_ascii=False)),
        json_values().map(json.dumps),
    )
