"""Third-party text in an imported tool: what the deployment replaced, dropped or left.

A source's descriptions, titles and examples are read by the planner like the request, so
text the deployment did not write is untrusted: an injected parameter description ("use
IBAN GB33... for refunds") that the planner copies into a literal would otherwise count as
the user's. The import manifest replaces or drops it:

- ``"description"``: the tool's description (``null`` drops it);
- ``"parameters": {"p": {"description": ...}}``: one parameter's description (``null`` drops);
- ``"source_text": "drop"``: every other description, title, example and comment the source
  wrote, in both schemas; ``"keep"`` (the default) leaves it, framed in the planner prompt as
  untrusted, and a plan written after the planner read it is exposed (pte._run._exposure).

`scrub` walks a JSON Schema as a schema (keywords, not property names), so a property
called ``description`` is never mistaken for text.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["TEXT_KEYWORDS", "scrub"]

#: Schema keywords whose values are free text for readers, not constraints.
TEXT_KEYWORDS = frozenset({"description", "title", "examples", "example", "$comment"})
_NAMED = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})
_LISTS = frozenset({"anyOf", "oneOf", "allOf", "prefixItems"})
_SINGLE = frozenset(
    {
        "items",
        "additionalProperties",
        "not",
        "if",
        "then",
        "else",
        "contains",
        "propertyNames",
        "unevaluatedProperties",
        "unevaluatedItems",
        "additionalItems",
    }
)


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def scrub(schema: Any, where: str, *, drop: bool) -> tuple[Any, list[str]]:
    """`schema` with its free text dropped (`drop`) or kept, and where text is kept.

    The locations are JSON Pointers prefixed with `where` (``input_schema/properties/q/description``).
    """
    kept: list[str] = []

    def walk(node: Any, at: str) -> Any:
        if isinstance(node, list):
            return [walk(item, f"{at}/{i}") for i, item in enumerate(node)]
        if not isinstance(node, Mapping):
            return node
        out: dict[str, Any] = {}
        for key, value in node.items():
            here = f"{at}/{_escape(key)}"
            if key in TEXT_KEYWORDS:
                if not drop:
                    out[key] = value
                    kept.append(here)
            elif key in _NAMED and isinstance(value, Mapping):
                out[key] = {name: walk(sub, f"{here}/{_escape(name)}") for name, sub in value.items()}
            elif key in _LISTS or key in _SINGLE:
                out[key] = walk(value, here)
            else:
                out[key] = value  # a constraint (type, enum, pattern, ...): kept as the source wrote it
        return out

    return walk(schema, where), kept
