"""The plan: its document model (mirroring schemas/plan.schema.json) and the compiled, frozen `Plan`.

A compiled plan keeps every argument as canonical JSON text, not as live Python objects,
so nothing that holds a `Plan` can change it: each access returns a fresh copy.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from pte._catalogue import TOOL_NAME_RE
from pte._core import array_index, canonical_json, canonical_loads, ecma_validator, load_schema

__all__ = [
    "ELEMENT",
    "PLAN_FORMAT_VERSION",
    "Plan",
    "PlanDocument",
    "PlanStep",
    "ProcedureOrigin",
    "Reference",
    "RequireStepModel",
    "StepModel",
    "is_reference",
    "plan_schema",
]

PLAN_FORMAT_VERSION = "1"
STEP_ID_RE = re.compile(r"[a-z][a-z0-9_]{0,63}")
REF_RE = re.compile(r"[a-z][a-z0-9_]{0,63}(/([^~/]|~[01])*)*", re.DOTALL)
#: The pointer token that selects the current element of a `for_each` list (see pte._plan._control).
ELEMENT = "*"


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
                index = array_index(token)
                if index is None or index >= len(value):
                    raise KeyError(token)
                value = value[index]
            else:
                raise KeyError(token)
        return value


# --- the document model: the same contract as schemas/plan.schema.json, in pydantic ----------


def _check_step_id(value: str) -> str:
    if not STEP_ID_RE.fullmatch(value):
        raise ValueError(f"step id {value!r} must match ^[a-z][a-z0-9_]{{0,63}}$")
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


def _check_reference(value: dict[str, Any]) -> dict[str, Any]:
    if not is_reference(value):
        raise ValueError("expected a reference {'$ref': 'step_id/json/pointer'}")
    _walk_value(value)
    return value


def _check_max_items(value: Any) -> Any:
    # JSON Schema's "integer" includes 5.0; bool is not a number in JSON.
    if value is None:
        return value
    if type(value) not in (int, float) or value != int(value) or not 1 <= value <= 1000:
        raise ValueError("'max_items' is an integer from 1 to 1000")
    return value


_COMPARISONS = frozenset({"eq", "ne", "lt", "le", "gt", "ge"})


def _check_condition(value: Any) -> Any:
    """The condition grammar of schemas/plan.schema.json (types are checked by compile)."""
    if value is None:
        return value
    stack = [(value, 0)]
    while stack:
        cond, depth = stack.pop()
        if depth > 64:
            raise ValueError("condition nested too deeply")
        if type(cond) is not dict or len(cond) != 1:
            raise ValueError("a condition is an object with exactly one operator key")
        ((op, arg),) = cond.items()
        if op in _COMPARISONS:
            if type(arg) is not list or len(arg) != 2:
                raise ValueError(f"{op!r} takes a list of two operands")
            for operand in arg:
                if is_reference(operand):
                    _check_reference(operand)
                elif operand is not None and not isinstance(operand, (str, int, float, bool)):
                    raise ValueError("an operand is a reference or a string, number, boolean or null")
                else:
                    _walk_value(operand)
        elif op in ("and", "or"):
            if type(arg) is not list or not 2 <= len(arg) <= 16:
                raise ValueError(f"{op!r} takes a list of 2 to 16 conditions")
            stack.extend((c, depth + 1) for c in arg)
        elif op == "not":
            stack.append((arg, depth + 1))
        elif op in ("empty", "nonempty"):
            if type(arg) is not dict:
                raise ValueError(f"{op!r} takes a reference")
            _check_reference(arg)
        else:
            raise ValueError(f"unknown condition operator {op!r}")
    return value


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
    # --- control (pte._plan._control): per-item calls and conditions ---
    for_each: Annotated[dict[str, Any], AfterValidator(_check_reference)] | None = None
    max_items: Annotated[Any, AfterValidator(_check_max_items)] = None
    when: Annotated[Any, AfterValidator(_check_condition)] = None
    default: Value = None

    @model_validator(mode="after")
    def _dependent(self) -> StepModel:
        given = self.model_fields_set
        for key, needs in (("for_each", "max_items"), ("max_items", "for_each"), ("default", "when")):
            if key in given and needs not in given:
                raise ValueError(f"{key!r} requires {needs!r}")
        for key in ("for_each", "max_items", "when"):
            if key in given and getattr(self, key) is None:
                raise ValueError(f"{key!r} must not be null")
        return self


class RequireStepModel(BaseModel):
    """A step that lets the run go on only if its condition holds (pte._plan._control)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    id: StepId
    require: Annotated[Any, AfterValidator(_check_condition)]
    message: Annotated[str, Field(min_length=1, max_length=300)]
    after: Annotated[list[StepId], AfterValidator(_check_unique)] = Field(default_factory=list)

    @model_validator(mode="after")
    def _not_null(self) -> RequireStepModel:
        if self.require is None:
            raise ValueError("'require' must be a condition")
        return self


