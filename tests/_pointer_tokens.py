"""Reference tokens for the properties that every reader of a JSON-pointer token as an array
index agrees with the one rule, `pte._core.array_index` (RFC 6901: ``0``, or an ASCII digit 1-9
then ASCII digits): the indices and the forms around them that are not one.

Shared by tests/core, tests/plan, tests/catalogue, tests/policy and tests/replay (review of #37:
the check was written at eight places, some taking ``01`` for ``1``).
"""

from __future__ import annotations

import sys

from hypothesis import strategies as st

#: What a model, a schema or a log might write where an index goes.
EDGE_TOKENS = [
    "0",
    "1",
    "2",
    "10",
    "00",
    "01",
    "007",
    "\u0663",  # ARABIC-INDIC DIGIT THREE: int() reads it as 3
    "1\u0663",
    "\uff11",  # FULLWIDTH DIGIT ONE
    "\u00b2",  # SUPERSCRIPT TWO: isdigit, but int() refuses it
    "+1",
    "-0",
    "-1",
    " 1",
    "1 ",
    "1\n",
    "1_0",
    "1.0",
    "1e2",
    "0x1",
    "",
    "9" * 18,
    "9" * 19,
    str(sys.maxsize),
    str(2**64),
    "9" * 5000,  # beyond int()'s 4300 digits
]

#: Any token but ``*`` (the for_each element, not an index).
index_tokens = st.one_of(
    st.sampled_from(EDGE_TOKENS),
    st.integers(min_value=0, max_value=10**30).map(str),
    st.integers(min_value=0, max_value=30).map(lambda n: "0" + str(n)),
    st.text(alphabet=st.sampled_from("0123456789\u0663\u00b2+- ."), max_size=5),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=5),  # no lone surrogates,
).filter(lambda token: token != "*")
