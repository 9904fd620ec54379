"""One walk over a JSON Schema document, bounded by the document's size, not its expansion.

A catalogue may declare any JSON Schema: ``$ref`` cycles through ``$defs`` (a ticket whose
``replies`` are tickets), tuples (``prefixItems``), unions (``anyOf`` / ``oneOf``),
``additionalProperties``, ``patternProperties``. Unfolding such a schema path by path can
be infinite (a cycle) or exponential (12 properties each referring to the next of 12
levels). So this walk never unfolds anything: it works on *locations* (where a subschema
sits in the document, as pointer tokens) and *positions* (the set of locations a part of a
value may match: a node, what its ``$ref`` points at, its union and ``allOf`` branches),
and memoises per location and per position. Every location is read once; a cycle is an edge
back to a location already known.

What the walk gives, per position:

- `entries`: the positions of its parts, by key: property names, tuple indices (``"0"``,
  ``"1"``, ...) and ``"*"`` for what may sit at any other key or index (``items``,
  ``additionalProperties``, every ``patternProperties`` schema: patterns are not matched,
  so a pattern's schema counts for every key, which only ever adds);
- `child`: the position of the part at one token, as JSON Schema applies it (a tuple index
  past ``prefixItems`` is ``items``; a declared property is not ``additionalProperties``);
- `keyword`: a keyword's values on the position's nodes (``x-pte-provenance``, ``type``);
- `below`: every value of a keyword anywhere strictly below the position, in one pass over
  the locations reachable from it.

`steps` counts the work done (locations read, entries merged, locations visited), so a
test can bound it by the document's size without timing anything. Local references
(``#/...`` pointers and ``#name`` anchors) are followed; any other reference stands for a
schema the walk does not know (no keywords, no parts).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any
from urllib.parse import unquote

from pte._core import array_index

__all__ = ["ANY", "Location", "Position", "SchemaWalk", "document_size", "location_order"]

#: The key for any element of an array, or any key of an object not named.
ANY = "*"
#: Where a subschema sits in the document: its pointer tokens (list indices as ints).
Location = tuple[str | int, ...]
#: The locations a part of a value may match (closed under references and in-place branches).
Position = frozenset[Location]

# Keywords whose schemas apply to the value itself (a union's branches, allOf, conditionals).
_IN_PLACE_LISTS = ("allOf", "anyOf", "oneOf")
_IN_PLACE_ONE = ("then", "else")
# Keywords whose schema applies to every other key or element.
_ANY_ONE = (
    "additionalProperties",
    "unevaluatedProperties",
    "unevaluatedItems",
    "contains",
    "additionalItems",
)
_EMPTY_POSITION: Position = frozenset()
# Concrete types: isinstance against the Mapping ABC is several times slower on this hot path
# (a tool's schema is a MappingProxyType over dicts, pte._catalogue._tool_spec).
_MAPPINGS = (dict, MappingProxyType)


def document_size(document: Any) -> int:
    """The number of JSON values in `document` (objects, arrays and scalars, keys excluded)."""
    count, stack = 0, [document]
    while stack:
        node = stack.pop()
        count += 1
        if isinstance(node, _MAPPINGS):
            stack.extend(node.values())
        elif isinstance(node, (list, tuple)):
            stack.extend(node)
    return count


class SchemaWalk:
    """A JSON Schema document, walked by location and position (see the module docstring)."""

    def __init__(self, document: Any, *, start: Location = ()) -> None:
        self.document = document
        #: Work done so far (every location read, entry merged, location visited).
        self.steps = 0
        self._nodes: dict[Location, Any] = {}
        self._closures: dict[Location, Position] = {}
        self._raw: dict[Location, tuple[tuple[str, Location], ...]] = {}
        self._entries: dict[Position, Mapping[str, Position]] = {}
        self._below: dict[tuple[Position, str], frozenset[Hashable]] = {}
        self._reached: dict[str, dict[Location, frozenset[Hashable]]] = {}
        self._below_location: dict[str, dict[Location, frozenset[Hashable]]] = {}
        self._edge_cache: dict[Location, tuple[Location, ...]] = {}
        self._anchors: dict[str, Location] | None = None
        #: The position of the whole value: the document's, or the schema at `start` in it.
        self.root: Position = self.closure([start])

    # -- locations ----------------------------------------------------------------------------

    def node(self, location: Location) -> Any:
        """The subschema at `location` (None when nothing is there)."""
        if location in self._nodes:
            return self._nodes[location]
        node: Any = self.document
        for token in location:
            if isinstance(node, _MAPPINGS) and isinstance(token, str):
                node = node.get(token)
            elif isinstance(node, (list, tuple)) and isinstance(token, int) and 0 <= token < len(node):
                node = node[token]
            else:
                node = None
                break
        self._nodes[location] = node
        return node

    def _resolve(self, ref: str) -> Location | None:
        """The location a local ``$ref`` names (None for another document, or nothing there)."""
        if not ref.startswith("#"):
            return None
        fragment = unquote(ref[1:])
        if fragment and not fragment.startswith("/"):
            return self._anchor_table().get(fragment)
        tokens: list[str | int] = []
        node: Any = self.document
        for raw in fragment.split("/")[1:] if fragment else ():
            token = raw.replace("~1", "/").replace("~0", "~")
            if isinstance(node, (list, tuple)):
                index = array_index(token)
                if index is None:
                    return None
                tokens.append(index)
                node = node[index] if index < len(node) else None
            elif isinstance(node, _MAPPINGS):
                tokens.append(token)
                node = node.get(token)
            else:
                return None
        return tuple(tokens) if node is not None else None

    def _anchor_table(self) -> dict[str, Location]:
        """``$anchor`` name -> location, read in one pass over the document."""
        if self._anchors is None:
            self._anchors = {}
            stack: list[tuple[Location, Any]] = [((), self.document)]
            while stack:
                location, node = stack.pop()
                self.steps += 1
                if isinstance(node, _MAPPINGS):
                    anchor = node.get("$anchor")
                    if isinstance(anchor, str):
                        self._anchors.setdefault(anchor, location)
                    stack.extend(((*location, k), v) for k, v in node.items() if isinstance(k, str))
                elif isinstance(node, (list, tuple)):
                    stack.extend(((*location, i), v) for i, v in enumerate(node))
        return self._anchors

    def _in_place(self, location: Location) -> Iterator[Location]:
        """The locations that apply to the same value as `location`: its reference, branches."""
        node = self.node(location)
        if not isinstance(node, _MAPPINGS):
            return
        for key in ("$ref", "$dynamicRef"):
            ref = node.get(key)
            if isinstance(ref, str):
                target = self._resolve(ref)
                if target is not None:
                    yield target
        for key in _IN_PLACE_LISTS:
            branches = node.get(key)
            if isinstance(branches, (list, tuple)):
                yield from ((*location, key, i) for i in range(len(branches)))
        for key in _IN_PLACE_ONE:
            if key in node:
                yield (*location, key)
        dependent = node.get("dependentSchemas")
        if isinstance(dependent, _MAPPINGS):
            yield from ((*location, "dependentSchemas", name) for name in dependent if isinstance(name, str))

    def closure(self, locations: Sequence[Location]) -> Position:
        """The position of a value matching every schema at `locations`: those and all that
        apply in place (references and branches), each read once per walk."""
        out: set[Location] = set()
        for start in locations:
            known = self._closures.get(start)
            if known is None:
                found: set[Location] = set()
                stack = [start]
                while stack:
                    location = stack.pop()
                    if location in found:
                        continue
                    self.steps += 1
                    found.add(location)
                    stack.extend(self._in_place(location))
                known = self._closures[start] = frozenset(found)
            out |= known
        return frozenset(out)

    def parts(self, location: Location) -> tuple[tuple[str, Location], ...]:
        """(key, location) of every part one node describes (key ``*``: any other key or index)."""
        known = self._raw.get(location)
        if known is not None:
            return known
        self.steps += 1
        node = self.node(location)
        parts: list[tuple[str, Location]] = []
        if isinstance(node, _MAPPINGS):
            properties = node.get("properties")
            if isinstance(properties, _MAPPINGS):
                parts.extend(
                    (name, (*location, "properties", name)) for name in properties if isinstance(name, str)
                )
            patterns = node.get("patternProperties")
            if isinstance(patterns, _MAPPINGS):
                parts.extend(
                    (ANY, (*location, "patternProperties", p)) for p in patterns if isinstance(p, str)
                )
            prefix = node.get("prefixItems")
            if isinstance(prefix, (list, tuple)):
                parts.extend((str(i), (*location, "prefixItems", i)) for i in range(len(prefix)))
            items = node.get("items")
            if isinstance(items, (list, tuple)):  # draft 7 tuples: "items": [...], "additionalItems"
                parts.extend((str(i), (*location, "items", i)) for i in range(len(items)))
            elif isinstance(items, _MAPPINGS):
                parts.append((ANY, (*location, "items")))
            parts.extend((ANY, (*location, key)) for key in _ANY_ONE if isinstance(node.get(key), _MAPPINGS))
        self._raw[location] = out = tuple(parts)
        return out

    # -- positions ----------------------------------------------------------------------------

    def entries(self, position: Position) -> Mapping[str, Position]:
        """The positions of a value's parts, by key (``*``: any other key or index)."""
        known = self._entries.get(position)
        if known is not None:
            return known
        found: dict[str, list[Location]] = {}
        for location in sorted(position, key=location_order):
            for key, sub in self.parts(location):
                self.steps += 1
                found.setdefault(key, []).append(sub)
        out = MappingProxyType({key: self.closure(subs) for key, subs in found.items()})
        self._entries[position] = out
        return out

    def child(self, position: Position, token: str) -> Position:
        """The position of the part at `token`, as JSON Schema applies the keywords (``*``: any
        part): a declared property or tuple index is its own schema (with every pattern's), any
        other key or index is the node's ``*`` schemas."""
        subs: list[Location] = []
        for location in sorted(position, key=location_order):
            parts = self.parts(location)
            self.steps += 1
            exact = [sub for key, sub in parts if key == token] if token != ANY else []
            if not exact:
                subs.extend(sub for key, sub in parts if token == ANY or key == ANY)
                continue
            subs.extend(exact)
            if exact[0][-2] == "properties":  # patternProperties apply to declared names too
                subs.extend(sub for key, sub in parts if key == ANY and sub[-2] == "patternProperties")
        return self.closure(subs) if subs else _EMPTY_POSITION

    def keyword(self, position: Position, key: str) -> list[Any]:
        """The values of `key` on the position's nodes (in document order)."""
        out = []
        for location in sorted(position, key=location_order):
            node = self.node(location)
            if isinstance(node, _MAPPINGS) and key in node:
                out.append(node[key])
        return out

    def below(self, position: Position, key: str) -> frozenset[Hashable]:
        """Every (hashable) value of `key` on a node strictly below `position`."""
        known = self._below.get((position, key))
        if known is None:
            found: set[Hashable] = set()
            for location in position:
                self.steps += 1
                found |= self._below_one(location, key)
            known = self._below[(position, key)] = frozenset(found)
        return known

    def _below_one(self, location: Location, key: str) -> frozenset[Hashable]:
        memo = self._below_location.setdefault(key, {})
        known = memo.get(location)
        if known is None:
            found: set[Hashable] = set()
            for _, sub in self.parts(location):
                self.steps += 1
                found |= self._reach(sub, key)
            known = memo[location] = frozenset(found)
        return known

    def _edges(self, location: Location) -> tuple[Location, ...]:
        known = self._edge_cache.get(location)
        if known is None:
            parts = (sub for _, sub in self.parts(location))
            known = self._edge_cache[location] = (*self._in_place(location), *parts)
        return known

    def _reach(self, start: Location, key: str) -> frozenset[Hashable]:
        """The values of `key` at `start` and every location reachable from it (by references,
        branches and parts). One pass over the locations for all starts (Tarjan's strongly
        connected components: a cycle's locations share one answer), each location once."""
        done = self._reached.setdefault(key, {})
        if start in done:
            return done[start]
        index: dict[Location, int] = {start: 0}
        low: dict[Location, int] = {start: 0}
        stack, on_stack = [start], {start}
        work = [(start, iter(self._edges(start)))]
        while work:
            location, edges = work[-1]
            for succ in edges:
                self.steps += 1
                if succ in done:
                    continue
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(self._edges(succ))))
                    break
                if succ in on_stack:
                    low[location] = min(low[location], index[succ])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[location])
                if low[location] == index[location]:  # the root of a component: settle it
                    members = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        members.append(member)
                        if member == location:
                            break
                    values: set[Hashable] = set()
                    for member in members:
                        node = self.node(member)
                        if isinstance(node, _MAPPINGS) and key in node and isinstance(node[key], Hashable):
                            values.add(node[key])
                        values.update(*(done[s] for s in self._edges(member) if s in done))
                    settled = frozenset(values)
                    for member in members:
                        done[member] = settled
        return done[start]


def location_order(location: Location) -> tuple[tuple[int, str], ...]:
    """A total order on locations (ints and strings mixed), for deterministic output."""
    return tuple((0, str(t)) if isinstance(t, int) else (1, t) for t in location)
