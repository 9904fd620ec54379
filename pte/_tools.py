"""Tools: the `tool` decorator, `ToolSpec`, the `Registry` (the allow-list) and tool packs.

A tool is a typed Python function. Its input and output JSON Schemas come from its type
hints through pydantic, so the schema a plan is checked against is the one the function
really accepts. A registry holds the tools a run may call; nothing else can be called.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import inspect
import itertools
import json
import marshal
import sys
import types
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType, ModuleType
from typing import Any, Literal, TypeVar, overload

import jsonschema
import jsonschema_rs
import pydantic
from pydantic import BaseModel, ConfigDict, TypeAdapter, create_model
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import PydanticSerializationError, core_schema, to_jsonable_python

from pte import _generics
from pte._canonical import canonical_bytes
from pte._errors import ToolError, ToolPackError, ToolRegistrationError
from pte._generics import ExtendedBy, FieldName, FieldOf, PickOf, RegexGroups, RegexPattern
from pte._resources import data_dir

__all__ = [
    "STOCK_PACKS",
    "Effect",
    "ExtendedBy",
    "FieldName",
    "FieldOf",
    "Isolation",
    "OutputProvenance",
    "PickOf",
    "RegexGroups",
    "RegexPattern",
    "Registry",
    "ToolSpec",
    "load_pack",
    "load_registry",
    "tool",
]

Effect = Literal["read", "write"]
#: Where a plain (non-async) tool runs: a worker thread of the executor (abandoned on timeout)
#: or a worker process (killed on timeout). Async tools run on the executor's event loop.
Isolation = Literal["thread", "process"]
#: What a tool's output counts as: its own data (`trusted`), third-party text (`untrusted`),
#: or the least trusted of its inputs (`derived`, for deterministic shaping tools).
OutputProvenance = Literal["trusted", "untrusted", "derived"]
#: Provenances a sink parameter may accept: the request itself (planner literals), trusted tools,
#: untrusted tools.
SinkProvenance = Literal["request", "trusted", "untrusted"]

#: Stock tool packs shipped with PTE, by short name.
STOCK_PACKS = ("backoffice", "calculator", "shaping", "text", "extract", "dates", "containers")

_F = TypeVar("_F", bound=Callable[..., Any])
_TOOL_ATTR = "__pte_tool__"


@dataclass(frozen=True, eq=False)
class ToolSpec:
    """Everything PTE knows about one tool: identity, schemas, effect, limits and data-flow labels."""

    name: str
    description: str
    func: Callable[..., Any] = field(repr=False)
    input_schema: Mapping[str, Any] = field(repr=False)
    output_schema: Mapping[str, Any] = field(repr=False)
    effect: Effect = "read"
    timeout_s: float = 30.0
    idempotent: bool = True
    provenance: OutputProvenance = "trusted"
    #: Sink parameters: parameter name -> the provenances it accepts.
    sinks: Mapping[str, frozenset[str]] = field(default_factory=dict)
    requires_approval: bool = False
    #: Where a plain tool runs (see `Isolation`); ignored for async tools.
    isolation: Isolation = "thread"
    #: Extra attempts after a transient failure (idempotent tools only).
    retries: int = 0
    #: Wait before the first retry; doubled for each further one.
    backoff_s: float = 0.1
    #: Exception types that count as transient, besides `TransientError` and a timeout.
    retry_on: tuple[type[BaseException], ...] = ()
    #: Whether `func` is an ``async def`` function.
    is_async: bool = False
    _input_model: type[BaseModel] = field(repr=False, default=BaseModel)
    _input_validator: Any = field(repr=False, default=None)
    _output_validator: Any = field(repr=False, default=None)
    # Compiled (jsonschema-rs) twins of the validators above, for the hot paths; the pure-Python
    # ones only run to explain a failure with a precise message.
    _fast_input: Any = field(repr=False, default=None)
    _fast_output: Any = field(repr=False, default=None)
    #: The code hash recorded in an audit log, for a tool rebuilt by `from_record` (no code).
    _recorded_code_sha256: str | None = field(repr=False, default=None)

    @functools.cached_property
    def code_sha256(self) -> str:
        """SHA-256 of the tool's code: its source text, else its compiled code object.

        Approvals bind it (through the catalogue fingerprint), so that an approval reviewed
        against one implementation does not carry over to another tool with the same name.
        """
        if self._recorded_code_sha256 is not None:
            return self._recorded_code_sha256
        try:
            text = inspect.getsource(self.func).encode("utf-8")
        except (OSError, TypeError):
            code = getattr(self.func, "__code__", None)
            text = marshal.dumps(code) if code is not None else repr(self.func).encode("utf-8")
        return hashlib.sha256(text).hexdigest()

    @functools.cached_property
    def generic(self) -> bool:
        """True when the schemas hold type variables: each step's output type is inferred."""
        return _generics.has_markers(self.input_schema) or _generics.has_markers(self.output_schema)

    @functools.cached_property
    def _param_validators(self) -> dict[str, Any]:
        # One compiled validator per parameter: compile checks the literal arguments of a step
        # that also holds references one parameter at a time.
        defs = self.input_schema.get("$defs")
        out: dict[str, Any] = {}
        for name, schema in (self.input_schema.get("properties") or {}).items():
            whole = {**schema, "$defs": defs} if defs and isinstance(schema, Mapping) else schema
            out[name] = jsonschema_rs.validator_for(whole)
        return out

    def param_is_valid(self, name: str, value: Any) -> bool:
        """True if `value` is valid for parameter `name` (False for an unknown parameter)."""
        validator = self._param_validators.get(name)
        return validator is not None and bool(validator.is_valid(value))

    def args_error(self, args: Any) -> jsonschema.ValidationError | None:
        """The most relevant reason `args` is invalid against the input schema, or None."""
        if self._fast_input.is_valid(args):
            return None
        if isinstance(args, Mapping) and not is_small(args):
            # Too wide to explain cheaply (see `_explain`): name the parameter at fault.
            props = self.input_schema.get("properties") or {}
            for name, value in args.items():
                if name not in props and self.input_schema.get("additionalProperties") is False:
                    return jsonschema.ValidationError(f"unexpected parameter {name!r}", path=[name])
                if name in props and not self.param_is_valid(name, value):
                    message = f"{name} does not match its schema {_WIDE}"
                    return jsonschema.ValidationError(message, path=[name])
        return _explain(self._input_validator, self._fast_input, args)

    def validate_args(self, args: Mapping[str, Any]) -> None:
        """Raise ToolError('invalid_args') unless `args` is valid against the input schema."""
        error = self.args_error(args)
        if error is not None:
            raise ToolError("invalid_args", _format_error(error))

    def validate_output(self, output: Any) -> None:
        """Raise ToolError('invalid_output') unless `output` is valid against the output schema."""
        if self._fast_output.is_valid(output):
            return
        error = _explain(self._output_validator, self._fast_output, output)
        raise ToolError("invalid_output", _format_error(error))

    def invoke(self, args: Mapping[str, Any]) -> Any:
        """Call the (plain) function with already-validated JSON `args`; return its output as JSON data.

        Arguments are converted to the function's parameter types by pydantic (e.g. a
        numeric string to `Decimal`), and the return value to JSON (a `Decimal` to a string).
        """
        return self.to_output(self.func(**self.to_kwargs(args)))

    async def ainvoke(self, args: Mapping[str, Any]) -> Any:
        """`invoke` for an ``async def`` tool."""
        return self.to_output(await self.func(**self.to_kwargs(args)))

    def to_kwargs(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """JSON `args` converted to the function's parameter types."""
        try:
            model = self._input_model.model_validate(args)
        except pydantic.ValidationError as exc:
            raise ToolError("invalid_args", str(exc)) from None
        return {name: getattr(model, name) for name in self._param_names}

    @functools.cached_property
    def _param_names(self) -> tuple[str, ...]:
        # The function's parameters, once: asking the model class for its fields on every call
        # costs more than the call of a small tool.
        return tuple(self._input_model.model_fields)

    def to_output(self, result: Any) -> Any:
        """The function's return value as JSON data (ToolError('invalid_output') if it has none)."""
        try:
            output = to_jsonable_python(result)
            # What cannot be written to the audit log (NaN, a lone surrogate) fails the step,
            # not the log. (The log encodes the record again; a bare number or plain JSON is
            # settled by orjson here without the reference encoder.)
            canonical_bytes(output)
        except (PydanticSerializationError, ValueError, TypeError, RecursionError, UnicodeEncodeError) as exc:
            raise ToolError("invalid_output", f"output is not JSON-serialisable: {exc}") from None
        return output

    def describe(self) -> dict[str, Any]:
        """Everything about the tool except its code, for `run_started.tools`.

        It is enough to rebuild the tool for replay (`ToolSpec.from_record`): the log alone
        then re-drives compile with the same schemas the run was checked against.
        """
        return {
            "name": self.name,
            "description": self.description,
            "effect": self.effect,
            "idempotent": self.idempotent,
            "timeout_s": self.timeout_s,
            "provenance": self.provenance,
            "requires_approval": self.requires_approval,
            "sinks": [[param, sorted(allowed)] for param, allowed in self.sinks.items()],
            "input_schema": dict(self.input_schema),
            "output_schema": dict(self.output_schema),
            **({"code_sha256": self.code_sha256} if self.code_sha256 else {}),
            # Only when not the default, so that catalogues of plain tools read as before.
            **({"retries": self.retries, "backoff_s": self.backoff_s} if self.retries else {}),
            **({"isolation": self.isolation} if self.isolation != "thread" else {}),
            **({"is_async": True} if self.is_async else {}),
        }

    @classmethod
    def from_record(cls, entry: Mapping[str, Any]) -> ToolSpec:
        """A tool rebuilt from `describe()` output, for replay: same schemas, no code.

        Calling it raises `ToolError('not_recorded')`; replay serves recorded outputs instead.
        """
        name = str(entry["name"])

        def unavailable(**_: Any) -> Any:
            raise ToolError(
                "not_recorded", f"{name} has no code in replay; only recorded outputs can be served"
            )

        input_schema = dict(entry.get("input_schema") or {"type": "object"})
        output_schema = dict(entry.get("output_schema") or {})
        return cls(
            name=name,
            description=str(entry.get("description", "")),
            func=unavailable,
            input_schema=_freeze_schema(input_schema),
            output_schema=_freeze_schema(output_schema),
            effect=entry.get("effect", "read"),
            timeout_s=float(entry.get("timeout_s", 30.0)),
            idempotent=bool(entry.get("idempotent", True)),
            provenance=entry.get("provenance", "trusted"),
            sinks=MappingProxyType(
                {param: frozenset(allowed) for param, allowed in entry.get("sinks") or ()}
            ),
            requires_approval=bool(entry.get("requires_approval", False)),
            retries=int(entry.get("retries", 0)),
            backoff_s=float(entry.get("backoff_s", 0.1)),
            isolation=entry.get("isolation", "thread"),
            # Recorded so that the catalogue replays identically (no code runs in replay).
            is_async=entry.get("is_async") is True,
            _input_validator=jsonschema.Draft202012Validator(input_schema),
            _output_validator=jsonschema.Draft202012Validator(output_schema),
            _fast_input=jsonschema_rs.validator_for(input_schema),
            _fast_output=jsonschema_rs.validator_for(output_schema),
            # A log from before code hashes were recorded: no hash (describe() then omits it).
            _recorded_code_sha256=str(entry.get("code_sha256") or ""),
        )

    def catalogue_entry(self) -> dict[str, Any]:
        """What a planner is shown about this tool (schemas without pydantic's generated titles)."""
        entry: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "effect": self.effect,
            "input_schema": _generics.without_titles(self.input_schema),
            "output_schema": _generics.without_titles(self.output_schema),
        }
        if self.provenance == "untrusted":
            entry["output_provenance"] = "untrusted"
        if self.sinks:
            entry["guarded_parameters"] = {k: sorted(v) for k, v in self.sinks.items()}
        if self.requires_approval:
            entry["requires_approval"] = True
        return entry


