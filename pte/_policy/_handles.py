"""Handles: what a later planner sees in place of untrusted data.

A planner that has read untrusted text is the attacker's: it chooses more than literals
(which reference path flows, which tool, how often), and no label on a literal covers
that. So by default (``EngineConfig.planner_data="handles"``) a stage planner, a replanner
and a repair prompt are shown data only where every label of it is ``request`` or
``trusted``; every other part is replaced by a *handle*::

    {"pte_handle": "mail/messages/0/body", "labels": ["untrusted"], "schema": {"type": "string"}}

The planner cannot read what a handle stands for. It can pass it on, as
``{"$ref": "mail/messages/0/body"}``, to deterministic operations and the extraction pack,
and the compile-time labels still follow it there. Such a planner sees the request, the
deployment's catalogue and trusted data, so what it writes is derived from those alone: its
literals count as ``trusted`` (``request`` only for values the first plan wrote), and its
plan carries no exposure (see `pte._run._exposure`).

A failed step's error message is tool output that may quote its inputs: when they (or the
tool's output) are untrusted, the replanner is told the error's kind, never its text.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from pte._catalogue import Position, SchemaWalk
from pte._policy._labels import LabelTree

__all__ = ["HANDLE_KEY", "SchemaOf", "error_view", "handle_view", "is_clean", "schema_at"]

#: The key of a handle object in a data block.
HANDLE_KEY = "pte_handle"
#: The key of an error message withheld from a planner.
WITHHELD_KEY = "pte_withheld"

#: (step id) -> (output schema, its root for "$ref"s), or None when unknown.
SchemaOf = Callable[[str], "tuple[Mapping[str, Any], Mapping[str, Any]] | None"]

_UNTRUSTED = "untrusted"
#: Where `schema_walk` puts a schema that is not its root's own (a for_each step's list of outputs).
_START = "pte-described"
_KIND = re.compile(r"^[a-z][a-z_]{0,31}$")


def is_clean(labels: frozenset[str]) -> bool:
    """Whether data with these labels may be shown to a planner (request and trusted only)."""
    return _UNTRUSTED not in labels


def _pointer(tokens: tuple[str, ...]) -> str:
    return "".join("/" + t.replace("~", "~0").replace("/", "~1") for t in tokens)


def schema_walk(schema: Mapping[str, Any], root: Mapping[str, Any]) -> SchemaWalk:
    """A walk over `schema`, whose ``$ref``s name parts of `root` (the tool's output schema)."""
    if schema is root:
        return SchemaWalk(root)
    return SchemaWalk({**root, _START: schema}, start=(_START,))


def schema_at(
    schema: Mapping[str, Any] | None,
    root: Mapping[str, Any],
    tokens: tuple[str, ...],
    walk: SchemaWalk | None = None,
) -> Any:
    """A short description of the part of `schema` a pointer selects (None when unknown):
    its type(s), property names and element type, through references, unions and tuples."""
    if schema is None:
        return None
    walk = walk or schema_walk(schema, root)
    position = walk.root
    for token in tokens:
        position = walk.child(position, token)
        if not position:
            return None
    out: dict[str, Any] = {}
    types = _types(walk, position)
    if types:
        out["type"] = types[0] if len(types) == 1 else sorted(types)
    names = {
        name for props in walk.keyword(position, "properties") if isinstance(props, Mapping) for name in props
    }
    if names:
        out["properties"] = sorted(names)
    if "array" in types:
        items = _types(walk, walk.child(position, "*"))
        if len(items) == 1:
            out["items"] = {"type": items[0]}
    return out or None


def _types(walk: SchemaWalk, position: Position) -> list[str]:
    found: dict[str, None] = {}
    for kind in walk.keyword(position, "type"):
        for name in kind if isinstance(kind, list) else [kind]:
            if isinstance(name, str):
                found[name] = None
    return list(found)


def handle_view(
    value: Any,
    tree: LabelTree,
    path: str,
    schema: tuple[Mapping[str, Any], Mapping[str, Any]] | None = None,
    base: tuple[str, ...] = (),
) -> tuple[Any, bool]:
    """`value` with every part that carries the ``untrusted`` label replaced by a handle.

    `tree` labels `value` by field; `path` is the reference that selects `value`
    (``"<step id>"`` or ``"<step id>/<pointer>"``): each handle names the reference that
    selects its part. `schema` is the producing step's output schema (and its root), `base`
    the pointer tokens of `value` inside that output. Returns the view and whether any
    handle was made.
    """
    made = False
    walk = schema_walk(schema[0], schema[1]) if schema is not None else None

    def handle(tokens: tuple[str, ...], labels: frozenset[str]) -> dict[str, Any]:
        nonlocal made
        made = True
        out: dict[str, Any] = {HANDLE_KEY: path + _pointer(tokens), "labels": sorted(labels)}
        described = schema_at(schema[0], schema[1], (*base, *tokens), walk) if schema is not None else None
        if described is not None:
            out["schema"] = described
        return out

    def view(item: Any, node: LabelTree | None, seen: frozenset[str], tokens: tuple[str, ...]) -> Any:
        below = seen if node is None else seen | node.everything()
        if is_clean(below):
            return item  # nothing untrusted anywhere in it
        if not is_clean(seen) or node is None:
            return handle(tokens, below)  # who chose this part (or all of it) is untrusted
        if isinstance(item, Mapping):
            return {
                key: view(sub, child, seen | child.own if child else seen, (*tokens, str(key)))
                for key, sub in item.items()
                for child in [node.child(str(key))]
            }
        if isinstance(item, list):
            return [
                view(sub, child, seen | child.own if child else seen, (*tokens, str(index)))
                for index, sub in enumerate(item)
                for child in [node.child(str(index))]
            ]
        return handle(tokens, below)

    return view(value, tree, frozenset(tree.own), ()), made


def error_view(error: Mapping[str, Any], labels: frozenset[str]) -> dict[str, Any]:
    """A failed step's error as a planner in handles mode sees it: its text only when clean."""
    if is_clean(labels):
        return dict(error)
    kind = error.get("kind")
    out: dict[str, Any] = {"kind": kind if isinstance(kind, str) and _KIND.fullmatch(kind) else "tool_error"}
    out["message"] = {
        WITHHELD_KEY: "the error text may quote untrusted data, so it is not shown",
        "labels": sorted(labels),
    }
    return out
