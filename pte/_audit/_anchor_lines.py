"""Where a deployment's anchor chain is kept: a file, or rows of its run store.

`pte._audit._anchors.Anchors` parses and checks the lines; a place only reads and appends them.
Every machine of a deployment appends to the same chain, so an append is a compare-and-append:
it adds line `index` only when the chain has exactly `index` lines, and the signer re-reads
and re-checks when another machine got there first. That is what makes "a run id executes its
writes once" hold across machines: the check of a run's anchors and the append of its next
one are one step.

- `AnchorFile`: JSON Lines, locked with ``flock`` (shared to read, exclusive to append).
- A run store (`pte.stores` SQLite and PostgreSQL, table ``pte_anchors``) provides
  ``anchor_lines(start)`` and ``append_anchor(index, line)`` itself.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import Any, Protocol

from pte._core import AnchorError, FileRefused, check_file

__all__ = ["AnchorFile", "AnchorPlace", "anchor_place"]


class AnchorPlace(Protocol):
    """A place that keeps one anchor chain's lines (bytes, without the newline)."""

    def describe(self) -> str:
        """Where it is, for messages."""
        ...

    def anchor_lines(self, start: int) -> list[bytes]:
        """Every line from index `start` on (0-based), in order; [] past the end."""
        ...

    def append_anchor(self, index: int, line: bytes) -> bool:
        """Append `line` as line `index` if the chain has exactly `index` lines; False if not."""
        ...


class AnchorFile:
    """An anchor chain in a JSON Lines file (the default: ``$PTE_ANCHORS_FILE``).

    Reads remember where the last whole line began, so reading what was appended since costs
    what was appended, not the file."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        # (file identity, line count, offset of the last line, offset after it)
        self._seen: tuple[tuple[int, int], int, int, int] | None = None

    def describe(self) -> str:
        return f"anchors file {str(self.path)!r}"

    def _lines(self, fh: Any, start: int) -> list[bytes]:
        stat = os.fstat(fh.fileno())
        ident = (stat.st_dev, stat.st_ino)
        seen = self._seen
        if seen is not None and seen[0] == ident and start == seen[1] - 1 and stat.st_size >= seen[3]:
            base, first = seen[2], start
        else:
            base, first = 0, 0
        fh.seek(base)
        data = fh.read()
        cut = data.rfind(b"\n") + 1  # whole lines only
        lines = data[:cut].split(b"\n")[:-1] if cut else []
        count = first + len(lines)
        if lines:
            last_start = base + cut - len(lines[-1]) - 1
            self._seen = (ident, count, last_start, base + cut)
        elif first == 0:
            self._seen = None
        return lines[start - first :]

    def check_path(self) -> None:
        """`AnchorError` unless the path is a regular file or missing: a FIFO would block the
        open, /dev/zero never end the read."""
        try:
            check_file(self.path, "anchors file", missing_ok=True)
        except FileRefused as exc:
            raise AnchorError(str(exc)) from None

    def anchor_lines(self, start: int) -> list[bytes]:
        self.check_path()
        try:
            with open(self.path, "rb") as fh:
                fcntl.flock(fh.fileno(), fcntl.LOCK_SH)
                try:
                    return self._lines(fh, start)
                finally:
                    fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise AnchorError(f"cannot read {self.describe()}: {exc}") from None

    def append_anchor(self, index: int, line: bytes) -> bool:
        self.check_path()
        try:
            with open(self.path, "a+b") as fh:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
                try:
                    seen = self._seen
                    start = seen[1] - 1 if seen is not None and seen[1] > 0 else 0
                    present = start + len(self._lines(fh, start))
                    if self._seen is None:
                        present = 0
                    if present != index:
                        return False
                    fh.seek(0, os.SEEK_END)
                    fh.write(line + b"\n")
                    fh.flush()
                    os.fsync(fh.fileno())
                    return True
                finally:
                    fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
        except OSError as exc:
            raise AnchorError(f"cannot write {self.describe()}: {exc}") from None


def anchor_place(where: Any) -> AnchorPlace:
    """`where` as an anchor place: a path is a file; a store that keeps anchors is itself one."""
    if isinstance(where, (str, os.PathLike)):
        return AnchorFile(where)
    if callable(getattr(where, "anchor_lines", None)) and callable(getattr(where, "append_anchor", None)):
        return where  # type: ignore[no-any-return]
    raise AnchorError(f"{where!r} cannot keep anchors: use a file, or a SQLite or PostgreSQL run store")
