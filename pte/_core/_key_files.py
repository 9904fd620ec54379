"""Reading a key file without trusting what the path names.

A key path comes from a flag or an environment variable. A FIFO there would block `open()`
until some writer appears (the command hangs), a device such as ``/dev/zero`` would never
end, and a huge file would be read whole. `read_key_file` reads it as every named path is
read (pte._core._bounded_files): without blocking, a regular file only, at most a bound.
"""

from __future__ import annotations

import os

from pte._core._bounded_files import FileRefused, read_bounded_bytes

__all__ = ["MAX_KEY_FILE_BYTES", "read_key_file"]

#: Largest key file read (a PEM key is well under 1 KiB; a file of many public keys fits).
MAX_KEY_FILE_BYTES = 64 * 1024


def read_key_file(path: str | os.PathLike[str], what: str, max_bytes: int = MAX_KEY_FILE_BYTES) -> bytes:
    """The bytes of the regular file at `path`; ValueError naming `what` and the path otherwise.

    Refused: a missing or unreadable path, a directory, a FIFO, device or socket, and a file
    over `max_bytes`.
    """
    name = os.fspath(path)
    try:
        return read_bounded_bytes(name, f"{what} file", max_bytes)
    except FileRefused as exc:
        if str(exc).endswith(f"is over {max_bytes} bytes"):
            raise ValueError(f"{exc}: too large to be a key file") from None
        raise ValueError(str(exc)) from None
