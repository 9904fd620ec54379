"""LangChain tools as PTE tools (``pip install 'plan-then-execute[langchain]'``, i.e. ``langchain-core``).

    from pte.importers.langchain import import_langchain_tools

    registry = import_langchain_tools([search_tool, lookup_tool], manifest="lc-manifest.json")

The input schema is the tool's ``tool_call_schema`` (what a model is asked to fill in). LangChain
does not type outputs (``get_output_jsonschema`` is ``Any``), so the output schema comes from the
import manifest or, for a tool made from a function (``@tool``, ``StructuredTool.from_function``),
from that function's return annotation, exactly as `pte.tool` derives it. A tool with neither is
refused with the manifest entry to write. Tools are called with ``invoke`` (``ainvoke`` for
async-only tools); effect and provenance default to ``write`` and ``untrusted`` as for every importer.
A `ToolException` fails the step, also for a tool whose ``handle_tool_error`` would have
returned the error text as its answer. Each tool's code hash binds its class, its function's
code and the langchain-core version, so an approval binds what runs.
"""

from __future__ import annotations

import copy
import importlib.metadata
import inspect
import marshal
import os
import typing
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import PydanticUserError, TypeAdapter

from pte._catalogue import Registry, SchemaFunction
from pte._core import ImportRefused, ImportSourceError, ToolError, sha256_hex
from pte.importers._common import ImportManifest, SourceTool, build_registry

__all__ = ["import_langchain_tools"]

#: Longest error text from a tool kept in a step's error (it reaches the audit log and replans).
_MAX_ERROR_CHARS = 2000


def _return_schema(tool: Any) -> dict[str, Any] | None:
    """The JSON Schema of the return annotation of the function behind a tool, if it has one."""
    function = getattr(tool, "func", None) or getattr(tool, "coroutine", None)
    if function is None or getattr(tool, "response_format", "content") != "content":
        return None
    try:
        hints = typing.get_type_hints(function)
    except Exception:  # unresolvable annotations: treated as untyped
        return None
    if "return" not in hints or hints["return"] is Any:
        return None
    from pte._catalogue import JsonSchema  # the generator @pte.tool uses: same Decimal/date handling

    try:
        schema: dict[str, Any] = TypeAdapter(hints["return"]).json_schema(
            mode="serialization", schema_generator=JsonSchema
        )
    except PydanticUserError:
        return None
    return schema


def _source_tool(tool: Any) -> SourceTool:
    try:
        call_schema = tool.tool_call_schema
        # A tool declared with a JSON Schema (args_schema as a dict) is called with exactly it.
        input_schema = (
            copy.deepcopy(call_schema) if isinstance(call_schema, dict) else call_schema.model_json_schema()
        )
    except Exception:  # a tool whose args schema is not a pydantic model
        input_schema = tool.get_input_jsonschema() if hasattr(tool, "get_input_jsonschema") else None
    return SourceTool(
        name=str(tool.name),
        description=str(tool.description or ""),
        input_schema=input_schema,
        output_schema=_return_schema(tool),
    )


def import_langchain_tools(
    tools: Iterable[Any],
    *,
    manifest: ImportManifest | Mapping[str, Any] | str | os.PathLike[str] | None = None,
    prefix: str = "",
    only: Iterable[str] | None = None,
) -> Registry:
    """PTE tools for LangChain ``BaseTool`` objects (see the module docstring).

    Raises `ImportRefused` listing every tool that cannot be typed.
    """
    try:
        from langchain_core.tools import BaseTool, ToolException
    except ImportError:
        raise ImportSourceError(
            "the LangChain importer needs langchain-core: pip install 'plan-then-execute[langchain]'"
        ) from None
    by_name: dict[str, Any] = {}
    for tool in tools:
        if not isinstance(tool, BaseTool):
            raise ImportRefused(f"{tool!r} is not a LangChain tool (langchain_core.tools.BaseTool)")
        by_name[str(tool.name)] = tool

    def make_func(source: SourceTool, output_schema: Mapping[str, Any]) -> SchemaFunction:
        tool = _raising(by_name[source.name])
        if getattr(tool, "func", None) is None and getattr(tool, "coroutine", None) is not None:

            async def acall(args: dict[str, Any]) -> Any:
                try:
                    return await tool.ainvoke(args)
                except ToolException as exc:
                    raise _failed(tool, exc) from None

            return acall

        def call(args: dict[str, Any]) -> Any:
            try:
                return tool.invoke(args)
            except ToolException as exc:
                raise _failed(tool, exc) from None

        return call

    def runs(source: SourceTool) -> Mapping[str, Any]:
        return _what_runs(by_name[source.name])

    sources = [_source_tool(tool) for tool in by_name.values()]
    return build_registry(
        "LangChain", sources, make_func, manifest=manifest, prefix=prefix, only=only, runs=runs
    )


def _raising(tool: Any) -> Any:
    """`tool` with LangChain's error handling off, so a failure fails the step.

    A tool with ``handle_tool_error`` (or ``handle_validation_error``) set turns a
    `ToolException` into a returned error string for an agent to read: through PTE that
    string would be recorded as the step's successful output. Off, the exception reaches PTE,
    which records a failed step (and replans, with the error, where `pte run` may).
    """
    if not getattr(tool, "handle_tool_error", False) and not getattr(tool, "handle_validation_error", False):
        return tool
    return tool.model_copy(update={"handle_tool_error": False, "handle_validation_error": False})


def _failed(tool: Any, exc: Exception) -> ToolError:
    text = " ".join(str(exc).split()) or type(exc).__name__
    clipped = text if len(text) <= _MAX_ERROR_CHARS else text[: _MAX_ERROR_CHARS - 3] + "..."
    return ToolError("tool_error", f"LangChain tool {tool.name!r} failed: {clipped}")


def _what_runs(tool: Any) -> dict[str, Any]:
    """What an imported LangChain tool runs: its class, its function's (or ``_run``'s) code,
    and the langchain-core that calls it (`build_registry` binds it into the code hash)."""
    kind = type(tool)
    function = getattr(tool, "func", None) or getattr(tool, "coroutine", None)
    target = function if function is not None else getattr(kind, "_run", None) or kind
    try:
        code = sha256_hex(inspect.getsource(inspect.unwrap(target)))
    except (OSError, TypeError):
        compiled = getattr(target, "__code__", None)
        code = sha256_hex(marshal.dumps(compiled)) if compiled is not None else repr(target)
    return {
        "class": f"{kind.__module__}.{kind.__qualname__}",
        "code": code,
        "langchain_core": _langchain_version(),
    }


def _langchain_version() -> str | None:
    try:
        return str(importlib.metadata.version("langchain-core"))
    except importlib.metadata.PackageNotFoundError:
        return None
