"""The containers pack (objects keyed by data, lists of plain values) and exact number conversion."""

from __future__ import annotations

import pytest

from tests._packs import caller

box = caller("containers")
calc = caller("calculator")
shaping = caller("shaping")


def test_objects_keyed_by_data() -> None:
    obj = {"Hotel A": "Rating: 4.2", "Hotel B": "Rating: 3.9"}
    assert box("entries", object=obj) == {
        "records": [{"key": "Hotel A", "value": "Rating: 4.2"}, {"key": "Hotel B", "value": "Rating: 3.9"}],
        "count": 2,
    }
    assert box("get_key", object=obj, key="Hotel B") == {"value": "Rating: 3.9"}
    with pytest.raises(ValueError, match="no key 'Hotel C'; the object has: Hotel A, Hotel B"):
        box("get_key", object=obj, key="Hotel C")
    assert box("keys", object=obj) == {"values": ["Hotel A", "Hotel B"], "count": 2}
    assert box("has_key", object=obj, key="Hotel A") == {"result": True}


def test_lists_of_plain_values() -> None:
    channels = ["general", "random", "External_0", "dev"]
    assert box("filter_values", values=channels, op="starts_with", value="ext", ignore_case=True)[
        "values"
    ] == ["External_0"]
    assert box("filter_values", values=["3", 10, "2.5"], op="gt", value=2.9)["values"] == ["3", 10]
    assert box("filter_values", values=["a", "B"], op="in", value=["b"], ignore_case=True)["values"] == ["B"]
    assert box("sort_values", values=["10", 9, "100"])["values"] == [9, "10", "100"]
    assert box("sort_values", values=["b", "a"], descending=True)["values"] == ["b", "a"]
    assert box("unique", values=["a", "A", "b", "a"], ignore_case=True)["values"] == ["a", "b"]
    assert box("difference", values=["a", "b", "c"], remove=["b"])["values"] == ["a", "c"]
    assert box("intersection", values=["a", "b", "c"], other=["c", "a"])["values"] == ["a", "c"]
    assert box("count_by", items=["x", "y", "x"])["groups"] == [
        {"key": "x", "count": 2},
        {"key": "y", "count": 1},
    ]
    assert box("rank", items=["x", "y"])["records"] == [{"rank": 1, "item": "x"}, {"rank": 2, "item": "y"}]


def test_a_list_of_objects_given_to_a_plain_value_tool_says_why() -> None:
    with pytest.raises(ValueError, match="item 0 is an object; these tools take lists of plain values"):
        box("filter_values", values=[{"a": 1}], op="eq", value=1)
    with pytest.raises(ValueError, match="cannot compare a number with text"):
        box("filter_values", values=[1], op="lt", value="abc")
    with pytest.raises(ValueError, match="mix numbers and text"):
        box("sort_values", values=[1, "abc"])


def test_count_by_field_and_extremes() -> None:
    records = [{"s": "x", "p": "10.5"}, {"s": "y", "p": 3}, {"s": "x", "p": None}]
    assert box("count_by", items=records, field="s")["groups"][0] == {"key": "x", "count": 2}
    with pytest.raises(ValueError, match="item 0 is text without field 's'"):
        box("count_by", items=["a"], field="s")
    assert box("extreme_by", records=records, field="p", which="max") == {"record": records[0]}
    assert box("extreme_by", records=records, field="p", which="min") == {"record": records[1]}
    with pytest.raises(ValueError, match="no record has a value for 'q'"):
        box("extreme_by", records=records, field="q", which="max")


def test_decimal_strings_become_numbers_exactly_or_not_at_all() -> None:
    assert calc("to_number", value="1125.00") == {"value": 1125.0}
    assert calc("to_number", value="98.70") == {"value": 98.7}
    assert calc("to_number", value="0.125", places=2) == {"value": 0.12}  # half-even
    with pytest.raises(ValueError, match="does not fit a JSON number exactly"):
        calc("to_number", value="0.1000000000000000000001")
    assert calc("to_integer", value="42.00") == {"value": 42}
    with pytest.raises(ValueError, match="not a whole number"):
        calc("to_integer", value="42.5")
    with pytest.raises(ValueError, match="beyond 2\\*\\*53 - 1"):
        calc("to_integer", value=str(2**53))


def test_filter_records_never_matches_silently_by_type() -> None:
    records = [{"meta": {"a": 1}, "n": 5, "when": "2024-05-15T10:00:00"}]
    with pytest.raises(ValueError, match="needs a text field or a list, but the field holds an object"):
        shaping("filter_records", records=records, field="meta", op="contains", value="a")
    with pytest.raises(ValueError, match="holds a number"):
        shaping("filter_records", records=records, field="n", op="starts_with", value="5")
    before = shaping("filter_records", records=records, field="when", op="lt", value="2024-05-15 13:00")
    assert before["count"] == 1  # instants, not text: "T10" vs " 13"
    with pytest.raises(ValueError, match="one has a time zone and the other not"):
        shaping("filter_records", records=records, field="when", op="lt", value="2024-05-15T13:00:00+02:00")
    rows = [{"t": "2024-05-15 13:00"}, {"t": "2024-05-15T10:00:00"}]
    assert [r["t"] for r in shaping("sort_records", records=rows, by="t")["records"]] == [
        "2024-05-15T10:00:00",
        "2024-05-15 13:00",
    ]
