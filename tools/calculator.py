"""Stock tool pack: a safe decimal calculator (no `eval`).

Expressions are parsed with :mod:`ast` and evaluated by a restricted :mod:`simpleeval`
evaluator in which every number is a `decimal.Decimal`, so ``0.1 + 0.2`` is exactly
``0.3`` and sums of money amounts are exact. Only arithmetic, comparisons, conditional
expressions, list indexing and a fixed set of functions are available: no attribute
access, no strings, no calls to anything outside the whitelist.

This module is loaded by file path (``pte.load_pack("calculator")``), so it must
not import anything from the ``tools`` directory.
"""

from __future__ import annotations

import ast
import decimal
import math
import re
import warnings
from collections.abc import Callable, Iterable, Mapping
from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, PlainSerializer, WithJsonSchema
from simpleeval import FeatureNotAvailable, InvalidExpression, SimpleEval

from pte import tool

__all__ = ["CalcResult", "PercentageResult", "calculator", "percentage", "to_integer", "to_number"]

#: Longest expression accepted, in characters.
MAX_EXPRESSION_LENGTH = 1_000
#: Largest absolute exponent accepted by ``**`` (stops ``9 ** 9 ** 9`` before it is computed).
MAX_EXPONENT = 10_000
#: Most items accepted in one list variable.
MAX_LIST_LENGTH = 100_000
#: Significant digits kept by every operation (IEEE 754 decimal128).
PRECISION = 34

# Same pattern pydantic uses for a Decimal serialised as a string; we render without
# exponent notation so every output matches it (``str(Decimal("1E-7"))`` would not).
_DECIMAL_STRING_PATTERN = r"^(?!^[-+.]*$)[+-]?0*\d*\.?\d*$"


def _plain(value: Decimal) -> str:
    # Fixed-point, never scientific notation, and no negative zero.
    if value == 0:
        value = value.copy_abs()
    return format(value, "f")


#: A Decimal that serialises as a plain decimal string ("12.50", never "1.25E+1").
PlainDecimal = Annotated[
    Decimal,
    PlainSerializer(_plain, return_type=str),
    WithJsonSchema({"type": "string", "pattern": _DECIMAL_STRING_PATTERN}, mode="serialization"),
]

_Value = Decimal | list[Decimal]
_ROUNDINGS: dict[str, str] = {"half_even": decimal.ROUND_HALF_EVEN, "half_up": decimal.ROUND_HALF_UP}
_VARIABLE_NAME_RE = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")

# Friendly names for syntax the evaluator refuses, so the error tells the planner what to change.
_REFUSED_SYNTAX: dict[type[ast.AST], str] = {
    ast.Attribute: "attribute access (a.b)",
    ast.Lambda: "lambda",
    ast.JoinedStr: "f-strings",
    ast.FormattedValue: "f-strings",
    ast.List: "list literals (pass lists as variables)",
    ast.Tuple: "tuples",
    ast.Dict: "dict literals",
    ast.Set: "set literals",
    ast.ListComp: "comprehensions",
    ast.SetComp: "comprehensions",
    ast.DictComp: "comprehensions",
    ast.GeneratorExp: "generator expressions",
    ast.NamedExpr: "assignment (:=)",
    ast.Starred: "star arguments",
    ast.Slice: "slices",
    ast.Await: "await",
    ast.Yield: "yield",
    ast.YieldFrom: "yield",
}

_BINARY_SYMBOLS: dict[type[ast.AST], str] = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.FloorDiv: "//",
    ast.Mod: "%",
    ast.Pow: "**",
    ast.MatMult: "@",
    ast.LShift: "<<",
    ast.RShift: ">>",
    ast.BitOr: "|",
    ast.BitXor: "^",
    ast.BitAnd: "&",
}
_COMPARE_SYMBOLS: dict[type[ast.AST], str] = {
    ast.Eq: "==",
    ast.NotEq: "!=",
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
    ast.In: "in",
    ast.NotIn: "not in",
    ast.Is: "is",
    ast.IsNot: "is not",
}


class CalcResult(BaseModel):
    """The value of a calculator expression."""

    value: PlainDecimal
    expression: str


class PercentageResult(BaseModel):
    """`part` as a percentage of `whole`."""

    value: PlainDecimal


