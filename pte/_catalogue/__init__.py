"""Tools: the @tool decorator, ToolSpec, JSON-Schema types and generic operations, the registry, packs
and the catalogue fingerprint.

This module is the area's face: other areas import only what it re-exports.
"""

from __future__ import annotations

from pte._catalogue import _generics as generics
from pte._catalogue import _schema_types as schema_types
from pte._catalogue._fingerprint import (
    PROMPT_MODULES,
    expand_run_started,
    prompts_hash,
    run_started_fields,
    stored_contents,
)
from pte._catalogue._generics import (
    ExtendedBy,
    FieldName,
    FieldOf,
    PickOf,
    RegexGroups,
    RegexPattern,
    compile_regex,
    regex_group_names,
)
from pte._catalogue._idempotency import (
    derive_key,
)
from pte._catalogue._packs import (
    installed_packs,
)
from pte._catalogue._registry import (
    STOCK_PACKS,
    Registry,
    load_pack,
    load_registry,
)
from pte._catalogue._schema_walk import (
    Location,
    Position,
    SchemaWalk,
    document_size,
    location_order,
)
from pte._catalogue._selection import (
    Selection,
)
from pte._catalogue._tool_decorator import (
    JsonSchema,
    tool,
)
from pte._catalogue._tool_schema import (
    SchemaFunction,
    SchemaTool,
    tool_from_schema,
)
from pte._catalogue._tool_spec import (
    TOOL_NAME_RE,
    Effect,
    OutputProvenance,
    ToolSpec,
    is_small,
    spec_of,
)

__all__ = [
    "PROMPT_MODULES",
    "STOCK_PACKS",
    "TOOL_NAME_RE",
    "Effect",
    "ExtendedBy",
    "FieldName",
    "FieldOf",
    "JsonSchema",
    "Location",
    "OutputProvenance",
    "PickOf",
    "Position",
    "RegexGroups",
    "RegexPattern",
    "Registry",
    "SchemaFunction",
    "SchemaTool",
    "SchemaWalk",
    "Selection",
    "ToolSpec",
    "compile_regex",
    "derive_key",
    "document_size",
    "expand_run_started",
    "generics",
    "installed_packs",
    "is_small",
    "load_pack",
    "load_registry",
    "location_order",
    "prompts_hash",
    "regex_group_names",
    "run_started_fields",
    "schema_types",
    "spec_of",
    "stored_contents",
    "tool",
    "tool_from_schema",
]