def is_small(value: Any, most: int = 1000) -> bool:
    """Whether `value` holds at most `most` JSON values (a walk that stops as soon as it knows)."""
    todo = [value]
    seen = 0
    while todo:
        seen += 1
        if seen > most:
            return False
        item = todo.pop()
        if isinstance(item, dict):
            todo.extend(item.values())
        elif isinstance(item, list):
            todo.extend(item)
    return True


def _explain(slow: Any, fast: Any, instance: Any) -> jsonschema.ValidationError:
    # The pure-Python validator explains best, but its anyOf gathers every sub-error of every
    # branch: on a wide instance (thousands of values) that costs seconds, so a hostile plan
    # would be slow to reject. Those get a plain message (the compiled validator is no help:
    # its first error renders the whole instance and its anyOf context, as slowly).
    if not is_small(instance):
        return jsonschema.ValidationError(f"the value does not match the schema {_WIDE}")
    errors = itertools.islice(slow.iter_errors(instance), 32)
    error: jsonschema.ValidationError | None = jsonschema.exceptions.best_match(errors)
    if error is None:  # the validators disagree; report the compiled one's finding
        first = next(iter(fast.iter_errors(instance)))
        return jsonschema.ValidationError(first.message, path=list(first.instance_path))
    return error


#: Why a wide value's mismatch is not explained in detail.
_WIDE = "(it holds over 1,000 values: too many to explain in detail)"


