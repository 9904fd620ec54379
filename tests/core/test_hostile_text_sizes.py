"""`replace_text` and `join_text` check the result length before building it (issue 23).

A 40 KB plan (40,000 one-character matches, each replaced by a long text) made
`replace_text` build a 381 MB string before refusing it. The bound is now computed from the
inputs' lengths; the memory a refused call takes is measured with tracemalloc.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pte import load_pack
from tests._packs import caller

text = caller("text")
registry = load_pack("text")
MAX = 1_000_000  # tools/text.py MAX_TEXT_LENGTH


def _peak(call: Callable[[], Any]) -> tuple[int, BaseException | None]:
    tracemalloc.start()
    tracemalloc.reset_peak()
    try:
        call()
        error = None
    except Exception as exc:
        error = exc
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak, error


@pytest.mark.parametrize("ignore_case", [False, True])
def test_replace_text_refuses_an_oversized_result_before_building_it(ignore_case: bool) -> None:
    args = {"text": "a" * 40_000, "old": "a", "new": "b" * 10_000, "ignore_case": ignore_case}
    spec = registry["replace_text"]
    peak, error = _peak(lambda: spec.invoke(args))
    assert error is not None and "would exceed 1000000 characters" in str(error)
    assert peak < 8_000_000, peak  # was 381 MB: the whole result, then the refusal


def test_join_text_refuses_an_oversized_result_before_building_it() -> None:
    args = {"values": ["x" * 10_000] * 200, "separator": "-" * 100_000}
    spec = registry["join_text"]
    peak, error = _peak(lambda: spec.invoke(args))
    assert error is not None and "would exceed 1000000 characters" in str(error)
    assert peak < 8_000_000, peak


@given(
    body=st.text(alphabet="aAbB", max_size=40),
    old=st.text(alphabet="aAbB", min_size=1, max_size=3),
    new=st.text(alphabet="xy", max_size=4),
    ignore_case=st.booleans(),
)
def test_replace_text_result_is_unchanged_by_the_early_bound(
    body: str, old: str, new: str, ignore_case: bool
) -> None:
    import re

    expected = (
        re.sub(re.escape(old), lambda _: new, body, flags=re.I) if ignore_case else body.replace(old, new)
    )
    assert text("replace_text", text=body, old=old, new=new, ignore_case=ignore_case) == {"text": expected}


def test_results_at_the_bound_are_still_built() -> None:
    assert len(text("replace_text", text="a" * 1000, old="a", new="b" * 1000)["text"]) == MAX
    assert len(text("join_text", values=["a" * 499_999, "b" * 499_999], separator="--")["text"]) == MAX
