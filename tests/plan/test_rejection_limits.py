"""Wide plans are refused as cheaply as deep ones: the value cap and the skeleton scan.

`Limits.max_values` bounds the JSON values a plan text holds, counted on its skeleton before
parsing (`pte._core._nesting`); a text with more strings than could fit is refused from a count of
its quotes; and a wide value that fails its schema is named without the pure-Python
validator ranking thousands of errors. (Times are in bench/bench_rejection.py, not here.)
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from pte import EngineConfig, PlanRejected, ReasonCode, compile_plan

# private: the data budget's count; linear patterns, white-box
from pte._core import count_values, outside_strings
from pte.plan import DEFAULT_LIMITS, Limits
from pte.testing._catalogue import example_registry

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=5), inner, max_size=5),
    max_leaves=40,
)


def _values(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + sum(_values(v) for v in value.values())
    if isinstance(value, list):
        return 1 + sum(_values(v) for v in value)
    return 1


@given(JSON, st.sampled_from([None, 0, 2]), st.booleans())
def test_count_values_is_exact_for_valid_json(value: Any, indent: int | None, ascii_only: bool) -> None:
    text = json.dumps(value, indent=indent, ensure_ascii=ascii_only)
    assert count_values(text) == _values(value)
    assert count_values(text.encode("utf-8", "surrogatepass")) == _values(value)


def test_outside_strings_refuses_from_the_quote_count() -> None:
    text = json.dumps(["a", 'b\\"c', "d"])
    assert outside_strings(text) == b"[s, s, s]"
    assert outside_strings(text, max_strings=3) == b"[s, s, s]"
    assert outside_strings(text, max_strings=2) is None


def _plan(variables: str, expression: str = "1") -> str:
    return (
        '{"pte_plan":"1","steps":[{"id":"a","tool":"calculator","args":'
        f'{{"expression":"{expression}","variables":{variables}}}}}]}}'
    )


def _rejected(text: str, limits: Limits | None = None) -> PlanRejected:
    try:
        compile_plan(text, example_registry(), limits)
    except PlanRejected as rejection:
        return rejection
    raise AssertionError("accepted")


def test_the_value_cap_refuses_one_value_past_it() -> None:
    text = _plan("{" + ",".join(f'"x{i}":{i}' for i in range(10)) + "}", "x0")
    held = count_values(text)
    assert compile_plan(text, example_registry(), Limits(max_values=held)).steps[0].id == "a"
    rejection = _rejected(text, Limits(max_values=held - 1))
    assert rejection.reason is ReasonCode.PLAN_TOO_LARGE
    assert f"{held} JSON values" in rejection.message and str(held - 1) in rejection.message


def test_a_wide_document_is_refused_before_parsing() -> None:
    # Far too many tiny arrays for the default cap: refused by count, never parsed (a parse
    # would fail on the trailing junk and say invalid_json instead).
    assert DEFAULT_LIMITS.max_values is not None
    text = _plan('{"x":[' + ",".join(["[]"] * (DEFAULT_LIMITS.max_values + 1)) + "]}") + "junk"
    rejection = _rejected(text)
    assert rejection.reason is ReasonCode.PLAN_TOO_LARGE
    assert "JSON values" in rejection.message


def test_too_many_strings_are_refused_from_their_quotes() -> None:
    most = 100
    keys = ",".join(f'"k{i}":"v"' for i in range(most + 1))  # 2 * (most + 1) strings
    rejection = _rejected(_plan("{" + keys + "}") + "junk", Limits(max_values=most))
    assert rejection.reason is ReasonCode.PLAN_TOO_LARGE
    assert "strings" in rejection.message


def test_a_wide_invalid_argument_is_named_without_ranking_every_error() -> None:
    text = _plan('{"x":[' + ",".join(["[]"] * 2000) + "]}")
    rejection = _rejected(text)
    assert rejection.reason is ReasonCode.INVALID_ARGS
    assert rejection.path == "$.steps[0].args.variables"
    assert "variables" in rejection.message and "too many to explain" in rejection.message


def test_a_wide_set_of_unknown_parameters_is_named() -> None:
    args = "{" + ",".join(f'"k{i}":1' for i in range(2000)) + "}"
    text = '{"pte_plan":"1","steps":[{"id":"a","tool":"calculator","args":' + args + "}]}"
    rejection = _rejected(text)
    assert rejection.reason is ReasonCode.INVALID_ARGS
    assert "unexpected parameter 'k0'" in rejection.message


def test_a_wide_literal_beside_a_reference_is_checked_and_named() -> None:
    first = '{"id":"a","tool":"calculator","args":{"expression":"1"}}'
    wide = ",".join(["[]"] * 2000)
    second = (
        '{"id":"b","tool":"calculator","args":{"expression":"x","variables":'
        '{"x":{"$ref":"a/value"},"y":[' + wide + "]}}}"
    )
    rejection = _rejected('{"pte_plan":"1","steps":[' + first + "," + second + "]}")
    assert rejection.reason is ReasonCode.INVALID_ARGS
    assert rejection.path.startswith("$.steps[1].args.variables")  # anyOf: object or null
    assert "over 1,000 values" in rejection.message
    # The same width, valid, is accepted (by the compiled validator, not skipped).
    fine = second.replace(wide, ",".join(["1"] * 2000))
    plan = compile_plan('{"pte_plan":"1","steps":[' + first + "," + fine + "]}", example_registry())
    assert [s.id for s in plan.steps] == ["a", "b"]


def test_limits_are_recorded_and_old_records_still_load() -> None:
    assert DEFAULT_LIMITS.to_dict()["max_values"] == DEFAULT_LIMITS.max_values
    recorded = EngineConfig().to_dict()
    assert EngineConfig.from_dict(recorded).limits == DEFAULT_LIMITS
    del recorded["limits"]["max_values"]  # a log written before the cap existed: it had none
    old = EngineConfig.from_dict(recorded)
    assert old.limits.max_values is None
    assert old.to_dict() == recorded  # so its replay records the same config
    wide = _plan('{"x":[' + ",".join(["1"] * (DEFAULT_LIMITS.max_values + 10)) + "]}")
    assert compile_plan(wide, example_registry(), old.limits).steps[0].id == "a"
