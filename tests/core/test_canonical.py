"""RFC 8785 (JCS): the RFC's own test vectors, and PTE's hashing against independent implementations."""

from __future__ import annotations

import json
import math
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

import tests._services as _services

# private: canonical JSON's own bytes, reader, check, error and member cut, under test
from pte._core import (
    CanonicalizationError,
    canonical_bytes,
    canonical_loads,
    is_canonical,
    well_formed,
    without_member,
)
from pte.audit import canonical_json, hash_json

REPO = Path(__file__).resolve().parents[2]
NODE_VERIFIER = REPO / "verifier" / "verify.mjs"

# RFC 8785 section 3.2.2 (and 3.2.4): the example object and its canonical form.
RFC_VALUES_INPUT = r"""{
  "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
  "literals": [null, true, false]
}"""
RFC_VALUES_OUTPUT = (
    '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
    '"string":"€$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}'
)

# RFC 8785 section 3.2.3: property sorting by UTF-16 code units.
RFC_SORTING_INPUT = r"""{
  "\u20ac": "Euro Sign",
  "\r": "Carriage Return",
  "\ufb33": "Hebrew Letter Dalet With Dagesh",
  "1": "One",
  "\ud83d\ude00": "Emoji: Grinning Face",
  "\u0080": "Control",
  "\u00f6": "Latin Small Letter O With Diaeresis"
}"""
RFC_SORTING_ORDER = ["\r", "1", "\u0080", "\u00f6", "\u20ac", "\U0001f600", "\ufb33"]

# RFC 8785 appendix B: IEEE 754 bit patterns and their JCS (ECMAScript) serialisation.
RFC_NUMBERS = [
    ("0000000000000000", "0"),
    ("8000000000000000", "0"),
    ("0000000000000001", "5e-324"),
    ("8000000000000001", "-5e-324"),
    ("7fefffffffffffff", "1.7976931348623157e+308"),
    ("ffefffffffffffff", "-1.7976931348623157e+308"),
    ("4340000000000000", "9007199254740992"),
    ("c340000000000000", "-9007199254740992"),
    ("4430000000000000", "295147905179352830000"),
    ("44b52d02c7e14af5", "9.999999999999997e+22"),
    ("44b52d02c7e14af6", "1e+23"),
    ("44b52d02c7e14af7", "1.0000000000000001e+23"),
    ("444b1ae4d6e2ef4e", "999999999999999700000"),
    ("444b1ae4d6e2ef4f", "999999999999999900000"),
    ("444b1ae4d6e2ef50", "1e+21"),
    ("3eb0c6f7a0b5ed8c", "9.999999999999997e-7"),
    ("3eb0c6f7a0b5ed8d", "0.000001"),
    ("41b3de4355555553", "333333333.3333332"),
    ("41b3de4355555554", "333333333.33333325"),
    ("41b3de4355555555", "333333333.3333333"),
    ("41b3de4355555556", "333333333.3333334"),
    ("41b3de4355555557", "333333333.33333343"),
    ("becbf647612f3696", "-0.0000033333333333333333"),
    ("43143ff3c1cb0959", "1424953923781206.2"),
]


def test_rfc8785_example_object() -> None:
    value = json.loads(RFC_VALUES_INPUT)
    assert canonical_json(value) == RFC_VALUES_OUTPUT
    assert is_canonical(RFC_VALUES_OUTPUT.encode(), json.loads(RFC_VALUES_OUTPUT))


def test_rfc8785_property_sorting() -> None:
    value = json.loads(RFC_SORTING_INPUT)
    out = json.loads(canonical_json(value))
    assert list(out) == RFC_SORTING_ORDER


@pytest.mark.parametrize(("bits", "expected"), RFC_NUMBERS)
def test_rfc8785_number_serialisation(bits: str, expected: str) -> None:
    (number,) = struct.unpack(">d", bytes.fromhex(bits))
    assert canonical_json(number) == expected
    # inside a container too (the orjson path) and in the verifier's check
    assert canonical_json({"n": [number]}) == '{"n":[' + expected + "]}"
    line = b'{"n":[' + expected.encode() + b"]}"
    assert is_canonical(line, json.loads(line))


