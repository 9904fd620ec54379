"""A record's ``ts`` from clocks that hand out a `datetime` subclass (review of #37).

`format_timestamp` writes a UTC moment through orjson, which refuses a subclass of `datetime`
(``Type is not JSON serializable``). Such moments are common: pendulum's and arrow's
datetimes are subclasses, and freezegun and similar libraries replace the `datetime` a module
imported with a subclass, so `AuditLog`'s own clock hands one out. The timestamp must be the
same text as for the plain `datetime`, and a write must not fail with a bare TypeError.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from pte import AuditLog

# private: the module whose `datetime` a frozen-time library replaces
from pte._audit import _writer

# private: the clock's formatting of a moment
from pte._audit._writer import format_timestamp
from tests.audit_runs import begun


class SubclassedDatetime(datetime):
    """What pendulum, arrow or a frozen-time library hands out: a subclass of `datetime`."""


def _as_subclass(moment: datetime) -> SubclassedDatetime:
    return SubclassedDatetime(
        moment.year,
        moment.month,
        moment.day,
        moment.hour,
        moment.minute,
        moment.second,
        moment.microsecond,
        tzinfo=moment.tzinfo,
    )


@given(st.datetimes(timezones=st.just(UTC)))
@example(datetime(2026, 11, 29, 14, 0, 0, 123456, tzinfo=UTC))
def test_a_datetime_subclass_is_formatted_as_the_datetime_it_equals(moment: datetime) -> None:
    assert format_timestamp(_as_subclass(moment)) == format_timestamp(moment)


def test_the_logs_own_clock_writes_under_a_library_that_subclasses_datetime(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # What freezegun does to every module that imported `datetime` (with a moment that has
    # microseconds, as a ticking or real clock almost always does).
    class Ticking(SubclassedDatetime):
        @classmethod
        def now(cls, tz: object = None) -> Ticking:
            return cls(2026, 11, 29, 14, 0, 0, 654321, tzinfo=UTC)

    monkeypatch.setattr(_writer, "datetime", Ticking)
    log = begun(AuditLog())
    assert log.records[-1]["ts"] == "2026-11-29T14:00:00.654321Z"
