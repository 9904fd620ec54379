"""A schema's `pattern` is read as ECMA-262 reads it: ``\\d \\D \\w \\W \\b \\B`` are ASCII.

Found in the review of #37: the compiled validator (``jsonschema-rs``) runs a pattern with
lookaround on ``fancy-regex`` as written, where ``\\d`` is any script's decimal digit, and never
translates ``\\b``. `Decimal` parameters carry such a pattern (`DECIMAL_STRING_PATTERN`), so a
model's ``"1\\u0660\\u0660"`` (ARABIC-INDIC zeros look like dots) was a valid amount, which
pydantic's `Decimal` read as 100. Python's `re` with ``re.ASCII`` reads these escapes as ECMA-262
does (with or without its ``u`` flag): the properties hold tool validation to it, over patterns
with and without lookaround, for tools declared in Python and from JSON Schema (importers).
Each fails before the fix.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from pydantic import Field

from pte import PlanRejected, ReasonCode, Registry, compile_plan, tool

# private: the explaining validator and its pattern test, and the rewrite itself (its edge cases)
from pte._core import ExplainingValidator, ecma_pattern, ecma_schema, pattern_matcher
from pte.catalogue import ToolSpec, tool_from_schema

#: Characters a Unicode-aware engine reads as digits or word characters and ECMA-262 does not:
#: ARABIC-INDIC, DEVANAGARI and FULLWIDTH digits, LONG S and KELVIN SIGN (which fold to ASCII
#: letters), a Latin letter with an accent, SHARP S.
NON_ASCII = "\u0660\u0663\u0967\uff10\uff11\u017f\u212a\u00e9\u00df"
ALPHABET = "az_Z09-]\\ " + NON_ASCII

_sets = st.sampled_from(["\\d", "\\D", "\\w", "\\W"])
_literals = st.sampled_from(["a", "0", "_", "-", "\\\\", "\\\\d", "\\-", "\\]", "\u0660", "\u00e9"])
_class_items = st.one_of(
    _sets, st.sampled_from(["a", "9", "_", "0-5", "a-f", "\\]", "\\\\", "\\-", "\u0663"])
)
_classes = st.builds(
    lambda negated, items: "[" + ("^" if negated else "") + "".join(items) + "]",
    st.booleans(),
    st.lists(_class_items, min_size=1, max_size=4),
)
_quantifiers = st.sampled_from(["", "", "*", "+", "?", "{2}", "{1,3}"])
_pieces = st.one_of(
    st.tuples(st.one_of(_sets, _literals, _classes), _quantifiers).map("".join),
    st.sampled_from(["\\b", "\\B"]),
)
_bodies = st.lists(_pieces, min_size=1, max_size=4).map("".join)
#: A lookahead sends a pattern to the backtracking engine (as the decimal pattern's does).
patterns = st.builds(
    lambda start, lookahead, body, end: start + lookahead + body + end,
    st.sampled_from(["", "^"]),
    st.sampled_from(["", "", "(?=.)", "(?!x)"]),
    _bodies,
    st.sampled_from(["", "$"]),
)
#: Not empty: Python before 3.14 never matches ``\\B`` in an empty text, ECMA-262 does (a corner below).
texts = st.text(alphabet=ALPHABET, min_size=1, max_size=6)


def _ecma(pattern: str, text: str) -> bool:
    return re.search(pattern, text, re.ASCII) is not None


def _schema_tool(pattern: str) -> ToolSpec:
    return tool_from_schema(
        "label",
        description="Store a label.",
        input_schema={
            "type": "object",
            "properties": {
                "label": {"type": "string", "pattern": pattern},
                # A third party's map keyed by pattern (what an importer brings in).
                "tags": {
                    "type": "object",
                    "patternProperties": {pattern: True},
                    "additionalProperties": False,
                },
            },
            "additionalProperties": False,
        },
        output_schema={"type": "string", "pattern": pattern},
        func=lambda args: args.get("label", ""),
    )


def _plan(label: str) -> str:
    steps = [{"id": "store_label", "tool": "label", "args": {"label": label}}]
    return json.dumps({"pte_plan": "1", "steps": steps, "result": {"$ref": "store_label"}})


# A third of the profile's examples (a tool built for each costs ~3 ms), each with up to 6 texts.
@settings(max_examples=max(60, settings().max_examples // 3))
@given(patterns, st.lists(texts, min_size=1, max_size=6))
def test_a_tool_schema_pattern_reads_as_ecma_262(pattern: str, samples: list[str]) -> None:
    try:
        re.compile(pattern, re.ASCII)
    except re.error:
        assume(False)
    spec = _schema_tool(pattern)
    registry = Registry([spec])
    for text in samples:
        expected = _ecma(pattern, text)
        assert (spec.args_error({"label": text}) is None) is expected, (pattern, text)
        assert spec.param_is_valid("label", text) is expected, (pattern, text)
        assert pattern_matcher(pattern)(text) is expected, (pattern, text)  # what explains a rejection
        assert (spec.args_error({"tags": {text: 1}}) is None) is expected, (pattern, text)
        assert spec.param_is_valid("tags", {text: 1}) is expected, (pattern, text)
        # The pure-Python validator decides where no compiled one can (compile's literals beside
        # references): it reads patternProperties' names the same way.
        assert ExplainingValidator(spec.input_schema).is_valid({"label": text}) is expected
        assert ExplainingValidator(spec.input_schema).is_valid({"tags": {text: 1}}) is expected
        try:
            spec.validate_output(text)
            output_valid = True
        except Exception:
            output_valid = False
        assert output_valid is expected, (pattern, text)
        try:
            compile_plan(_plan(text), registry)
            compiled = True
        except PlanRejected as rejected:
            assert rejected.reason is ReasonCode.INVALID_ARGS, rejected
            compiled = False
        assert compiled is expected, (pattern, text)


# pydantic's own regex engine refuses lookaround in Field(pattern=...): these are plain patterns.
@pytest.mark.parametrize(
    ("pattern", "valid", "invalid"),
    [
        ("^\\d+$", "100", "1\u0660\u0660"),
        ("^\\w+$", "k_1", "\u212a"),
        ("^[\\w-]+$", "a-b", "\u017f"),
        ("\\bpay\\b", "\u00e9pay", "spay"),  # \b: a boundary between ASCII word characters
        ("\\Bay", "pay", "\uff10ay"),
        ("^[^\\W\\d]+$", "abc", "\u00e9"),
    ],
)
def test_a_python_tool_with_a_field_pattern_reads_it_as_ecma_262(
    pattern: str, valid: str, invalid: str
) -> None:
    def tag_text(text: str) -> str:
        """Tag a text."""
        return text

    # The annotation as an object: this module's annotations are strings (no closure over pattern).
    tag_text.__annotations__["text"] = Annotated[str, Field(pattern=pattern)]
    tag = Registry([tool(tag_text)])["tag_text"]
    assert tag.args_error({"text": valid}) is None
    error = tag.args_error({"text": invalid})
    assert error is not None and "does not match" in error.message


@pytest.mark.parametrize(
    ("pattern", "matches", "misses"),
    [
        ("^\\\\d$", "\\d", "1"),  # an escaped backslash, then a d
        ("^[]a]$", None, "a"),  # ECMA: [] matches nothing (Python and Rust: ] or a)
        ("^[\\b]$", "\b", "b"),  # a backspace in a class
        ("^[[a]$", "[", "]"),  # [ is a literal in a class
        ("^[a&&b]$", "&", "c"),  # so are && and ~~ (set operations to the Rust engine)
        ("^\\B$", "", "a"),  # no word character on either side of the empty text
        ("^\\s$", "\ufeff", "\u0085"),  # ECMA's whitespace, on either engine
        ("^\\s$(?!x)", "\u3000", "\u0085"),
        ("^\\S$(?!x)", "\u0085", "\ufeff"),
    ],
)
# Python's re (the schema check's 'regex' format) warns of [[ and && as future set syntax.
@pytest.mark.filterwarnings("ignore:Possible (nested set|set intersection):FutureWarning")
def test_ecma_only_corners_of_a_pattern(pattern: str, matches: str | None, misses: str) -> None:
    spec = _schema_tool(pattern)
    if matches is not None:
        assert spec.param_is_valid("label", matches) and pattern_matcher(pattern)(matches)
    assert not spec.param_is_valid("label", misses) and not pattern_matcher(pattern)(misses)


def test_the_rewrite_leaves_the_callers_schema_and_data_alone() -> None:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "pattern": "^\\d$"},  # a parameter named pattern
            "note": {"const": {"pattern": "\\d"}, "default": {"pattern": "\\w"}},
        },
        "patternProperties": {"^x\\d$": {"pattern": "\\w"}},
        "$defs": {"code": {"anyOf": [{"pattern": "\\d"}, {"items": {"pattern": "\\W"}}]}},
    }
    before = json.dumps(schema)
    rewritten = ecma_schema(schema)
    assert json.dumps(schema) == before
    assert rewritten["properties"]["pattern"]["pattern"] == "^[0-9]$"
    assert rewritten["properties"]["note"] == {"const": {"pattern": "\\d"}, "default": {"pattern": "\\w"}}
    assert rewritten["patternProperties"] == {"^x[0-9]$": {"pattern": "[A-Za-z0-9_]"}}
    code = rewritten["$defs"]["code"]["anyOf"]
    assert code == [{"pattern": "[0-9]"}, {"items": {"pattern": "[^A-Za-z0-9_]"}}]
    assert ecma_pattern("a\\.b\\\\") == "a\\.b\\\\"  # other escapes are kept as written


def test_what_a_catalogue_shows_and_fingerprints_keeps_the_pattern_as_written() -> None:
    spec = _schema_tool("^\\d+$")
    assert spec.input_schema["properties"]["label"]["pattern"] == "^\\d+$"
    assert spec.describe()["input_schema"]["properties"]["label"]["pattern"] == "^\\d+$"
    assert json.dumps(spec.catalogue_entry()).count("^\\\\d+$") >= 1
