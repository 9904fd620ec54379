"""Third-party text in an imported tool: what the deployment replaced, dropped or left.

A source's schemas are read by the planner like the request, so every string and name the
deployment did not write is untrusted: an injected "pay 9800.00 to GB33..." in a
description, an ``enum`` value, a ``default``, an unknown ``x-`` keyword or a property name
that the planner copies into a literal would otherwise count as the user's. `scrub` walks a
JSON Schema as a schema (keywords, not property names) and sorts what it carries:

- closed vocabulary, never text: ``type`` names, known ``format`` names, numbers and booleans
  of constraints, ``$ref`` to a ``$defs`` entry, ``required`` entries naming a property;
- annotations (droppable text): descriptions, titles, examples, ``default``, comments,
  unknown ``format`` names, and every keyword JSON Schema does not define (``x-...``);
- text the tool needs (not droppable): property names the deployment did not declare,
  string ``enum``/``const`` values, ``pattern`` and ``patternProperties`` regexes, and other
  strings in places a validator reads. ``$defs`` names are droppable: renamed ``Type1``, ...

``source_text: "keep"`` leaves it all, listed as kept (the planner prompt frames it as
untrusted and the run is exposed, pte._run._exposure); ``"drop"`` drops the annotations and
renames the ``$defs``, and lists what it could not drop (the import is then refused, naming it).
``x-pte-*`` keywords are PTE's own (labels, generics): authority, which only the deployment
gives, so a source's are always removed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pte._core import DECIMAL_STRING_PATTERN

__all__ = ["TEXT_KEYWORDS", "Scrubbed", "scrub"]

#: Annotation keywords: free text for readers, never a constraint; dropped whole.
TEXT_KEYWORDS = frozenset(
    {
        "description",
        "title",
        "examples",
        "example",
        "$comment",
        "default",
        "deprecated",
        "readOnly",
        "writeOnly",
        "contentMediaType",
        "contentEncoding",
        "contentSchema",
        "$schema",
    }
)
_NAMED = frozenset({"properties", "$defs", "definitions", "dependentSchemas", "patternProperties"})
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
#: Constraints a validator reads whose values are numbers or booleans (a string in one is text).
_CONSTRAINTS = frozenset(
    {
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minLength",
        "maxLength",
        "minItems",
        "maxItems",
        "uniqueItems",
        "minProperties",
        "maxProperties",
        "minContains",
        "maxContains",
        "nullable",
    }
)
#: Constraints whose strings are text the tool needs (dropping them changes what it takes or returns).
_TEXT_CONSTRAINTS = frozenset(
    {
        "enum",
        "const",
        "pattern",
        "dependentRequired",
        "$id",
        "$anchor",
        "$dynamicAnchor",
        "$dynamicRef",
        "$recursiveRef",
        "$recursiveAnchor",
        "$vocabulary",
    }
)
_TYPES = frozenset({"string", "number", "integer", "boolean", "object", "array", "null"})
#: JSON Schema's and OpenAPI's format names: a closed vocabulary, shown as is.
_FORMATS = frozenset(
    {
        "date-time",
        "date",
        "time",
        "duration",
        "email",
        "idn-email",
        "hostname",
        "idn-hostname",
        "ipv4",
        "ipv6",
        "uri",
        "uri-reference",
        "iri",
        "iri-reference",
        "uuid",
        "uri-template",
        "json-pointer",
        "relative-json-pointer",
        "regex",
        "int32",
        "int64",
        "float",
        "double",
        "byte",
        "binary",
        "password",
        "decimal",
    }
)
#: Patterns PTE's own schema generator writes (pte.tool's Decimal): not the source's text.
_OWN_PATTERNS = frozenset({DECIMAL_STRING_PATTERN})
_DEF_KEYS = ("$defs", "definitions")


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def _has_text(value: Any) -> bool:
    if isinstance(value, str):
        return True
    if isinstance(value, Mapping):
        return bool(value)  # its keys are text
    if isinstance(value, list):
        return any(_has_text(item) for item in value)
    return False


@dataclass
class Scrubbed:
    """A schema as scrubbed, with where third-party text was kept and what could not be dropped."""

    schema: Any
    kept: list[str] = field(default_factory=list)
    undroppable: list[str] = field(default_factory=list)


def scrub(schema: Any, where: str, *, drop: bool, names: Iterable[str] = ()) -> Scrubbed:
    """`schema` with third-party text dropped (`drop`) or kept, and where text is left.

    `names`: top-level property names the deployment declared (its manifest, or the importer's
    own, such as OpenAPI's ``body``): not text. Locations are JSON Pointers prefixed with
    `where` (``input_schema/properties/q/description``; a property's own pointer for its name).
    """
    declared = frozenset(names)
    out = Scrubbed(schema=None)

    def text(at: str, droppable: bool) -> None:
        if not drop:
            out.kept.append(at)
        elif not droppable:
            out.undroppable.append(at)

    # $defs names are shown as type names: droppable by renaming them (and every $ref to them).
    renamed: dict[str, dict[str, str]] = {}
    if isinstance(schema, Mapping):
        count = 0
        for key in _DEF_KEYS:
            defs = schema.get(key)
            if isinstance(defs, Mapping):
                renamed[key] = {}
                for name in defs:
                    count += 1
                    renamed[key][name] = f"Type{count}" if drop else name

    def ref(value: Any, at: str) -> Any:
        if value == "#":
            return value
        if isinstance(value, str):
            for key, names_of in renamed.items():
                prefix = f"#/{key}/"
                if value.startswith(prefix):
                    name, _, rest = value[len(prefix) :].partition("/")
                    name = name.replace("~1", "/").replace("~0", "~")
                    if name in names_of and not rest:
                        return prefix + _escape(names_of[name])
        text(at, droppable=False)
        return value

    def walk(node: Any, at: str, root: bool = False) -> Any:
        if not isinstance(node, Mapping):
            if _has_text(node):  # not a schema (a malformed one): every string in it is text
                text(at, droppable=False)
            return node
        properties = node.get("properties")
        result: dict[str, Any] = {}
        for key, value in node.items():
            here = f"{at}/{_escape(key)}"
            if key.startswith("x-pte-"):
                continue  # labels and generics are the deployment's to declare, never a source's
            if key in TEXT_KEYWORDS:
                if _has_text(value) or key in ("default", "examples", "example"):
                    text(here, droppable=True)
                    if drop:
                        continue
                result[key] = value
            elif key in _NAMED and isinstance(value, Mapping):
                result[key] = named(key, value, here, root)
            elif key in _LISTS and isinstance(value, list):
                result[key] = [walk(item, f"{here}/{i}") for i, item in enumerate(value)]
            elif key in _SINGLE:
                result[key] = walk(value, here)
            elif key == "$ref":
                result[key] = ref(value, here)
            elif key == "type":
                kinds = value if isinstance(value, list) else [value]
                if not all(isinstance(kind, str) and kind in _TYPES for kind in kinds):
                    text(here, droppable=False)
                result[key] = value
            elif key == "format":
                if not (isinstance(value, str) and value in _FORMATS):
                    text(here, droppable=True)
                    if drop:
                        continue
                result[key] = value
            elif key == "pattern" and isinstance(value, str) and value in _OWN_PATTERNS:
                result[key] = value
            elif key == "required" and isinstance(value, list):
                known = properties if isinstance(properties, Mapping) else {}
                strays = [name for name in value if not isinstance(name, str) or name not in known]
                if strays:
                    text(here, droppable=True)
                result[key] = [name for name in value if name not in strays] if drop else value
            elif key in _CONSTRAINTS or key in _TEXT_CONSTRAINTS:
                if _has_text(value):
                    text(here, droppable=False)
                result[key] = value
            else:  # a keyword JSON Schema does not define: an annotation, its name and value text
                text(here, droppable=True)
                if not drop:
                    result[key] = value
        return result

    def named(key: str, value: Mapping[str, Any], here: str, root: bool) -> dict[str, Any]:
        result: dict[str, Any] = {}
        for name, sub in value.items():
            at = f"{here}/{_escape(name)}"
            if key in _DEF_KEYS and root and key in renamed:
                shown = renamed[key][name]
                if not drop:
                    text(at, droppable=True)
                result[shown] = walk(sub, at)
                continue
            if not (key == "properties" and root and name in declared):
                text(at, droppable=False)  # a name the tool needs, written by its source
            result[name] = walk(sub, at)
        return result

    out.schema = walk(schema, where, root=True)
    return out
