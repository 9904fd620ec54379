"""Imported tools from the command line: ``--tools mcp:CMD[#tool,…]`` and ``--tools openapi:SPEC[#op,…]``.

The importing itself is the deployment's (`pte._deploy`, which a deployment document's
``tools`` use too); here its errors become usage errors.
"""

from __future__ import annotations

from pte._catalogue import Registry
from pte._cli._support import UsageError
from pte._core import DeploymentError
from pte._deploy import IMPORT_PREFIXES, is_import_spec
from pte._deploy import import_spec as _import_spec

__all__ = ["IMPORT_PREFIXES", "import_spec", "is_import_spec"]


def import_spec(spec: str) -> Registry:
    """The registry an importer spec names; a usage error (with the reason) when it cannot be built."""
    try:
        return _import_spec(spec)
    except DeploymentError as exc:
        raise UsageError(str(exc)) from None
