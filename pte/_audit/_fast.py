"""The fast path of `verify`: one compiled pass that proves a format 2 line good, or defers.

`verify` checks each line against its reference rules (orjson parse, RFC 8785 form through
`pte._core._canonical`, the hash chain, the record schema through jsonschema-rs, run structure).
Most of that time went to converting each parsed record into jsonschema-rs' own values and
to walking it in Python for numbers orjson and JCS write differently. This module compiles
the record schema (`schemas/audit-record.schema.json`, the one definition) into msgspec
types, one tagged Struct per record type, so that decoding a line *is* the schema check,
done in C in the same pass as the parse:

- ``type: object`` with ``properties`` and ``additionalProperties: false`` becomes a
  Struct that forbids unknown members; optional members default to ``UNSET`` so that
  encoding the decoded value gives back exactly the members the line had;
- ``const``/``enum`` become ``Literal``, ``minLength``/``minimum`` msgspec constraints,
  ``anyOf [X, null]`` ``X | None``, ``items``/``additionalProperties`` list and dict types;
- what a type cannot say (``pattern``, ``if``/``then``/``else``, ``not``, a number JCS
  writes differently) becomes a small residual check run on the decoded value.

Free-form members (``{}``, ``{"type": "object"}``) decode to `JSON`: null, booleans,
strings, integers within ±(2**53 - 1) (where JCS writes every integer as its digits) and
lists and objects of them, nested up to `_DEPTH` levels. A float or a big integer there,
or a deeper value, fails the decode, and the line goes to the reference path.

The fast path is *sound by construction, not complete*: it accepts a line only when every
reference check would pass (the decode, the residual checks, msgspec's sorted encoding
equal to the line byte for byte, the chain); anything else (a keyword this compiler does
not know, a record type it leaves out, a decode error, any mismatch) sends the line to the
reference path, which decides and words the problem. So the verdict and the first bad
line are the reference path's by construction; tests/test_audit_fast.py checks both
(soundness of the compiled schema against jsonschema, and identical reports on tampered
logs with the fast path on and off).
"""

from __future__ import annotations

import functools
import operator
import re
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from hashlib import sha256 as _sha256
from typing import Annotated, Any, Literal

import msgspec

from pte._core import without_member

__all__ = ["FastPath", "Unsupported", "compile_fast_path", "hash_of_line"]

_MAX_SAFE_INT = 2**53 - 1
_DEPTH = 6  # nesting of free-form values the fast path takes (deeper: the reference path)
_IGNORED = frozenset({"title", "description", "$schema", "$id", "$comment", "examples"})

#: Members `verify`'s fast path reads from every record (the schema must require them).
_COMMON = frozenset({"seq", "run_id", "ts", "type", "prev", "hash"})

_SafeInt = Annotated[int, msgspec.Meta(ge=-_MAX_SAFE_INT, le=_MAX_SAFE_INT)]


# Types built at run time from the schema (typing's own forms, as msgspec reads them).
def _union(*kinds: Any) -> Any:
    return functools.reduce(operator.or_, kinds)


def _list(item: Any) -> Any:
    return types.GenericAlias(list, (item,))


def _dict(value: Any) -> Any:
    return types.GenericAlias(dict, (str, value))


def _json_type(depth: int) -> Any:
    """JSON values without floats nor integers beyond ±(2**53 - 1), `depth` levels deep."""
    value: Any = _union(None, bool, _SafeInt, str)
    for _ in range(depth):
        value = _union(None, bool, _SafeInt, str, _list(value), _dict(value))
    return value


JSON = _json_type(_DEPTH)

Check = Callable[[Any], bool]


class Unsupported(ValueError):
    """A schema construct this compiler does not translate (its record type stays slow)."""


