"""Defects against the catalogue: ``tool_not_allowed``, ``invalid_args`` and ``policy_violation``.

A tool the registry does not hold; arguments its input schema refuses (wrong type, out of
range, missing, unexpected, a reference whose output type does not fit); an untrusted
output wired into a parameter whose declared sink refuses untrusted data.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jsonschema
from hypothesis import strategies as st
from hypothesis.strategies import DrawFn

from pte._catalogue import TOOL_NAME_RE
from pte._catalogue import schema_types as types
from pte._plan import Limits
from pte.testing._strategies.base import (
    Doc,
    Json,
    Tokens,
    _choice,
    _copy,
    _draw_plain,
    _fresh,
    _ref,
    _thaw,
)
from pte.testing._strategies.catalogue import (
    _Catalogue,
    _Tool,
)
from pte.testing._strategies.edits import (
    _dependents,
    _locations,
    _new_key,
    _set,
    _step_deps,
)
from pte.testing._strategies.valid import _Drawn
from pte.testing._strategies.values import _draw_value, _pattern_strings, _Wiring

# tool_not_allowed --------------------------------------------------------------------------------

_FOREIGN_TOOL_NAMES = [
    "delete_all_invoices",
    "shell",
    "os.system",
    "http.get",
    "transfer_funds",
    "Calculator",
    "calculator2",
    "send-reminder",
    "python",
    "eval",
]


_FOREIGN_TOOLS = st.one_of(st.sampled_from(_FOREIGN_TOOL_NAMES), _pattern_strings(TOOL_NAME_RE.pattern))


def _mutate_tool_not_allowed(
    draw: DrawFn, catalogue: _Catalogue, drawn: _Drawn, limits: Limits
) -> str | Doc | None:
    names = set(catalogue.registry.names)
    step = draw(st.sampled_from(drawn.doc["steps"]))
    name = draw(_FOREIGN_TOOLS)
    step["tool"] = name if name not in names else _fresh(name[:60], names)
    return drawn.doc


# invalid_args ------------------------------------------------------------------------------------


def _wrong_type_values(schema: types.Schema, root: Mapping[str, Any]) -> list[Json]:
    allowed = types.types_of(schema, root)
    samples: dict[str, Json] = {
        "string": "not the right type",
        "integer": 7,
        "number": 1.5,
        "boolean": True,
        "null": None,
        "array": [1, "two"],
        "object": {"unexpected": 1},
    }
    return [
        v for t, v in samples.items() if t not in allowed and not (t == "integer" and "number" in allowed)
    ]


def _out_of_range_values(schema: types.Schema, root: Mapping[str, Any], seen: int = 0) -> list[Json]:
    schema = types.deref(schema, root)
    if not isinstance(schema, Mapping) or seen > 3:
        return []
    out: list[Json] = []
    for key in ("anyOf", "oneOf"):
        for branch in schema.get(key, ()):
            out += _out_of_range_values(branch, root, seen + 1)
    for key, delta in (("maximum", 1), ("minimum", -1)):
        if isinstance(schema.get(key), (int, float)):
            out.append(schema[key] + delta)
    for key in ("exclusiveMaximum", "exclusiveMinimum"):
        if isinstance(schema.get(key), (int, float)):
            out.append(schema[key])
    if isinstance(schema.get("maxLength"), int):
        out.append("x" * (schema["maxLength"] + 1))
    if schema.get("minLength", 0) > 0:
        out.append("x" * (schema["minLength"] - 1))
    if "pattern" in schema:
        out += ["", "!", "not matching at all", "0", "ZZZ-9"]
    if "enum" in schema or "const" in schema:
        out += ["not-a-member", 0, "EUR ", "Email"]
    if schema.get("minItems", 0) > 0:
        out.append([])
    if isinstance(schema.get("maxItems"), int) and schema["maxItems"] < 100:
        out.append([None] * (schema["maxItems"] + 1))
    return out


def _mutate_invalid_args(
    draw: DrawFn, catalogue: _Catalogue, drawn: _Drawn, limits: Limits
) -> str | Doc | None:
    doc = drawn.doc
    index = draw(st.integers(0, len(doc["steps"]) - 1))
    step, tool = doc["steps"][index], drawn.tools[index]
    schema = types.deref(tool.root, tool.root)
    assert isinstance(schema, Mapping)
    props: Mapping[str, Any] = schema.get("properties", {})
    kind = draw(
        st.sampled_from(["wrong_type", "out_of_range", "missing", "extra", "bad_reference_type", "nested"])
    )
    thawed = _thaw(tool.root)

    def invalid_here(location: types.Schema, value: Json) -> bool:
        sub = _thaw(location) if not isinstance(location, bool) else location
        if isinstance(sub, dict):
            sub = {**sub, "$defs": thawed.get("$defs", {})}
        return not jsonschema.Draft202012Validator(sub).is_valid(value)

    if kind == "missing":
        present = [k for k in schema.get("required", ()) if k in step["args"]]
        if present:
            del step["args"][draw(st.sampled_from(present))]
            return doc
    if kind == "extra" and schema.get("additionalProperties", True) is False:
        step["args"][_new_key(draw, props)] = _draw_plain(draw, 2)
        return doc
    if kind == "bad_reference_type":
        blocked = _dependents(doc, index)
        producers = [
            (doc["steps"][j]["id"], drawn.tools[j]) for j in range(len(doc["steps"])) if j not in blocked
        ]
        options = [
            (name, step_id, tokens)
            for name, sub in props.items()
            for step_id, producer in producers
            for tokens in catalogue.wiring(producer, sub, tool.root)[1]
        ]
        if options:
            name, step_id, tokens = draw(st.sampled_from(options))
            step["args"][name] = _ref(step_id, tokens)
            return doc
    if kind == "nested" and not _step_deps({"args": step["args"]}):
        # Any literal position of a reference-free argument object; checked against the whole.
        spots = _locations(step["args"])
        if spots:
            path = draw(st.sampled_from(spots))
            replacement: Json = draw(st.sampled_from([None, "x", 1.5, -1, [], {}, True, "x" * 600]))
            candidate = _copy(step["args"])
            _set(candidate, path, replacement)
            if not tool.validator.is_valid(candidate):
                step["args"] = candidate
                return doc
    names = list(props)
    if names:
        name = draw(st.sampled_from(names))
        values = _out_of_range_values(props[name], tool.root) if kind == "out_of_range" else []
        values += _wrong_type_values(props[name], tool.root)
        values = [v for v in values if invalid_here(props[name], v)]
        if values:
            step["args"][name] = _copy(draw(st.sampled_from(values)))
            return doc
    if schema.get("additionalProperties", True) is False:
        step["args"][_new_key(draw, props)] = 1
        return doc
    return None


def _sink_flows(catalogue: _Catalogue) -> list[tuple[_Tool, str, _Tool, Tokens, bool]]:
    """(sink tool, parameter, untrusted producer, pointer, wrap in a list) for every way an
    untrusted output can be wired, type-correctly, into a parameter that refuses untrusted data."""
    flows: list[tuple[_Tool, str, _Tool, Tokens, bool]] = []
    sources = [t for t in catalogue.tools.values() if t.spec.provenance == "untrusted" and t.usable]
    for sink in catalogue.usable:
        properties = types.deref(sink.root, sink.root)
        if not isinstance(properties, Mapping):
            continue
        for param, allowed in sink.spec.sinks.items():
            if "untrusted" in allowed or param not in properties.get("properties", {}):
                continue
            location = types.deref(properties["properties"][param], sink.root)
            spots: list[tuple[types.Schema, bool]] = [(location, False)]
            if isinstance(location, Mapping) and isinstance(location.get("items"), Mapping):
                spots.append((location["items"], True))  # [untrusted value] also reaches the sink
            for source in sources:
                for spot, wrap in spots:
                    for tokens in catalogue.wiring(source, spot, sink.root)[0]:
                        flows.append((sink, param, source, tokens, wrap))
    return flows


def _mutate_policy_violation(draw: DrawFn, catalogue: _Catalogue, drawn: _Drawn, limits: Limits) -> Json:
    flows = _sink_flows(catalogue)
    if not flows:
        return None
    sink, param, source, tokens, wrap = _choice(draw, flows)
    doc = drawn.doc
    taken = {step["id"] for step in doc["steps"]}
    source_id = _fresh("untrusted_src", taken)
    sink_id = _fresh("guarded_sink", taken | {source_id})
    no_wiring = _Wiring(catalogue, [])
    source_args = _draw_value(draw, source.root, source.root, no_wiring, 0)
    sink_args = _draw_value(draw, sink.root, sink.root, no_wiring, 0)
    value: Json = _ref(source_id, tokens)
    sink_args[param] = [value] if wrap else value
    doc["steps"] += [
        {"id": source_id, "tool": source.name, "args": source_args},
        {"id": sink_id, "tool": sink.name, "args": sink_args},
    ]
    return doc
