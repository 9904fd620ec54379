"""The shaping tool pack: deterministic projections, filters, sorts, sums and safe text templates."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pte import Registry, ToolError, load_pack

INVOICES: list[dict[str, Any]] = [
    {
        "id": "INV-1",
        "customer": "C2",
        "amount": "120.50",
        "currency": "EUR",
        "due": "2026-10-01",
        "tags": ["vip"],
    },
    {"id": "INV-2", "customer": "C1", "amount": 80, "currency": "USD", "due": "2026-09-15", "tags": []},
    {"id": "INV-3", "customer": "C2", "amount": "0.10", "currency": "EUR", "due": None},
    {
        "id": "INV-4",
        "customer": "C3",
        "amount": 19.4,
        "currency": "GBP",
        "due": "2026-08-30",
        "tags": ["vip", "x"],
    },
    {"id": "INV-5", "customer": "C1", "amount": "80.00", "currency": "USD"},
]
TOOLS = {
    "pick",
    "pluck",
    "pluck_numbers",
    "pluck_text",
    "filter_records",
    "sort_records",
    "take",
    "zip_lists",
    "join_records",
    "sum_field",
    "group_sum",
    "format_text",
    "count",
    "first",
}


@pytest.fixture(scope="module")
def pack() -> Registry:
    return load_pack("shaping")


@pytest.fixture(scope="module")
def call(pack: Registry) -> Callable[..., Any]:
    """Call a tool the way the executor does: validate args, invoke, validate the JSON output."""

    def run(name: str, **args: Any) -> Any:
        spec = pack[name]
        spec.validate_args(args)
        out = spec.invoke(args)
        spec.validate_output(out)
        return out

    return run


def ids(out: dict[str, Any]) -> list[str]:
    return [r["id"] for r in out["records"]]


def test_stock_pack_loads_derived_with_referenceable_outputs(pack: Registry) -> None:
    assert set(pack.names) == TOOLS
    for spec in pack:
        assert spec.provenance == "derived" and spec.effect == "read" and spec.description, spec.name
        assert spec.output_schema.get("type") == "object" and spec.output_schema.get("properties"), spec.name
    # Typed columns: plans can wire these into typed parameters (calculator, send_reminders).
    numbers = pack["pluck_numbers"].output_schema["properties"]["values"]["items"]
    assert numbers["type"] == "string" and "pattern" in numbers
    assert pack["pluck_text"].output_schema["properties"]["values"]["items"] == {"type": "string"}


def test_pick(call: Callable[..., Any]) -> None:
    out = call("pick", records=INVOICES, fields=["id", "due"])
    assert out["count"] == 5
    assert out["records"][0] == {"id": "INV-1", "due": "2026-10-01"}
    assert out["records"][4] == {"id": "INV-5"}  # a field a record lacks is left out
    assert call("pick", records=[], fields=["x"]) == {"records": [], "count": 0}
    with pytest.raises(ValueError, match=r"unknown field 'amout'.*amount"):
        call("pick", records=INVOICES, fields=["id", "amout"])
    with pytest.raises(ValueError, match="fields is empty"):
        call("pick", records=INVOICES, fields=[])


def test_pluck_columns(call: Callable[..., Any]) -> None:
    assert call("pluck", records=INVOICES, field="amount") == {
        "values": ["120.50", 80, "0.10", 19.4, "80.00"],
        "count": 5,
    }
    assert call("pluck_numbers", records=INVOICES, field="amount")["values"] == [
        "120.50",
        "80",
        "0.10",
        "19.4",
        "80.00",
    ]
    assert call("pluck_text", records=INVOICES, field="id")["values"] == [f"INV-{n}" for n in range(1, 6)]
    with pytest.raises(ValueError, match="record 4 has no field 'due'"):
        call("pluck", records=INVOICES, field="due")
    with pytest.raises(ValueError, match="unknown field 'nope'"):
        call("pluck", records=INVOICES, field="nope")
    with pytest.raises(ValueError, match="record 0 field 'id' is not a number"):
        call("pluck_numbers", records=INVOICES, field="id")
    with pytest.raises(ValueError, match="record 1 field 'amount' is not text"):
        call("pluck_text", records=INVOICES, field="amount")


@pytest.mark.parametrize(
    ("op", "value", "expected"),
    [
        ("eq", "80", ["INV-2", "INV-5"]),  # numbers and decimal strings compare by value
        ("eq", 80.0, ["INV-2", "INV-5"]),
        ("ne", "80", ["INV-1", "INV-3", "INV-4"]),
        ("gt", "19.4", ["INV-1", "INV-2", "INV-5"]),
        ("ge", 19.4, ["INV-1", "INV-2", "INV-4", "INV-5"]),
        ("lt", "80", ["INV-3", "INV-4"]),
        ("le", "0.1", ["INV-3"]),
        ("in", ["0.1", 120.5], ["INV-1", "INV-3"]),
    ],
)
def test_filter_records_numeric(call: Callable[..., Any], op: str, value: Any, expected: list[str]) -> None:
    out = call("filter_records", records=INVOICES, field="amount", op=op, value=value)
    assert ids(out) == expected and out["count"] == len(expected)


def test_filter_records_text_lists_and_missing(call: Callable[..., Any]) -> None:
    assert ids(call("filter_records", records=INVOICES, field="due", op="lt", value="2026-09-30")) == [
        "INV-2",
        "INV-4",
    ]  # ISO dates order as text; null and missing values never match
    assert ids(call("filter_records", records=INVOICES, field="due", op="ne", value="2026-10-01")) == [
        "INV-2",
        "INV-3",
        "INV-4",
    ]  # INV-5 has no `due`: records without the field never match
    assert ids(call("filter_records", records=INVOICES, field="id", op="contains", value="-4")) == ["INV-4"]
    assert ids(call("filter_records", records=INVOICES, field="tags", op="contains", value="vip")) == [
        "INV-1",
        "INV-4",
    ]
    assert ids(call("filter_records", records=INVOICES, field="currency", op="in", value=["GBP", "USD"])) == [
        "INV-2",
        "INV-4",
        "INV-5",
    ]
    flags = [{"id": "a", "ok": True}, {"id": "b", "ok": 1}]
    assert ids(call("filter_records", records=flags, field="ok", op="eq", value=True)) == [
        "a"
    ]  # true is not 1
    assert call("filter_records", records=[], field="x", op="eq", value=1) == {"records": [], "count": 0}


def test_filter_records_errors(call: Callable[..., Any]) -> None:
    with pytest.raises(ValueError, match="unknown field 'amnt'"):
        call("filter_records", records=INVOICES, field="amnt", op="eq", value=1)
    with pytest.raises(ValueError, match="cannot compare"):
        call("filter_records", records=INVOICES, field="id", op="gt", value=5)
    with pytest.raises(ValueError, match="needs a list"):
        call("filter_records", records=INVOICES, field="id", op="in", value="INV-1")
    with pytest.raises(ValueError, match="needs a text value"):
        call("filter_records", records=INVOICES, field="id", op="contains", value=1)
    with pytest.raises(ToolError):
        call("filter_records", records=INVOICES, field="id", op="like", value="INV%")


def test_sort_records(call: Callable[..., Any]) -> None:
    assert ids(call("sort_records", records=INVOICES, by="amount")) == [
        "INV-3",
        "INV-4",
        "INV-2",
        "INV-5",
        "INV-1",
    ]
    # Stable in both directions: INV-2 (80) stays before INV-5 ("80.00").
    assert ids(call("sort_records", records=INVOICES, by="amount", descending=True)) == [
        "INV-1",
        "INV-2",
        "INV-5",
        "INV-4",
        "INV-3",
    ]
    # Null and missing sort last in either direction.
    assert ids(call("sort_records", records=INVOICES, by="due")) == [
        "INV-4",
        "INV-2",
        "INV-1",
        "INV-3",
        "INV-5",
    ]
    assert ids(call("sort_records", records=INVOICES, by="due", descending=True)) == [
        "INV-1",
        "INV-2",
        "INV-4",
        "INV-3",
        "INV-5",
    ]
    with pytest.raises(ValueError, match="mixes numbers and text"):
        call("sort_records", records=[{"v": 1}, {"v": "a"}], by="v")
    with pytest.raises(ValueError, match="unknown field"):
        call("sort_records", records=INVOICES, by="size")


def test_take_count_first(call: Callable[..., Any]) -> None:
    top = call(
        "take", records=call("sort_records", records=INVOICES, by="amount", descending=True)["records"], n=2
    )
    assert ids(top) == ["INV-1", "INV-2"] and top["count"] == 2
    assert call("take", records=INVOICES, n=10)["count"] == 5
    assert call("take", records=INVOICES, n=0)["records"] == []
    with pytest.raises(ToolError):
        call("take", records=INVOICES, n=-1)
    assert call("count", records=INVOICES) == {"count": 5}
    assert call("count", records=["INV-1", "INV-2"]) == {"count": 2}
    assert call("first", records=INVOICES) == {"record": INVOICES[0]}
    with pytest.raises(ValueError, match="empty"):
        call("first", records=[])


def test_sum_field_is_decimal_exact(call: Callable[..., Any]) -> None:
    assert call("sum_field", records=INVOICES, field="amount") == {"total": "300.00", "count": 5}
    tenths = [{"v": 0.1}, {"v": 0.2}]
    assert call("sum_field", records=tenths, field="v") == {"total": "0.3", "count": 2}
    assert call("sum_field", records=[], field="v") == {"total": "0", "count": 0}
    assert call("sum_field", records=[{"v": "1e-7"}], field="v")["total"] == "0.0000001"  # never "1E-7"
    with pytest.raises(ValueError, match="record 1 field 'v' is not a number"):
        call("sum_field", records=[{"v": 1}, {"v": "abc"}], field="v")
    with pytest.raises(ValueError, match="is not a number"):
        call("sum_field", records=[{"v": True}], field="v")
    with pytest.raises(ValueError, match="record 1 has no field"):
        call("sum_field", records=[{"v": 1}, {"w": 2}], field="v")


def test_group_sum(call: Callable[..., Any]) -> None:
    out = call("group_sum", records=INVOICES, key="currency", field="amount")
    assert out == {
        "groups": [
            {"key": "EUR", "total": "120.60", "count": 2},
            {"key": "GBP", "total": "19.4", "count": 1},
            {"key": "USD", "total": "160.00", "count": 2},
        ],
        "count": 3,
    }
    numeric_keys = call(
        "group_sum", records=[{"k": 2, "v": 1}, {"k": 1, "v": 2}, {"k": 2, "v": 3}], key="k", field="v"
    )
    assert numeric_keys["groups"] == [
        {"key": "1", "total": "2", "count": 1},
        {"key": "2", "total": "4", "count": 2},
    ]
    with pytest.raises(ValueError, match="unknown field 'cur'"):
        call("group_sum", records=INVOICES, key="cur", field="amount")
    with pytest.raises(ValueError, match="is not a number"):
        call("group_sum", records=INVOICES, key="currency", field="id")


def test_format_text(call: Callable[..., Any]) -> None:
    values = {
        "total": "1520.75",
        "n": 3,
        "ids": ["INV-1", "INV-2"],
        "ok": True,
        "none": None,
        "obj": {"b": 1, "a": [1]},
        "unused": 1,
    }
    out = call(
        "format_text",
        template="{n} invoices ({ids}) total EUR {total}; ok={ok}; none=[{none}]; obj={obj}; {{literal}}",
        values=values,
    )
    expected = (
        '3 invoices (INV-1, INV-2) total EUR 1520.75; ok=true; none=[]; obj={"a": [1], "b": 1}; {literal}'
    )
    assert out == {"text": expected}
    assert call("format_text", template="no placeholders", values={}) == {"text": "no placeholders"}


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("{a.__class__}", "not allowed"),
        ("{a.__class__.__init__.__globals__}", "not allowed"),
        ("{a[0]}", "not allowed"),
        ("{}", "not allowed"),
        ("{0}", "not allowed"),
        ("{a!r}", "conversion"),
        ("{a!s}", "conversion"),
        ("{a:>10}", "format spec"),
        ("{a:{a}}", "format spec"),
        ("{missing}", "no value for placeholder {missing}"),
        ("{a", "invalid template"),
        ("a}", "invalid template"),
    ],
)
def test_format_text_refusals(call: Callable[..., Any], template: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("{", r"\{").replace("}", r"\}")):
        call("format_text", template=template, values={"a": "x"})


def test_format_text_output_is_bounded(call: Callable[..., Any]) -> None:
    with pytest.raises(ValueError, match="exceed"):
        call("format_text", template="{a}" * 20, values={"a": "x" * 10_000})


_SCALAR = st.one_of(
    st.integers(-1000, 1000),
    st.integers(-100_000, 100_000).map(lambda cents: str(Decimal(cents).scaleb(-2))),
)


@given(st.lists(_SCALAR, max_size=30), st.booleans())
def test_sort_is_an_ordered_stable_permutation(
    call: Callable[..., Any], values: list[Any], descending: bool
) -> None:
    records = [{"i": i, "v": v} for i, v in enumerate(values)]
    out = call("sort_records", records=records, by="v", descending=descending)["records"]
    assert sorted(r["i"] for r in out) == list(range(len(values)))
    keys = [Decimal(str(r["v"])) for r in out]
    assert keys == sorted(keys, reverse=descending)
    for a, b in itertools.pairwise(out):
        if Decimal(str(a["v"])) == Decimal(str(b["v"])):
            assert a["i"] < b["i"]
    total = call("sum_field", records=records, field="v")["total"]
    assert Decimal(total) == sum((Decimal(str(v)) for v in values), Decimal(0))
