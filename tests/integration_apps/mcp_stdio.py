"""Connect to a test MCP server script over stdio, its stderr kept in a file closed with it."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from pte.importers.mcp import MCPConnection

#: The CRM server the importer tests connect to.
CRM_SERVER = Path(__file__).parent / "crm_mcp_server.py"


@contextlib.contextmanager
def mcp_stdio(folder: Path, *flags: str, server: Path = CRM_SERVER, **env: str) -> Iterator[MCPConnection]:
    """`python FLAGS SERVER` (this environment and `env`) as an MCP server, connected over stdio;
    what it writes to stderr goes to ``FOLDER/server-stderr.txt``, closed after the connection
    (left open, it was collected in whichever later test: a ResourceWarning there)."""
    with (
        open(folder / "server-stderr.txt", "a", encoding="utf-8") as errlog,
        MCPConnection.stdio(
            sys.executable, [*flags, str(server)], env={**os.environ, **env}, errlog=errlog, timeout_s=60
        ) as connection,
    ):
        yield connection