@pytest.mark.parametrize("bits", ["7fffffffffffffff", "7ff0000000000000", "fff0000000000000"])
def test_rfc8785_nan_and_infinities_are_refused(bits: str) -> None:
    (number,) = struct.unpack(">d", bytes.fromhex(bits))
    for value in (number, [number], {"n": number}):
        with pytest.raises(CanonicalizationError):
            canonical_bytes(value)


def test_the_issues_probe_values() -> None:
    # The values on which PTE's former "canonical JSON" (json.dumps) was not RFC 8785.
    assert canonical_json([1.0, 1e-07, -0.0, 2.0**60]) == "[1,1e-7,0,1152921504606847000]"
    # The integer 2**60 would read back as 1152921504606847000 everywhere: refused, not altered.
    with pytest.raises(CanonicalizationError):
        canonical_bytes([2**60])
    assert canonical_json([2**53, -(2**53)]) == "[9007199254740992,-9007199254740992]"
    assert canonical_json({"\ue000": 1, "\U0001f600": 2}) == '{"\U0001f600":2,"\ue000":1}'


def test_integers_beyond_doubles_are_refused_not_rounded() -> None:
    with pytest.raises(CanonicalizationError):
        canonical_bytes({"n": 2**53 + 1})
    with pytest.raises(CanonicalizationError):
        canonical_bytes(10**400)
    # A JCS line for a big float reads back as a Python int; it is still canonical.
    line = canonical_bytes({"n": 4.668842051184357e16})
    assert line == b'{"n":46688420511843570}'
    assert is_canonical(line, json.loads(line))
    assert canonical_loads(line) == {"n": 4.668842051184357e16}


@pytest.mark.parametrize(
    "line",
    [
        b'{"a":1, "b":2}',  # whitespace
        b'{"b":1,"a":2}',  # key order
        b'{"a":1.0}',  # integral float
        b'{"a":1E3}',  # exponent form
        b'{"a":"\\u0041"}',  # needless escape
        b'{"a":"\\u001F"}',  # upper-case hex
        b'{"a":1,"a":1}',  # duplicate key
        b'{"a":-0}',  # negative zero
        b'{"a":9007199254740993}',  # not a double
        b'{"\xee\x80\x80":1,"\xf0\x9f\x98\x80":2}',  # code point order, not UTF-16
    ],
)
def test_non_canonical_lines_are_detected(line: bytes) -> None:
    assert not is_canonical(line, json.loads(line))
    assert not is_canonical(line, orjson.loads(line))


