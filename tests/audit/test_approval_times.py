"""An approval's times are ASCII ISO-8601 (review of #37).

`_TIME_RE` used Python's ``\\d``, which matches every script's decimal digits, and `strptime`
reads them: an approval ``at`` or ``expires`` of ``٢٠٢٦-11-02T09:30:00Z`` (Arabic-Indic digits)
was accepted and expired on 2 November 2026, while the Node verifier, the audit schema's
timestamps and anyone reading the store as ASCII see no such time. Refused now, by name.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pte.audit import Approval, ProcedureApproval
from tests._other_digits import with_a_digit_replaced

HASH = "ab" * 32
TIMES = st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2099, 12, 31)).map(
    lambda when: (
        when.strftime("%Y-%m-%dT%H:%M:%S") + ("Z" if when.microsecond % 2 else f".{when.microsecond:06d}Z")
    )
)


def _approval(**times: str) -> Approval:
    fields: dict[str, Any] = {
        "plan_hash": HASH,
        "catalogue": HASH,
        "by": "ann",
        "at": "2026-11-01T09:30:00Z",
        "expires": "2026-11-02T09:30:00Z",
        "run": "run-1",
    }
    return Approval(**{**fields, **times})


def _procedure_approval(**times: str) -> ProcedureApproval:
    fields: dict[str, Any] = {
        "procedure": "pay_supplier",
        "version": HASH,
        "catalogue": HASH,
        "by": "ann",
        "at": "2026-11-01T09:30:00Z",
        "expires": "2026-11-02T09:30:00Z",
    }
    return ProcedureApproval(**{**fields, **times})


@given(
    TIMES.flatmap(lambda t: st.tuples(st.just(t), with_a_digit_replaced(t))),
    st.sampled_from(["at", "expires"]),
)
def test_a_time_in_other_digits_is_refused_by_name(times: tuple[str, str], name: str) -> None:
    ascii_time, other = times
    _approval(**{name: ascii_time})  # the same time in ASCII digits is one
    _procedure_approval(**{name: ascii_time})
    for make in (_approval, _procedure_approval):
        with pytest.raises(ValueError, match=f"^{name} must be an ISO-8601 UTC time"):
            make(**{name: other})


def test_an_approval_in_arabic_indic_digits_does_not_expire_on_its_date() -> None:
    with pytest.raises(ValueError, match="expires must be an ISO-8601 UTC time"):
        _approval(expires="\u0662\u0660\u0662\u0666-11-02T09:30:00Z")
    assert _approval().expired(datetime(2026, 11, 2, 9, 30, tzinfo=UTC))