#: A decimal number written as a string (no exponent), as pydantic 2.13 and earlier declared it.
DECIMAL_STRING_PATTERN = r"^(?!^[-+.]*$)[+-]?0*\d*\.?\d*$"


class _JsonSchema(GenerateJsonSchema):
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
    what lets compile infer each step's concrete types (see `pte._generics`).
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


def _format_error(error: jsonschema.ValidationError) -> str:
    where = "".join(f"[{p!r}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
    return f"{where.lstrip('.') or '(root)'}: {error.message}"


def _freeze_schema(schema: dict[str, Any]) -> Mapping[str, Any]:
    # A JSON round trip drops any aliasing with pydantic's own objects; callers get a read-only view.
    copy: dict[str, Any] = json.loads(json.dumps(schema))
    return MappingProxyType(copy)


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
    is_async = inspect.iscoroutinefunction(func)
    _check_execution_options(
        tool_name, func, effect, idempotent, is_async, isolation, retries, backoff_s, tuple(retry_on)
    )
    from pte._plan import TOOL_NAME_RE  # local: plan imports nothing from here, keep it that way

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
        input_schema = input_model.model_json_schema(mode="validation", schema_generator=_JsonSchema)
        output_schema = TypeAdapter(_mark_type_vars(hints["return"])).json_schema(
            mode="serialization", schema_generator=_JsonSchema
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
        _input_model=input_model,
        _input_validator=jsonschema.Draft202012Validator(input_schema),
        _output_validator=jsonschema.Draft202012Validator(output_schema),
        _fast_input=jsonschema_rs.validator_for(input_schema),
        _fast_output=jsonschema_rs.validator_for(output_schema),
    )


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
        )
        setattr(f, _TOOL_ATTR, spec)
        return f

    if func is not None:
        return decorate(func)
    return decorate


