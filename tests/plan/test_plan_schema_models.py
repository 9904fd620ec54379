"""The pydantic models in pte/_plan/_model.py and schemas/plan.schema.json accept exactly the same documents.

Two validators implement the contract (pydantic's `PlanDocument` and the JSON Schema, which
`compile` checks with jsonschema-rs); these tests hold them to each other, and to the
pure-Python jsonschema reading of the schema, over valid plans, near-valid mutations of
them and arbitrary JSON.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import jsonschema_rs
import pydantic
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from pte import ReasonCode
from pte.plan import PlanDocument, plan_schema
from pte.testing._catalogue import example_registry
from pte.testing._strategies import invalid_plans, json_values, valid_plans

SCHEMA = plan_schema()
PY_VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
RS_VALIDATOR = jsonschema_rs.validator_for(SCHEMA)
REGISTRY = example_registry()


def verdicts(doc: Any) -> dict[str, bool]:
    """Whether each validator accepts `doc`."""
    try:
        PlanDocument.model_validate(doc)
        model = True
    except pydantic.ValidationError:
        model = False
    return {
        "pydantic": model,
        "jsonschema": PY_VALIDATOR.is_valid(doc),
        "jsonschema_rs": RS_VALIDATOR.is_valid(doc),
    }


def assert_agree(doc: Any) -> bool:
    """All three validators give the same verdict on `doc`; return it."""
    seen = verdicts(doc)
    assert len(set(seen.values())) == 1, f"validators disagree {seen} on {json.dumps(doc)[:2000]}"
    return next(iter(seen.values()))


# --- examples ---------------------------------------------------------------------------------

VALID: dict[str, Any] = {
    "pte_plan": "1",
    "steps": [
        {"id": "inv", "tool": "list_overdue_invoices", "args": {"days": 30}},
        {
            "id": "total",
            "tool": "calculator",
            "args": {"expression": "sum(a)", "variables": {"a": {"$ref": "inv/amounts"}}},
            "after": ["inv"],
        },
    ],
    "result": {"$ref": "total/value"},
}


def _with(path: list[Any], value: Any, doc: dict[str, Any] = VALID) -> dict[str, Any]:
    out: Any = json.loads(json.dumps(doc))
    target = out
    for key in path[:-1]:
        target = target[key]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return dict(out)


_DELETE = object()


@pytest.mark.parametrize(
    "doc",
    [
        VALID,
        _with(["result"], None),
        _with(["result"], _DELETE),
        _with(["result"], {"a": [1, {"$ref": "inv"}], "b": None}),
        _with(["steps", 1, "after"], []),
        _with(["steps", 0, "id"], "a" * 32),
        _with(["steps", 0, "id"], "a_1"),
        _with(["steps", 0, "tool"], "A.b-c_d"),
        _with(["steps", 0, "tool"], "x" * 64),
        _with(["steps", 0, "args"], {}),
        _with(["steps", 0, "args", "x"], {"$ref": "a/~0~1/"}),
        _with(["steps", 0, "args", "x"], {"$ref": "a/\n"}),
        _with(["steps", 0, "args", "x"], {"$ref": "a//"}),
        _with(["steps", 0, "args", "x"], [{"$ref": "zz_9"}, {"nested": {"$ref": "b/0"}}]),
        _with(["steps", 0, "args", "x"], {"ref": 1, "$$ref": 2, "$Ref": 3}),
        _with(["steps", 1, "after"], ["inv", "total", "zzz"]),  # unknown ids are compile's business
        _with(["steps", 0, "id"], "family_reunion_emails_oldest_first_then_the_newest_ones_a"),
        _with(["steps", 0, "id"], "a" * 64),
    ],
)
def test_accepted_by_both(doc: dict[str, Any]) -> None:
    assert verdicts(doc) == {"pydantic": True, "jsonschema": True, "jsonschema_rs": True}


@pytest.mark.parametrize(
    "doc",
    [
        _with(["pte_plan"], "2"),
        _with(["pte_plan"], 1),
        _with(["pte_plan"], _DELETE),
        _with(["steps"], []),
        _with(["steps"], {}),
        _with(["steps"], _DELETE),
        _with(["extra"], 1),
        _with(["steps", 0, "id"], "A"),
        _with(["steps", 0, "id"], "1a"),
        _with(["steps", 0, "id"], "a\n"),
        _with(["steps", 0, "id"], "a" * 65),
        _with(["steps", 0, "id"], ""),
        _with(["steps", 0, "id"], 1),
        _with(["steps", 0, "tool"], "1x"),
        _with(["steps", 0, "tool"], "x\n"),
        _with(["steps", 0, "tool"], "x" * 65),
        _with(["steps", 0, "args"], []),
        _with(["steps", 0, "args"], {"$ref": "inv"}),
        _with(["steps", 0, "args"], _DELETE),
        _with(["steps", 0, "extra"], 1),
        _with(["steps", 1, "after"], ["inv", "inv"]),
        _with(["steps", 1, "after"], "inv"),
        _with(["steps", 1, "after"], ["Inv"]),
        _with(["steps", 1, "after"], None),
        _with(["steps", 0, "args", "x"], {"$ref": 5}),
        _with(["steps", 0, "args", "x"], {"$ref": "a", "x": 1}),
        _with(["steps", 0, "args", "x"], {"$ref": "a/~2"}),
        _with(["steps", 0, "args", "x"], {"$ref": "a/~"}),
        _with(["steps", 0, "args", "x"], {"$ref": "a\n"}),
        _with(["steps", 0, "args", "x"], {"$ref": ""}),
        _with(["steps", 0, "args", "x"], {"$ref": None}),
        _with(["steps", 0, "args", "x"], [{"$ref": "A"}]),
        _with(["result"], {"$ref": 1}),
        _with(["result"], {"a": {"$ref": "x", "y": 2}}),
        _with(["steps"], [None]),
        [],
        "plan",
        None,
    ],
)
def test_rejected_by_both(doc: Any) -> None:
    assert verdicts(doc) == {"pydantic": False, "jsonschema": False, "jsonschema_rs": False}


def test_dollar_ref_newline_key() -> None:
    # Python's `$` also matches before a final newline: a "$ref\n" key beside "$ref" must not
    # pass the schema's reference pattern under the pure-Python validator (a bug, now fixed).
    doc = _with(["steps", 0, "args", "x"], {"$ref": "a", "$ref\n": "b"})
    assert verdicts(doc) == {"pydantic": False, "jsonschema": False, "jsonschema_rs": False}


# --- properties -------------------------------------------------------------------------------


@given(valid_plans(REGISTRY))
def test_valid_plans_are_accepted_by_all(doc: dict[str, Any]) -> None:
    assert assert_agree(doc)


@given(invalid_plans(REGISTRY, ReasonCode.SCHEMA_VIOLATION))
def test_schema_violations_are_rejected_by_all(text: str) -> None:
    assert not assert_agree(json.loads(text))


_BAD_IDS = ["A", "1a", "a\n", "a" * 33, "", "a-b", "é", " a", "a ", "_a"]
_GOOD_IDS = ["a", "a" * 32, "a_1", "z9"]
_SPECIAL: list[Any] = [
    *_BAD_IDS,
    *_GOOD_IDS,
    "x\n",
    "x" * 64,
    "x" * 65,
    "A.b-c",
    "1",
    "2",
    1,
    1.0,
    0,
    -1,
    True,
    False,
    None,
    [],
    {},
    [None],
    ["a", "a"],
    ["a"],
    ["a", "b"],
    [1],
    {"$ref": 5},
    {"$ref": None},
    {"$ref": "a", "x": 1},
    {"$ref": "a"},
    {"$ref": "a/b"},
    {"$ref": "a/~2"},
    {"$ref": "a/~01"},
    {"$ref": "a/~"},
    {"$ref": "a\n"},
    {"$ref": "a/\n"},
    {"$ref": "A"},
    {"$ref": ""},
    {"$ref": "a" * 33},
    {"$ref": ["a"]},
    {"$ref": {"$ref": "a"}},
    {"a": {"$ref": "b"}},
    {"$ref": "a", "$ref ": "b"},
]
_KEYS = ["pte_plan", "steps", "result", "id", "tool", "args", "after", "$ref", "x", "", "Steps"]


def _paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [path]
    if isinstance(value, dict):
        for key, item in value.items():
            out += _paths(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            out += _paths(item, (*path, index))
    return out


_SMALL_PLANS = valid_plans(REGISTRY, max_steps=4)
_VALUES = st.one_of(st.sampled_from(_SPECIAL), json_values())


@st.composite
def near_valid(draw: st.DrawFn) -> Any:
    """A valid plan with one to three small edits: values replaced, keys removed or added."""
    doc: Any = json.loads(json.dumps(draw(_SMALL_PLANS)))
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(doc)
        path = paths[draw(st.integers(0, len(paths) - 1))]
        kind = draw(st.sampled_from(["replace", "delete", "add", "special_key"]))
        value = draw(_VALUES)
        if not path:
            doc = value if kind == "replace" else doc
            continue
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        if kind == "replace":
            parent[path[-1]] = json.loads(json.dumps(value))
        elif kind == "delete":
            del parent[path[-1]]
        else:
            target = parent[path[-1]]
            key = draw(st.sampled_from(_KEYS)) if kind == "special_key" else draw(st.text(max_size=5))
            if isinstance(target, dict):
                target[key] = json.loads(json.dumps(value))
            elif isinstance(target, list):
                target.insert(draw(st.integers(0, len(target))), json.loads(json.dumps(value)))
    return doc


@given(near_valid())
@example(_with(["steps", 0, "args", "x"], {"$ref": "a", "x": 1}))
@example(_with(["steps", 1, "after"], ["inv", "inv"]))
@example(_with(["steps", 0, "id"], "a\n"))
@example(_with(["pte_plan"], 1))
@example(_with(["steps"], []))
def test_near_valid_documents(doc: Any) -> None:
    assert_agree(doc)


_plan_like = st.fixed_dictionaries(
    {
        "pte_plan": st.sampled_from(["1", "1", "2", 1]),
        "steps": st.lists(
            st.fixed_dictionaries(
                {
                    "id": st.sampled_from(_GOOD_IDS + _BAD_IDS[:3]),
                    "tool": st.sampled_from(["calculator", "x.y", "1x"]),
                    "args": st.dictionaries(
                        st.sampled_from(["a", "b", "$ref"]),
                        st.one_of(st.sampled_from(_SPECIAL), json_values()),
                        max_size=3,
                    ),
                },
                optional={"after": st.lists(st.sampled_from([*_GOOD_IDS, "A"]), max_size=3)},
            ),
            max_size=3,
        ),
    },
    optional={"result": st.one_of(st.sampled_from(_SPECIAL), json_values())},
)


@given(st.one_of(json_values(), _plan_like))
def test_arbitrary_json(doc: Any) -> None:
    assert_agree(doc)
