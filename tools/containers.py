"""Stock tool pack: objects keyed by data, and lists of plain values (strings, numbers).

Tools return objects such as ``{hotel_name: "Rating: 4.2 ..."}`` or lists such as
``["general", "random"]``. These tools turn objects into records (``entries``), look a key
up when the key itself comes from data (``get_key``), and filter, sort, de-duplicate,
compare, count and rank lists. They are generic: compile infers each output's exact type
from what is wired in (``entries`` of ``dict[str, str]`` gives records whose ``value`` is a
string). Every tool is pure and ``provenance="derived"``.

This module is loaded by file path (``pte.load_pack("containers")``), so it must
not import anything from the ``tools`` directory.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from decimal import Decimal
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import BaseModel, Field

from pte._core import decimal_in_bounds, decimal_of_text
from pte.catalogue import FieldName, Selection, tool

__all__ = [
    "coalesce",
    "concat",
    "count_by",
    "difference",
    "entries",
    "extreme_by",
    "filter_values",
    "get_key",
    "has_key",
    "intersection",
    "keys",
    "rank",
    "sort_values",
    "top_key",
    "unique",
]

T = TypeVar("T")
V = TypeVar("V")
R = TypeVar("R", bound=dict[str, Any])
#: Plain values kept or ordered by comparing the values themselves (`pte._catalogue._selection`).
_VALUES_BY_THEMSELVES = Selection({"/values/*": "values/*"}, decides=("values/*",))


class Entry(BaseModel, Generic[V]):
    key: str
    value: V


class EntryList(BaseModel, Generic[V]):
    records: list[Entry[V]]
    count: int


class Item(BaseModel, Generic[V]):
    value: V


class ValueList(BaseModel, Generic[T]):
    values: list[T]
    count: int


class Flag(BaseModel):
    result: bool


class Count(BaseModel):
    key: str
    count: int


class Counts(BaseModel):
    groups: list[Count]
    count: int


class Ranked(BaseModel, Generic[T]):
    rank: int = Field(description="1 for the first item.")
    item: T


class RankList(BaseModel, Generic[T]):
    records: list[Ranked[T]]
    count: int


class One(BaseModel, Generic[T]):
    record: T


class KeyValue(BaseModel, Generic[V]):
    key: str
    value: V


def _number(value: Any) -> Decimal | None:
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


def _kind(value: Any) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    return "a boolean" if isinstance(value, bool) else ("text" if isinstance(value, str) else "a number")


def _scalar(value: Any, where: str) -> Any:
    # Lists of plain values: an object or a list in them is a plan error, said plainly.
    if isinstance(value, (dict, list)):
        raise ValueError(
            f"{where} is {_kind(value)}; these tools take lists of plain values (text, numbers). "
            "For records use the shaping tools (filter_records, sort_records, ...)."
        )
    return value


def _key(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def _folded(value: Any, where: str, ignore_case: bool) -> str:
    key = _key(_scalar(value, where))
    return key.casefold() if ignore_case else key


def _same(a: Any, b: Any, ignore_case: bool) -> bool:
    na, nb = _number(a), _number(b)
    if na is not None and nb is not None:
        return na == nb
    if ignore_case and isinstance(a, str) and isinstance(b, str):
        return a.casefold() == b.casefold()
    return type(a) is type(b) and a == b


def _sort_key(values: list[Any]) -> Callable[[Any], Any]:
    if all(_number(v) is not None for v in values):
        return _number
    if all(isinstance(v, str) for v in values):
        return lambda v: v
    raise ValueError("the values mix numbers and text; cannot order them")


@tool(provenance="derived", selection=Selection({"/records/*/value": "object/*"}))
def entries(object: dict[str, V]) -> EntryList[V]:
    """An object as key/value records, in order."""
    out = [Entry[Any](key=k, value=v) for k, v in object.items()]
    return EntryList[Any](records=out, count=len(out))


@tool(provenance="derived", selection=Selection({"/value": "object/{key}"}))
def get_key(object: dict[str, V], key: str) -> Item[V]:
    """object[key], where `key` may come from data; a missing key is an error."""
    if key not in object:
        known = ", ".join(list(object)[:20]) or "none"
        raise ValueError(f"no key {key!r}; the object has: {known}")
    return Item[Any](value=object[key])


@tool(provenance="derived", selection=Selection(inputs=("object",)))
def keys(object: dict[str, Any]) -> ValueList[str]:
    """The object's keys, in order."""
    return ValueList[str](values=list(object), count=len(object))


