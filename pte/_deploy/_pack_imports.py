"""Imported tools a deployment names (``tools`` in its document, ``--tools`` on the command line):
``mcp:CMD[#tool,…]`` and ``openapi:SPEC[#op,…]``.

``mcp:CMD`` starts ``CMD`` (a command line, split as a POSIX shell would) as an MCP server over
stdio and imports the tools it lists; ``openapi:SPEC`` reads an OpenAPI 3 document (a file, or
an http(s) URL; JSON or YAML) and imports its operations. Requests go to the document's first
server URL when the document is a file (the deployment's own); a fetched document's requests
stay on the origin it was fetched from (its relative server path is kept, another host is not).
``#names`` imports just those tools or operation ids. Effects come from the source (GET/HEAD
are reads, other methods writes; an MCP tool is a write unless it says it is read-only); a
tool the source leaves untyped is refused with the declaration to add (`pte.importers.build_registry`).

A spec is imported once per process and shared by every deployment naming it, and imported
afresh when what it names has changed, as far as that can be known without importing it: an
``openapi:`` spec whose file's content differs from the import's (its SHA-256), or whose TLS
settings changed (a rotated CA file, `pte.importers.openapi.tls_context`). A fetched document
(an http(s) URL) is not fetched again, and an MCP server started is not asked again while its
session lives: a server's or a URL's changes need the spec's imports closed
(`pte.Deployment.close`, `forget_imports`) or a new process. An MCP session whose server went
away (its process exited) has ended: the spec is imported afresh, a new server started.
Importing is atomic per spec: threads building deployments at once share one import (one MCP
server started); other specs import meanwhile.

A deployment's specs are its folder's (`spec_in_folder`): a relative ``openapi:`` file is read
from the folder, and an ``mcp:`` command is started with the folder as its working directory,
never the working directory of the process reading the deployment. Such an ``mcp:`` spec is
also imported afresh when a file its command names by a relative path inside the folder
(``server.py``) has changed (`server_files`), as the fingerprint describes those files.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import shlex
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

from pte._catalogue import Registry
from pte._core import DeploymentError, FileRefused, PTEError, read_bounded_bytes

__all__ = [
    "IMPORT_PREFIXES",
    "forget_imports",
    "import_spec",
    "is_import_spec",
    "server_files",
    "spec_file",
    "spec_in_folder",
    "spec_with_command_words",
]

IMPORT_PREFIXES = ("mcp:", "openapi:")

#: How long closing what the imports hold may take at interpreter exit, in all. An MCP session
#: not ended by then ends with the process (its server finds its stdin closed).
EXIT_WAIT_S = 5.0

#: What the imported tools call through, by spec, owned by this import table: the live MCP
#: sessions (each with its server process) and the HTTP clients of ``openapi:`` specs
#: (connections pooled across calls), as closers taking how long they may wait.
#: `forget_imports` closes them (`pte.Deployment.close` those of its specs), and so does the
#: interpreter's exit (`_close_at_exit`).
_held: dict[str, list[Callable[[float | None], None]]] = {}
_closes_at_exit = False


def _never_ended() -> bool:
    return False


@dataclass(frozen=True)
class _Import:
    """A spec's import and the state of what it was imported from (`_state_of`)."""

    registry: Registry
    state: tuple[Any, ...]
    #: Whether what its tools call through has ended on its own (an MCP server that exited):
    #: the import was made from a server no longer there, so it is made afresh.
    ended: Callable[[], bool] = _never_ended


#: Each spec's current import (an MCP server is started once).
_imported: dict[str, _Import] = {}
#: Guards the tables above; held briefly, never while importing.
_table_lock = threading.Lock()
#: One lock per spec, held while it is imported: one import at a time of a spec, other specs free.
_spec_locks: dict[str, threading.Lock] = {}


def is_import_spec(spec: str) -> bool:
    """Whether a ``--tools`` value names an importer rather than packs."""
    return spec.startswith(IMPORT_PREFIXES)


def spec_file(spec: str) -> str | None:
    """The file an ``openapi:`` spec reads, as the spec writes it (None: a URL, or ``mcp:``)."""
    kind, _, rest = spec.partition(":")
    source, _ = _names(rest)
    if kind != "openapi" or source.startswith(("http://", "https://")):
        return None
    return source


