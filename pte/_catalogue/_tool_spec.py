"""`ToolSpec`: everything PTE knows about one tool, and how its arguments and output are checked.

Separate from `_tool_decorator` (which builds specs from type hints) and `_registry` (which
collects them): the executor, the compiler, policies and replay all work with a `ToolSpec`,
and most of them need neither pydantic's schema generation nor pack loading.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import itertools
import json
import marshal
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

import jsonschema
import pydantic
from pydantic import BaseModel
from pydantic_core import PydanticSerializationError, to_jsonable_python

import pte._catalogue._generics as _generics
from pte._audit import current_tool_entry
from pte._catalogue._idempotency import without_key
from pte._catalogue._selection import SELECTION_KEY, Selection
from pte._core import ExplainingValidator, ToolError, ToolRegistrationError, canonical_bytes, ecma_validator

__all__ = [
    "Effect",
    "Isolation",
    "OutputProvenance",
    "SinkProvenance",
    "ToolSpec",
    "is_small",
    "spec_of",
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


#: A tool's name: what a plan step's ``tool`` names (pte._plan._model checks steps against it).
TOOL_NAME_RE = re.compile(r"[A-Za-z][A-Za-z0-9_.\-]{0,63}")

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
    #: The parameter PTE fills with a per-call idempotency key (`pte._catalogue._idempotency`), or None.
    idempotency_key: str | None = None
    #: A ``read`` that has effects (an HTTP GET that triggers something, a visit a third
    #: party sees): resume and ``replay --live`` never re-run it (pte._run._exposure docs).
    read_effects: bool = False
    #: Where third-party text the deployment did not replace remains in the description or
    #: schemas of an imported tool (pte.importers): shown to a planner, it exposes the plan.
    third_party_text: tuple[str, ...] = ()
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
    def selection(self) -> Selection | None:
        """How the output is made of the inputs, for precise labels (`_selection`); None if undeclared."""
        return Selection.of_schema(self.output_schema) if self.provenance == "derived" else None

    @functools.cached_property
    def _param_validators(self) -> dict[str, Any]:
        # One compiled validator per parameter: compile checks the literal arguments of a step
        # that also holds references one parameter at a time.
        defs = self.input_schema.get("$defs")
        out: dict[str, Any] = {}
        for name, schema in (self.input_schema.get("properties") or {}).items():
            whole = {**schema, "$defs": defs} if defs and isinstance(schema, Mapping) else schema
            out[name] = ecma_validator(whole)
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
            # The model's own validator (what `model_validate` calls, without its wrapper's
            # option checks: half the cost of a small tool's call, #37). A model validated
            # from a dict holds each field's value under the field's (the parameter's) name
            # in its ``__dict__`` (the model forbids extra keys; defaults are filled in).
            model = self._input_model.__pydantic_validator__.validate_python(args)
        except pydantic.ValidationError as exc:
            raise ToolError("invalid_args", str(exc)) from None
        return dict(model.__dict__)

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
            **({"idempotency_key": self.idempotency_key} if self.idempotency_key else {}),
            **({"read_effects": True} if self.read_effects else {}),
            **({"third_party_text": list(self.third_party_text)} if self.third_party_text else {}),
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

        entry = current_tool_entry(entry)  # what a field an earlier describe() lacks means
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
            retries=int(entry["retries"]),
            backoff_s=float(entry["backoff_s"]),
            isolation=entry["isolation"],
            # Recorded so that the catalogue replays identically (no code runs in replay).
            is_async=entry["is_async"] is True,
            idempotency_key=str(entry["idempotency_key"]) if entry["idempotency_key"] else None,
            read_effects=entry["read_effects"] is True,
            third_party_text=tuple(str(where) for where in entry["third_party_text"] or ()),
            _input_validator=ExplainingValidator(input_schema),
            _output_validator=ExplainingValidator(output_schema),
            _fast_input=ecma_validator(input_schema),
            _fast_output=ecma_validator(output_schema),
            # "": no hash recorded; describe() then omits it.
            _recorded_code_sha256=str(entry["code_sha256"] or ""),
        )

    @functools.cached_property
    def planner_input_schema(self) -> Mapping[str, Any]:
        """The input schema a plan's arguments may use: without the idempotency key, which PTE fills."""
        if self.idempotency_key is None:
            return self.input_schema
        return without_key(self.input_schema, self.idempotency_key)

    @functools.cached_property
    def planner_output_schema(self) -> Mapping[str, Any]:
        """The output schema a planner is shown: without the selection declaration (`_selection`),
        which the policy reads and a plan has no use for."""
        if SELECTION_KEY not in self.output_schema:
            return self.output_schema
        return MappingProxyType({k: v for k, v in self.output_schema.items() if k != SELECTION_KEY})

    def catalogue_entry(self) -> dict[str, Any]:
        """What a planner is shown about this tool (schemas without pydantic's generated titles)."""
        entry: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "effect": self.effect,
            "input_schema": _generics.without_titles(self.planner_input_schema),
            "output_schema": _generics.without_titles(self.planner_output_schema),
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


def _format_error(error: jsonschema.ValidationError) -> str:
    where = "".join(f"[{p!r}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
    return f"{where.lstrip('.') or '(root)'}: {error.message}"


def _freeze_schema(schema: dict[str, Any]) -> Mapping[str, Any]:
    # A JSON round trip drops any aliasing with pydantic's own objects; callers get a read-only view.
    copy: dict[str, Any] = json.loads(json.dumps(schema))
    return MappingProxyType(copy)


def spec_of(obj: Any) -> ToolSpec:
    """The `ToolSpec` of a decorated function, or the spec itself."""
    if isinstance(obj, ToolSpec):
        return obj
    spec = getattr(obj, _TOOL_ATTR, None)
    if not isinstance(spec, ToolSpec):
        raise ToolRegistrationError(f"{obj!r} is not a PTE tool (decorate it with @pte.tool)")
    return spec
