"""What every importer shares: source tool definitions, the import manifest, and the refusals.

An importer turns an outside catalogue into `SourceTool` definitions and a callable per
tool; `build_registry` applies the deployment's import manifest and makes PTE tools with
`tool_from_schema`. The source is a third party: what it says about a tool (descriptions,
"read-only" hints) is never taken as authority. Effect, provenance, sinks and approval
come from the manifest, else from conservative defaults (``write``, not idempotent,
``untrusted`` output), except where the importer itself decides how the tool is called
(an OpenAPI GET is sent as a GET).
"""

from __future__ import annotations

import copy
import importlib.util
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema

from pte._catalogue import TOOL_NAME_RE, Effect, Registry, SchemaFunction, tool_from_schema
from pte._core import (
    FileRefused,
    ImportRefused,
    ToolRegistrationError,
    __version__,
    canonical_json,
    load_schema,
    read_bounded_text,
    sha256_hex,
)
from pte._core import strict_json as strict_json
from pte.importers._text import scrub

__all__ = [
    "ImportManifest",
    "SourceTool",
    "build_registry",
    "fingerprint",
    "importer_version",
]

#: The planner reads descriptions; a source cannot flood the prompt through one.
MAX_DESCRIPTION_CHARS = 2000


@dataclass(frozen=True)
class SourceTool:
    """One tool as the source describes it, before the manifest is applied."""

    name: str
    description: str
    input_schema: Mapping[str, Any] | None
    output_schema: Mapping[str, Any] | None
    #: The effect when the manifest declares none (the importer's own knowledge, else "write").
    default_effect: Effect = "write"
    #: Whether the call's arguments reach a third party when the manifest says nothing (an
    #: OpenAPI GET: its URL and query): every parameter is then a guarded sink (egress).
    default_egress: bool = False
    #: Top-level input property names the importer chose, not the source (OpenAPI's ``body``).
    own_names: frozenset[str] = frozenset()

    def definition(self) -> dict[str, Any]:
        """The parts a manifest pin covers."""
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
            "output_schema": self.output_schema,
        }


def fingerprint(tool: SourceTool) -> str:
    """SHA-256 of a source tool's definition (canonical JSON): the ``sha256`` pin of a manifest."""
    return sha256_hex(canonical_json(tool.definition()))


@dataclass(frozen=True)
class ImportManifest:
    """A deployment's declarations about imported tools (schemas/import-manifest.schema.json)."""

    tools: Mapping[str, Mapping[str, Any]]
    source: str = "<manifest>"

    @classmethod
    def load(cls, manifest: ImportManifest | Mapping[str, Any] | str | os.PathLike[str]) -> ImportManifest:
        """From a file path (strict JSON), a parsed document, or an `ImportManifest`."""
        if isinstance(manifest, ImportManifest):
            return manifest
        if isinstance(manifest, Mapping):
            document: Any = dict(manifest)
            source = "<manifest>"
        else:
            source = str(manifest)
            try:
                document = strict_json.loads(read_bounded_text(manifest, "import manifest"))
            except FileRefused as exc:
                raise ImportRefused(str(exc)) from None
            except ValueError as exc:
                raise ImportRefused(f"cannot read import manifest {source!r}: {exc}") from None
        validator = jsonschema.Draft202012Validator(load_schema("import-manifest.schema.json"))
        error = jsonschema.exceptions.best_match(validator.iter_errors(document))
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path) or "(root)"
            raise ImportRefused(f"import manifest {source!r} is invalid at {where}: {error.message}")
        return cls(tools=document["tools"], source=source)


def _how_to_declare(kind: str, name: str) -> str:
    return (
        f'declare it in the import manifest: {{"pte_import": "1", "tools": {{"{name}": '
        f'{{"output_schema": {{...}}}}}}}} (a JSON Schema of what the {kind} tool returns; '
        '{"type": "string"} takes its text as is)'
    )


