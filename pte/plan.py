"""Plans: the plan model, the compile pipeline, procedures and specialists.

`compile` (also `compile_plan`) validates a plan completely before anything runs; every problem
it finds is a `pte.errors.PlanRejected`.
"""

from __future__ import annotations

from pte._plan import (
    DEFAULT_LIMITS,
    CompileContext,
    Limits,
    Plan,
    PlanDocument,
    PlanStep,
    Procedure,
    Reference,
    Specialist,
    StepModel,
    compile_plan,
    load_procedures,
    load_specialists,
    plan_schema,
)

#: `compile` reads as the docs say; `compile_plan` avoids shadowing the builtin in user code.
compile = compile_plan

__all__ = [
    "DEFAULT_LIMITS",
    "CompileContext",
    "Limits",
    "Plan",
    "PlanDocument",
    "PlanStep",
    "Procedure",
    "Reference",
    "Specialist",
    "StepModel",
    "compile",
    "compile_plan",
    "load_procedures",
    "load_specialists",
    "plan_schema",
]
