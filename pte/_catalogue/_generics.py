"""Generic tools: type variables in tool schemas, and inferring a step's concrete output schema.

A tool written ``def first(records: list[T]) -> First[T]`` (``T = TypeVar("T")``) has schemas
in which each use of ``T`` is a *marker* node: ``{"x-pte-var": "T"}`` plus the keywords of
T's bound (nothing for an unbounded T, so it validates like ``Any``). Because the markers
live in the JSON Schemas themselves, a tool rebuilt from an audit log (replay) is exactly
as generic as the original.

For one step, `infer` *binds* each variable to the schema of the value wired into the
first parameter position that mentions it (a reference's selected output schema, or the
shape of a literal), then *substitutes* the bindings into the tool's input and output
schemas. The compiler type-checks the step's arguments against the concrete input schema
and checks references into the step's output against the concrete output schema.

Two further markers let an output depend on a literal argument naming a field:

- ``{"x-pte-field-of": ["T", "field"]}``: the schema of field ``args["field"]`` of T.
- ``{"x-pte-pick": ["T", "fields"]}``: T keeping only the fields listed in ``args["fields"]``.

and ``{"x-pte-field": "T"}`` on a string (or list-of-strings) parameter says its literal
value must name a field that T's records can have (a typo is a compile error, not an empty
result at run time).

For regular expressions, ``{"x-pte-regex": true}`` on a parameter makes compile check a
literal pattern (RE2 syntax), and ``{"x-pte-regex-groups": "pattern"}`` is the record type
of one match of the literal pattern in argument ``pattern``: one string field per named
group (``match`` when there are none). ``{"x-pte-extend": ["T", "pattern"]}`` is T's
records with those group fields added.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import re2
from pydantic import GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

import pte._catalogue._schema_types as st
from pte._core import canonical_json

__all__ = [
    "FIELD",
    "FIELD_OF",
    "PICK",
    "REGEX",
    "REGEX_GROUPS",
    "VAR",
    "ExtendedBy",
    "FieldName",
    "FieldOf",
    "PickOf",
    "RegexGroups",
    "RegexPattern",
    "TypeVarMarker",
    "compile_regex",
]

VAR = "x-pte-var"
FIELD_OF = "x-pte-field-of"
PICK = "x-pte-pick"
FIELD = "x-pte-field"
REGEX = "x-pte-regex"
REGEX_GROUPS = "x-pte-regex-groups"
EXTEND = "x-pte-extend"
_OUTPUT_MARKERS = (VAR, FIELD_OF, PICK, REGEX_GROUPS, EXTEND)
_ALL_MARKERS = (*_OUTPUT_MARKERS, FIELD, REGEX)
#: Longest regular expression accepted, in characters.
MAX_PATTERN_LENGTH = 1_000
#: Most schema nodes `inline` produces: a bound on pathological (deeply shared) `$defs`.
_INLINE_BUDGET = 20_000

_SUBSCHEMA_MAPS = ("properties", "patternProperties", "dependentSchemas")
_SUBSCHEMA_ONE = (
    "items",
    "additionalProperties",
    "not",
    "contains",
    "propertyNames",
    "if",
    "then",
    "else",
    "unevaluatedItems",
    "unevaluatedProperties",
)
_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")


def _var_name(var: Any) -> str:
    return str(getattr(var, "__name__", var))


class _SchemaMark:
    """Annotated metadata that adds one marker keyword to the JSON Schema pydantic generates."""

    key: str = ""

    def marker(self) -> Any:
        raise NotImplementedError

    def __get_pydantic_json_schema__(
        self, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        schema = dict(handler(core_schema))
        schema[self.key] = self.marker()
        return schema


@dataclass(frozen=True, init=False)
class _VarParamMark(_SchemaMark):
    """A mark naming a TypeVar and one of the tool's parameters (the marker is ``[var, param]``)."""

    var: str
    param: str

    def __init__(self, var: Any, param: str) -> None:
        object.__setattr__(self, "var", _var_name(var))
        object.__setattr__(self, "param", param)

    def marker(self) -> Any:
        return [self.var, self.param]


@dataclass(frozen=True)
class TypeVarMarker(_SchemaMark):
    """Marks where a TypeVar stood (`pte.tool` puts it there; authors write the TypeVar)."""

    name: str
    key = VAR

    def marker(self) -> Any:
        return self.name


class FieldOf(_VarParamMark):
    """``Annotated[Any, FieldOf(T, "field")]``: the type of the field of T named by argument `field`."""

    key = FIELD_OF


class PickOf(_VarParamMark):
    """``Annotated[dict[str, Any], PickOf(T, "fields")]``: T keeping only the fields named by `fields`."""

    key = PICK


