"""Stock tool pack: typed entities out of free text (IBANs, amounts, e-mail addresses, URLs, numbers).

Every pattern runs on RE2 (linear time in the text), every result is normalised
(an IBAN without spaces and with a valid ISO 13616 checksum, an amount as an exact decimal
string with an ISO 4217 code), and every tool is pure and ``provenance="derived"``: an IBAN
found in an untrusted e-mail is as untrusted as the e-mail.

Dates and times in text: see the ``dates`` pack (``extract_dates``).

This module is loaded by file path (``pte.load_pack("extract")``), so it must not
import anything from the ``tools`` directory.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, Literal

from pydantic import BaseModel, Field

from pte import tool
from pte._catalogue import compile_regex

__all__ = ["extract", "extract_amounts"]

#: Most values returned by one call.
MAX_VALUES = 1_000

_DECIMAL_STRING_PATTERN = r"^(?!^[-+.]*$)[+-]?0*\d*\.?\d*$"

# IBAN length per country (ISO 13616 registry): a candidate of another length is no IBAN.
_IBAN_LENGTHS = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22, "BR": 29,
    "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DK": 18, "DO": 28, "EE": 20, "EG": 29,
    "ES": 24, "FI": 18, "FO": 18, "FR": 27, "GB": 22, "GE": 22, "GI": 23, "GL": 18, "GR": 27, "GT": 28,
    "HR": 21, "HU": 28, "IE": 22, "IL": 23, "IQ": 23, "IS": 26, "IT": 27, "JO": 30, "KW": 30, "KZ": 20,
    "LB": 28, "LC": 32, "LI": 21, "LT": 20, "LU": 20, "LV": 21, "MC": 27, "MD": 24, "ME": 22, "MK": 19,
    "MR": 27, "MT": 31, "MU": 30, "NL": 18, "NO": 15, "PK": 24, "PL": 28, "PS": 29, "PT": 25, "QA": 29,
    "RO": 24, "RS": 22, "SA": 24, "SC": 31, "SE": 24, "SI": 19, "SK": 24, "SM": 27, "ST": 25, "SV": 28,
    "TL": 23, "TN": 24, "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20,
}  # fmt: skip
_CURRENCY_SYMBOLS = {"€": "EUR", "$": "USD", "US$": "USD", "£": "GBP", "¥": "JPY", "Fr.": "CHF", "₹": "INR"}
_CURRENCY_CODES = (
    "EUR|USD|GBP|CHF|JPY|CNY|CAD|AUD|NZD|SEK|NOK|DKK|PLN|CZK|HUF|RON|BGN|TRY|INR|BRL|MXN|ZAR|SGD|HKD|KRW"
)
_NUMBER = r"\d{1,3}(?:[.,' ]\d{3})+(?:[.,]\d{1,2})?|\d+(?:[.,]\d{1,2})?"
_SYMBOL = r"US\$|[€$£¥₹]|Fr\."
_AMOUNT_RE = compile_regex(
    rf"(?:(?P<pre>{_CURRENCY_CODES}|{_SYMBOL})\s?(?P<sign1>-)?(?P<n1>{_NUMBER}))"
    rf"|(?:(?P<sign2>-)?(?P<n2>{_NUMBER})\s?(?P<post>(?:{_CURRENCY_CODES}|euros?|dollars?)\b|{_SYMBOL}))"
)
_PATTERNS: dict[str, Any] = {
    "iban": compile_regex(r"\b[A-Za-z]{2}\d{2}(?:[ ]?[A-Za-z0-9]){11,30}\b"),
    "email": compile_regex(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}"),
    "url": compile_regex(r"\b(?:https?://|www\.)[^\s<>\"'`]+"),
    "number": compile_regex(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"),
}


def _iban_ok(candidate: str) -> bool:
    """ISO 13616: the country's length, and the number mod 97 is 1 (ISO 7064 MOD 97-10)."""
    if _IBAN_LENGTHS.get(candidate[:2]) != len(candidate) or not candidate.isalnum():
        return False
    digits = "".join(str(int(ch, 36)) for ch in candidate[4:] + candidate[:4])
    return int(digits) % 97 == 1


