"""Canonical JSON and hashing: the byte form that plan hashes and audit hashes are taken over."""

from __future__ import annotations

import hashlib
import json
from typing import Any

__all__ = ["canonical_json", "hash_json", "sha256_hex"]


def canonical_json(value: Any) -> str:
    """Serialise `value` deterministically: sorted keys, no whitespace, UTF-8, no NaN/Infinity."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def sha256_hex(data: str | bytes) -> str:
    """Hex SHA-256 of text (UTF-8 encoded) or bytes."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hashlib.sha256(data).hexdigest()


def hash_json(value: Any) -> str:
    """Hex SHA-256 of the canonical JSON of `value`."""
    return sha256_hex(canonical_json(value))
