"""Tools: the `@tool` decorator, tool specs and JSON-Schema tools, the registry, packs,
generic-operation markers and selections.

Importers of OpenAPI, MCP and LangChain tools are in `pte.importers`.
"""

from __future__ import annotations

from pte._catalogue import (
    ExtendedBy,
    FieldName,
    FieldOf,
    PickOf,
    RegexGroups,
    RegexPattern,
    Registry,
    SchemaTool,
    Selection,
    ToolSpec,
    installed_packs,
    load_pack,
    load_registry,
    tool,
    tool_from_schema,
)

__all__ = [
    "ExtendedBy",
    "FieldName",
    "FieldOf",
    "PickOf",
    "RegexGroups",
    "RegexPattern",
    "Registry",
    "SchemaTool",
    "Selection",
    "ToolSpec",
    "installed_packs",
    "load_pack",
    "load_registry",
    "tool",
    "tool_from_schema",
]
