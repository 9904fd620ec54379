"""Tools of an MCP server as PTE tools, through the official `mcp` SDK
(``pip install 'plan-then-execute[mcp]'``).

    from pte.importers.mcp import MCPConnection, import_mcp_tools

    with MCPConnection.stdio("python", ["crm_server.py"]) as crm:
        registry = import_mcp_tools(crm, manifest="crm-manifest.json")
        engine = pte.Engine(registry, llm)
        ...

`MCPConnection` keeps one MCP session open on a background thread with its own event loop,
so tools can be called from any thread (the executor's workers included) while the server
process (stdio) or HTTP session lives. `import_mcp_tools` lists the server's tools and makes
a PTE tool of each that can be typed: the input schema is the server's, the output schema
the server's ``outputSchema`` or the manifest's ``output_schema``; a tool with neither is
refused (`ImportRefused`) with the manifest entry to write.

What the server says is not authority: its descriptions reach the planner only as tool
descriptions (plans are still compiled and policy-checked), its read-only hints are ignored,
and every imported tool is a non-idempotent ``write`` with ``untrusted`` output unless the
manifest declares otherwise. A manifest ``sha256`` pin refuses a server whose definition of
a tool changed since it was reviewed.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import sys
import threading
from collections.abc import AsyncIterator, Coroutine, Iterable, Mapping, Sequence
from contextlib import AsyncExitStack
from typing import Any, TextIO

from pte._catalogue import Registry, SchemaFunction
from pte._core import MCPError, StrictJSONError, ToolError
from pte._core import strict_json as strict_json
from pte.importers._common import ImportManifest, SourceTool, build_registry

__all__ = ["MCPConnection", "MCPError", "import_mcp_tools"]

#: Longest error text from a server kept in a step's error (it reaches the audit log and replans).
_MAX_ERROR_CHARS = 2000


def _require_sdk() -> Any:
    try:
        import mcp
    except ImportError:
        raise MCPError(
            "the MCP importer needs the official SDK: pip install 'plan-then-execute[mcp]'"
        ) from None
    return mcp


class MCPConnection:
    """One open MCP client session, usable from any thread. Close it (or use ``with``) when done.

    Make one with `stdio` (a server process PTE starts) or `http` (Streamable HTTP).
    `timeout_s` bounds connecting and listing. A tool call is bounded by its tool's `timeout_s`
    (the executor stops waiting then) and, as a backstop for callers without one, by
    `call_timeout_s` here.
    """

    def __init__(
        self,
        open_transport: Any,
        *,
        label: str,
        timeout_s: float = 30.0,
        call_timeout_s: float = 3600.0,
        server: Mapping[str, Any] | None = None,
    ) -> None:
        self.label = label
        #: What serves the tools (transport, command and arguments or URL; never environment
        #: values or headers): imported tools' code hashes bind it.
        self.server: dict[str, Any] = dict(server) if server is not None else {"label": label}
        self.timeout_s = timeout_s
        self.call_timeout_s = call_timeout_s
        self._open_transport = open_transport
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._session: Any = None
        self._failure: BaseException | None = None
        self._closed = False
        #: The server's side of the transport ended (a stdio server's process exited, its output
        #: closed) without the owner closing the connection: calls fail as ``unavailable``.
        self._server_ended = False
        self._thread = threading.Thread(target=self._serve, name=f"pte-mcp {label}", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout_s):
            self.close()
            raise MCPError(f"MCP server {label} did not complete its handshake within {timeout_s:g}s")
        if self._failure is not None:
            failure = self._failure
            self.close()
            raise MCPError(f"cannot connect to MCP server {label}: {_describe(failure)}") from None

    @classmethod
    def stdio(
        cls,
        command: str,
        args: Sequence[str] = (),
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        errlog: TextIO | None = None,
        timeout_s: float = 30.0,
    ) -> MCPConnection:
        """Start `command args` as an MCP server speaking over its stdin/stdout, and connect."""
        mcp = _require_sdk()
        params = mcp.StdioServerParameters(
            command=command, args=list(args), env=dict(env) if env is not None else None, cwd=cwd
        )

        def open_transport() -> Any:
            return mcp.stdio_client(params, errlog=errlog if errlog is not None else sys.stderr)

        server = {
            "transport": "stdio",
            "command": command,
            "args": list(args),
            "cwd": os.fspath(cwd) if cwd is not None else None,
            "env": sorted(env) if env is not None else None,  # names only: values may be secrets
        }
        return cls(open_transport, label=f"stdio:{command}", timeout_s=timeout_s, server=server)

    @classmethod
    def http(
        cls, url: str, *, headers: Mapping[str, str] | None = None, timeout_s: float = 30.0
    ) -> MCPConnection:
        """Connect to an MCP server over Streamable HTTP at `url` (e.g. ``http://127.0.0.1:8000/mcp``)."""
        _require_sdk()
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        def open_transport() -> Any:
            client = create_mcp_http_client(headers=dict(headers) if headers else None)
            return _owning(client, streamable_http_client(url, http_client=client))

        return cls(open_transport, label=url, timeout_s=timeout_s, server={"transport": "http", "url": url})

    # -- the background session ---------------------------------------------------------------

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._main())
        finally:
            self._ready.set()
            self._loop.close()

    async def _main(self) -> None:
        mcp = _require_sdk()
        self._stop = asyncio.Event()
        try:
            async with AsyncExitStack() as stack:
                streams = await stack.enter_async_context(self._open_transport())
                # The server's messages reach the session through a relay that sees the
                # transport end (the SDK's session outlives its server: calls would fail one by
                # one, the session still "open"), ends the session and says why.
                received = await stack.enter_async_context(self._relaying(streams[0]))
                session = await stack.enter_async_context(mcp.ClientSession(received, streams[1]))
                await session.initialize()
                self._session = session
                self._ready.set()
                await self._stop.wait()
                if self._server_ended and not self._closed:
                    raise MCPError(self._ended_reason())
        except BaseException as exc:  # reported to the caller (connect) or to later calls
            self._failure = exc
        finally:
            self._session = None

    @contextlib.asynccontextmanager
    async def _relaying(self, source: Any) -> AsyncIterator[Any]:
        """A stream of what `source` (the transport's) receives; when `source` ends, the server
        has: `_server_ended` is set before the session sees its end, and the session is stopped."""
        import anyio

        sink, received = anyio.create_memory_object_stream[Any](0)

        async def relay() -> None:
            async with sink:
                with contextlib.suppress(
                    anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError
                ):
                    async for message in source:
                        await sink.send(message)
                self._server_ended = True  # before the session's readers see the end (the close)
            if self._stop is not None:
                self._stop.set()

        task = asyncio.ensure_future(relay())
        try:
            yield received
        finally:
            task.cancel()  # the owner's close: the session has ended, the transport is next
            with contextlib.suppress(asyncio.CancelledError):
                await task
            received.close()

    def _run(self, coroutine: Coroutine[Any, Any, Any], timeout_s: float) -> Any:
        if self._closed:
            coroutine.close()
            raise _ClosedByOwner(
                f"the connection to MCP server {self.label} was closed by its owner (its `with` block "
                "ended, close() or forget_imports ran) before this call: keep it open while its tools "
                "are used"
            )
        if self._session is None or self._server_ended:
            coroutine.close()
            if self._server_ended:
                raise MCPError(self._ended_reason())
            detail = f": {_describe(self._failure)}" if self._failure else ""
            raise MCPError(f"the connection to MCP server {self.label} is closed{detail}")
        future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        try:
            return future.result(timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise
        except BaseException:
            future.cancel()  # e.g. the executor's timeout raised in this thread: stop the request too
            raise

    # -- public ---------------------------------------------------------------------------------

    def list_tools(self) -> list[dict[str, Any]]:
        """The server's tools in MCP wire form (``name``, ``description``, ``inputSchema``, ...)."""

        async def collect() -> list[dict[str, Any]]:
            from mcp import types

            tools: list[dict[str, Any]] = []
            cursor: str | None = None
            while True:
                params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
                page = await self._session.list_tools(params=params)
                tools.extend(t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in page.tools)
                cursor = page.next_cursor
                if not cursor:
                    return tools

        try:
            result: list[dict[str, Any]] = self._run(collect(), self.timeout_s)
        except (concurrent.futures.TimeoutError, MCPError):
            raise
        except Exception as exc:
            raise MCPError(f"cannot list the tools of MCP server {self.label}: {_describe(exc)}") from None
        return result

    def call_tool(
        self, name: str, arguments: Mapping[str, Any], *, timeout_s: float | None = None
    ) -> dict[str, Any]:
        """Call one tool; its result in MCP wire form (``content``, ``structuredContent``, ``isError``)."""

        async def call() -> dict[str, Any]:
            result = await self._session.call_tool(name, dict(arguments))
            dumped: dict[str, Any] = result.model_dump(mode="json", by_alias=True, exclude_none=True)
            return dumped

        try:
            answer: dict[str, Any] = self._run(call(), timeout_s or self.call_timeout_s)
        except concurrent.futures.TimeoutError:
            raise ToolError("timeout", f"MCP server {self.label} did not answer {name!r} in time") from None
        except _ClosedByOwner as exc:
            raise ToolError("client_closed", str(exc)) from None
        except MCPError as exc:  # the session ended without being closed: the server went away
            raise ToolError("unavailable", str(exc)) from None
        except Exception as exc:
            if self._server_ended:  # under way when the server went away (the SDK's own error)
                raise ToolError("unavailable", self._ended_reason()) from None
            raise ToolError("tool_error", f"MCP call {name!r} failed: {_clip(_describe(exc))}") from None
        return answer

    def _ended_reason(self) -> str:
        return f"MCP server {self.label} ended the session without being asked (its process exited)"

    @property
    def ended(self) -> bool:
        """Whether the session has ended: closed by its owner, or its server went away (a stdio
        server's process exited). A deployment built again imports an ended session's tools afresh."""
        return self._closed or self._server_ended or not self._thread.is_alive()

    def close(self, *, timeout_s: float | None = None) -> None:
        """End the session (and stop a stdio server process), waiting up to `timeout_s` for it
        (None: the connection's ``timeout_s``). Idempotent."""
        if self._closed:
            return
        self._closed = True
        stop = self._stop
        if stop is not None and not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop already finished
                self._loop.call_soon_threadsafe(stop.set)
        self._thread.join(self.timeout_s if timeout_s is None else timeout_s)

    def __enter__(self) -> MCPConnection:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"MCPConnection({self.label!r}, {'closed' if self._closed else 'open'})"


class _ClosedByOwner(MCPError):
    """A call on a connection its owner closed: the tool fails as ``client_closed``."""


class _owning:
    """A transport context that also closes the HTTP client it was given."""

    def __init__(self, client: Any, transport: Any) -> None:
        self._client = client
        self._transport = transport

    async def __aenter__(self) -> Any:
        return await self._transport.__aenter__()

    async def __aexit__(self, *exc_info: Any) -> Any:
        try:
            return await self._transport.__aexit__(*exc_info)
        finally:
            await self._client.aclose()


def _describe(exc: BaseException | None) -> str:
    if exc is None:
        return "unknown error"
    inner = getattr(exc, "exceptions", None)  # an ExceptionGroup from a task group: say what is inside
    if inner:
        return _describe(inner[0])
    return f"{type(exc).__name__}: {exc}"


def _clip(text: str) -> str:
    return text if len(text) <= _MAX_ERROR_CHARS else text[: _MAX_ERROR_CHARS - 3] + "..."


def _source_tool(entry: Mapping[str, Any]) -> SourceTool:
    return SourceTool(
        name=str(entry.get("name", "")),
        description=str(entry.get("description") or entry.get("title") or ""),
        input_schema=entry.get("inputSchema"),
        output_schema=entry.get("outputSchema"),
    )


def output_of(result: Mapping[str, Any], output_schema: Mapping[str, Any]) -> Any:
    """A tool result's output as JSON data: ``structuredContent`` when present, else its text.

    Text is taken as is when the output schema is ``{"type": "string"}``, and parsed as strict
    JSON otherwise. An ``isError`` result fails the step with the server's (clipped) text.
    """
    texts = [c.get("text", "") for c in result.get("content") or () if c.get("type") == "text"]
    if result.get("isError"):
        raise ToolError("tool_error", _clip("\n".join(texts) or "the MCP tool reported an error"))
    if result.get("structuredContent") is not None:
        return result["structuredContent"]
    text = "\n".join(texts)
    if output_schema.get("type") == "string":
        return text
    try:
        return strict_json.loads(text)
    except StrictJSONError as exc:
        raise ToolError(
            "invalid_output",
            f"the MCP tool answered text that is not strict JSON ({exc.message}); declare "
            '"output_schema": {"type": "string"} in the manifest to take it as text',
        ) from None


def import_mcp_tools(
    connection: MCPConnection,
    *,
    manifest: ImportManifest | Mapping[str, Any] | str | os.PathLike[str] | None = None,
    prefix: str = "",
    only: Iterable[str] | None = None,
) -> Registry:
    """PTE tools for the tools an MCP server lists (see the module docstring).

    `manifest`: an import manifest (path, document or `ImportManifest`); with one, exactly the
    tools it lists are imported. `prefix`: prepended to every tool's name (``crm.``). `only`:
    import just these source tool names. Raises `ImportRefused` listing every tool that
    cannot be typed, does not exist, or changed since its manifest pin.
    """
    sources = [_source_tool(entry) for entry in connection.list_tools()]

    def make_func(source: SourceTool, output_schema: Mapping[str, Any]) -> SchemaFunction:
        schema = dict(output_schema)
        name = source.name

        def call(args: dict[str, Any]) -> Any:
            return output_of(connection.call_tool(name, args), schema)

        call.__qualname__ = call.__name__ = f"mcp_{name}"
        return call

    def runs(source: SourceTool) -> Mapping[str, Any]:
        return {"server": connection.server, "sdk": _sdk_version()}

    return build_registry("MCP", sources, make_func, manifest=manifest, prefix=prefix, only=only, runs=runs)


def _sdk_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("mcp")
    except PackageNotFoundError:
        return None
