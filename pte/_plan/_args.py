"""The compile check of step arguments: `invalid_args`, references standing for their types.

Each step's arguments are checked against its tool's input schema in execution order, a
reference counting as the output type of the step it reads; a generic tool's types are
inferred from the step's own arguments (`pte._catalogue._generics`). The largest of the checks, so
it has its own module.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import jsonschema

from pte._catalogue import ToolSpec, is_small
from pte._catalogue import generics as _generics
from pte._catalogue import schema_types as st
from pte._core import ExplainingValidator, PlanRejected, ReasonCode, ecma_validator
from pte._plan._context import CompileContext, _reject, json_path
from pte._plan._model import Reference, is_reference
from pte._plan._refs import _check_pointer, _collect_checked, _select

__all__ = ["check_args", "check_idempotency_keys"]


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
        if not is_small(value):  # see pte._catalogue._tool_spec._explain: too wide to explain cheaply
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
    cache = ctx.literal_validators
    key = (id(schema), id(root))
    if key not in cache:
        whole = {**schema, "$defs": root.get("$defs", {})} if isinstance(schema, Mapping) else schema
        try:
            validator = ecma_validator(whole)
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
    # Explains a literal's mismatch: patterns on RE2, never Python's backtracking `re`.
    return _StepTypes(tool, concrete, ExplainingValidator(concrete))


def check_args(ctx: CompileContext) -> None:
    """invalid_args: a step's args do not fit its tool's input schema, references standing for their types.

    Steps are checked in execution order, so the output type of every step a reference
    reads is known: declared by its tool, or inferred for a generic tool from the step's
    own arguments (then references into it are checked here too: bad_reference).
    """
    for step_id in ctx.order:
        i = ctx.index[step_id]
        step = ctx.steps[i]
        if "require" in step:  # pte._plan._control: no tool, no args
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


def check_idempotency_keys(ctx: CompileContext) -> None:
    """invalid_args: a step supplies the idempotency key parameter of its tool.

    The key is the engine's (see the module docstring); a plan, or data a plan references,
    setting it could make two different payments look like one to the tool, or one payment
    look like two.
    """
    for i, step in enumerate(ctx.steps):
        name = step.get("tool")
        tool = ctx.registry.get(name) if isinstance(name, str) else None
        param = getattr(tool, "idempotency_key", None)
        args = step.get("args")
        if tool is None or param is None or not isinstance(args, dict) or param not in args:
            continue
        raise PlanRejected(
            ReasonCode.INVALID_ARGS,
            f"step {step.get('id')!r} ({tool.name}): {param!r} is the tool's idempotency key; PTE "
            "derives it for every call, a plan cannot set it",
            json_path(("steps", i, "args", param)),
        )