@dataclass(frozen=True, init=False)
class FieldName(_SchemaMark):
    """``Annotated[str, FieldName(T)]``: the argument must name a field T's records can have."""

    var: str
    key = FIELD

    def __init__(self, var: Any) -> None:
        object.__setattr__(self, "var", _var_name(var))

    def marker(self) -> Any:
        return self.var


@dataclass(frozen=True)
class RegexPattern(_SchemaMark):
    """``Annotated[str, RegexPattern()]``: a literal pattern is checked (RE2 syntax) at compile time."""

    key = REGEX

    def marker(self) -> Any:
        return True


@dataclass(frozen=True)
class RegexGroups(_SchemaMark):
    """``Annotated[dict[str, str], RegexGroups("pattern")]``: one match of that argument's pattern."""

    param: str
    key = REGEX_GROUPS

    def marker(self) -> Any:
        return self.param


class ExtendedBy(_VarParamMark):
    """``Annotated[dict[str, Any], ExtendedBy(T, "pattern")]``: T plus the pattern's group fields."""

    key = EXTEND


def extend_schema(record: st.Schema, added: Mapping[str, Any]) -> st.Schema:
    """Records of `record` with the (string) fields of `added` set on every one."""
    if isinstance(record, Mapping) and isinstance(record.get("anyOf") or record.get("oneOf"), list):
        return union([extend_schema(b, added) for b in record.get("anyOf") or record.get("oneOf") or ()])
    if not isinstance(record, Mapping) or not record.get("properties"):
        return {
            "type": "object",
            "properties": dict(added["properties"]),
            "required": list(added["required"]),
        }
    out = dict(record)
    out["properties"] = {**record["properties"], **added["properties"]}
    out["required"] = list(dict.fromkeys([*record.get("required", ()), *added["required"]]))
    return out


def compile_regex(pattern: str, ignore_case: bool = False) -> Any:
    """`pattern` compiled by RE2 (linear time in the text: untrusted text cannot stall a run).

    Raises ValueError with RE2's reason for a pattern it refuses (backreferences, lookaround).
    """
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise ValueError(f"pattern is {len(pattern)} characters; the limit is {MAX_PATTERN_LENGTH}")
    options = re2.Options()
    options.log_errors = False
    options.case_sensitive = not ignore_case
    try:
        return re2.compile(pattern, options)
    except re2.error as exc:
        reason = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise ValueError(
            f"invalid pattern {pattern!r}: {reason} (RE2 syntax: no backreferences or lookaround)"
        ) from None


def regex_group_names(pattern: str) -> list[str]:
    """The named groups of `pattern`, in order (``["match"]`` when it has none)."""
    groups = compile_regex(pattern).groupindex
    return sorted(groups, key=groups.__getitem__) or ["match"]


def _regex_record(pattern: Any) -> st.Schema | None:
    if not isinstance(pattern, str):
        return None
    try:
        names = regex_group_names(pattern)
    except ValueError:
        return None
    return {
        "type": "object",
        "properties": {name: {"type": "string"} for name in names},
        "required": names,
        "additionalProperties": False,
    }


# --- schema walking -----------------------------------------------------------------------------