def _float_ok(value: float) -> bool:
    """True for a float msgspec writes exactly as JCS does (tests/test_audit_fast.py).

    Both write the shortest round-trip digits in plain notation for a non-integral
    magnitude in [1e-4, 1e15); integral floats (msgspec ``1.0``, JCS ``1``), tiny and huge
    ones (exponent forms) are left to the reference path.
    """
    return 1e-4 <= abs(value) < 1e15 and not value.is_integer()


def _number_check(value: Any) -> bool:
    # `_float_ok` inlined: this runs on every record that has a number member.
    return value.__class__ is not float or (1e-4 <= abs(value) < 1e15 and not value.is_integer())


# ECMA-262 and Python's `re` agree on this subset (ASCII literals, escaped punctuation,
# bracket classes of ASCII ranges, groups, counted quantifiers; no alternation, no \d \w \s,
# no lookaround): a pattern ``^X$`` is compiled as a full match of X.
_SAFE_PATTERN = re.compile(
    r"\^(?:[A-Za-z0-9_:T Z-]|\\[.\[\]\-/]|\[[A-Za-z0-9_-]+\]|[()?*+]|\{[0-9]+(?:,[0-9]*)?\})*\$"
)


#: The audit timestamp (UTC, microseconds). Decoded by msgspec as a `datetime` (in C), it
#: needs no regular expression: msgspec writes an aware UTC datetime with a non-zero
#: microsecond exactly in this form (tests/test_audit_fast.py), and the fast path only
#: accepts a line equal to msgspec's encoding of what it decoded.
TIMESTAMP_PATTERN = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z$"


def _utc_microseconds(value: datetime) -> bool:
    return value.tzinfo is UTC and value.microsecond != 0


def _pattern_check(pattern: str) -> Check:
    if _SAFE_PATTERN.fullmatch(pattern) is None:
        raise Unsupported(f"pattern {pattern!r}")
    try:
        fullmatch = re.compile(pattern[1:-1]).fullmatch
    except re.error as exc:
        raise Unsupported(f"pattern {pattern!r}: {exc}") from None
    # Values repeat (a run's plan hash, its step ids): remember the ones that matched.
    seen: set[str] = set()

    def check(value: Any) -> bool:
        if value in seen:
            return True
        if value.__class__ is not str or fullmatch(value) is None:
            return False
        if len(seen) >= 4096:
            seen.clear()
        seen.add(value)
        return True

    return check


def _only(schema: Mapping[str, Any], *allowed: str) -> None:
    extra = set(schema) - _IGNORED - set(allowed)
    if extra:
        raise Unsupported(f"keywords {sorted(extra)}")


def _literal(values: list[Any]) -> tuple[Any, Check | None]:
    """``const``/``enum`` of strings (a ``Literal``) or of booleans (``bool`` and a check).

    Booleans are not given to ``Literal``: msgspec before 0.22 refuses ``Literal[True]``
    (a TypeError when the decoder is built, which would have broken `verify`), and a check
    by identity cannot mistake ``1`` for ``true``. Numbers are left out (JCS's form of them
    is checked elsewhere).
    """
    nullable = None in values
    present = [v for v in values if v is not None]
    if present and all(v.__class__ is bool for v in present):
        allowed = frozenset(present)
        if nullable:
            return bool | None, lambda v: v is None or v in allowed
        return bool, lambda v: v in allowed
    for value in present:
        if value.__class__ is not str:
            raise Unsupported(f"enum value {value!r}")
    kinds: list[Any] = [Literal[tuple(present)]] if present else []
    if nullable:
        kinds.append(None)
    return _union(*kinds), None


