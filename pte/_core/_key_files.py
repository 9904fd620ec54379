"""Reading a key file without trusting what the path names.

A key path comes from a flag or an environment variable. A FIFO there would block `open()`
until some writer appears (the command hangs), a device such as ``/dev/zero`` would never
end, and a huge file would be read whole. `read_key_file` opens without blocking, refuses
anything but a regular file and reads at most a bound.
"""

from __future__ import annotations

import os
import stat

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
        # O_NONBLOCK: opening a FIFO returns at once (no writer needed); fstat then refuses it.
        fd = os.open(name, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        raise ValueError(f"cannot read {what} file {name!r}: {exc.strerror or exc}") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise ValueError(f"{what} file {name!r} is a directory, not a file")
        if not stat.S_ISREG(mode):
            raise ValueError(
                f"{what} file {name!r} is not a regular file (a FIFO, device or socket is refused)"
            )
        chunks: list[bytes] = []
        left = max_bytes + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 16))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as exc:
        raise ValueError(f"cannot read {what} file {name!r}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > max_bytes:
        raise ValueError(f"{what} file {name!r} is over {max_bytes} bytes: too large to be a key file")
    return data
