"""`compile`: planner text in, a frozen `Plan` or a `PlanRejected` with a named reason out.

The compiler is a pipeline of small checks run in order (parse → schema → semantics), each
owning its reason code, in the manner of structlog's processor chain. A check reads the
`CompileContext` and either adds to it or raises `PlanRejected`. Nothing in a plan runs
before every check has passed.
"""

from __future__ import annotations

import heapq
import itertools
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any, NamedTuple

import jsonschema
import jsonschema_rs

from pte import _generics
from pte import _json as strict_json
from pte import _schema_types as st
from pte._canonical import canonical_json, sha256_hex
from pte._errors import PlanRejected, ReasonCode
from pte._idempotency import check_idempotency_keys
from pte._nesting import count_values, nests_deeper_than, outside_strings
from pte._plan import Plan, Reference, build_plan, is_reference, plan_schema
from pte._registry import Registry
from pte._tool_spec import ToolSpec, is_small

__all__ = [
    "DEFAULT_LIMITS",
    "PIPELINE",
    "CompileCheck",
    "CompileContext",
    "Limits",
    "compile_plan",
    "json_path",
]


@dataclass(frozen=True)
class Limits:
    """Size limits a plan must respect (`plan_too_large` otherwise).

    `max_values` bounds how many JSON values (objects, arrays, strings, numbers, literals) the
    plan text holds, counted on the text before parsing (`pte._nesting.count_values`): a
    document of a million tiny values fits in `max_bytes` but would cost seconds to parse,
    validate and explain. The defaults keep compiling any text within them, accepted or
    rejected, well under 50 ms (`bench/bench_rejection.py`): 250 steps (what an LLM writes
    within `pte._llm.DEFAULT_MAX_TOKENS` at ~60 tokens a step; per-item work is one `for_each`
    step) and 10,000 values (40 a step). ``max_values=None`` sets no value cap: what a log
    written before the cap existed records, so its replay compiles as it did then.
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
    #: Extra information checks may attach (e.g. provenance labels from a policy check).
    extras: dict[str, Any] = field(default_factory=dict)
    #: Prior steps that were per-item (`for_each`) steps: their output is a list (pte._control).
    prior_lists: frozenset[str] = frozenset()

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
        """The output schema of a step (and the root its ``$ref``s resolve against).

        For a generic tool it is the schema inferred for this step from its arguments; a
        completed step of an earlier plan (a replan) has its tool's declared schema. A
        for_each step's output is the list of its calls' outputs (pte._control).
        """
        if step_id in self.inferred:
            schema, root = self.inferred[step_id]
        else:
            producer = self.producer(step_id)
            schema, root = producer.output_schema, producer.output_schema
        if self.is_list_step(step_id):
            return {"type": "array", "items": schema, "$defs": root.get("$defs", {})}, root
        return schema, root


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


# --- parse ------------------------------------------------------------------------------------


def check_size(ctx: CompileContext) -> None:
    """plan_too_large: the text is over `max_bytes` (checked before parsing anything)."""
    size = len(ctx.text.encode("utf-8", "surrogatepass"))
    if size > ctx.limits.max_bytes:
        raise _reject(ReasonCode.PLAN_TOO_LARGE, f"plan is {size} bytes; the limit is {ctx.limits.max_bytes}")


def parse_json(ctx: CompileContext) -> None:
    """invalid_json: not exactly one JSON object (NaN/Infinity, duplicate keys, trailing text, ...)."""
    # Deep or wide text is refused from its skeleton, in a few C-speed passes, before the
    # parser builds a single value (pte._nesting). Every string is a value or a key with one.
    most = ctx.limits.max_values
    skeleton = outside_strings(ctx.text, max_strings=None if most is None else 2 * most)
    if skeleton is None:  # (only with a cap)
        message = f"plan holds over {2 * (most or 0)} strings, so over {most} JSON values"
        raise _reject(ReasonCode.PLAN_TOO_LARGE, message)
    # Room above the plan's depth limit (reported precisely below); deep text costs one pass.
    if nests_deeper_than(skeleton, deepest := ctx.limits.max_depth + 16):
        raise _reject(ReasonCode.PLAN_TOO_LARGE, f"plan nesting is deeper than {deepest} levels")
    if most is not None and (values := count_values(skeleton)) > most:
        raise _reject(ReasonCode.PLAN_TOO_LARGE, f"plan holds {values} JSON values; the limit is {most}")
    try:
        value = strict_json.loads(ctx.text, max_depth=ctx.limits.max_depth + 16)
    except strict_json.StrictJSONError as exc:
        if exc.kind == "too_deep":
            raise _reject(ReasonCode.PLAN_TOO_LARGE, "plan nesting is too deep to parse") from None
        raise _reject(ReasonCode.INVALID_JSON, f"not valid JSON: {exc.message}") from None
    if not isinstance(value, dict):
        raise _reject(
            ReasonCode.INVALID_JSON, f"a plan must be one JSON object, not a JSON {st.json_type(value)}"
        )
    try:
        # RFC 8785 numbers are doubles. An integer a double cannot hold exactly (beyond
        # 2**53 - 1, e.g. an account number) is refused, never silently rounded.
        ctx.canonical = canonical_json(value)
        ctx.canonical.encode("utf-8")
    except (ValueError, UnicodeEncodeError) as exc:
        raise _reject(
            ReasonCode.INVALID_JSON,
            f"not valid JSON text: {exc} (write identifiers and big numbers as strings)",
        ) from None
    except RecursionError:
        raise _reject(ReasonCode.PLAN_TOO_LARGE, "plan nesting is too deep") from None
    ctx.document = value


def check_step_count(ctx: CompileContext) -> None:
    """plan_too_large: more than `max_steps` steps (before the schema walks them all)."""
    steps = ctx.document.get("steps")
    if isinstance(steps, list) and len(steps) > ctx.limits.max_steps:
        raise _reject(
            ReasonCode.PLAN_TOO_LARGE,
            f"plan has {len(steps)} steps; the limit is {ctx.limits.max_steps}",
            "steps",
        )


# --- schema -----------------------------------------------------------------------------------


@cache
def _plan_validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(plan_schema())


@cache
def _fast_plan_validator() -> Any:
    # jsonschema-rs compiles the schema to native code: ~250x faster than the pure-Python
    # validator on large plans. The pure-Python one only runs to explain a rejection.
    return jsonschema_rs.validator_for(plan_schema())


def _deepest(error: jsonschema.ValidationError) -> jsonschema.ValidationError:
    # For anyOf failures, the most specific sub-error explains the problem best.
    while error.context:
        best = jsonschema.exceptions.best_match(error.context)
        if best is None or best is error:
            break
        error = best
    return error


def check_schema(ctx: CompileContext) -> None:
    """schema_violation: the document does not match schemas/plan.schema.json."""
    too_deep = _reject(ReasonCode.PLAN_TOO_LARGE, "plan nesting is too deep to validate")
    try:
        if _fast_plan_validator().is_valid(ctx.document):
            return
        # The pure-Python validator explains best, at a cost per level and per error: only for
        # documents at most 12 deep, from their first 32 errors (else: the compiled one's message).
        errors = itertools.islice(_plan_validator().iter_errors(ctx.document), 32)  # lazy
        error = None if nests_deeper_than(ctx.text, 12) else jsonschema.exceptions.best_match(errors)
        if error is None:  # no explanation from the pure-Python validator: report the compiled one's
            fast_error = next(iter(_fast_plan_validator().iter_errors(ctx.document)))
            raise _reject(ReasonCode.SCHEMA_VIOLATION, fast_error.message, *fast_error.instance_path)
    except (RecursionError, ValueError):
        # Both validators recurse; a document deep enough to exhaust them is far beyond any depth limit.
        raise too_deep from None
    detail = _deepest(error)
    path = (
        list(detail.absolute_path)
        if len(detail.absolute_path) >= len(error.absolute_path)
        else list(error.absolute_path)
    )
    message = error.message if len(error.message) <= 300 else error.message[:300] + "…"
    if detail is not error:
        message = f"{message} ({detail.message[:200]})"
    raise _reject(ReasonCode.SCHEMA_VIOLATION, message, *path)


# --- semantics --------------------------------------------------------------------------------


def check_unique_ids(ctx: CompileContext) -> None:
    """duplicate_step_id: two steps share an id."""
    for i, step in enumerate(ctx.steps):
        if step["id"] in ctx.prior:
            raise _reject(
                ReasonCode.DUPLICATE_STEP_ID,
                f"step id {step['id']!r} is already used by a completed step; choose a new id",
                "steps",
                i,
                "id",
            )
        if step["id"] in ctx.index:
            first = ctx.index[step["id"]]
            raise _reject(
                ReasonCode.DUPLICATE_STEP_ID,
                f"step id {step['id']!r} is used by steps {first} and {i}",
                "steps",
                i,
                "id",
            )
        ctx.index[step["id"]] = i


def check_tools_allowed(ctx: CompileContext) -> None:
    """tool_not_allowed: a step names a tool that is not registered and allowed."""
    for i, step in enumerate(ctx.steps):
        if "require" in step:  # pte._control: a require step calls no tool
            continue
        if step["tool"] not in ctx.registry:
            allowed = ", ".join(ctx.registry.names) or "(none)"
            raise _reject(
                ReasonCode.TOOL_NOT_ALLOWED,
                f"step {step['id']!r} calls {step['tool']!r}, which is not in the allow-list ({allowed})",
                "steps",
                i,
                "tool",
            )


class _TooDeep(Exception):
    pass


def _collect(
    value: Any, path: tuple[str | int, ...], out: list[tuple[tuple[str | int, ...], Reference]], depth: int
) -> None:
    """Find every reference in `value`, and enforce the nesting limit on the way down."""
    if depth <= 0:
        raise _TooDeep
    if isinstance(value, dict):
        if is_reference(value):
            out.append((path, Reference.parse(value["$ref"])))
            return
        for key, item in value.items():
            if isinstance(item, (dict, list)):
                _collect(item, (*path, key), out, depth - 1)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            if isinstance(item, (dict, list)):
                _collect(item, (*path, index), out, depth - 1)


def _collect_checked(value: Any, ctx: CompileContext, start_depth: int, *where: str | int) -> list[Any]:
    sites: list[tuple[tuple[str | int, ...], Reference]] = []
    try:
        _collect(value, (), sites, ctx.limits.max_depth - start_depth + 1)
    except _TooDeep:
        raise _reject(
            ReasonCode.PLAN_TOO_LARGE,
            f"plan nesting depth exceeds the limit of {ctx.limits.max_depth}",
            *where,
        ) from None
    return sites


def _select(ctx: CompileContext, ref: Reference) -> st.Schema | None:
    """The schema of the value a reference selects: its pointer into the producer's output type."""
    schema, root = ctx.output_type(ref.step)
    return st.select(schema, root, ref.tokens)