@tool(provenance="derived", selection=Selection(inputs=("object",)))
def has_key(object: dict[str, Any], key: str) -> Flag:
    """Whether the object has `key`."""
    return Flag(result=key in object)


@tool(provenance="derived", selection=_VALUES_BY_THEMSELVES)
def filter_values(
    values: list[T],
    op: Literal["eq", "ne", "lt", "le", "gt", "ge", "in", "contains", "starts_with", "ends_with"],
    value: Any,
    ignore_case: bool = False,
) -> ValueList[T]:
    """Keep the values that satisfy `op` `value` (compared as filter_records does)."""
    items = [_scalar(v, f"item {i}") for i, v in enumerate(values)]
    if op == "in" and not isinstance(value, list):
        raise ValueError("op 'in' needs a list value")

    def test(item: Any) -> bool:
        if op in ("eq", "ne"):
            return _same(item, value, ignore_case) == (op == "eq")
        if op == "in":
            return any(_same(item, v, ignore_case) for v in value)
        if op in ("contains", "starts_with", "ends_with"):
            if not isinstance(item, str) or not isinstance(value, str):
                raise ValueError(f"op {op!r} needs text on both sides, got {_kind(item)} and {_kind(value)}")
            a, b = (item.casefold(), value.casefold()) if ignore_case else (item, value)
            return {"contains": b in a, "starts_with": a.startswith(b), "ends_with": a.endswith(b)}[op]
        na, nb = _number(item), _number(value)
        pair: tuple[Any, Any] = (na, nb) if na is not None and nb is not None else (item, value)
        if not (isinstance(pair[0], type(pair[1])) or {type(pair[0]), type(pair[1])} <= {str}):
            raise ValueError(f"op {op!r} cannot compare {_kind(item)} with {_kind(value)}")
        return bool(
            {
                "lt": pair[0] < pair[1],
                "le": pair[0] <= pair[1],
                "gt": pair[0] > pair[1],
                "ge": pair[0] >= pair[1],
            }[op]
        )

    out = [item for item in items if test(item)]
    return ValueList[Any](values=out, count=len(out))


@tool(provenance="derived", selection=_VALUES_BY_THEMSELVES)
def sort_values(values: list[T], descending: bool = False) -> ValueList[T]:
    """Sorted: numbers and decimal strings by value, else text."""
    items = [_scalar(v, f"item {i}") for i, v in enumerate(values)]
    out = sorted(items, key=_sort_key(items), reverse=descending)
    return ValueList[Any](values=out, count=len(out))


@tool(provenance="derived", selection=_VALUES_BY_THEMSELVES)
def unique(values: list[T], ignore_case: bool = False) -> ValueList[T]:
    """Each value once, the first kept."""
    seen: set[str] = set()
    out = []
    for i, v in enumerate(values):
        key = _key(_scalar(v, f"item {i}"))
        key = key.casefold() if ignore_case else key
        if key not in seen:
            seen.add(key)
            out.append(v)
    return ValueList[Any](values=out, count=len(out))


@tool(provenance="derived", selection=Selection({"/values/*": "values/*"}, decides=("values/*", "remove")))
def difference(values: list[T], remove: list[T], ignore_case: bool = False) -> ValueList[T]:
    """`values` without the items in `remove`."""
    gone = {_folded(v, "an item of remove", ignore_case) for v in remove}
    out = [v for i, v in enumerate(values) if _folded(v, f"item {i}", ignore_case) not in gone]
    return ValueList[Any](values=out, count=len(out))


