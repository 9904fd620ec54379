"""What compile checks share: the `CompileContext`, the size `Limits`, and JSON paths.

Separate from `pte._plan._compiler` (the pipeline) so that the checks living in their own
modules (`pte._plan._refs`, `pte._plan._args`, `pte._plan._control`, policies) can import
it without importing the pipeline that imports them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pte._catalogue import Registry, ToolSpec
from pte._catalogue import generics as _generics
from pte._catalogue import schema_types as st
from pte._core import PlanRejected, ReasonCode, ecma_validator
from pte._plan._model import ProcedureOrigin, Reference

__all__ = ["DEFAULT_LIMITS", "CompileCheck", "CompileContext", "Limits", "json_path"]


@dataclass(frozen=True)
class Limits:
    """Size limits a plan must respect (`plan_too_large` otherwise).

    `max_values` bounds how many JSON values (objects, arrays, strings, numbers, literals) the
    plan text holds, counted on the text before parsing (`pte._core._nesting.count_values`): a
    document of a million tiny values fits in `max_bytes` but would cost seconds to parse,
    validate and explain. The defaults keep compiling any text within them, accepted or
    rejected, well under 50 ms (`bench/bench_rejection.py`): 250 steps (what an LLM writes
    within `pte._run._llm.DEFAULT_MAX_TOKENS` at ~60 tokens a step; per-item work is one `for_each`
    step) and 10,000 values (40 a step). ``max_values=None`` sets no value cap (what a config
    without it means: pte._audit._older_records), so such a run's replay compiles as it did.
    """

    max_steps: int = 250
    max_bytes: int = 1_000_000
    max_depth: int = 32
    max_values: int | None = 10_000

    def to_dict(self) -> dict[str, int]:
        out = {"max_steps": self.max_steps, "max_bytes": self.max_bytes, "max_depth": self.max_depth}
        if self.max_values is not None:
            out["max_values"] = self.max_values
        return out


DEFAULT_LIMITS = Limits()


@dataclass
class CompileContext:
    """What the checks share: the input, and what earlier checks established."""

    text: str
    registry: Registry
    limits: Limits
    document: dict[str, Any] = field(default_factory=dict)
    canonical: str = ""
    #: step id -> index in the plan
    index: dict[str, int] = field(default_factory=dict)
    #: step index -> [(path inside args, Reference)]
    references: list[list[tuple[tuple[str | int, ...], Reference]]] = field(default_factory=list)
    order: tuple[str, ...] = ()
    #: Steps completed before this plan (a replan or a resume): step id -> tool name.
    #: The plan may reference their outputs; they are never run again.
    prior: Mapping[str, str] = field(default_factory=dict)
    #: step id -> (output schema, its root) of steps whose tool is generic: inferred by check_args.
    inferred: dict[str, tuple[st.Schema, Mapping[str, Any]]] = field(default_factory=dict)
    #: What `pte._plan._control.check_control` found: step id -> the steps its condition, list or
    #: an earlier ``require`` makes it wait for (beyond its references).
    control_deps: dict[str, list[str]] = field(default_factory=dict)
    #: What `pte._plan._control.check_control_types` found: step id -> how each comparison of its
    #: condition compares (``number``, ``instant`` or ``json``).
    condition_modes: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: What a policy check (`pte._policy._document.PolicyCheck`) labelled: step id -> its labels (this
    #: plan's steps only); None when no policy check ran.
    provenance: dict[str, frozenset[str]] | None = None
    #: What `pte._plan._compiler.expand_procedure_calls` inlined: step id -> the procedure calls it came
    #: from, outermost first (`Plan.procedure_origin`); never read from the plan's text.
    procedure_origins: dict[str, tuple[ProcedureOrigin, ...]] = field(default_factory=dict)
    #: Steps a policy check let through pending a person's endorsement: step id -> parameters.
    needs_endorsement: dict[str, list[str]] = field(default_factory=dict)
    #: Compiled literal validators, per (schema, root) identity, for this compile only
    #: (`pte._plan._args`); a cache, not a result.
    literal_validators: dict[tuple[int, int], tuple[Any, ...]] = field(default_factory=dict, repr=False)
    #: Prior steps that were per-item (`for_each`) steps: their output is a list (pte._plan._control).
    prior_lists: frozenset[str] = frozenset()
    #: Prior steps of generic tools: step id -> the exact output schema (per call, for a
    #: for_each step) that step was compiled with, so that a later stage or replan checks its
    #: references into them against that instantiation, not the tool's generic declaration.
    prior_types: Mapping[str, st.Schema] = field(default_factory=dict)
    _default_outside: dict[tuple[str, bool], bool] = field(default_factory=dict, repr=False)

    @property
    def steps(self) -> list[dict[str, Any]]:
        steps: list[dict[str, Any]] = self.document["steps"]
        return steps

    def tool(self, step_index: int) -> ToolSpec:
        return self.registry[self.steps[step_index]["tool"]]

    def producer(self, step_id: str) -> ToolSpec:
        """The tool whose output a reference to `step_id` reads (a plan step or a prior step)."""
        if step_id in self.index:
            return self.tool(self.index[step_id])
        return self.registry[self.prior[step_id]]

    def is_list_step(self, step_id: str) -> bool:
        """Whether `step_id` is a for_each step, whose output is the list of its calls' outputs."""
        if step_id in self.index:
            return "for_each" in self.steps[self.index[step_id]]
        return step_id in self.prior_lists

    def output_type(self, step_id: str) -> tuple[st.Schema, Mapping[str, Any]]:
        """The output schema of a step as its readers see it (and the root its ``$ref``s resolve against).

        For a generic tool it is the schema inferred for this step from its arguments; a
        completed step of an earlier plan (a replan, a later stage) has the schema it was
        compiled with (`prior_types`), else its tool's declared one. A for_each step's output
        is the list of its calls' outputs (pte._plan._control). A step with a `when` default its
        tool's output does not admit (``null``, a short message) gives either: the union.
        """
        schema, root = self.tool_output_type(step_id)
        found, default = self.default_outside(step_id)
        if found:
            return {"anyOf": [schema, _generics.literal_schema(default)]}, root
        return schema, root

    def tool_output_type(self, step_id: str) -> tuple[st.Schema, Mapping[str, Any]]:
        """The output schema of a step when it runs (`output_type` without its default)."""
        if step_id in self.inferred:
            schema, root = self.inferred[step_id]
        elif step_id not in self.index and step_id in self.prior_types:
            schema = self.prior_types[step_id]
            root = schema if isinstance(schema, Mapping) else {}
        else:
            producer = self.producer(step_id)
            schema, root = producer.output_schema, producer.output_schema
        if self.is_list_step(step_id):
            return {"type": "array", "items": schema, "$defs": root.get("$defs", {})}, root
        return schema, root

    def default_outside(self, step_id: str) -> tuple[bool, Any]:
        """(True, default) when a step of this plan has a `when` default that its tool's output
        type does not admit (readers then see a union); else (False, None)."""
        if step_id not in self.index:
            return False, None
        step = self.steps[self.index[step_id]]
        if "default" not in step or "require" in step:
            return False, None
        key = (step_id, step_id in self.inferred)  # a generic step's type is final once inferred
        outside = self._default_outside.get(key)
        if outside is None:
            schema, root = self.tool_output_type(step_id)
            whole = schema
            if isinstance(schema, Mapping) and "$defs" in root and "$defs" not in schema:
                whole = {**schema, "$defs": root["$defs"]}
            try:
                plain = json.loads(json.dumps(whole, default=dict))
                outside = not ecma_validator(plain).is_valid(step["default"])
            except (ValueError, TypeError):
                outside = True  # a schema the validator cannot read proves nothing: the union is safe
            self._default_outside[key] = outside
        return (True, step["default"]) if outside else (False, None)


CompileCheck = Callable[[CompileContext], None]


def json_path(parts: Iterable[str | int]) -> str:
    """A JSONPath string for a location: ``$.steps[1].args.days``."""
    out = "$"
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part.isidentifier():
            out += f".{part}"
        else:
            out += f"[{json.dumps(part, ensure_ascii=False)}]"
    return out


def _reject(reason: ReasonCode, message: str, *path: str | int) -> PlanRejected:
    return PlanRejected(reason, message, json_path(path))
