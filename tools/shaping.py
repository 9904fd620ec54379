"""Stock tool pack: deterministic data shaping, so plans never need an LLM to consolidate results.

Records are JSON objects (``list[dict]``), typically the lists that read tools return
(e.g. ``{"$ref": "inv/invoices"}``). Every tool here is pure, deterministic and labelled
``provenance="derived"``: its output is as trusted as the least trusted of its inputs.
Numbers and decimal strings ("120.50") compare and add exactly, as `decimal.Decimal`.

This module is loaded by file path (``pte.tools.load_pack("shaping")``), so it must not
import anything from the ``tools`` directory.
"""

from __future__ import annotations

import decimal
import json
import math
import re
import string
from collections.abc import Callable
from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, PlainSerializer, WithJsonSchema

from pte.tools import tool

__all__ = [
    "count",
    "filter_records",
    "first",
    "format_text",
    "group_sum",
    "pick",
    "pluck",
    "pluck_numbers",
    "pluck_text",
    "sort_records",
    "sum_field",
    "take",
]

#: Longest text `format_text` produces, in characters.
MAX_TEXT_LENGTH = 100_000

_DECIMAL_STRING_PATTERN = r"^(?!^[-+.]*$)[+-]?0*\d*\.?\d*$"
# Plain decimal numbers as strings: "12", "-3.50", ".5", "1e3". Dates ("2026-10-01") and ids do not match.
_NUMERIC_STRING_RE = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")
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


class RecordsResult(BaseModel):
    records: list[Record] = Field(description="The resulting records (JSON objects).")
    count: int = Field(description="Number of records in `records`.")


class ValuesResult(BaseModel):
    values: list[Any] = Field(description="One value per input record, in input order.")
    count: int = Field(description="Number of values.")


class NumbersResult(BaseModel):
    values: list[PlainDecimal] = Field(description="One decimal string per input record, in input order.")
    count: int = Field(description="Number of values.")


class TextValuesResult(BaseModel):
    values: list[str] = Field(description="One string per input record, in input order.")
    count: int = Field(description="Number of values.")


class SumResult(BaseModel):
    total: PlainDecimal = Field(description="Exact decimal sum, as a decimal string, e.g. '1520.75'.")
    count: int = Field(description="Number of values added.")


class Group(BaseModel):
    key: str = Field(description="The group's key value, as text.")
    total: PlainDecimal = Field(
        description="Exact decimal sum of the field over the group, as a decimal string."
    )
    count: int = Field(description="Number of records in the group.")


class GroupSumResult(BaseModel):
    groups: list[Group] = Field(description="One entry per distinct key, sorted by key.")
    count: int = Field(description="Number of groups.")


class TextResult(BaseModel):
    text: str = Field(description="The rendered text.")


class CountResult(BaseModel):
    count: int = Field(description="Number of items.")


class RecordResult(BaseModel):
    record: Record = Field(description="The record (a JSON object).")


def _context() -> decimal.Context:
    return decimal.Context(
        prec=34, rounding=decimal.ROUND_HALF_EVEN, traps=[decimal.InvalidOperation, decimal.Overflow]
    )


def _numeric(value: Any) -> Decimal | None:
    """`value` as a Decimal when it is a JSON number or a decimal string, else None."""
    if isinstance(value, bool):  # bool is an int subclass, but true is not 1 here
        return None
    if isinstance(value, Decimal):
        return value if value.is_finite() else None
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        # str() gives the shortest repr ("0.1"), not the binary expansion of the float.
        return Decimal(str(value)) if math.isfinite(value) else None
    if isinstance(value, str) and _NUMERIC_STRING_RE.fullmatch(value.strip()):
        return Decimal(value.strip())
    return None


def _describe(value: Any) -> str:
    text = json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_field(records: list[Record], field: str) -> None:
    # A field that no record has is a typo in the plan, not an empty result.
    if records and not any(field in record for record in records):
        known = sorted({key for record in records for key in record})
        raise ValueError(f"unknown field {field!r}; the records have fields: {', '.join(known) or 'none'}")