def _context() -> decimal.Context:
    # Exponent limits keep every value printable in a bounded number of characters; the traps
    # turn silent NaN/Infinity into errors.
    return decimal.Context(
        prec=PRECISION,
        rounding=decimal.ROUND_HALF_EVEN,
        Emax=999,
        Emin=-999,
        traps=[decimal.InvalidOperation, decimal.DivisionByZero, decimal.Overflow],
    )


def _number(value: Any, what: str) -> Decimal:
    if isinstance(value, Decimal):
        return value
    raise ValueError(f"{what} needs a number, got a list")


def _numbers(args: Iterable[_Value], what: str) -> list[Decimal]:
    # Aggregates accept numbers and lists of numbers, flattened one level: sum(a, b), sum(xs), sum(xs, 5).
    out: list[Decimal] = []
    for arg in args:
        if isinstance(arg, list):
            out.extend(arg)
        else:
            out.append(_number(arg, what))
    return out


def _integer(value: Decimal, what: str) -> int:
    if value != value.to_integral_value():
        raise ValueError(f"{what} must be a whole number, got {_plain(value)}")
    return int(value)


def _truth(flag: bool) -> Decimal:
    return Decimal(1) if flag else Decimal(0)


def _add(a: Any, b: Any) -> Decimal:
    return _number(a, "+") + _number(b, "+")


def _sub(a: Any, b: Any) -> Decimal:
    return _number(a, "-") - _number(b, "-")


def _mul(a: Any, b: Any) -> Decimal:
    return _number(a, "*") * _number(b, "*")


def _divisor(b: Any, what: str) -> Decimal:
    divisor = _number(b, what)
    if divisor == 0:
        raise ValueError("division by zero")
    return divisor


def _div(a: Any, b: Any) -> Decimal:
    divisor = _divisor(b, "/")
    return _number(a, "/") / divisor


def _floordiv(a: Any, b: Any) -> Decimal:
    # Python semantics (round toward minus infinity), not Decimal's truncation toward zero.
    divisor = _divisor(b, "//")
    return (_number(a, "//") / divisor).to_integral_value(rounding=decimal.ROUND_FLOOR)


def _mod(a: Any, b: Any) -> Decimal:
    # Python semantics: the result has the sign of the divisor (Decimal's % follows the dividend).
    divisor = _divisor(b, "%")
    dividend = _number(a, "%")
    return dividend - divisor * _floordiv(dividend, divisor)


def _pow(a: Any, b: Any) -> Decimal:
    base, exponent = _number(a, "**"), _number(b, "**")
    if abs(exponent) > MAX_EXPONENT:
        raise ValueError(f"exponent too large: {_plain(exponent)} (the limit is {MAX_EXPONENT})")
    if base == 0:
        if exponent < 0:
            raise ValueError("division by zero")
        if exponent == 0:
            return Decimal(1)  # as in Python; Decimal calls 0 ** 0 undefined
    if base < 0 and exponent != exponent.to_integral_value():
        raise ValueError("a negative number cannot be raised to a fractional power")
    return base**exponent


def _compare(op: Callable[[Decimal, Decimal], bool], symbol: str) -> Callable[[Any, Any], Decimal]:
    def compare(a: Any, b: Any) -> Decimal:
        return _truth(op(_number(a, symbol), _number(b, symbol)))

    return compare


_BINARY_OPERATORS: dict[type[ast.AST], Callable[[Any, Any], Decimal]] = {
    ast.Add: _add,
    ast.Sub: _sub,
    ast.Mult: _mul,
    ast.Div: _div,
    ast.FloorDiv: _floordiv,
    ast.Mod: _mod,
    ast.Pow: _pow,
}
_COMPARE_OPERATORS: dict[type[ast.AST], Callable[[Any, Any], Decimal]] = {
    ast.Eq: _compare(lambda a, b: a == b, "=="),
    ast.NotEq: _compare(lambda a, b: a != b, "!="),
    ast.Lt: _compare(lambda a, b: a < b, "<"),
    ast.LtE: _compare(lambda a, b: a <= b, "<="),
    ast.Gt: _compare(lambda a, b: a > b, ">"),
    ast.GtE: _compare(lambda a, b: a >= b, ">="),
}
_UNARY_OPERATORS: dict[type[ast.AST], Callable[[Any], Decimal]] = {
    ast.USub: lambda a: -_number(a, "unary -"),
    ast.UAdd: lambda a: +_number(a, "unary +"),
    ast.Not: lambda a: _truth(not _number(a, "not")),
}


