"""`array_index`: the one rule by which a JSON-pointer token names a position in a list (RFC 6901)."""

from __future__ import annotations

import sys

from hypothesis import given

# private: the rule every reader of an index token asks (no public module re-exports it)
from pte._core import array_index
from tests._pointer_tokens import index_tokens

ASCII_DIGITS = "0123456789"


def _is_rfc_6901_index(token: str) -> bool:
    """RFC 6901, section 4: array-index = %x30 / ( %x31-39 *(%x30-39) )."""
    return token == "0" or (token[:1] in set("123456789") and all(c in ASCII_DIGITS for c in token))


@given(index_tokens)
def test_a_token_is_an_index_exactly_when_rfc_6901_says_so(token: str) -> None:
    index = array_index(token)
    assert (index is not None) is _is_rfc_6901_index(token)
    if index is not None:
        # The number it spells, or past the end of every list when too long for one.
        assert index == (int(token) if len(token) < 19 else sys.maxsize)


def test_the_forms_around_an_index() -> None:
    assert [array_index(t) for t in ("0", "1", "12", "9" * 18)] == [0, 1, 12, int("9" * 18)]
    for token in ("00", "01", "\u0663", "+1", "-0", " 1", "1 ", "1\n", "", "1.0", "\u00b2"):
        assert array_index(token) is None, token
    assert array_index("9" * 5000) == sys.maxsize  # never int()'s ValueError past 4300 digits