def _translate(schema: Mapping[str, Any], name: str) -> tuple[Any, Check | None]:
    """(msgspec type, residual check or None) for one (dereferenced) JSON Schema."""
    if "const" in schema:
        _only(schema, "const")
        return _literal([schema["const"]])
    if "enum" in schema:
        _only(schema, "enum")
        return _literal(list(schema["enum"]))
    if "anyOf" in schema:
        _only(schema, "anyOf")
        branches = schema["anyOf"]
        nulls = [b for b in branches if b == {"type": "null"}]
        others = [b for b in branches if b != {"type": "null"}]
        if len(nulls) != 1 or len(others) != 1:
            raise Unsupported("anyOf other than [X, null]")
        kind, check = _translate(others[0], name)
        if check is None:
            return kind | None, None
        inner = check
        return kind | None, lambda v: v is None or inner(v)
    kind = schema.get("type")
    if kind is None:
        _only(schema)
        return JSON, None
    if isinstance(kind, list) and len(kind) == 2 and "null" in kind and set(schema) != {"type"}:
        # ``{"type": [X, "null"], ...X's keywords}`` is ``anyOf [X with its keywords, null]``.
        other = {**schema, "type": next(k for k in kind if k != "null")}
        return _translate({"anyOf": [other, {"type": "null"}]}, name)
    if isinstance(kind, list):
        _only(schema, "type")
        simple = {"string": str, "null": None, "boolean": bool}
        if not kind or any(k not in simple for k in kind):
            raise Unsupported(f"type {kind!r}")
        return _union(*(simple[k] for k in kind)), None
    if kind == "string":
        _only(schema, "type", "minLength", "pattern")
        if schema.get("pattern") == TIMESTAMP_PATTERN and "minLength" not in schema:
            return datetime, _utc_microseconds
        meta = msgspec.Meta(min_length=schema["minLength"]) if "minLength" in schema else None
        text: Any = Annotated[str, meta] if meta is not None else str
        return text, _pattern_check(schema["pattern"]) if "pattern" in schema else None
    if kind == "integer":
        _only(schema, "type", "minimum")
        low = max(schema.get("minimum", -_MAX_SAFE_INT), -_MAX_SAFE_INT)
        if low.__class__ is not int:
            raise Unsupported("non-integer minimum")
        return Annotated[int, msgspec.Meta(ge=low, le=_MAX_SAFE_INT)], None
    if kind == "number":
        _only(schema, "type", "minimum")
        if "minimum" not in schema:
            return _SafeInt | float, _number_check
        low = schema["minimum"]
        if low.__class__ is not int or low < -_MAX_SAFE_INT:
            raise Unsupported("minimum")
        whole = Annotated[int, msgspec.Meta(ge=low, le=_MAX_SAFE_INT)]
        return whole | Annotated[float, msgspec.Meta(ge=low)], _number_check
    if kind == "boolean":
        _only(schema, "type")
        return bool, None
    if kind == "null":
        _only(schema, "type")
        return None, None
    if kind == "array":
        _only(schema, "type", "items")
        if "items" not in schema:
            return _list(JSON), None
        item, item_check = _translate(schema["items"], name)
        if item_check is None:
            return _list(item), None
        each = item_check
        return _list(item), lambda v: all(map(each, v))
    if kind == "object":
        if "properties" in schema:
            return _struct(schema, name, tag=None)
        _only(schema, "type", "additionalProperties")
        values = schema.get("additionalProperties", {})
        if values is True or values == {}:
            return _dict(JSON), None
        if not isinstance(values, Mapping):
            raise Unsupported("additionalProperties")
        value, value_check = _translate(values, name)
        if value_check is None:
            return _dict(value), None
        each_value = value_check
        return _dict(value), lambda v: all(map(each_value, v.values()))
    raise Unsupported(f"type {kind!r}")


