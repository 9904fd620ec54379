"""The dates pack: human and machine formats to ISO 8601, durations, differences, zones."""

from __future__ import annotations

import pytest

from tests._packs import caller

dates = caller("dates")


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("June 10th 2024 at 1 PM", "2024-06-10T13:00:00"),
        ("10 June 2024", "2024-06-10"),
        ("15.05.2024", "2024-05-15"),
        ("15.05.2024 13:00", "2024-05-15T13:00:00"),
        ("05/15/2024", "2024-05-15"),
        ("2024-05-15T15:00:00", "2024-05-15T15:00:00"),
        ("2024-05-15 15:00", "2024-05-15T15:00:00"),
        ("2024-05-15T15:00:00Z", "2024-05-15T15:00:00+00:00"),
        ("Wednesday, May 15, 2024 3:30 pm", "2024-05-15T15:30:00"),
    ],
)
def test_parse_datetime_reads_many_formats(text: str, value: str) -> None:
    assert dates("parse_datetime", text=text)["value"] == value


def test_parse_datetime_parts_dayfirst_zone_and_no_guessing() -> None:
    assert dates("parse_datetime", text="2024-05-15") == {
        "value": "2024-05-15",
        "date": "2024-05-15",
        "time": None,
        "weekday": "Wednesday",
    }
    assert dates("parse_datetime", text="03/04/2024", dayfirst=True)["value"] == "2024-04-03"
    zoned = dates("parse_datetime", text="2024-05-15 09:00", timezone="Europe/Berlin")
    assert zoned["value"] == "2024-05-15T09:00:00+02:00"
    with pytest.raises(ValueError, match="has no year"):
        dates("parse_datetime", text="June 10th")
    with pytest.raises(ValueError, match="cannot read a date"):
        dates("parse_datetime", text="whenever")
    with pytest.raises(ValueError, match="unknown time zone"):
        dates("parse_datetime", text="2024-05-15", timezone="Mars/Base")


def test_extract_dates_from_free_text_skips_impossible_dates() -> None:
    text = "Meet June 10th, 2024 at 1 PM or 2024-05-15T10:00; due 15.05.2024 13:00; not 31.02.2024."
    assert dates("extract_dates", text=text)["values"] == [
        "2024-06-10T13:00:00",
        "2024-05-15T10:00:00",
        "2024-05-15T13:00:00",
    ]


def test_format_durations_and_differences() -> None:
    assert dates("format_datetime", value="2024-05-15T15:00:00", pattern="%Y-%m-%d %H:%M") == {
        "text": "2024-05-15 15:00"
    }
    with pytest.raises(ValueError, match="unsupported directives"):
        dates("format_datetime", value="2024-05-15", pattern="%c")
    assert dates("add_duration", value="2024-01-31", duration="P1M")["value"] == "2024-02-29"
    assert (
        dates("add_duration", value="2024-05-15 13:00", duration="PT90M", subtract=True)["value"]
        == "2024-05-15T11:30:00"
    )
    assert dates("add_duration", value="2024-05-15", duration="PT1H")["value"] == "2024-05-15T01:00:00"
    with pytest.raises(ValueError, match="not an ISO 8601 duration"):
        dates("add_duration", value="2024-05-15", duration="1 hour")
    gap = dates("time_between", start="2024-05-15T12:30:00", end="2024-05-15T14:00:00")
    assert gap == {"iso": "PT1H30M", "seconds": 5400, "minutes": 90, "hours": 1, "days": 0}
    assert dates("time_between", start="2024-05-16", end="2024-05-15")["iso"] == "-P1D"
    with pytest.raises(ValueError, match="time zone"):
        dates("time_between", start="2024-05-15T10:00:00+02:00", end="2024-05-15T12:00:00")


def test_day_bounds_and_time_zones() -> None:
    assert dates("day_bounds", value="2024-05-15T13:00:00+02:00") == {
        "start": "2024-05-15T00:00:00+02:00",
        "end": "2024-05-15T23:59:59+02:00",
    }
    utc = dates("convert_timezone", value="2024-05-15T13:00:00", timezone="UTC", assume="Europe/Berlin")
    assert utc["value"] == "2024-05-15T11:00:00+00:00"
    with pytest.raises(ValueError, match="has no time zone"):
        dates("convert_timezone", value="2024-05-15T13:00:00", timezone="UTC")
