"""The plan: its document model (mirroring schemas/plan.schema.json) and the compiled, frozen `Plan`.

A compiled plan keeps every argument as canonical JSON text, not as live Python objects,
so nothing that holds a `Plan` can change it: each access returns a fresh copy.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import jsonschema_rs
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from pte._resources import load_schema
from pte.canonical import canonical_json
from pte.canonical import loads as canonical_loads

__all__ = [
    "PLAN_FORMAT_VERSION",
    "Plan",
    "PlanDocument",
    "PlanStep",
    "Reference",
    "StepModel",
    "is_reference",
    "plan_schema",
]

PLAN_FORMAT_VERSION = "1"
STEP_ID_RE = re.compile(r"[a-z][a-z0-9_]{0,31}")
TOOL_NAME_RE = re.compile(r"[A-Za-z][A-Za-z0-9_.\-]{0,63}")
REF_RE = re.compile(r"[a-z][a-z0-9_]{0,31}(/([^~/]|~[01])*)*", re.DOTALL)


def plan_schema() -> dict[str, Any]:
    """The plan JSON Schema (2020-12), the contract every plan is validated against."""
    return load_schema("plan.schema.json")


def is_reference(value: Any) -> bool:
    """True when `value` has the shape of a reference: an object whose only key is ``$ref``."""
    return type(value) is dict and len(value) == 1 and "$ref" in value


@dataclass(frozen=True, slots=True)
class Reference:
    """A parsed ``{"$ref": "step_id/json/pointer"}``: the producing step and the pointer tokens."""

    step: str
    tokens: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str) -> Reference:
        """Parse the ``$ref`` string (already checked against the schema's pattern)."""
        step, _, pointer = text.partition("/")
        if not _:
            return cls(step)
        tokens = tuple(t.replace("~1", "/").replace("~0", "~") for t in pointer.split("/"))
        return cls(step, tokens)

    @property
    def pointer(self) -> str:
        """The RFC 6901 JSON Pointer part ("" for the whole output)."""
        return "".join("/" + t.replace("~", "~0").replace("/", "~1") for t in self.tokens)

    def __str__(self) -> str:
        return self.step + self.pointer

    def resolve(self, outputs: Mapping[str, Any]) -> Any:
        """The value this reference selects in the producing step's output; KeyError if absent."""
        value = outputs[self.step]
        for token in self.tokens:
            if isinstance(value, dict):
                value = value[token]
            elif isinstance(value, list):
                if not token.isdigit() or (len(token) > 1 and token[0] == "0"):
                    raise KeyError(token)
                value = value[int(token)]
            else:
                raise KeyError(token)
        return value


# --- the document model: the same contract as schemas/plan.schema.json, in pydantic ----------


def _check_step_id(value: str) -> str:
    if not STEP_ID_RE.fullmatch(value):
        raise ValueError(f"step id {value!r} must match ^[a-z][a-z0-9_]{{0,31}}$")
    return value


def _check_tool_name(value: str) -> str:
    if not TOOL_NAME_RE.fullmatch(value):
        raise ValueError(f"tool name {value!r} must match ^[A-Za-z][A-Za-z0-9_.-]{{0,63}}$")
    return value


def _check_value(value: Any) -> Any:
    _walk_value(value)
    return value


def _walk_value(value: Any) -> None:
    if value is None or isinstance(value, (str, bool, int)):
        return
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError("NaN and Infinity are not JSON")
        return
    if isinstance(value, list):
        for item in value:
            _walk_value(item)
        return
    if isinstance(value, dict):
        if "$ref" in value:
            ref = value["$ref"]
            if len(value) != 1:
                raise ValueError("a reference must have the single key '$ref'")
            if not isinstance(ref, str) or not REF_RE.fullmatch(ref):
                raise ValueError(f"bad reference {ref!r}: expected 'step_id' or 'step_id/json/pointer'")
            return
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError("object keys must be strings")
            _walk_value(item)
        return
    raise ValueError(f"{type(value).__name__} is not a JSON value")


StepId = Annotated[str, AfterValidator(_check_step_id)]
ToolName = Annotated[str, AfterValidator(_check_tool_name)]
Value = Annotated[Any, AfterValidator(_check_value)]


def _check_args(value: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in value:
        raise ValueError("args must be an object of arguments, not a reference")
    return _check_value(value)  # type: ignore[no-any-return]


def _check_unique(value: list[str]) -> list[str]:
    if len(set(value)) != len(value):
        raise ValueError("'after' must not repeat a step id")
    return value


class StepModel(BaseModel):
    """One step of a plan document: call `tool` with `args` once `after` steps have finished."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    id: StepId
    tool: ToolName
    args: Annotated[dict[str, Any], AfterValidator(_check_args)]
    after: Annotated[list[StepId], AfterValidator(_check_unique)] = Field(default_factory=list)


class PlanDocument(BaseModel):
    """A plan document as the planner writes it (schema check only; `compile` does the rest)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    pte_plan: Literal["1"]
    steps: Annotated[list[StepModel], Field(min_length=1)]
    result: Value = None


# --- the compiled plan ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PlanStep:
    """A validated step. `args` is rebuilt from canonical JSON on each access (immutable)."""

    id: str
    tool: str
    #: Private: never handed out; `args` and `resolve_args` return fresh copies.
    _args: Mapping[str, Any] = field(repr=False)
    after: tuple[str, ...]
    #: Every step this one waits for: its references' steps and `after`, in plan order.
    depends_on: tuple[str, ...]
    #: Where references sit inside `args`: (path of keys/indices, reference).
    references: tuple[tuple[tuple[str | int, ...], Reference], ...]

    @property
    def args(self) -> dict[str, Any]:
        """A fresh copy of the step's arguments, references left in place."""
        value: dict[str, Any] = canonical_loads(self.args_json)
        return value

    @property
    def args_json(self) -> str:
        """The step's arguments as canonical JSON."""
        return canonical_json(self._args)

    def resolve_args(self, outputs: Mapping[str, Any]) -> dict[str, Any]:
        """The arguments with every reference replaced by the value it selects (KeyError if absent)."""
        # A JSON round trip is the cheapest deep copy: tools can never mutate the plan.
        args: dict[str, Any] = json.loads(json.dumps(self._args))
        for path, ref in self.references:
            target: Any = args
            for key in path[:-1]:
                target = target[key]
            target[path[-1]] = ref.resolve(outputs)
        return args

    def to_dict(self) -> dict[str, Any]:
        """The step as it appears in the plan document."""
        doc: dict[str, Any] = {"id": self.id, "tool": self.tool, "args": self.args}
        if self.after:
            doc["after"] = list(self.after)
        return doc


@dataclass(frozen=True, slots=True)
class Plan:
    """A compiled plan: validated, immutable, identified by the SHA-256 of its canonical JSON."""

    steps: tuple[PlanStep, ...]
    #: Execution order: topological, ties broken by plan order.
    order: tuple[str, ...]
    hash: str
    canonical: str = field(repr=False)
    result_json: str | None = field(default=None, repr=False)
    _index: Mapping[str, PlanStep] = field(default_factory=dict, repr=False, compare=False)
    #: step id -> canonical JSON of the output schema compile inferred (steps of generic tools).
    _output_types: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.steps)

    def __iter__(self) -> Iterator[PlanStep]:
        return iter(self.steps)

    def step(self, step_id: str) -> PlanStep:
        """The step with this id (KeyError if none)."""
        return self._index[step_id]

    def output_schema(self, step_id: str) -> dict[str, Any] | None:
        """The output type compile inferred for a step of a generic tool (a fresh copy), else None."""
        text = self._output_types.get(step_id)
        return None if text is None else json.loads(text)

    def output_error(self, step_id: str, output: Any) -> str | None:
        """Why `output` breaks the type compile inferred for this step, or None if it fits.

        A generic tool's own schema says little (``list[T]`` is any list); the inferred one
        is what later steps were type-checked against, so the executor holds outputs to it.
        """
        text = self._output_types.get(step_id)
        if text is None:
            return None
        validator = jsonschema_rs.validator_for(json.loads(text))
        if validator.is_valid(output):
            return None
        first = next(iter(validator.iter_errors(output)))
        where = "".join(f"[{p!r}]" if isinstance(p, int) else f".{p}" for p in first.instance_path)
        return f"{where.lstrip('.') or '(root)'}: {first.message} (the type compile inferred for this step)"

    def steps_in_order(self) -> Iterator[PlanStep]:
        """Steps in execution order."""
        return (self._index[i] for i in self.order)

    @property
    def result(self) -> Any:
        """The plan's `result` expression (references unresolved), or None."""
        return None if self.result_json is None else canonical_loads(self.result_json)

    @property
    def has_result(self) -> bool:
        return self.result_json is not None

    def result_references(self) -> list[Reference]:
        """The references inside the plan's `result`."""
        return [ref for _, ref in _reference_sites(self.result)] if self.has_result else []

    def to_dict(self) -> dict[str, Any]:
        """The plan document (a fresh copy)."""
        value: dict[str, Any] = canonical_loads(self.canonical)
        return value

    def to_json(self, indent: int | None = 2) -> str:
        """The plan document as JSON text (canonical when `indent` is None)."""
        if indent is None:
            return self.canonical
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False, sort_keys=False)


