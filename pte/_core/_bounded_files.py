"""Files a flag, the environment or a deployment names, checked before they are read.

Such a path is not trusted to name a file: a FIFO blocks ``open()`` until a writer appears
(the command hangs), a device such as ``/dev/zero`` never ends, and a huge file is read
whole. Every such read goes through `read_bounded_bytes`: opened without blocking, refused unless
a regular file, read to at most a bound. `check_file` and `check_folder` refuse the same
before a library opens the path itself. Refusals are `FileRefused` (a ValueError) naming the
path and why; the CLI reports them as usage errors (exit 2).
"""

from __future__ import annotations

import os
import stat

__all__ = [
    "MAX_INPUT_FILE_BYTES",
    "FileRefused",
    "check_file",
    "check_folder",
    "read_at_most",
    "read_bounded_bytes",
    "read_bounded_text",
]

#: Default largest file read: far above any policy, manifest, procedure or rules file.
MAX_INPUT_FILE_BYTES = 16 * 1024 * 1024


class FileRefused(ValueError):
    """A path that names no regular file (or folder) of a bounded size, with the reason."""


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory, not a file"
    if stat.S_ISFIFO(mode):
        return "a FIFO, not a regular file"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device, not a regular file"
    if stat.S_ISSOCK(mode):
        return "a socket, not a regular file"
    return "not a regular file"


def check_file(
    path: str | os.PathLike[str], what: str, *, max_bytes: int | None = None, missing_ok: bool = False
) -> bool:
    """Whether `path` exists (False only with `missing_ok`); `FileRefused` unless it is a regular
    file (or a link to one) of at most `max_bytes`."""
    name = os.fspath(path)
    try:
        info = os.stat(name)
    except FileNotFoundError:
        if missing_ok:
            return False
        raise FileRefused(f"cannot read {what} {name!r}: it does not exist") from None
    except (OSError, ValueError) as exc:
        raise FileRefused(f"cannot read {what} {name!r}: {getattr(exc, 'strerror', None) or exc}") from None
    if not stat.S_ISREG(info.st_mode):
        raise FileRefused(f"cannot read {what} {name!r}: it is {_kind(info.st_mode)}")
    if max_bytes is not None and info.st_size > max_bytes:
        raise FileRefused(f"cannot read {what} {name!r}: it is over {max_bytes} bytes ({info.st_size})")
    return True


def check_folder(path: str | os.PathLike[str], what: str) -> None:
    """`FileRefused` unless `path` is an existing directory."""
    name = os.fspath(path)
    try:
        info = os.stat(name)
    except FileNotFoundError:
        raise FileRefused(f"cannot read {what} {name!r}: it does not exist") from None
    except (OSError, ValueError) as exc:
        raise FileRefused(f"cannot read {what} {name!r}: {getattr(exc, 'strerror', None) or exc}") from None
    if not stat.S_ISDIR(info.st_mode):
        raise FileRefused(f"cannot read {what} {name!r}: it is not a directory")


def read_at_most(path: str | os.PathLike[str], what: str, limit: int) -> bytes:
    """At most `limit` bytes of the regular file at `path`: opened without blocking, refused
    (`FileRefused`) unless a regular file that can be read. The one read loop of every bounded
    read: a caller asks for one byte more than its bound to tell a file over it (it may grow
    meanwhile), and says what that means for it."""
    name = os.fspath(path)
    try:
        # O_NONBLOCK: opening a FIFO returns at once (no writer needed); fstat then refuses it.
        fd = os.open(name, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        raise FileRefused(f"cannot read {what} {name!r}: it does not exist") from None
    except (OSError, ValueError) as exc:
        raise FileRefused(f"cannot read {what} {name!r}: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise FileRefused(f"cannot read {what} {name!r}: it is {_kind(mode)}")
        chunks: list[bytes] = []
        left = limit
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as exc:
        raise FileRefused(f"cannot read {what} {name!r}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    return b"".join(chunks)


def read_bounded_bytes(
    path: str | os.PathLike[str], what: str, max_bytes: int = MAX_INPUT_FILE_BYTES
) -> bytes:
    """The bytes of the regular file at `path`, at most `max_bytes`; `FileRefused` otherwise
    (missing, unreadable, a directory, FIFO, device or socket, or larger)."""
    data = read_at_most(path, what, max_bytes + 1)  # one byte more tells a file over the bound
    if len(data) > max_bytes:
        raise FileRefused(f"cannot read {what} {os.fspath(path)!r}: it is over {max_bytes} bytes")
    return data


def read_bounded_text(path: str | os.PathLike[str], what: str, max_bytes: int = MAX_INPUT_FILE_BYTES) -> str:
    """`read_bounded_bytes` as UTF-8 text; `FileRefused` for text that is not UTF-8."""
    data = read_bounded_bytes(path, what, max_bytes)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FileRefused(
            f"cannot read {what} {os.fspath(path)!r}: it is not UTF-8 text ({exc.reason} at byte {exc.start})"
        ) from None