def _map_subschemas(schema: Mapping[str, Any], fn: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _SUBSCHEMA_MAPS and isinstance(value, Mapping):
            out[key] = {name: fn(sub) for name, sub in value.items()}
        elif key in _SUBSCHEMA_ONE:
            out[key] = fn(value)
        elif key in _SUBSCHEMA_LISTS and isinstance(value, list):
            out[key] = [fn(sub) for sub in value]
        else:
            out[key] = value
    return out


def without_titles(schema: Any) -> Any:
    """`schema` without ``title`` keywords (pydantic titles every property after its name).

    Only the keyword goes: a property *named* "title" is kept.
    """
    if not isinstance(schema, Mapping):
        return schema
    out = _map_subschemas({k: v for k, v in schema.items() if k != "title"}, without_titles)
    if isinstance(schema.get("$defs"), Mapping):
        out["$defs"] = {name: without_titles(sub) for name, sub in schema["$defs"].items()}
    return out


def has_markers(schema: Any, keys: tuple[str, ...] = _OUTPUT_MARKERS) -> bool:
    """True if a marker keyword occurs anywhere in `schema` (a generic schema)."""
    if isinstance(schema, Mapping):
        return any(k in schema for k in keys) or any(has_markers(v, keys) for v in schema.values())
    if isinstance(schema, list):
        return any(has_markers(v, keys) for v in schema)
    return False


def inline(schema: st.Schema, root: Mapping[str, Any]) -> st.Schema:
    """`schema` with every local ``$ref`` replaced by its target: self-contained, no ``$defs``.

    A recursive reference (a definition reached again inside itself) becomes ``true``
    (nothing known), which keeps the result finite and the type checks conservative.
    """
    budget = [_INLINE_BUDGET]

    def walk(node: Any, stack: tuple[str, ...]) -> Any:
        budget[0] -= 1
        if budget[0] < 0 or not isinstance(node, Mapping):
            return True if budget[0] < 0 else node
        if "$ref" in node:
            ref = node["$ref"]
            if not isinstance(ref, str) or ref in stack:
                return True
            return walk(st.deref(node, root), (*stack, ref))
        return _map_subschemas({k: v for k, v in node.items() if k != "$defs"}, lambda s: walk(s, stack))

    result: st.Schema = walk(schema, ())
    return result


def thaw(schema: Any) -> Any:
    """Plain dicts and lists all the way down (tool schemas are read-only mapping proxies)."""
    if isinstance(schema, Mapping):
        return {k: thaw(v) for k, v in schema.items()}
    if isinstance(schema, list):
        return [thaw(v) for v in schema]
    return schema


def strip(schema: Mapping[str, Any]) -> st.Schema:
    """A marker node without its markers: the variable's bound (``{}`` for an unbounded one)."""
    return {k: v for k, v in schema.items() if k not in _ALL_MARKERS}


def union(schemas: list[st.Schema]) -> st.Schema:
    """One schema admitting what any of `schemas` admits (duplicates dropped; none gives ``false``)."""
    unique: dict[str, st.Schema] = {}
    for schema in schemas:
        branches = schema.get("anyOf") if isinstance(schema, Mapping) and len(schema) == 1 else None
        for branch in branches if isinstance(branches, list) else [schema]:
            if branch is True or (isinstance(branch, Mapping) and not branch):
                return True
            unique.setdefault(canonical_json(branch), branch)
    if not unique:
        return False
    values = list(unique.values())
    return values[0] if len(values) == 1 else {"anyOf": values}


def literal_schema(value: Any) -> st.Schema:
    """The shape of a literal JSON value: its types, object properties and array items."""
    if isinstance(value, dict):
        return {
            "type": "object",
            "properties": {k: literal_schema(v) for k, v in value.items()},
            "required": list(value),
            "additionalProperties": False,
        }
    if isinstance(value, list):
        return {"type": "array", "items": union([literal_schema(v) for v in value]) if value else True}
    return {"type": st.json_type(value)}


def _is_open(schema: Any) -> bool:
    return schema is True or (isinstance(schema, Mapping) and not schema)


def field_schema(record: st.Schema, name: str) -> st.Schema | None:
    """The schema of field `name` of records admitted by `record`; None if no record can have it.

    A record schema that declares properties and no ``additionalProperties`` counts as
    closed (pydantic models, the usual tool output): a name it does not declare is a typo.
    """
    if _is_open(record) or not isinstance(record, Mapping):
        return True if record is not False else None
    branches = record.get("anyOf") or record.get("oneOf")
    if isinstance(branches, list):
        found = [s for b in branches if (s := field_schema(b, name)) is not None]
        return union(found) if found else None
    props = record.get("properties") or {}
    if name in props:
        sub: st.Schema = props[name]
        return sub
    extra = record.get("additionalProperties")
    if isinstance(extra, Mapping) or extra is True:
        return extra
    if extra is None and not props:
        return True
    return None


def field_names(record: st.Schema) -> list[str]:
    """The field names a record schema declares (for error messages)."""
    if not isinstance(record, Mapping):
        return []
    names: dict[str, None] = dict.fromkeys(record.get("properties") or {})
    for branch in record.get("anyOf") or record.get("oneOf") or ():
        names.update(dict.fromkeys(field_names(branch)))
    return list(names)


# --- binding and substitution ---------------------------------------------------------------------


class BindError(Exception):
    """A value wired into a generic parameter does not fit the variable's bound."""

    def __init__(self, message: str, path: tuple[str | int, ...]) -> None:
        super().__init__(message)
        self.message = message
        self.path = path


def _values_of(source: Mapping[str, Any]) -> st.Schema:
    """The schema of any value of an object (for ``dict[str, V]`` parameters)."""
    parts: list[st.Schema] = list((source.get("properties") or {}).values())
    extra = source.get("additionalProperties")
    if extra is True or (extra is None and not parts):
        return True
    if isinstance(extra, Mapping):
        parts.append(extra)
    return union(parts)


def bind(
    template: st.Schema, source: st.Schema, env: dict[str, st.Schema], path: tuple[str | int, ...] = ()
) -> None:
    """Bind the variables in `template` from the (inlined) `source` schema of the value given there.

    The first position that binds a variable wins; later positions are checked against
    that binding by the ordinary type check.
    """
    if not isinstance(template, Mapping) or not has_markers(template, (VAR,)):
        return
    if _is_open(source) or source is False:
        return  # nothing known about the value: the variable keeps its bound
    if VAR in template:
        name = template[VAR]
        if name in env:
            return
        bound = strip(template)
        if not st.assignable(source, {}, bound, {}):
            raise BindError(
                f"gives {st.describe(source, {})} but {name} must be {st.describe(bound, {})}", path
            )
        env[name] = source
        return
    assert isinstance(source, Mapping)
    source_branches = source.get("anyOf") or source.get("oneOf")
    branches = template.get("anyOf") or template.get("oneOf")
    if isinstance(branches, list):
        marked = [b for b in branches if has_markers(b, (VAR,))]
        plain = [b for b in branches if not has_markers(b, (VAR,))]
        rest = [
            b for b in (source_branches or [source]) if not any(st.assignable(b, {}, p, {}) for p in plain)
        ]
        if len(marked) == 1 and rest:
            bind(marked[0], union(rest), env, path)
        return
    if isinstance(source_branches, list):
        # A union value into a structural parameter: bind from each branch, then join.
        found: dict[str, list[st.Schema]] = {}
        for branch in source_branches:
            branch_env: dict[str, st.Schema] = {}
            bind(template, branch, branch_env, path)
            for name, schema in branch_env.items():
                found.setdefault(name, []).append(schema)
        for name, schemas in found.items():
            env.setdefault(name, union(schemas))
        return
    for sub in template.get("allOf", ()):
        bind(sub, source, env, path)
    source_types = st.types_of(source, {})
    items = template.get("items")
    if items is not None and "array" in source_types:
        bind(items, source.get("items", True), env, path)
    if "object" in source_types:
        for name, sub in (template.get("properties") or {}).items():
            if has_markers(sub, (VAR,)):
                value = field_schema(source, name)
                if value is not None:
                    bind(sub, value, env, (*path, name))
        extra = template.get("additionalProperties")
        if isinstance(extra, Mapping) and has_markers(extra, (VAR,)):
            bind(extra, _values_of(source), env, path)


def pick_schema(record: st.Schema, names: list[str]) -> st.Schema:
    """Records of `record` keeping only the fields `names` (those they can have)."""
    branches = (record.get("anyOf") or record.get("oneOf")) if isinstance(record, Mapping) else None
    if isinstance(branches, list):
        return union([pick_schema(b, names) for b in branches])
    required = set(record.get("required", ())) if isinstance(record, Mapping) else set()
    props = {n: s for n in names if (s := field_schema(record, n)) is not None}
    return {
        "type": "object",
        "properties": props,
        "required": [n for n in props if n in required],
        "additionalProperties": False,
    }


def substitute(template: st.Schema, env: Mapping[str, st.Schema], args: Mapping[str, Any]) -> st.Schema:
    """`template` with every marker replaced: bound variables by their bindings, others by their bound."""
    if not isinstance(template, Mapping) or not has_markers(template):
        return template
    if VAR in template:
        return env.get(template[VAR]) or strip(template)
    if REGEX_GROUPS in template:
        return _regex_record(args.get(template[REGEX_GROUPS])) or strip(template)
    if EXTEND in template:
        var, param = template[EXTEND]
        record, groups = env.get(var), _regex_record(args.get(param))
        if record is None or not isinstance(groups, Mapping):
            return strip(template)
        return extend_schema(record, groups)
    for key in (FIELD_OF, PICK):
        if key in template:
            var, param = template[key]
            record, arg = env.get(var), args.get(param)
            if record is None:
                return strip(template)
            if key == FIELD_OF and isinstance(arg, str):
                found = field_schema(record, arg)
                return strip(template) if found is None else found
            if key == PICK and isinstance(arg, list) and all(isinstance(a, str) for a in arg):
                return pick_schema(record, arg)
            return strip(template)
    return _map_subschemas(template, lambda s: substitute(s, env, args))


def literal_errors(
    template: Mapping[str, Any], env: Mapping[str, st.Schema], args: Mapping[str, Any]
) -> tuple[str, str] | None:
    """(parameter, message) for a literal field name the records cannot have or a bad pattern, else None."""
    for param, sub in (template.get("properties") or {}).items():
        if not isinstance(sub, Mapping) or param not in args:
            continue
        if sub.get(REGEX) and isinstance(args[param], str):
            try:
                compile_regex(args[param])
            except ValueError as exc:
                return param, str(exc)
        if FIELD not in sub:
            continue
        record = env.get(sub[FIELD])
        value = args[param]
        names = value if isinstance(value, list) else [value]
        if record is None or not all(isinstance(n, str) for n in names):
            continue  # a reference, or nothing known about the records: checked at run time
        for name in names:
            if field_schema(record, name) is None:
                known = ", ".join(field_names(record)) or "none"
                return param, f"the records have no field {name!r} (they have: {known})"
    return None
