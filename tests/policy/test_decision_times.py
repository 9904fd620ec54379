"""The time of an endorsement or approval is written in ASCII digits (review of #37).

Both checked their ``at`` with a pattern of ``\\d``, which in Python matches any script's decimal
digits. An endorsement's time is later read by `datetime.fromisoformat`, which takes only
ASCII digits: a decision whose ``at`` was written in, say, Arabic-Indic digits was accepted
when made and raised a bare ValueError when a resumed run compared it with an expired pause.
Such a time is now refused where the decision is made, as any malformed time is.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pte.policy import Endorsement

#: Decimal digits of scripts other than ASCII that Python's ``\\d`` matches, 0 to 9 each.
_ZEROS = [0x0660, 0x06F0, 0x0966, 0x09E6, 0x0E50, 0xFF10, 0x1D7CE]


def _in_script(text: str, zero: int) -> str:
    return "".join(chr(zero + int(c)) if c.isascii() and c.isdigit() else c for c in text)


def _fields(at: str) -> dict[str, Any]:
    return {
        "run": "r1",
        "step_id": "pay",
        "element": None,
        "value_hash": "a" * 64,
        "decision": "endorsed",
        "by": "alice",
        "at": at,
    }


def test_an_ascii_time_is_accepted() -> None:
    assert Endorsement(**_fields("2026-11-01T09:30:00Z")).at == "2026-11-01T09:30:00Z"


@given(st.sampled_from(_ZEROS), st.sampled_from(["2026-11-01T09:30:00Z", "2026-11-01T09:30:00.123456Z"]))
def test_an_endorsement_time_in_other_digits_is_refused_when_made(zero: int, at: str) -> None:
    with pytest.raises(ValueError, match="at must be an ISO-8601 UTC time"):
        Endorsement(**_fields(_in_script(at, zero)))
