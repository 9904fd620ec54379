"""The catalogue as the plan generators see it: which tools they can call and what each outputs.

`_check_supported` decides whether the generator can satisfy a tool's input schema (the
subset pydantic emits); `_Catalogue` holds, per tool, the pointers into its output that
provably exist (to wire references) or provably cannot (for ``bad_reference``), and caches
which of them fit a given parameter's type.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta, timezone
from typing import Any

import jsonschema
from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from pte._catalogue import Registry, ToolSpec
from pte._catalogue import schema_types as types
from pte.testing._strategies.base import (
    Tokens,
    _thaw,
)

# --- which schemas the generator can satisfy ------------------------------------------------------

_ANNOTATIONS = frozenset(
    {
        "title",
        "description",
        "default",
        "examples",
        "$comment",
        "deprecated",
        "readOnly",
        "writeOnly",
        "discriminator",
    }
)
_KEYWORDS = frozenset(
    {
        "$ref",
        "$defs",
        "$schema",
        "type",
        "anyOf",
        "oneOf",
        "enum",
        "const",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "prefixItems",
        "minItems",
        "maxItems",
        "uniqueItems",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minLength",
        "maxLength",
        "pattern",
        "format",
    }
)
_FORMATS: dict[str, SearchStrategy[str]] = {
    "date": st.dates(date(1900, 1, 1), date(2999, 12, 31)).map(date.isoformat),
    "date-time": st.datetimes(
        datetime(1970, 1, 1),
        datetime(2999, 12, 31),
        timezones=st.sampled_from([UTC, timezone(timedelta(hours=2))]),
    ).map(datetime.isoformat),
    "time": st.times().map(lambda t: t.isoformat()),
    "uuid": st.uuids().map(str),
    "email": st.sampled_from(["ap@example.com", "a.b+c@example.org", "billing@initech.example"]),
    "uri": st.sampled_from(["https://example.com/", "https://example.org/a?b=1", "http://localhost:8080/x"]),
    "duration": st.sampled_from(["PT1H", "P1D", "PT0.5S", "P2W"]),
}


class _Unsupported(Exception):
    """A schema uses something the generator cannot satisfy."""


def _check_supported(schema: Any, root: Mapping[str, Any], seen: set[str]) -> None:
    if isinstance(schema, bool):
        if schema is False:
            raise _Unsupported("false schema")
        return
    if not isinstance(schema, Mapping):
        raise _Unsupported(f"not a schema: {schema!r}")
    unknown = set(schema) - _KEYWORDS - _ANNOTATIONS
    if unknown:
        raise _Unsupported(f"keywords {sorted(unknown)}")
    if "$ref" in schema:
        ref = schema["$ref"]
        if not isinstance(ref, str) or not ref.startswith("#/"):
            raise _Unsupported(f"remote $ref {ref!r}")
        if ref not in seen:
            seen.add(ref)
            _check_supported(types.deref({"$ref": ref}, root), root, seen)
    if "format" in schema and schema["format"] not in _FORMATS and "pattern" not in schema:
        raise _Unsupported(f"format {schema['format']!r}")
    if "multipleOf" in schema and not (isinstance(schema["multipleOf"], int) and schema["multipleOf"] > 0):
        raise _Unsupported("non-integer multipleOf")
    if "pattern" in schema:
        try:
            re.compile(schema["pattern"])
        except re.error as exc:
            raise _Unsupported(f"pattern: {exc}") from None
    for key in ("anyOf", "oneOf", "prefixItems"):
        for sub in schema.get(key, ()):
            _check_supported(sub, root, seen)
    for sub in schema.get("properties", {}).values():
        _check_supported(sub, root, seen)
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), Mapping):
            _check_supported(schema[key], root, seen)
    extra = schema.get("additionalProperties", True)
    missing = set(schema.get("required", ())) - set(schema.get("properties", {}))
    if missing and extra is False:
        raise _Unsupported(f"required {sorted(missing)} cannot be present")


# --- the catalogue seen by the generator ---------------------------------------------------------


def _output_pointers(schema: Mapping[str, Any]) -> list[tuple[Tokens, types.Schema]]:
    """Pointers into a tool's output that provably exist, with the schema each selects."""
    found: dict[Tokens, None] = {(): None}

    def walk(node: Any, tokens: Tokens, depth: int) -> None:
        if depth > 4 or len(found) > 64:
            return
        node = types.deref(node, schema)
        if not isinstance(node, Mapping):
            return
        for key in ("anyOf", "oneOf"):
            for branch in node.get(key, ()):
                walk(branch, tokens, depth + 1)
        children: list[tuple[str, Any]] = list(node.get("properties", {}).items())
        if isinstance(node.get("additionalProperties"), Mapping):
            children += [("C001", node["additionalProperties"]), ("a/b~c", node["additionalProperties"])]
        for index, sub in enumerate(node.get("prefixItems", ())):
            children.append((str(index), sub))
        if isinstance(node.get("items"), Mapping):
            children += [("0", node["items"]), ("3", node["items"])]
        for token, sub in children:
            found[(*tokens, token)] = None
            walk(sub, (*tokens, token), depth + 1)

    walk(schema, (), 0)
    out = []
    for tokens in found:
        selected = types.select(schema, schema, tokens)
        if selected is not None:
            out.append((tokens, selected))
    return out


