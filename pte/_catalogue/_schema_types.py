"""Static typing over JSON Schemas: what a JSON Pointer selects, and whether one schema fits another.

This is what lets `compile` type-check references: a reference stands for the schema its
pointer selects in the producing tool's output schema, and that schema must fit the
consuming parameter's schema. The check is conservative: when it cannot prove a fit
(an untyped `Any` output wired into a typed parameter, say) it says no. Value constraints
(ranges, patterns, lengths) are not compared here; they are checked on the resolved
arguments at run time.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from pte._core import array_index

_ALL_TYPES = frozenset({"string", "number", "integer", "boolean", "null", "array", "object"})
_MAX_DEPTH = 24  # bounds recursion through self-referencing schemas

Schema = Mapping[str, Any] | bool
# Concrete types: isinstance against the Mapping ABC is several times slower on this hot path.
_MAPPINGS = (dict, MappingProxyType)


def json_type(value: Any) -> str:
    """The JSON Schema type name of a JSON value (integers as ``integer``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def deref(schema: Schema, root: Mapping[str, Any]) -> Schema:
    """Follow local ``$ref``s (``#/$defs/...``); sibling keywords of a ``$ref`` are kept."""
    for _ in range(_MAX_DEPTH):
        if not isinstance(schema, _MAPPINGS) or "$ref" not in schema:
            return schema
        ref = schema["$ref"]
        if not isinstance(ref, str) or not ref.startswith("#"):
            return True  # a remote reference: nothing known statically
        node: Any = root
        for token in ref[2:].split("/") if len(ref) > 1 else ():
            node = node[token.replace("~1", "/").replace("~0", "~")]
        siblings = {k: v for k, v in schema.items() if k != "$ref"}
        schema = {**node, **siblings} if isinstance(node, _MAPPINGS) else node
    return schema


def types_of(schema: Schema, root: Mapping[str, Any]) -> frozenset[str]:
    """The JSON types a schema admits (``integer`` is listed on its own; ``number`` includes it)."""
    schema = deref(schema, root)
    if schema is True:
        return _ALL_TYPES
    if schema is False:
        return frozenset()
    assert isinstance(schema, _MAPPINGS)
    if "const" in schema:
        return frozenset({json_type(schema["const"])})
    if "enum" in schema:
        return frozenset(json_type(v) for v in schema["enum"])
    for key in ("anyOf", "oneOf"):
        if key in schema:
            out: frozenset[str] = frozenset()
            for branch in schema[key]:
                out |= types_of(branch, root)
            return out
    declared = schema.get("type")
    if declared is None:
        result = _ALL_TYPES
    elif isinstance(declared, str):
        result = frozenset({declared})
    else:
        result = frozenset(declared)
    if "number" in result:
        result |= {"integer"}
    for branch in schema.get("allOf", ()):
        result &= types_of(branch, root) | ({"integer"} if "number" in types_of(branch, root) else set())
    return result


def _branches(schema: Mapping[str, Any]) -> list[Any] | None:
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return list(schema[key])
    return None


def select(schema: Schema, root: Mapping[str, Any], tokens: tuple[str, ...], depth: int = 0) -> Schema | None:
    """The schema a JSON Pointer selects inside values of `schema`, or None if it cannot exist.

    A pointer through an untyped part (no declared properties or items) cannot be proven
    to exist, so it selects nothing.
    """
    if not tokens:
        return schema
    if depth > _MAX_DEPTH:
        return None
    schema = deref(schema, root)
    if not isinstance(schema, _MAPPINGS):
        return None
    branches = _branches(schema)
    if branches is not None:
        found = [s for b in branches if (s := select(b, root, tokens, depth + 1)) is not None]
        if not found:
            return None
        return found[0] if len(found) == 1 else {"anyOf": found}
    token, rest = tokens[0], tokens[1:]
    types = types_of(schema, root)
    if "object" in types:
        props = schema.get("properties", {})
        if token in props:
            return select(props[token], root, rest, depth + 1)
        extra = schema.get("additionalProperties")
        if isinstance(extra, _MAPPINGS):
            return select(extra, root, rest, depth + 1)
    # "*" selects any element: the current element of a for_each list (pte._plan._control).
    index = -1 if token == "*" else array_index(token)
    if "array" in types and index is not None:
        prefix = schema.get("prefixItems")
        if token == "*" and isinstance(prefix, list) and prefix:
            return None  # a tuple's positions differ in type: no one schema for "any element"
        if isinstance(prefix, list) and 0 <= index < len(prefix):
            return select(prefix[index], root, rest, depth + 1)
        items = schema.get("items")
        if isinstance(items, _MAPPINGS):
            return select(items, root, rest, depth + 1)
    return None


def _is_unconstrained(schema: Schema) -> bool:
    if schema is True:
        return True
    if not isinstance(schema, _MAPPINGS):
        return False
    return not (set(schema) - {"title", "description", "default", "examples", "$comment"})


def assignable(
    src: Schema,
    src_root: Mapping[str, Any],
    dst: Schema,
    dst_root: Mapping[str, Any],
    depth: int = 0,
    memo: dict[tuple[int, int], tuple[Schema, Schema, bool]] | None = None,
) -> bool:
    """True if every value `src` admits is, by type and shape, acceptable to `dst`.

    Each pair of subschemas is compared once (`memo`, by identity; a pair met again while it is
    being compared, a cycle, counts as fitting, as past the depth bound): a hostile catalogue
    whose references fan out (12 properties each referring to the next of 12 levels, 12**12
    paths) is compared in work bounded by the product of the two documents' sizes, not by
    their paths (it took 5 s at 5 levels and grew 12x per level, #34)."""
    if memo is None:
        memo = {}
    key = (id(src), id(dst))
    known = memo.get(key)
    if known is not None:
        return known[2]
    memo[key] = (src, dst, True)  # the objects are kept so their ids stay theirs
    result = _assignable(src, src_root, dst, dst_root, depth, memo)
    memo[key] = (src, dst, result)
    return result


def _assignable(
    src: Schema,
    src_root: Mapping[str, Any],
    dst: Schema,
    dst_root: Mapping[str, Any],
    depth: int,
    memo: dict[tuple[int, int], tuple[Schema, Schema, bool]],
) -> bool:
    if depth > _MAX_DEPTH:
        return True  # recursive schemas: the outer levels already matched
    src = deref(src, src_root)
    dst = deref(dst, dst_root)
    if _is_unconstrained(dst):
        return True
    if src is False:
        return True
    if not isinstance(dst, _MAPPINGS):
        return False
    if isinstance(src, _MAPPINGS):
        src_branches = _branches(src)
        if src_branches is not None:
            return all(assignable(b, src_root, dst, dst_root, depth + 1, memo) for b in src_branches)
    dst_branches = _branches(dst)
    if dst_branches is not None:
        return any(assignable(src, src_root, b, dst_root, depth + 1, memo) for b in dst_branches)
    if not isinstance(src, _MAPPINGS):  # src is True: anything
        return False
    src_types = types_of(src, src_root)
    dst_types = types_of(dst, dst_root)
    if not src_types <= dst_types:
        return False
    for branch in dst.get("allOf", ()):
        if not assignable(src, src_root, branch, dst_root, depth + 1, memo):
            return False
    if "const" in dst or "enum" in dst:
        allowed = [dst["const"]] if "const" in dst else list(dst["enum"])
        if "const" in src:
            offered = [src["const"]]
        elif "enum" in src:
            offered = list(src["enum"])
        else:
            return False
        return all(v in allowed for v in offered)
    if src_types == {"array"}:
        dst_items = dst.get("items", True)
        if not _is_unconstrained(dst_items):
            return assignable(src.get("items", True), src_root, dst_items, dst_root, depth + 1, memo)
    if src_types == {"object"}:
        return _object_assignable(src, src_root, dst, dst_root, depth, memo)
    return True


def _object_assignable(
    src: Mapping[str, Any],
    src_root: Mapping[str, Any],
    dst: Mapping[str, Any],
    dst_root: Mapping[str, Any],
    depth: int,
    memo: dict[tuple[int, int], tuple[Schema, Schema, bool]],
) -> bool:
    src_props: Mapping[str, Any] = src.get("properties", {})
    dst_props: Mapping[str, Any] = dst.get("properties", {})
    src_required = set(src.get("required", ()))
    if not set(dst.get("required", ())) <= src_required:
        return False
    dst_extra = dst.get("additionalProperties", True)
    for name, sub in src_props.items():
        target = dst_props.get(name, dst_extra)
        if target is False:
            return False
        if not assignable(sub, src_root, target, dst_root, depth + 1, memo):
            return False
    src_extra = src.get("additionalProperties", True)
    if src_extra is not False:
        # The source may carry keys it does not declare: they must fit wherever dst puts unknown keys.
        if dst_extra is False:
            return False
        if not _is_unconstrained(dst_extra):
            return assignable(src_extra, src_root, dst_extra, dst_root, depth + 1, memo)
    return True


def describe(schema: Schema, root: Mapping[str, Any]) -> str:
    """A short human description of a schema's types, for error messages."""
    types = types_of(schema, root)
    if types == _ALL_TYPES:
        return "any (untyped)"
    if "number" in types:
        types = types - {"integer"}
    return " | ".join(sorted(types)) or "nothing"
