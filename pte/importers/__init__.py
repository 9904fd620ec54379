"""Importers: tools from outside catalogues as typed PTE tools.

- `pte.importers.mcp`: the tools of an MCP server (stdio or Streamable HTTP),
  ``pip install 'plan-then-execute[mcp]'``.
- `pte.importers.openapi`: the operations of an OpenAPI 3 document, called over httpx.
- `pte.importers.langchain`: LangChain tools (``langchain-core``).

Every importer goes through `build_registry`: an import manifest
(schemas/import-manifest.schema.json) supplies what the source does not say, and a tool
that cannot be typed is refused (`ImportRefused`) with the declaration to add.
"""

from __future__ import annotations

from pte._core import ImportRefused
from pte.importers._common import ImportManifest, SourceTool, build_registry, fingerprint

__all__ = ["ImportManifest", "ImportRefused", "SourceTool", "build_registry", "fingerprint"]