def _struct(
    schema: Mapping[str, Any], name: str, tag: str | None, implied: frozenset[str] = frozenset()
) -> tuple[Any, Check | None]:
    """A Struct for an object schema with ``properties`` and ``additionalProperties: false``.

    `tag`: the record type (the ``type`` member becomes msgspec's tag). `implied`: members
    whose pattern the caller proves otherwise (``prev`` and ``hash`` equal hashes `verify`
    computed), left out of the residual check.
    """
    _only(schema, "type", "properties", "required", "additionalProperties", "if", "then", "else")
    if schema.get("additionalProperties") is not False:
        raise Unsupported("objects must forbid additional properties")
    required = set(schema.get("required", ()))
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
    checks: list[tuple[str, Check]] = []
    for member, sub in schema["properties"].items():
        if tag is not None and member == "type":
            if sub != {"const": tag} or "type" not in required:
                raise Unsupported("the record type must be a required const")
            continue
        if not member.isidentifier() or member.startswith("_"):
            raise Unsupported(f"member name {member!r}")
        kind, member_check = _translate(sub, f"{name}.{member}")
        if member_check is not None and member not in implied:
            checks.append((member, member_check))
        if member in required:
            fields.append((member, kind))
        else:
            fields.append((member, kind | msgspec.UnsetType, msgspec.UNSET))
    if not required <= set(schema["properties"]):
        raise Unsupported("a required member without a schema")
    conditional = _conditional(schema, required) if "if" in schema else None
    struct = msgspec.defstruct(
        name.replace(".", "_"),
        fields,
        kw_only=True,
        forbid_unknown_fields=True,
        gc=False,  # decoded JSON cannot hold a reference cycle: keep the structs out of the GC
        tag_field="type" if tag is not None else None,
        tag=tag if tag is not None else None,
    )
    if not checks and conditional is None:
        return struct, None
    unset = msgspec.UNSET
    always = tuple((m, c) for m, c in checks if m in required)
    maybe = tuple((m, c) for m, c in checks if m not in required)

    def check(value: Any) -> bool:
        for member, member_check in always:
            if not member_check(getattr(value, member)):
                return False
        for member, member_check in maybe:
            item = getattr(value, member)
            if item is not unset and not member_check(item):
                return False
        return conditional is None or conditional(value)

    return struct, check


def _conditional(schema: Mapping[str, Any], required: set[str]) -> Check:
    """``if``/``then``/``else`` over members: the forms the record schema uses, else Unsupported.

    ``if``: ``properties`` with ``const``/``enum`` of strings (JSON Schema: an absent member
    satisfies it). ``then``/``else``: ``required``, ``not: {required}``, and ``properties``
    with ``const``/``enum`` of strings or ``type: null``, each read as JSON Schema does.
    """
    unset = msgspec.UNSET

    def member_test(sub: Mapping[str, Any]) -> Check:
        if set(sub) - _IGNORED == {"type"} and sub["type"] == "null":
            return lambda v: v is None
        if set(sub) - _IGNORED == {"const"} and sub["const"].__class__ is str:
            const = sub["const"]
            return lambda v: v.__class__ is str and v == const
        if set(sub) - _IGNORED == {"enum"} and all(e.__class__ is str for e in sub["enum"]):
            allowed = frozenset(sub["enum"])
            return lambda v: v.__class__ is str and v in allowed
        raise Unsupported(f"conditional member schema {dict(sub)!r}")

    def properties_test(sub: Mapping[str, Any]) -> Check:
        tests = tuple((member, member_test(s)) for member, s in sub.items())
        if len(tests) == 1:
            ((only, only_ok),) = tests

            def test_one(value: Any) -> bool:
                item = getattr(value, only, unset)
                return item is unset or only_ok(item)

            return test_one

        def test(value: Any) -> bool:
            for member, member_ok in tests:
                item = getattr(value, member, unset)
                if item is not unset and not member_ok(item):
                    return False
            return True

        return test

    def present(names: tuple[str, ...]) -> Check:
        if len(names) == 1:
            (name,) = names
            return lambda v: getattr(v, name, unset) is not unset
        return lambda v: all(getattr(v, m, unset) is not unset for m in names)

    def clause(sub: Mapping[str, Any]) -> Check:
        _only(sub, "properties", "required", "not")
        parts: list[Check] = []
        if "properties" in sub:
            parts.append(properties_test(sub["properties"]))
        if "required" in sub:
            parts.append(present(tuple(sub["required"])))
        if "not" in sub:
            inner = sub["not"]
            if set(inner) - _IGNORED != {"required"}:
                raise Unsupported("not other than not: {required}")
            all_present = present(tuple(inner["required"]))
            parts.append(lambda v: not all_present(v))
        if len(parts) == 1:
            return parts[0]
        steps = tuple(parts)

        def test(value: Any) -> bool:  # a loop: cheaper than all() over a generator
            for part in steps:  # noqa: SIM110
                if not part(value):
                    return False
            return True

        return test

    condition = schema["if"]
    if set(condition) - _IGNORED != {"properties"}:
        raise Unsupported("if other than properties")
    test_if = properties_test(condition["properties"])
    then = clause(schema["then"]) if "then" in schema else (lambda v: True)
    other = clause(schema["else"]) if "else" in schema else (lambda v: True)
    return lambda v: then(v) if test_if(v) else other(v)


