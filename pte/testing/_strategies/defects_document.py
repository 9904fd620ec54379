"""Defects of the plan document itself: ``invalid_json`` and ``schema_violation``.

Text that is not one JSON object (truncated, NaN, duplicate keys, lone surrogates,
comments ...), and JSON that does not match the plan schema (version, missing or extra
keys, bad ids and tool names, malformed ``after`` and ``$ref`` objects).
"""

from __future__ import annotations

import json
import math

from hypothesis import strategies as st
from hypothesis.strategies import DrawFn

from pte._plan import Limits
from pte.testing._strategies.base import (
    _KEYS,
    Doc,
    Json,
    _percent,
    _plain_json,
    _serialise,
)
from pte.testing._strategies.catalogue import (
    _Catalogue,
)
from pte.testing._strategies.edits import (
    _get,
    _locations,
    _set,
)
from pte.testing._strategies.valid import _Drawn

# invalid_json ------------------------------------------------------------------------------------


def _mutate_invalid_json(
    draw: DrawFn, catalogue: _Catalogue, drawn: _Drawn, limits: Limits
) -> str | Doc | None:
    doc = drawn.doc
    kind = draw(
        st.sampled_from(
            [
                "truncate",
                "trailing",
                "nan",
                "duplicate_key",
                "duplicate_step_key",
                "single_quotes",
                "not_object",
                "surrogate",
                "trailing_comma",
                "comment",
                "empty",
            ]
        )
    )
    if kind == "nan":
        step = draw(st.sampled_from(doc["steps"]))
        key = draw(st.sampled_from(sorted(step["args"]) or ["value"]))
        step["args"][key] = draw(st.sampled_from([math.nan, math.inf, -math.inf]))
        return _serialise(draw, doc, allow_nan=True)
    if kind == "surrogate":
        step = draw(st.sampled_from(doc["steps"]))
        lone = draw(st.sampled_from(["\ud800", "\udfff", "x\udc80y"]))
        step["args"][draw(st.sampled_from(["note", *sorted(step["args"])]))] = lone
        return _serialise(draw, doc)
    if kind == "duplicate_step_key":
        marker = "__pte_duplicate_step__"
        index = draw(st.integers(0, len(doc["steps"]) - 1))
        step = doc["steps"][index]
        doc["steps"][index] = marker
        text = json.dumps(doc)
        body = json.dumps(step)[1:-1]
        key = draw(st.sampled_from(sorted(step)))
        dup = f"{json.dumps(key)}: {json.dumps(step[key])}"
        return text.replace(json.dumps(marker), "{" + body + ", " + dup + "}", 1)
    text = _serialise(draw, doc)
    if kind == "truncate":
        return text.rstrip()[: draw(st.integers(0, len(text.rstrip()) - 1))]
    if kind == "trailing":
        return text + draw(st.sampled_from(["}", "]", ",", " x", "\n{}", '"', "\n```", " null"]))
    if kind == "duplicate_key":
        key = draw(st.sampled_from(sorted(doc)))
        return "{" + json.dumps(key) + ": " + json.dumps(doc[key]) + ", " + text.lstrip()[1:]
    if kind == "single_quotes":
        return text.replace('"pte_plan"', "'pte_plan'", 1)
    if kind == "not_object":
        return draw(
            st.sampled_from(["[" + text + "]", json.dumps(text), "1", "null", '"plan"', "true", "[]"])
        )
    if kind == "trailing_comma":
        stripped = text.rstrip()
        return stripped[:-1] + ",}"
    if kind == "comment":
        return draw(st.sampled_from(["// the plan\n", "/* plan */", "# plan\n"])) + text
    return draw(st.sampled_from(["", " ", "\n", "NaN", "Infinity", "-Infinity", "{", "}", "nul"]))


# schema_violation --------------------------------------------------------------------------------

_BAD_STEP_IDS = [
    "A",
    "1a",
    "a\n",
    "a-b",
    "a b",
    "",
    "x" * 65,
    "é",
    "_a",
    "Step",
    "a.b",
    "a/b",
    5,
    None,
    ["a"],
]
_BAD_TOOL_NAMES = [
    "",
    "1tool",
    "a b",
    "x" * 65,
    "tool!",
    "_tool",
    "-x",
    7,
    None,
    {"name": "calculator"},
    "tool\n",
]
_BAD_REFS: list[Json] = [
    {"$ref": 5},
    {"$ref": None},
    {"$ref": ["a"]},
    {"$ref": {"step": "a"}},
    {"$ref": "A"},
    {"$ref": ""},
    {"$ref": "1a"},
    {"$ref": "a/~2"},
    {"$ref": "a/~"},
    {"$ref": "a\n"},
    {"$ref": "a b"},
    {"$ref": "/a"},
    {"$ref": "x" * 65},
]