def test_every_code_point_is_escaped_as_rfc8785_says() -> None:
    # The fast path (orjson) must write every character exactly as the reference does.
    chars = [chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    for start in range(0, len(chars), 4096):
        chunk = "".join(chars[start : start + 4096])
        assert canonical_bytes({"k": chunk}) == rfc8785.dumps({"k": chunk})
        assert canonical_bytes({chunk: 0}) == rfc8785.dumps({chunk: 0})
    with pytest.raises(CanonicalizationError):
        canonical_bytes({"k": "\ud800"})


# Generated JSON: what can appear in a log (floats without NaN/infinity, integers a double holds).
_keys = st.text(max_size=6) | st.sampled_from(["\ue000", "\U0001f600", "a", "\u20ac", "hash"])


def _json_of(leaves: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """JSON values: lists and objects (keys from `_keys`) of `leaves`."""
    return st.recursive(
        leaves,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_keys, inner, max_size=4),
        max_leaves=12,
    )


_json = _json_of(
    st.none()
    | st.booleans()
    | st.integers(-(2**53) + 1, 2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)


@settings(max_examples=400, deadline=None)
@given(_json)
def test_hashing_equals_the_reference_implementation(value: Any) -> None:
    expected = rfc8785.dumps(value)
    assert canonical_bytes(value) == expected
    assert is_canonical(expected, json.loads(expected))
    assert is_canonical(expected, orjson.loads(expected))


# Integral floats (a catalogue's ``timeout_s: 30.0``) beside every other number: the encoder
# writes them as the integers JCS writes, through orjson, and must agree with the reference.
_integral_floats = st.integers(-(2**54), 2**54).map(float) | st.sampled_from([-0.0, 0.0, 1e15, 1e16, 2.0**53])
_json_integral = _json_of(
    _integral_floats
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.integers(-(2**53) + 1, 2**53 - 1)
    | st.text(max_size=3)
    | st.none()
)


@settings(max_examples=400, deadline=None)
@given(_json_integral)
def test_integral_floats_are_encoded_as_the_reference_writes_them(value: Any) -> None:
    before = orjson.dumps(value)
    assert canonical_bytes(value) == rfc8785.dumps(value)
    assert orjson.dumps(value) == before  # the caller's value is not changed


@settings(max_examples=400, deadline=None)
@given(_json)
def test_a_line_written_by_orjson_is_judged_exactly(value: Any) -> None:
    # `is_canonical` settles orjson's form from its bytes: it must accept it exactly when
    # orjson wrote what the reference writes.
    line = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    assert is_canonical(line, orjson.loads(line)) == (line == rfc8785.dumps(orjson.loads(line)))


def _node() -> str:
    return _services.node()


def test_hashing_equals_an_independent_implementation_in_javascript(tmp_path: Path) -> None:
    # Node's JSON.stringify is ECMAScript's number and string serialisation, which RFC 8785
    # adopts; verifier/verify.mjs adds only the UTF-16 key sort. Values are generated here.
    values: list[Any] = []

    @settings(max_examples=300, deadline=None, database=None)
    @given(_json)
    def collect(value: Any) -> None:
        values.append(value)

    collect()
    values += [[1.0, 1e-07, -0.0, 2.0**60, 2**53, 1e21, 1e-6, 5e-324], {"\ue000": 1, "\U0001f600": 2}]
    path = tmp_path / "values.jsonl"
    # Input in Python's own JSON (not canonical): the JavaScript side must canonicalise it.
    path.write_text("".join(json.dumps(v) + "\n" for v in values), encoding="utf-8")
    out = subprocess.run(
        [_node(), str(NODE_VERIFIER), "--jcs", str(path)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    results = [json.loads(line) for line in out.stdout.split("\n") if line]
    assert len(results) == len(values)
    for value, (text, digest) in zip(values, results, strict=True):
        assert text == canonical_json(value), value
        assert digest == hash_json(value)


def test_canonical_bytes_refuses_what_is_not_json() -> None:
    class Thing:
        pass

    for value in (Thing(), {"a": Thing()}, {1: "int key"}, {"a": {1, 2}}, math.nan):
        with pytest.raises((CanonicalizationError, TypeError, ValueError)):
            canonical_bytes(value)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))


@pytest.mark.parametrize(
    "number",
    [
        1e-4,
        0.00010000000000000002,
        9.99e-5,
        999999999999999.9,
        1e15 - 0.5,
        1e15 + 0.5,
        3.2,
        -0.5,
        2.5e-3,
        1e-5,
    ],
)
def test_the_fast_path_boundaries_agree_with_the_reference(number: float) -> None:
    values: list[Any] = [{"n": number}, [number, {"m": [number]}]]
    for value in values:
        assert canonical_bytes(value) == rfc8785.dumps(value)
        assert is_canonical(rfc8785.dumps(value), json.loads(rfc8785.dumps(value)))


def test_a_plan_integer_a_double_cannot_hold_is_refused_not_rounded() -> None:
    from pte import PlanRejected, ReasonCode, compile_plan, load_registry

    registry = load_registry(["calculator"])

    def plan(n: str) -> str:
        return (
            '{"pte_plan":"1","steps":[{"id":"a","tool":"calculator","args":{"expression":"n",'
            f'"variables":{{"n":{n}}}}}}}],"result":{{"$ref":"a/value"}}}}'
        )

    with pytest.raises(PlanRejected) as caught:
        compile_plan(plan("9007199254740993"), registry)  # would round to ...992
    assert caught.value.reason == ReasonCode.INVALID_JSON
    assert "as strings" in str(caught.value)
    assert compile_plan(plan("9007199254740991"), registry).steps[0].args["variables"]["n"] == 2**53 - 1


def test_nan_and_infinities_inside_containers_are_refused() -> None:
    # orjson writes them as null: the walk before it must send them to the reference.
    for bad in (math.nan, math.inf, -math.inf):
        for value in ([bad], {"a": {"b": [1, bad]}}):
            with pytest.raises(CanonicalizationError):
                canonical_bytes(value)


@pytest.mark.parametrize("value", [0, -7, 2**53 - 1, 2**53, 3.25, True, False, None, 1.0, -0.0, 1e-7, 1e21])
def test_bare_scalars_are_canonical(value: Any) -> None:
    expected = rfc8785.dumps(float(value) if value == 2**53 else value)
    assert canonical_bytes(value) == expected


def test_a_bare_integer_a_double_cannot_hold_is_refused() -> None:
    with pytest.raises(CanonicalizationError):
        canonical_bytes(2**60)


_HASH = "0" * 64
_MEMBER = b'"hash":"' + _HASH.encode() + b'"'


def _cut_by_finding(line: bytes, member: bytes) -> tuple[bytes, bytes] | None:
    """`without_member` as it was written first: find the member, then look for a second."""
    at = line.find(member)
    if at < 0 or line.find(member, at + 1) >= 0:
        return None
    head, tail = line[:at], line[at + len(member) :]
    if tail[:1] == b",":
        tail = tail[1:]
    elif head[-1:] == b",":
        head = head[:-1]
    return head, tail


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(_keys, _json, max_size=4),
    st.lists(
        st.sampled_from([{"hash": _HASH}, {"hash": _HASH, "z": 1}, [_HASH, {"hash": _HASH}]]), max_size=2
    ),
)
def test_without_member_cuts_the_top_level_member_as_finding_each_occurrence_did(
    value: dict[str, Any], nested: list[Any]
) -> None:
    # One `split` instead of two `find`s (the writer's and verify's hash cut): the same parts,
    # and, with the member at the top level (as every record has it), the record without it.
    record = {**value, "hash": _HASH, **{f"n{i}": n for i, n in enumerate(nested)}}
    line = canonical_bytes(record)
    parts = without_member(line, _MEMBER)
    assert parts == _cut_by_finding(line, _MEMBER)
    if parts is not None:
        assert b"".join(parts) == canonical_bytes({k: v for k, v in record.items() if k != "hash"})
    else:
        assert line.count(_MEMBER) > 1


@settings(max_examples=400, deadline=None)
@given(st.integers(-(2**53) + 1, 2**53 - 1) | st.floats() | st.booleans() | st.none())
def test_bare_scalars_are_written_as_the_reference_writes_them(value: Any) -> None:
    # A tool's bare output (`ToolSpec.to_output` checks each): integers and floats on their own
    # paths, NaN and infinities refused.
    try:
        expected = rfc8785.dumps(value)
    except rfc8785.CanonicalizationError:
        with pytest.raises(CanonicalizationError):
            canonical_bytes(value)
        return
    assert canonical_bytes(value) == expected


@given(st.text(alphabet=st.one_of(st.characters(), st.characters(categories=["Cs"]))))
def test_well_formed_text_is_encodable_and_changes_only_lone_surrogates(text: str) -> None:
    # Surrogates (category Cs, which st.characters leaves out by default), lone and in pairs.
    fixed = well_formed(text)
    assert canonical_bytes(fixed) == rfc8785.dumps(fixed)  # JSON and UTF-8 can hold it
    if not any(0xD800 <= ord(c) <= 0xDFFF for c in text):
        assert fixed is text
    kept = [c for c in text if not 0xD800 <= ord(c) <= 0xDFFF]
    assert [c for c in fixed if c != "\ufffd" and ord(c) <= 0xFFFF] == [
        c for c in kept if c != "\ufffd" and ord(c) <= 0xFFFF
    ]


def test_well_formed_joins_a_surrogate_pair_and_replaces_a_lone_one() -> None:
    assert well_formed("a\ud83d\ude00b") == "a\U0001f600b"
    assert well_formed("a\ud800b\udc00") == "a\ufffdb\ufffd"
