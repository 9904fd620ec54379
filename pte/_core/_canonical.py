"""Canonical JSON (RFC 8785, the JSON Canonicalization Scheme) and hashing.

Every hash PTE takes over JSON (plan hashes, audit record hashes, content hashes of the
catalogue and policy, checkpoint payloads) is SHA-256 over the bytes `canonical_bytes`
returns: the JCS form of the value. JCS is a published standard with implementations in
many languages, so anyone can re-derive a hash without PTE (docs/audit-format.md).

`rfc8785` (Trail of Bits' implementation) is the definition used here. It is pure Python
and walks every value, so the common case goes through `orjson` instead, which writes the
very same bytes for most JSON: compact separators, UTF-8, and the same string escapes
(``\\b \\t \\n \\f \\r``, other controls as lower-case ``\\u00xx``, nothing else escaped).
The two differ only in

- NaN and infinities, which orjson writes as ``null`` and JCS refuses;
- numbers: a float with an integral value (orjson ``1.0``, ``1e+16``; JCS ``1``,
  ``10000000000000000``), ``-0.0``, small numbers (orjson ``1e-6``, JCS ``0.000001``), and
  integers beyond ±(2**53 - 1), which JCS refuses (I-JSON: not exactly representable);
- key order when a key holds a character outside the Basic Multilingual Plane (orjson
  sorts by code point, JCS by UTF-16 code unit).

`numbers_as_jcs` walks the value's containers and sends every value holding a number outside
the range where both agree (or a non-BMP character) to `rfc8785`: false alarms cost time,
misses cannot happen.
tests/core/test_canonical.py checks the RFC's test vectors, the equality of both paths on
generated JSON, and every code point's escape.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

import orjson
import rfc8785

__all__ = [
    "CanonicalizationError",
    "canonical_bytes",
    "canonical_json",
    "canonical_json_v1",
    "canonical_loads",
    "checked_jcs",
    "hash_json",
    "is_canonical",
    "json_plain",
    "numbers_as_jcs",
    "sha256_hex",
    "well_formed",
    "without_member",
]

#: Raised for a value JCS cannot represent (NaN, an infinity, an integer beyond 2**53 - 1,
#: a lone surrogate, a non-string key, a type that is not JSON). A `ValueError`.
CanonicalizationError = rfc8785.CanonicalizationError

# A character outside the BMP: key order by UTF-16 may differ (only on non-ASCII output).
_NON_BMP = re.compile(rb"[\xf0-\xf4]")
_MAX_SAFE_INT = 2**53 - 1
_MIN_SAFE_INT = -_MAX_SAFE_INT  # a constant: negating the big integer allocates one each time
_ORJSON_OPTIONS = orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME


def canonical_bytes(value: Any, *, from_text: bool = False) -> bytes:
    """The RFC 8785 (JCS) serialisation of `value`, as UTF-8 bytes.

    `value` must be JSON data: dicts with str keys, lists/tuples, str, int, float, bool,
    None (subclasses such as a `StrEnum` count as their base type). JSON numbers are
    doubles: an integer beyond ±(2**53 - 1) is accepted only when JCS writes it with all
    its digits (a double equal to it whose shortest form is the integer itself), else
    refused (pass such identifiers as strings); `loads` reads such numbers back as floats.
    Raises `CanonicalizationError` (a `ValueError`) for anything JCS cannot represent
    (NaN, infinities, lone surrogates, non-JSON types).

    `from_text`: `value` was parsed from JSON text (a plan), where every number is a double:
    an integer beyond ±(2**53 - 1) stands for the double nearest to it, as in JavaScript.
    """
    kind = value.__class__
    if kind is str:  # no numbers, no keys: orjson's form is JCS's (a lone surrogate: refused)
        try:
            return orjson.dumps(value)
        except TypeError:
            return _jcs(value)
    if kind is dict or kind is list:
        # A catalogue's ``timeout_s: 30.0`` is not where orjson and JCS agree; as the integer
        # JCS writes for it, it is (`_integral_as_int`), and no pure-Python encoder is needed.
        ready = value if numbers_as_jcs(value) else _integral_as_int(value)
        data = checked_jcs(ready) if ready is not None else None
        if data is not None:
            return data
    elif kind is int:  # a bare integer, as many tools return (`ToolSpec.to_output` checks each)
        if _MIN_SAFE_INT <= value <= _MAX_SAFE_INT:
            return orjson.dumps(value)
    elif kind is bool or value is None:
        return orjson.dumps(value)
    elif kind is float and numbers_as_jcs((value,)):
        return orjson.dumps(value)  # a bare number: no walk in rfc8785
    return _jcs(value, exact=not from_text)


def checked_jcs(value: dict[str, Any] | list[Any]) -> bytes | None:
    """The JCS form of a dict or list that `numbers_as_jcs` accepted, as orjson writes it;
    None where orjson's form may differ or orjson refuses (then `canonical_bytes` asks the
    reference encoder)."""
    try:
        data = orjson.dumps(value, option=_ORJSON_OPTIONS)
    except TypeError:  # orjson refuses (a lone surrogate, a dataclass, too deep...)
        return None
    # Keys are sorted by code point; JCS sorts by UTF-16 unit: the same outside the BMP only.
    return data if data.isascii() or _NON_BMP.search(data) is None else None


def json_plain(text: str) -> bool:
    """Whether JSON writes `text` inside a string as it is (no quote, backslash or control
    character to escape): then `text` occurs in a string of a value exactly where it occurs
    in the value's encoding."""
    return not any(c in '"\\' or c < " " for c in text)


