"""Stock tool pack: dates and times, parsed, computed and formatted deterministically.

Values are ISO 8601 strings: "2024-05-15" (a date), "2024-05-15T13:00:00" (a local time)
or "2024-05-15T13:00:00+02:00" (an instant). Human formats ("June 10th 2024 at 1 PM",
"15.05.2024 13:00") are read by python-dateutil, a well-kept parser, with no guess from
"today": a date without a year is an error, never the current year. Durations are ISO
8601 too ("PT1H30M", "P2D"). Every tool is pure and ``provenance="derived"``, except
``clock``: a ``read`` of the deployment's clock (``trusted``), whose output the audit log
records like any read, so replay serves the recorded time.

This module is loaded by file path (``pte.load_pack("dates")``), so it must not
import anything from the ``tools`` directory.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from typing import Annotated
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from dateutil import parser as date_parser
from dateutil.relativedelta import relativedelta
from pydantic import BaseModel, Field

from pte import tool
from pte._catalogue import compile_regex

__all__ = [
    "add_duration",
    "clock",
    "convert_timezone",
    "day_bounds",
    "extract_dates",
    "format_datetime",
    "parse_datetime",
    "time_between",
]

_MONTHS = (
    r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?"
    r"|sept?(?:ember)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)"
)
_TIME = r"(?:\s*(?:at\s+|,\s*|T)?\d{1,2}(?::\d{2}){0,2}(?:\s*[ap]\.?m\.?)?)?"
_TIME_REQUIRED = r"\d{1,2}(?::\d{2}){1,2}|\d{1,2}\s*[ap]\.?m\.?"
# Candidate dates in free text, on RE2 (linear time): ISO, "June 10th, 2024", "10 June 2024",
# "15.05.2024", "05/15/2024", each with an optional time.
_DATE_RE = compile_regex(
    r"\b(?:\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?"
    rf"|{_MONTHS}\.?\s+\d{{1,2}}(?:st|nd|rd|th)?,?\s+\d{{4}}{_TIME}"
    rf"|\d{{1,2}}(?:st|nd|rd|th)?\s+(?:of\s+)?{_MONTHS}\.?,?\s+\d{{4}}{_TIME}"
    rf"|\d{{1,2}}[./]\d{{1,2}}[./]\d{{4}}{_TIME})",
    ignore_case=True,
)
_HAS_TIME_RE = re.compile(rf"(?i)(?:T|\s|^)(?:{_TIME_REQUIRED})")
_DURATION_RE = re.compile(
    r"P(?!$)(?:(?P<years>\d+)Y)?(?:(?P<months>\d+)M)?(?:(?P<weeks>\d+)W)?(?:(?P<days>\d+)D)?"
    r"(?:T(?=\d)(?:(?P<hours>\d+)H)?(?:(?P<minutes>\d+)M)?(?:(?P<seconds>\d+)S)?)?"
)
_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
# strftime directives that depend only on the value (no locale-dependent %c, %x, %X).
_FORMAT_DIRECTIVES = set("aAbBdHIjmMpSyYzZ%fGuVw")
#: The environment variable naming the deployment's time zone for `clock` (IANA; default UTC).
TIMEZONE_ENV = "PTE_TIMEZONE"
#: A sentinel default: any field dateutil fills from it was missing in the text.
_NO_DEFAULT = dt.datetime(1, 1, 1)


def _zone(name: str) -> dt.tzinfo:
    if name.upper() in ("UTC", "Z"):
        return dt.UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"unknown time zone {name!r} (use an IANA name such as 'Europe/Berlin' or 'UTC')"
        ) from None


def _has_time(text: str) -> bool:
    return bool(_HAS_TIME_RE.search(text.strip()))


def _parse(text: str, dayfirst: bool = False) -> tuple[dt.datetime, bool]:
    """(the datetime, whether the text gave a time of day). Missing year/month/day is an error."""
    stripped = text.strip()
    try:
        iso = dt.datetime.fromisoformat(stripped.replace("Z", "+00:00"))
        return iso, "T" in stripped or " " in stripped
    except ValueError:
        pass
    # Dotted numeric dates (15.05.2024) are day-first wherever they are written.
    day_first = dayfirst or bool(re.fullmatch(r"\d{1,2}\.\d{1,2}\.\d{4}.*", stripped))
    try:
        first = date_parser.parse(stripped, dayfirst=day_first, default=_NO_DEFAULT)
        second = date_parser.parse(stripped, dayfirst=day_first, default=dt.datetime(2, 2, 2))
    except (ValueError, OverflowError) as exc:
        raise ValueError(f"cannot read a date/time in {text!r}: {exc}") from None
    missing = [name for name in ("year", "month", "day") if getattr(first, name) != getattr(second, name)]
    if missing:
        raise ValueError(f"{text!r} has no {' or '.join(missing)}: a date needs year, month and day")
    return first, _has_time(stripped)


def _iso(value: dt.datetime, with_time: bool) -> str:
    return value.isoformat() if with_time else value.date().isoformat()


def _value(text: str) -> dt.datetime:
    return _parse(text)[0]


def _duration(text: str) -> relativedelta:
    found = _DURATION_RE.fullmatch(text.strip().upper())
    if not found:
        raise ValueError(f"{text!r} is not an ISO 8601 duration such as 'PT1H30M', 'P2D' or 'P1M'")
    parts = {k: int(v) for k, v in found.groupdict().items() if v}
    return relativedelta(**parts)


def _duration_text(seconds: int) -> str:
    sign = "-" if seconds < 0 else ""
    days, rest = divmod(abs(seconds), 86_400)
    hours, rest = divmod(rest, 3_600)
    minutes, secs = divmod(rest, 60)
    time = "".join(f"{n}{u}" for n, u in ((hours, "H"), (minutes, "M"), (secs, "S")) if n)
    return sign + "P" + (f"{days}D" if days else "") + (f"T{time}" if time else "" if days else "T0S")


class DateTime(BaseModel):
    value: str
    date: str
    time: str | None
    weekday: str


class DateList(BaseModel):
    values: list[str]
    count: int


class Text(BaseModel):
    text: str


class Duration(BaseModel):
    iso: str = Field(
        description="ISO 8601 duration, e.g. 'PT1H30M' (negative as '-PT1H' when end is earlier)."
    )
    seconds: int
    minutes: int
    hours: int
    days: int


class Bounds(BaseModel):
    start: str
    end: str


def _describe(value: dt.datetime, with_time: bool) -> DateTime:
    return DateTime(
        value=_iso(value, with_time),
        date=value.date().isoformat(),
        time=value.time().isoformat() if with_time else None,
        weekday=_WEEKDAYS[value.weekday()],
    )


@tool(provenance="derived")
def parse_datetime(text: str, dayfirst: bool = False, timezone: str | None = None) -> DateTime:
    """A date or date-time in any common format; dayfirst: "03/04/2024" is 3 April; `timezone`
    (IANA) for one without an offset. Without year, month or day: an error.
    """
    value, with_time = _parse(text, dayfirst)
    if timezone is not None and value.tzinfo is None:
        value, with_time = value.replace(tzinfo=_zone(timezone)), True
    return _describe(value, with_time)


@tool(provenance="derived")
def extract_dates(text: str, dayfirst: bool = False) -> DateList:
    """Dates and date-times in free text as ISO 8601, in order."""
    values = []
    for found in _DATE_RE.finditer(text):
        try:
            value, with_time = _parse(found.group(0), dayfirst)
        except ValueError:
            continue  # e.g. "31.02.2024": looks like a date, is none
        values.append(_iso(value, with_time))
    return DateList(values=values, count=len(values))


@tool(provenance="derived")
def format_datetime(value: str, pattern: str) -> Text:
    """An ISO 8601 value formatted by a strftime `pattern` (not %c, %x, %X)."""
    directives = re.findall(r"%(.)", pattern.replace("%%", ""))
    bad = sorted(
        {d for d in directives if d not in _FORMAT_DIRECTIVES}
        | ({"%"} if pattern.replace("%%", "").endswith("%") else set())
    )
    if bad:
        raise ValueError(f"pattern {pattern!r} uses unsupported directives {bad}")
    return Text(text=_value(value).strftime(pattern))


@tool(provenance="derived")
def add_duration(value: str, duration: str, subtract: bool = False) -> DateTime:
    """Add (subtract: take away) an ISO 8601 duration ("P1M": calendar months); a date stays a date
    unless the duration has a time part.
    """
    parsed, with_time = _parse(value)
    delta = _duration(duration)
    result = parsed - delta if subtract else parsed + delta
    with_time = with_time or bool(delta.hours or delta.minutes or delta.seconds)
    return _describe(result, with_time)


@tool(provenance="derived")
def time_between(start: str, end: str) -> Duration:
    """From `start` to `end` (both with a time zone, or neither): iso "PT1H30M", the others whole
    (truncated).
    """
    a, b = _value(start), _value(end)
    if (a.tzinfo is None) != (b.tzinfo is None):
        raise ValueError("one value has a time zone and the other not: give both or neither")
    seconds = int((b - a).total_seconds())
    sign = -1 if seconds < 0 else 1
    return Duration(
        iso=_duration_text(seconds),
        seconds=seconds,
        minutes=sign * (abs(seconds) // 60),
        hours=sign * (abs(seconds) // 3_600),
        days=sign * (abs(seconds) // 86_400),
    )


@tool(provenance="derived")
def day_bounds(value: str) -> Bounds:
    """The first and last second of `value`'s day, its zone kept."""
    parsed = _value(value)
    start = parsed.replace(hour=0, minute=0, second=0, microsecond=0)
    return Bounds(start=start.isoformat(), end=start.replace(hour=23, minute=59, second=59).isoformat())


