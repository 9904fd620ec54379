"""Tool packs discoverable through entry points (group ``pte.tool_packs``).

A distribution that ships PTE tools declares them in its ``pyproject.toml``::

    [project.entry-points."pte.tool_packs"]
    crm = "acme_crm.pte_tools"            # a module of @pte.tool functions
    billing = "acme_billing:registry"     # or a Registry, or a function returning one

and ``pte run --pack crm`` / ``pte.load_pack("crm")`` find it by that name once it is installed.
A name is looked up after the stock packs and pack files, and before plain module names
(`pte._catalogue._registry.load_pack` turns what the entry point names into a registry).
"""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points

__all__ = ["ENTRY_POINT_GROUP", "installed_packs"]

ENTRY_POINT_GROUP = "pte.tool_packs"


def installed_packs() -> dict[str, EntryPoint]:
    """The tool packs installed distributions declare, by name."""
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
