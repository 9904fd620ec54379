"""Plans: the plan model and the compile pipeline (references, arguments, control flow, procedures).
Pure: no threads, no I/O.

This module is the area's face: other areas import only what it re-exports.
"""

from __future__ import annotations

from pte._plan._compiler import (
    compile_plan,
)
from pte._plan._context import (
    DEFAULT_LIMITS,
    CompileCheck,
    CompileContext,
    Limits,
    json_path,
)
from pte._plan._control import (
    COMPARISONS,
    as_instant,
    condition_references,
    schema_kinds,
)
from pte._plan._model import (
    ELEMENT,
    PLAN_FORMAT_VERSION,
    STEP_ID_RE,
    Plan,
    PlanDocument,
    PlanStep,
    Reference,
    StepModel,
    copy_json,
    is_reference,
    plan_schema,
)
from pte._plan._procedures import (
    PATH_SEPARATOR,
    Procedure,
    check_inlined_ids,
    expand_procedures,
    load_procedures,
    procedure_output_schema,
    procedures_record,
    recorded_procedures,
    step_path,
)
from pte._plan._specialists import (
    Specialist,
    check_specialists,
    coordinator_view,
    load_specialists,
    owned_tools,
    specialist_registry,
    specialists_from_records,
)

__all__ = [
    "COMPARISONS",
    "DEFAULT_LIMITS",
    "ELEMENT",
    "PATH_SEPARATOR",
    "PLAN_FORMAT_VERSION",
    "STEP_ID_RE",
    "CompileCheck",
    "CompileContext",
    "Limits",
    "Plan",
    "PlanDocument",
    "PlanStep",
    "Procedure",
    "Reference",
    "Specialist",
    "StepModel",
    "as_instant",
    "check_inlined_ids",
    "check_specialists",
    "compile_plan",
    "condition_references",
    "coordinator_view",
    "copy_json",
    "expand_procedures",
    "is_reference",
    "json_path",
    "load_procedures",
    "load_specialists",
    "owned_tools",
    "plan_schema",
    "procedure_output_schema",
    "procedures_record",
    "recorded_procedures",
    "schema_kinds",
    "specialist_registry",
    "specialists_from_records",
    "step_path",
]