def _check_ref_target(
    ctx: CompileContext, ref: Reference, where: tuple[str | int, ...], owner: str | None
) -> None:
    if ref.step not in ctx.index and ref.step not in ctx.prior:
        raise _reject(ReasonCode.BAD_REFERENCE, f"reference {str(ref)!r} names no step of this plan", *where)
    if ref.step == owner:
        raise _reject(ReasonCode.PLAN_CYCLE, f"step {owner!r} refers to its own output", *where)
    if ref.step in ctx.index and "require" in ctx.steps[ctx.index[ref.step]]:  # pte._control
        raise _reject(
            ReasonCode.BAD_REFERENCE,
            f"reference {str(ref)!r}: a require step has no output (use 'after' to wait for it)",
            *where,
        )
    if ref.step not in ctx.index and ctx.prior[ref.step] not in ctx.registry:
        raise _reject(
            ReasonCode.BAD_REFERENCE, f"reference {str(ref)!r}: that step's tool is not available", *where
        )
    if ref.step in ctx.index and ctx.producer(ref.step).generic:
        return  # its output type is known once its own arguments are typed (check_args)
    _check_pointer(ctx, ref, where)


def _check_pointer(ctx: CompileContext, ref: Reference, where: tuple[str | int, ...]) -> None:
    if ref.tokens and _select(ctx, ref) is None:
        raise _reject(
            ReasonCode.BAD_REFERENCE,
            f"reference {str(ref)!r}: the output of {ctx.producer(ref.step).name!r} has no {ref.pointer!r}",
            *where,
        )


