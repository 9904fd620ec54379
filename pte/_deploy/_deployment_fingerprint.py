"""A deployment's fingerprint: one SHA-256 over everything its runs' authority depends on.

The document (canonical JSON), the content of every file it names (manifest, policy,
specialists, approver keys, secret rules, each procedure file) and its public key, and the
catalogue fingerprint of the tools it serves under its policy (their schemas and code). Two
machines with the same fingerprint run plans with the same authority; editing any of these
changes it, so a run started under the old one is refused under the new one (`Deployment.from_run`).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from pte._core import DeploymentError, canonical_json

__all__ = ["digest_of", "file_digest", "folder_digests"]

#: Largest file a fingerprint reads whole (policy, keys, procedures are small).
_MAX_FILE_BYTES = 16 << 20


def file_digest(path: Path, what: str) -> str:
    """SHA-256 of a regular file's bytes; `DeploymentError` naming `what` when it cannot be read."""
    try:
        if not path.is_file():
            raise DeploymentError(f"the deployment's {what} {str(path)!r} is not a file")
        if path.stat().st_size > _MAX_FILE_BYTES:
            raise DeploymentError(f"the deployment's {what} {str(path)!r} is over {_MAX_FILE_BYTES} bytes")
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as exc:
        raise DeploymentError(f"cannot read the deployment's {what} {str(path)!r}: {exc.strerror}") from None


def folder_digests(folder: Path, what: str) -> dict[str, str]:
    """SHA-256 of each ``*.json`` file of a folder (the files a procedures folder loads), by name."""
    if not folder.is_dir():
        raise DeploymentError(f"the deployment's {what} {str(folder)!r} is not a folder")
    return {p.name: file_digest(p, what) for p in sorted(folder.glob("*.json"))}


def digest_of(value: object) -> str:
    """SHA-256 of canonical JSON of `value` (a part's fingerprint, and the whole one over the parts)."""
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()