def spec_of(obj: Any) -> ToolSpec:
    """The `ToolSpec` of a decorated function, or the spec itself."""
    if isinstance(obj, ToolSpec):
        return obj
    spec = getattr(obj, _TOOL_ATTR, None)
    if not isinstance(spec, ToolSpec):
        raise ToolRegistrationError(f"{obj!r} is not a PTE tool (decorate it with @pte.tool)")
    return spec


class Registry:
    """The tools a run may call, by name. The registry *is* the allow-list."""

    def __init__(self, tools: Iterable[ToolSpec | Callable[..., Any]] = ()) -> None:
        self._tools: dict[str, ToolSpec] = {}
        for item in tools:
            self.register(item)

    def register(self, item: ToolSpec | Callable[..., Any]) -> ToolSpec:
        """Add a tool (a decorated function or a `ToolSpec`); a second tool of the same name is refused."""
        spec = spec_of(item)
        existing = self._tools.get(spec.name)
        if existing is not None and existing.func is not spec.func:
            raise ToolRegistrationError(f"two different tools are named {spec.name!r}")
        self._tools[spec.name] = spec
        return spec

    def get(self, name: str) -> ToolSpec | None:
        return self._tools.get(name)

    def __getitem__(self, name: str) -> ToolSpec:
        return self._tools[name]

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[ToolSpec]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def allow(self, names: Iterable[str]) -> Registry:
        """A narrower registry with only `names` (each must exist here)."""
        wanted = list(dict.fromkeys(names))
        unknown = [n for n in wanted if n not in self._tools]
        if unknown:
            raise ToolPackError(f"cannot allow unknown tool(s) {unknown}; the packs define {self.names}")
        return Registry(self._tools[n] for n in wanted)

    def deny(self, names: Iterable[str]) -> Registry:
        """A narrower registry without `names` (each must exist here: a typo must not go unnoticed)."""
        banned = set(names)
        unknown = sorted(banned - set(self._tools))
        if unknown:
            raise ToolPackError(f"cannot deny unknown tool(s) {unknown}; the packs define {self.names}")
        return Registry(t for t in self._tools.values() if t.name not in banned)

    def merged(self, other: Registry) -> Registry:
        """A registry with the tools of both (names must not clash)."""
        return Registry([*self, *other])

    def describe(self) -> list[dict[str, Any]]:
        """JSON summaries of every tool (for `run_started`)."""
        return [t.describe() for t in self]

    def catalogue(self) -> list[dict[str, Any]]:
        """What the planner is shown: names, descriptions, schemas, effects."""
        return [t.catalogue_entry() for t in self]

    @classmethod
    def from_module(cls, module: ModuleType) -> Registry:
        """Every decorated tool defined at the top level of `module`, in definition order."""
        registry = cls()
        for value in vars(module).values():
            spec = getattr(value, _TOOL_ATTR, None)
            if isinstance(spec, ToolSpec):
                registry.register(spec)
        return registry


