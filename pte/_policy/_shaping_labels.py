"""Field labels through selections: a generic operation's output keeps each field's own labels.

A ``derived`` tool's output is, by default, as trusted as the least trusted of its inputs:
the union of every argument's labels (`pte._policy._document`). A tool that declares a `Selection`
(`pte._catalogue._selection`: every stock operation that selects, orders, groups or aggregates, and
any user tool that declares one) is labelled by field instead (`pte._policy._labels.LabelTree`):

- each output part the selection copies carries the labels of its source:
  ``pluck(tx/transactions, "amount")/values/0`` is ``trusted`` even though the
  transactions' subjects are ``untrusted``, and ``extreme_by(..., "date")/record/recipient``
  is as trusted as the recipient;
- the output's own node (its structure, the length of its lists, and every part not
  copied: a ``count``, a ``total``, a group's key) carries the labels of the *decision*:
  who chose the input lists' elements (the path down to each element), every part the
  selection ``decides`` on (the filter's field, the sort key, the extreme's field, in every
  element), and every other argument (the field name, the operator, the value compared
  with, ``n``). Selecting below the output collects that node, so an amount from a record
  an untrusted subject chose is untrusted.

So a selection's output labels are exactly its returned fields' labels and the labels of
the fields its decision read, nothing else. A field name given by reference stands for
every field. A stock operation recorded without its declaration (its code hash of that
time, `pte._audit.stock_selection_undeclared`) is labelled by the one it declares today.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from pte._audit import stock_selection_undeclared
from pte._catalogue import Selection
from pte._plan import Reference, is_reference
from pte._policy._labels import ANY, LabelTree, union

__all__ = ["selection_of", "shaped_tree"]

_EMPTY = LabelTree(frozenset())


@functools.cache
def _stock_selections() -> Mapping[str, Selection]:
    """name -> the selection each stock shaping operation declares today."""
    from pte._catalogue import (
        load_pack,  # local: pte._catalogue._registry is heavier than this module needs at import
    )

    registry = load_pack("shaping")
    out = {spec.name: spec.selection for spec in registry}
    return MappingProxyType({name: sel for name, sel in out.items() if sel is not None})


def selection_of(spec: Any) -> Selection | None:
    """The selection a (derived) tool declares; for a stock operation the reader of older records
    says was recorded without it (`stock_selection_undeclared`), the one it declares now."""
    if spec is None or getattr(spec, "provenance", None) != "derived":
        return None
    declared = getattr(spec, "selection", None)
    if isinstance(declared, Selection):
        return declared
    name = getattr(spec, "name", None)
    if stock_selection_undeclared(name, getattr(spec, "code_sha256", None)):
        return _stock_selections().get(str(name))
    return None


def shaped_tree(
    spec: Any,
    args: Mapping[str, Any],
    ref_tree: Callable[[Reference], LabelTree],
    arg_labels: Callable[[Any], frozenset[str]],
) -> LabelTree | None:
    """The field labels of a selecting step's output, or None (then: the union of its inputs).

    `ref_tree(ref)` is the label tree of the part a reference selects; `arg_labels(value)`
    the labels of an argument value (literals and references).
    """
    selection = selection_of(spec)
    if selection is None:
        return None
    trees: dict[str, LabelTree] = {}

    def tree_of(param: str) -> LabelTree:
        if param not in trees:
            trees[param] = _value_tree(args[param], ref_tree, arg_labels) if param in args else _EMPTY
        return trees[param]

    sources = selection.sources
    decided: set[str] = set()
    for name, value in args.items():
        if name in sources:
            decided |= tree_of(name).own  # the input's own structure (its keys, its length)
        else:
            decided |= arg_labels(value)  # who chose the field, the operator, the value, n
    for path in selection.decides:
        part, membership = _walk(tree_of, path, args)
        decided |= membership | part.everything()
    copied: list[tuple[tuple[str, ...], LabelTree]] = []
    for pointer, paths in selection.output.items():
        parts = []
        for path in paths:
            part, membership = _walk(tree_of, path, args)
            decided |= membership
            parts.append(part)
        copied.append((tuple(pointer.split("/")[1:]), union(parts)))
    own = frozenset(decided)
    out = LabelTree(own)
    for tokens, part in copied:
        out = _insert(out, tokens, part, own)
    return out


def _value_tree(
    value: Any, ref_tree: Callable[[Reference], LabelTree], arg_labels: Callable[[Any], frozenset[str]]
) -> LabelTree:
    """The label tree of an argument value: a reference's, or a literal assembled of parts."""
    if is_reference(value):
        return ref_tree(Reference.parse(value["$ref"]))
    if isinstance(value, list) and value:
        items = {str(i): _value_tree(v, ref_tree, arg_labels) for i, v in enumerate(value)}
        return LabelTree(frozenset(), MappingProxyType(items))
    if isinstance(value, dict) and value:
        keys = arg_labels([list(value)])  # object keys the planner wrote are data too
        members = {str(k): _value_tree(v, ref_tree, arg_labels) for k, v in value.items()}
        return LabelTree(keys, MappingProxyType(members))
    return LabelTree(arg_labels(value))


def _walk(
    tree_of: Callable[[str], LabelTree], path: str, args: Mapping[str, Any]
) -> tuple[LabelTree, frozenset[str]]:
    """(the tree at an input path, with the labels on the way down; the labels of who chose the
    elements on the way: every node above and at each ``*``)."""
    head, *tokens = path.split("/")
    node = tree_of(head)
    seen = set(node.own)
    membership: set[str] = set()
    for token in tokens:
        if token == ANY:
            membership |= seen
            node = _elements(node)
            seen |= node.own
            membership |= node.own  # an element's own structure: which fields it has
            continue
        param = token[1:-1] if token.startswith("{") else None
        name: Any = args.get(param) if param is not None else token
        if param is not None and name is None:
            continue  # no field named: the element itself
        if isinstance(name, str):
            node = _child(node, name)
            seen |= node.own
        elif isinstance(name, list) and name and all(isinstance(n, str) for n in name):
            node = LabelTree(node.own, MappingProxyType({n: _child(node, n) for n in name}))
        else:  # a field named by reference (or anything else): every field
            node = LabelTree(node.everything())
            seen |= node.own
    return LabelTree(frozenset(seen), node.children), frozenset(membership)


def _child(node: LabelTree, key: str) -> LabelTree:
    """The labels of one part (an element-specific entry combined with the ``*`` one)."""
    return node.child(key) or _EMPTY


def _elements(node: LabelTree) -> LabelTree:
    """The labels of any one element of a list (or value of an object): all its entries combined."""
    return node.child(ANY) or _EMPTY


def _insert(tree: LabelTree, tokens: tuple[str, ...], part: LabelTree, own: frozenset[str]) -> LabelTree:
    """`tree` with `part` at `tokens` (``*`` as the every-element key); new nodes on the way get `own`."""
    if not tokens:
        return part
    head, rest = tokens[0], tokens[1:]
    child = tree.children.get(head) or LabelTree(own)
    return LabelTree(tree.own, MappingProxyType({**tree.children, head: _insert(child, rest, part, own)}))
