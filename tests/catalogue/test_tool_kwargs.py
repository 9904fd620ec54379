"""`ToolSpec.to_kwargs`: arguments are what pydantic's conversion of them gives (one path, #27)."""

from __future__ import annotations

from typing import Annotated, Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import Field

from pte import ToolError, tool

# private: a tool's spec from its function
from pte._catalogue import spec_of


@tool
def plain(n: int, text: str, ratio: float, flag: bool, note: str = "none", count: int = 3) -> int:
    """Every parameter plain."""
    return n


def _via_pydantic(args: dict[str, Any], func: Any = plain) -> dict[str, Any]:
    # The reference: pydantic's documented path, a field at a time by name.
    model_class = spec_of(func)._input_model
    model = model_class.model_validate(args)
    return {name: getattr(model, name) for name in model_class.model_fields}


_VALUES = {
    "n": st.one_of(st.integers(), st.floats(allow_nan=False, allow_infinity=False), st.booleans()),
    "text": st.text(),
    "ratio": st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.integers(-(2**53), 2**53)),
    "flag": st.booleans(),
    "note": st.text(),
    "count": st.one_of(st.integers(), st.booleans()),
}


@given(
    st.fixed_dictionaries(
        {k: _VALUES[k] for k in ("n", "text", "ratio", "flag")},
        optional={k: _VALUES[k] for k in ("note", "count")},
    )
)
def test_plain_parameters_get_what_pydantic_gives(args: dict[str, Any]) -> None:
    spec = spec_of(plain)
    try:
        expected = _via_pydantic(args)
    except Exception:
        with pytest.raises(ToolError):
            spec.to_kwargs(args)
        return
    got = spec.to_kwargs(args)
    # An omitted parameter gets the function's own default, the one pydantic fills in.
    filled = {"note": "none", "count": 3, **got}
    assert filled == expected
    assert {k: type(v) for k, v in filled.items()} == {k: type(v) for k, v in expected.items()}


def test_plain_values_are_passed_as_they_are() -> None:
    spec = spec_of(plain)
    args = {"n": 5, "text": "a", "ratio": 0.5, "flag": True}
    out = spec.to_kwargs(args)
    # An omitted parameter gets the function's own default; a new dict: the function may change it.
    assert out == {**args, "note": "none", "count": 3} and out is not args


def test_a_value_of_another_type_is_converted_by_pydantic() -> None:
    spec = spec_of(plain)
    out = spec.to_kwargs({"n": 5.0, "text": "a", "ratio": 2, "flag": False})
    assert type(out["n"]) is int and type(out["ratio"]) is float


def test_an_unknown_parameter_is_refused_as_before() -> None:
    with pytest.raises(ToolError) as caught:
        spec_of(plain).to_kwargs({"n": 5, "text": "a", "ratio": 0.5, "flag": True, "other": 1})
    assert caught.value.kind == "invalid_args"


@tool
def field_default(n: int = Field(default=7)) -> int:
    """A pydantic Field default: only the model resolves it."""
    return n


@tool
def constrained(n: Annotated[int, Field(ge=0)]) -> int:
    """A constraint on the parameter."""
    return n


@tool
def mixed(n: int, items: list[int]) -> int:
    """One parameter that is not plain."""
    return n


def test_a_constraint_is_enforced_and_a_list_is_converted() -> None:
    with pytest.raises(ToolError) as caught:
        spec_of(constrained).to_kwargs({"n": -1})
    assert caught.value.kind == "invalid_args"
    assert spec_of(mixed).to_kwargs({"n": 1, "items": [1.0, 2]}) == {"n": 1, "items": [1, 2]}


def test_a_field_default_is_resolved_when_the_argument_is_omitted() -> None:
    assert spec_of(field_default).invoke({}) == 7


@tool
def aliased(
    sender: Annotated[str, Field(alias="from")],
    items: list[int],
    extra: Any = None,
    limit: Annotated[int, Field(alias="max-items", ge=1)] = 5,
) -> int:
    """Parameters whose JSON names are not Python names (an alias), and one of any type."""
    return limit


_ALIASED_VALUES = {
    "from": st.one_of(st.text(), st.integers()),
    "items": st.lists(st.one_of(st.integers(), st.floats(allow_nan=False), st.text()), max_size=3),
    "extra": st.recursive(st.none() | st.integers() | st.text(), lambda c: st.lists(c, max_size=2)),
    "max-items": st.one_of(st.integers(-2, 9), st.text(max_size=2)),
    "sender": st.text(),  # the Python name is not the JSON name: refused
}


@given(st.fixed_dictionaries({}, optional=_ALIASED_VALUES))
def test_aliased_and_any_parameters_get_what_pydantic_gives_by_parameter_name(args: dict[str, Any]) -> None:
    # `to_kwargs` reads the validated model's fields by parameter name (#37): the same values
    # and types as reading each field by name, refused exactly where pydantic refuses.
    spec = spec_of(aliased)
    try:
        expected = _via_pydantic(args, aliased)
    except Exception:
        with pytest.raises(ToolError):
            spec.to_kwargs(args)
        return
    got = spec.to_kwargs(args)
    assert got == expected and list(got) == ["sender", "items", "extra", "limit"]
    assert {k: type(v) for k, v in got.items()} == {k: type(v) for k, v in expected.items()}


def test_an_aliased_parameter_reaches_the_function_under_its_python_name() -> None:
    assert spec_of(aliased).invoke({"from": "ann", "items": [1], "max-items": 3}) == 3


@pytest.mark.parametrize("value", ["5", True, "7"])
def test_the_schema_refuses_what_pydantic_would_convert_so_both_checks_stay(value: Any) -> None:
    # Why a step's arguments are checked by the schema and then converted by pydantic (#37):
    # pydantic's lax mode takes these for an int; the schema the plan was compiled against does not.
    spec = spec_of(plain)
    args = {"n": value, "text": "a", "ratio": 0.5, "flag": True}
    assert spec.to_kwargs(args)["n"] == int(value)
    with pytest.raises(ToolError) as caught:
        spec.validate_args(args)
    assert caught.value.kind == "invalid_args"
