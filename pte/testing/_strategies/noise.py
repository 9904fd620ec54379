"""Planner noise: `planner_text` and `json_values`, what a confused or adversarial LLM returns."""

from __future__ import annotations

import functools
import json
from typing import Any

from hypothesis import strategies as st
from hypothesis.strategies import DrawFn, SearchStrategy

from pte.testing._strategies.base import (
    _KEYS,
    _TEXT,
    Doc,
    _plain_json,
)

__all__ = ["json_values", "planner_text"]

# --- noise ----------------------------------------------------------------------------------------

_FRAGMENTS = [
    "{",
    "}",
    "[",
    "]",
    ":",
    ",",
    '"',
    " ",
    "\n",
    '"pte_plan"',
    '"1"',
    '"steps"',
    '"id"',
    '"tool"',
    '"args"',
    '"after"',
    '"result"',
    '"$ref"',
    '"a"',
    '"a/0/x"',
    '"calculator"',
    "null",
    "true",
    "false",
    "0",
    "-0",
    "1e999",
    "-1e999",
    "1E400",
    "9" * 400,
    "0.1",
    "NaN",
    "Infinity",
    '"\\ud800"',
    '"\\udc00\\ud800"',
    '"\\u0000"',
    "\\",
    "```json",
    "```",
    "\ufeff",
    "'",
]


@functools.cache
def json_values() -> SearchStrategy[Any]:
    """Arbitrary JSON documents: scalars (huge integers, floats, any text), lists and objects.

    Object keys favour the plan vocabulary (``pte_plan``, ``steps``, ``$ref`` ...) so that
    values often come close to plans, references and near-references.
    """
    keys = st.one_of(
        st.sampled_from(["pte_plan", "steps", "id", "tool", "args", "after", "result", "$ref", "a", "days"]),
        st.text(max_size=8),
    )
    leaves = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=20),
        st.sampled_from(["1", "a", "a/b", "calculator", "inv/amounts", "a/~2", "A"]),
    )
    return st.recursive(
        leaves,
        lambda children: st.one_of(
            st.lists(children, max_size=4), st.dictionaries(keys, children, max_size=4)
        ),
        max_leaves=30,
    )


@functools.cache
def _plan_shaped() -> SearchStrategy[Doc]:
    """Documents shaped like plans over no particular catalogue (random tools, refs, after)."""
    ids = st.sampled_from(["a", "b", "c", "inv", "total"])
    value = st.recursive(
        st.one_of(_plain_json(1), ids.map(lambda i: {"$ref": i}), ids.map(lambda i: {"$ref": i + "/value"})),
        lambda children: st.one_of(
            st.lists(children, max_size=3), st.dictionaries(_KEYS, children, max_size=3)
        ),
        max_leaves=8,
    )
    step = st.fixed_dictionaries(
        {
            "id": ids,
            "tool": st.sampled_from(
                ["calculator", "list_overdue_invoices", "send_reminder", "nope", "shell"]
            ),
            "args": st.dictionaries(_KEYS, value, max_size=3),
        },
        optional={"after": st.lists(ids, max_size=2, unique=True)},
    )
    return st.fixed_dictionaries(
        {"pte_plan": st.just("1"), "steps": st.lists(step, min_size=1, max_size=5)},
        optional={"result": value},
    )


@st.composite
def _mangled(draw: DrawFn) -> str:
    doc = draw(_plan_shaped())
    text = json.dumps(doc, indent=draw(st.sampled_from([None, 2])), ensure_ascii=draw(st.booleans()))
    kind = draw(st.sampled_from(["plain", "fenced", "prose", "truncated", "spliced"]))
    if kind == "fenced":
        return f"```json\n{text}\n```"
    if kind == "prose":
        return draw(_TEXT) + "\nHere is the plan:\n" + text + "\n" + draw(_TEXT)
    if kind == "truncated":
        return text[: draw(st.integers(0, len(text)))]
    if kind == "spliced":
        at = draw(st.integers(0, len(text)))
        return text[:at] + draw(st.sampled_from(_FRAGMENTS)) + text[at:]
    return text


@st.composite
def _deep(draw: DrawFn) -> str:
    levels = draw(st.integers(1, 3000))
    opener, closer = draw(st.sampled_from([("[", "]"), ('{"a":', "}"), ('{"$ref":', "}")]))
    inner = draw(st.sampled_from(["1", '"x"', '{"$ref": 5}', ""]))
    body = opener * levels + inner + closer * draw(st.integers(0, levels))
    return draw(
        st.sampled_from(
            [
                body,
                '{"pte_plan":"1","steps":[{"id":"a","tool":"calculator","args":{"x":' + body + "}}]}",
                '{"pte_plan":"1","steps":[{"id":"a","tool":"calculator","args":{}}],"result":' + body + "}",
            ]
        )
    )


@functools.cache
def planner_text() -> SearchStrategy[str]:
    """Arbitrary planner output: what a confused, truncated or adversarial LLM might return.

    Random text (lone surrogates included), JSON-ish fragments, fenced ``json`` blocks,
    prose around plans, truncated and spliced plans, huge numbers, NaN/Infinity, deep
    nesting, and serialised `json_values`.
    """
    return st.one_of(
        st.text(alphabet=st.characters(exclude_categories=())),
        st.lists(st.sampled_from(_FRAGMENTS), max_size=40).map("".join),
        _mangled(),
        _deep(),
        json_values().map(lambda v: json.dumps(v, ensure_ascii=False)),
        json_values().map(json.dumps),
    )
