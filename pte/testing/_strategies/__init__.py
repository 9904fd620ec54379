"""Hypothesis strategies over plans: valid plans, invalid plans of each kind, and planner noise.

Use them to property-test a tool catalogue: every plan `valid_plans` draws must compile
against it, every plan `invalid_plans` draws must be rejected with exactly its reason
code, and nothing `planner_text` or `json_values` draws may make `compile_plan` raise
anything but `PlanRejected`::

    from hypothesis import given
    from pte.testing import valid_plans

    @given(valid_plans(my_registry))
    def test_my_catalogue_admits_generated_plans(doc):
        pte.compile_plan(json.dumps(doc), my_registry)

Arguments are generated from each tool's input JSON Schema (the subset pydantic emits);
some are replaced by references to earlier steps whose output type fits the parameter.

One module per concept: `base` (building blocks), `catalogue` (which tools the generator can
call, and their output pointers), `values` (values from a JSON Schema), `valid` (valid
plans), `edits` (what the mutations share), one ``defects_*`` module per family of
compile-time reasons (`defects_document`, `defects_graph`, `defects_catalogue`,
`defects_size`), `invalid` (the per-reason strategies) and `noise` (planner output).
"""

from pte.testing._strategies.invalid import COMPILE_REASONS, invalid_plan_cases, invalid_plans
from pte.testing._strategies.noise import json_values, planner_text
from pte.testing._strategies.valid import valid_plans

__all__ = [
    "COMPILE_REASONS",
    "invalid_plan_cases",
    "invalid_plans",
    "json_values",
    "planner_text",
    "valid_plans",
]