def _check_continue(value: dict[str, Any]) -> dict[str, Any]:
    if not 1 <= len(value) <= 16:
        raise ValueError("'continue' names 1 to 16 values")
    for name in value:
        _check_step_id(name)
    return _check_value(value)  # type: ignore[no-any-return]


class PlanDocument(BaseModel):
    """A plan document as the planner writes it (schema check only; `compile` does the rest)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    pte_plan: Literal["1"]
    steps: Annotated[list[StepModel | RequireStepModel], Field(min_length=1)]
    result: Value = None
    continue_: Annotated[dict[str, Any], AfterValidator(_check_continue)] | None = Field(
        default=None, alias="continue"
    )

    @model_validator(mode="after")
    def _result_or_continue(self) -> PlanDocument:
        if "continue_" in self.model_fields_set:
            if self.continue_ is None:
                raise ValueError("'continue' must be an object")
            if "result" in self.model_fields_set:
                raise ValueError("a plan has either 'result' or 'continue', not both")
        return self


# --- the compiled plan ------------------------------------------------------------------------


#: The containers of JSON data (a tuple, as `canonical_bytes` takes it, is copied as a list).
_CONTAINERS = (dict, list, tuple)


def copy_json(value: Any) -> Any:
    """A deep copy of JSON data: new dicts and lists, the (immutable) scalars shared.

    What ``json.loads(json.dumps(value))`` gives for JSON data, without making the text.
    Only containers are descended into (a call per scalar cost more than the copy, #37).
    """
    if isinstance(value, dict):
        return {
            key: copy_json(item) if isinstance(item, _CONTAINERS) else item for key, item in value.items()
        }
    if isinstance(value, _CONTAINERS):
        return [copy_json(item) if isinstance(item, _CONTAINERS) else item for item in value]
    return value


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
    # --- control (pte._plan._control) ---
    #: The list a per-item step maps over, and its bound.
    for_each: Reference | None = None
    max_items: int = 0
    #: The step's condition (`when`; for a require step, `require`) as canonical JSON.
    condition_json: str | None = field(default=None, repr=False)
    #: The output of a skipped step (canonical JSON), if the plan gives one.
    default_json: str | None = field(default=None, repr=False)
    #: A require step's message (None for a tool step).
    message: str | None = None
    #: How each comparison of the condition compares, in document order (set by compile).
    condition_modes: tuple[str, ...] = ()

    @property
    def is_require(self) -> bool:
        """A `require` step: no tool, only a condition the run needs."""
        return self.message is not None

    @property
    def condition(self) -> Any:
        """The step's condition (a fresh copy), or None."""
        return None if self.condition_json is None else json.loads(self.condition_json)

    @property
    def default(self) -> Any:
        """The output of this step when skipped (a fresh copy; None when there is none)."""
        return None if self.default_json is None else json.loads(self.default_json)

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
        """The arguments with every reference replaced by the value it selects (KeyError if absent).

        The literal parts are a fresh copy (nothing done to the result reaches the plan); the
        values references select are the outputs' own objects, not copies.
        """
        # A top-level reference's own ``{"$ref": ...}`` is not copied: its place is filled below.
        args: dict[str, Any] = {
            key: None if is_reference(value) else copy_json(value) for key, value in self._args.items()
        }
        for path, ref in self.references:
            target: Any = args
            for key in path[:-1]:
                target = target[key]
            target[path[-1]] = ref.resolve(outputs)
        return args

    def to_dict(self) -> dict[str, Any]:
        """The step as it appears in the plan document."""
        doc: dict[str, Any]
        if self.is_require:
            doc = {"id": self.id, "require": self.condition, "message": self.message}
        else:
            doc = {"id": self.id, "tool": self.tool, "args": self.args}
        if self.after:
            doc["after"] = list(self.after)
        if self.for_each is not None:
            doc["for_each"] = {"$ref": str(self.for_each)}
            doc["max_items"] = self.max_items
        if self.condition_json is not None and not self.is_require:
            doc["when"] = self.condition
        if self.default_json is not None:
            doc["default"] = self.default
        return doc


@dataclass(frozen=True, slots=True)
class ProcedureOrigin:
    """One procedure call a compiled step was inlined from (pte._plan._procedures).

    `call`: the call's step id (``x``, or ``x__y`` for a call inside a procedure's body);
    `procedure`/`version`: the deployment's procedure and its version (SHA-256 of its file).
    Only `expand_procedures` writes these; the plan's JSON cannot, so a step a planner
    names ``x__pay`` itself has none.
    """

    call: str
    procedure: str
    version: str


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
    #: The values handed to the next planning stage (`continue`, canonical JSON), if any.
    continue_json: str | None = field(default=None, repr=False)
    #: step id -> canonical JSON of the output schema compile inferred (steps of generic tools).
    _output_types: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)
    #: step id -> the procedure calls it was inlined from, outermost first (none: written by the planner).
    _origins: Mapping[str, tuple[ProcedureOrigin, ...]] = field(
        default_factory=dict, repr=False, compare=False
    )

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
        validator = ecma_validator(json.loads(text))
        if validator.is_valid(output):
            return None
        first = next(iter(validator.iter_errors(output)))
        where = "".join(f"[{p!r}]" if isinstance(p, int) else f".{p}" for p in first.instance_path)
        return f"{where.lstrip('.') or '(root)'}: {first.message} (the type compile inferred for this step)"

    def procedure_origin(self, step_id: str) -> tuple[ProcedureOrigin, ...]:
        """The procedure calls step `step_id` was inlined from, outermost first; () for a step the
        plan itself wrote. Set by compile's inlining only (`pte._plan._procedures.expand_procedures`)."""
        return self._origins.get(step_id, ())

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

    @property
    def continues(self) -> bool:
        """Whether the plan ends by handing values to a next planning stage."""
        return self.continue_json is not None

    @property
    def continue_values(self) -> dict[str, Any]:
        """The `continue` values (references unresolved; empty when the plan has none)."""
        return {} if self.continue_json is None else dict(json.loads(self.continue_json))

    def tool_steps(self) -> Iterator[PlanStep]:
        """The steps that call a tool (every step but `require` steps), in plan order."""
        return (s for s in self.steps if not s.is_require)

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
    control_deps: Mapping[str, Sequence[str]] | None = None,
    condition_modes: Mapping[str, tuple[str, ...]] | None = None,
    output_types: Mapping[str, Any] | None = None,
    origins: Mapping[str, tuple[ProcedureOrigin, ...]] | None = None,
) -> Plan:
    """Assemble a `Plan` from a document that `compile` has fully validated."""
    steps = []
    extra = dict(control_deps or {})
    for i, raw in enumerate(document["steps"]):
        args = raw.get("args", {})
        sites = tuple(references[i]) if references is not None else tuple(_reference_sites(args))
        after = tuple(raw.get("after", ()))
        deps: dict[str, None] = {}
        for _, ref in sites:
            deps[ref.step] = None
        for dep in (*after, *extra.get(raw["id"], ())):
            deps[dep] = None
        condition = raw.get("require", raw.get("when"))
        steps.append(
            PlanStep(
                id=raw["id"],
                tool=raw.get("tool", ""),
                _args=args,
                after=after,
                depends_on=tuple(d for d in deps if d != raw["id"]),
                references=sites,
                for_each=Reference.parse(raw["for_each"]["$ref"]) if "for_each" in raw else None,
                max_items=int(raw.get("max_items", 0)),
                condition_json=None if condition is None else canonical_json(condition),
                default_json=canonical_json(raw["default"]) if "default" in raw else None,
                message=raw.get("message"),
                condition_modes=(condition_modes or {}).get(raw["id"], ()),
            )
        )
    result_json = canonical_json(document["result"]) if "result" in document else None
    continue_json = canonical_json(document["continue"]) if "continue" in document else None
    return Plan(
        steps=tuple(steps),
        order=order,
        hash=plan_hash,
        canonical=canonical,
        result_json=result_json,
        _index={s.id: s for s in steps},
        continue_json=continue_json,
        _output_types={k: canonical_json(v) for k, v in (output_types or {}).items()},
        _origins=dict(origins or {}),
    )