def _fn_sum(*args: _Value) -> Decimal:
    total = Decimal(0)
    for item in _numbers(args, "sum()"):
        total += item
    return total


def _fn_min(*args: _Value) -> Decimal:
    items = _numbers(args, "min()")
    if not items:
        raise ValueError("min() of an empty list")
    return min(items)


def _fn_max(*args: _Value) -> Decimal:
    items = _numbers(args, "max()")
    if not items:
        raise ValueError("max() of an empty list")
    return max(items)


def _fn_avg(*args: _Value) -> Decimal:
    items = _numbers(args, "avg()")
    if not items:
        raise ValueError("avg() of an empty list")
    return _fn_sum(items) / Decimal(len(items))


def _fn_len(*args: _Value) -> Decimal:
    if len(args) != 1 or not isinstance(args[0], list):
        raise ValueError("len() takes exactly one list")
    return Decimal(len(args[0]))


def _fn_abs(*args: _Value) -> Decimal:
    if len(args) != 1:
        raise ValueError("abs() takes exactly one number")
    return abs(_number(args[0], "abs()"))


def _fn_floor(*args: _Value) -> Decimal:
    if len(args) != 1:
        raise ValueError("floor() takes exactly one number")
    return _number(args[0], "floor()").to_integral_value(rounding=decimal.ROUND_FLOOR)


def _fn_ceil(*args: _Value) -> Decimal:
    if len(args) != 1:
        raise ValueError("ceil() takes exactly one number")
    return _number(args[0], "ceil()").to_integral_value(rounding=decimal.ROUND_CEILING)


def _quantize(value: Decimal, places: int, rounding: str) -> Decimal:
    if not -PRECISION <= places <= PRECISION:
        raise ValueError(f"decimal places must be between -{PRECISION} and {PRECISION}, got {places}")
    try:
        return value.quantize(Decimal(1).scaleb(-places), rounding=rounding)
    except decimal.InvalidOperation:
        raise ValueError(
            f"cannot round {_plain(value)} to {places} places within {PRECISION} digits"
        ) from None


def _make_round(rounding: str) -> Callable[..., Decimal]:
    def _fn_round(*args: _Value) -> Decimal:
        if len(args) not in (1, 2):
            raise ValueError("round() takes a number and optionally a number of decimal places")
        places = _integer(_number(args[1], "round()"), "round() places") if len(args) == 2 else 0
        return _quantize(_number(args[0], "round()"), places, rounding)

    return _fn_round


def _functions(rounding: str) -> dict[str, Callable[..., Decimal]]:
    return {
        "sum": _fn_sum,
        "min": _fn_min,
        "max": _fn_max,
        "avg": _fn_avg,
        "mean": _fn_avg,
        "len": _fn_len,
        "abs": _fn_abs,
        "round": _make_round(rounding),
        "floor": _fn_floor,
        "ceil": _fn_ceil,
    }


