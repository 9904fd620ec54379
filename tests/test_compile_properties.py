"""Property tests of `compile_plan` (hypothesis; 1,000 examples per test with CI=true).

- every plan `valid_plans` draws compiles, for the example catalogue and every stock pack
  present in tools/, with a hash, an order and dependencies that match the document;
- every plan `invalid_plans` draws is rejected with exactly its reason code;
- arbitrary text, JSON and bytes never make compile raise anything but `PlanRejected`.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pte import Limits, Plan, PlanRejected, ReasonCode, Registry, compile_plan, load_pack
from pte._resources import data_dir
from pte.canonical import canonical_json
from pte.policy import Policy
from pte.testing._catalogue import example_registry
from pte.testing._strategies import invalid_plan_cases, invalid_plans, json_values, planner_text, valid_plans
from pte.tools import STOCK_PACKS

EXAMPLE = example_registry()
STOCK: dict[str, Registry] = {
    name: load_pack(name) for name in STOCK_PACKS if (data_dir("tools") / f"{name}.py").is_file()
}
SMALL = Limits(max_steps=4, max_bytes=3_000, max_depth=8)


def _deps(step: dict[str, Any]) -> list[str]:
    """The steps `step` waits for, read straight off the document: references, then `after`."""
    found: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            if set(value) == {"$ref"}:
                found.append(value["$ref"].partition("/")[0])
                return
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(step["args"])
    return list(dict.fromkeys([*found, *step.get("after", ())]))


def check_compiles(doc: dict[str, Any], registry: Registry, text: str | None = None) -> Plan:
    """Compile `doc`; check the plan against the document it came from."""
    try:
        compiled = compile_plan(text if text is not None else json.dumps(doc), registry)
    except PlanRejected as error:
        pytest.fail(f"valid plan rejected: {error}\n{json.dumps(doc)[:3000]}")
    steps = doc["steps"]
    assert compiled.to_dict() == doc
    assert compiled.hash == hashlib.sha256(canonical_json(doc).encode("utf-8")).hexdigest()
    assert [s.id for s in compiled.steps] == [s["id"] for s in steps]
    deps = {s["id"]: _deps(s) for s in steps}
    for step in steps:
        assert list(compiled.step(step["id"]).depends_on) == deps[step["id"]]
    # The order is the topological order that always takes the earliest ready step in plan order.
    placed: set[str] = set()
    for step_id in compiled.order:
        ready = [s["id"] for s in steps if s["id"] not in placed and set(deps[s["id"]]) <= placed]
        assert ready and step_id == ready[0], (compiled.order, deps)
        placed.add(step_id)
    assert len(compiled.order) == len(steps)
    return compiled


# --- valid plans ------------------------------------------------------------------------------


@given(valid_plans(EXAMPLE), st.sampled_from([None, 2]), st.booleans())
def test_valid_plans_compile(doc: dict[str, Any], indent: int | None, sort_keys: bool) -> None:
    compiled = check_compiles(doc, EXAMPLE)
    # The hash does not depend on layout.
    text = json.dumps(doc, indent=indent, sort_keys=sort_keys, ensure_ascii=sort_keys)
    assert compile_plan(text.encode("utf-8"), EXAMPLE).hash == compiled.hash


@pytest.mark.skipif(not STOCK, reason="no stock pack in tools/ yet")
@given(
    st.one_of([valid_plans(registry).map(lambda doc, n=name: (n, doc)) for name, registry in STOCK.items()])
)
def test_valid_plans_compile_for_stock_packs(case: tuple[str, dict[str, Any]]) -> None:
    name, doc = case
    check_compiles(doc, STOCK[name])


def test_every_stock_pack_has_generatable_tools() -> None:
    from pte.testing._strategies import _Catalogue

    for name, registry in STOCK.items():
        catalogue = _Catalogue(registry)
        unusable = sorted(t.name for t in catalogue.tools.values() if not t.usable)
        assert not unusable, f"{name}: the plan generator cannot satisfy {unusable}"


# --- invalid plans ----------------------------------------------------------------------------


def _cases() -> st.SearchStrategy[tuple[ReasonCode, str, Registry, Limits | None]]:
    def tag(registry: Registry, limits: Limits | None) -> Any:
        return lambda case: (case[0], case[1], registry, limits)

    branches = [invalid_plan_cases(EXAMPLE).map(tag(EXAMPLE, None))]
    branches += [invalid_plan_cases(registry).map(tag(registry, None)) for registry in STOCK.values()]
    branches.append(
        invalid_plans(EXAMPLE, ReasonCode.PLAN_TOO_LARGE, limits=SMALL).map(
            lambda text: (ReasonCode.PLAN_TOO_LARGE, text, EXAMPLE, SMALL)
        )
    )
    branches.append(invalid_plan_cases(EXAMPLE, limits=SMALL).map(tag(EXAMPLE, SMALL)))
    return st.one_of(branches)


@given(_cases())
def test_invalid_plans_are_rejected_with_their_reason(
    case: tuple[ReasonCode, str, Registry, Limits | None],
) -> None:
    reason, text, registry, limits = case
    try:
        compiled = compile_plan(text, registry, limits)
    except PlanRejected as error:
        assert error.reason is reason, f"expected {reason.value}, got {error}\n{text[:3000]}"
        assert error.path.startswith("$")
        return
    pytest.fail(f"expected {reason.value}, but the plan compiled ({compiled.hash})\n{text[:3000]}")


@pytest.mark.parametrize("reason", [ReasonCode.STEP_FAILED, "llm_error"])
def test_reasons_without_a_generator(reason: Any) -> None:
    with pytest.raises(ValueError):
        invalid_plans(EXAMPLE, reason)


def test_policy_violation_needs_an_untrusted_flow_into_a_guarded_sink() -> None:
    with pytest.raises(ValueError, match="guarded sink"):
        invalid_plans(load_pack("calculator"), ReasonCode.POLICY_VIOLATION)


_STOCK = Registry([spec for pack in STOCK_PACKS for spec in load_pack(pack)])


@given(
    st.sampled_from([EXAMPLE, _STOCK]).flatmap(
        lambda registry: st.tuples(st.just(registry), invalid_plans(registry, ReasonCode.POLICY_VIOLATION))
    )
)
def test_untrusted_flows_into_guarded_sinks_are_rejected_with_policy_violation(
    case: tuple[Registry, str],
) -> None:
    registry, text = case
    with pytest.raises(PlanRejected) as caught:
        # The tools' own declarations: the policy every engine enforces by default.
        compile_plan(text, registry, checks=[Policy.from_registry(registry).check()])
    assert caught.value.reason is ReasonCode.POLICY_VIOLATION, caught.value
    assert "untrusted" in caught.value.message


def test_a_registry_without_generatable_tools() -> None:
    with pytest.raises(ValueError, match="no tool"):
        valid_plans(Registry())


# --- noise ------------------------------------------------------------------------------------


def _compile_anything(text: str | bytes) -> None:
    try:
        compile_plan(text, EXAMPLE)
    except PlanRejected as error:
        assert error.reason in {
            ReasonCode.INVALID_JSON,
            ReasonCode.SCHEMA_VIOLATION,
            ReasonCode.DUPLICATE_STEP_ID,
            ReasonCode.TOOL_NOT_ALLOWED,
            ReasonCode.INVALID_ARGS,
            ReasonCode.BAD_REFERENCE,
            ReasonCode.PLAN_CYCLE,
            ReasonCode.PLAN_TOO_LARGE,
        }
    except RecursionError:  # fail without a thousand-frame traceback
        pytest.fail(f"RecursionError escaped compile_plan on {text[:200]!r}", pytrace=False)


@given(planner_text())
def test_arbitrary_text_is_only_ever_rejected(text: str) -> None:
    _compile_anything(text)


@given(json_values(), st.booleans())
def test_arbitrary_json_is_only_ever_rejected(value: Any, ascii_only: bool) -> None:
    _compile_anything(json.dumps(value, ensure_ascii=ascii_only))


@given(st.one_of(st.binary(), planner_text().map(lambda t: t.encode("utf-8", "surrogatepass"))))
def test_arbitrary_bytes_are_only_ever_rejected(data: bytes) -> None:
    _compile_anything(data)