_NO_SUCH_TOKENS: list[Tokens] = [
    ("no_such_field",),
    ("-",),
    ("01",),
    ("0", "zz"),
    ("", ""),
    ("x", "y", "z"),
    ("999",),
]


def _missing_pointers(schema: Mapping[str, Any], pointers: list[tuple[Tokens, types.Schema]]) -> list[Tokens]:
    """Pointers into a tool's output that `select` proves cannot exist."""
    out: dict[Tokens, None] = {}
    for tokens, _ in pointers[:8]:
        for extra in _NO_SUCH_TOKENS:
            if types.select(schema, schema, tokens + extra) is None:
                out[tokens + extra] = None
    return list(out)


@dataclass
class _Tool:
    spec: ToolSpec
    root: Mapping[str, Any]
    pointers: list[tuple[Tokens, types.Schema]]
    usable: bool
    validator: jsonschema.Draft202012Validator
    #: Pointers the output provably cannot have (for bad_reference plans).
    bad_pointers: list[Tokens] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.spec.name


@dataclass
class _Catalogue:
    """Per-registry facts the generators need, computed once per strategy."""

    registry: Registry
    tools: dict[str, _Tool] = field(default_factory=dict)
    # (producer, id(location schema)) -> (the schema, kept alive so its id stays unique; fitting; non-fitting)
    _fits: dict[tuple[str, int], tuple[Any, list[Tokens], list[Tokens]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for spec in self.registry:
            inputs = spec.planner_input_schema  # what a plan may set (no idempotency key)
            try:
                _check_supported(inputs, inputs, set())
                schema = types.deref(inputs, inputs)
                usable = isinstance(schema, Mapping) and "object" in types.types_of(schema, inputs)
                # A generic tool's argument types depend on its inputs: `data_plans` generates those.
                usable = usable and not spec.generic
            except _Unsupported:
                usable = False
            pointers = _output_pointers(spec.output_schema)
            self.tools[spec.name] = _Tool(
                spec=spec,
                root=inputs,
                pointers=pointers,
                usable=usable,
                validator=jsonschema.Draft202012Validator(_thaw(inputs)),
                bad_pointers=_missing_pointers(spec.output_schema, pointers),
            )

    @property
    def usable(self) -> list[_Tool]:
        return [t for t in self.tools.values() if t.usable]

    def wiring(
        self, producer: _Tool, location: types.Schema, root: Mapping[str, Any]
    ) -> tuple[list[Tokens], list[Tokens]]:
        """(pointers of `producer` whose type fits `location`, pointers whose type does not)."""
        key = (producer.name, id(location))
        hit = self._fits.get(key)
        if hit is not None and hit[0] is location:
            return hit[1], hit[2]
        good: list[Tokens] = []
        bad: list[Tokens] = []
        for tokens, selected in producer.pointers:
            fits = types.assignable(selected, producer.spec.output_schema, location, root)
            (good if fits else bad).append(tokens)
        self._fits[key] = (location, good, bad)
        return good, bad


def _catalogue_for(registry: Registry) -> _Catalogue:
    catalogue = _Catalogue(registry)
    if not catalogue.usable:
        raise ValueError(
            "no tool in the registry has an input schema the plan generator can satisfy "
            f"(tools: {registry.names or 'none'})"
        )
    return catalogue