def _import_path(path: Path) -> ModuleType:
    module_name = f"pte_pack_{path.stem}_{abs(hash(str(path.resolve())))}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ToolPackError(f"cannot load tool pack {str(path)!r}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except ToolRegistrationError:
        del sys.modules[module_name]
        raise
    except Exception as exc:
        del sys.modules[module_name]
        raise ToolPackError(f"tool pack {str(path)!r} failed to import: {type(exc).__name__}: {exc}") from exc
    return module


def load_pack(ref: str | Path | ModuleType) -> Registry:
    """Load one tool pack: a stock pack name, a ``.py`` file path, an installed pack (entry point
    group ``pte.tool_packs``, see `pte._packs`), or an importable module name."""
    if isinstance(ref, ModuleType):
        module = ref
    else:
        text = str(ref)
        if text in STOCK_PACKS:
            module = _import_path(data_dir("tools") / f"{text}.py")
        elif text.endswith(".py") or "/" in text or Path(text).exists():
            path = Path(text)
            if not path.is_file():
                raise ToolPackError(f"tool pack file {text!r} does not exist")
            module = _import_path(path)
        else:
            from pte._packs import entry_point_pack  # local: _packs imports this module

            installed = entry_point_pack(text)
            if installed is not None:
                return installed
            try:
                module = importlib.import_module(text)
            except ImportError as exc:
                raise ToolPackError(
                    f"tool pack {text!r} is neither a stock pack {list(STOCK_PACKS)}, a .py file, "
                    f"nor an importable module ({exc})"
                ) from None
    registry = Registry.from_module(module)
    if not len(registry):
        raise ToolPackError(f"tool pack {getattr(module, '__name__', ref)!r} defines no @pte.tool functions")
    return registry


def load_registry(
    packs: Iterable[str | Path | ModuleType],
    *,
    allow: Iterable[str] | None = None,
    manifest: str | Path | None = None,
) -> Registry:
    """Load and merge tool packs, then narrow them by `allow` and/or a manifest file.

    A manifest is a JSON file ``{"allow": [...], "deny": [...]}`` (schemas/tool-manifest.schema.json).
    """
    registry = Registry()
    for pack in packs:
        for spec in load_pack(pack):
            registry.register(spec)
    if manifest is not None:
        registry = _apply_manifest(registry, Path(manifest))
    if allow is not None:
        registry = registry.allow(allow)
    return registry


def _apply_manifest(registry: Registry, path: Path) -> Registry:
    from pte import _json as strict_json
    from pte._resources import load_schema

    try:
        doc = strict_json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ToolPackError(f"cannot read tool manifest {str(path)!r}: {exc}") from None
    error = jsonschema.exceptions.best_match(
        jsonschema.Draft202012Validator(load_schema("tool-manifest.schema.json")).iter_errors(doc)
    )
    if error is not None:
        raise ToolPackError(f"tool manifest {str(path)!r} is invalid: {_format_error(error)}")
    if "allow" in doc:
        registry = registry.allow(doc["allow"])
    return registry.deny(doc.get("deny", ()))
