"""The audit log's hash chain as docs/audit-format.md states it, written from the spec with
`hashlib` and the public `pte.audit.canonical_json`: what anyone who can write a log file can
compute, so tests forge, re-link and check chains the way such a writer would, without pte's
private hashing helpers.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from pte.audit import canonical_json

#: `prev` of a log's first record: 64 zeros.
GENESIS = "0" * 64


def sha256_text(data: str | bytes) -> str:
    """Lower-case hex SHA-256 of `data` (text as UTF-8)."""
    return hashlib.sha256(data.encode("utf-8") if isinstance(data, str) else data).hexdigest()


def chain_hash(prev: str | bytes, body: Any) -> str:
    """A record's `hash`: SHA-256 of `prev` followed by the JCS form of the record without `hash`."""
    prev_bytes = prev.encode("ascii") if isinstance(prev, str) else prev
    return hashlib.sha256(prev_bytes + canonical_json(body).encode("utf-8")).hexdigest()


def relinked(records: list[dict[str, Any]], *, number: bool = False) -> list[dict[str, Any]]:
    """Copies of `records` re-linked into a chain that verifies (`prev` and `hash` recomputed,
    and `seq` renumbered from 0 when `number`): a writer without the key can do this much."""
    prev, out = GENESIS, []
    for seq, record in enumerate(records):
        record = {k: v for k, v in record.items() if k != "hash"}
        if number:
            record["seq"] = seq
        record["prev"] = prev
        prev = record["hash"] = chain_hash(prev, record)
        out.append(record)
    return out


def line_of(record: Any) -> bytes:
    """One log line: the JCS form of `record` and a newline."""
    return canonical_json(record).encode("utf-8") + b"\n"


def log_text(records: list[dict[str, Any]]) -> str:
    """The JSON Lines text of `records`, one canonical line each."""
    return "".join(canonical_json(record) + "\n" for record in records)


#: Logs an earlier pte wrote (main 5aa60c6's samples: its prompts hash, no deployment binding).
OLDER_PTE = Path(__file__).resolve().parent / "data" / "older_pte"


def records_of(path: Path) -> list[dict[str, Any]]:
    """The records of the JSON Lines log at `path`, as written."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def write_relinked(records: list[dict[str, Any]], out: Path) -> Path:
    """`records` re-linked (`relinked`) and written to `out` as a log: what a log writer
    without the deployment key can write (an earlier pte's logs were chained without one)."""
    out.write_text(log_text(relinked(records)), encoding="utf-8")
    return out