@tool(provenance="derived", selection=Selection({"/values/*": "values/*"}, decides=("values/*", "other")))
def intersection(values: list[T], other: list[T], ignore_case: bool = False) -> ValueList[T]:
    """The items of `values` also in `other`."""
    keep = {_folded(v, "an item of other", ignore_case) for v in other}
    out = [v for i, v in enumerate(values) if _folded(v, f"item {i}", ignore_case) in keep]
    return ValueList[Any](values=out, count=len(out))


@tool(provenance="derived", selection=Selection(decides=("items/*/{field}",)))
def count_by(
    items: list[Any],
    field: Annotated[str | None, Field(description="Records: the field to count by.")] = None,
) -> Counts:
    """Count each value, or with `field` each record's value of it (a record without it: an error);
    most frequent first, ties by key.
    """
    tally: dict[str, int] = {}
    for i, item in enumerate(items):
        if field is None:
            value = _scalar(item, f"item {i}")
        else:
            if not isinstance(item, dict) or field not in item:
                raise ValueError(f"item {i} is {_kind(item)} without field {field!r}")
            value = _scalar(item[field], f"item {i} field {field!r}")
        tally[_key(value)] = tally.get(_key(value), 0) + 1
    groups = [Count(key=k, count=n) for k, n in sorted(tally.items(), key=lambda kv: (-kv[1], kv[0]))]
    return Counts(groups=groups, count=len(groups))


@tool(provenance="derived", selection=Selection({"/records/*/item": "items/*"}))
def rank(items: list[T]) -> RankList[T]:
    """Number the items from rank 1 (e.g. after a sort)."""
    out = [Ranked[Any](rank=i + 1, item=item) for i, item in enumerate(items)]
    return RankList[Any](records=out, count=len(out))


@tool(provenance="derived", selection=Selection({"/record": "records/*"}, decides=("records/*/{field}",)))
def extreme_by(records: list[R], field: Annotated[str, FieldName(R)], which: Literal["max", "min"]) -> One[R]:
    """The record with the max or min `field` (the first of ties): numbers and decimal strings by
    value, ISO dates as text; null skipped. An empty list fails the step.
    """
    present = [r for r in records if r.get(field) is not None]
    if not present:
        what = "the list is empty" if not records else f"no record has a value for {field!r}"
        raise ValueError(f'{what}: there is no {which}; guard the step with when {{"nonempty": ...}}')
    key = _sort_key([r[field] for r in present])
    best = present[0]
    for record in present[1:]:
        a, b = key(record[field]), key(best[field])
        if (a > b) if which == "max" else (a < b):
            best = record
    return One[Any](record=best)


@tool(provenance="derived", selection=Selection({"/values/*": "lists/*/*"}))
def concat(lists: list[list[T]]) -> ValueList[T]:
    """Lists end to end: lists [{"$ref": "a/records"}, {"$ref": "b/records"}]."""
    out = [item for part in lists for item in part]
    return ValueList[Any](values=out, count=len(out))


@tool(provenance="derived")
def top_key(object: dict[str, V], which: Literal["max", "min"] = "max") -> KeyValue[V]:
    """The key with the max or min value (the first of ties); an empty object fails the step."""
    if not object:
        raise ValueError(f"the object is empty: there is no {which} key")
    values = [_scalar(v, f"the value of {k!r}") for k, v in object.items()]
    key = _sort_key(values)
    best = 0
    for i in range(1, len(values)):
        a, b = key(values[i]), key(values[best])
        if (a > b) if which == "max" else (a < b):
            best = i
    name = list(object)[best]
    return KeyValue[Any](key=name, value=object[name])


def _empty(value: Any) -> bool:
    return value is None or (isinstance(value, (str, list, dict)) and not value)


@tool(provenance="derived")
def coalesce(values: list[T | None], default: T | None = None) -> Item[T]:
    """The first of `values` that is not null, "", [] or {}; if none, `default`, else the step
    fails.
    """
    for value in values:
        if not _empty(value):
            return Item[Any](value=value)
    if default is None:
        raise ValueError(f"all {len(values)} values are empty (null, '', [] or {{}}) and no default is given")
    return Item[Any](value=default)