#: Between an ``mcp:`` spec's prefix and its command, around the folder it is started in
#: (`spec_in_folder`): NUL is in no path, so the folder is read back exactly.
_FOLDER_MARK = "\0"


def spec_in_folder(spec: str, folder: Path) -> str:
    """`spec` as a deployment document in `folder` names it: an ``openapi:`` file path that is
    relative is read from the folder (as every path the document names), and an ``mcp:``
    command is started in the folder (its working directory), never in the working directory
    of the process reading it (a worker or a command started elsewhere would import another
    file, or start another ``server.py``: authority from wherever it was started). ``..`` and
    symlinks are the document's own to write, as an absolute path is. Others unchanged."""
    if spec.startswith("mcp:"):
        # The import table's key: the same command in two folders is two servers.
        return f"mcp:{_FOLDER_MARK}{os.path.abspath(folder)}{_FOLDER_MARK}{spec.removeprefix('mcp:')}"
    source = spec_file(spec)
    if source is None:
        return spec
    path = Path(os.path.expanduser(source))
    names = spec.removeprefix("openapi:")[len(source) :]  # "#op,…", or nothing
    return f"openapi:{path if path.is_absolute() else folder / path}{names}"


def _in_folder(rest: str) -> tuple[Path | None, str]:
    """(the folder an ``mcp:`` spec's command is started in, or None: the working directory; the
    rest of the spec after ``mcp:``), from what `spec_in_folder` wrote."""
    if not rest.startswith(_FOLDER_MARK):
        return None, rest
    _, folder, command = rest.split(_FOLDER_MARK, 2)
    return Path(folder), command


def _shown(spec: str) -> str:
    """`spec` as its errors name it: an ``mcp:`` command with the folder it is started in."""
    folder, rest = _in_folder(spec.removeprefix("mcp:")) if spec.startswith("mcp:") else (None, "")
    return spec if folder is None else f"mcp:{rest} (started in the deployment's folder {folder})"


def _command_words(spec: str) -> tuple[list[str], str]:
    """(the words of an ``mcp:`` spec's command, its ``#tool,…`` tail or ""); `DeploymentError`
    when the command cannot be split as a POSIX shell would."""
    _, rest = _in_folder(spec.removeprefix("mcp:"))
    command, _ = _names(rest)
    try:
        return shlex.split(command), rest[len(command) :]
    except ValueError as exc:
        raise DeploymentError(f"--tools mcp:{command}: {exc}") from None


def _relative_word(word: str) -> bool:
    """Whether a command's `word` can name a file by a relative path (not an option, an
    absolute path or one from a home folder)."""
    return not word.startswith(("-", "~")) and not os.path.isabs(word)


def server_files(spec: str, folder: Path) -> dict[str, str]:
    """SHA-256 of each file an ``mcp:`` spec's command names by a relative path inside `folder`
    (``python server.py``: ``server.py``), by the path as the command writes it (the folder's
    absolute path is no part of it: a copied deployment keeps its fingerprint). Words that name
    no file (``python``, ``-u``), absolute paths, and paths leading out of the folder (``..``) are
    not files of the deployment's; a symlink's content is its target's. What a server imports or
    reads besides is not named, so not hashed. `DeploymentError` when the command cannot be
    split. Empty for other specs."""
    if not spec.startswith("mcp:"):
        return {}
    root = os.path.abspath(folder)
    found: dict[str, str] = {}
    for word in _command_words(spec)[0]:
        path = os.path.normpath(os.path.join(root, word))
        if word in found or not _relative_word(word) or not path.startswith(root + os.sep):
            continue
        if not os.path.isfile(path):
            continue
        try:
            with open(path, "rb") as file:
                found[word] = hashlib.file_digest(file, "sha256").hexdigest()
        except OSError as exc:
            raise DeploymentError(f"--tools {_shown(spec)}: cannot read {path!r}: {exc.strerror}") from None
    return found


def spec_with_command_words(spec: str, place: Callable[[str], str | None]) -> str:
    """An ``mcp:`` spec with each word of its command naming a relative path replaced by what
    `place` makes of it (None: kept), for `pte init` to write a file given to it where the
    deployment finds it; `spec` itself, as typed, when none is replaced (or it is no ``mcp:``)."""
    if not spec.startswith("mcp:"):
        return spec
    words, names = _command_words(spec)
    placed = [(place(word) if _relative_word(word) else None) or word for word in words]
    return spec if placed == words else f"mcp:{shlex.join(placed)}{names}"