def _required(records: list[Record], field: str) -> list[Any]:
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
        raise ValueError(f"{where} is not a number: {_describe(value)}")
    return number


def _equal(a: Any, b: Any) -> bool:
    na, nb = _numeric(a), _numeric(b)
    if na is not None and nb is not None:
        return na == nb
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b  # keep true distinct from 1
    return bool(a == b)


def _ordering_key(a: Any, b: Any) -> tuple[Any, Any] | None:
    na, nb = _numeric(a), _numeric(b)
    if na is not None and nb is not None:
        return na, nb
    if isinstance(a, str) and isinstance(b, str):
        return a, b
    return None


_ORDERINGS: dict[str, Callable[[Any, Any], bool]] = {
    "lt": lambda a, b: bool(a < b),
    "le": lambda a, b: bool(a <= b),
    "gt": lambda a, b: bool(a > b),
    "ge": lambda a, b: bool(a >= b),
}


def _matcher(op: str, value: Any) -> Callable[[Any], bool]:
    if op == "eq":
        return lambda v: _equal(v, value)
    if op == "ne":
        return lambda v: not _equal(v, value)
    if op == "in":
        if not isinstance(value, list):
            raise ValueError(f"op 'in' needs a list value, got {_describe(value)}")
        return lambda v: any(_equal(v, item) for item in value)
    if op == "contains":

        def contains(v: Any) -> bool:
            if isinstance(v, str):
                if not isinstance(value, str):
                    raise ValueError(f"op 'contains' on text needs a text value, got {_describe(value)}")
                return value in v
            if isinstance(v, list):
                return any(_equal(item, value) for item in v)
            return False

        return contains

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


@tool(provenance="derived")
def pick(records: list[Record], fields: list[str]) -> RecordsResult:
    """Keep only `fields` in each record (a projection); returns {records, count}.

    A field a record lacks is left out of that record; a field that no record has is an
    error (a typo). Record order is unchanged.
    """
    if not fields:
        raise ValueError("fields is empty: name at least one field to keep")
    for field in fields:
        _check_field(records, field)
    out = [{field: record[field] for field in fields if field in record} for record in records]
    return RecordsResult(records=out, count=len(out))


@tool(provenance="derived")
def pluck(records: list[Record], field: str) -> ValuesResult:
    """Return {values, count}: the value of `field` from every record, in order (a column).

    Every record must have the field. `values` is untyped (any JSON); to pass a column
    to a typed parameter use pluck_numbers (e.g. amounts for the calculator) or
    pluck_text (e.g. invoice ids).
    """
    values = _required(records, field)
    return ValuesResult(values=values, count=len(values))


@tool(provenance="derived")
def pluck_numbers(records: list[Record], field: str) -> NumbersResult:
    """Return {values, count}: `field` from every record as decimal strings, in order (a typed column).

    Like pluck, but every value must be a number or decimal string, and `values` is typed
    as decimal strings, so it can feed the calculator (variables {"xs": ...}, sum(xs)) or
    any decimal parameter. Every record must have the field.
    """
    values = _required(records, field)
    numbers = [_number_of(value, f"record {index} field {field!r}") for index, value in enumerate(values)]
    return NumbersResult(values=numbers, count=len(numbers))


@tool(provenance="derived")
def pluck_text(records: list[Record], field: str) -> TextValuesResult:
    """Return {values, count}: `field` from every record as text, in order (a typed column).

    Like pluck, but every value must be a string (e.g. invoice ids), and `values` is
    typed as a list of strings, so it can feed a parameter such as send_reminders'
    invoice_ids. Every record must have the field.
    """
    values = _required(records, field)
    for index, value in enumerate(values):
        if not isinstance(value, str):
            raise ValueError(f"record {index} field {field!r} is not text: {_describe(value)}")
    return TextValuesResult(values=values, count=len(values))


