"""Bounds on decimal numbers that others write, checked before anything grows with them.

A decimal string is short and its value can be huge: ``1e100000000`` is 11 characters, and
written in fixed point (``format(d, "f")``, as every decimal string PTE's tools return is)
it is 100 MB. So a number's significant digits and exponent are checked on its text,
before a `Decimal` is built or expanded; one out of bounds is not taken as a number (a tool
refuses it, or keeps it as text). The bounds are far beyond money and measurements:
`MAX_DECIMAL_DIGITS` significant digits, a magnitude within 10^±`MAX_DECIMAL_EXPONENT`.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

__all__ = ["MAX_DECIMAL_DIGITS", "MAX_DECIMAL_EXPONENT", "decimal_in_bounds", "decimal_of_text"]

#: Most significant digits a decimal number may have.
MAX_DECIMAL_DIGITS = 1_000
#: Largest absolute (adjusted) exponent: |number| below 10^1001, and no finer than 10^-1000.
MAX_DECIMAL_EXPONENT = 1_000
#: A plain decimal number as text: "12", "-3.50", ".5", "1e3" (dates and ids do not match). ASCII
#: digits only: `\d` and `Decimal` also read other scripts' (U+0660 ARABIC-INDIC ZERO looks like a dot).
_DECIMAL_TEXT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE]([+-]?[0-9]+))?")
#: Longest text examined: the digits, a sign, a point and an exponent of a number in bounds
#: (leading or trailing zeros beyond it are not worth reading).
_MAX_TEXT = MAX_DECIMAL_DIGITS + MAX_DECIMAL_EXPONENT + 16


def decimal_in_bounds(value: Decimal) -> bool:
    """Whether `value` is finite, with at most `MAX_DECIMAL_DIGITS` significant digits and an
    adjusted exponent within ±`MAX_DECIMAL_EXPONENT` (cheap: no expansion)."""
    if not value.is_finite():
        return False
    if value.is_zero():
        return True
    digits = len(value.as_tuple().digits)
    return digits <= MAX_DECIMAL_DIGITS and abs(value.adjusted()) <= MAX_DECIMAL_EXPONENT


def decimal_of_text(text: str) -> Decimal | None:
    """`text` (surrounding spaces ignored) as a `Decimal` when it is a plain decimal number
    within the bounds, else None; the text's length and exponent are checked first."""
    text = text.strip()
    if len(text) > _MAX_TEXT:
        return None
    match = _DECIMAL_TEXT.fullmatch(text)
    if match is None:
        return None
    exponent = match.group(1)
    if exponent is not None and len(exponent.lstrip("+-").lstrip("0")) > len(str(MAX_DECIMAL_EXPONENT)) + 1:
        return None  # an exponent of this many digits is out of bounds whatever the digits
    try:
        value = Decimal(text)
    except InvalidOperation:
        return None
    return value if decimal_in_bounds(value) else None