def importer_version(module: str) -> str:
    """SHA-256 of an importer's code: its module's source and this shared module's, with
    PTE's version. Part of what every imported tool's code hash binds."""
    texts = [__version__]
    for name in (module, __name__):
        try:
            spec = importlib.util.find_spec(name)
            origin = spec.origin if spec is not None else None
            texts.append(sha256_hex(Path(origin).read_bytes()) if origin else name)
        except (ImportError, ValueError, OSError):  # e.g. a make_func defined in __main__
            texts.append(name)
    return sha256_hex("\n".join(texts))


def build_registry(
    kind: str,
    sources: Iterable[SourceTool],
    make_func: Callable[[SourceTool, Mapping[str, Any]], SchemaFunction],
    *,
    manifest: ImportManifest | Mapping[str, Any] | str | os.PathLike[str] | None = None,
    prefix: str = "",
    only: Iterable[str] | None = None,
    runs: Callable[[SourceTool], Mapping[str, Any]] | None = None,
) -> Registry:
    """PTE tools for `sources`, as the manifest declares them; refuses what cannot be typed.

    With a manifest, exactly the tools it lists are imported (each must exist in the source);
    without one, every source tool (or those named in `only`). Every problem is collected
    and raised together as one `ImportRefused`, so nothing is half imported.

    Each tool's code hash binds what runs (`pte.catalogue.tool_from_schema`'s `runs`): the importer
    (`kind` and `importer_version` of `make_func`'s module), the source's definition of the
    tool (`fingerprint`) and what `runs(source)` names (a server command, a spec and an
    operation): an approval of one imported tool never carries over to another that shares
    its name and the importer's code.
    """
    version = importer_version(make_func.__module__)
    by_name = {tool.name: tool for tool in sources}
    declared = ImportManifest.load(manifest) if manifest is not None else None
    if only is not None:
        wanted = list(dict.fromkeys(only))
    elif declared is not None:
        wanted = list(declared.tools)
    else:
        wanted = list(by_name)
    problems: list[str] = []
    specs = []
    for name in wanted:
        source = by_name.get(name)
        if source is None:
            problems.append(
                f"{kind} tool {name!r} is not offered by the source (it offers {sorted(by_name)})"
            )
            continue
        declaration = declared.tools.get(name) if declared is not None else None
        if declared is not None and declaration is None:
            problems.append(f"{kind} tool {name!r} is not in the import manifest; add it to import it")
            continue
        declaration = declaration or {}
        pin = declaration.get("sha256")
        if pin is not None and pin != fingerprint(source):
            problems.append(
                f"{kind} tool {name!r} changed since the manifest pinned it (sha256 {pin[:12]}..., now "
                f"{fingerprint(source)[:12]}...): review the new definition, then update the pin"
            )
            continue
        output_schema = declaration.get("output_schema", source.output_schema)
        if not output_schema:
            problems.append(f"{kind} tool {name!r} declares no output schema; {_how_to_declare(kind, name)}")
            continue
        input_schema = declaration.get("input_schema", source.input_schema)
        if not input_schema or input_schema.get("type") != "object":
            problems.append(
                f"{kind} tool {name!r} has no object input schema; PTE passes one arguments object "
                "checked against it (fix the source, or wrap the tool with pte.catalogue.tool_from_schema)"
            )
            continue
        tool_name = declaration.get("name", prefix + name)
        if not TOOL_NAME_RE.fullmatch(tool_name):
            problems.append(
                f"{kind} tool {name!r}: {tool_name!r} is not a PTE tool name "
                f'(^[A-Za-z][A-Za-z0-9_.-]{{0,63}}$); rename it: {{"tools": {{"{name}": {{"name": "..."}}}}}}'
            )
            continue
        text = _deployment_text(
            source, declaration, named_by_deployment=declared is not None or only is not None
        )
        if isinstance(text, str):
            problems.append(f"{kind} tool {name!r}: {text}")
            continue
        description, input_schema, output_schema, third_party = text
        effect = declaration.get("effect", source.default_effect)
        sinks = dict(declaration.get("sinks") or {})
        if declaration.get("egress", source.default_egress and effect == "read"):
            # Egress: what a read sends (URL, query) reaches a third party; open a parameter
            # by declaring it a sink that accepts untrusted data.
            for param in input_schema.get("properties") or {}:
                sinks.setdefault(param, ["request", "trusted"])
        try:
            specs.append(
                tool_from_schema(
                    tool_name,
                    description=description[:MAX_DESCRIPTION_CHARS],
                    input_schema=input_schema,
                    output_schema=output_schema,
                    func=make_func(source, output_schema),
                    effect=effect,
                    idempotent=declaration.get("idempotent"),
                    provenance=declaration.get("provenance", "untrusted"),
                    sinks=sinks or None,
                    requires_approval=declaration.get("requires_approval", False),
                    timeout_s=declaration.get("timeout_s", 30.0),
                    runs={
                        "importer": kind,
                        "importer_version": version,
                        "source_tool": name,
                        "definition": fingerprint(source),
                        **(dict(runs(source)) if runs is not None else {}),
                    },
                    read_effects=bool(declaration.get("side_effects", False)) and effect == "read",
                    third_party_text=third_party,
                )
            )
        except ToolRegistrationError as exc:
            problems.append(f"{kind} tool {name!r}: {exc}")
    if problems:
        raise ImportRefused(f"cannot import {len(problems)} {kind} tool(s):\n- " + "\n- ".join(problems))
    return Registry(specs)