def check_references(ctx: CompileContext) -> None:
    """bad_reference: a `$ref` or `after` names a missing step or a pointer its output cannot have.

    Also plan_too_large for arguments nested deeper than `max_depth` (found on the same walk).
    """
    ctx.references = []
    for i, step in enumerate(ctx.steps):
        # Depth: the document (1) > steps (2) > step (3) > args (4).
        sites = _collect_checked(step.get("args", {}), ctx, 4, "steps", i, "args")
        for path, ref in sites:
            _check_ref_target(ctx, ref, ("steps", i, "args", *path), step["id"])
        for j, dep in enumerate(step.get("after", ())):
            if dep not in ctx.index and dep not in ctx.prior:
                raise _reject(
                    ReasonCode.BAD_REFERENCE, f"'after' names no step {dep!r}", "steps", i, "after", j
                )
            if dep == step["id"]:
                raise _reject(ReasonCode.PLAN_CYCLE, f"step {dep!r} waits for itself", "steps", i, "after", j)
        ctx.references.append(sites)
    if "result" in ctx.document:
        sites = _collect_checked(ctx.document["result"], ctx, 2, "result")
        for path, ref in sites:
            _check_ref_target(ctx, ref, ("result", *path), None)


def check_acyclic(ctx: CompileContext) -> None:
    """plan_cycle: the dependencies (references and `after`) do not form a DAG.

    Also fixes the execution order: topological, ties broken by plan order.
    """
    steps = ctx.steps
    control_deps: Mapping[str, list[str]] = ctx.extras.get("control_deps", {})
    dependents: list[list[int]] = [[] for _ in steps]
    pending = [0] * len(steps)
    for i, step in enumerate(steps):
        # Prior (completed) steps are already satisfied: only this plan's steps order it.
        deps = {ctx.index[ref.step] for _, ref in ctx.references[i] if ref.step in ctx.index}
        deps.update(ctx.index[d] for d in step.get("after", ()) if d in ctx.index)
        # pte._control: conditions, for_each lists and require steps add dependencies.
        deps.update(ctx.index[d] for d in control_deps.get(step["id"], ()) if d in ctx.index)
        deps.discard(i)
        pending[i] = len(deps)
        for d in deps:
            dependents[d].append(i)
    ready = [i for i, n in enumerate(pending) if n == 0]
    heapq.heapify(ready)
    order: list[str] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(steps[i]["id"])
        for j in dependents[i]:
            pending[j] -= 1
            if pending[j] == 0:
                heapq.heappush(ready, j)
    if len(order) < len(steps):
        stuck = [steps[i]["id"] for i, n in enumerate(pending) if n > 0]
        first = min(ctx.index[s] for s in stuck)
        raise _reject(
            ReasonCode.PLAN_CYCLE,
            f"steps {stuck} depend on each other in a cycle (through references or 'after')",
            "steps",
            first,
        )
    ctx.order = tuple(order)


