"""What produced a run: tool fingerprints, content hashes, and content stored once per log.

A format 2 ``run_started`` (docs/audit-format.md) records, next to the request:

- ``tools``: a fingerprint per tool: name, effect, idempotency, timeout, provenance,
  approval, sinks, the hash of its input and output schemas (``schema_hash``) and the hash
  of its code (``code_hash``, SHA-256 of the function's source text);
- ``catalogue``: the hash of the full catalogue (every tool's `ToolSpec.describe`, with
  descriptions and schemas), ``policy``: the hash of the policy document, ``prompts``: the
  hash of the code that writes what a model is shown (`PROMPT_MODULES`);
- ``stored``: the catalogue and policy themselves, keyed by hash, the first time the log
  holds them. A log of a million runs of the same deployment holds its catalogue once.

`expand_run_started` gives back the full view (tools with schemas, ``config.policy``) that
replay needs, from the contents stored anywhere in the log.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import inspect
import weakref
from collections.abc import Callable, Iterable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

from pte._catalogue._registry import Registry
from pte._catalogue._tool_spec import ToolSpec
from pte._core import hash_json

__all__ = [
    "PROMPT_MODULES",
    "code_hash",
    "expand_run_started",
    "prompts_hash",
    "run_started_fields",
    "stored_contents",
    "tool_fingerprint",
]


#: `code_hash` by function, with the code object it was read for: finding and tokenising a tool's
#: source took ~1 ms a tool on every ``run_started`` (each run, resume and replay computes all of
#: them), the same functions again and again in a worker or a test process. A function given new
#: code (``__code__``) is read again; a function gone (a reloaded pack) drops out.
_SOURCE_HASHES: weakref.WeakKeyDictionary[Any, tuple[Any, str | None]] = weakref.WeakKeyDictionary()


def code_hash(spec: ToolSpec) -> str | None:
    """SHA-256 of the source text of the tool's function; None when it has no source to read.

    A tool that names what it runs besides its function (an imported tool's server, spec or
    operation: `pte.catalogue.tool_from_schema`'s `runs`) is its `code_sha256`, which hashes both.
    """
    if getattr(spec, "runs_json", None) is not None:
        return spec.code_sha256
    func = inspect.unwrap(spec.func)
    code = getattr(func, "__code__", None)
    with contextlib.suppress(TypeError):  # a callable that cannot be weakly referenced: not kept
        known = _SOURCE_HASHES.get(func)
        if known is not None and known[0] is code:
            return known[1]
    try:
        digest: str | None = hashlib.sha256(inspect.getsource(func).encode("utf-8")).hexdigest()
    except (OSError, TypeError):
        digest = None
    with contextlib.suppress(TypeError):
        _SOURCE_HASHES[func] = (code, digest)
    return digest


def tool_fingerprint(spec: ToolSpec, entry: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The ``run_started.tools`` entry of `spec` (`entry`: its `describe()`, if already made)."""
    entry = entry if entry is not None else spec.describe()
    return {
        "name": entry["name"],
        "effect": entry["effect"],
        "idempotent": entry["idempotent"],
        "timeout_s": entry["timeout_s"],
        "provenance": entry["provenance"],
        "requires_approval": entry["requires_approval"],
        "sinks": entry["sinks"],
        "schema_hash": hash_json(
            {"input_schema": entry.get("input_schema"), "output_schema": entry.get("output_schema")}
        ),
        "code_hash": code_hash(spec),
    }


#: The modules that write text a model is shown: every prompt text and template lives in
#: `pte._run._prompts`; `pte._run._label_reach` decides which label rules it shows,
#: `pte._run._finalizer_view` which steps the finalizer is shown first; the others render data
#: for it (budget markers, handles, withheld notes).
PROMPT_MODULES = (
    "pte._run._prompts",
    "pte._run._label_reach",
    "pte._run._finalizer_view",
    "pte._core._data_budget",
    "pte._policy._handles",
    "pte._run._exposure",
)


@cache
def prompts_hash() -> str:
    """SHA-256 over the source of `PROMPT_MODULES` (name, NUL, source, NUL, in order): editing
    any text a model is shown changes the ``prompts`` hash a ``run_started`` records."""
    # Read as files, not imported: the executor's side of PTE never loads the prompt code
    # (tests/e2e/test_executor_isolation.py).
    digest = hashlib.sha256()
    for name in PROMPT_MODULES:
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.origin is not None
        digest.update(name.encode() + b"\0" + Path(spec.origin).read_bytes() + b"\0")
    return digest.hexdigest()


def run_started_fields(
    registry: Registry,
    policy_document: Mapping[str, Any] | None,
    redact_content: Callable[[Any], tuple[Any, str]] | None = None,
) -> dict[str, Any]:
    """``tools``, ``catalogue``, ``policy``, ``prompts`` and ``stored`` for a ``run_started``.

    ``stored`` offers every content; `AuditLog` drops the ones its file already holds.
    `redact_content` (the audit log's `Redactor.redact_content`: the content redacted, and its
    hash) is applied to the contents *before* they are hashed, so that hashes and
    fingerprints describe what the log holds: a secret written into a description is stored
    redacted, while a schema property named ``password`` stays a property (structure is not
    redacted by key name). The log's redactor then knows the content as its own and does not
    redact it again.
    """
    content = redact_content if redact_content is not None else _as_it_is
    catalogue, catalogue_hash = content(registry.describe())
    stored: dict[str, Any] = {catalogue_hash: catalogue}
    policy_hash = None
    if policy_document is not None:
        policy, policy_hash = content(dict(policy_document))
        stored[policy_hash] = policy
    return {
        "tools": [tool_fingerprint(spec, entry) for spec, entry in zip(registry, catalogue, strict=True)],
        "catalogue": catalogue_hash,
        "policy": policy_hash,
        "prompts": prompts_hash(),
        "stored": stored,
    }


def _as_it_is(value: Any) -> tuple[Any, str]:
    """Content with no redactor: itself, and its hash."""
    return value, hash_json(value)


def stored_contents(records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Every content stored in `records` (the ``stored`` members of their ``run_started``)."""
    contents: dict[str, Any] = {}
    for record in records:
        if record.get("type") == "run_started":
            stored = record.get("stored")
            if isinstance(stored, Mapping):
                contents.update(stored)
    return contents


def expand_run_started(record: Mapping[str, Any], contents: Mapping[str, Any]) -> dict[str, Any]:
    """`record` with the full catalogue as ``tools`` and the policy as ``config.policy``.

    The shape format 1 recorded inline, for readers that rebuild the run (replay, resume). A
    format 1 record, or one whose contents are not in `contents`, is returned as it is.
    """
    out = dict(record)
    catalogue = contents.get(record.get("catalogue", ""))
    if isinstance(catalogue, list):
        out["tools"] = catalogue
    policy = contents.get(record.get("policy") or "")
    if isinstance(policy, Mapping):
        out["config"] = {**(record.get("config") or {}), "policy": policy}
    return out
