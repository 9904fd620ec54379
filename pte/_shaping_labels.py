"""Field labels through shaping: the stock data operations keep each field's own labels.

A ``derived`` tool's output is, by default, as trusted as the least trusted of its inputs:
the union of every argument's labels (`pte._policy`). For the stock shaping operations
(``tools/shaping.py``) PTE knows exactly which input parts each output part is copied from,
so it labels the output by field instead (`pte._labels.LabelTree`):

- ``pluck`` / ``pluck_numbers`` / ``pluck_text`` (``{values, count}``): each value has the
  labels of that field of the records; ``pluck(tx/transactions, "amount")/values/0`` is
  ``trusted`` even though the transactions' subjects are ``untrusted``;
- ``filter_records``, ``sort_records``, ``take``, ``pick`` (``{records, count}``): each
  record keeps its labels (``pick`` keeps the whole record's: a conservative bound);
- ``first`` (``{record}``): the record's labels; ``count``: only the list's membership;
- ``sum_field`` / ``group_sum``: the summed (and grouping) fields' labels.

What decides *which* elements, in which order, come out is a flow too: the labels of the
list's membership, of every other argument (the field name, the operator, the value
compared with, ``n``), and for ``filter_records`` and ``sort_records`` of the compared
field's values in every record, go on the output's own node, which every selection below it
collects. So an amount from a record a subject filter chose carries ``untrusted``.

Conservative by construction: only a step calling a tool with the stock tool's name *and*
the stock tool's code hash (which recorded catalogues keep for replay) is labelled this way,
only when its list argument is one reference; a field name given by reference stands for
every field. Anything else, including every other derived tool, keeps the union.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from pte._labels import ANY, LabelTree
from pte._plan import Reference, is_reference

__all__ = ["shaped_tree"]


@dataclass(frozen=True)
class _Operation:
    #: "column" (values from one field), "rows" (records kept whole), "first", "count", "scalar".
    kind: str
    #: The parameter naming the field the output copies (column) or reads (scalar), if any.
    field: str | None = None
    #: Parameters naming fields whose values decide membership or order (filter, sort) or a sum.
    deciding_fields: tuple[str, ...] = ()


_OPERATIONS: Mapping[str, _Operation] = MappingProxyType(
    {
        "pluck": _Operation("column", field="field"),
        "pluck_numbers": _Operation("column", field="field"),
        "pluck_text": _Operation("column", field="field"),
        "pick": _Operation("rows"),
        "filter_records": _Operation("rows", deciding_fields=("field",)),
        "sort_records": _Operation("rows", deciding_fields=("by",)),
        "take": _Operation("rows"),
        "first": _Operation("first"),
        "count": _Operation("count"),
        "sum_field": _Operation("scalar", deciding_fields=("field",)),
        "group_sum": _Operation("scalar", deciding_fields=("key", "field")),
    }
)
#: The list parameter of every operation above.
_LIST = "records"


@functools.cache
def _stock_code_hashes() -> Mapping[str, str]:
    """name -> code hash of the stock shaping tools this PTE ships."""
    from pte._registry import load_pack  # local: pte._registry is heavier than this module needs at import

    registry = load_pack("shaping")
    return MappingProxyType({name: registry[name].code_sha256 for name in _OPERATIONS if name in registry})


def _is_stock(spec: Any) -> bool:
    name = getattr(spec, "name", None)
    return (
        isinstance(name, str)
        and name in _OPERATIONS
        and getattr(spec, "provenance", None) == "derived"
        and _stock_code_hashes().get(name) == getattr(spec, "code_sha256", None)
    )


def shaped_tree(
    spec: Any,
    args: Mapping[str, Any],
    ref_tree: Callable[[Reference], LabelTree],
    arg_labels: Callable[[Any], frozenset[str]],
) -> LabelTree | None:
    """The field labels of a stock shaping step's output, or None (then: the union of its inputs).

    `ref_tree(ref)` is the label tree of the part a reference selects; `arg_labels(value)`
    the labels of an argument value (literals and references).
    """
    if spec is None or not _is_stock(spec):
        return None
    operation = _OPERATIONS[str(spec.name)]
    records = args.get(_LIST)
    if records is None or not is_reference(records):
        return None  # a literal list, or one assembled from parts: keep the union
    listed = ref_tree(Reference.parse(records["$ref"]))
    if set(listed.children) - {ANY}:
        return None  # labels for particular indexes: keep the union
    element = listed.subtree((ANY,))
    decided = set(listed.own)  # who chose the list's elements
    for name, value in args.items():
        if name != _LIST:
            decided |= arg_labels(value)  # who chose the field, the operator, the value, n
    for param in operation.deciding_fields:
        decided |= _field(element, args.get(param)).everything()
    own = frozenset(decided)
    if operation.kind == "column":
        values = _field(element, args.get(operation.field or ""))
        return _node(own, values=_node(own, **{ANY: values}), count=LabelTree(own))
    if operation.kind == "rows":
        return _node(own, records=_node(own, **{ANY: element}), count=LabelTree(own))
    if operation.kind == "first":
        return _node(own, record=element)
    # count, sum_field, group_sum: one label set for the whole (small) output
    return LabelTree(own)


def _field(element: LabelTree, name: Any) -> LabelTree:
    """The labels of field `name` of an element; every field's when the name is not a literal."""
    if isinstance(name, str):
        return element.subtree((name,))
    return LabelTree(element.everything())


def _node(own: frozenset[str], **children: LabelTree) -> LabelTree:
    return LabelTree(own, MappingProxyType(children))