class _Mismatch(NamedTuple):
    """Why a value does not fit, and where inside the step's args."""

    message: str
    path: tuple[str | int, ...]


def _shape(schema: st.Schema, root: Mapping[str, Any]) -> str:
    """A description that tells apart schemas of the same JSON type (enums, object shapes)."""
    text = st.describe(schema, root)
    resolved = st.deref(schema, root)
    if isinstance(resolved, Mapping):
        if "enum" in resolved:
            text += f" (one of {list(resolved['enum'])})"
        elif "const" in resolved:
            text += f" (exactly {resolved['const']!r})"
        elif resolved.get("required"):
            text += f" (with required {list(resolved['required'])})"
    return text


@dataclass(frozen=True)
class _StepTypes:
    """The input schema a step's arguments are checked against, with the root and validator for it."""

    tool: ToolSpec
    schema: Mapping[str, Any]
    validator: jsonschema.Draft202012Validator


def _type_check(
    ctx: CompileContext,
    value: Any,
    schema: st.Schema,
    types: _StepTypes,
    path: tuple[str | int, ...],
    ref_prefixes: frozenset[tuple[str | int, ...]],
) -> _Mismatch | None:
    """Why `value` (literals and references) does not fit `schema`, or None if it does."""
    root, tool = types.schema, types.tool
    if is_reference(value):
        ref = Reference.parse(value["$ref"])
        producer = ctx.producer(ref.step)
        src_root = ctx.output_type(ref.step)[1]
        src = _select(ctx, ref)
        assert src is not None  # the pointer was proven to exist before type checks
        if not st.assignable(src, src_root, schema, root):
            given, expected = st.describe(src, src_root), st.describe(schema, root)
            if given == expected:  # same JSON type: say what else differs
                given, expected = _shape(src, src_root), _shape(schema, root)
            return _Mismatch(
                f"reference {str(ref)!r} gives {given} ({producer.name} output) "
                f"but {tool.name} expects {expected}",
                path,
            )
        return None
    if path not in ref_prefixes:
        # A plain literal. A whole parameter of a declared schema has a compiled validator;
        # otherwise (or to explain a failure) the reference validator walks only this value.
        if len(path) == 1 and root is tool.input_schema and tool.param_is_valid(str(path[0]), value):
            return None
        fast = _literal_validator(ctx, schema, root)
        if fast is not None and fast.is_valid(value):
            return None
        if not is_small(value):  # see pte._tool_spec._explain: too wide to explain cheaply
            return _Mismatch("the value does not match the schema (it holds over 1,000 values)", path)
        error = jsonschema.exceptions.best_match(itertools.islice(types.validator.descend(value, schema), 32))
        if error is None:
            return None
        return _Mismatch(error.message, (*path, *error.relative_path))
    schema = st.deref(schema, root)
    if not isinstance(schema, Mapping):
        return None if schema else _Mismatch("no value is allowed here", path)
    for keyword in ("anyOf", "oneOf"):
        if keyword in schema:
            reasons = [_type_check(ctx, value, b, types, path, ref_prefixes) for b in schema[keyword]]
            failures = [r for r in reasons if r is not None]
            if len(failures) == len(reasons):
                if len(failures) == 1:
                    return failures[0]
                joined = "; ".join(r.message for r in failures)
                return _Mismatch(f"matches none of the allowed forms ({joined})", path)
            return None
    for branch in schema.get("allOf", ()):
        mismatch = _type_check(ctx, value, branch, types, path, ref_prefixes)
        if mismatch is not None:
            return mismatch
    types_here = st.types_of(schema, root)
    if isinstance(value, dict):
        if "object" not in types_here:
            return _Mismatch(f"an object is given but {st.describe(schema, root)} is expected", path)
        missing = [k for k in schema.get("required", ()) if k not in value]
        if missing:
            return _Mismatch(f"missing required {missing}", path)
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        for key, item in value.items():
            sub = props.get(key, extra)
            if sub is False:
                return _Mismatch(f"unexpected property {key!r}", (*path, key))
            mismatch = _type_check(ctx, item, sub, types, (*path, key), ref_prefixes)
            if mismatch is not None:
                return mismatch
        return None
    if isinstance(value, list):
        if "array" not in types_here:
            return _Mismatch(f"an array is given but {st.describe(schema, root)} is expected", path)
        prefix = schema.get("prefixItems", [])
        items = schema.get("items", True)
        for index, item in enumerate(value):
            sub = prefix[index] if index < len(prefix) else items
            mismatch = _type_check(ctx, item, sub, types, (*path, index), ref_prefixes)
            if mismatch is not None:
                return mismatch
        return None
    return None


