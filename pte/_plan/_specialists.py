"""Specialists: planners a coordinating planner delegates a task to, each with its own catalogue.

A deployment declares them (never a plan or a log: authority comes from the deployment)::

    pte.plan.Specialist(name="payments", description="Pays supplier invoices.",
                   catalogue=("find_supplier", "send_payment"), instructions="...")

from Python (`EngineConfig.specialists`) or from a JSON/YAML file (`load_specialists`,
``--specialists FILE``). A specialist's catalogue (tools and procedures) is its allow-list:
a subset of the deployment's. The coordinating planner is shown the specialists'
descriptions instead of their tools, and writes a delegate step
``{"id": "x", "delegate": "payments", "task": "...", "inputs": {...}}``; the engine asks the
specialist for a sub-plan before anything runs and inlines it (pte._run._delegation).

This module holds the declarations and what is derived from them alone: checking them
against the deployment's registry and the coordinator's narrower view of the catalogue.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pte._catalogue import Registry
from pte._core import FileRefused, SpecialistError, read_bounded_text, strict_json, strict_yaml

__all__ = [
    "CoordinatorView",
    "Specialist",
    "check_specialists",
    "coordinator_view",
    "load_specialists",
    "specialist_registry",
    "specialists_from_records",
]

_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")
_KEYS = frozenset({"name", "description", "catalogue", "instructions"})


@dataclass(frozen=True)
class Specialist:
    """One specialist: its name, what it is for (shown to the coordinator), its catalogue (the
    tools and procedures it may use: its allow-list) and optional instructions (shown to it)."""

    name: str
    description: str
    catalogue: tuple[str, ...]
    instructions: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise SpecialistError(f"specialist name {self.name!r} must match ^[a-z][a-z0-9_]{{0,31}}$")
        if not isinstance(self.description, str) or not self.description.strip():
            raise SpecialistError(f"specialist {self.name!r}: a description (what it is for) is required")
        catalogue = self.catalogue
        if isinstance(catalogue, str) or not all(isinstance(t, str) and t for t in catalogue):
            raise SpecialistError(f"specialist {self.name!r}: catalogue must be a list of tool names")
        object.__setattr__(self, "catalogue", tuple(dict.fromkeys(catalogue)))
        if not self.catalogue:
            raise SpecialistError(f"specialist {self.name!r}: its catalogue is empty")
        if not isinstance(self.instructions, str):
            raise SpecialistError(f"specialist {self.name!r}: instructions must be text")

    def to_dict(self) -> dict[str, Any]:
        """As ``run_started.config.specialists`` records it (and a specialists file holds it)."""
        out: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "catalogue": list(self.catalogue),
        }
        if self.instructions:
            out["instructions"] = self.instructions
        return out

    @classmethod
    def from_dict(cls, data: Any, where: str = "specialist") -> Specialist:
        """One declaration (a JSON object), refused with a message naming `where` and why."""
        if not isinstance(data, Mapping):
            raise SpecialistError(f"{where}: a specialist is an object with name, description, catalogue")
        unknown = sorted(set(data) - _KEYS)
        if unknown:
            raise SpecialistError(f"{where}: unknown key(s) {unknown}; a specialist has {sorted(_KEYS)}")
        missing = [k for k in ("name", "description", "catalogue") if k not in data]
        if missing:
            raise SpecialistError(f"{where}: missing {missing}")
        catalogue = data["catalogue"]
        if not isinstance(catalogue, list):
            raise SpecialistError(f"{where}: catalogue must be a list of tool names")
        try:
            return cls(
                name=data["name"],
                description=data["description"],
                catalogue=tuple(catalogue),
                instructions=data.get("instructions", ""),
            )
        except SpecialistError as exc:
            raise SpecialistError(f"{where}: {exc}") from None


def load_specialists(path: str | Path) -> tuple[Specialist, ...]:
    """The specialists of a JSON or YAML file: a list of declarations, or ``{"specialists": [...]}``.

    Refused (`SpecialistError`, with the reason): an unreadable file, a document of another
    shape, a declaration missing a field, two specialists of one name. The catalogue is checked
    against the deployment's registry by `check_specialists` (the engine does it).
    """
    source = Path(path)
    try:
        text = read_bounded_text(source, "specialists file")
    except FileRefused as exc:
        raise SpecialistError(str(exc)) from None
    try:
        # Strict (duplicate keys, YAML aliases, NaN refused): specialists' catalogues are authority.
        if source.suffix.lower() in (".yaml", ".yml"):
            try:
                document: Any = strict_yaml.loads(text)
            except ImportError:
                raise SpecialistError(
                    f"specialists file {source.name!r} is YAML, which needs PyYAML, a dependency of "
                    "plan-then-execute (pip install plan-then-execute); or write it as JSON"
                ) from None
        else:
            document = strict_json.loads(text)
    except SpecialistError:
        raise
    except Exception as exc:  # a parser's own errors: the file is not what it claims to be
        raise SpecialistError(f"specialists file {source.name!r} does not parse: {exc}") from None
    if isinstance(document, Mapping) and set(document) == {"specialists"}:
        document = document["specialists"]
    if not isinstance(document, list) or not document:
        raise SpecialistError(
            f"specialists file {source.name!r}: expected a non-empty list of specialists "
            '(or {"specialists": [...]})'
        )
    out = tuple(
        Specialist.from_dict(item, f"{source.name}: specialist {index}")
        for index, item in enumerate(document)
    )
    _unique(out)
    return out


def _unique(specialists: Sequence[Specialist]) -> None:
    seen: set[str] = set()
    for spec in specialists:
        if spec.name in seen:
            raise SpecialistError(f"two specialists are named {spec.name!r}")
        seen.add(spec.name)


def specialists_from_records(records: Any) -> tuple[Specialist, ...]:
    """The specialists a ``run_started.config.specialists`` records (for replay from the log)."""
    if not isinstance(records, list):
        raise SpecialistError("run_started.config.specialists is not a list")
    out = tuple(Specialist.from_dict(item, f"recorded specialist {i}") for i, item in enumerate(records))
    _unique(out)
    return out


def check_specialists(specialists: Sequence[Specialist], registry: Registry) -> None:
    """Refuse declarations the deployment cannot honour: a catalogue naming a tool or procedure
    outside the deployment's allow-list, a name that is a tool's or a procedure's, a duplicate."""
    _unique(specialists)
    procedures = getattr(registry, "procedures", {}) or {}
    for spec in specialists:
        if spec.name in registry or spec.name in procedures:
            raise SpecialistError(f"specialist {spec.name!r} has the name of a tool or procedure")
        unknown = [t for t in spec.catalogue if t not in registry and t not in procedures]
        if unknown:
            raise SpecialistError(
                f"specialist {spec.name!r}: its catalogue names {unknown}, not in the deployment's "
                "allow-list (a specialist's catalogue is a subset of the deployment's)"
            )


