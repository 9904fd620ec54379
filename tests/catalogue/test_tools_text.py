"""The text and extract packs: matching, RE2 patterns, splitting, Key: value blocks, sections, entities."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from pte import PlanRejected, compile_plan, load_registry
from tests._packs import caller

text = caller("text")
extract = caller("extract")


def test_every_tool_is_derived_read_and_documented() -> None:
    for spec in load_registry(["text", "extract"]):
        assert spec.provenance == "derived" and spec.effect == "read" and spec.description, spec.name


@pytest.mark.parametrize(
    ("value", "mode", "ignore_case", "matched"),
    [
        ("rent", "contains", True, True),
        ("rent", "contains", False, False),
        ("rent", "has_word", True, True),
        ("ren", "has_word", True, False),
        ("Rent", "starts_with", False, True),
        ("march.", "ends_with", True, True),
        ("rent due in march.", "equals", True, True),
    ],
)
def test_text_match(value: str, mode: str, ignore_case: bool, matched: bool) -> None:
    out = text("text_match", text="Rent due in March.", value=value, mode=mode, ignore_case=ignore_case)
    assert out == {"matched": matched}
    assert text("text_match", text="the parent", value="rent", mode="has_word") == {"matched": False}


def test_regex_extract_gives_one_record_per_match_named_by_groups() -> None:
    out = text(
        "regex_extract", text="Rating: 4.2\nrating: 3", pattern=r"rating: (?P<r>[0-9.]+)", ignore_case=True
    )
    assert out == {"records": [{"r": "4.2"}, {"r": "3"}], "count": 2, "matched": True}
    assert text("regex_extract", text="a1 b22", pattern=r"\d+")["records"] == [
        {"match": "1"},
        {"match": "22"},
    ]
    optional = text("regex_extract", text="y", pattern=r"(?P<a>x)?(?P<b>y)")
    assert optional["records"] == [{"a": "", "b": "y"}]
    assert text("regex_extract", text="abc", pattern="z") == {"records": [], "count": 0, "matched": False}


def test_regex_is_re2_linear_time_and_refuses_backreferences() -> None:
    with pytest.raises(ValueError, match="invalid pattern"):
        text("regex_extract", text="aa", pattern=r"(a)\1")
    started = time.perf_counter()
    text("regex_extract", text="a" * 50_000 + "!", pattern=r"(a+)+$")  # catastrophic for backtracking engines
    assert time.perf_counter() - started < 5


def test_regex_records_are_typed_from_the_literal_pattern_at_compile_time() -> None:
    registry = load_registry(["text", "shaping"])
    doc: dict[str, Any] = {
        "pte_plan": "1",
        "steps": [
            {
                "id": "m",
                "tool": "regex_extract",
                "args": {"text": "Rating: 4.2", "pattern": "Rating: (?P<r>[0-9.]+)"},
            },
            {"id": "f", "tool": "first", "args": {"records": {"$ref": "m/records"}}},
        ],
        "result": {"$ref": "f/record/r"},
    }
    compile_plan(json.dumps(doc), registry)
    doc["result"] = {"$ref": "f/record/rating"}
    with pytest.raises(PlanRejected) as info:
        compile_plan(json.dumps(doc), registry)
    assert info.value.reason == "bad_reference"
    doc["steps"][0]["args"]["pattern"] = "(a)\\1"
    with pytest.raises(PlanRejected) as info:
        compile_plan(json.dumps(doc), registry)
    assert info.value.reason == "invalid_args" and "invalid pattern" in info.value.message


def test_extract_into_adds_groups_to_each_record_and_refuses_non_text() -> None:
    records = [{"k": "A", "v": "Rating: 4.2"}, {"k": "B", "v": "none"}]
    out = text("extract_into", records=records, field="v", pattern=r"Rating: (?P<rating>[0-9.]+)")
    assert out == {"records": [{"k": "A", "v": "Rating: 4.2", "rating": "4.2"}], "count": 1}
    kept = text("extract_into", records=records, field="v", pattern=r"(?P<n>\d)", keep_unmatched=True)
    assert [r["n"] for r in kept["records"]] == ["4", ""]
    with pytest.raises(ValueError, match="record 0 field 'k' is not text"):
        text("extract_into", records=[{"k": 1}], field="k", pattern="x")


def test_split_parse_fields_and_sections() -> None:
    assert text("split_text", text="a\n\n - b \n")["values"] == ["a", "- b"]
    assert text("split_text", text="- a\n* b\n1. c", strip_bullets=True)["values"] == ["a", "b", "c"]
    assert text("split_text", text="x;y;;z", separator=";")["values"] == ["x", "y", "z"]
    with pytest.raises(ValueError, match="separator is empty"):
        text("split_text", text="x", separator="")
    parsed = text("parse_fields", text="Intro\nName: A\nB\nC\nRating: 4.2\nTags:\n- x\n- y")
    assert parsed["fields"] == {"Name": "A", "Rating": "4.2", "Tags": ""}
    assert [e["lines"] for e in parsed["entries"]] == [["A", "B", "C"], ["4.2"], ["x", "y"]]
    doc = "# Trip\nintro\n## Packing list\n- a\n### Extra\n- b\n## Budget\n100"
    assert text("section", text=doc, heading="packing list") == {"text": "- a\n### Extra\n- b"}
    assert text("section", text=doc, heading="Packing list", until="Extra") == {"text": "- a"}
    assert text("section", text="Steps:\n1. Mix\nNotes:\nx", heading="Steps") == {"text": "1. Mix"}
    with pytest.raises(ValueError, match=r"no heading 'Dessert'.*Trip, Packing list, Extra, Budget"):
        text("section", text=doc, heading="Dessert")


def test_small_transforms() -> None:
    assert text("transform_text", text="  a  B ", op="collapse_spaces") == {"text": "a B"}
    assert text("transform_text", text="ab", op="upper") == {"text": "AB"}
    assert text("replace_text", text="Rent rent", old="RENT", new="x", ignore_case=True) == {"text": "x x"}
    assert text("replace_text", text="a.b", old=".", new="\\1") == {"text": "a\\1b"}  # plain text, no groups
    assert text("slice_text", text="abcdef", start=1, end=-1) == {"text": "bcde"}
    assert text("join_text", values=["a", "b"], separator="\n") == {"text": "a\nb"}


def test_extract_ibans_checks_checksum_and_country_length() -> None:
    sample = "DE89 3704 0044 0532 0130 00, de89370400440532013001 (checksum), DE8937040044053201300 (short)"
    assert extract("extract", text=sample, kind="iban") == {"values": ["DE89370400440532013000"], "count": 1}
    bill = "IBAN: UK12 3456 7890 1234 5678 90\nIBAN: GB29 NWBK 6016 1331 9268 19 Thanks"
    assert extract("extract", text=bill, kind="iban")["values"] == ["GB29NWBK60161331926819"]


def test_extract_emails_urls_numbers() -> None:
    sample = "Mail a.b+c@x.example or (see https://x.example/a_(b)). www.y.example/p, 1,234.5 and -3"
    assert extract("extract", text=sample, kind="email")["values"] == ["a.b+c@x.example"]
    assert extract("extract", text=sample, kind="url")["values"] == [
        "https://x.example/a_(b)",
        "www.y.example/p",
    ]
    assert extract("extract", text=sample, kind="number")["values"] == ["1234.5", "-3"]
    assert extract("extract", text="1 1 2", kind="number", unique=False)["count"] == 3


def test_extract_amounts_normalises_to_exact_decimal_and_iso_code() -> None:
    out = extract("extract_amounts", text="EUR 1,234.50; 1.234,50 €; $12; -45.00 USD; CHF 99; 12 euros; 2024")
    assert [(r["amount"], r["currency"]) for r in out["records"]] == [
        ("1234.50", "EUR"),
        ("1234.50", "EUR"),
        ("12", "USD"),
        ("-45.00", "USD"),
        ("99", "CHF"),
        ("12", "EUR"),
    ]
    assert extract("extract_amounts", text="EUR 5 and USD 6", currency="usd")["records"][0]["amount"] == "6"
