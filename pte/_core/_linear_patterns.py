"""A JSON Schema validator (for explaining rejections) whose `pattern` runs in linear time.

`jsonschema`'s `pattern` keyword runs Python's backtracking `re`. The schemas PTE explains
with it come from tools, and a tool's pattern can take polynomial or exponential time on a
hostile string: pydantic's decimal-string pattern (`DECIMAL_STRING_PATTERN`) is
cubic, so a 2.5 KB argument cost about 24 s to explain, at compile and again at run time,
outside any tool timeout. `ExplainingValidator` checks `pattern` instead:

- on RE2 (``google-re2``, linear in the text) when the pattern is RE2 syntax;
- the decimal-string pattern, whose negative lookahead RE2 lacks, by an RE2 equivalent;
- any other pattern RE2 refuses (lookaround, backreferences) by the compiled validator
  (``jsonschema-rs``) that already ran on the same value, whose backtracking is bounded:
  never by Python's `re`.

RE2, like ECMA-262 and jsonschema-rs, reads ``$`` as the end of the text only (Python's `re`
also matches before a final newline), so the explanation agrees with the compiled check. Both
see the pattern as `ecma_pattern` writes it: ``\\d`` is ``[0-9]``, as ECMA-262 reads it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import jsonschema
import jsonschema_rs
import re2

from pte._core._ecma_patterns import ecma_pattern

__all__ = [
    "DECIMAL_STRING_PATTERN",
    "DECIMAL_STRING_RE2",
    "ExplainingValidator",
    "is_decimal_string",
    "pattern_matcher",
]

#: A decimal number written as a string (no exponent), as pydantic 2.13 and earlier declared it
#: (`pte._catalogue._tool_decorator` writes it into the schemas of `Decimal` parameters).
DECIMAL_STRING_PATTERN = r"^(?!^[-+.]*$)[+-]?0*\d*\.?\d*$"

#: `DECIMAL_STRING_PATTERN` without its lookahead: a sign, then digits with at most
#: one point, at least one digit (the lookahead only refused strings of signs and points).
DECIMAL_STRING_RE2 = r"^[+-]?(?:\d+\.?\d*|\.?\d+)$"


@functools.lru_cache(maxsize=1024)
def pattern_matcher(pattern: str) -> Callable[[str], bool]:
    """A linear-time (or bounded) test of whether `pattern` (ECMA-262) matches somewhere in a string."""
    source = ecma_pattern(DECIMAL_STRING_RE2 if pattern == DECIMAL_STRING_PATTERN else pattern)
    options = re2.Options()
    options.log_errors = False  # a pattern RE2 refuses is no error: jsonschema-rs reads it
    try:
        regex = re2.compile(source, options)
    except re2.error:
        checker = jsonschema_rs.validator_for({"type": "string", "pattern": ecma_pattern(pattern)})
        return checker.is_valid
    return lambda text: regex.search(text) is not None


def is_decimal_string(text: str) -> bool:
    """Whether `text` is a decimal number written as a string (`DECIMAL_STRING_PATTERN`), read
    as JSON Schema (ECMA-262) and RE2 read it: ASCII digits, ``$`` at the very end. Python's
    `re` would also take other scripts' digits (``1\u0660\u0660``, which `Decimal` reads as 100) and a
    final newline."""
    return pattern_matcher(DECIMAL_STRING_PATTERN)(text)


def _pattern(
    validator: Any, pattern: str, instance: Any, schema: Mapping[str, Any]
) -> Iterator[jsonschema.ValidationError]:
    if validator.is_type(instance, "string") and not pattern_matcher(pattern)(instance):
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(
    validator: Any, patterns: Mapping[str, Any], instance: Any, schema: Mapping[str, Any]
) -> Iterator[jsonschema.ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        matches = pattern_matcher(pattern)
        for name, value in instance.items():
            if matches(name):
                yield from validator.descend(value, subschema, path=name, schema_path=pattern)


def _additional_properties(
    validator: Any, additional: Any, instance: Any, schema: Mapping[str, Any]
) -> Iterator[jsonschema.ValidationError]:
    # jsonschema's own, with patternProperties' names matched as `_pattern_properties` does.
    if not validator.is_type(instance, "object"):
        return
    properties = schema.get("properties", {})
    matchers = [pattern_matcher(p) for p in schema.get("patternProperties", {})]
    extras = [n for n in instance if n not in properties and not any(m(n) for m in matchers)]
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif additional is False and extras:  # jsonschema's messages, word for word
        listed = ", ".join(repr(extra) for extra in sorted(extras, key=str))
        if "patternProperties" in schema:
            verb = "does" if len(extras) == 1 else "do"
            patterns = ", ".join(repr(p) for p in sorted(schema["patternProperties"]))
            yield jsonschema.ValidationError(f"{listed} {verb} not match any of the regexes: {patterns}")
        else:
            were = "was" if len(extras) == 1 else "were"
            yield jsonschema.ValidationError(
                f"Additional properties are not allowed ({listed} {were} unexpected)"
            )


#: Draft 2020-12, with `pattern`, `patternProperties` and `additionalProperties`' names read by
#: `pattern_matcher` (ECMA-262, linear or bounded time): see the module doc.
ExplainingValidator: Any = jsonschema.validators.extend(  # type: ignore[no-untyped-call]
    jsonschema.Draft202012Validator,
    validators={
        "pattern": _pattern,
        "patternProperties": _pattern_properties,
        "additionalProperties": _additional_properties,
    },
)
