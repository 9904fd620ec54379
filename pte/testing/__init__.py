"""Public test doubles and hypothesis strategies for PTE users' own tool catalogues.

Like httpx's MockTransport and structlog.testing, these are product, not test scaffolding:

- `FakeOpenAIServer` / `Reply`: an OpenAI-compatible server on loopback with scripted answers.
- `FunctionClient`: an LLM client answering from a Python function of the messages (like
  Pydantic AI's ``FunctionModel``); `ReplayClient`: one serving recorded answers in order;
  `ScriptedModel`: one answering planner, replanner, stage, repair and finalizer calls each
  from its own script (docs/planning.md).
- `valid_plans(registry)`: plan documents that compile against a registry, with well-typed
  references; `invalid_plans(registry, reason)`: plan text rejected with exactly `reason`;
  `invalid_plan_cases(registry)`: (reason, text) pairs over every compile-time reason;
  `planner_text()`, `json_values()`: arbitrary planner output and JSON.
- `data_plans()`: cases (registry, plan, records) chaining the generic data operations over
  generated record types; `pte.testing.cookbook` / `pte.testing.domains`: the cookbook's
  tasks runner and fixture packs.
- `control_plans(registry)` / `invalid_control_plans(registry, reason)`: the same with
  for_each, when, require and continue (pte._plan._control).
- `procedure_calls(registry)`: a procedure, a plan calling it, and the same plan with the body
  written inline (pte._plan._procedures): both must compile and run the same.
- `delegations(registry)`: a specialist, a coordinator's plan delegating to it, the sub-plan
  it answers, and the same plan written inline (pte._run._delegation); `ScriptedModel` answers
  each specialist's calls from its own script (``specialists={"name": [...]}``).
- `labelled_outputs()`: output schemas a deployment's catalogue may declare (recursive models,
  tuples, unions, maps, patterns, 12 x 12 fan-outs, `pte.policy.provenance` marks anywhere), each with
  a value carrying the attacker's text (`ATTACKER_IBAN`) in its untrusted leaves and every
  part's true labels (`LabelledCase`); `fan_out_schema()` the hostile fan-out alone.
- `example_registry()`: a small typed example catalogue.

The doubles import without hypothesis; the strategies need it (``pip install hypothesis``) and
are imported when first used.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from pte._run import ReplayClient
from pte.testing._catalogue import example_registry
from pte.testing._function_client import FunctionCall, FunctionClient
from pte.testing._openai_server import FakeOpenAIServer, Reply
from pte.testing._scripted_model import ScriptedModel, ScriptExhausted

if TYPE_CHECKING:
    from pte.testing._control_strategies import CONTROL_REASONS, control_plans, invalid_control_plans
    from pte.testing._data_plans import DataCase, data_plans
    from pte.testing._delegation_strategies import DelegationCase, delegations
    from pte.testing._label_strategies import ATTACKER_IBAN, LabelledCase, fan_out_schema, labelled_outputs
    from pte.testing._procedure_strategies import ProcedureCase, procedure_calls
    from pte.testing._strategies import (
        COMPILE_REASONS,
        invalid_plan_cases,
        invalid_plans,
        json_values,
        planner_text,
        valid_plans,
    )

#: The strategies need hypothesis (the ``test`` extra); the doubles above do not, so these are
#: imported on first use: ``from pte.testing import ScriptedModel`` works without hypothesis.
_STRATEGIES = {
    "pte.testing._control_strategies": ("CONTROL_REASONS", "control_plans", "invalid_control_plans"),
    "pte.testing._data_plans": ("DataCase", "data_plans"),
    "pte.testing._delegation_strategies": ("DelegationCase", "delegations"),
    "pte.testing._label_strategies": ("ATTACKER_IBAN", "LabelledCase", "fan_out_schema", "labelled_outputs"),
    "pte.testing._procedure_strategies": ("ProcedureCase", "procedure_calls"),
    "pte.testing._strategies": (
        "COMPILE_REASONS",
        "invalid_plan_cases",
        "invalid_plans",
        "json_values",
        "planner_text",
        "valid_plans",
    ),
}
_MODULE_OF = {name: module for module, names in _STRATEGIES.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'pte.testing' has no attribute {name!r}")
    try:
        value = getattr(import_module(module), name)
    except ModuleNotFoundError as exc:
        if exc.name != "hypothesis" and not str(exc.name).startswith("hypothesis."):
            raise
        raise ImportError(
            f"pte.testing.{name} is a hypothesis strategy: "
            "pip install hypothesis (or 'plan-then-execute[test]')"
        ) from exc
    globals()[name] = value
    return value


__all__ = [
    "ATTACKER_IBAN",
    "COMPILE_REASONS",
    "CONTROL_REASONS",
    "DataCase",
    "DelegationCase",
    "FakeOpenAIServer",
    "FunctionCall",
    "FunctionClient",
    "LabelledCase",
    "ProcedureCase",
    "ReplayClient",
    "Reply",
    "ScriptExhausted",
    "ScriptedModel",
    "control_plans",
    "data_plans",
    "delegations",
    "example_registry",
    "fan_out_schema",
    "invalid_control_plans",
    "invalid_plan_cases",
    "invalid_plans",
    "json_values",
    "labelled_outputs",
    "planner_text",
    "procedure_calls",
    "valid_plans",
]
