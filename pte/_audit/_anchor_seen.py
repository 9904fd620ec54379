"""What one machine has seen of its deployment's anchor chain: a rollback of the chain shows.

The anchor chain is shared (a file or rows of the run store every machine of a deployment
uses), so whoever can write it can cut its last lines: every remaining line still verifies.
Each machine therefore keeps, in a small file of its own, the longest chain it has read or
signed (how many lines, and the chain hash after them). A chain shorter than that, or one
that differs there, was rolled back or replaced: every read fails (`AnchorError`) and runs
stop until a person looks. A machine that never saw the chain past the cut cannot tell; the
machines that did, can, and a chain that grows again from the cut forks from what they saw.

The file: ``{"pte_anchors_seen": "1", "key_id": K, "lines": N, "head": H}``. It is replaced
whole (a temporary file renamed over it) under a lock of its own, and only ever grows.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

from pte._core import AnchorError, FileRefused, canonical_json, check_file

__all__ = ["SeenChain"]


class SeenChain:
    """The high-water mark of one deployment's anchor chain on this machine."""

    def __init__(self, path: str | os.PathLike[str], key_id: str) -> None:
        self.path = Path(path)
        self.key_id = key_id

    def read(self) -> tuple[int, str | None]:
        """(lines seen, chain hash after them); (0, None) before the first read."""
        try:
            if not check_file(self.path, "anchors high-water file", max_bytes=4096, missing_ok=True):
                return 0, None
            raw = self.path.read_bytes()
        except FileRefused as exc:
            raise AnchorError(str(exc)) from None
        except FileNotFoundError:
            return 0, None
        except OSError as exc:
            raise AnchorError(f"cannot read {self._what()}: {exc}") from None
        try:
            doc = json.loads(raw)
            ok = (
                isinstance(doc, dict)
                and doc.get("pte_anchors_seen") == "1"
                and isinstance(doc.get("lines"), int)
                and doc["lines"] >= 0
                and isinstance(doc.get("head"), str)
                and isinstance(doc.get("key_id"), str)
            )
        except ValueError:
            ok = False
        if not ok:
            raise AnchorError(
                f"this machine's anchors high-water file {str(self.path)!r} is damaged; it records how "
                "far this machine has seen the deployment's anchor chain (remove it only after checking "
                "that the chain was not rolled back)"
            )
        if doc["key_id"] != self.key_id:
            raise AnchorError(
                f"this machine's anchors high-water file {str(self.path)!r} belongs to another deployment "
                f"key ({doc['key_id'][:16]}…)"
            )
        return int(doc["lines"]), str(doc["head"])

    def check(self, lines: int, head_at: list[str], where: str) -> None:
        """Refuse a chain of `lines` lines (`head_at[i]`: the chain hash after line i) that is
        shorter than, or not a continuation of, what this machine saw."""
        seen, head = self.read()
        if seen == 0:
            return
        if seen > lines:
            raise AnchorError(
                f"the anchor chain in {where} has {lines} anchor(s) but this machine has seen {seen}: "
                "it was rolled back (anchors deleted from its end) or replaced; runs stop until a "
                "person checks the chain and the runs it anchors"
            )
        if head_at[seen - 1] != head:
            raise AnchorError(
                f"the anchor chain in {where} differs from the one this machine saw at anchor {seen}: "
                "it was replaced or rewritten; runs stop until a person checks it"
            )

    def advance(self, lines: int, head: str) -> None:
        """Record that this machine has seen the chain up to `lines` lines (never backwards)."""
        if lines <= 0:
            return
        lock_path = self.path.with_name(self.path.name + ".lock")
        try:
            with open(lock_path, "a+b") as lock:
                fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
                try:
                    seen, _ = self.read()
                    if lines <= seen:
                        return
                    doc = {"pte_anchors_seen": "1", "key_id": self.key_id, "lines": lines, "head": head}
                    tmp = self.path.with_name(self.path.name + ".tmp")
                    with open(tmp, "wb") as fh:
                        fh.write(canonical_json(doc).encode("utf-8") + b"\n")
                        fh.flush()
                        os.fsync(fh.fileno())
                    os.replace(tmp, self.path)
                finally:
                    fcntl.flock(lock.fileno(), fcntl.LOCK_UN)
        except OSError as exc:
            raise AnchorError(f"cannot write {self._what()}: {exc}") from None

    def _what(self) -> str:
        return f"this machine's anchors high-water file {str(self.path)!r}"
