"""What a planner was shown, and what that lets its plan decide.

A planner decides more than the literals it writes: which reference path flows, which tool
is called, how often. So the engine tracks, per run, the labels of everything a planner
prompt has shown (sticky: a model that read a text may act on it in any later answer):

- nothing but the request and the deployment's catalogue: literals count as ``request``;
- trusted data too (handles in place of everything else, `pte._policy._handles`): literals count as
  ``trusted`` (they may be copies of it; values the first plan wrote stay ``request``), and
  the plan is as trustworthy as the first one, since everything it saw was;
- untrusted text (``EngineConfig.planner_data="shown"``, untouched third-party catalogue
  text, pte._catalogue_text): literals count as ``untrusted``, and the plan is *exposed*:
  ``untrusted`` joins the label of every call it makes (`Policy.check(exposure=...)`), so
  every guarded sink in it refuses (or asks a person, where endorsements are allowed).

`PlannerData` is the switch: ``handles`` (the default) or ``shown``.

These are functions of their inputs: each returns what it showed (`Shown`), and the run loop
(pte._run._loop) folds that into the run's state.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pte._core import canonical_json
from pte._plan import Reference, is_reference
from pte._policy import WITHHELD_KEY, LabelTree, error_view, handle_view, is_clean

if TYPE_CHECKING:
    from pte._catalogue import Registry
    from pte._run._state import Planning, RunState

__all__ = [
    "Shown",
    "catalogue_exposed",
    "completed_for_planner",
    "exposure_of",
    "literal_of",
]

_UNTRUSTED = frozenset({"untrusted"})


@dataclass(frozen=True)
class Shown:
    """What a prompt showed a model: trusted data, untrusted text (sticky once on the run)."""

    trusted: bool = False
    untrusted: bool = False

    def __or__(self, other: Shown) -> Shown:
        return Shown(self.trusted or other.trusted, self.untrusted or other.untrusted)


_TRUSTED = Shown(trusted=True)
_SHOWN_UNTRUSTED = Shown(untrusted=True)


def catalogue_exposed(registry: Registry) -> bool:
    """Whether the catalogue a planner reads holds third-party text (pte.importers): it is
    framed as untrusted, and the planner that read it writes an exposed plan."""
    return any(spec.third_party_text for spec in registry)


def literal_of(run: RunState) -> str:
    """What the literals of the next plan count as, given what the run's prompts have shown."""
    if run.shown_untrusted:
        return "untrusted"
    if run.shown_trusted:
        return "trusted"
    return "request"


def exposure_of(run: RunState) -> frozenset[str]:
    """The labels joined into every call of the next plan: ``untrusted`` once it was shown."""
    return _UNTRUSTED if run.shown_untrusted else frozenset()


def step_schema(
    registry: Registry, run: RunState, step_id: str
) -> tuple[Mapping[str, Any], Mapping[str, Any]] | None:
    """The output schema of a completed step, for a handle's description (None when unknown)."""
    spec = registry.get(run.prior.get(step_id, ""))
    if spec is None or spec.generic:
        return None  # a generic step's type was inferred at its compile: not described here
    schema, root = spec.output_schema, spec.output_schema
    if step_id in run.prior_lists:
        return {"type": "array", "items": schema}, root
    return schema, root


def completed_for_planner(planning: Planning, run: RunState) -> tuple[list[tuple[str, str, Any, str]], Shown]:
    """(step id, tool, output as shown, provenance) of every completed step, for a planner, and
    what that showed.

    In handles mode untrusted parts become handles; either way what is shown (`Shown`) decides
    the next plan's labels once the loop records it on the run.
    """
    handles = planning.config.planner_data == "handles"
    view: list[tuple[str, str, Any, str]] = []
    shown = Shown()
    for sid, tool in run.prior.items():
        output = run.result.outputs.get(sid)
        tree = run.label_trees.get(sid) or LabelTree(run.labels.get(sid, _UNTRUSTED))
        labels = tree.everything()
        if handles and not is_clean(labels):
            output, _ = handle_view(output, tree, sid, step_schema(planning.registry, run, sid))
            provenance = "trusted (untrusted parts as handles)"
            shown |= _TRUSTED
        elif is_clean(labels):
            provenance = "trusted"
            shown |= _TRUSTED
        else:
            provenance = "untrusted"
            shown |= _SHOWN_UNTRUSTED
        view.append((sid, tool, output, provenance))
    return view, shown


def error_for_planner(
    planning: Planning, error: Mapping[str, Any], labels: frozenset[str]
) -> tuple[dict[str, Any], str, Shown]:
    """A failed step's error as the replanner sees it, its provenance label, and what it showed."""
    if is_clean(labels):
        return dict(error), "trusted", _TRUSTED
    if planning.config.planner_data == "handles":
        return error_view(error, labels), "trusted (untrusted text withheld)", Shown()
    return dict(error), "untrusted", _SHOWN_UNTRUSTED


def value_for_planner(
    planning: Planning, run: RunState, expr: Any, value: Any, labels: frozenset[str], *, untrusted_shown: bool
) -> tuple[Any, str, Shown]:
    """A value handed to a next stage (`expr` as the plan wrote it, `value` resolved) as its
    planner sees it, its provenance label, and what it showed. `untrusted_shown`: whether the
    run's prompts have shown untrusted text so far (its literals are then withheld)."""
    if is_clean(labels):
        return value, "trusted", _TRUSTED
    if planning.config.planner_data == "handles":
        view = _continue_view(planning.registry, run, expr, value, untrusted_shown)
        return view, "trusted (untrusted parts as handles)", _TRUSTED
    return value, "untrusted", _SHOWN_UNTRUSTED


def _continue_view(registry: Registry, run: RunState, expr: Any, value: Any, untrusted_shown: bool) -> Any:
    if is_reference(expr):
        ref = Reference.parse(expr["$ref"])
        tree = run.label_trees.get(ref.step)
        sub = (
            tree.subtree(ref.tokens) if tree is not None else LabelTree(run.labels.get(ref.step, _UNTRUSTED))
        )
        return handle_view(value, sub, expr["$ref"], step_schema(registry, run, ref.step), ref.tokens)[0]
    if isinstance(expr, dict) and isinstance(value, dict):
        return {
            key: _continue_view(registry, run, expr[key], value.get(key), untrusted_shown) for key in expr
        }
    if isinstance(expr, list) and isinstance(value, list):
        return [
            _continue_view(registry, run, e, v, untrusted_shown) for e, v in zip(expr, value, strict=False)
        ]
    if canonical_json(expr) in run.request_literals or not untrusted_shown:
        return value  # a literal of a plan that saw no untrusted text
    return {
        WITHHELD_KEY: "a literal written by a planner that was shown untrusted text",
        "labels": ["untrusted"],
    }
