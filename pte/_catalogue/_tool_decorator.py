"""Tools: the `tool` decorator, which turns a typed function into a `ToolSpec`.

A tool is a typed Python function. Its input and output JSON Schemas come from its type
hints through pydantic, so the schema a plan is checked against is the one the function
really accepts. `ToolSpec` itself lives in `pte._catalogue._tool_spec`; the `Registry` (the tools a
run may call; nothing else can be called) and tool packs in `pte._catalogue._registry`.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any, Literal, TypeVar, overload

import jsonschema
import pydantic
from pydantic import BaseModel, ConfigDict, TypeAdapter, create_model
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

import pte._catalogue._generics as _generics
from pte._catalogue._idempotency import key_schema_error
from pte._catalogue._selection import SELECTION_KEY, Selection
from pte._catalogue._tool_spec import (
    _TOOL_ATTR,
    TOOL_NAME_RE,
    Effect,
    Isolation,
    OutputProvenance,
    ToolSpec,
    _freeze_schema,
)
from pte._core import DECIMAL_STRING_PATTERN, ExplainingValidator, ToolRegistrationError, ecma_validator

__all__ = [
    "tool",
]

_F = TypeVar("_F", bound=Callable[..., Any])


class JsonSchema(GenerateJsonSchema):
    """pydantic's JSON Schema generator, with a stable schema for `Decimal` across versions.

    pydantic 2.14 dropped the pattern on decimal strings; without it a literal like "abc"
    for a `Decimal` parameter would pass compile and fail only at run time.
    """

    def decimal_schema(self, schema: core_schema.DecimalSchema) -> JsonSchemaValue:
        json_schema = super().decimal_schema(schema)
        for branch in json_schema.get("anyOf", [json_schema]):
            if branch.get("type") == "string" and "pattern" not in branch:
                branch["pattern"] = DECIMAL_STRING_PATTERN
        return json_schema


def _mark_type_vars(hint: Any) -> Any:
    """`hint` with each TypeVar replaced by its bound, marked so the JSON Schema names the variable.

    pydantic itself would read an unbound TypeVar as `Any`; the marker (``x-pte-var``) is
    what lets compile infer each step's concrete types (see `pte._catalogue._generics`).
    """
    if isinstance(hint, TypeVar):
        if hint.__constraints__:
            bound: Any = typing.Union[hint.__constraints__]  # noqa: UP007 - built from a tuple
        else:
            bound = hint.__bound__ if hint.__bound__ is not None else Any
        return typing.Annotated[bound, _generics.TypeVarMarker(hint.__name__)]
    metadata = getattr(hint, "__pydantic_generic_metadata__", None)
    if metadata and metadata.get("origin") is not None and metadata.get("args"):
        return metadata["origin"][tuple(_mark_type_vars(a) for a in metadata["args"])]
    if metadata and metadata.get("parameters"):  # a generic model used without arguments
        return hint[tuple(_mark_type_vars(p) for p in metadata["parameters"])]
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if not args:
        return hint
    if origin is typing.Annotated:
        return typing.Annotated[(_mark_type_vars(args[0]), *hint.__metadata__)]
    marked = tuple(_mark_type_vars(a) for a in args)
    if marked == args:
        return hint
    if origin in (typing.Union, types.UnionType):
        return typing.Union[marked]  # noqa: UP007 - built from a tuple
    if origin is Literal:
        return hint
    return origin[marked[0] if len(marked) == 1 else marked]


def _generic_schema(schema: dict[str, Any]) -> dict[str, Any]:
    inlined = _generics.inline(schema, schema)
    assert isinstance(inlined, dict)

    def tidy(node: Any) -> Any:
        # Parametrised generic models are titled like "Records[Annotated[Any, ...]]".
        if isinstance(node, dict):
            out = {k: tidy(v) for k, v in node.items()}
            title = out.get("title")
            if isinstance(title, str) and "[" in title:
                out["title"] = title.split("[", 1)[0]
            return out
        if isinstance(node, list):
            return [tidy(v) for v in node]
        return node

    tidied: dict[str, Any] = tidy(inlined)
    return tidied


def _var_names(schema: Any, key: str) -> set[str]:
    if isinstance(schema, dict):
        found = {str(schema[key])} if key in schema and isinstance(schema[key], str) else set()
        if key != _generics.VAR:
            marker = schema.get(key)
            if isinstance(marker, list) and marker:
                found = {str(marker[0])}
        for value in schema.values():
            found |= _var_names(value, key)
        return found
    if isinstance(schema, list):
        return set().union(*(_var_names(v, key) for v in schema)) if schema else set()
    return set()


def _unbound_output_vars(input_schema: dict[str, Any], output_schema: dict[str, Any]) -> list[str]:
    wanted = set()
    for key in (_generics.VAR, _generics.FIELD_OF, _generics.PICK, _generics.EXTEND):
        wanted |= _var_names(output_schema, key)
    return sorted(wanted - _var_names(input_schema, _generics.VAR))


def _sinks_by_json_name(
    tool_name: str,
    sinks: Mapping[str, Iterable[str] | str],
    input_model: type[BaseModel],
    input_schema: Mapping[str, Any],
) -> dict[str, Iterable[str] | str]:
    """Sink declarations keyed by the input schema's JSON property names.

    Plans, policies and the flow check see a tool's arguments by their JSON names, which an
    alias (``Annotated[str, Field(alias="IBAN")]``) makes differ from the Python name. A
    declaration may use either; it is stored under the JSON name. One naming no parameter is
    refused: a sink that silently guards nothing is worse than none.
    """
    properties = set(input_schema.get("properties") or {})
    json_name = {}
    for name, info in input_model.model_fields.items():
        alias = info.validation_alias if isinstance(info.validation_alias, str) else info.alias
        json_name[name] = alias if isinstance(alias, str) and alias in properties else name
    out: dict[str, Iterable[str] | str] = {}
    for declared, allowed in sinks.items():
        if declared in properties:
            target = declared
        elif declared in json_name and json_name[declared] in properties:
            target = json_name[declared]
        else:
            raise ToolRegistrationError(
                f"tool {tool_name!r}: sink {declared!r} names no parameter "
                f"(its JSON parameters: {', '.join(sorted(properties)) or 'none'})"
            )
        if target in out:
            raise ToolRegistrationError(
                f"tool {tool_name!r}: parameter {target!r} is declared twice as a sink"
            )
        out[target] = allowed
    return out


def _build_spec(
    func: Callable[..., Any],
    *,
    name: str | None,
    description: str | None,
    effect: Effect,
    timeout_s: float,
    idempotent: bool | None,
    provenance: OutputProvenance,
    sinks: Mapping[str, Iterable[str] | str] | None,
    requires_approval: bool,
    isolation: Isolation = "thread",
    retries: int = 0,
    backoff_s: float = 0.1,
    retry_on: Iterable[type[BaseException]] = (),
    idempotency_key: str | None = None,
    selection: Selection | None = None,
    read_effects: bool = False,
) -> ToolSpec:
    qualname = getattr(func, "__qualname__", repr(func))
    if not callable(func):
        raise ToolRegistrationError(f"{qualname!r} is not callable")
    tool_name = name or func.__name__
    if effect not in ("read", "write"):
        raise ToolRegistrationError(f"tool {tool_name!r}: effect must be 'read' or 'write', not {effect!r}")
    if provenance not in ("trusted", "untrusted", "derived"):
        raise ToolRegistrationError(
            f"tool {tool_name!r}: provenance must be 'trusted', 'untrusted' or 'derived', not {provenance!r}"
        )
    if not (isinstance(timeout_s, (int, float)) and timeout_s > 0):
        raise ToolRegistrationError(f"tool {tool_name!r}: timeout_s must be a positive number")
    if read_effects and effect != "read":
        raise ToolRegistrationError(f"tool {tool_name!r}: read_effects marks a read (a write has effects)")
    is_async = inspect.iscoroutinefunction(func)
    _check_execution_options(
        tool_name, func, effect, idempotent, is_async, isolation, retries, backoff_s, tuple(retry_on)
    )
    if not TOOL_NAME_RE.fullmatch(tool_name):
        raise ToolRegistrationError(f"tool name {tool_name!r} must match ^[A-Za-z][A-Za-z0-9_.-]{{0,63}}$")

    try:
        hints = typing.get_type_hints(func, include_extras=True)
    except Exception as exc:  # unresolvable forward references and the like
        raise ToolRegistrationError(f"tool {tool_name!r}: cannot read type hints: {exc}") from None
    signature = inspect.signature(func)
    fields: dict[str, Any] = {}
    for param in signature.parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ToolRegistrationError(
                f"tool {tool_name!r}: *args/**kwargs are not allowed; name every parameter"
            )
        if param.kind is param.POSITIONAL_ONLY:
            raise ToolRegistrationError(f"tool {tool_name!r}: positional-only parameter {param.name!r}")
        if param.name not in hints:
            raise ToolRegistrationError(
                f"tool {tool_name!r}: parameter {param.name!r} has no type hint; "
                "every parameter needs one so that PTE can derive the input schema"
            )
        default = ... if param.default is param.empty else param.default
        fields[param.name] = (_mark_type_vars(hints[param.name]), default)
    if "return" not in hints:
        raise ToolRegistrationError(
            f"tool {tool_name!r}: no return type hint; PTE derives the output schema from it "
            "(use -> None if nothing)"
        )

    try:
        input_model = create_model(f"{tool_name}_input", __config__=ConfigDict(extra="forbid"), **fields)
        input_schema = input_model.model_json_schema(mode="validation", schema_generator=JsonSchema)
        output_schema = TypeAdapter(_mark_type_vars(hints["return"])).json_schema(
            mode="serialization", schema_generator=JsonSchema
        )
    except pydantic.PydanticUserError as exc:
        first_line = str(exc).splitlines()[0]
        raise ToolRegistrationError(
            f"tool {tool_name!r}: its type hints do not give a JSON Schema: {first_line}"
        ) from None
    if _generics.has_markers(input_schema) or _generics.has_markers(output_schema):
        # Self-contained schemas (no $defs) for generic tools: inference substitutes into them.
        input_schema = _generic_schema(input_schema)
        output_schema = _generic_schema(output_schema)
        unbound = _unbound_output_vars(input_schema, output_schema)
        if unbound:
            raise ToolRegistrationError(
                f"tool {tool_name!r}: type variable(s) {unbound} appear in the return type but in no "
                "parameter, so no step could ever bind them"
            )
    for schema in (input_schema, output_schema):
        jsonschema.Draft202012Validator.check_schema(schema)
    sinks = _sinks_by_json_name(tool_name, sinks or {}, input_model, input_schema)
    if idempotency_key is not None:
        problem = key_schema_error(idempotency_key, input_schema, effect)
        if problem is None and idempotency_key in (sinks or {}):
            problem = f"idempotency_key {idempotency_key!r} cannot also be a sink (no plan sets it)"
        if problem is not None:
            raise ToolRegistrationError(f"tool {tool_name!r}: {problem}")
        # Not required of a plan: the executor fills it before every call (pte._catalogue._idempotency).
        if idempotency_key in input_schema.get("required", ()):
            input_schema = dict(input_schema)
            input_schema["required"] = [k for k in input_schema["required"] if k != idempotency_key]

    if selection is not None:
        output_schema = _with_selection(tool_name, selection, provenance, input_schema, output_schema)
    doc = description if description is not None else inspect.getdoc(func) or ""
    # In declaration order: policy checks walk sinks in this order (and the first violation is
    # the one reported), so `describe` records it as a list, which canonical JSON keeps in order.
    sink_map = {
        param: frozenset([allowed] if isinstance(allowed, str) else allowed)
        for param, allowed in (sinks or {}).items()
    }
    for sink, allowed in sink_map.items():
        unknown = allowed - {"request", "trusted", "untrusted"}
        if unknown:
            raise ToolRegistrationError(
                f"tool {tool_name!r}: sink {sink!r} names unknown provenance {sorted(unknown)}"
            )
    return ToolSpec(
        name=tool_name,
        description=doc.strip(),
        func=func,
        input_schema=_freeze_schema(input_schema),
        output_schema=_freeze_schema(output_schema),
        effect=effect,
        timeout_s=float(timeout_s),
        idempotent=(effect == "read") if idempotent is None else bool(idempotent),
        provenance=provenance,
        sinks=MappingProxyType(sink_map),
        requires_approval=requires_approval,
        isolation=isolation,
        retries=retries,
        backoff_s=float(backoff_s),
        retry_on=tuple(retry_on),
        is_async=is_async,
        idempotency_key=idempotency_key,
        read_effects=bool(read_effects),
        _input_model=input_model,
        _input_validator=ExplainingValidator(input_schema),
        _output_validator=ExplainingValidator(output_schema),
        _fast_input=ecma_validator(input_schema),
        _fast_output=ecma_validator(output_schema),
    )


def _with_selection(
    tool_name: str,
    selection: Selection,
    provenance: OutputProvenance,
    input_schema: Mapping[str, Any],
    output_schema: dict[str, Any],
) -> dict[str, Any]:
    """The output schema carrying the selection (`pte._catalogue._selection`), once it is checked."""
    if not isinstance(selection, Selection):
        raise ToolRegistrationError(f"tool {tool_name!r}: selection must be a pte.catalogue.Selection")
    if provenance != "derived":
        raise ToolRegistrationError(
            f"tool {tool_name!r}: a selection describes how a derived tool's output is made of its "
            "inputs; declare provenance='derived'"
        )
    try:
        selection.check(tool_name, input_schema.get("properties") or {})
    except ValueError as exc:
        raise ToolRegistrationError(str(exc)) from None
    return {**output_schema, SELECTION_KEY: selection.to_json()}


#: The most retries a tool may declare (each is a further call of an idempotent tool).
MAX_RETRIES = 10


def _check_execution_options(
    name: str,
    func: Callable[..., Any],
    effect: Effect,
    idempotent: bool | None,
    is_async: bool,
    isolation: Any,
    retries: Any,
    backoff_s: Any,
    retry_on: tuple[Any, ...],
) -> None:
    """Refuse isolation and retry options that the executor could not honour."""
    if isolation not in ("thread", "process"):
        raise ToolRegistrationError(
            f"tool {name!r}: isolation must be 'thread' or 'process', not {isolation!r}"
        )
    if isolation == "process":
        if is_async:
            raise ToolRegistrationError(
                f"tool {name!r}: async tools are cancelled on timeout; isolation='process' is for plain ones"
            )
        qualname = getattr(func, "__qualname__", "")
        if getattr(func, "__module__", "__main__") == "__main__" or "<locals>" in qualname:
            raise ToolRegistrationError(
                f"tool {name!r}: isolation='process' needs a function defined at the top level of an "
                "importable module or tool pack file (the worker process imports it by name)"
            )
    if type(retries) is not int or not 0 <= retries <= MAX_RETRIES:
        raise ToolRegistrationError(f"tool {name!r}: retries must be an integer from 0 to {MAX_RETRIES}")
    if not (isinstance(backoff_s, (int, float)) and 0 <= backoff_s <= 60):
        raise ToolRegistrationError(f"tool {name!r}: backoff_s must be a number of seconds from 0 to 60")
    if not all(isinstance(t, type) and issubclass(t, BaseException) for t in retry_on):
        raise ToolRegistrationError(f"tool {name!r}: retry_on must list exception classes")
    if retries or retry_on:
        repeatable = (effect == "read") if idempotent is None else bool(idempotent)
        if not repeatable:
            raise ToolRegistrationError(
                f"tool {name!r}: only an idempotent tool may be retried (a retried non-idempotent "
                "write could take effect twice); declare idempotent=True if calling it twice is safe"
            )


@overload
def tool(func: _F, /) -> _F: ...
@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    effect: Effect = "read",
    timeout_s: float = 30.0,
    idempotent: bool | None = None,
    provenance: OutputProvenance = "trusted",
    sinks: Mapping[str, Iterable[str] | str] | None = None,
    requires_approval: bool = False,
    isolation: Isolation = "thread",
    retries: int = 0,
    backoff_s: float = 0.1,
    retry_on: Iterable[type[BaseException]] = (),
    idempotency_key: str | None = None,
    selection: Selection | None = None,
    read_effects: bool = False,
) -> Callable[[_F], _F]: ...
def tool(
    func: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    effect: Effect = "read",
    timeout_s: float = 30.0,
    idempotent: bool | None = None,
    provenance: OutputProvenance = "trusted",
    sinks: Mapping[str, Iterable[str] | str] | None = None,
    requires_approval: bool = False,
    isolation: Isolation = "thread",
    retries: int = 0,
    backoff_s: float = 0.1,
    retry_on: Iterable[type[BaseException]] = (),
    idempotency_key: str | None = None,
    selection: Selection | None = None,
    read_effects: bool = False,
) -> Any:
    """Declare a typed function as a PTE tool, bare (``@tool``) or with options (``@tool(effect="write")``).

    The function stays an ordinary function; its `ToolSpec` is attached as ``__pte_tool__``.

    - `name`: defaults to the function's name; `description`: defaults to its docstring.
    - `effect`: ``read`` (no side effects) or ``write``; `idempotent` defaults to True for reads.
    - `timeout_s`: the executor stops waiting after this long and fails the step.
    - `provenance`: whether the output is ``trusted``, ``untrusted`` (third-party text), or
      ``derived`` (the least trusted of the inputs: deterministic shaping tools).
    - `sinks`: parameter -> provenances it accepts (``request``, ``trusted``, ``untrusted``).
    - `requires_approval`: the tool runs only in a plan whose hash a person approved.
    - `isolation`: where a plain tool runs: ``thread`` (default; abandoned on timeout, it may
      still finish later) or ``process`` (a worker process, killed on timeout). An ``async def``
      tool runs on the executor's event loop and is cancelled on timeout.
    - `retries`, `backoff_s`, `retry_on`: retry a transient failure (`TransientError`, a
      timeout, or an exception of a `retry_on` type) up to `retries` times, waiting
      `backoff_s`, then twice as long each time. Idempotent tools only.
    - `idempotency_key`: a ``str`` parameter of a ``write`` tool that PTE fills with a key
      derived per call (run, plan, step, element); the tool must give two calls with the same
      key the effect of one. A plan cannot set it; resume re-calls an interrupted call with
      the same key instead of ending ``needs_review`` (see `pte._catalogue._idempotency`).
    - `selection`: for a ``derived`` tool that selects, orders, groups or aggregates: which
      output parts are copied from which inputs and which input fields decide
      (`pte.catalogue.Selection`), so each output field keeps its own labels plus the decision's
      instead of the union of every argument's (docs/generic-operations.md).
    - `read_effects`: a ``read`` whose call has effects (an HTTP GET that triggers something, a
      visit a third party sees): resume and ``replay --live`` never re-run it.

    Raises `ToolRegistrationError` when a parameter or the return value has no type hint,
    or a hint gives no JSON Schema.
    """

    def decorate(f: _F) -> _F:
        spec = _build_spec(
            f,
            name=name,
            description=description,
            effect=effect,
            timeout_s=timeout_s,
            idempotent=idempotent,
            provenance=provenance,
            sinks=sinks,
            requires_approval=requires_approval,
            isolation=isolation,
            retries=retries,
            backoff_s=backoff_s,
            retry_on=retry_on,
            idempotency_key=idempotency_key,
            selection=selection,
            read_effects=read_effects,
        )
        setattr(f, _TOOL_ATTR, spec)
        return f

    if func is not None:
        return decorate(func)
    return decorate
