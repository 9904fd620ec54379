"""The deployment document: ``pte-deployment.json``, the one file that says what a deployment is.

Strict JSON (duplicate keys refused), every key known, every value typed. Paths are relative
to the deployment folder unless absolute; a run store URL naming a file (``sqlite:runs.db``,
``jsonl:runs``) is resolved the same way. The model endpoint is a name and a base URL, never
a secret (the API key stays in the environment). docs/deployment.md describes every key.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pte._core import DeploymentError, canonical_json, strict_json

__all__ = [
    "DOCUMENT_NAME",
    "FORMAT",
    "KEY_NAME",
    "PUBLIC_KEY_NAME",
    "DeploymentDocument",
    "resolve_path",
    "resolve_store_url",
]

#: The document's file name in a deployment folder.
DOCUMENT_NAME = "pte-deployment.json"
#: The deployment's signing key (mode 0600) and its public key, beside the document.
KEY_NAME = "deployment.key"
PUBLIC_KEY_NAME = "deployment.key.pub"
#: The value of the document's ``pte_deployment`` key.
FORMAT = "1"
#: Largest document read (a deployment document is a few hundred bytes).
_MAX_BYTES = 1 << 20

#: The largest ``execution.max_concurrency`` a document may name (a thread per step at most).
_MAX_CONCURRENCY = 1024

_PATH_KEYS = ("manifest", "policy", "procedures", "specialists", "approval_keys")
_STORE_KEYS = ("approvals", "endorsements", "anchors")


def _strings(value: Any, key: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise DeploymentError(f"{key!r} must be a list of non-empty strings")
    return tuple(value)


def _optional_text(value: Any, key: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or "\x00" in value:
        raise DeploymentError(f"{key!r} must be a non-empty string or null")
    return value


def _execution(value: Any) -> tuple[int | None, bool]:
    """``"execution": {"max_concurrency": N, "serial_writes": bool}`` (either may be left out)."""
    if value is None:
        return None, False
    if not isinstance(value, dict) or set(value) - {"max_concurrency", "serial_writes"}:
        raise DeploymentError('"execution" must be {"max_concurrency": N, "serial_writes": true|false}')
    limit, serial = value.get("max_concurrency"), value.get("serial_writes", False)
    if limit is not None and (type(limit) is not int or not 1 <= limit <= _MAX_CONCURRENCY):
        raise DeploymentError(
            f"execution.max_concurrency must be a whole number from 1 to {_MAX_CONCURRENCY}"
        )
    if type(serial) is not bool:
        raise DeploymentError("execution.serial_writes must be true or false")
    return limit, serial


@dataclass(frozen=True)
class DeploymentDocument:
    """The parsed ``pte-deployment.json`` (paths as written; `path` resolves them)."""

    #: Tool packs and importer specs (``mcp:CMD``, ``openapi:SPEC``), as ``--tools`` takes them.
    tools: tuple[str, ...] = ()
    #: The allow-list narrowing the packs (None: every tool of the packs).
    allow: tuple[str, ...] | None = None
    manifest: str | None = None
    policy: str | None = None
    procedures: str | None = None
    specialists: str | None = None
    #: Trusted approvers' public keys (PEM): with them, only approvals signed by one count.
    approval_keys: str | None = None
    approvals: str = "approvals.jsonl"
    #: The endorsement store (None: a call whose value needs a person's endorsement is refused).
    endorsements: str | None = "endorsements.jsonl"
    #: The run store URL (None: runs go to audit logs only).
    store: str | None = "sqlite:runs.db"
    anchors: str = "anchors.jsonl"
    #: Redaction rules added to the defaults: extra secret key names and rule files.
    redact_keys: tuple[str, ...] = ()
    secret_rules: tuple[str, ...] = ()
    #: The model endpoint: a model name and an OpenAI-compatible base URL (no secret).
    model: str | None = None
    base_url: str | None = None
    #: How a run's steps may overlap at most (``"execution"``): every engine of the deployment,
    #: a resume's and a worker's included, runs within it (None: the engine's default, 8).
    max_concurrency: int | None = None
    #: With it on, a write step always runs alone, whatever a flag or a log says.
    serial_writes: bool = False

    @classmethod
    def from_document(cls, document: Any) -> DeploymentDocument:
        """Parse a decoded document; `DeploymentError` naming the first problem."""
        if not isinstance(document, dict):
            raise DeploymentError("the deployment document must be a JSON object")
        if document.get("pte_deployment") != FORMAT:
            raise DeploymentError(f'the deployment document needs "pte_deployment": "{FORMAT}"')
        known = {
            "pte_deployment", "tools", "allow", *_PATH_KEYS, *_STORE_KEYS, "store", "redaction", "model",
            "execution",
        }  # fmt: skip
        unknown = sorted(set(document) - known)
        if unknown:
            raise DeploymentError(f"unknown key(s) in the deployment document: {', '.join(unknown)}")
        allow = document.get("allow")
        redaction = document.get("redaction") or {}
        model = document.get("model") or {}
        if not isinstance(redaction, dict) or set(redaction) - {"keys", "rule_files"}:
            raise DeploymentError('"redaction" must be {"keys": [...], "rule_files": [...]}')
        if not isinstance(model, dict) or set(model) - {"name", "base_url"}:
            raise DeploymentError('"model" must be {"name": ..., "base_url": ...} (never an API key)')
        limit, serial = _execution(document.get("execution"))
        paths = {key: _optional_text(document.get(key), key) for key in _PATH_KEYS}
        stores = {key: _optional_text(document.get(key, getattr(cls, key)), key) for key in _STORE_KEYS}
        for key in ("approvals", "anchors"):
            if stores[key] is None:
                raise DeploymentError(f"{key!r} must name a file (the deployment's {key})")
        base_url = _optional_text(model.get("base_url"), "model.base_url")
        if base_url is not None and not base_url.startswith(("http://", "https://")):
            raise DeploymentError(f"model.base_url {base_url!r} is not an http:// or https:// URL")
        return cls(
            tools=_strings(document.get("tools", []), "tools"),
            allow=None if allow is None else _strings(allow, "allow"),
            **paths,
            approvals=str(stores["approvals"]),
            endorsements=stores["endorsements"],
            anchors=str(stores["anchors"]),
            store=_optional_text(document.get("store", cls.store), "store"),
            redact_keys=_strings(redaction.get("keys", []), "redaction.keys"),
            secret_rules=_strings(redaction.get("rule_files", []), "redaction.rule_files"),
            model=_optional_text(model.get("name"), "model.name"),
            base_url=base_url,
            max_concurrency=limit,
            serial_writes=serial,
        )

    @classmethod
    def read(cls, path: Path) -> tuple[DeploymentDocument, bytes]:
        """The document at `path` and its bytes (hashed into the fingerprint)."""
        try:
            with open(path, "rb") as fh:
                data = fh.read(_MAX_BYTES + 1)
        except OSError as exc:
            raise DeploymentError(
                f"cannot read the deployment document {str(path)!r}: {exc.strerror}"
            ) from None
        if len(data) > _MAX_BYTES:
            raise DeploymentError(f"the deployment document {str(path)!r} is over {_MAX_BYTES} bytes")
        try:
            document = strict_json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise DeploymentError(f"the deployment document {str(path)!r} is not JSON: {exc}") from None
        try:
            return cls.from_document(document), data
        except DeploymentError as exc:
            raise DeploymentError(f"{path}: {exc}") from None

    def to_document(self) -> dict[str, Any]:
        """The JSON document (`from_document` reads it back to an equal object)."""
        return {
            "pte_deployment": FORMAT,
            "tools": list(self.tools),
            "allow": None if self.allow is None else list(self.allow),
            **{key: getattr(self, key) for key in _PATH_KEYS},
            "approvals": self.approvals,
            "endorsements": self.endorsements,
            "store": self.store,
            "anchors": self.anchors,
            "redaction": {"keys": list(self.redact_keys), "rule_files": list(self.secret_rules)},
            "model": {"name": self.model, "base_url": self.base_url},
            # Only when named: a document without it keeps the fingerprint it always had.
            **({"execution": self.execution} if self.execution else {}),
        }

    @property
    def execution(self) -> dict[str, Any]:
        """The ``"execution"`` settings the document names (empty: none)."""
        named: dict[str, Any] = {}
        if self.max_concurrency is not None:
            named["max_concurrency"] = self.max_concurrency
        if self.serial_writes:
            named["serial_writes"] = True
        return named

    def to_json(self) -> str:
        """The document as written by ``pte init`` (indented, keys in a fixed order)."""
        import json

        return json.dumps(self.to_document(), indent=2, ensure_ascii=False) + "\n"

    def canonical(self) -> str:
        """Canonical JSON of the document (what the fingerprint hashes)."""
        return canonical_json(self.to_document())


def resolve_path(folder: Path, value: str) -> Path:
    """`value` (as the document writes it) as an absolute path: relative to `folder`."""
    path = Path(os.path.expanduser(value))
    return path if path.is_absolute() else folder / path


def resolve_store_url(folder: Path, url: str) -> str:
    """A store URL with a relative file path made absolute against `folder`; others unchanged."""
    if url.startswith("sqlite:"):
        rest = url.removeprefix("sqlite:")
        if rest.startswith("//"):
            rest = rest[2:]
            return url  # sqlite:///abs/path: already absolute
        return url if rest in ("", ":memory:") else f"sqlite://{resolve_path(folder, rest)}"
    if url.startswith("jsonl:"):
        return f"jsonl:{resolve_path(folder, url.removeprefix('jsonl:'))}"
    if "://" in url:
        return url
    return str(resolve_path(folder, url))
