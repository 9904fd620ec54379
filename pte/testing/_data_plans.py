"""A hypothesis strategy of plans that chain the data operations over generated record types.

`data_plans()` draws a record type (fields of several kinds, some optional), records of
that type, a source tool returning them, and a chain of generic data operations over
them (filter, sort, take, pick, extract_into, then maybe first, pluck, extreme_by,
count_by, rank, entries...). Every drawn plan is well typed, so it must compile; running
it must give, at every step, an output valid against the type compile inferred.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from hypothesis import strategies as st
from hypothesis.strategies import DrawFn, SearchStrategy
from pydantic import BaseModel, create_model

from pte._catalogue import Registry, load_registry, tool

__all__ = ["DataCase", "data_plans"]

#: field kind -> (python type, strategy of values)
_WORDS = st.sampled_from(["alpha", "Beta", "gamma ray", "delta-7", "Rent due", "parent", "x", ""])
_KINDS: dict[str, tuple[Any, SearchStrategy[Any]]] = {
    "text": (str, _WORDS),
    "int": (int, st.integers(-50, 50)),
    "decimal": (Decimal, st.decimals(-100, 100, places=2, allow_nan=False, allow_infinity=False)),
    "flag": (bool, st.booleans()),
    "when": (
        str,
        st.datetimes(dt.datetime(2024, 1, 1), dt.datetime(2024, 12, 31)).map(
            lambda d: d.isoformat(timespec="minutes")
        ),
    ),
    "tags": (list[str], st.lists(_WORDS, max_size=3)),
}
_SORTABLE = ("text", "int", "decimal", "when")
_NUMERIC = ("int", "decimal")


@dataclass(frozen=True)
class DataCase:
    """One generated case: the registry (a source tool + stock packs), the plan document, the records."""

    registry: Registry
    document: dict[str, Any]
    records: list[dict[str, Any]]
    #: Field name -> kind, of the source records.
    fields: dict[str, str] = field(default_factory=dict)


def _source(fields: dict[str, tuple[str, bool]], records: list[dict[str, Any]]) -> Any:
    specs: dict[str, Any] = {}
    for name, (kind, optional) in fields.items():
        py = _KINDS[kind][0]
        specs[name] = (py | None, None) if optional else (py, ...)
    row: Any = create_model("Row", **specs)
    rows = create_model("Rows", rows=(list[row], ...))

    def source() -> BaseModel:
        return rows.model_validate({"rows": records})

    source.__annotations__ = {"return": rows}
    return tool(name="source", provenance="untrusted")(source)


def _value_for(draw: DrawFn, kind: str) -> Any:
    value = draw(_KINDS[kind][1])
    return format(value, "f") if isinstance(value, Decimal) else value


def _filter(draw: DrawFn, kind: str) -> tuple[str, Any]:
    if kind == "text":
        return draw(st.sampled_from(["eq", "contains", "starts_with", "has_word", "ne"])), draw(_WORDS)
    if kind in _NUMERIC:
        return draw(st.sampled_from(["lt", "ge", "eq"])), _value_for(draw, kind)
    if kind == "flag":
        return "eq", draw(st.booleans())
    if kind == "when":
        return draw(st.sampled_from(["lt", "ge"])), _value_for(draw, "when").replace("T", " ")
    return "contains", draw(_WORDS)


@st.composite
def _cases(draw: DrawFn) -> DataCase:
    names = draw(
        st.lists(st.sampled_from(["a", "b", "c", "d", "e", "f"]), min_size=1, max_size=5, unique=True)
    )
    fields = {n: (draw(st.sampled_from(list(_KINDS))), draw(st.booleans())) for n in names}
    records = []
    for _ in range(draw(st.integers(0, 6))):
        record = {}
        for name, (kind, optional) in fields.items():
            record[name] = None if optional and draw(st.booleans()) else _value_for(draw, kind)
        records.append(record)
    kinds = {n: k for n, (k, _) in fields.items()}
    steps: list[dict[str, Any]] = [{"id": "src", "tool": "source", "args": {}}]
    current = "src/rows"
    for index in range(draw(st.integers(1, 5))):
        sid = f"s{index}"
        op = draw(st.sampled_from(["filter", "sort", "take", "pick", "extract_into"]))
        name = draw(st.sampled_from(sorted(kinds)))
        if op == "filter":
            test, value = _filter(draw, kinds[name])
            args: dict[str, Any] = {"field": name, "op": test, "value": value}
            if kinds[name] in ("text", "tags") and draw(st.booleans()):
                args["ignore_case"] = True
            step = {"id": sid, "tool": "filter_records", "args": {"records": {"$ref": current}, **args}}
        elif op == "sort" and kinds[name] in _SORTABLE:
            step = {
                "id": sid,
                "tool": "sort_records",
                "args": {"records": {"$ref": current}, "by": name, "descending": draw(st.booleans())},
            }
        elif op == "pick" and len(kinds) > 1:
            keep = draw(st.lists(st.sampled_from(sorted(kinds)), min_size=1, unique=True))
            kinds = {n: kinds[n] for n in keep}
            step = {"id": sid, "tool": "pick", "args": {"records": {"$ref": current}, "fields": keep}}
        elif op == "extract_into" and "w" not in kinds and any(k == "text" for n, k in kinds.items()):
            text_field = draw(st.sampled_from(sorted(n for n, k in kinds.items() if k == "text")))
            kinds = {**kinds, "w": "text"}
            step = {
                "id": sid,
                "tool": "extract_into",
                "args": {
                    "records": {"$ref": current},
                    "field": text_field,
                    "pattern": "(?P<w>[a-z]+)",
                    "keep_unmatched": True,
                },
            }
        else:
            step = {
                "id": sid,
                "tool": "take",
                "args": {"records": {"$ref": current}, "n": draw(st.integers(0, 4))},
            }
        steps.append(step)
        current = f"{sid}/records"
    terminal = draw(st.sampled_from(["none", "first", "pluck", "extreme_by", "count_by", "rank", "unique"]))
    name = draw(st.sampled_from(sorted(kinds)))
    if terminal == "first":
        steps.append({"id": "t", "tool": "first", "args": {"records": {"$ref": current}}})
    elif terminal == "pluck":
        steps.append({"id": "t", "tool": "pluck", "args": {"records": {"$ref": current}, "field": name}})
        if kinds[name] in ("text", "int", "decimal", "when"):
            steps.append({"id": "u", "tool": "unique", "args": {"values": {"$ref": "t/values"}}})
    elif terminal == "extreme_by" and kinds[name] in _NUMERIC:
        steps.append(
            {
                "id": "t",
                "tool": "extreme_by",
                "args": {
                    "records": {"$ref": current},
                    "field": name,
                    "which": draw(st.sampled_from(["max", "min"])),
                },
            }
        )
    elif terminal == "count_by" and kinds[name] in ("text", "int", "flag"):
        steps.append({"id": "t", "tool": "count_by", "args": {"items": {"$ref": current}, "field": name}})
    elif terminal in ("rank", "unique"):
        steps.append({"id": "t", "tool": "rank", "args": {"items": {"$ref": current}}})
    registry = Registry([_source(fields, records)]).merged(load_registry(["shaping", "containers", "text"]))
    return DataCase(
        registry, {"pte_plan": "1", "steps": steps}, records, {n: k for n, (k, _) in fields.items()}
    )


def data_plans() -> SearchStrategy[DataCase]:
    """Cases of (registry, plan document, records) chaining generic data operations; see the module doc."""
    return _cases()
