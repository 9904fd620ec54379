"""Decimal numbers written by others are bounded before they are expanded (#34).

``1e100000000`` is 11 characters of untrusted text; `pluck_numbers` wrote it in fixed point
(547 MB, a 100 MB log line) before any bound. Now digits and exponent are checked on the
text (pte._core `decimal_of_text`): a number out of bounds is not a number to the stock tools
(refused by pluck_numbers and sum_field, compared as text by filter_records), in bounded
memory. The property runs each call under tracemalloc.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import tracemalloc
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pte import Registry, load_pack

# private: the decimal bounds under test; the strict JSON reader under test; the decimal parser under test
from pte._core import MAX_DECIMAL_DIGITS, MAX_DECIMAL_EXPONENT, StrictJSONError, decimal_of_text, strict_json
from tests._other_digits import with_a_digit_replaced

#: Far above anything a bounded call allocates, far below one expansion of an out-of-bounds number.
PEAK_BYTES = 2_000_000


@pytest.fixture(scope="module")
def shaping() -> Registry:
    return load_pack("shaping")


def call(pack: Registry, name: str, **args: Any) -> Any:
    spec = pack[name]
    spec.validate_args(args)
    out = spec.invoke(args)
    spec.validate_output(out)
    return out


def within_memory(run: Callable[[], Any]) -> Any:
    tracemalloc.start()
    try:
        try:
            result: Any = run()
        except ValueError as exc:
            result = exc
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < PEAK_BYTES, f"a bounded call took {peak} bytes"
    return result


def test_the_red_team_number_is_refused_in_a_fresh_process_quickly() -> None:
    # The repro as reported, in a process of its own with a timeout: a regression fails (or
    # is killed) instead of eating the machine. Its peak memory stays that of an import.
    # Peak memory is traced around the call: the process's maxrss also counts the pages of
    # the (large) pytest worker it was forked from, which made the bound flaky.
    program = textwrap.dedent(
        """
        import sys, tracemalloc
        from pte._catalogue import load_pack
        spec = load_pack("shaping")["pluck_numbers"]
        tracemalloc.start()
        try:
            spec.invoke({"records": [{"amount": "1e100000000"}], "field": "amount"})
        except ValueError as exc:
            print("refused:", exc)
        print("peak_kb", tracemalloc.get_traced_memory()[1] // 1024)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "refused:" in done.stdout and "is not a number" in done.stdout, done.stdout
    peak_kb = int(done.stdout.split("peak_kb")[1])
    assert peak_kb < 50_000, done.stdout  # 360 MB and a 100 MB value before


def test_the_bounds_hold_on_the_text(shaping: Registry) -> None:
    assert decimal_of_text(" 12.50 ") == Decimal("12.50")
    assert decimal_of_text("1e1000") == Decimal("1e1000")  # adjusted exponent 1000: in bounds
    assert decimal_of_text("1e1001") is None
    assert decimal_of_text("1e-1001") is None
    assert decimal_of_text("1e" + "9" * 5000) is None  # an exponent too long to read as an int
    assert decimal_of_text("9" * MAX_DECIMAL_DIGITS) is not None
    assert decimal_of_text("9" * (MAX_DECIMAL_DIGITS + 1)) is None
    assert decimal_of_text("2026-10-01") is None
    with pytest.raises(ValueError, match="at most 1000 digits"):
        call(shaping, "sum_field", records=[{"x": "1e100000000"}], field="x")
    # filter_records compares a number out of bounds as text: no match, no expansion.
    kept = call(shaping, "filter_records", records=[{"x": "1e100000000"}], field="x", op="eq", value="1")
    assert kept["count"] == 0


def test_json_numbers_beyond_a_double_are_refused() -> None:
    # Python reads 1e400 as inf: the infinity strict JSON refuses as a constant.
    with pytest.raises(StrictJSONError, match="beyond a double"):
        strict_json.loads('{"amount": 1e400}')
    assert strict_json.loads("[1e300, -2.5e-300]") == [1e300, -2.5e-300]


# ASCII digits (a regex's `\d` also draws other scripts', which are not numbers: below).
_mantissas = st.from_regex(r"[+-]?([0-9]{1,30}(\.[0-9]{0,30})?|\.[0-9]{1,30})", fullmatch=True)


@settings(max_examples=300, deadline=None)
@given(
    mantissa=_mantissas,
    exponent=st.one_of(
        st.integers(MAX_DECIMAL_EXPONENT + 40, 10**15), st.integers(-(10**15), -(MAX_DECIMAL_EXPONENT + 40))
    ),
    letter=st.sampled_from("eE"),
)
def test_any_number_over_the_bound_is_refused_without_expansion(
    shaping: Registry, mantissa: str, exponent: int, letter: str
) -> None:
    text = f"{mantissa}{letter}{exponent}"
    if Decimal(mantissa).is_zero():
        return  # zero is zero whatever its exponent: in bounds, and written "0"
    assert within_memory(lambda: decimal_of_text(text)) is None
    refused = within_memory(lambda: call(shaping, "pluck_numbers", records=[{"n": text}], field="n"))
    assert isinstance(refused, ValueError) and "is not a number" in str(refused)
    kept = within_memory(
        lambda: call(shaping, "filter_records", records=[{"n": text}], field="n", op="gt", value=0)
    )
    assert isinstance(kept, ValueError) or kept["count"] == 0  # compared as text: a number against text


@settings(max_examples=300, deadline=None)
@given(mantissa=_mantissas, exponent=st.integers(-MAX_DECIMAL_EXPONENT + 40, MAX_DECIMAL_EXPONENT - 40))
def test_every_number_in_bounds_is_exact(shaping: Registry, mantissa: str, exponent: int) -> None:
    text = f"{mantissa}e{exponent}"
    out = within_memory(lambda: call(shaping, "pluck_numbers", records=[{"n": text}], field="n"))
    assert Decimal(out["values"][0]) == Decimal(text)


@given(
    st.decimals(min_value=-(10**6), max_value=10**6, places=2, allow_nan=False, allow_infinity=False)
    .map(str)
    .flatmap(with_a_digit_replaced)
)
def test_a_number_in_other_digits_is_not_a_number(shaping: Registry, text: str) -> None:
    # Review of #37: `\d` and `Decimal` read every script's digits, so "1\u0660\u0660" (Arabic-Indic
    # zeros look like dots) was the number 100 to the stock tools; ASCII digits only now.
    assert decimal_of_text(text) is None
    with pytest.raises(ValueError, match="is not a number"):
        call(shaping, "pluck_numbers", records=[{"n": text}], field="n")