@tool(provenance="derived")
def convert_timezone(
    value: str,
    timezone: Annotated[str, Field(description="IANA name, e.g. 'Europe/Berlin', or 'UTC'.")],
    assume: str | None = None,
) -> DateTime:
    """A date-time in another `timezone` (IANA or "UTC"); a value without an offset is read in
    `assume`.
    """
    parsed = _value(value)
    if parsed.tzinfo is None:
        if assume is None:
            raise ValueError(f"{value!r} has no time zone: say which one it is in with assume")
        parsed = parsed.replace(tzinfo=_zone(assume))
    return _describe(parsed.astimezone(_zone(timezone)), True)


class Now(BaseModel):
    today: str = Field(description="Today's date, 'YYYY-MM-DD', in `timezone`.")
    now: str
    timezone: str
    weekday: str


@tool(effect="read", provenance="trusted")
def clock(timezone: str | None = None) -> Now:
    """The current date and time in `timezone` (IANA; default: the deployment's). Use it for
    "today" and dates relative to it; never guess the date from data.
    """
    name = timezone or os.environ.get(TIMEZONE_ENV) or "UTC"
    current = dt.datetime.now(_zone(name)).replace(microsecond=0)
    return Now(
        today=current.date().isoformat(),
        now=current.isoformat(),
        timezone=name,
        weekday=_WEEKDAYS[current.weekday()],
    )
