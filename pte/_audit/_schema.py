"""The audit record schema: loading it, checking records against it, compiling it for `verify`.

`schemas/audit-record.schema.json` is the one definition. `verify` (pte._audit._verify)
checks each record against its type's branch: msgspec types compiled from it decide on the
fast path (pte._audit._fast), jsonschema-rs decides elsewhere, and jsonschema words the
message of a record that fails.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema_rs
from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

from pte._audit._fast import FastPath, Unsupported, compile_fast_path

_SCHEMA_FILE = "audit-record.schema.json"


def _schema_path() -> Path:
    here = Path(__file__).resolve()
    for candidate in (
        here.parents[1] / "_data" / "schemas" / _SCHEMA_FILE,
        here.parents[2] / "schemas" / _SCHEMA_FILE,
    ):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"{_SCHEMA_FILE} not found (broken installation?)")


@cache
def _schema_text() -> str:
    return _schema_path().read_text(encoding="utf-8")


def load_audit_schema() -> dict[str, Any]:
    """The audit record JSON Schema (a fresh copy: the packaged one first, else the repo's)."""
    schema: dict[str, Any] = json.loads(_schema_text())
    return schema


@dataclass(frozen=True)
class _TypeChecker:
    """The schema of one record type: a compiled (jsonschema-rs) check, and jsonschema to explain.

    `fast` decides; the pure-Python `validator` only runs on a record `fast` rejects, to word
    the message (its best match names the real problem), and decides alone for the rare
    record jsonschema-rs cannot take in (a dict with non-string keys cannot come from JSON).
    jsonschema-rs follows ECMA-262 regex semantics as JSON Schema requires: ``$`` does not
    match before a trailing newline, as Python's `re` would.
    """

    validator: Draft202012Validator
    fast: Any

    def problem(self, record: Mapping[str, Any]) -> str | None:
        """None when `record` is valid, else the best error message."""
        try:
            if self.fast.is_valid(record):
                return None
            first = next(iter(self.fast.iter_errors(record)), None)
        except (ValueError, TypeError, OverflowError):
            if self.validator.is_valid(record):
                return None
            first = None
        error = best_match(self.validator.iter_errors(record))
        if error is None:  # jsonschema-rs is stricter here: report its finding
            if first is None:
                return "invalid"
            where = "$" + "".join(
                f"[{part}]" if isinstance(part, int) else f".{part}" for part in first.instance_path
            )
            return str(first.message) + (f" (at {where})" if where != "$" else "")
        where = error.json_path
        return f"{error.message}" + (f" (at {where})" if where != "$" else "")


@cache
def _branches() -> dict[str, dict[str, Any]]:
    """Record type -> its branch of the schema, dereferenced.

    Dispatching on ``type`` is equivalent to the schema's ``oneOf`` (each branch pins ``type``
    with ``const``) but validates one branch instead of all, and names the real problem
    instead of "not valid under any of the given schemas". Each branch is used in
    dereferenced form (resolving ``$ref`` through the registry for every record cost 7x).
    """
    schema = load_audit_schema()
    defs = schema["$defs"]
    out: dict[str, dict[str, Any]] = {}
    for branch in schema["oneOf"]:
        name = branch["$ref"].rsplit("/", 1)[-1]
        type_name = defs[name]["properties"]["type"]["const"]
        out[type_name] = {"$schema": schema["$schema"], **_inline_refs(defs[name], defs, frozenset())}
    return out


@cache
def _checkers() -> dict[str, _TypeChecker]:
    """One checker per record type, built once.

    jsonschema needs ~20-100 µs per record, i.e. minutes for a million-record log, so each
    branch is also compiled by jsonschema-rs (~2 µs per record), which decides.
    """
    return {
        type_name: _TypeChecker(Draft202012Validator(inlined), jsonschema_rs.validator_for(inlined))
        for type_name, inlined in _branches().items()
    }


@cache
def _fast_path() -> FastPath | None:
    """The schema compiled for `verify`'s fast path (pte._audit._fast), None if it cannot be.

    ``run_started``, ``approval`` and the endorsement records always take the reference
    path: their checks (stored content, signatures) need the parsed record. ``prev`` and
    ``hash`` need no pattern check there: the fast path only accepts them equal to hashes it
    computed.
    """
    try:
        return compile_fast_path(
            _branches(),
            exclude=frozenset({"run_started", "approval", "endorsement", "endorsement_rejected"}),
            implied=frozenset({"prev", "hash"}),
        )
    except (Unsupported, TypeError):  # TypeError: a type this msgspec cannot build
        return None  # the reference path alone then checks every line (tests require the fast one)


def _inline_refs(node: Any, defs: Mapping[str, Any], seen: frozenset[str]) -> Any:
    """`node` with every local ``{"$ref": "#/$defs/<name>"}`` replaced by that definition."""
    if isinstance(node, list):
        return [_inline_refs(item, defs, seen) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str):
        name = ref.removeprefix("#/$defs/")
        if name == ref or name not in defs or len(node) != 1:
            raise ValueError(f"audit schema: unsupported $ref {ref!r} (only bare #/$defs/<name> refs)")
        if name in seen:
            raise ValueError(f"audit schema: recursive $ref {ref!r}")
        return _inline_refs(defs[name], defs, seen | {name})
    return {key: _inline_refs(value, defs, seen) for key, value in node.items()}


def _schema_problem(record: Mapping[str, Any]) -> str | None:
    rtype = record.get("type")
    checker = _checkers().get(rtype) if isinstance(rtype, str) else None
    if checker is None:
        return f"unknown record type {rtype!r}"
    return checker.problem(record)