def _names(spec: str) -> tuple[str, list[str] | None]:
    source, sep, tail = spec.rpartition("#")
    if not sep or not tail or any(c.isspace() for c in tail):
        return spec, None
    return source, [name for name in tail.split(",") if name]


def import_spec(spec: str) -> Registry:
    """The registry an importer spec names; a usage error (with the reason) when it cannot be built.
    The process's import of `spec` while what it names is unchanged (`_state_of`), else imported
    afresh (the earlier import stays open for whoever holds its tools, until `forget_imports`)."""
    kind, _, rest = spec.partition(":")
    folder, rest = _in_folder(rest) if kind == "mcp" else (None, rest)
    source, only = _names(rest)
    if not source.strip():
        raise DeploymentError(f"--tools {kind}: needs a {'command' if kind == 'mcp' else 'spec file or URL'}")
    if _FOLDER_MARK in source:  # no command or path holds one; a document's must not name a folder
        raise DeploymentError(f"--tools {kind}:{source!r}: holds a NUL character")
    with _table_lock:
        spec_lock = _spec_locks.setdefault(spec, threading.Lock())
    with spec_lock:
        try:
            state = _state_of(kind, source)
            if folder is not None:  # a deployment's server: its files as they are now
                state = (*state, *sorted(server_files(spec, folder).items()))
            current = _imported.get(spec)
            if current is not None and current.state == state and not current.ended():
                return current.registry
            made = (
                _mcp(spec, source, only, state, folder)
                if kind == "mcp"
                else _openapi(spec, source, only, state)
            )
        except PTEError as exc:
            raise DeploymentError(f"--tools {_shown(spec)}: {exc}") from None
        except ImportError as exc:
            raise DeploymentError(
                f"--tools {_shown(spec)}: {exc} (pip install 'plan-then-execute[{kind}]')"
            ) from None
        with _table_lock:
            _imported[spec] = made
        return made.registry


def forget_imports(specs: Iterable[str] | None = None, *, wait_s: float | None = None) -> None:
    """Stop the MCP servers this process started, close the HTTP clients of its OpenAPI tools
    and forget the imports (the next use of a spec imports it afresh): those of `specs`, or
    every one (None). For a process that outlives the deployments it served, such as a test
    worker, where they ran on (a thread, an event loop, a server process, pooled connections)
    into later tests; `pte.Deployment.close` forgets its own, and the interpreter's exit every
    one (`EXIT_WAIT_S`). An import of a spec named that is under way is waited for, then closed.
    `wait_s`: how long it may wait for those imports and the MCP sessions to end, in all (None:
    each its connection's ``timeout_s``). Everything is closed, the first error raised after."""
    deadline = None if wait_s is None else time.monotonic() + wait_s

    def left() -> float | None:
        return None if deadline is None else max(0.0, deadline - time.monotonic())

    failure: Exception | None = None
    with _table_lock:
        named = [*_held, *_imported] if specs is None else list(specs)
        locks = [_spec_locks.get(spec) for spec in named]
    for spec, spec_lock in zip(named, locks, strict=True):
        # An import of the spec under way finishes first, then is closed with the rest (not
        # stored after, open); past `wait_s`, it is left to the process's end.
        timeout = left()
        if spec_lock is not None and not spec_lock.acquire(timeout=-1 if timeout is None else timeout):
            continue
        try:
            with _table_lock:
                closers = _held.pop(spec, [])
                _imported.pop(spec, None)
            while closers:
                close = closers.pop()
                try:
                    close(left())
                except Exception as exc:
                    failure = failure or exc
        finally:
            if spec_lock is not None:
                spec_lock.release()
    if failure is not None:
        raise failure


def _hold(spec: str, close: Callable[[float | None], None]) -> None:
    """Keep what an import of `spec` holds open, to be closed when forgotten or at interpreter exit."""
    global _closes_at_exit
    with _table_lock:
        if not _closes_at_exit:
            atexit.register(_close_at_exit)
            _closes_at_exit = True
        _held.setdefault(spec, []).append(close)