def _reference_sites(
    value: Any, path: tuple[str | int, ...] = ()
) -> Iterator[tuple[tuple[str | int, ...], Reference]]:
    """Yield (path, Reference) for every reference inside a JSON value."""
    if isinstance(value, dict):
        if is_reference(value):
            yield path, Reference.parse(value["$ref"])
            return
        for key, item in value.items():
            yield from _reference_sites(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _reference_sites(item, (*path, index))


def build_plan(
    document: Mapping[str, Any],
    order: tuple[str, ...],
    plan_hash: str,
    canonical: str,
    references: list[list[tuple[tuple[str | int, ...], Reference]]] | None = None,
    output_types: Mapping[str, Any] | None = None,
) -> Plan:
    """Assemble a `Plan` from a document that `compile` has fully validated."""
    steps = []
    for i, raw in enumerate(document["steps"]):
        args = raw["args"]
        sites = tuple(references[i]) if references is not None else tuple(_reference_sites(args))
        after = tuple(raw.get("after", ()))
        deps: dict[str, None] = {}
        for _, ref in sites:
            deps[ref.step] = None
        for dep in after:
            deps[dep] = None
        steps.append(
            PlanStep(
                id=raw["id"],
                tool=raw["tool"],
                _args=args,
                after=after,
                depends_on=tuple(deps),
                references=sites,
            )
        )
    result_json = canonical_json(document["result"]) if "result" in document else None
    return Plan(
        steps=tuple(steps),
        order=order,
        hash=plan_hash,
        canonical=canonical,
        result_json=result_json,
        _index={s.id: s for s in steps},
        _output_types={k: canonical_json(v) for k, v in (output_types or {}).items()},
    )
