"""Signed checkpoints: Ed25519 anchors of an audit log, kept apart from the log.

The hash chain shows that no record was edited, removed or reordered *inside* a log, but
not that whole records were cut off its end, or that the whole log was rewritten and
re-hashed by someone who can write the file. A checkpoint closes that gap: it states the
log's id (the hash of its first record), how many records it had and the hash of the last
of them, at a time, signed with an Ed25519 key that the log's writer does not hold. Kept
elsewhere (another machine, a ticket, an e-mail), it lets anyone holding the *public* key
show later that the log still begins with exactly those records:

- fewer records than the checkpoint counts: the log was **truncated**;
- a different hash at that position (or a different first record): it was **rewritten**.

A checkpoint file is JSON Lines, one checkpoint per line, appended by
``pte audit checkpoint LOG --key K``; ``pte audit verify LOG --checkpoint FILE
--public-key P`` checks every one. The signed bytes are the RFC 8785 form of the
checkpoint without its ``signature`` member (docs/audit-format.md, "Checkpoints").

Keys are PEM files (PKCS#8 private, SubjectPublicKeyInfo public) or come from the
environment (``env:NAME``: a PEM text, or a base64 32-byte Ed25519 seed/public key). They
are never written to a log or a checkpoint; a checkpoint names its key by ``key_id``, the hex
of the raw public key.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from pte._audit._scan import VerifyReport
from pte._audit._verify import verify
from pte._core import CheckpointError, FileRefused, canonical_bytes, read_bounded_bytes, read_key_file

__all__ = [
    "CHECKPOINT_VERSION",
    "Checkpoint",
    "CheckpointReport",
    "generate_key",
    "key_id",
    "load_private_key",
    "load_public_key",
    "read_checkpoints",
    "verify_checkpoints",
    "write_checkpoint",
]

CHECKPOINT_VERSION = "1"


# ---------------------------------------------------------------------------------------------
# Keys
# ---------------------------------------------------------------------------------------------


def _key_text(spec: str, what: str) -> bytes:
    """The bytes `spec` names: ``env:NAME`` (an environment variable) or a file path."""
    if spec.startswith("env:"):
        name = spec[4:]
        value = os.environ.get(name)
        if not value:
            raise CheckpointError(f"{what}: environment variable {name} is not set")
        return value.encode("utf-8")
    # Regular files only, bounded: a FIFO named as a key file must not hang the command.
    try:
        return read_key_file(spec, what)
    except ValueError as exc:
        raise CheckpointError(str(exc)) from None


def _raw32(data: bytes, what: str) -> bytes:
    try:
        raw = base64.b64decode(data.strip(), validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != 32:
        raise CheckpointError(f"{what}: neither a PEM key nor a base64 32-byte Ed25519 key")
    return raw


def load_private_key(spec: str) -> Ed25519PrivateKey:
    """The Ed25519 signing key named by `spec` (a PEM file path or ``env:NAME``)."""
    data = _key_text(spec, "signing key")
    if data.lstrip().startswith(b"-----BEGIN"):
        try:
            key = serialization.load_pem_private_key(data, password=None)
        except (ValueError, TypeError) as exc:
            raise CheckpointError(f"signing key: not an unencrypted PEM private key ({exc})") from None
        if not isinstance(key, Ed25519PrivateKey):
            raise CheckpointError("signing key: not an Ed25519 key")
        return key
    return Ed25519PrivateKey.from_private_bytes(_raw32(data, "signing key"))


def load_public_key(spec: str) -> Ed25519PublicKey:
    """The Ed25519 verification key named by `spec` (a PEM file path or ``env:NAME``)."""
    data = _key_text(spec, "public key")
    if data.lstrip().startswith(b"-----BEGIN"):
        try:
            key = serialization.load_pem_public_key(data)
        except (ValueError, TypeError) as exc:
            raise CheckpointError(f"public key: not a readable PEM public key ({exc})") from None
        if not isinstance(key, Ed25519PublicKey):
            raise CheckpointError("public key: not an Ed25519 key")
        return key
    return Ed25519PublicKey.from_public_bytes(_raw32(data, "public key"))


def key_id(key: Ed25519PublicKey | Ed25519PrivateKey) -> str:
    """Hex of the raw 32-byte public key: how checkpoints (and approvals) name their key."""
    public = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    return public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()


def generate_key(private_path: str | os.PathLike[str]) -> Path:
    """Write a new Ed25519 key pair: `private_path` (PKCS#8 PEM, mode 0600) and ``.pub`` next to it.

    Refuses to overwrite either file. Returns the public key's path.
    """
    private_path = Path(private_path)
    public_path = private_path.with_name(private_path.name + ".pub")
    key = Ed25519PrivateKey.generate()
    private_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public_pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    for path in (private_path, public_path):
        if path.exists():
            raise CheckpointError(f"{path} exists; refusing to overwrite a key")
    fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(private_pem)
    public_path.write_bytes(public_pem)
    return public_path


# ---------------------------------------------------------------------------------------------
# Checkpoints
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Checkpoint:
    """One signed anchor: the log `log_id` had `records` records, the last hashing to `head`."""

    log_id: str
    records: int
    head: str
    time: str
    key_id: str
    signature: str

    def signed_part(self) -> dict[str, Any]:
        """The members the signature covers (everything but ``signature``)."""
        return {
            "pte_checkpoint": CHECKPOINT_VERSION,
            "log_id": self.log_id,
            "records": self.records,
            "head": self.head,
            "time": self.time,
            "key_id": self.key_id,
        }

    def to_dict(self) -> dict[str, Any]:
        return {**self.signed_part(), "signature": self.signature}

    def signature_valid(self, public_key: Ed25519PublicKey) -> bool:
        """True when `signature` is `public_key`'s Ed25519 signature of the signed part."""
        try:
            raw = base64.urlsafe_b64decode(self.signature + "=" * (-len(self.signature) % 4))
            public_key.verify(raw, canonical_bytes(self.signed_part()))
        except (InvalidSignature, binascii.Error, ValueError):
            return False
        return True

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> Checkpoint:
        """Parse one checkpoint; raises `CheckpointError` when a member is missing or malformed."""
        if doc.get("pte_checkpoint") != CHECKPOINT_VERSION:
            raise CheckpointError(f"not a pte_checkpoint {CHECKPOINT_VERSION} document")
        expected = {"pte_checkpoint", "log_id", "records", "head", "time", "key_id", "signature"}
        if set(doc) != expected:
            raise CheckpointError(f"checkpoint members must be exactly {sorted(expected)}")
        records = doc["records"]
        if not isinstance(records, int) or isinstance(records, bool) or records < 1:
            raise CheckpointError("checkpoint records must be a positive integer")
        for name in ("log_id", "head", "time", "key_id", "signature"):
            if not isinstance(doc[name], str):
                raise CheckpointError(f"checkpoint {name} must be a string")
        return cls(doc["log_id"], records, doc["head"], doc["time"], doc["key_id"], doc["signature"])


def _sign(key: Ed25519PrivateKey, log_id: str, records: int, head: str, time: str) -> Checkpoint:
    unsigned = Checkpoint(log_id, records, head, time, key_id(key), "")
    raw = key.sign(canonical_bytes(unsigned.signed_part()))
    return Checkpoint(
        log_id, records, head, time, unsigned.key_id, base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
    )


def write_checkpoint(
    log: str | os.PathLike[str],
    key: Ed25519PrivateKey,
    out: str | os.PathLike[str],
    *,
    now: datetime | None = None,
) -> Checkpoint:
    """Verify `log`, sign a checkpoint of it and append it to `out` (JSON Lines).

    Only an intact log is anchored: signing a damaged one would vouch for the damage.
    Raises `CheckpointError` when the log does not verify or holds no records.
    """
    report = verify(log)
    if not report.intact:
        raise CheckpointError(f"{os.fspath(log)} does not verify ({report.issue}); not signing it")
    if report.records == 0 or report.log_id is None or report.last_hash is None:
        raise CheckpointError(f"{os.fspath(log)} holds no records; nothing to anchor")
    stamp = (now or datetime.now(UTC)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    checkpoint = _sign(key, report.log_id, report.records, report.last_hash, stamp)
    line = canonical_bytes(checkpoint.to_dict()) + b"\n"
    fd = os.open(out, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)
    return checkpoint


def read_checkpoints(path: str | os.PathLike[str]) -> list[Checkpoint]:
    """Every checkpoint in a checkpoint file, in order; `CheckpointError` on a bad line."""
    try:
        lines = read_bounded_bytes(path, "checkpoint file", 16 * 1024 * 1024)
    except FileRefused as exc:
        raise CheckpointError(str(exc)) from None
    out: list[Checkpoint] = []
    for number, raw in enumerate(lines.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            doc = json.loads(raw.decode("utf-8"))
        except ValueError as exc:
            raise CheckpointError(f"{os.fspath(path)}:{number}: not JSON ({exc})") from None
        if not isinstance(doc, dict):
            raise CheckpointError(f"{os.fspath(path)}:{number}: not a JSON object")
        try:
            out.append(Checkpoint.from_dict(doc))
        except CheckpointError as exc:
            raise CheckpointError(f"{os.fspath(path)}:{number}: {exc}") from None
    if not out:
        raise CheckpointError(f"checkpoint file {os.fspath(path)} holds no checkpoints")
    return out


@dataclass(frozen=True)
class CheckpointReport:
    """The outcome of checking a log against its checkpoints.

    `ok` when every checkpoint's signature verifies with the given key and the log still
    begins with exactly the records it anchors. `problem` names the first that does not.
    """

    ok: bool
    checked: int
    covered: int
    problem: str | None
    log: VerifyReport

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "checked": self.checked, "covered": self.covered, "problem": self.problem}


def _problems(
    checkpoints: list[Checkpoint], public_key: Ed25519PublicKey, report: VerifyReport
) -> Iterator[str]:
    expected_key = key_id(public_key)
    for index, cp in enumerate(checkpoints, start=1):
        where = f"checkpoint {index} ({cp.records} records, {cp.time})"
        if cp.key_id != expected_key or not cp.signature_valid(public_key):
            yield f"{where}: signature does not verify with the given public key (forged or altered)"
        elif cp.log_id != report.log_id:
            yield (
                f"{where}: is of another log (log_id {cp.log_id[:12]}…), "
                "or the log's first record was rewritten"
            )
        elif cp.records > report.records:
            yield (
                f"{where}: truncated: the checkpoint covers {cp.records} records, "
                f"the log has {report.records} that verify"
            )
        elif report.anchors.get(cp.records - 1) != cp.head:
            yield f"{where}: rewritten: record {cp.records - 1} no longer has the checkpoint's head hash"


def verify_checkpoints(
    log: str | os.PathLike[str],
    checkpoint_file: str | os.PathLike[str],
    public_key: Ed25519PublicKey,
    *,
    jobs: int = 1,
) -> CheckpointReport:
    """Verify `log` (`jobs`: as in `verify`) and check it against every checkpoint in `checkpoint_file`."""
    checkpoints = read_checkpoints(checkpoint_file)
    report = verify(log, anchors=frozenset(cp.records - 1 for cp in checkpoints), jobs=jobs)
    problem = next(_problems(checkpoints, public_key, report), None)
    covered = max(cp.records for cp in checkpoints)
    return CheckpointReport(problem is None, len(checkpoints), covered, problem, report)
