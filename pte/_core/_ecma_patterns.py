"""A schema's `pattern` read with ECMA-262's meaning of ``\\d \\D \\w \\W \\s \\S \\b \\B``.

JSON Schema's patterns are ECMA-262 regexes, where ``\\d`` is ``[0-9]`` only and ``\\w``
``[A-Za-z0-9_]`` (with or without the ``u`` flag), and ``\\b`` a boundary between those. The
compiled validator (``jsonschema-rs``) runs patterns on the Rust ``regex`` crate, which is
Unicode-aware: it translates ``\\d \\w \\s`` for a plain pattern, but a pattern with lookaround
or a backreference goes to ``fancy-regex`` as written, and ``\\b`` is never translated. There
``\\d`` takes every script's digits, so ``"1\u0660\u0660"`` (the zeros look like dots to a
person approving it) passed a decimal pattern and pydantic's `Decimal` read it as 100.

`ecma_pattern` spells those escapes out as explicit ASCII (ECMA whitespace for ``\\s``) sets,
which every engine reads alike; `ecma_schema` does it to every pattern of a schema, for a
validator only: the schema a catalogue fingerprints and shows a planner is never changed.
(RE2, which `pattern_matcher` tries first, already reads ``\\d \\w \\b`` as ASCII.)
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import jsonschema_rs

__all__ = ["ecma_pattern", "ecma_schema", "ecma_validator"]

_DIGIT = "0-9"
_WORD = "A-Za-z0-9_"
#: ECMA-262's WhiteSpace and LineTerminator (Rust's Unicode ``\s`` adds U+0085, lacks U+FEFF),
#: written as RE2 and both Rust engines read it.
_SPACE = (
    "\\t\\n\\x0b\\x0c\\r \\x{a0}\\x{1680}\\x{2000}-\\x{200a}"
    "\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}\\x{feff}"
)
#: escape letter -> (the set's members as class text, whether the escape is its complement)
_SETS = {
    "d": (_DIGIT, False),
    "D": (_DIGIT, True),
    "w": (_WORD, False),
    "W": (_WORD, True),
    "s": (_SPACE, False),
    "S": (_SPACE, True),
}
_W = f"[{_WORD}]"
_BOUNDARY = {
    "b": f"(?:(?<={_W})(?!{_W})|(?<!{_W})(?={_W}))",
    "B": f"(?:(?<={_W})(?={_W})|(?<!{_W})(?!{_W}))",
}
#: Literal in an ECMA class, but nested-class or set-operation syntax to the Rust engines.
_CLASS_LITERALS = {"[": "\\[", "&": "\\&", "~": "\\~"}


@functools.lru_cache(maxsize=4096)
def ecma_pattern(pattern: str) -> str:
    """`pattern` with its ``\\d \\D \\w \\W \\s \\S \\b \\B`` as the explicit sets ECMA-262 means.

    Everything else is kept as written. An escaped backslash stays one (``\\\\d`` is a
    backslash and a ``d``); in a class, ``\\b`` is a backspace as in ECMA, ``[`` ``&`` ``~``
    are literals, ``[]`` matches nothing and ``[^]`` any character.
    """
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        char = pattern[i]
        if char == "\\" and i + 1 < n:
            letter = pattern[i + 1]
            if letter in _SETS:
                members, negated = _SETS[letter]
                out.append(f"[{'^' if negated else ''}{members}]")
            else:
                out.append(_BOUNDARY.get(letter, pattern[i : i + 2]))
            i += 2
        elif char == "[":
            text, i = _class(pattern, i + 1)
            out.append(text)
        else:
            out.append(char)
            i += 1
    return "".join(out)


def _class(pattern: str, i: int) -> tuple[str, int]:
    """The class that starts at `i` (after its ``[``) rewritten, and where it ends."""
    negated = pattern.startswith("^", i)
    i += negated
    # Tokens: ("char", text) for one member, ("-", "-"), or ("set", letter).
    tokens: list[tuple[str, str]] = []
    n = len(pattern)
    while i < n and pattern[i] != "]":
        if pattern[i] == "\\" and i + 1 < n:
            letter = pattern[i + 1]
            if letter in _SETS:
                tokens.append(("set", letter))
            else:
                tokens.append(("char", "\\x08" if letter == "b" else pattern[i : i + 2]))
            i += 2
        elif pattern[i] == "-":
            tokens.append(("-", "-"))
            i += 1
        else:
            tokens.append(("char", _CLASS_LITERALS.get(pattern[i], pattern[i])))
            i += 1
    if i >= n:  # unterminated: left as written, for the validator to refuse
        return "[" + ("^" if negated else "") + "".join(t for _, t in tokens), i
    return _emit_class(negated, tokens), i + 1


def _emit_class(negated: bool, tokens: list[tuple[str, str]]) -> str:
    members: list[str] = []
    positive: list[str] = []  # members of \d \w \s
    complements: list[str] = []  # members of the sets \D \W \S are the complements of
    k = 0
    while k < len(tokens):
        kind, text = tokens[k]
        if kind == "set":
            set_members, complement = _SETS[text]
            (complements if complement else positive).append(set_members)
        elif kind == "char" and [t[0] for t in tokens[k + 1 : k + 3]] == ["-", "char"]:
            members.append(f"{text}-{tokens[k + 2][1]}")  # a range between two single members
            k += 2
        else:  # a member, or a hyphen that is no range (next to a set, first, last)
            members.append("\\-" if kind == "-" else text)
        k += 1
    body = "".join(positive) + "".join(members)
    if not complements:
        if body:
            return f"[{'^' if negated else ''}{body}]"
        return "[\\s\\S]" if negated else "[^\\s\\S]"  # ECMA: [^] is any character, [] none
    if not negated:  # a member of the listed ones, or outside one of the sets
        branches = ([f"[{body}]"] if body else []) + [f"[^{c}]" for c in complements]
        return "(?:" + "|".join(branches) + ")"
    # Not listed, and inside every set the class holds the complement of.
    first, *rest = complements
    guards = (f"(?![{body}])" if body else "") + "".join(f"(?=[{c}])" for c in rest)
    return f"(?:{guards}[{first}])"


#: Keywords whose value is a schema, a list of schemas, or a map of names to schemas.
_ONE = frozenset(
    {"items", "additionalItems", "additionalProperties", "not", "if", "then", "else", "contains",
     "propertyNames", "unevaluatedItems", "unevaluatedProperties"}
)  # fmt: skip
_LIST = frozenset({"allOf", "anyOf", "oneOf", "prefixItems", "items"})
_MAP = frozenset({"properties", "$defs", "definitions", "dependentSchemas", "dependencies"})


def ecma_schema(schema: Any) -> Any:
    """A copy of `schema` whose every `pattern` (and `patternProperties` key) is `ecma_pattern`'s.

    Only schema positions are walked: a ``const``, ``enum`` or ``default`` that holds a
    ``"pattern"`` key is data and stays as it is. `schema` itself is never changed.
    """
    if not isinstance(schema, Mapping):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "pattern" and isinstance(value, str):
            value = ecma_pattern(value)
        elif key == "patternProperties" and isinstance(value, Mapping):
            value = {ecma_pattern(p) if isinstance(p, str) else p: ecma_schema(s) for p, s in value.items()}
        elif key in _LIST and isinstance(value, list):
            value = [ecma_schema(s) for s in value]
        elif key in _ONE:
            value = ecma_schema(value)
        elif key in _MAP and isinstance(value, Mapping):
            value = {name: ecma_schema(s) for name, s in value.items()}
        out[key] = value
    return out


def ecma_validator(schema: Any, **options: Any) -> Any:
    """``jsonschema_rs.validator_for`` over `ecma_schema(schema)`: patterns read as ECMA-262."""
    return jsonschema_rs.validator_for(ecma_schema(schema), **options)
