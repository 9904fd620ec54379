"""Stock tool pack: deterministic data shaping, so plans never need an LLM to consolidate results.

Records are JSON objects (``list[dict]``), typically the lists that read tools return
(e.g. ``{"$ref": "inv/invoices"}``). Every tool here is pure, deterministic and labelled
``provenance="derived"``: its output is as trusted as the least trusted of its inputs.
Numbers and decimal strings ("120.50") compare and add exactly, as `decimal.Decimal`;
ISO 8601 timestamps compare as instants.

The tools are generic (``records: list[R]``): compile infers each step's output type from
the records wired in, so ``sort_records`` then ``first`` still gives a typed record whose
fields later steps can reference, and a field name the records cannot have is a compile
error.

This module is loaded by file path (``pte.load_pack("shaping")``), so it must not
import anything from the ``tools`` directory.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
import re
import string
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import BaseModel, Field, PlainSerializer, WithJsonSchema

from pte._core import decimal_in_bounds, decimal_of_text
from pte.catalogue import FieldName, FieldOf, PickOf, Selection, tool

__all__ = [
    "count",
    "filter_records",
    "first",
    "format_text",
    "group_sum",
    "join_records",
    "pick",
    "pluck",
    "pluck_numbers",
    "pluck_text",
    "sort_records",
    "sum_field",
    "take",
    "zip_lists",
]

#: Longest text `format_text` produces, in characters.
MAX_TEXT_LENGTH = 100_000

_DECIMAL_STRING_PATTERN = r"^(?!^[-+.]*$)[+-]?0*\d*\.?\d*$"
_PLACEHOLDER_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


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

Record = dict[str, Any]
#: Records of whatever type the step is given (the output keeps that type).
R = TypeVar("R", bound=Record)
#: Items of any type.
T = TypeVar("T")
#: The left and right items of a pairing or a join.
L = TypeVar("L")
S = TypeVar("S")
RL = TypeVar("RL", bound=Record)
RS = TypeVar("RS", bound=Record)


class RecordsResult(BaseModel, Generic[T]):
    records: list[T]
    count: int


class ValuesResult(BaseModel, Generic[T]):
    values: list[T]
    count: int


class NumbersResult(BaseModel):
    values: list[PlainDecimal]
    count: int


class TextValuesResult(BaseModel):
    values: list[str]
    count: int


class SumResult(BaseModel):
    total: PlainDecimal
    count: int


class Group(BaseModel):
    key: str
    total: PlainDecimal
    count: int


class GroupSumResult(BaseModel):
    groups: list[Group]
    count: int


class TextResult(BaseModel):
    text: str


class CountResult(BaseModel):
    count: int


class RecordResult(BaseModel, Generic[T]):
    record: T


class Pair(BaseModel, Generic[L, S]):
    left: L
    right: S


class PairsResult(BaseModel, Generic[L, S]):
    records: list[Pair[L, S]]
    count: int


def _context() -> decimal.Context:
    return decimal.Context(
        prec=34, rounding=decimal.ROUND_HALF_EVEN, traps=[decimal.InvalidOperation, decimal.Overflow]
    )


def _numeric(value: Any) -> Decimal | None:
    """`value` as a Decimal when it is a JSON number or a decimal string within PTE's number
    bounds (pte._core: digits and exponent checked on the text first, so ``1e100000000`` is
    never expanded), else None."""
    if isinstance(value, bool):  # bool is an int subclass, but true is not 1 here
        return None
    if isinstance(value, Decimal):
        return value if decimal_in_bounds(value) else None
    if isinstance(value, int):
        number = Decimal(value)
        return number if decimal_in_bounds(number) else None
    if isinstance(value, float):
        # str() gives the shortest repr ("0.1"), not the binary expansion of the float.
        return Decimal(str(value)) if math.isfinite(value) else None
    if isinstance(value, str):
        return decimal_of_text(value)
    return None


def _describe(value: Any) -> str:
    text = json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_field(records: Sequence[Record], field: str) -> None:
    # A field that no record has is a typo in the plan, not an empty result.
    if records and not any(field in record for record in records):
        known = sorted({key for record in records for key in record})
        raise ValueError(f"unknown field {field!r}; the records have fields: {', '.join(known) or 'none'}")


def _required(records: Sequence[Record], field: str) -> list[Any]:
    _check_field(records, field)
    values = []
    for index, record in enumerate(records):
        if field not in record:
            raise ValueError(f"record {index} has no field {field!r}")
        values.append(record[field])
    return values


def _number_of(value: Any, where: str) -> Decimal:
    number = _numeric(value)
    if number is None:
        raise ValueError(
            f"{where} is not a number (a JSON number or decimal string of at most 1000 digits "
            f"and an exponent within ±1000): {_describe(value)}"
        )
    return number


def _equal(a: Any, b: Any) -> bool:
    na, nb = _numeric(a), _numeric(b)
    if na is not None and nb is not None:
        return na == nb
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b  # keep true distinct from 1
    return bool(a == b)


def _kind(value: Any) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, bool):
        return "a boolean"
    return "a number" if isinstance(value, (int, float, Decimal)) else "text"


# An ISO 8601 date with a time ("2024-05-15T10:00:00", "2024-05-15 13:00", "...Z", "...+02:00").
_TIMESTAMP_RE = re.compile(r"\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?)?")


def as_instant(value: Any) -> dt.datetime | None:
    """An ISO 8601 date or timestamp as a datetime (a date is its midnight), else None."""
    if not isinstance(value, str) or not _TIMESTAMP_RE.fullmatch(value.strip()):
        return None
    try:
        return dt.datetime.fromisoformat(value.strip())
    except ValueError:
        return None


def _instants(a: Any, b: Any) -> tuple[dt.datetime, dt.datetime] | None:
    ta, tb = as_instant(a), as_instant(b)
    if ta is None or tb is None:
        return None
    if (ta.tzinfo is None) != (tb.tzinfo is None):
        raise ValueError(
            f"cannot compare {_describe(a)} with {_describe(b)}: one has a time zone and the other not"
        )
    return ta, tb


def _ordering_key(a: Any, b: Any) -> tuple[Any, Any] | None:
    na, nb = _numeric(a), _numeric(b)
    if na is not None and nb is not None:
        return na, nb
    instants = _instants(a, b)
    if instants is not None:
        return instants
    if isinstance(a, str) and isinstance(b, str):
        return a, b
    return None


_ORDERINGS: dict[str, Callable[[Any, Any], bool]] = {
    "lt": lambda a, b: bool(a < b),
    "le": lambda a, b: bool(a <= b),
    "gt": lambda a, b: bool(a > b),
    "ge": lambda a, b: bool(a >= b),
}


_TEXT_OPS = ("contains", "starts_with", "ends_with", "has_word")


def _text_test(op: str, needle: str, ignore_case: bool) -> Callable[[str], bool]:
    if ignore_case:
        needle = needle.casefold()
    if op == "has_word":
        # Whole words: not preceded or followed by a letter, digit or underscore.
        word = re.compile(rf"(?<!\w){re.escape(needle)}(?!\w)")
        return lambda text: word.search(text.casefold() if ignore_case else text) is not None
    tests: dict[str, Callable[[str, str], bool]] = {
        "contains": lambda text, n: n in text,
        "starts_with": str.startswith,
        "ends_with": str.endswith,
    }
    test = tests[op]
    return lambda text: test(text.casefold() if ignore_case else text, needle)


def _matcher(op: str, value: Any, ignore_case: bool = False) -> Callable[[Any], bool]:
    if op == "has_key":
        if not isinstance(value, str):
            raise ValueError(f"op 'has_key' needs a key (text) as value, got {_describe(value)}")

        def has(v: Any) -> bool:
            if v is None:
                return False
            if not isinstance(v, dict):
                raise ValueError(
                    f"op 'has_key' needs an object field, but the field holds {_kind(v)} {_describe(v)}"
                )
            return value in v

        return has
    if ignore_case and isinstance(value, str) and op in ("eq", "ne"):
        folded = value.casefold()
        same: Callable[[Any], bool] = lambda v: isinstance(v, str) and v.casefold() == folded  # noqa: E731
        return same if op == "eq" else lambda v: not same(v)
    if op == "eq":
        return lambda v: _equal(v, value)
    if op == "ne":
        return lambda v: not _equal(v, value)
    if op == "in":
        if not isinstance(value, list):
            raise ValueError(f"op 'in' needs a list value, got {_describe(value)}")
        if ignore_case:
            folded_items = {item.casefold() for item in value if isinstance(item, str)}
            return lambda v: isinstance(v, str) and v.casefold() in folded_items
        return lambda v: any(_equal(v, item) for item in value)
    if op in _TEXT_OPS:
        test = _text_test(op, value, ignore_case) if isinstance(value, str) else None

        def text_op(v: Any) -> bool:
            if v is None:
                return False
            if isinstance(v, list) and op == "contains":
                return any(_equal(item, value) for item in v)
            if not isinstance(v, str):
                # Never a silent empty result: a number or an object cannot contain text.
                raise ValueError(
                    f"op {op!r} needs a text field{' or a list' if op == 'contains' else ''}, "
                    f"but the field holds {_kind(v)} {_describe(v)}"
                )
            if test is None:
                raise ValueError(f"op {op!r} on text needs a text value, got {_describe(value)}")
            return test(v)

        return text_op

    compare = _ORDERINGS[op]

    def ordered(v: Any) -> bool:
        if v is None:
            return False  # null is not ordered against anything
        pair = _ordering_key(v, value)
        if pair is None:
            raise ValueError(
                f"op {op!r} cannot compare {_describe(v)} with {_describe(value)}: "
                "both must be numbers (or decimal strings) or both text"
            )
        return compare(*pair)

    return ordered


def _key_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, Decimal):
        return _plain(value)
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def _render(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Decimal):
        return _plain(value)
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, list):
        return ", ".join(_render(item) for item in value)
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


#: Records kept whole, in input order or another (`pte._catalogue._selection`: labels stay per field).
_ROWS = Selection({"/records/*": "records/*"})


def _rows_by(param: str) -> Selection:
    """Records kept whole, chosen or ordered by the field argument `param` names."""
    return Selection({"/records/*": "records/*"}, decides=(f"records/*/{{{param}}}",))


#: A field name of the records given to the same step (compile checks it against their type).
FieldOfR = Annotated[str, FieldName(R)]


@tool(provenance="derived", selection=Selection({"/records/*": "records/*/{fields}"}))
def pick(
    records: list[R], fields: Annotated[list[str], FieldName(R)]
) -> RecordsResult[Annotated[Record, PickOf(R, "fields")]]:
    """Keep only `fields` in each record (absent ones left out)."""
    if not fields:
        raise ValueError("fields is empty: name at least one field to keep")
    for field in fields:
        _check_field(records, field)
    out = [{field: record[field] for field in fields if field in record} for record in records]
    return RecordsResult(records=out, count=len(out))


@tool(provenance="derived", selection=Selection({"/values/*": "records/*/{field}"}))
def pluck(records: list[R], field: FieldOfR) -> ValuesResult[Annotated[Any, FieldOf(R, "field")]]:
    """The value of `field` from every record (each must have it)."""
    values = _required(records, field)
    return ValuesResult(values=values, count=len(values))


@tool(provenance="derived", selection=Selection({"/values/*": "records/*/{field}"}))
def pluck_numbers(records: list[R], field: FieldOfR) -> NumbersResult:
    """Like pluck, as decimal strings, e.g. for calculator variables."""
    values = _required(records, field)
    numbers = [_number_of(value, f"record {index} field {field!r}") for index, value in enumerate(values)]
    return NumbersResult(values=numbers, count=len(numbers))


@tool(provenance="derived", selection=Selection({"/values/*": "records/*/{field}"}))
def pluck_text(records: list[R], field: FieldOfR) -> TextValuesResult:
    """Like pluck, for string values."""
    values = _required(records, field)
    for index, value in enumerate(values):
        if not isinstance(value, str):
            raise ValueError(f"record {index} field {field!r} is not text: {_describe(value)}")
    return TextValuesResult(values=values, count=len(values))


@tool(provenance="derived", selection=_rows_by("field"))
def filter_records(
    records: list[R],
    field: FieldOfR,
    op: Literal[
        "eq",
        "ne",
        "lt",
        "le",
        "gt",
        "ge",
        "in",
        "contains",
        "starts_with",
        "ends_with",
        "has_word",
        "has_key",
    ],
    value: Any,
    ignore_case: bool = False,
) -> RecordsResult[R]:
    """Keep the records whose `field` satisfies `op` `value`: numbers and decimal strings compare by
    value, ISO dates as instants, else as text; has_word: a whole word; contains also finds an
    item of a list field; has_key: an object field has the key `value`; in: `value` is a list
    holding it. Missing or null fields never match.
    """
    _check_field(records, field)
    matches = _matcher(op, value, ignore_case)
    out = [record for record in records if field in record and matches(record[field])]
    return RecordsResult(records=out, count=len(out))


@tool(provenance="derived", selection=_rows_by("by"))
def sort_records(records: list[R], by: FieldOfR, descending: bool = False) -> RecordsResult[R]:
    """A stable sort by `by`, compared as in filter_records; mixed types are an error, missing or
    null last.
    """
    _check_field(records, by)
    present = [record for record in records if record.get(by) is not None]
    missing = [record for record in records if record.get(by) is None]
    keys = _sort_keys([record[by] for record in present], by)
    # sorted() is stable, also with reverse=True: ties keep their input order either way.
    order = sorted(range(len(present)), key=lambda i: keys[i], reverse=descending)
    return RecordsResult(records=[present[i] for i in order] + missing, count=len(records))


def _sort_keys(values: list[Any], by: str) -> list[Any]:
    numbers = [_numeric(value) for value in values]
    if all(number is not None for number in numbers):
        return numbers
    instants = [as_instant(value) for value in values]
    if values and all(instant is not None for instant in instants):
        aware = {instant.tzinfo is not None for instant in instants if instant is not None}
        if len(aware) > 1:
            raise ValueError(f"field {by!r} mixes timestamps with and without a time zone; cannot sort")
        return instants
    if all(isinstance(value, str) for value in values):
        return values
    raise ValueError(f"field {by!r} mixes numbers and text (or holds lists/objects); cannot sort")


@tool(provenance="derived", selection=_ROWS)
def take(records: list[T], n: Annotated[int, Field(ge=0)]) -> RecordsResult[T]:
    """The first `n` items (all if fewer)."""
    out = records[:n]
    return RecordsResult(records=out, count=len(out))


@tool(provenance="derived", selection=Selection(decides=("records/*/{field}",)))
def sum_field(records: list[R], field: FieldOfR) -> SumResult:
    """The exact decimal sum of `field` (each record must have it); "0" for none. Converts no
    currency: filter first.
    """
    values = _required(records, field)
    total = Decimal(0)
    with decimal.localcontext(_context()):
        for index, value in enumerate(values):
            total += _number_of(value, f"record {index} field {field!r}")
    return SumResult(total=total, count=len(values))


@tool(provenance="derived", selection=Selection(decides=("records/*/{key}", "records/*/{field}")))
def group_sum(records: list[R], key: FieldOfR, field: FieldOfR) -> GroupSumResult:
    """Per distinct `key` (as text, sorted), the exact decimal total of `field`; every record must
    have both.
    """
    keys = _required(records, key)
    values = _required(records, field)
    totals: dict[str, Decimal] = {}
    counts: dict[str, int] = {}
    with decimal.localcontext(_context()):
        for index, (raw_key, value) in enumerate(zip(keys, values, strict=True)):
            group = _key_text(raw_key)
            totals[group] = totals.get(group, Decimal(0)) + _number_of(
                value, f"record {index} field {field!r}"
            )
            counts[group] = counts.get(group, 0) + 1
    groups = [Group(key=group, total=totals[group], count=counts[group]) for group in sorted(totals)]
    return GroupSumResult(groups=groups, count=len(groups))


@tool(provenance="derived")
def format_text(template: str, values: dict[str, Any]) -> TextResult:
    """Fill `{name}` placeholders in `template` from `values` ({{ }} for braces; null as "", lists
    as "a, b, c", objects as JSON); a missing value is an error.
    """
    try:
        parts = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ValueError(f"invalid template: {exc} (write {{{{ and }}}} for literal braces)") from None
    out: list[str] = []
    size = 0
    for literal, name, spec, conversion in parts:
        out.append(literal)
        size += len(literal)
        if name is None:
            continue
        if not _PLACEHOLDER_RE.fullmatch(name):
            raise ValueError(f"placeholder {{{name}}} is not allowed: use a plain name such as {{total}}")
        if conversion is not None or spec:
            raise ValueError(f"placeholder {{{name}}} may not have a conversion (!r) or format spec (:...)")
        if name not in values:
            raise ValueError(
                f"no value for placeholder {{{name}}}; values has: {', '.join(sorted(values)) or 'none'}"
            )
        rendered = _render(values[name])
        out.append(rendered)
        size += len(rendered)
        if size > MAX_TEXT_LENGTH:
            raise ValueError(f"text would exceed {MAX_TEXT_LENGTH} characters")
    return TextResult(text="".join(out))


@tool(provenance="derived", selection=Selection(inputs=("records",)))
def count(records: list[Any]) -> CountResult:
    """The number of items."""
    return CountResult(count=len(records))


@tool(provenance="derived", selection=Selection({"/record": "records/*"}))
def first(records: list[T]) -> RecordResult[T]:
    """The first item; an empty list fails the step (guard it: when {"nonempty": ...})."""
    if not records:
        raise ValueError("the list is empty: there is no first item")
    return RecordResult(record=records[0])


@tool(
    provenance="derived",
    selection=Selection({"/records/*/left": "left/*", "/records/*/right": "right/*"}),
)
def zip_lists(left: list[L], right: list[S]) -> PairsResult[L, S]:
    """Pair two lists by position; their lengths must be equal."""
    if len(left) != len(right):
        raise ValueError(
            f"left has {len(left)} items and right {len(right)}: zip_lists pairs lists of one length"
        )
    pairs = [Pair[Any, Any](left=a, right=b) for a, b in zip(left, right, strict=True)]
    return PairsResult[Any, Any](records=pairs, count=len(pairs))


@tool(
    provenance="derived",
    selection=Selection(
        {"/records/*/left": "left/*", "/records/*/right": "right/*"},
        decides=("left/*/{left_field}", "right/*/{right_field}"),
    ),
)
def join_records(
    left: list[RL],
    right: list[RS],
    left_field: Annotated[str, FieldName(RL)],
    right_field: Annotated[str, FieldName(RS)],
    ignore_case: bool = False,
) -> PairsResult[RL, RS]:
    """Inner join: each pair where left[left_field] equals right[right_field] (numbers by value;
    missing or null never match).
    """
    _check_field(left, left_field)
    _check_field(right, right_field)
    index: dict[str, list[Record]] = {}
    for record in right:
        value = record.get(right_field)
        if value is not None:
            index.setdefault(_join_key(value, ignore_case), []).append(record)
    pairs = []
    for item in left:
        value = item.get(left_field)
        if value is None:
            continue
        for match in index.get(_join_key(value, ignore_case), ()):
            pairs.append(Pair[Any, Any](left=item, right=match))
            if len(pairs) > MAX_JOIN_PAIRS:
                raise ValueError(
                    f"the join gives more than {MAX_JOIN_PAIRS} pairs: join on a more specific field"
                )
    return PairsResult[Any, Any](records=pairs, count=len(pairs))


#: Most pairs `join_records` returns (a join on a repeated value grows as the product).
MAX_JOIN_PAIRS = 100_000


def _join_key(value: Any, ignore_case: bool) -> str:
    number = _numeric(value)
    if number is not None:
        return "n:" + _plain(number.normalize())
    if isinstance(value, str):
        return "s:" + (value.casefold() if ignore_case else value)
    return "j:" + json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
