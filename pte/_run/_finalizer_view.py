"""What the finalizer is shown of a run's steps, and which of them first where not all fit (#37).

The finalizer phrases the result. It is shown the steps the result depends on (through
references and `when` conditions, across the run's plans) and the writes (what the run did),
not steps the result does not depend on. Where the data budget cannot hold them all,
`dependency_ranking` says which come first: every write (the answer must report what was done,
and a write shown only by name cannot say to whom or what), then the steps the result
references directly, then what those reference, and so on; ties by run order. The prompt
(`pte._run._prompts.finalizer_messages`) shows a prefix of that ranking within the budget, in
run order, and names the rest.

The ranking reads the plans and the deployment's catalogue only, never a step's output: text
inside data cannot move a step up or down. This module decides what a model is shown, so its
source is part of the ``prompts`` hash (`pte._catalogue.PROMPT_MODULES`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from pte._plan import condition_references

if TYPE_CHECKING:
    from pte._catalogue import Registry
    from pte._plan import Plan
    from pte._run._state import RunState

__all__ = ["FinalizerView", "dependency_distances", "dependency_ranking", "finalizer_view"]

_UNTRUSTED = frozenset({"untrusted"})


class FinalizerView(NamedTuple):
    """The finalizer's view of a run."""

    #: (step id, tool, output, label) of the steps it is shown, in run order.
    steps: list[tuple[str, str, Any, str]]
    #: Their ids, first what must be shown first (`dependency_ranking`).
    ranking: list[str]
    #: The label of the result it phrases.
    result_provenance: str


def dependency_distances(sources: Iterable[str], uses: Mapping[str, Collection[str]]) -> dict[str, int]:
    """How far each step the result depends on is from it: 1 for the steps the result references,
    2 for the steps those reference, ... (breadth first: a step reached two ways counts the nearer).
    `uses` maps a step to the steps its arguments reference."""
    distance: dict[str, int] = {}
    frontier = sorted(set(sources))
    depth = 1
    while frontier:
        for sid in frontier:
            distance[sid] = depth
        nearer = {ref for sid in frontier for ref in uses.get(sid, ()) if ref not in distance}
        frontier, depth = sorted(nearer), depth + 1
    return distance


def dependency_ranking(
    run_order: Sequence[str], distances: Mapping[str, int], writes: Collection[str]
) -> list[str]:
    """The steps of `run_order` the finalizer is shown, first what must be shown first: the writes
    in run order, then the steps the result depends on by distance (`dependency_distances`),
    ties by run order. A step that is neither is not shown at all."""
    position = {sid: index for index, sid in enumerate(run_order)}
    done = [sid for sid in run_order if sid in writes]
    read = sorted(
        (sid for sid in run_order if sid not in writes and sid in distances),
        key=lambda sid: (distances[sid], position[sid]),
    )
    return done + read


def _label(labels: Collection[str] | None) -> str:
    """How data is labelled in an LLM prompt: untrusted if any of it is."""
    if labels is None or "untrusted" in labels:
        return "untrusted"
    return "trusted"


def _uses(plans: Iterable[Plan]) -> dict[str, set[str]]:
    """Each step of `plans` and the steps its output depends on: those its arguments, its
    for_each list and its `when` condition reference (a skipped step's output is its default,
    so the condition's data says why). `after` only orders, and a require step guards later
    steps without giving them data: neither is a dependency here."""
    uses: dict[str, set[str]] = {}
    for plan in plans:
        for item in plan.steps:
            refs = {ref.step for _, ref in item.references}
            if item.for_each is not None:
                refs.add(item.for_each.step)
            if item.condition is not None and not item.is_require:
                refs.update(ref.step for _, ref in condition_references(item.condition))
            uses.setdefault(item.id, set()).update(refs)
    return uses


def finalizer_view(run: RunState, registry: Registry) -> FinalizerView:
    """The completed steps the finalizer is shown, their ranking and the result's label."""
    plan = run.result.plans[-1]
    sources = {ref.step for ref in plan.result_references()}
    result_labels = frozenset().union(*(run.labels.get(sid, _UNTRUSTED) for sid in sources))
    distances = dependency_distances(sources, _uses(run.result.plans))
    # Run order is each plan's execution order: `run.prior` lists a for_each step, or a step
    # skipped with its default, only once its plan has ended (after steps that ran later).
    planned = dict.fromkeys(sid for each in run.result.plans for sid in each.order if sid in run.prior)
    run_order = [*planned, *(sid for sid in run.prior if sid not in planned)]
    writes = {sid for sid, tool in run.prior.items() if tool in registry and registry[tool].effect == "write"}
    ranking = dependency_ranking(run_order, distances, writes)
    shown = set(ranking)
    steps = [
        (sid, run.prior[sid], run.result.outputs[sid], _label(run.labels.get(sid)))
        for sid in run_order
        if sid in shown
    ]
    return FinalizerView(steps, ranking, _label(result_labels))