def _literal_validator(ctx: CompileContext, schema: st.Schema, root: Mapping[str, Any]) -> Any:
    """A compiled validator for literals at `schema` (cached per schema for this compile), or None.

    The pure-Python validator costs ~15 µs a value; a plan of `max_values` literals beside
    references must not cost that. None when `schema` cannot be compiled on its own (e.g. it
    refers outside ``$defs``): the pure-Python validator then decides.
    """
    cache: dict[tuple[int, int], tuple[Any, ...]] = ctx.extras.setdefault("literal_validators", {})
    key = (id(schema), id(root))
    if key not in cache:
        whole = {**schema, "$defs": root.get("$defs", {})} if isinstance(schema, Mapping) else schema
        try:
            validator = jsonschema_rs.validator_for(whole)
        except (ValueError, TypeError):
            validator = None
        cache[key] = (schema, root, validator)  # holding schema and root keeps their ids unique
    return cache[key][2]


def _value_schema(ctx: CompileContext, value: Any) -> st.Schema:
    """The (self-contained) schema of an argument value: references stand for their selected types."""
    if is_reference(value):
        ref = Reference.parse(value["$ref"])
        selected = _select(ctx, ref)
        return True if selected is None else _generics.inline(selected, ctx.output_type(ref.step)[1])
    if isinstance(value, dict):
        return {
            "type": "object",
            "properties": {k: _value_schema(ctx, v) for k, v in value.items()},
            "required": list(value),
            "additionalProperties": False,
        }
    if isinstance(value, list):
        return {"type": "array", "items": _generics.union([_value_schema(ctx, v) for v in value]) or True}
    return _generics.literal_schema(value)