def _deployment_text(
    source: SourceTool, declaration: Mapping[str, Any], *, named_by_deployment: bool
) -> tuple[str, dict[str, Any], dict[str, Any], list[str]] | str:
    """The description and schemas with the manifest's text applied (pte.importers._text), and
    where the source's own text is left; a message when the manifest names no parameter, or
    ``source_text: "drop"`` cannot drop what the source wrote.

    A schema the manifest gives (``input_schema``, ``output_schema``) is the deployment's own
    text; the source's are scrubbed. Top-level parameter names the manifest declares
    (``parameters``, ``sinks``) are the deployment's too.
    """
    drop = declaration.get("source_text", "keep") == "drop"
    names = {*source.own_names, *(declaration.get("parameters") or {}), *(declaration.get("sinks") or {})}
    kept: list[str] = []
    undroppable: list[str] = []
    schemas: dict[str, dict[str, Any]] = {}
    for part in ("input_schema", "output_schema"):
        if part in declaration:
            schemas[part] = copy.deepcopy(dict(declaration[part]))
            continue
        scrubbed = scrub(
            getattr(source, part), part, drop=drop, names=names if part == "input_schema" else ()
        )
        schemas[part] = scrubbed.schema
        kept += scrubbed.kept
        undroppable += scrubbed.undroppable
    inputs, outputs = schemas["input_schema"], schemas["output_schema"]
    properties = inputs.get("properties") or {}
    for param, override in (declaration.get("parameters") or {}).items():
        if param not in properties or not isinstance(properties[param], dict):
            return (
                f"the manifest describes parameter {param!r}, which it does not take ({sorted(properties)})"
            )
        if "description" not in override:
            continue  # the source's text stays (and counts as kept)
        text = override["description"]
        properties[param].pop("description", None)
        if text is not None:
            properties[param]["description"] = text  # the deployment's own words
        pointer = f"input_schema/properties/{param.replace('~', '~0').replace('/', '~1')}/description"
        kept = [where for where in kept if where != pointer]
        undroppable = [where for where in undroppable if where != pointer]
    if undroppable:
        shown = ", ".join(undroppable[:8]) + (
            f" and {len(undroppable) - 8} more" if len(undroppable) > 8 else ""
        )
        return (
            f'source_text "drop" cannot drop what the tool needs of its source\'s text: {shown} '
            "(names, enum/const values, patterns). Declare them in the manifest: "
            '"parameters": {"<name>": {}} for a top-level parameter name, or the deployment\'s own '
            '"input_schema" / "output_schema"; or keep the text (source_text "keep": shown as untrusted, '
            "and a plan written after it is exposed)"
        )
    if "description" in declaration:
        description = declaration["description"] or ""
    elif drop:
        description = ""
    else:
        description = source.description or ""
        if description:
            kept.insert(0, "description")
    if not named_by_deployment and not drop:
        kept.insert(0, "name")  # the tool's name as the source wrote it: no manifest or `only` chose it
    return description, inputs, outputs, kept
