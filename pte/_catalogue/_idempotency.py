"""Idempotency keys: exactly-once for non-idempotent writes across a crash.

A write tool may declare one of its string parameters as its *idempotency key*
(``@pte.tool(effect="write", idempotency_key="idempotency_key")``), the way a payment API
takes an ``Idempotency-Key`` header: the tool promises that two calls with the same key have
the effect of one (it keeps the keys it has seen and returns the first call's result).

PTE, not the plan, fills that parameter. Before every call the executor derives the key from
the run id (the audit log's, chosen by the engine), the plan's hash and the step id
(``id[i]`` for an element of a ``for_each``): `derive_key`. Nothing a planner or a tool output
can choose goes in but the step id, which is unique within a plan and hashed together with
the run id, so no plan can make two runs, two plans or two steps share a key. The compiler
refuses a plan that supplies the parameter itself (``invalid_args``, a check in
`pte._plan._args`), the planner never sees it in the catalogue, and the executor
overwrites it anyway.

The key is part of the step's arguments, so it is written in its ``step_started`` record
(the write-ahead record) before the call. On resume, a step of such a tool whose
``step_started`` has no ``step_finished`` (it may or may not have taken effect) is called
again with the *same* key, which the replayed run derives again and checks against the
record: the tool applies it once, whatever the crash interrupted. A write tool without a
key still ends the resume ``needs_review``. A log edited to carry another key does not
verify, and re-chained it diverges on replay and resume (the engine derives the key itself).

The key is the same for a replan that submits the very same plan in the same run: the same
write, with the same intent, is deduplicated rather than applied twice.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from pte._core import canonical_json

__all__ = ["KEY_PREFIX", "derive_key", "key_schema_error"]

#: Every derived key starts with this (then 64 hex digits): easy to recognise in a tool's store.
KEY_PREFIX = "pte-"
_DOMAIN = "pte/idempotency-key/1"


def derive_key(run_id: str, plan_hash: str, step_id: str) -> str:
    """The idempotency key of one call: the same for the same run, plan and step (or element)."""
    digest = hashlib.sha256(canonical_json([_DOMAIN, run_id, plan_hash, step_id]).encode("utf-8"))
    return KEY_PREFIX + digest.hexdigest()


def key_schema_error(param: str, input_schema: Mapping[str, Any], effect: str) -> str | None:
    """Why `param` cannot be a tool's idempotency key (None if it can).

    It must be a string parameter of a ``write`` tool (a read has no effect to deduplicate).
    """
    if effect != "write":
        return "idempotency_key is for write tools (a read has no effect to apply twice)"
    prop = (input_schema.get("properties") or {}).get(param)
    if not isinstance(prop, Mapping):
        return f"idempotency_key {param!r} is not a parameter of the tool"
    if prop.get("type") != "string":
        return f"idempotency_key {param!r} must be a str parameter (PTE passes a string key)"
    return None


def without_key(input_schema: Mapping[str, Any], param: str) -> dict[str, Any]:
    """`input_schema` without the key parameter: what a planner is shown."""
    schema = dict(input_schema)
    schema["properties"] = {k: v for k, v in (schema.get("properties") or {}).items() if k != param}
    if "required" in schema:
        schema["required"] = [k for k in schema["required"] if k != param]
    return schema