def _close_at_exit() -> None:
    """At interpreter exit: close what is still held, within `EXIT_WAIT_S`, saying nothing (no
    traceback as the process ends): left to the collector, a pooled socket is a ResourceWarning,
    and a server process sees its client die instead of its session end."""
    with contextlib.suppress(Exception):
        forget_imports(wait_s=EXIT_WAIT_S)


def _state_of(kind: str, source: str) -> tuple[Any, ...]:
    """What an import of `source` depends on that can change without its spec changing, read
    without importing it; an import made under another state is made afresh. ``openapi:``: the
    TLS settings of its client (`pte.importers.openapi.tls_context`, one object per state of the
    CA file) and, for a file, the SHA-256 of its bytes (exact: an edit in place within one tick
    of the file system's clock is seen, as a size and times would not). ``mcp:``, or a URL:
    nothing (see the module's docstring)."""
    if kind == "mcp":
        return ()
    import httpx  # noqa: F401  # the openapi extra's: without it, a usage error naming the extra

    from pte.importers.openapi import MAX_DOCUMENT_BYTES, tls_context

    if source.startswith(("http://", "https://")):
        return (tls_context(),)
    try:
        content = read_bounded_bytes(source, "OpenAPI document", MAX_DOCUMENT_BYTES)
    except FileRefused:
        return (tls_context(), None)  # importing it says why
    return tls_context(), hashlib.sha256(content).hexdigest()


def _mcp(
    spec: str, command_line: str, only: list[str] | None, state: tuple[Any, ...], folder: Path | None
) -> _Import:
    """Start `command_line` as an MCP server in `folder` (None: the working directory, as a command
    typed on the command line expects) and import its tools."""
    from pte.importers.mcp import MCPConnection, import_mcp_tools

    try:
        words = shlex.split(command_line)
    except ValueError as exc:
        raise DeploymentError(f"--tools mcp:{command_line}: {exc}") from None
    # The server's own stderr goes to the terminal's: the CLI's sys.stderr is a redacting
    # wrapper without a file descriptor, which a subprocess cannot write to.
    errlog = sys.__stderr__ if sys.__stderr__ is not None else open(os.devnull, "w")  # noqa: SIM115
    connection = MCPConnection.stdio(words[0], words[1:], cwd=folder, errlog=errlog)
    if folder is not None:
        # What runs, as the tools' code hashes bind it: the deployment's folder, wherever it lies
        # (its absolute path would change the fingerprint of a deployment copied elsewhere).
        connection.server["cwd"] = "."
    try:
        registry = import_mcp_tools(connection, only=only)
    except BaseException:
        connection.close()  # refused: no tool holds it
        raise
    _hold(spec, lambda wait_s: connection.close(timeout_s=wait_s))
    # An ended session's closer stays held, closed with the spec's: its tools keep failing as
    # `unavailable` (the server went away), not as closed by their owner.
    return _Import(registry, state, lambda: connection.ended)


def _openapi(spec: str, source: str, only: list[str] | None, state: tuple[Any, ...]) -> _Import:
    import httpx

    http = httpx.Client(timeout=30.0, verify=state[0])  # the TLS context the state names
    try:
        registry = _openapi_through(http, source, only)
    except BaseException:
        http.close()  # refused: no tool holds it
        raise
    _hold(spec, lambda wait_s: http.close())
    return _Import(registry, state)


def _openapi_through(http: Any, source: str, only: list[str] | None) -> Registry:
    from pte._core import OpenAPIError
    from pte.importers.openapi import import_openapi, load_openapi

    document = load_openapi(source, client=http)
    servers = document.get("servers") or []
    # No servers: OpenAPI's default is "/", relative to where the document came from.
    server = servers[0].get("url") if servers and isinstance(servers[0], dict) else "/"
    absolute = isinstance(server, str) and server.startswith(("http://", "https://"))
    if source.startswith(("http://", "https://")):
        # Fetched: requests stay on the origin the deployment named; the fetched document
        # may add a path ("/api/v1") but never send them to another host.
        base_url = urljoin(source, "/" if absolute or not isinstance(server, str) else server)
    elif absolute:
        base_url = str(server)  # the deployment's own file says where the service is
    else:
        raise OpenAPIError(
            f"the document names no absolute server URL ('servers': [{{'url': 'https://…'}}]): {server!r}"
        )
    return import_openapi(document, base_url=base_url, client=http, only=only)
