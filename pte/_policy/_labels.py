"""Field-level provenance: label sets per part of a value, addressed by JSON Pointer.

A `LabelTree` gives the labels of a value at the granularity its producer declared: a
tool's output is ``trusted`` except ``/transactions/*/subject``, which is ``untrusted``
(``*`` stands for every element of an array, or every key of an object). Selecting a part
of a value collects the labels on the way down (whoever chose the structure chose what is
selected) and every label below the selected part:

- ``tx/transactions/0/amount`` → ``{trusted}``;
- ``tx/transactions/0/subject`` → ``{trusted, untrusted}``;
- ``tx/transactions`` (the whole list) → ``{trusted, untrusted}``.

`membership` is what a ``for_each`` over a list inherits for every call: the labels of
whoever chose which elements the list has (the path down to it), not the elements' contents.
`length` is the same set read as a list's *length label*: what ``empty`` / ``nonempty``
conditions, ``for_each`` counts and a ``require`` on a list depend on. A list's own labels
(its node, not its elements) are who chose how many elements, and which, it has: the source
list's length joined with, after a filter, the fields its predicate read (pte._policy._shaping_labels).

Element-specific labels never replace the ``*`` labels: a label on ``/items/0/note`` is
combined with the one on ``/items/*/note`` (the most restrictive wins, as both are kept),
and selecting ``/items/*`` (every element) collects every element-specific label too.

A tool's output schema labels its parts at every depth (`SchemaLabels`): a recursive model
(a ticket whose ``replies`` are tickets), tuple positions, union branches. Such a tree is
walked lazily over the schema (pte._catalogue's `SchemaWalk`): a node per (schema position,
inherited labels), made when first asked for, so a cycle in the schema is a cycle among
nodes, never an unfolding, and `everything` is one pass over the schema.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from pydantic import Field

from pte._catalogue import Location, Position, SchemaWalk, document_size, location_order

__all__ = [
    "ANY",
    "PROVENANCE_KEY",
    "LabelTree",
    "SchemaLabels",
    "parse_field_pointer",
    "provenance",
    "schema_fields",
    "union",
]

#: The JSON Schema keyword by which a tool labels a part of its output (see `provenance`).
PROVENANCE_KEY = "x-pte-provenance"

#: The pointer token that stands for every array element or object key.
ANY = "*"
_EMPTY: Mapping[str, LabelTree] = MappingProxyType({})


def parse_field_pointer(pointer: str) -> tuple[str, ...]:
    """The tokens of an RFC 6901 JSON Pointer (``/transactions/*/subject``); ValueError if malformed."""
    if not pointer.startswith("/"):
        raise ValueError(f"a field pointer starts with '/': {pointer!r}")
    tokens = []
    for raw in pointer[1:].split("/"):
        if "~" in raw.replace("~0", "").replace("~1", ""):
            raise ValueError(f"bad escape in field pointer {pointer!r}")
        tokens.append(raw.replace("~1", "/").replace("~0", "~"))
    return tuple(tokens)


@dataclass(frozen=True)
class LabelTree:
    """Labels of a value: `own` for the node (its structure, and everything not below a child)
    and `children` by key (``*``: every element or key)."""

    own: frozenset[str]
    children: Mapping[str, LabelTree] = field(default_factory=lambda: _EMPTY)

    @classmethod
    def leaf(cls, labels: Iterable[str]) -> LabelTree:
        """One label set for the whole value."""
        return cls(frozenset(labels))

    @classmethod
    def from_fields(cls, own: Iterable[str], fields: Mapping[str, str]) -> LabelTree:
        """`own` for the whole value, with the parts at each pointer labelled as given."""
        return cls.leaf(own).with_fields(fields)

    def with_fields(self, fields: Mapping[str, str]) -> LabelTree:
        """This tree with the part at each pointer labelled as given (that part's own labels
        replaced; the labels on the way down still count when it is selected)."""
        tree = self
        for pointer, label in sorted(fields.items()):
            tree = tree._overlay(parse_field_pointer(pointer), frozenset({label}))
        return tree

    def _overlay(self, tokens: tuple[str, ...], labels: frozenset[str]) -> LabelTree:
        if not tokens:
            return LabelTree(labels, self.children)
        head, rest = tokens[0], tokens[1:]
        child = self.children.get(head) or LabelTree(self.own)
        return LabelTree(self.own, MappingProxyType({**self.children, head: child._overlay(rest, labels)}))

    @property
    def is_leaf(self) -> bool:
        return not self.children

    def everything(self) -> frozenset[str]:
        """Every label anywhere in the value."""
        out = set(self.own)
        for child in self.children.values():
            out |= child.everything()
        return frozenset(out)

    def child(self, token: str) -> LabelTree | None:
        """The labels of the part at `token`: an element-specific entry combined with the ``*``
        entry (never one instead of the other); for ``*`` itself, every entry. None when no
        entry covers it (the part is uniform: this node's own labels cover it)."""
        if token == ANY:
            found = list(self.children.values())
        else:
            found = [c for c in (self.children.get(token), self.children.get(ANY)) if c is not None]
        if not found:
            return None
        return found[0] if len(found) == 1 else _Union.of(found)

    def _walk(self, tokens: Iterable[str]) -> tuple[set[str], LabelTree | None]:
        node = self
        seen = set(node.own)
        for token in tokens:
            child = node.child(token)
            if child is None:
                return seen, None  # uniform below `node`: its own labels cover the rest
            node = child
            seen |= node.own
        return seen, node

    def select(self, tokens: Iterable[str]) -> frozenset[str]:
        """The labels of the part a pointer selects (see the module docstring)."""
        seen, node = self._walk(tokens)
        if node is not None:
            seen |= node.everything()
        return frozenset(seen)

    def membership(self, tokens: Iterable[str]) -> frozenset[str]:
        """The labels of the path down to a part, not of its contents (what a for_each inherits)."""
        seen, _ = self._walk(tokens)
        return frozenset(seen)

    def length(self, tokens: Iterable[str]) -> frozenset[str]:
        """The length label of the list (or string, or object) a pointer selects: who chose how
        many elements, and which, it has (what ``empty`` / ``nonempty`` and a for_each count
        depend on): the labels on the path down to it and its own, not its elements'."""
        return self.membership(tokens)

    def least(self, tokens: Iterable[str]) -> frozenset[str]:
        """The labels every part a pointer may name is sure to carry: the labels on the path down
        to it, where ``*`` is an element (or key) no entry names (only the ``*`` entry covers it,
        so it carries the fewest). Where a written value lands (pte._policy._storage): every
        label of the landing's must cover what is stored there, whichever element it becomes."""
        node: LabelTree | None = self
        seen = set(self.own)
        for token in tokens:
            assert node is not None
            node = node.children.get(ANY) if token == ANY else node.child(token)
            if node is None:
                break  # uniform below: the labels so far cover the rest
            seen |= node.own
        return frozenset(seen)

    def subtree(self, tokens: Iterable[str]) -> LabelTree:
        """The tree of the selected part, with the labels on the way down added to its own."""
        seen, node = self._walk(tokens)
        if node is None:
            return LabelTree.leaf(seen)
        return LabelTree(frozenset(seen), node.children)

    def with_own(self, extra: Iterable[str]) -> LabelTree:
        """The same tree with `extra` labels on the whole value (an implicit flow)."""
        extra = frozenset(extra)
        if extra <= self.own:
            return self
        return LabelTree(self.own | extra, self.children)


def union(trees: Iterable[LabelTree]) -> LabelTree:
    """Labels of one part that each of `trees` labels (an element's entry and the ``*`` entry,
    or a value that may be either's): every label of every tree, at every depth, so the most
    restrictive wins. Lazy: parts are combined when they are asked for, so combining two
    trees over cyclic schemas never unfolds them."""
    return _Union.of(trees)


class _Union(LabelTree):
    """The lazy union of several trees (see `union`)."""

    _parts: tuple[LabelTree, ...]

    def __init__(self, parts: tuple[LabelTree, ...]) -> None:
        object.__setattr__(self, "own", frozenset().union(*(p.own for p in parts)))
        object.__setattr__(self, "children", _UnionChildren(parts))
        object.__setattr__(self, "_parts", parts)

    @classmethod
    def of(cls, trees: Iterable[LabelTree]) -> LabelTree:
        parts: list[LabelTree] = []
        for tree in trees:
            parts.extend(tree._parts if isinstance(tree, _Union) else (tree,))
        unique = tuple({id(p): p for p in parts}.values())  # by identity, in order
        if not unique:
            return LabelTree(frozenset())
        return unique[0] if len(unique) == 1 else cls(unique)

    def everything(self) -> frozenset[str]:
        known: frozenset[str] | None = self.__dict__.get("_everything")
        if known is None:
            known = frozenset().union(*(p.everything() for p in self._parts))
            object.__setattr__(self, "_everything", known)
        return known

    __eq__ = object.__eq__
    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return f"LabelTree.union({len(self._parts)} trees, own={sorted(self.own)})"


class _UnionChildren(Mapping[str, LabelTree]):
    """A union's parts by key: each tree's entry for the key, or its ``*`` entry (which covers
    a key a tree does not name)."""

    def __init__(self, parts: tuple[LabelTree, ...]) -> None:
        self._parts = parts
        self._keys = tuple(dict.fromkeys(key for part in parts for key in part.children))
        self._made: dict[str, LabelTree] = {}

    def __getitem__(self, key: str) -> LabelTree:
        made = self._made.get(key)
        if made is not None:
            return made
        if key not in self._keys:
            raise KeyError(key)
        found = []
        for part in self._parts:
            entry = part.children.get(key)
            if entry is None and key != ANY:
                entry = part.children.get(ANY)
            if entry is not None:
                found.append(entry)
        made = self._made[key] = union(found)
        return made

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def __repr__(self) -> str:
        return f"<parts {list(self._keys)}>"


class SchemaLabels:
    """The labels a tool's output schema declares (``x-pte-provenance``), at every depth.

    `tree(own)` is the label tree of an output whose own labels are `own` (the tool's
    declared output provenance): a part whose schema is marked with a label carries it, an
    unmarked one its parent's. Nodes are made lazily, one per (schema location, inherited
    labels); a part that may match several schemas (a union, a tuple position and ``items``)
    is the `union` of theirs. So a recursive schema is a finite cyclic tree, and there are at
    most a few nodes per location of the schema document, however far its references fan out.
    """

    def __init__(self, schema: Mapping[str, Any]) -> None:
        self.schema = schema
        self.walk = SchemaWalk(schema)
        self._nodes: dict[tuple[Position, frozenset[str]], _SchemaNode] = {}
        self._trees: dict[frozenset[str], LabelTree] = {}

    @property
    def labelled(self) -> bool:
        """Whether any part below the whole output is marked with a label."""
        return bool(self.labels_below(self.walk.root))

    def tree(self, own: Iterable[str]) -> LabelTree:
        """The labels of an output whose own labels are `own` (a leaf when nothing is marked)."""
        own = frozenset(own)
        made = self._trees.get(own)
        if made is None:
            made = self._trees[own] = self.node((), own) if self.labelled else LabelTree(own)
        return made

    def node(self, location: Location, own: frozenset[str]) -> _SchemaNode:
        """The node of a part matching the schema at `location`, with `own` labels."""
        position = self.walk.closure([location])
        made = self._nodes.get((position, own))
        if made is None:
            made = self._nodes[(position, own)] = _SchemaNode(self, position, own)
        return made

    def part(self, location: Location, inherited: frozenset[str]) -> _SchemaNode:
        """The node of a part matching the schema at `location` below a node labelled `inherited`.

        Nodes are keyed by the locations that have parts (a bare ``$ref`` has none: twelve
        properties referring to one definition share its node), and by their labels."""
        position = self.walk.closure([location])
        own = self.labels_at(position) or inherited
        core = frozenset(loc for loc in position if self.walk.parts(loc))
        made = self._nodes.get((core, own))
        if made is None:
            made = self._nodes[(core, own)] = _SchemaNode(self, core, own)
        return made

    def labels_at(self, position: Position) -> frozenset[str]:
        return frozenset(v for v in self.walk.keyword(position, PROVENANCE_KEY) if v in _FIELD_LABELS)

    def labels_below(self, position: Position) -> frozenset[str]:
        return frozenset(v for v in self.walk.below(position, PROVENANCE_KEY) if v in _FIELD_LABELS)


_FIELD_LABELS = frozenset({"trusted", "untrusted"})


class _SchemaNode(LabelTree):
    """One node of a `SchemaLabels` tree: a schema position with the labels it carries."""

    _labels: SchemaLabels
    _position: Position

    def __init__(self, labels: SchemaLabels, position: Position, own: frozenset[str]) -> None:
        object.__setattr__(self, "own", own)
        object.__setattr__(self, "children", _SchemaChildren(labels, position, own))
        object.__setattr__(self, "_labels", labels)
        object.__setattr__(self, "_position", position)

    def everything(self) -> frozenset[str]:
        # Every node below carries its own mark or its parent's: one pass over the schema finds them.
        return self.own | self._labels.labels_below(self._position)

    __eq__ = object.__eq__
    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return f"LabelTree(own={sorted(self.own)}, schema parts={list(self.children)})"


class _SchemaChildren(Mapping[str, LabelTree]):
    """A schema node's parts by key, made when asked for."""

    def __init__(self, labels: SchemaLabels, position: Position, own: frozenset[str]) -> None:
        self._labels = labels
        self._own = own
        self._subs: dict[str, list[Location]] = {}
        for location in sorted(position, key=location_order):
            for key, sub in labels.walk.parts(location):
                labels.walk.steps += 1
                self._subs.setdefault(key, []).append(sub)
        self._made: dict[str, LabelTree] = {}

    def __getitem__(self, key: str) -> LabelTree:
        made = self._made.get(key)
        if made is None:
            made = self._made[key] = union(self._labels.part(sub, self._own) for sub in self._subs[key])
        return made

    def __iter__(self) -> Iterator[str]:
        return iter(self._subs)

    def __len__(self) -> int:
        return len(self._subs)

    def __repr__(self) -> str:
        return f"<schema parts {list(self._subs)}>"


def provenance(label: Literal["trusted", "untrusted"]) -> Any:
    """Label a field of a tool's output model: ``subject: Annotated[str, provenance("untrusted")]``.

    The label is written into the output JSON Schema (``x-pte-provenance``), so it is part
    of the catalogue the run records; the policy reads it as if a policy file said
    ``{"fields": {"/transactions/*/subject": "untrusted"}}`` (a policy file can still override it).
    """
    if label not in ("trusted", "untrusted"):
        raise ValueError(f"a field's provenance is trusted or untrusted, not {label!r}")
    return Field(json_schema_extra={PROVENANCE_KEY: label})


def schema_fields(schema: Mapping[str, Any], schema_walk: SchemaWalk | None = None) -> dict[str, str]:
    """JSON Pointer -> label for the parts of an output schema marked with `provenance`.

    A listing (for the policy document, the catalogue fingerprint and ``pte tools``): each
    ``$ref`` is followed once per path, as policy files write pointers. The labels themselves
    hold at every depth through `SchemaLabels`, which this listing does not limit. A schema
    whose listing would outgrow its own size (a fan-out of references: 12 properties each
    referring to the next of 12 levels lists 12**12 paths) lists each marked part once, by
    the first path that reaches it.
    """
    size = document_size(schema)
    budget = 64 + 4 * size
    out: dict[str, str] = {}
    steps = 0

    def walk(node: Any, tokens: tuple[str, ...], seen: frozenset[str]) -> None:
        nonlocal steps
        steps += 1
        if steps > budget:
            raise _TooLarge
        if not isinstance(node, Mapping) or len(tokens) > 16:
            return
        label = node.get(PROVENANCE_KEY)
        # Union branches (or a tuple position and items) may mark one part differently: the
        # part may be either, so untrusted wins (as in `_first_paths`); the last branch did.
        if label in _FIELD_LABELS and tokens and out.get(_pointer(tokens)) != "untrusted":
            out[_pointer(tokens)] = label
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/") and ref not in seen:
            walk(schema.get("$defs", {}).get(ref[len("#/$defs/") :]), tokens, seen | {ref})
        for key in ("anyOf", "oneOf", "allOf"):
            for branch in node.get(key, ()):
                walk(branch, tokens, seen)
        for name, sub in node.get("properties", {}).items():
            walk(sub, (*tokens, name), seen)
        for key in ("items", "additionalProperties"):
            walk(node.get(key), (*tokens, ANY), seen)

    try:
        walk(schema, (), frozenset())
    except _TooLarge:
        return _first_paths(schema_walk or SchemaWalk(schema))
    if len(out) > size:  # the walk fit its budget, but the listing outgrew the schema
        return _first_paths(schema_walk or SchemaWalk(schema))
    return out


class _TooLarge(Exception):
    """The path-by-path listing outgrew its budget."""


def _first_paths(walk: SchemaWalk) -> dict[str, str]:
    """Each marked part of the walk's schema once, by the first (shortest) path that reaches it."""
    out: dict[str, str] = {}
    queue: list[tuple[Location, tuple[str, ...]]] = [
        (location, ()) for location in sorted(walk.root, key=location_order)
    ]
    seen = set(walk.root)
    for location, tokens in queue:  # breadth first: the queue grows while it is read
        for key, sub in walk.parts(location):
            path = (*tokens, key)
            for found in sorted(walk.closure([sub]) - seen, key=location_order):
                seen.add(found)
                node = walk.node(found)
                label = node.get(PROVENANCE_KEY) if isinstance(node, (dict, MappingProxyType)) else None
                if label in _FIELD_LABELS and out.get(_pointer(path)) != "untrusted":
                    out[_pointer(path)] = label
                queue.append((found, path))
    return out


def _pointer(tokens: tuple[str, ...]) -> str:
    return "".join("/" + t.replace("~", "~0").replace("/", "~1") for t in tokens)