def _bad_ref(draw: DrawFn, doc: Doc) -> Json:
    ids = [s["id"] for s in doc["steps"]]
    target = draw(st.sampled_from(ids))
    return draw(
        st.sampled_from(
            [
                *_BAD_REFS,
                {"$ref": target, "x": 1},
                {"$ref": target, "$ref\n": target},
                {"$ref": target + "/~2"},
                {"$ref": target + "/a~"},
                {"$ref": target + "\n"},
            ]
        )
    )


def _mutate_schema_violation(
    draw: DrawFn, catalogue: _Catalogue, drawn: _Drawn, limits: Limits
) -> str | Doc | None:
    doc = drawn.doc
    steps = doc["steps"]
    step = draw(st.sampled_from(steps))
    kind = draw(
        st.sampled_from(
            [
                "version",
                "drop_top",
                "extra_top",
                "steps_type",
                "steps_empty",
                "drop_step_key",
                "extra_step_key",
                "bad_id",
                "bad_tool",
                "args_type",
                "args_reference",
                "after_type",
                "after_duplicate",
                "after_bad_id",
                "bad_ref_in_args",
                "bad_ref_in_result",
                "step_type",
                "ref_key_in_args",
            ]
        )
    )
    if kind == "version":
        doc["pte_plan"] = draw(st.sampled_from(["2", 1, "1.0", None, "", " 1", ["1"], 1.0]))
    elif kind == "drop_top":
        del doc[draw(st.sampled_from(["pte_plan", "steps"]))]
    elif kind == "extra_top":
        doc[draw(st.sampled_from(["version", "plan", "Steps", "$schema", "results", "metadata", ""]))] = draw(
            _plain_json(2)
        )
    elif kind == "steps_type":
        doc["steps"] = draw(st.sampled_from([{}, None, "steps", 3, {"a": steps[0]}, [[]], [None], [1]]))
    elif kind == "steps_empty":
        doc["steps"] = []
    elif kind == "drop_step_key":
        del step[draw(st.sampled_from(["id", "tool", "args"]))]
    elif kind == "extra_step_key":
        step[draw(st.sampled_from(["description", "depends_on", "Id", "$ref", "output", "retries"]))] = draw(
            _plain_json(2)
        )
    elif kind == "bad_id":
        step["id"] = draw(st.sampled_from(_BAD_STEP_IDS))
    elif kind == "bad_tool":
        step["tool"] = draw(st.sampled_from(_BAD_TOOL_NAMES))
    elif kind == "args_type":
        step["args"] = draw(st.sampled_from([[], None, "days=30", 30, True, [{"days": 30}]]))
    elif kind == "args_reference":
        step["args"] = {"$ref": draw(st.sampled_from([s["id"] for s in steps]))}
    elif kind == "after_type":
        step["after"] = draw(st.sampled_from(["a", None, {}, 1, [1], [None], [["a"]]]))
    elif kind == "after_duplicate":
        dep = draw(st.sampled_from([s["id"] for s in steps]))
        step["after"] = [dep, dep]
    elif kind == "after_bad_id":
        step["after"] = [
            *step.get("after", ()),
            draw(st.sampled_from([b for b in _BAD_STEP_IDS if isinstance(b, str)])),
        ]
    elif kind == "bad_ref_in_args":
        spots = _locations(step["args"])
        bad = _bad_ref(draw, doc)
        if spots and _percent(draw, 70):
            _set(step["args"], draw(st.sampled_from(spots)), bad)
        else:
            step["args"][draw(_KEYS)] = bad
    elif kind == "bad_ref_in_result":
        bad = _bad_ref(draw, doc)
        doc["result"] = draw(st.sampled_from([bad, [bad], {"value": bad}]))
    elif kind == "step_type":
        steps[steps.index(step)] = draw(st.sampled_from([None, "step", 1, [], [step]]))
    else:  # an object inside args with a "$ref" key beside others: neither a reference nor a plain object
        spots = [p for p in _locations(step["args"]) if isinstance(_get(step["args"], p[:-1]), dict)]
        target = draw(st.sampled_from([s["id"] for s in steps]))
        value = {"$ref": target, draw(st.sampled_from(["note", "pointer", "$ref2"])): 1}
        if spots:
            _set(step["args"], draw(st.sampled_from(spots)), value)
        else:
            step["args"]["value"] = value
    return doc
