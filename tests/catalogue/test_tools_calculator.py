"""The calculator tool pack: exact decimal arithmetic, a closed function whitelist, and its guards."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal, localcontext
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pte import Registry, ToolError, load_pack


@pytest.fixture(scope="module")
def pack() -> Registry:
    return load_pack("calculator")


@pytest.fixture(scope="module")
def calc(pack: Registry) -> Callable[..., str]:
    """Run the calculator as the executor does (JSON in, JSON out, both validated); return `value`."""
    spec = pack["calculator"]

    def run(expression: str, **args: Any) -> str:
        call = {"expression": expression, **args}
        spec.validate_args(call)
        out = spec.invoke(call)
        spec.validate_output(out)
        assert out["expression"] == expression
        value: str = out["value"]
        return value

    return run


def test_stock_pack_loads_with_referenceable_outputs(pack: Registry) -> None:
    assert set(pack.names) == {"calculator", "percentage", "to_number", "to_integer"}
    for spec in pack:
        # derived: the output is as trusted as the least trusted input (no laundering through arithmetic).
        assert spec.effect == "read" and spec.provenance == "derived" and spec.description
        assert spec.output_schema.get("properties", {}).get("value"), spec.name
        assert "value" in spec.output_schema["required"]


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("2 + 3 * 4", "14"),
        ("(2 + 3) * 4", "20"),
        ("10 - 4 - 3", "3"),
        ("2 ** 3 ** 2", "512"),
        ("-2 ** 2", "-4"),
        ("-(2) * -3", "6"),
        ("+5", "5"),
        ("7 / 2", "3.5"),
        ("7 // 2", "3"),
        ("-7 // 2", "-4"),
        ("-7 % 3", "2"),
        ("7 % -3", "-2"),
        ("5.5 % 2", "1.5"),
        ("2 ** -2", "0.25"),
        ("2 ** 0.5 > 1.414", "1"),
        ("0 ** 0", "1"),
        ("1 < 2 < 3", "1"),
        ("3 < 2 < 4", "0"),
        ("1 == 1.00", "1"),
        ("2 != 2", "0"),
        ("not 0", "1"),
        ("1 and 0 or 7", "7"),
        ("10 if 2 >= 1 else 20", "10"),
        ("1e2 + 1", "101"),
        ("1_000 * 2", "2000"),
        ("1e-7 * 1", "0.0000001"),
        ("0 * -1", "0"),
    ],
)
def test_arithmetic_and_precedence(calc: Callable[..., str], expression: str, expected: str) -> None:
    assert calc(expression) == expected


def test_decimal_exactness(calc: Callable[..., str]) -> None:
    assert calc("0.1 + 0.2") == "0.3"
    assert calc("0.1 + 0.2 == 0.3") == "1"
    assert calc("1.10 + 2.20") == "3.30"  # trailing zeros of money amounts are kept
    assert calc("a + b", variables={"a": 0.1, "b": 0.2}) == "0.3"  # JSON floats enter as their shortest text
    amounts = ["1234.56", "0.01", "99.99", "1000000.00", "-0.56"]
    assert calc("sum(amounts)", variables={"amounts": amounts}) == "1001334.00"
    assert calc("1 / 3") == "0.3333333333333333333333333333333333"  # 34 significant digits
    assert calc("1 / 3 * 3") == "0.9999999999999999999999999999999999"


def test_variables_and_functions(calc: Callable[..., str]) -> None:
    v = {"xs": ["4", 1, "2.5", 10], "a": "3", "b": 12, "empty": []}
    assert calc("sum(xs)", variables=v) == "17.5"
    assert calc("sum(xs, a, 0.5)", variables=v) == "21.0"
    assert calc("sum(empty)", variables=v) == "0"
    assert calc("min(xs)", variables=v) == "1" and calc("max(xs, 11)", variables=v) == "11"
    assert calc("avg(xs)", variables=v) == "4.375" and calc("mean(a, b)", variables=v) == "7.5"
    assert calc("len(xs)", variables=v) == "4" and calc("len(empty)", variables=v) == "0"
    assert calc("xs[0] + xs[-1]", variables=v) == "14"
    assert calc("abs(-2.5)") == "2.5"
    assert calc("floor(-2.5)") == "-3" and calc("ceil(2.1)") == "3"
    assert calc("round(2.5)") == "2" and calc("round(3.5)") == "4"  # banker's rounding by default
    assert calc("round(2.345, 2)") == "2.34"
    assert calc("round(2.345, 2)", rounding="half_up") == "2.35"
    assert calc("round(1234.5, -2)") == "1200"
    assert calc("a / b * 100", variables=v) == "25.00"  # 0.25 * 100, exponent kept as Decimal does
    assert calc("a / b * 100", variables={"a": "1", "b": "3"}, places=2) == "33.33"
    assert calc("2.5", places=0) == "2" and calc("2.5", places=0, rounding="half_up") == "3"
    assert calc("1", places=2) == "1.00"


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("x + 1", "unknown name 'x'"),
        ("foo(1)", "unknown function 'foo'"),
        ("__import__('os')", "unknown function '__import__'"),
        ("eval('1')", "unknown function 'eval'"),
        ("1 / 0", "division by zero"),
        ("1 // 0", "division by zero"),
        ("1 % 0", "division by zero"),
        ("0 ** -1", "division by zero"),
        ("a / (a - a)", "division by zero"),
        ("a.__class__", "attribute access"),
        ("(1).real", "attribute access"),
        ("xs.append(1)", "only the built-in functions"),
        ("sum.__globals__", "attribute access"),
        ("(lambda: 1)()", "only the built-in functions"),
        ("lambda: 1", "lambda"),
        ("[1, 2]", "list literals"),
        ("(1, 2)", "tuples"),
        ("{1: 2}", "dict literals"),
        ("[x for x in xs]", "comprehensions"),
        ("'abc'", "only numbers"),
        ("True", "only numbers"),
        ("1j", "only numbers"),
        ('f"{a}"', "f-strings"),
        ("(y := 1)", "assignment"),
        ("sum(*xs)", "star arguments"),
        ("xs[0:1]", "slices"),
        ("round(a, ndigits=2)", "keyword arguments"),
        ("sum", "must be called"),
        ("1 << 3", "'<<' is not allowed"),
        ("1 & 3", "'&' is not allowed"),
        ("~1", "Invert is not allowed"),
        ("1 in xs", "'in' is not allowed"),
        ("a is a", "'is' is not allowed"),
        ("xs", "gives a list"),
        ("xs * 2", "needs a number, got a list"),
        ("xs + xs", "needs a number, got a list"),
        ("a[0]", "only list variables can be indexed"),
        ("xs[5]", "out of range"),
        ("xs[0.5]", "whole number"),
        ("min(empty)", "empty"),
        ("avg(empty)", "empty"),
        ("len(a)", "one list"),
        ("abs(1, 2)", "exactly one"),
        ("round(a, 0.5)", "whole number"),
        ("9 ** 9 ** 9", "exponent too large"),
        ("2 ** 100000", "exponent too large"),
        ("10 ** 999 * 10", "too large"),
        ("(-8) ** 0.5", "fractional power"),
        ("1 +", "invalid expression"),
        ("1; 2", "invalid expression"),
        ("import os", "invalid expression"),
        ("", "empty"),
        ("   ", "empty"),
        ("-" * 995 + "1", "nested too deeply"),
        ("1" + " + 1" * 300, "too long"),
    ],
)
def test_refusals(calc: Callable[..., str], expression: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace("*", r"\*")):
        calc(expression, variables={"a": "2", "xs": [1, 2], "empty": []})


def test_bad_variables_and_places(calc: Callable[..., str]) -> None:
    for name in ("__class__", "_x", "a b", "1a", ""):
        with pytest.raises(ValueError, match="invalid variable name"):
            calc("1", variables={name: 1})
    for bad in ("abc", "NaN", "1e5", True, {"a": 1}, [[1]]):
        with pytest.raises(ToolError):  # the input schema only takes numbers and plain decimal strings
            calc("x", variables={"x": bad})
    with pytest.raises(ToolError):
        calc("1", places=-1)
    with pytest.raises(ToolError):
        calc("1", rounding="up")
    with pytest.raises(ValueError, match="cannot round"):
        calc("10 ** 30", places=10)


def test_percentage(pack: Registry) -> None:
    spec = pack["percentage"]
    assert spec.invoke({"part": "25", "whole": "200"}) == {"value": "12.50"}
    assert spec.invoke({"part": 1, "whole": 3, "places": 4}) == {"value": "33.3333"}
    assert spec.invoke({"part": "0.125", "whole": "1", "places": 1}) == {"value": "12.5"}
    assert spec.invoke({"part": "-5", "whole": "20", "places": 0}) == {"value": "-25"}
    with pytest.raises(ValueError, match="division by zero"):
        spec.invoke({"part": "1", "whole": "0.00"})


# Money amounts with 2 places, built from integer cents (much cheaper to generate than st.decimals).
_AMOUNT = st.integers(-(10**14) + 1, 10**14 - 1).map(lambda cents: Decimal(cents).scaleb(-2))


@given(st.lists(_AMOUNT, max_size=60))
def test_sum_matches_python_decimal_sum(calc: Callable[..., str], xs: list[Decimal]) -> None:
    expected = Decimal(0)
    with localcontext() as ctx:
        ctx.prec = 34
        for x in xs:
            expected += x
    assert Decimal(calc("sum(xs)", variables={"xs": [str(x) for x in xs]})) == expected
    if xs:
        assert Decimal(calc("xs[0] + sum(xs) - xs[0]", variables={"xs": [str(x) for x in xs]})) == expected


_OPERATORS = [
    "(",
    ")",
    "+",
    "-",
    "*",
    "/",
    "//",
    "%",
    "**",
    "<",
    "==",
    "not ",
    " if ",
    " else ",
    ",",
    "[",
    "]",
]
_ATOMS = [
    "1",
    "0",
    "2.5",
    "9",
    "e5",
    "a",
    "xs",
    "x",
    "sum(",
    "min(",
    "len(",
    "round(",
    ".",
    "__class__",
    "'s'",
]
_TOKENS = st.sampled_from([*_OPERATORS, *_ATOMS])


@given(st.lists(_TOKENS, max_size=25).map("".join))
def test_any_expression_gives_a_value_or_a_value_error(calc: Callable[..., str], expression: str) -> None:
    try:
        value = calc(expression, variables={"a": "3", "xs": ["1", "2"]})
    except ValueError:
        return
    Decimal(value)  # a plain decimal string
