"""Tool packs discoverable through entry points (group ``pte.tool_packs``).

A distribution that ships PTE tools declares them in its ``pyproject.toml``::

    [project.entry-points."pte.tool_packs"]
    crm = "acme_crm.pte_tools"            # a module of @pte.tool functions
    billing = "acme_billing:registry"     # or a Registry, or a function returning one

and ``pte run --pack crm`` / ``pte.load_pack("crm")`` find it by that name once it is installed.
A name is looked up after the stock packs and pack files, and before plain module names.
"""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points
from types import ModuleType

from pte._errors import ToolPackError
from pte._registry import Registry

__all__ = ["ENTRY_POINT_GROUP", "entry_point_pack", "installed_packs"]

ENTRY_POINT_GROUP = "pte.tool_packs"


def installed_packs() -> dict[str, EntryPoint]:
    """The tool packs installed distributions declare, by name."""
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def entry_point_pack(name: str) -> Registry | None:
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
