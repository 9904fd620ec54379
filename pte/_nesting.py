"""Whether a JSON text nests deeper than a limit, decided before parsing, in linear time.

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
"""

from __future__ import annotations

from functools import cache
from typing import Any

import re2

__all__ = ["nests_deeper_than"]

_KEEP = b"[]{}"
_DROP = bytes(b for b in range(256) if b not in _KEEP)
_UNIFY = bytes.maketrans(b"{}", b"[]")


@cache
def _groups(limit: int) -> Any:
    """RE2 regex: a run of balanced bracket groups at most `limit` deep (limit >= 1)."""
    group = r"\[\]"
    for _ in range(limit - 1):
        group = r"\[(?:" + group + r")*\]"
    return re2.compile(b"(?:" + group.encode() + b")*")


def _brackets(text: str | bytes) -> bytes:
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    if b"\\" in data:
        data = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    if b'"' in data:
        data = b"".join(data.split(b'"')[0::2])
    return data.translate(_UNIFY, _DROP)


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
