"""Labels survive storage: where a write lands, and what the read that returns it declares.

PTE cannot see a deployment's database, so a value written by one call and read back by
another would lose its label on the way: a planner writes the attacker's IBAN into a
scheduled transaction's free-text ``subject`` (a parameter open to untrusted text), reads
the scheduled transactions back (declared trusted) and pays the IBAN it finds there.

So a policy says where a write lands (schemas/policy.schema.json, ``stores``)::

    {"tools": {"schedule_transaction": {"stores": {
        "subject": [{"read": "get_scheduled_transactions", "field": "/*/subject"}]}}}}

and a policy in which a parameter that accepts untrusted data lands in a field that its read
declares trusted is refused when it is built (`PolicyError`), with the two declarations that
would fix it. The check is per landing field and per element: the landing itself must be
declared untrusted (an untrusted ``/*/note`` does not cover text landing at ``/*``, whose
``subject`` would come back trusted), and at a ``*`` for every element (an untrusted
``/0/subject`` does not cover ``/*/subject``: the text may land in element 1). Declaring
the field untrusted is usually right: then the compile-time labels carry the value's label
through storage, and a payment to an IBAN read back from there is refused like one read
from an e-mail.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from pte._core import PTEError
from pte._policy._labels import parse_field_pointer
from pte._policy._tool_policy import Landing, PolicyEntries

__all__ = ["check_stores"]


def check_stores(policy: PolicyEntries, source: str, error: type[PTEError]) -> None:
    """Raise `error` when a write parameter open to untrusted data lands in a field its read
    declares trusted (see the module docstring); also when a declaration names no such read."""
    for writer, entry in sorted(policy.tools.items()):
        if not entry.stores:
            continue
        effective = policy.effective(writer)
        for param, landings in entry.stores.items():
            allowed = effective.sinks.get(param)
            for read, pointer in landings:
                _check_one(policy, source, error, writer, param, allowed, read, pointer)


def _check_one(
    policy: PolicyEntries,
    source: str,
    error: type[PTEError],
    writer: str,
    param: str,
    allowed: frozenset[str] | None,
    read: str,
    pointer: str,
) -> None:
    where = f"policy {source!r}: {writer}.{param} is stored where {read} returns {pointer}"
    try:
        tokens = parse_field_pointer(pointer)
    except ValueError as exc:
        raise error(f"{where}: {exc}") from None
    if read not in policy.tools:
        raise error(f"{where}, but {read!r} is not a tool this policy knows")
    tree = policy.tools[read].output_tree()
    if tree is None:
        raise error(
            f"{where}, but {read} is derived (its output has its inputs' labels): "
            "a read that returns stored data declares its output trusted or untrusted"
        )
    if allowed is not None and "untrusted" not in allowed:
        return  # only request/trusted data can be stored there
    if "untrusted" in tree.least(tokens):
        return  # the read says whatever is stored there is untrusted, in every element: the label survives
    opens = "accepts any data" if allowed is None else "accepts untrusted data"
    fix_field = json.dumps({"tools": {read: {"fields": {pointer: "untrusted"}}}})
    fix_sink = json.dumps({"tools": {writer: {"sinks": {param: ["request", "trusted"]}}}})
    raise error(
        f"{where}, which it declares trusted, but {writer}.{param} {opens}: untrusted text would come "
        f"back as trusted data. Declare the field untrusted ({fix_field}) or guard the parameter "
        f"({fix_sink})"
    )


def parse_stores(document: Mapping[str, object]) -> dict[str, tuple[Landing, ...]]:
    """The ``stores`` of a policy-file tool entry: parameter -> its landings."""
    out: dict[str, tuple[Landing, ...]] = {}
    for param, landings in document.items():
        assert isinstance(landings, list)  # the policy schema checked the shape
        out[param] = tuple((str(item["read"]), str(item["field"])) for item in landings)
    return out