@dataclass(frozen=True)
class FastPath:
    """Compiled record types: decode a line into one (schema checked), encode it back sorted.

    `checks` maps each Struct class to its residual check (None: the type says it all);
    `types` maps it to its record type name. `skipped` names the record types left to the
    reference path, with the reason.
    """

    decode: Callable[[bytes], Any]
    encode: Callable[[Any], bytes]
    checks: Mapping[type, Check | None]
    types: Mapping[type, str]
    skipped: Mapping[str, str]


def compile_fast_path(
    branches: Mapping[str, Mapping[str, Any]], *, exclude: frozenset[str], implied: frozenset[str]
) -> FastPath:
    """Compile dereferenced per-type schemas (type name -> schema) into a `FastPath`.

    `exclude`: record types that always take the reference path (their checks need the
    parsed record: content hashes, signatures). A type whose schema uses a construct this
    compiler does not know is left out too (`FastPath.skipped`).
    """
    checks: dict[type, Check | None] = {}
    types: dict[type, str] = {}
    skipped: dict[str, str] = {}
    for type_name, schema in branches.items():
        if type_name in exclude:
            skipped[type_name] = "excluded"
            continue
        try:
            if not set(schema.get("required", ())) >= _COMMON:
                raise Unsupported(f"the common members {sorted(_COMMON)} must be required")
            struct, check = _struct(schema, type_name, tag=type_name, implied=implied)
        except Unsupported as exc:
            skipped[type_name] = str(exc)
            continue
        checks[struct] = check
        types[struct] = type_name
    if not checks:
        raise Unsupported("no record type compiles")
    union = _union(*checks)
    decoder = msgspec.json.Decoder(union)
    encoder = msgspec.json.Encoder(order="sorted")
    return FastPath(decoder.decode, encoder.encode, checks, types, skipped)


def hash_of_line(prev: str, body: bytes, digest: str) -> str | None:
    """SHA-256 of ``prev`` + the canonical line without its ``"hash"`` member.

    Cut out of the line itself instead of serialising the record again (`without_member`);
    None when the member is not there exactly once (the caller then serialises).
    """
    parts = without_member(body, b'"hash":"' + digest.encode("utf-8") + b'"')
    if parts is None:
        return None
    h = _sha256(prev.encode("utf-8"))
    h.update(parts[0])
    h.update(parts[1])
    return h.hexdigest()


#: What decoding a line the fast path cannot take raises (the reference path then decides).
fast_errors = (msgspec.MsgspecError, ValueError, RecursionError)

_NON_BMP = re.compile(rb"[\xf0-\xf4]")


def no_surrogate_pairs(line: bytes) -> bool:
    """True when `line` holds no character outside the Basic Multilingual Plane.

    Then sorting member names by code point (msgspec) and by UTF-16 code unit (JCS) agree.
    A character outside the BMP takes 4 bytes in UTF-8, led by 0xF0-0xF4.
    """
    return line.isascii() or _NON_BMP.search(line) is None
