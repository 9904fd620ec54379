"""Decimal digits of other scripts than ASCII: ``str.isdigit``, ``int``, ``Decimal`` and a Python
regex's ``\\d`` take them (``int("\\u0663") == 3``); a pattern that parses data must not.

Shared by the properties of review #37's mend: approval times (tests/audit), element ids of a
log (tests/replay), a rejection's step index (tests/run), decimal text (tests/core).
"""

from __future__ import annotations

import sys

from hypothesis import strategies as st

#: Every character a Python regex's ``\\d`` matches that is not an ASCII digit (category Nd).
OTHER_DIGITS = [chr(c) for c in range(128, sys.maxunicode + 1) if chr(c).isdecimal()]

other_digits = st.sampled_from(OTHER_DIGITS)


def with_a_digit_replaced(text: str) -> st.SearchStrategy[str]:
    """`text` with one or more of its ASCII digits written in another script (same value)."""
    places = [i for i, c in enumerate(text) if c in "0123456789"]

    def replace(chosen: list[int], digits: list[str]) -> str:
        out = list(text)
        for place, digit in zip(chosen, digits, strict=False):
            # The same digit value in the other script: U+0660 + 3 is ARABIC-INDIC THREE.
            base = ord(digit) - int(digit)
            out[place] = chr(base + int(text[place]))
        return "".join(out)

    return st.tuples(
        st.lists(st.sampled_from(places), min_size=1, max_size=3, unique=True),
        st.lists(other_digits, min_size=3, max_size=3),
    ).map(lambda drawn: replace(*drawn))
