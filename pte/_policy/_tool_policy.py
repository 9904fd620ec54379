"""What a policy says about one tool (`ToolPolicy`), and what the flow and storage checks read
of a policy (`PolicyEntries`, which `pte._policy._document.Policy` implements).

The flow check (`pte._policy._flow`) and the storage check (`pte._policy._storage`) are typed against
`PolicyEntries`, not against `Policy`, so the policy module builds on them and nothing
imports back up.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol

from pte._catalogue import OutputProvenance, Registry
from pte._policy._labels import LabelTree, SchemaLabels

__all__ = ["Landing", "PolicyEntries", "ToolPolicy", "output_labels"]

#: (read tool, JSON Pointer into its output, ``*`` for every element or key)
Landing = tuple[str, str]


def output_labels(output: str) -> frozenset[str] | None:
    """The fixed label set of a tool kind; None for derived (it depends on the arguments)."""
    if output == "trusted":
        return frozenset({"trusted"})
    if output == "untrusted":
        return frozenset({"untrusted"})
    return None


@dataclass(frozen=True)
class ToolPolicy:
    """What the policy says about one tool: its output provenance and its sink parameters."""

    output: OutputProvenance
    #: Sink parameters: parameter name -> the labels it accepts.
    sinks: Mapping[str, frozenset[str]]
    #: Field-level provenance (pte._policy._labels): JSON Pointer into the output -> its label.
    fields: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    #: Where a parameter's value is stored (pte._policy._storage): parameter -> (read tool, pointer)s.
    stores: Mapping[str, tuple[Landing, ...]] = field(default_factory=lambda: MappingProxyType({}))
    #: Egress: every parameter no sink declaration names accepts only request/trusted data,
    #: as a write's do in guarded mode (a read whose URL or query reaches a third party).
    egress: bool = False
    #: Sink parameters whose violation a person may endorse value by value (pte._policy._endorsement)
    #: instead of the plan being refused: ``on_violation: {"param": "endorse"}``.
    endorse: frozenset[str] = frozenset()
    #: The call-level sink as the policy file declares it (``"call": [...]``): which labels may
    #: decide whether and how often the tool runs. None: the default (`decided_by`).
    call: frozenset[str] | None = None
    #: A person may endorse the call itself (``on_violation: "endorse"`` for the whole tool):
    #: every parameter, and the decisions that lead to the call (pte._policy._endorsement).
    endorse_call: bool = False
    #: The call-level sink a check enforces (set by `Policy.effective`; not part of the file
    #: form): `call` when declared; else ``request``/``trusted`` for every write in guarded mode
    #: and every egress read (narrowed by every declared sink); else the declared sinks'
    #: intersection (open mode); None: nothing decides this call's running but its own sinks.
    decided_by: frozenset[str] | None = field(default=None, compare=False)
    #: The labels the tool's output schema declares at every depth (pte._policy._labels); the
    #: listing in `fields` names them by pointer but cannot follow a recursive schema down.
    schema_labels: SchemaLabels | None = field(default=None, compare=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """The policy-file form of this entry."""
        out: dict[str, Any] = {"output": self.output}
        if self.sinks:
            out["sinks"] = {param: sorted(allowed) for param, allowed in sorted(self.sinks.items())}
        if self.fields:
            out["fields"] = dict(sorted(self.fields.items()))
        if self.egress:
            out["egress"] = True
        if self.call is not None:
            out["call"] = sorted(self.call)
        if self.endorse_call:
            out["on_violation"] = "endorse"
        elif self.endorse:
            out["on_violation"] = dict.fromkeys(sorted(self.endorse), "endorse")
        if self.stores:
            out["stores"] = {
                param: [{"read": read, "field": pointer} for read, pointer in landings]
                for param, landings in sorted(self.stores.items())
            }
        return out

    def output_tree(self) -> LabelTree | None:
        """The labels of the tool's output by field; None for a derived tool."""
        fixed = output_labels(self.output)
        if fixed is None:
            return None
        base = self.schema_labels.tree(fixed) if self.schema_labels is not None else LabelTree(fixed)
        return base.with_fields(self.fields) if self.fields else base


class PolicyEntries(Protocol):
    """What the flow and storage checks read of a policy."""

    @property
    def registry(self) -> Registry | None:
        """The catalogue the policy was built over (None: the tools' own declarations only)."""
        ...

    @property
    def tools(self) -> Mapping[str, ToolPolicy]:
        """Each tool's entry as declared and configured (before guarded defaults)."""
        ...

    def effective(self, tool: str, registry: Registry | None = None) -> ToolPolicy:
        """The entry a check applies to `tool`: guarded defaults included."""
        ...
