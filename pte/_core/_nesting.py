"""The shape of a JSON text, decided before parsing, in linear time: how deep, how many values.

A planner's text is untrusted: parsing a deeply nested document and then walking or
validating it in Python costs far more than refusing it, and the cost grows with the depth.
`nests_deeper_than` answers from the text alone, with C-speed passes only:

1. drop escaped backslashes and escaped quotes (outside strings, valid JSON has neither);
2. keep what lies between string literals (split on the remaining quotes);
3. keep only the brackets, with ``{`` and ``}`` made ``[`` and ``]``;
4. match, with RE2 (a DFA: linear time), the longest prefix that is a sequence of balanced
   groups at most `limit` deep. Bracket sequences nested at most `limit` deep form a
   *regular* language, so one pass decides it. If the whole text matched, it is not too
   deep. Otherwise the group starting where the match stopped either closes later (it then
   must go deeper than the limit, or it would have matched) or never closes (invalid JSON:
   left to the parser, which names the error).

For valid JSON the answer is exact; for invalid JSON it is never "too deep" unless the text
does hold a group deeper than the limit.

`count_values` counts the JSON values (objects, arrays, strings, numbers, literals) on the
same skeleton: every value but the outermost is either the first member of a non-empty
array/object or follows a comma, so there are ``1 + commas + opened - empty`` of them. For
valid JSON the count is exact; for any text it takes a few C-speed passes, so a document of
a million tiny values is refused before the parser builds a single one. Every string is a
value or an object key (and each key has a value), so a text with more than twice as many
string literals as values allowed is refused from a count of its quotes alone
(`outside_strings` with `max_strings`), before the splitting of step 2.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import re2

__all__ = ["count_values", "nests_deeper_than", "outside_strings"]

_KEEP = b"[]{}"
_DROP = bytes(b for b in range(256) if b not in _KEEP)
_UNIFY = bytes.maketrans(b"{}", b"[]")
_WHITESPACE = b" \t\r\n"


@cache
def _groups(limit: int) -> Any:
    """RE2 regex: a run of balanced bracket groups at most `limit` deep (limit >= 1)."""
    group = r"\[\]"
    for _ in range(limit - 1):
        group = r"\[(?:" + group + r")*\]"
    return re2.compile(b"(?:" + group.encode() + b")*")


def outside_strings(text: str | bytes, max_strings: int | None = None) -> bytes | None:
    """What lies between the string literals (steps 1-2 of the module doc; each string is left
    as one ``s``), or None if `text`
    holds more than `max_strings` of them (told from a count of quotes, before splitting).

    The result holds no quote and no backslash: passing it to `nests_deeper_than` or
    `count_values` instead of the text saves them the splitting.
    """
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    if b"\\" in data:
        data = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    if b'"' in data:
        if max_strings is not None and data.count(b'"') > 2 * max_strings + 1:
            return None
        # Each string leaves one placeholder byte: `[""]` must not look like an empty array.
        data = b"s".join(data.split(b'"')[0::2])
    return data


def _outside_strings(text: str | bytes) -> bytes:
    outside = outside_strings(text)
    assert outside is not None  # no bound given
    return outside


def _brackets(text: str | bytes) -> bytes:
    return _outside_strings(text).translate(_UNIFY, _DROP)


def count_values(text: str | bytes) -> int:
    """How many JSON values `text` holds: exact for valid JSON, linear time for any text."""
    skeleton = _outside_strings(text).translate(None, _WHITESPACE)
    opened = skeleton.count(b"[") + skeleton.count(b"{")
    empty = skeleton.count(b"[]") + skeleton.count(b"{}")
    return 1 + skeleton.count(b",") + opened - empty


def nests_deeper_than(text: str | bytes, limit: int) -> bool:
    """Whether `text` holds arrays/objects nested more than `limit` deep (see module doc)."""
    brackets = _brackets(text)
    if not brackets:
        return False
    if limit < 1:
        return True
    match = _groups(limit).match(brackets)
    end = match.end() if match is not None else 0
    if end == len(brackets) or brackets[end : end + 1] == b"]":
        return False  # all within the limit, or a stray closing bracket (invalid JSON)
    rest = brackets[end:]
    return rest.count(b"[") <= rest.count(b"]")
