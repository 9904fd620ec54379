"""`pte tools [PACK…]`: what a pack provides, as a planner and a policy see it.

One line per tool (effect, output provenance, guarded parameters, approval) and its
parameters with their types; ``--json`` prints the same as data. Without a pack name it
lists every stock pack and every installed one, so an operator can find the name to give
``--tools`` without reading code.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from typing import Any

from pte._catalogue import STOCK_PACKS, ToolSpec, load_pack
from pte._cli._deployment import EXIT_OK, _add_json
from pte._cli._support import UsageError
from pte._core import ToolPackError, ToolRegistrationError
from pte._policy import schema_fields

__all__ = ["add_tools_command", "tool_summary"]


def _type_of(schema: Any, defs: Mapping[str, Any]) -> str:
    """A short type for a parameter's JSON Schema: ``string``, ``array[integer]``, ``A | null``."""
    if not isinstance(schema, Mapping):
        return "any"
    ref = schema.get("$ref")
    if isinstance(ref, str):
        return ref.rsplit("/", 1)[-1]
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            return " | ".join(_type_of(branch, defs) for branch in schema[key])
    if "enum" in schema and isinstance(schema["enum"], list):
        return " | ".join(json.dumps(v) for v in schema["enum"])
    kind = schema.get("type", "any")
    if isinstance(kind, list):
        return " | ".join(map(str, kind))
    if kind == "array":
        return f"array[{_type_of(schema.get('items'), defs)}]"
    return str(kind)


def tool_summary(pack: str, spec: ToolSpec) -> dict[str, Any]:
    """What `pte tools` shows of one tool."""
    schema = spec.planner_input_schema
    required = set(schema.get("required") or ())
    defs = schema.get("$defs") or {}
    params = [
        {"name": name, "type": _type_of(sub, defs), "required": name in required}
        for name, sub in (schema.get("properties") or {}).items()
    ]
    return {
        "pack": pack,
        "name": spec.name,
        "effect": spec.effect,
        "idempotent": spec.idempotent,
        "provenance": spec.provenance,
        "field_provenance": schema_fields(spec.output_schema),
        "sinks": {param: sorted(allowed) for param, allowed in spec.sinks.items()},
        "requires_approval": spec.requires_approval,
        "parameters": params,
        "description": spec.description.strip().splitlines()[0] if spec.description.strip() else "",
    }


def _render(entry: Mapping[str, Any]) -> str:
    flags = [entry["effect"], f"output {entry['provenance']}"]
    if entry["effect"] == "write" and not entry["idempotent"]:
        flags.append("not idempotent")
    if entry["requires_approval"]:
        flags.append("needs approval")
    lines = [f"  {entry['name']}  ({', '.join(flags)})", f"      {entry['description']}"]
    params = ", ".join(f"{p['name']}{'' if p['required'] else '?'}: {p['type']}" for p in entry["parameters"])
    lines.append(f"      parameters: {params or '-'}")
    for param, allowed in entry["sinks"].items():
        lines.append(f"      guarded: {param} accepts {', '.join(allowed)}")
    for pointer, label in entry["field_provenance"].items():
        lines.append(f"      output field {pointer}: {label}")
    return "\n".join(lines)


def cmd_tools(args: argparse.Namespace) -> int:
    from pte._catalogue import installed_packs

    names = [n for spec in args.packs for n in spec.split(",") if n] or [
        *STOCK_PACKS,
        *sorted(set(installed_packs()) - set(STOCK_PACKS)),
    ]
    entries: list[dict[str, Any]] = []
    for name in names:
        try:
            registry = load_pack(name)
        except (ToolPackError, ToolRegistrationError) as exc:
            raise UsageError(str(exc)) from None
        entries += [tool_summary(name, spec) for spec in registry]
    if args.json:
        print(json.dumps({"tools": entries}, indent=2, ensure_ascii=False))
        return EXIT_OK
    for name in names:
        mine = [e for e in entries if e["pack"] == name]
        print(f"{name} ({len(mine)} tools; use it with --tools {name})")
        for entry in mine:
            print(_render(entry))
    return EXIT_OK


def add_tools_command(sub: Any) -> None:
    """Register ``pte tools`` on `sub` (the top-level sub-parsers action)."""
    p = sub.add_parser(
        "tools", help="list the tools of packs: effect, provenance, guarded parameters, parameters"
    )
    p.add_argument(
        "packs",
        nargs="*",
        metavar="PACK",
        help=f"stock ({', '.join(STOCK_PACKS)}), installed, a .py file or a module (default: every "
        "stock and installed pack)",
    )
    _add_json(p)
    p.set_defaults(func=cmd_tools)
