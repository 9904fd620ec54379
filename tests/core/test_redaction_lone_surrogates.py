"""Redaction of text holding a lone surrogate (review of #37).

Python text can hold a surrogate code point that no encoding takes: JSON's ``"\\ud800"``
decoded (a tampered audit log, a tool's output), a file name's undecodable bytes read with
``surrogateescape``. The redaction rules run on RE2, which takes UTF-8 only, so
`Redactor.redact_text` raised UnicodeEncodeError on such text, and with it every `pte` command
that printed it (``pte audit show`` of a tampered log ended "internal error"). The rules now
search such text with each surrogate read as U+FFFD, one code point for one, and the text
keeps its surrogates (what shows it decides: the CLI shows U+FFFD, the audit writer refuses
the record by name).
"""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from pte.audit import Redactor

REDACTED = "[REDACTED]"
# Tokens the default rules find (each a shape the stock rule set redacts), and lone surrogates.
GITHUB_TOKEN = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
SURROGATES = ["\ud800", "\udbff", "\udc00", "\udfff", "\udcff"]
_SURROGATE = re.compile("[\ud800-\udfff]")


def _as_replacement(text: str) -> str:
    """`text` with each surrogate code point read as U+FFFD (one for one: the same offsets)."""
    return _SURROGATE.sub("\ufffd", text)


def _redactor() -> Redactor:
    redactor = Redactor()
    redactor.add_secret("hunter2-registered")
    return redactor


pieces = st.one_of(
    st.text(max_size=12),
    st.sampled_from(SURROGATES),
    st.just(GITHUB_TOKEN),
    st.just("password="),
    st.just("hunter2-registered"),
)
texts = st.lists(pieces, max_size=8).map("".join)


@given(texts)
def test_redaction_never_raises_and_reads_a_surrogate_as_the_replacement_character(text: str) -> None:
    redacted = _redactor().redact_text(text)
    # The same findings as in the text with U+FFFD in each surrogate's place, at the same places.
    assert _as_replacement(redacted) == _redactor().redact_text(_as_replacement(text))
    # The surrogates outside what was redacted are kept: showing them is the caller's choice.
    assert "hunter2-registered" not in redacted and GITHUB_TOKEN not in redacted


@given(st.sampled_from(SURROGATES), st.sampled_from(["", " ", "token "]))
def test_a_token_beside_a_surrogate_is_still_redacted(surrogate: str, gap: str) -> None:
    for text in (f"{surrogate}{gap}{GITHUB_TOKEN}", f"{GITHUB_TOKEN}{gap}{surrogate}"):
        redacted = Redactor().redact_text(text)
        assert GITHUB_TOKEN not in redacted and REDACTED in redacted
        assert surrogate in redacted


def test_a_value_holding_a_surrogate_is_walked_without_an_error() -> None:
    value = {"note": "x\udc00", "password": "s3cret\ud800", "list": [f"\udfff{GITHUB_TOKEN}"]}
    assert Redactor().redact(value) == {
        "note": "x\udc00",
        "password": REDACTED,
        "list": [f"\udfff{REDACTED}"],
    }