def _infer(ctx: CompileContext, i: int, step: dict[str, Any], tool: ToolSpec) -> _StepTypes:
    """Bind a generic tool's type variables from this step's arguments; record its output type."""
    args = step["args"]
    env: dict[str, st.Schema] = {}
    try:
        _generics.bind(tool.input_schema, _value_schema(ctx, args), env)
    except _generics.BindError as exc:
        where = json_path(exc.path)[2:] or "args"
        raise _reject(
            ReasonCode.INVALID_ARGS,
            f"step {step['id']!r} ({tool.name}): {where}: {exc.message}",
            "steps",
            i,
            "args",
            *exc.path,
        ) from None
    bad_field = _generics.literal_errors(tool.input_schema, env, args)
    if bad_field is not None:
        param, message = bad_field
        raise _reject(
            ReasonCode.INVALID_ARGS,
            f"step {step['id']!r} ({tool.name}): {param}: {message}",
            "steps",
            i,
            "args",
            param,
        )
    output = _generics.thaw(_generics.substitute(tool.output_schema, env, args))
    ctx.inferred[step["id"]] = (output, output if isinstance(output, Mapping) else {})
    concrete = _generics.thaw(_generics.substitute(tool.input_schema, env, args))
    assert isinstance(concrete, Mapping)
    return _StepTypes(tool, concrete, jsonschema.Draft202012Validator(concrete))


