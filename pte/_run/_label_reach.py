"""What a deployment's label check can do, so a planner is told only the label rules that apply.

The label rules (`pte._run._prompts.label_rules`) are dead text where no plan can break a label:
the policy check (pte._policy._flow) rejects a plan only through a sink, explicit (a parameter
that refuses a label) or call-level (what may decide whether a call runs: `ToolPolicy.decided_by`,
set for writes in guarded mode, egress reads and declared ``call`` sinks). A deployment with
neither, like the six generic packs, cannot have a plan rejected by labels whatever the plan,
its literals or what its writer was shown, so its planner is not told them.

Derived from the policy and catalogue alone, so the prompt stays byte-stable for a deployment.
The tools counted are the deployment's, not only the ones listed: a coordinator's plan is
checked against the whole registry (its specialists' tools included), a procedure runs the
tools it lists.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pte._catalogue import Registry, ToolSpec
from pte._policy import LABELS

if TYPE_CHECKING:
    from pte._policy import Policy, ToolPolicy

__all__ = ["LabelReach", "label_reach"]

_ALL = frozenset(LABELS)


@dataclass(frozen=True)
class LabelReach:
    """Which label rules can apply to a deployment's plans."""

    #: Some plan can be rejected by labels: a sink (a parameter's, or the call's) refuses a label.
    rejects: bool
    #: A write has a sink a person may endorse (``on_violation: "endorse"``).
    endorsable: bool
    #: Some tool's output (or a field of it) is untrusted, or a tool's text is a third party's.
    untrusted_sources: bool


def label_reach(policy: Policy, registry: Registry) -> LabelReach:
    """What `policy`'s label check can do to plans over `registry` (and the policy's own registry)."""
    rejects = endorsable = untrusted = False
    for spec, entry in _entries(policy, registry):
        if entry is None:  # a tool no policy here knows: assume it can refuse anything
            rejects = True
            continue
        refusing = [allowed for allowed in entry.sinks.values() if not allowed >= _ALL]
        if entry.decided_by is not None and not entry.decided_by >= _ALL:
            refusing.append(entry.decided_by)
        rejects = rejects or bool(refusing)
        if spec is not None and spec.effect == "write" and entry.sinks:
            endorsable = endorsable or entry.endorse_call or bool(entry.endorse & set(entry.sinks))
        untrusted = untrusted or entry.output == "untrusted" or "untrusted" in entry.fields.values()
        untrusted = untrusted or bool(spec is not None and spec.third_party_text)
    return LabelReach(rejects=rejects, endorsable=endorsable and rejects, untrusted_sources=untrusted)


def _entries(policy: Policy, registry: Registry) -> Iterator[tuple[ToolSpec | None, ToolPolicy | None]]:
    """(spec, the entry a check applies; None if unknown) for every tool a plan over `registry`
    may run."""
    names = dict.fromkeys(spec.name for spec in registry)
    for proc in (getattr(registry, "procedures", None) or {}).values():
        names.update(dict.fromkeys(proc.tools))
    whole = policy.registry
    if whole is not None:
        names.update(dict.fromkeys(spec.name for spec in whole))
    names.update(dict.fromkeys(policy.tools))
    for name in names:
        entry: ToolPolicy | None
        try:
            entry = policy.effective(name, registry)
        except KeyError:
            entry = None
        spec = registry.get(name) or (whole.get(name) if whole is not None else None)
        yield spec, entry