def numbers_as_jcs(value: Any) -> bool:
    """True when `value` (a list, dict or tuple of values) holds exact JSON types only (dict,
    list, str, int, float, bool, None) and orjson writes every number in it as JCS does.

    Integers within ±(2**53 - 1) and floats with a fraction between 1e-4 and 1e15 in
    magnitude (both write the shortest round-trip digits in plain decimal notation there;
    tests/core/test_canonical.py checks): anything else (integral or tiny or huge floats, NaN,
    infinities, big integers) is left to `rfc8785`. One pass over the containers.
    """
    stack = [value]
    while stack:
        node = stack.pop()
        for item in node.values() if node.__class__ is dict else node:
            kind = item.__class__
            if kind is str or item is None or item is True or item is False:
                continue
            if kind is dict or kind is list:
                stack.append(item)
            elif kind is int:
                if not _MIN_SAFE_INT <= item <= _MAX_SAFE_INT:
                    return False
            elif kind is float:
                if not 1e-4 <= abs(item) < 1e15 or item.is_integer():
                    return False
            else:  # tuples, subclasses, anything else: the reference decides
                return False
    return True


def _integral_as_int(value: Any) -> Any:
    """A copy of `value` (a dict or list) with every float of integral value within
    ±(2**53 - 1) as the integer it equals, which JCS writes alike (``30.0`` and ``30`` are
    both ``30``, ``-0.0`` is ``0``: ECMAScript writes an integral double below 1e21 as its
    integer); None when it holds a value `numbers_as_jcs` would refuse even then (then
    `rfc8785` decides). One walk, with `numbers_as_jcs`'s rules. Only for encoding: the
    caller's value is not changed."""
    try:
        return _with_integral_as_int(value)
    except (_NotReady, RecursionError):
        return None


class _NotReady(Exception):
    """A value `_integral_as_int` leaves to the reference encoder."""


def _with_integral_as_int(value: Any) -> Any:
    kind = value.__class__
    if kind is str or value is None or value is True or value is False:
        return value
    if kind is dict:
        return {key: _with_integral_as_int(item) for key, item in value.items()}
    if kind is list:
        return [_with_integral_as_int(item) for item in value]
    if kind is int:
        if _MIN_SAFE_INT <= value <= _MAX_SAFE_INT:
            return value
    elif kind is float:
        if value.is_integer():
            if _MIN_SAFE_INT <= value <= _MAX_SAFE_INT:
                return int(value)
        elif 1e-4 <= abs(value) < 1e15:
            return value
    raise _NotReady  # out of range, tuples, subclasses, anything else: the reference decides


def _jcs(value: Any, *, exact: bool = True) -> bytes:
    """`rfc8785.dumps`, with JSON's number model: an integer is a double.

    JCS serialises IEEE doubles (RFC 8785 section 3.2.2.3); `rfc8785` refuses every integer
    beyond ±(2**53 - 1). Writing (`exact`), an integer a double holds exactly (2**60) is
    written as that double and one it cannot hold is refused rather than silently rounded.
    Reading (`exact` False), an integer parsed from JSON text stands for the double nearest
    to it, as in every JSON parser that reads numbers as doubles: the line
    ``46688420511843570`` is how JCS writes the float 4.668842051184357e16.
    """
    try:
        return rfc8785.dumps(value)
    except rfc8785.IntegerDomainError:
        return rfc8785.dumps(_as_doubles(value, exact))