def check_args(ctx: CompileContext) -> None:
    """invalid_args: a step's args do not fit its tool's input schema, references standing for their types.

    Steps are checked in execution order, so the output type of every step a reference
    reads is known: declared by its tool, or inferred for a generic tool from the step's
    own arguments (then references into it are checked here too: bad_reference).
    """
    for step_id in ctx.order:
        i = ctx.index[step_id]
        step = ctx.steps[i]
        if "require" in step:  # pte._control: no tool, no args
            continue
        tool = ctx.tool(i)
        args = step["args"]
        for path, ref in ctx.references[i]:
            if ref.step in ctx.inferred:
                _check_pointer(ctx, ref, ("steps", i, "args", *path))
        if tool.generic:
            types = _infer(ctx, i, step, tool)
        else:
            types = _StepTypes(tool, tool.input_schema, tool._input_validator)
            if not ctx.references[i]:
                error = tool.args_error(args)
                if error is not None:
                    raise _reject(
                        ReasonCode.INVALID_ARGS,
                        f"step {step['id']!r} ({tool.name}): {error.message}",
                        "steps",
                        i,
                        "args",
                        *error.absolute_path,
                    )
                continue
        # Every path that leads to a reference: the rest of args are plain literals.
        prefixes = frozenset(path[:n] for path, _ in ctx.references[i] for n in range(len(path) + 1))
        mismatch = _type_check(ctx, args, types.schema, types, (), prefixes)
        if mismatch is not None:
            where = json_path(mismatch.path)[2:] or "args"
            raise _reject(
                ReasonCode.INVALID_ARGS,
                f"step {step['id']!r} ({tool.name}): {where}: {mismatch.message}",
                "steps",
                i,
                "args",
                *mismatch.path,
            )
    if "result" in ctx.document:
        for path, ref in _collect_checked(ctx.document["result"], ctx, 2, "result"):
            if ref.step in ctx.inferred:
                _check_pointer(ctx, ref, ("result", *path))


from pte._control import check_control, check_control_types  # noqa: E402  (pte._control reads this module's helpers)

#: The checks `compile_plan` runs, in order. Each raises `PlanRejected` with its own reason code.
PIPELINE: tuple[CompileCheck, ...] = (
    check_size,
    parse_json,
    check_step_count,
    check_schema,
    check_unique_ids,
    check_tools_allowed,
    check_idempotency_keys,
    check_references,
    check_control,
    check_acyclic,
    check_args,
    check_control_types,
)


def compile_plan(
    text: str | bytes,
    registry: Registry,
    limits: Limits | None = None,
    *,
    checks: Sequence[CompileCheck] = (),
    prior: Mapping[str, str] | None = None,
    prior_lists: Iterable[str] = (),
) -> Plan:
    """Compile planner output into a frozen, hashed `Plan`, or raise `PlanRejected`.

    `checks` are extra checks run after the built-in pipeline (e.g. a data-flow policy).
    Anything unexpected inside a check is itself a rejection: compile never lets an
    exception other than `PlanRejected` escape for any input text.

    `prior` names steps completed earlier in the run (step id -> tool name): a replanned
    plan may reference their outputs, must not reuse their ids, and never re-runs them.
    `prior_lists` names those of them that were for_each steps (their output is a list).
    """
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _reject(ReasonCode.INVALID_JSON, f"plan is not UTF-8 text: {exc}") from None
    ctx = CompileContext(
        text=text,
        registry=registry,
        limits=limits or DEFAULT_LIMITS,
        prior=dict(prior or {}),
        prior_lists=frozenset(prior_lists),
    )
    for check in PIPELINE:
        check(ctx)
    for check in checks:
        try:
            check(ctx)
        except PlanRejected:
            raise
        except Exception as exc:
            # An extra check (a policy) that cannot decide must not let the plan through.
            name = getattr(check, "__name__", type(check).__name__)
            raise _reject(
                ReasonCode.POLICY_VIOLATION, f"check {name} failed: {type(exc).__name__}: {exc}"
            ) from exc
    return build_plan(
        ctx.document,
        ctx.order,
        sha256_hex(ctx.canonical),
        ctx.canonical,
        ctx.references,
        control_deps=ctx.extras.get("control_deps"),
        condition_modes=ctx.extras.get("condition_modes"),
        output_types={step_id: schema for step_id, (schema, _) in ctx.inferred.items()},
    )