class _DecimalEvaluator(SimpleEval):  # type: ignore[misc]
    """simpleeval restricted to Decimal arithmetic over named variables and whitelisted functions."""

    def __init__(self, expression: str, names: dict[str, _Value], rounding: str) -> None:
        super().__init__(operators={}, functions=_functions(rounding), names=names)
        self.expr = expression
        # Replace simpleeval's node table: only these node types can ever be evaluated.
        self.nodes = {
            ast.Constant: self._eval_number,
            ast.Name: self._eval_variable,
            ast.UnaryOp: self._eval_unary,
            ast.BinOp: self._eval_binary,
            ast.BoolOp: self._eval_boolop,
            ast.Compare: self._eval_comparison,
            ast.IfExp: self._eval_ifexp,
            ast.Call: self._eval_function_call,
            ast.Subscript: self._eval_item,
        }

    def _eval(self, node: ast.AST) -> Any:
        handler = self.nodes.get(type(node))
        if handler is None:
            what = _REFUSED_SYNTAX.get(type(node), type(node).__name__)
            raise FeatureNotAvailable(f"not allowed in a calculator expression: {what}")
        return handler(node)

    def _eval_number(self, node: ast.Constant) -> Decimal:
        value = node.value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise FeatureNotAvailable(f"only numbers are allowed as literals, not {value!r}")
        if isinstance(value, int):
            return +Decimal(value)
        # Use the literal as written ("0.1"), not the binary float it was parsed into.
        text = ast.get_source_segment(self.expr, node) or repr(value)
        try:
            return +Decimal(text.replace("_", ""))
        except decimal.InvalidOperation:
            return +Decimal(repr(value))

    def _eval_variable(self, node: ast.Name) -> _Value:
        if node.id in self.names:
            value: _Value = self.names[node.id]
            return value
        if node.id in self.functions:
            raise FeatureNotAvailable(f"function {node.id!r} must be called, e.g. {node.id}(x)")
        known = ", ".join(sorted(self.names)) or "none"
        raise ValueError(f"unknown name {node.id!r} (variables defined: {known})")

    def _eval_unary(self, node: ast.UnaryOp) -> Decimal:
        operator = _UNARY_OPERATORS.get(type(node.op))
        if operator is None:
            raise FeatureNotAvailable(f"operator {type(node.op).__name__} is not allowed")
        return operator(self._eval(node.operand))

    def _eval_binary(self, node: ast.BinOp) -> Decimal:
        operator = _BINARY_OPERATORS.get(type(node.op))
        if operator is None:
            symbol = _BINARY_SYMBOLS.get(type(node.op), type(node.op).__name__)
            raise FeatureNotAvailable(f"operator {symbol!r} is not allowed")
        return operator(self._eval(node.left), self._eval(node.right))

    def _eval_comparison(self, node: ast.Compare) -> Decimal:
        # Chained comparisons (a < b < c) as in Python; true is 1 and false is 0.
        left = self._eval(node.left)
        for op, comparator in zip(node.ops, node.comparators, strict=True):
            operator = _COMPARE_OPERATORS.get(type(op))
            if operator is None:
                symbol = _COMPARE_SYMBOLS.get(type(op), type(op).__name__)
                raise FeatureNotAvailable(f"comparison {symbol!r} is not allowed")
            right = self._eval(comparator)
            if not operator(left, right):
                return Decimal(0)
            left = right
        return Decimal(1)

    def _eval_function_call(self, node: ast.Call) -> Decimal:
        if not isinstance(node.func, ast.Name):
            raise FeatureNotAvailable("only the built-in functions can be called, by name")
        func = self.functions.get(node.func.id)
        if func is None:
            allowed = ", ".join(sorted(self.functions))
            raise ValueError(f"unknown function {node.func.id!r} (allowed: {allowed})")
        if node.keywords:
            raise FeatureNotAvailable(f"keyword arguments are not allowed (in {node.func.id}())")
        result: Decimal = func(*(self._eval(arg) for arg in node.args))
        return result

    def _eval_item(self, node: ast.Subscript) -> Decimal:
        container = self._eval(node.value)
        if not isinstance(container, list):
            raise ValueError("only list variables can be indexed")
        index = _integer(_number(self._eval(node.slice), "an index"), "an index")
        if not -len(container) <= index < len(container):
            raise ValueError(f"index {index} is out of range for a list of {len(container)}")
        item: Decimal = container[index]
        return item


