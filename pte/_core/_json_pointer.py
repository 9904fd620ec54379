"""The one reading of a JSON Pointer's reference token as an array index (RFC 6901, section 4).

Every place that reads a token of a plan's reference, of a schema's ``$ref``, of a procedure's
result or of a for_each element's id (``pay[2]``) as a position in a list asks `array_index`,
so compile (which proves a reference selects something) and run time (which selects it) agree
on which tokens are indices.
"""

from __future__ import annotations

import re
import sys

__all__ = ["array_index"]

#: RFC 6901's ``array-index``: ``0``, or an ASCII digit 1-9 then ASCII digits. Not ``01`` (a
#: second spelling of ``1``), nor ``+1``, ``-0``, `` 1``, nor another script's digits (``٣``).
_ARRAY_INDEX = re.compile(r"0|[1-9][0-9]*")

#: Digits of an index past the end of every list (a list of sys.maxsize elements cannot exist).
_PAST_EVERY_LIST = len(str(sys.maxsize))


def array_index(token: str) -> int | None:
    """The position in a list that `token` names, or None when it names none (see
    `_ARRAY_INDEX`). An index of more digits than any list's length has is `sys.maxsize`: past
    the end of every list, and never a number too long for `int` (over 4300 digits raises)."""
    if _ARRAY_INDEX.fullmatch(token) is None:
        return None
    return int(token) if len(token) < _PAST_EVERY_LIST else sys.maxsize
