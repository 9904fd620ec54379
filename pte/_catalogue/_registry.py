"""`Registry` (the allow-list of tools a run may call) and loading tool packs into one.

Separate from `pte._catalogue._tool_decorator` (declaring one tool) because collecting tools is its own
concern: stock packs, pack files, installed entry-point packs, modules and manifests.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import jsonschema

from pte._catalogue._packs import installed_packs
from pte._catalogue._tool_spec import _TOOL_ATTR, ToolSpec, _format_error, spec_of
from pte._core import (
    FileRefused,
    ToolPackError,
    ToolRegistrationError,
    data_dir,
    load_schema,
    read_bounded_text,
)
from pte._core import strict_json as strict_json

__all__ = ["STOCK_PACKS", "Registry", "load_pack", "load_registry"]

#: Stock tool packs shipped with PTE, by short name.
STOCK_PACKS = ("backoffice", "calculator", "shaping", "text", "extract", "dates", "containers")


class Registry:
    """The tools a run may call, by name. The registry *is* the allow-list."""

    def __init__(self, tools: Iterable[ToolSpec | Callable[..., Any]] = ()) -> None:
        self._tools: dict[str, ToolSpec] = {}
        #: The deployment's procedures (pte._plan._procedures), inlined by compile; set by with_procedures.
        self.procedures: Mapping[str, Any] = {}
        for item in tools:
            self.register(item)

    def with_procedures(self, procedures: Mapping[str, Any]) -> Registry:
        """This allow-list with procedures (`pte.plan.load_procedures`) a plan may call like tools."""
        out = Registry(self)
        out.procedures = dict(procedures)
        return out

    def register(self, item: ToolSpec | Callable[..., Any]) -> ToolSpec:
        """Add a tool (a decorated function or a `ToolSpec`); a second tool of the same name is refused."""
        spec = spec_of(item)
        existing = self._tools.get(spec.name)
        if existing is not None and existing.func is not spec.func:
            raise ToolRegistrationError(f"two different tools are named {spec.name!r}")
        self._tools[spec.name] = spec
        return spec

    def get(self, name: str) -> ToolSpec | None:
        return self._tools.get(name)

    def __getitem__(self, name: str) -> ToolSpec:
        return self._tools[name]

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[ToolSpec]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def allow(self, names: Iterable[str]) -> Registry:
        """A narrower registry with only `names` (each must exist here)."""
        wanted = list(dict.fromkeys(names))
        unknown = [n for n in wanted if n not in self._tools]
        if unknown:
            raise ToolPackError(f"cannot allow unknown tool(s) {unknown}; the packs define {self.names}")
        return Registry(self._tools[n] for n in wanted)

    def deny(self, names: Iterable[str]) -> Registry:
        """A narrower registry without `names` (each must exist here: a typo must not go unnoticed)."""
        banned = set(names)
        unknown = sorted(banned - set(self._tools))
        if unknown:
            raise ToolPackError(f"cannot deny unknown tool(s) {unknown}; the packs define {self.names}")
        return Registry(t for t in self._tools.values() if t.name not in banned)

    def merged(self, other: Registry) -> Registry:
        """A registry with the tools of both (names must not clash)."""
        return Registry([*self, *other])

    def describe(self) -> list[dict[str, Any]]:
        """JSON summaries of every tool (for `run_started`)."""
        return [t.describe() for t in self]

    def catalogue(self) -> list[dict[str, Any]]:
        """What the planner is shown: names, descriptions, schemas, effects."""
        return [t.catalogue_entry() for t in self]

    @classmethod
    def from_module(cls, module: ModuleType) -> Registry:
        """Every decorated tool defined at the top level of `module`, in definition order."""
        registry = cls()
        for value in vars(module).values():
            spec = getattr(value, _TOOL_ATTR, None)
            if isinstance(spec, ToolSpec):
                registry.register(spec)
        return registry


def _import_path(path: Path) -> ModuleType:
    module_name = f"pte_pack_{path.stem}_{abs(hash(str(path.resolve())))}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ToolPackError(f"cannot load tool pack {str(path)!r}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except ToolRegistrationError:
        del sys.modules[module_name]
        raise
    except Exception as exc:
        del sys.modules[module_name]
        raise ToolPackError(f"tool pack {str(path)!r} failed to import: {type(exc).__name__}: {exc}") from exc
    return module


def load_pack(ref: str | Path | ModuleType | Registry) -> Registry:
    """Load one tool pack: a stock pack name, a ``.py`` file path, an installed pack (entry point
    group ``pte.tool_packs``, see `pte._catalogue._packs`), or an importable module name."""
    if isinstance(ref, Registry):  # tools built elsewhere (an importer)
        return ref
    if isinstance(ref, ModuleType):
        module = ref
    else:
        text = str(ref)
        if text in STOCK_PACKS:
            module = _import_path(data_dir("tools") / f"{text}.py")
        elif text.endswith(".py") or "/" in text or Path(text).exists():
            path = Path(text)
            if not path.is_file():
                raise ToolPackError(f"tool pack file {text!r} does not exist")
            module = _import_path(path)
        else:
            installed = _entry_point_pack(text)
            if installed is not None:
                return installed
            try:
                module = importlib.import_module(text)
            except ImportError as exc:
                raise ToolPackError(
                    f"tool pack {text!r} is neither a stock pack {list(STOCK_PACKS)}, a .py file, "
                    f"nor an importable module ({exc})"
                ) from None
    registry = Registry.from_module(module)
    if not len(registry):
        raise ToolPackError(f"tool pack {getattr(module, '__name__', ref)!r} defines no @pte.tool functions")
    return registry


def load_registry(
    packs: Iterable[str | Path | ModuleType | Registry],
    *,
    allow: Iterable[str] | None = None,
    manifest: str | Path | None = None,
) -> Registry:
    """Load and merge tool packs, then narrow them by `allow` and/or a manifest file.

    A manifest is a JSON file ``{"allow": [...], "deny": [...]}`` (schemas/tool-manifest.schema.json).
    """
    registry = Registry()
    for pack in packs:
        for spec in load_pack(pack):
            registry.register(spec)
    if manifest is not None:
        registry = _apply_manifest(registry, Path(manifest))
    if allow is not None:
        registry = registry.allow(allow)
    return registry


def _apply_manifest(registry: Registry, path: Path) -> Registry:
    try:
        doc = strict_json.loads(read_bounded_text(path, "tool manifest"))
    except FileRefused as exc:
        raise ToolPackError(str(exc)) from None
    except ValueError as exc:
        raise ToolPackError(f"cannot read tool manifest {str(path)!r}: {exc}") from None
    error = jsonschema.exceptions.best_match(
        jsonschema.Draft202012Validator(load_schema("tool-manifest.schema.json")).iter_errors(doc)
    )
    if error is not None:
        raise ToolPackError(f"tool manifest {str(path)!r} is invalid: {_format_error(error)}")
    if "allow" in doc:
        registry = registry.allow(doc["allow"])
    return registry.deny(doc.get("deny", ()))


def _entry_point_pack(name: str) -> Registry | None:
    """The registry of the installed pack `name`, or None when no distribution declares one."""
    found = installed_packs().get(name)
    if found is None:
        return None
    try:
        target = found.load()
    except Exception as exc:
        raise ToolPackError(
            f"tool pack {name!r} ({found.value}) failed to load: {type(exc).__name__}: {exc}"
        ) from None
    if isinstance(target, ModuleType):
        registry = Registry.from_module(target)
    elif isinstance(target, Registry):
        registry = target
    elif callable(target):
        registry = target()
        if not isinstance(registry, Registry):
            raise ToolPackError(f"tool pack {name!r} ({found.value}) did not return a pte.Registry")
    else:
        raise ToolPackError(
            f"tool pack {name!r} ({found.value}) is neither a module, a Registry, "
            "nor a function returning one"
        )
    if not len(registry):
        raise ToolPackError(f"tool pack {name!r} ({found.value}) defines no tools")
    return registry
