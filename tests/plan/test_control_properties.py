"""Property tests of the control constructs through pte.testing's public strategies."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any

import jsonschema
import pydantic
import pytest
from hypothesis import HealthCheck, find, given, settings

from pte import PlanRejected, ReasonCode, compile_plan, load_registry
from pte.plan import PlanDocument, plan_schema
from pte.testing import CONTROL_REASONS, control_plans, example_registry, invalid_control_plans
from tests.packs import world

REGISTRIES = {
    "example": example_registry(),
    "world": load_registry([str(Path(world.__file__))]),
    "stock": load_registry(["backoffice", "calculator", "shaping"]),
}
VALIDATOR = jsonschema.Draft202012Validator(plan_schema())
# A fifth of the profile's examples (40 locally, 200 under CI=true): each example compiles a
# whole plan, and there are nine of these properties.
FIND = settings(max_examples=2000, database=None, suppress_health_check=list(HealthCheck))
SLOW = settings(
    max_examples=max(20, settings().max_examples // 5),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


@pytest.mark.parametrize("name", sorted(REGISTRIES))
def test_generated_control_plans_compile_and_validators_agree(name: str) -> None:
    registry = REGISTRIES[name]
    seen: set[str] = set()

    def check(doc: dict[str, Any]) -> None:
        seen.update(_constructs(doc))
        assert VALIDATOR.is_valid(doc)
        PlanDocument.model_validate(doc)
        plan = compile_plan(json.dumps(doc), registry)
        for step in plan.steps:
            # Every step waits for what its condition and list read.
            raw = next(s for s in doc["steps"] if s["id"] == step.id)
            for key in ("when", "for_each", "require"):
                for dep in _ids(raw.get(key)):
                    assert plan.order.index(dep) < plan.order.index(step.id)

    SLOW(given(control_plans(registry))(check))()
    # The property is not vacuous: the strategy generates each construct (and both for_each
    # and when in one plan), not only plain plans. A construct the random draws happened to
    # miss (40 examples locally) is searched for, and its plan checked the same way.
    for construct in sorted({"for_each", "when", "require", "continue", "for_each+when"} - seen):
        check(find(control_plans(registry), partial(_has_construct, construct), settings=FIND))
    assert {"for_each", "when", "require", "continue", "for_each+when"} <= seen, seen


def _has_construct(construct: str, doc: dict[str, object]) -> bool:
    return construct in _constructs(doc)


def _constructs(doc: dict[str, object]) -> set[str]:
    steps = doc["steps"]
    assert isinstance(steps, list)
    found = {key for key in ("for_each", "when", "require") if any(key in step for step in steps)}
    found |= {"continue"} & set(doc)
    return found | ({"for_each+when"} if {"for_each", "when"} <= found else set())


def _ids(value: object) -> set[str]:
    text = json.dumps(value)
    return {part.split('"')[0].split("/")[0] for part in text.split('{"$ref": "')[1:]}


@pytest.mark.slow
@pytest.mark.parametrize("reason", CONTROL_REASONS, ids=lambda r: r.value)
@pytest.mark.parametrize("name", ["example", "world"])
def test_broken_control_plans_are_rejected_with_exactly_their_reason(name: str, reason: ReasonCode) -> None:
    registry = REGISTRIES[name]
    seen: set[str] = set()

    @SLOW
    @given(invalid_control_plans(registry, reason))
    def check(text: str) -> None:
        with pytest.raises(PlanRejected) as info:
            compile_plan(text, registry)
        assert info.value.reason is reason, info.value
        seen.update(key for key in ("for_each", "when") if f'"{key}"' in text)
        if reason is ReasonCode.SCHEMA_VIOLATION:
            with pytest.raises(pydantic.ValidationError):
                PlanDocument.model_validate_json(text)

    check()
    assert {"for_each", "when"} <= seen, seen  # the broken plans carry the constructs too