def _as_doubles(value: Any, exact: bool) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        if _MIN_SAFE_INT <= value <= _MAX_SAFE_INT:
            return value
        try:
            double = float(value)
        except OverflowError:
            raise rfc8785.IntegerDomainError(value) from None
        # Writing, the integer must survive the trip through JSON text: be a double, and be
        # written with all its digits (2**53 is "9007199254740992"; 2**60 would read back as
        # 1152921504606847000, so it is refused).
        if exact and (double != value or rfc8785.dumps(double) != str(value).encode()):
            raise rfc8785.IntegerDomainError(value)
        return double
    if isinstance(value, dict):
        return {key: _as_doubles(item, exact) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_as_doubles(item, exact) for item in value]
    return value


def canonical_json(value: Any, *, from_text: bool = False) -> str:
    """`canonical_bytes` as text (the JCS form of `value`)."""
    return canonical_bytes(value, from_text=from_text).decode("utf-8")


def is_canonical(data: bytes, value: Any) -> bool:
    """True when `data` is exactly the JCS form of `value` (which was parsed from `data`).

    The check `verify` makes per audit line: orjson's form settles it when every number in
    `value` is one orjson writes as JCS does; otherwise `rfc8785` decides, reading integers
    beyond 2**53 as the doubles they stand for.
    """
    if value.__class__ is dict or value.__class__ is list:
        try:
            mine = orjson.dumps(value, option=_ORJSON_OPTIONS)
        except TypeError:
            mine = b""
        # `data` is orjson's form; it is JCS's too unless it holds a number the two write
        # differently or a non-BMP character (`isascii` first: a C scan, no regex).
        if mine == data and numbers_as_jcs(value) and (data.isascii() or _NON_BMP.search(data) is None):
            return True
    try:
        return _jcs(value, exact=False) == data
    except (ValueError, TypeError, RecursionError):
        return False


def _parse_int(text: str) -> int | float:
    value = int(text)
    return value if _MIN_SAFE_INT <= value <= _MAX_SAFE_INT else float(text)


def canonical_loads(text: str | bytes) -> Any:
    """Parse JSON with JCS's number model: an integer beyond ±(2**53 - 1) is the double it names.

    JCS writes the float 4.668842051184357e16 as ``46688420511843570``; read back with
    `json.loads` that is an int not equal to the float. Read with `loads` it is the float.
    """
    return json.loads(text, parse_int=_parse_int)


def sha256_hex(data: str | bytes) -> str:
    """Hex SHA-256 of text (UTF-8 encoded) or bytes."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hashlib.sha256(data).hexdigest()


def without_member(line: bytes, member: bytes) -> tuple[bytes, bytes] | None:
    """`line` (a JCS object) split around `member` and one adjacent comma: what is left is the
    JCS form of the object without that member (docs/audit-format.md, "Verifying fast").

    `member` (``"hash":"<64 hex>"``) must occur exactly once, which makes it a top-level
    member: inside a string value its quotes would be escaped. None otherwise. (One `split`
    finds every occurrence in one pass; in JSON two cannot overlap, since a string's closing
    quote is never followed by the letter a member name starts with.)
    """
    parts = line.split(member)
    if len(parts) != 2:
        return None
    head, tail = parts
    if tail[:1] == b",":  # not the last member: drop the comma after it
        tail = tail[1:]
    elif head[-1:] == b",":  # the last member: drop the comma before it
        head = head[:-1]
    return head, tail


def hash_json(value: Any) -> str:
    """Hex SHA-256 of the canonical (JCS) form of `value`."""
    return hashlib.sha256(canonical_bytes(value)).hexdigest()


def canonical_json_v1(value: Any) -> str:
    """The canonical form of format 1 logs (Python's json module, sorted keys): read-only.

    Format 1 is not RFC 8785 (``1.0``, ``1e-07``, big integers and non-BMP key order differ),
    so it is only used to check logs written before format 2 (their chain, and the catalogue
    fingerprints their approvals bind); nothing writes it any more.
    """
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def well_formed(text: str) -> str:
    """`text` as JSON and UTF-8 can hold it: each lone surrogate replaced by U+FFFD (a pair of
    surrogate code points joined into the character they spell). Text from outside (a model's
    answer, a tool's error message) may hold one, JSON's ``"\\ud800"`` decoded; recorded as
    it is, it would make the run's records unwritable. Text without one is returned as it is."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text
