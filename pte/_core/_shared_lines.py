"""A JSON Lines file that several processes share: read under a shared lock, append under an
exclusive one (the approval and endorsement stores).

An append that depends on what the file holds (a consumption must not be recorded twice)
reads the file under the same exclusive lock it then writes under, so two processes cannot
both see "not used yet". Each appended line is fsynced: a decision someone was told about must
not vanish. Errors are the caller's to name: `OSError` (cannot open, lock or write) and
`UnicodeDecodeError` (not UTF-8) propagate.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable
from pathlib import Path

from pte._core._bounded_files import check_file

__all__ = ["append_line", "read_shared"]


def read_shared(path: str | Path) -> str | None:
    """The file's text, read under a shared lock; None when there is no file yet. `FileRefused`
    when the path is not a regular file (a FIFO would block the open)."""
    if not check_file(path, "store file", missing_ok=True):
        return None
    try:
        with open(path, encoding="utf-8") as fh:
            fcntl.flock(fh.fileno(), fcntl.LOCK_SH)
            try:
                return fh.read()
            finally:
                fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
    except FileNotFoundError:
        return None


def append_line(path: str | Path, line: str, check: Callable[[str], bool] | None = None) -> bool:
    """Append `line` under an exclusive lock, fsynced. With `check`, the file's text is read
    under that lock first and the line is written only if ``check(text)`` is true (it may
    also raise). True when the line was written."""
    check_file(path, "store file", missing_ok=True)
    with open(path, "a+", encoding="utf-8") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            if check is not None:
                fh.seek(0)
                if not check(fh.read()):
                    return False
            fh.seek(0, os.SEEK_END)
            fh.write(line)
            fh.flush()
            os.fsync(fh.fileno())
            return True
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