def specialist_registry(spec: Specialist, registry: Registry) -> Registry:
    """The specialist's allow-list: the deployment's tools and procedures its catalogue names."""
    procedures = getattr(registry, "procedures", {}) or {}
    out = registry.allow([t for t in spec.catalogue if t in registry])
    own = {t: procedures[t] for t in spec.catalogue if t in procedures}
    return out.with_procedures(own) if own else out


class CoordinatorView(Registry):
    """What a coordinating planner is shown: the tools and procedures no specialist owns, and
    the specialists (described, their tools not listed). Only a prompt's view: compile checks
    plans against the deployment's registry (pte._run._delegation)."""

    specialists: tuple[Specialist, ...] = ()


def coordinator_view(registry: Registry, specialists: Iterable[Specialist]) -> CoordinatorView:
    """The coordinator's catalogue: a tool in any specialist's catalogue is left to it."""
    specialists = tuple(specialists)
    owned = {t for spec in specialists for t in spec.catalogue}
    view = CoordinatorView(t for t in registry if t.name not in owned)
    procedures = getattr(registry, "procedures", {}) or {}
    view.procedures = {n: p for n, p in procedures.items() if n not in owned}
    view.specialists = specialists
    return view


def owned_tools(specialists: Iterable[Specialist], registry: Registry) -> dict[str, str]:
    """Tool (or procedure) name -> the first specialist owning it, for those no coordinator sees."""
    out: dict[str, str] = {}
    for spec in specialists:
        for tool in spec.catalogue:
            out.setdefault(tool, spec.name)
    return out
