"""Tools from JSON Schemas: a name, a description, an input and an output schema and a callable.

`tool_from_schema` is how a catalogue that exists only as schemas (an MCP server, an
OpenAPI document, a LangChain tool, a JSON catalogue of another agent framework) becomes
PTE tools without synthesising Python signatures. The schemas are the contract: the
compiler type-checks plans against them exactly as it does for decorated functions, and
the executor validates every argument object and every output against them.

The callable takes the arguments as one JSON object (a dict), because a schema's property
names need not be Python identifiers (``from``, ``x-request-id``). It may be ``async def``.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import inspect
import json
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import jsonschema
from pydantic_core import PydanticSerializationError, to_jsonable_python

from pte._catalogue._tool_spec import TOOL_NAME_RE, Effect, OutputProvenance, ToolSpec
from pte._core import ExplainingValidator, ToolError, ToolRegistrationError, canonical_json, ecma_validator

__all__ = ["SchemaTool", "tool_from_schema"]

#: The callable behind a schema tool: the arguments object in, JSON-able data (or an awaitable of it) out.
SchemaFunction = Callable[[dict[str, Any]], Any]

_PROVENANCES = ("trusted", "untrusted", "derived")
_SINK_PROVENANCES = frozenset({"request", "trusted", "untrusted"})
#: Schema keywords that point elsewhere; only same-document pointers ("#...") are allowed.
_REF_KEYWORDS = ("$ref", "$dynamicRef")


@dataclass(frozen=True, eq=False)
class SchemaTool(ToolSpec):
    """A `ToolSpec` whose function takes the validated arguments as one dict (see `tool_from_schema`)."""

    #: What the function runs besides its own code (canonical JSON; `tool_from_schema`'s `runs`).
    runs_json: str | None = field(repr=False, default=None)

    @functools.cached_property
    def code_sha256(self) -> str:
        """SHA-256 of the function's code and of what it runs (`runs`).

        An importer's functions are one closure for every tool it makes: without `runs`, an
        MCP tool, another server's tool of the same name and an OpenAPI operation would all
        hash alike, and an approval would not bind what actually runs.
        """
        code = ToolSpec.code_sha256.func(self)  # type: ignore[attr-defined]
        if self._recorded_code_sha256 is not None or self.runs_json is None:
            return str(code)
        text = canonical_json({"function": code, "runs": json.loads(self.runs_json)})
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def invoke(self, args: Mapping[str, Any]) -> Any:
        """Call the function with already-validated `args`; an async function is run to completion.

        The function gets `args` itself, as a `pte.tool`'s gets its values: what it may change is
        the caller's. The executor hands each call (each attempt) its own copy, so nothing a tool
        does to its arguments reaches the plan, an earlier output or the recorded arguments.
        """
        result = self.func(self.to_kwargs(args))
        if inspect.isawaitable(result):
            result = _run_sync(result)
        return _to_output(result)

    async def ainvoke(self, args: Mapping[str, Any]) -> Any:
        """`invoke` for callers that are already on an event loop."""
        result = self.func(self.to_kwargs(args))
        if inspect.isawaitable(result):
            result = await result
        return _to_output(result)

    def to_kwargs(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """The arguments as the function takes them: one dict (`args` itself when it is one),
        passed positionally by `invoke`."""
        return args if type(args) is dict else dict(args)


def _run_sync(awaitable: Awaitable[Any]) -> Any:
    async def wait() -> Any:
        return await awaitable

    return asyncio.run(wait())


def _to_output(result: Any) -> Any:
    try:
        output = to_jsonable_python(result)
        canonical_json(output).encode("utf-8")
    except (PydanticSerializationError, ValueError, TypeError, RecursionError, UnicodeEncodeError) as exc:
        raise ToolError("invalid_output", f"output is not JSON-serialisable: {exc}") from None
    return output


def _foreign_refs(schema: Any) -> list[str]:
    """Every ``$ref``/``$dynamicRef`` in `schema` that is not a same-document pointer."""
    found: list[str] = []
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                if key in _REF_KEYWORDS and not (isinstance(value, str) and value.startswith("#")):
                    found.append(str(value))
                elif isinstance(value, dict | list):
                    stack.append(value)
        elif isinstance(node, list):
            stack.extend(item for item in node if isinstance(item, dict | list))
    return found


def _checked_schema(tool_name: str, which: str, schema: Any) -> dict[str, Any]:
    if isinstance(schema, bool) or not isinstance(schema, Mapping):
        raise ToolRegistrationError(
            f"tool {tool_name!r}: the {which} schema must be a JSON Schema object, "
            f"not {type(schema).__name__}"
        )
    try:
        copy: dict[str, Any] = json.loads(json.dumps(dict(schema), allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise ToolRegistrationError(f"tool {tool_name!r}: the {which} schema is not JSON: {exc}") from None
    foreign = _foreign_refs(copy)
    if foreign:
        # A remote $ref would make validation depend on a server PTE does not control (and fetch it).
        raise ToolRegistrationError(
            f"tool {tool_name!r}: the {which} schema refers outside itself ({foreign[0]!r}); "
            "inline the referenced schema or put it under $defs"
        )
    try:
        jsonschema.Draft202012Validator.check_schema(copy)
    except jsonschema.SchemaError as exc:
        raise ToolRegistrationError(
            f"tool {tool_name!r}: the {which} schema is not a valid JSON Schema: {exc.message}"
        ) from None
    return copy


def _compiled(tool_name: str, which: str, schema: Mapping[str, Any]) -> Any:
    """The compiled validator of a checked schema; a pattern it cannot read (``a{,3}``, which
    Python's `re` takes) is a registration error naming the tool, as an importer reports it."""
    try:
        return ecma_validator(schema)
    except ValueError as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ToolRegistrationError(
            f"tool {tool_name!r}: the {which} schema cannot be compiled: {reason}"
        ) from None


def tool_from_schema(
    name: str,
    *,
    description: str,
    input_schema: Mapping[str, Any],
    output_schema: Mapping[str, Any],
    func: SchemaFunction,
    effect: Effect = "read",
    timeout_s: float = 30.0,
    idempotent: bool | None = None,
    provenance: OutputProvenance = "trusted",
    sinks: Mapping[str, Iterable[str] | str] | None = None,
    requires_approval: bool = False,
    runs: Mapping[str, Any] | None = None,
    read_effects: bool = False,
    third_party_text: Iterable[str] = (),
) -> SchemaTool:
    """A tool from its JSON Schemas and a callable, for catalogues that have no Python signatures.

    - `input_schema`: a JSON Schema (draft 2020-12) of ``"type": "object"``: plans pass one
      arguments object, checked against it at compile time and again before each call.
    - `output_schema`: what the tool returns; plans reference into it (``{"$ref": "step/field"}``)
      with types checked at compile time, and every output is validated against it.
    - `func(args)`: takes the arguments as one dict and returns JSON data (or an awaitable of it).
    - `effect`, `timeout_s`, `idempotent`, `provenance`, `sinks`, `requires_approval`: as for `pte.tool`;
      `sinks` name properties of the input schema.
    - `runs`: JSON data naming what `func` runs besides its own code (an importer's server
      command, spec and operation, its version): part of `code_sha256`, so that an approval,
      which binds the code hash, binds what actually runs.
    - `read_effects`: a ``read`` with effects, never re-run by resume or ``replay --live``.
    - `third_party_text`: where text from an outside catalogue remains in `description` and
      the schemas (importers set it): a planner shown it writes an exposed plan (pte._run._exposure).

    Raises `ToolRegistrationError` for a bad name, a schema that is not valid JSON Schema, an
    input schema that is not an object, a ``$ref`` to another document, or a sink that is not
    an input property.
    """
    if not isinstance(name, str) or not TOOL_NAME_RE.fullmatch(name):
        raise ToolRegistrationError(f"tool name {name!r} must match ^[A-Za-z][A-Za-z0-9_.-]{{0,63}}$")
    if not callable(func):
        raise ToolRegistrationError(f"tool {name!r}: func must be callable, not {type(func).__name__}")
    if not isinstance(description, str):
        raise ToolRegistrationError(f"tool {name!r}: description must be a string")
    if effect not in ("read", "write"):
        raise ToolRegistrationError(f"tool {name!r}: effect must be 'read' or 'write', not {effect!r}")
    if provenance not in _PROVENANCES:
        raise ToolRegistrationError(
            f"tool {name!r}: provenance must be 'trusted', 'untrusted' or 'derived', not {provenance!r}"
        )
    if isinstance(timeout_s, bool) or not (isinstance(timeout_s, int | float) and timeout_s > 0):
        raise ToolRegistrationError(f"tool {name!r}: timeout_s must be a positive number")
    inputs = _checked_schema(name, "input", input_schema)
    outputs = _checked_schema(name, "output", output_schema)
    if inputs.get("type") != "object":
        raise ToolRegistrationError(
            f'tool {name!r}: the input schema must have "type": "object" (a plan passes one arguments '
            'object); wrap a single value as {"type": "object", "properties": {"value": ...}}'
        )
    properties = inputs.get("properties") or {}
    sink_map: dict[str, frozenset[str]] = {}
    for param, allowed in (sinks or {}).items():
        if param not in properties:
            raise ToolRegistrationError(
                f"tool {name!r}: sink {param!r} is not a property of the input schema"
            )
        labels = frozenset([allowed] if isinstance(allowed, str) else allowed)
        unknown = labels - _SINK_PROVENANCES
        if unknown:
            raise ToolRegistrationError(
                f"tool {name!r}: sink {param!r} names unknown provenance {sorted(unknown)}"
            )
        sink_map[param] = labels
    return SchemaTool(
        name=name,
        description=description.strip(),
        func=func,
        input_schema=MappingProxyType(inputs),
        output_schema=MappingProxyType(outputs),
        effect=effect,
        timeout_s=float(timeout_s),
        idempotent=(effect == "read") if idempotent is None else bool(idempotent),
        provenance=provenance,
        sinks=MappingProxyType(sink_map),
        requires_approval=bool(requires_approval),
        read_effects=bool(read_effects),
        third_party_text=tuple(third_party_text),
        _input_validator=ExplainingValidator(inputs),
        _output_validator=ExplainingValidator(outputs),
        _fast_input=_compiled(name, "input", inputs),
        _fast_output=_compiled(name, "output", outputs),
        is_async=inspect.iscoroutinefunction(func),
        runs_json=_runs_json(name, runs),
    )


def _runs_json(tool_name: str, runs: Mapping[str, Any] | None) -> str | None:
    if runs is None:
        return None
    try:
        return canonical_json(dict(runs))
    except (TypeError, ValueError) as exc:
        raise ToolRegistrationError(f"tool {tool_name!r}: runs must be JSON data: {exc}") from None
