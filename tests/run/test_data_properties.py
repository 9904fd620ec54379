"""Property tests: generic inference agrees with the runtime for generated record types and chains.

For every generated case (pte.testing.data_plans): the well-typed plan compiles, and every
step that runs produces an output valid, by the reference jsonschema validator, against
the output type compile inferred for it (a check independent of the executor's own).
The inferred types are not vacuous: records keep their fields' declared types.
"""

from __future__ import annotations

import json

import jsonschema
from hypothesis import HealthCheck, given, settings

from pte import Executor, compile_plan
from pte.testing import DataCase, data_plans

_FAILURES_ALLOWED = (
    "the list is empty",  # first([]), extreme_by([])
    "no record has a value",  # extreme_by over nulls only
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data_plans())
def test_inferred_output_types_agree_with_the_runtime(case: DataCase) -> None:
    plan = compile_plan(json.dumps(case.document), case.registry)
    result = Executor(case.registry).run(plan)
    if result.failure is not None:
        assert result.failure.error is not None
        assert any(text in result.failure.error.message for text in _FAILURES_ALLOWED), result.failure.error
    for step in plan.steps:
        if step.id not in result.outputs:
            continue
        schema = plan.output_schema(step.id) or dict(case.registry[step.tool].output_schema)
        jsonschema.Draft202012Validator(schema).validate(result.outputs[step.id])


@settings(max_examples=30, deadline=None)
@given(data_plans())
def test_records_keep_their_field_types_through_the_chain(case: DataCase) -> None:
    plan = compile_plan(json.dumps(case.document), case.registry)
    for step in plan.steps:
        schema = plan.output_schema(step.id)
        if schema is None or "records" not in schema.get("properties", {}):
            continue
        items = schema["properties"]["records"]["items"]
        if step.tool in ("rank",):
            items = items["properties"]["item"]
        # Every field a record type declares is typed (never an untyped "any").
        for name, sub in items.get("properties", {}).items():
            assert sub.get("type") or sub.get("anyOf"), (step.id, name, sub)