@tool(provenance="derived")
def filter_records(
    records: list[Record],
    field: str,
    op: Literal["eq", "ne", "lt", "le", "gt", "ge", "contains", "in"],
    value: Any,
) -> RecordsResult:
    """Keep the records whose `field` satisfies `op` `value`; returns {records, count}, order kept.

    eq/ne: equality; numbers and decimal strings compare by value ("120.50" eq 120.5).
    lt/le/gt/ge: numeric when both sides are numbers or decimal strings, else text order
    (ISO dates "2026-10-01" compare correctly as text); mixing a number and text is an error.
    contains: `value` is a substring of a text field, or an element of a list field.
    in: the field's value is one of `value` (a list).
    Records without the field never match (not even for ne); a field no record has is an error.
    """
    _check_field(records, field)
    matches = _matcher(op, value)
    out = [record for record in records if field in record and matches(record[field])]
    return RecordsResult(records=out, count=len(out))


@tool(provenance="derived")
def sort_records(records: list[Record], by: str, descending: bool = False) -> RecordsResult:
    """Sort records by the field `by`; returns {records, count}.

    The sort is stable (ties keep their input order). Values compare numerically when all
    are numbers or decimal strings, else as text (all must then be text). Records where
    the field is missing or null come last, in either direction.
    """
    _check_field(records, by)
    present = [record for record in records if record.get(by) is not None]
    missing = [record for record in records if record.get(by) is None]
    numbers = [_numeric(record[by]) for record in present]
    keys: list[Any]
    if all(number is not None for number in numbers):
        keys = [number for number in numbers if number is not None]
    elif all(isinstance(record[by], str) for record in present):
        keys = [record[by] for record in present]
    else:
        raise ValueError(f"field {by!r} mixes numbers and text (or holds lists/objects); cannot sort")
    # sorted() is stable, also with reverse=True: ties keep their input order either way.
    order = sorted(range(len(present)), key=lambda i: keys[i], reverse=descending)
    return RecordsResult(records=[present[i] for i in order] + missing, count=len(records))


@tool(provenance="derived")
def take(records: list[Record], n: Annotated[int, Field(ge=0)]) -> RecordsResult:
    """Return {records, count}: the first `n` records (all if fewer), e.g. the top n after sort_records."""
    out = records[:n]
    return RecordsResult(records=out, count=len(out))


@tool(provenance="derived")
def sum_field(records: list[Record], field: str) -> SumResult:
    """Return {total, count}: the exact decimal sum of `field` over all records.

    Values must be numbers or decimal strings ("120.50"); `total` is a decimal string.
    Every record must have the field. Does not convert currencies: filter first.
    An empty list gives total "0", count 0.
    """
    values = _required(records, field)
    total = Decimal(0)
    with decimal.localcontext(_context()):
        for index, value in enumerate(values):
            total += _number_of(value, f"record {index} field {field!r}")
    return SumResult(total=total, count=len(values))


@tool(provenance="derived")
def group_sum(records: list[Record], key: str, field: str) -> GroupSumResult:
    """Group records by the value of `key` and sum `field` exactly in each group; returns {groups, count}.

    `groups` is a list of {key, total, count} sorted by key (key as text, total as a
    decimal string), e.g. key "currency", field "outstanding" gives one total per currency.
    Every record must have both fields.
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
    """Fill `{name}` placeholders in `template` from `values`; returns {text}.

    Only plain names are allowed: no attribute or index access ({a.b}, {a[0]}), no
    conversions ({a!r}) and no format specs ({a:>10}); write {{ and }} for literal braces.
    Values render as: text as is, numbers and decimal strings as written, true/false,
    null as empty text, lists as "a, b, c", objects as JSON. A placeholder with no
    value is an error; unused values are ignored.
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


@tool(provenance="derived")
def count(records: list[Any]) -> CountResult:
    """Return {count}: the number of items in a list (records, ids or any JSON values)."""
    return CountResult(count=len(records))


@tool(provenance="derived")
def first(records: list[Record]) -> RecordResult:
    """Return {record}: the first record of a non-empty list (e.g. the top one after sort_records).

    An empty list is an error.
    """
    if not records:
        raise ValueError("the list of records is empty")
    return RecordResult(record=records[0])
