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
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from pydantic import Field

__all__ = ["ANY", "PROVENANCE_KEY", "LabelTree", "parse_field_pointer", "provenance", "schema_fields"]

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
        tree = cls.leaf(own)
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
        out = found[0]
        for other in found[1:]:
            out = _combine(out, other)
        return out

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


def _combine(a: LabelTree, b: LabelTree) -> LabelTree:
    """Two label trees of the same part (an element's entry and the ``*`` entry) as one: every
    label of either, at every depth (the most restrictive wins because both are kept)."""
    if a is b:
        return a
    children: dict[str, LabelTree] = {}
    for key in {*a.children, *b.children}:
        mine, theirs = a.children.get(key), b.children.get(key)
        if key != ANY:  # an entry one side lacks is covered there by its '*' entry, if any
            mine = mine or a.children.get(ANY)
            theirs = theirs or b.children.get(ANY)
        parts = [c for c in (mine, theirs) if c is not None]
        children[key] = parts[0] if len(parts) == 1 else _combine(parts[0], parts[1])
    return LabelTree(a.own | b.own, MappingProxyType(children))


def provenance(label: Literal["trusted", "untrusted"]) -> Any:
    """Label a field of a tool's output model: ``subject: Annotated[str, provenance("untrusted")]``.

    The label is written into the output JSON Schema (``x-pte-provenance``), so it is part
    of the catalogue the run records; the policy reads it as if a policy file said
    ``{"fields": {"/transactions/*/subject": "untrusted"}}`` (a policy file can still override it).
    """
    if label not in ("trusted", "untrusted"):
        raise ValueError(f"a field's provenance is trusted or untrusted, not {label!r}")
    return Field(json_schema_extra={PROVENANCE_KEY: label})


def schema_fields(schema: Mapping[str, Any]) -> dict[str, str]:
    """JSON Pointer -> label for every part of an output schema marked with `provenance`."""
    out: dict[str, str] = {}

    def pointer(tokens: tuple[str, ...]) -> str:
        return "".join("/" + t.replace("~", "~0").replace("/", "~1") for t in tokens)

    def walk(node: Any, tokens: tuple[str, ...], seen: frozenset[str]) -> None:
        if not isinstance(node, Mapping) or len(tokens) > 16:
            return
        label = node.get(PROVENANCE_KEY)
        if label in ("trusted", "untrusted") and tokens:
            out[pointer(tokens)] = label
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

    walk(schema, (), frozenset())
    return out