def _evaluate(expression: str, variables: Mapping[str, _Value], rounding: str) -> Decimal:
    if len(expression) > MAX_EXPRESSION_LENGTH:
        raise ValueError(
            f"expression is too long ({len(expression)} characters; the limit is {MAX_EXPRESSION_LENGTH})"
        )
    text = expression.strip()
    if not text:
        raise ValueError("expression is empty")
    names: dict[str, _Value] = {}
    for name, value in variables.items():
        if not _VARIABLE_NAME_RE.fullmatch(name):
            raise ValueError(
                f"invalid variable name {name!r}: use letters, digits and _, starting with a letter"
            )
        if isinstance(value, list):
            if len(value) > MAX_LIST_LENGTH:
                raise ValueError(f"variable {name!r} has more than {MAX_LIST_LENGTH} items")
            names[name] = [+item for item in value]  # unary plus applies the context's limits
        else:
            names[name] = +value
    try:
        with warnings.catch_warnings():
            # Ambiguous source such as "1if x else 2" warns; refuse it instead of printing to stderr.
            warnings.simplefilter("error", SyntaxWarning)
            tree = ast.parse(text, mode="eval")
    except (SyntaxError, SyntaxWarning) as exc:
        raise ValueError(f"invalid expression: {getattr(exc, 'msg', exc)}") from None
    evaluator = _DecimalEvaluator(text, names, rounding)
    try:
        result = evaluator._eval(tree.body)
    except InvalidExpression as exc:
        raise ValueError(str(exc)) from None
    except RecursionError:
        raise ValueError("expression is nested too deeply") from None
    except decimal.Overflow:
        raise ValueError("result is too large") from None
    except decimal.DivisionByZero:
        raise ValueError("division by zero") from None
    except decimal.InvalidOperation:
        raise ValueError("invalid arithmetic operation (e.g. a result that is not a number)") from None
    if isinstance(result, list):
        raise ValueError("the expression gives a list, not a number; aggregate it, e.g. sum(xs) or len(xs)")
    number: Decimal = +result
    return number


# provenance="derived": a result computed from an untrusted amount is still untrusted, so the
# calculator cannot launder a value out of an e-mail into a payment sink.
@tool(provenance="derived")
def calculator(
    expression: str,
    variables: dict[str, Decimal | list[Decimal]] | None = None,
    places: Annotated[int, Field(ge=0, le=28)] | None = None,
    rounding: Literal["half_even", "half_up"] = "half_even",
) -> CalcResult:
    """Exact decimal arithmetic on a Python-style `expression`: + - * / // % **, comparisons (1 or
    0), and or not, x if c else y, xs[0], xs[-1], sum min max avg len abs round floor ceil;
    `variables` name numbers, decimal strings or lists ({"xs": ["10.50", "2.25"]}). Unknown
    names, division by zero or a list result fail.
    """
    with decimal.localcontext(_context()):
        value = _evaluate(expression, variables or {}, _ROUNDINGS[rounding])
        if places is not None:
            value = _quantize(value, places, _ROUNDINGS[rounding])
    return CalcResult(value=value, expression=expression)


@tool(provenance="derived")
def percentage(
    part: Decimal,
    whole: Decimal,
    places: Annotated[int, Field(ge=0, le=28)] = 2,
) -> PercentageResult:
    """`part` / `whole` * 100, exact, rounded half-even to `places`; `whole` 0 fails."""
    with decimal.localcontext(_context()):
        if whole == 0:
            raise ValueError("division by zero: whole is 0")
        try:
            value = _quantize(+part / +whole * 100, places, decimal.ROUND_HALF_EVEN)
        except decimal.Overflow:
            raise ValueError("result is too large") from None
    return PercentageResult(value=value)


class NumberResult(BaseModel):
    """A decimal converted to a JSON number."""

    value: float


class IntegerResult(BaseModel):
    """A decimal converted to a JSON integer."""

    value: int


#: The largest integer every JSON reader holds exactly (IEEE 754 double: 2**53 - 1).
MAX_SAFE_INTEGER = 2**53 - 1


@tool(provenance="derived")
def to_number(value: Decimal, places: Annotated[int, Field(ge=0, le=15)] | None = None) -> NumberResult:
    """A decimal string as a JSON number, for a parameter typed number; `places` rounds half-even,
    else lost digits fail.
    """
    with decimal.localcontext(_context()):
        if places is not None:
            value = _quantize(value, places, decimal.ROUND_HALF_EVEN)
        number = float(value)
        if not math.isfinite(number) or Decimal(repr(number)) != value:
            raise ValueError(
                f"{_plain(value)} does not fit a JSON number exactly (it would become {number!r}); "
                "round it with places, or keep it as a decimal string"
            )
    return NumberResult(value=number)


@tool(provenance="derived")
def to_integer(value: Decimal) -> IntegerResult:
    """A whole number or decimal string ("42.00") as a JSON integer; a fraction fails."""
    if value != value.to_integral_value():
        raise ValueError(f"{_plain(value)} is not a whole number; round it first (calculator: round(x))")
    if abs(value) > MAX_SAFE_INTEGER:
        raise ValueError(f"{_plain(value)} is beyond 2**53 - 1, the largest integer JSON holds exactly")
    return IntegerResult(value=int(value))