def _ibans(text: str) -> list[str]:
    out: list[str] = []
    for found in _PATTERNS["iban"].finditer(text):
        raw = found.group(0).replace(" ", "").upper()
        # The pattern is greedy: a trailing word glued on by a space must not spoil a valid IBAN.
        for end in range(len(raw), 14, -1):
            if _iban_ok(raw[:end]):
                out.append(raw[:end])
                break
    return out


def _urls(text: str) -> list[str]:
    out = []
    for found in _PATTERNS["url"].finditer(text):
        url = found.group(0)
        # Sentence punctuation after a URL is not part of it; nor is a ")" that closes nothing in it.
        while url and (url[-1] in ".,;:!?]}'" or (url[-1] == ")" and url.count(")") > url.count("("))):
            url = url[:-1]
        out.append(url)
    return out


def _decimal_text(number: str) -> str:
    """'1.234,50' -> '1234.50'; '1,234.50' -> '1234.50'; '12,5' -> '12.5'; '1 000' -> '1000'."""
    digits = number.replace(" ", "").replace("'", "")
    last_dot, last_comma = digits.rfind("."), digits.rfind(",")
    decimal_mark = max(last_dot, last_comma)
    if decimal_mark >= 0 and len(digits) - decimal_mark - 1 in (1, 2):
        whole, fraction = digits[:decimal_mark], digits[decimal_mark + 1 :]
        return whole.replace(".", "").replace(",", "") + "." + fraction
    return digits.replace(".", "").replace(",", "")


class Values(BaseModel):
    values: list[str]
    count: int


class Amount(BaseModel):
    amount: str = Field(
        description="Exact decimal string, e.g. '1234.50' (negative with a minus).",
        json_schema_extra={"pattern": _DECIMAL_STRING_PATTERN},
    )
    currency: str = Field(description="ISO 4217 code, e.g. 'EUR'.")
    text: str = Field(description="The amount as written.")


class Amounts(BaseModel):
    records: list[Amount]
    count: int


@tool(provenance="derived")
def extract(text: str, kind: Literal["iban", "email", "url", "number"], unique: bool = True) -> Values:
    """Entities of one kind in free text, in order: iban (valid checksum, no spaces, upper case),
    email, url (http(s):// or www.), number (decimal strings: "1,234.5" -> "1234.5").
    """
    if kind == "iban":
        values = _ibans(text)
    elif kind == "url":
        values = _urls(text)
    else:
        values = [found.group(0) for found in _PATTERNS[kind].finditer(text)]
        if kind == "number":
            values = [_decimal_text(v) if "," in v else v for v in values]
    if unique:
        values = list(dict.fromkeys(values))
    if len(values) > MAX_VALUES:
        raise ValueError(f"more than {MAX_VALUES} values")
    return Values(values=values, count=len(values))


@tool(provenance="derived")
def extract_amounts(text: str, currency: str | None = None) -> Amounts:
    """Money amounts and their currency as an ISO code ("EUR 1,234.50", "1.234,50 €", "$12");
    `currency` keeps only that one. A number without a currency is no amount.
    """
    records: list[Amount] = []
    for found in _AMOUNT_RE.finditer(text):
        groups = found.groupdict()
        number = groups["n1"] or groups["n2"]
        unit = groups["pre"] or groups["post"] or ""
        sign = "-" if (groups["sign1"] or groups["sign2"]) else ""
        code = _CURRENCY_SYMBOLS.get(unit) or ("EUR" if unit.startswith("euro") else None)
        code = code or ("USD" if unit.startswith("dollar") else unit.upper())
        amount = Decimal(sign + _decimal_text(number))
        if currency is not None and code != currency.upper():
            continue
        records.append(Amount(amount=format(amount, "f"), currency=code, text=found.group(0).strip()))
        if len(records) > MAX_VALUES:
            raise ValueError(f"more than {MAX_VALUES} amounts")
    return Amounts(records=records, count=len(records))
