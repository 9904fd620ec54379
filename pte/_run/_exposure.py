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
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pte._core import canonical_json
from pte._plan import Reference, is_reference
from pte._policy import WITHHELD_KEY, LabelTree, error_view, handle_view, is_clean

if TYPE_CHECKING:
    from pte._catalogue import Registry
    from pte._run._state import EngineView, _Run

__all__ = [
    "catalogue_exposed",
    "completed_for_planner",
    "exposure_of",
    "literal_of",
]

_UNTRUSTED = frozenset({"untrusted"})


def catalogue_exposed(registry: Registry) -> bool:
    """Whether the catalogue a planner reads holds third-party text (pte.importers): it is
    framed as untrusted, and the planner that read it writes an exposed plan."""
    return any(spec.third_party_text for spec in registry)


def literal_of(run: _Run) -> str:
    """What the literals of the next plan count as, given what the run's prompts have shown."""
    if run.shown_untrusted:
        return "untrusted"
    if run.shown_trusted:
        return "trusted"
    return "request"


def exposure_of(run: _Run) -> frozenset[str]:
    """The labels joined into every call of the next plan: ``untrusted`` once it was shown."""
    return _UNTRUSTED if run.shown_untrusted else frozenset()


def step_schema(
    engine: EngineView, run: _Run, step_id: str
) -> tuple[Mapping[str, Any], Mapping[str, Any]] | None:
    """The output schema of a completed step, for a handle's description (None when unknown)."""
    spec = engine.registry.get(run.prior.get(step_id, ""))
    if spec is None or spec.generic:
        return None  # a generic step's type was inferred at its compile: not described here
    schema, root = spec.output_schema, spec.output_schema
    if step_id in run.prior_lists:
        return {"type": "array", "items": schema}, root
    return schema, root


def completed_for_planner(engine: EngineView, run: _Run) -> list[tuple[str, str, Any, str]]:
    """(step id, tool, output as shown, provenance) of every completed step, for a planner.

    In handles mode untrusted parts become handles; either way what is shown is recorded on
    the run (`shown_trusted`, `shown_untrusted`), which decides the next plan's labels.
    """
    handles = engine.config.planner_data == "handles"
    view: list[tuple[str, str, Any, str]] = []
    for sid, tool in run.prior.items():
        output = run.result.outputs.get(sid)
        tree = run.label_trees.get(sid) or LabelTree(run.labels.get(sid, _UNTRUSTED))
        labels = tree.everything()
        if handles and not is_clean(labels):
            output, _ = handle_view(output, tree, sid, step_schema(engine, run, sid))
            provenance = "trusted (untrusted parts as handles)"
            run.shown_trusted = True
        elif is_clean(labels):
            provenance = "trusted"
            run.shown_trusted = True
        else:
            provenance = "untrusted"
            run.shown_untrusted = True
        view.append((sid, tool, output, provenance))
    return view


def error_for_planner(
    engine: EngineView, run: _Run, error: Mapping[str, Any], labels: frozenset[str]
) -> tuple[dict[str, Any], str]:
    """A failed step's error as the replanner sees it, and its provenance label."""
    if is_clean(labels):
        run.shown_trusted = True
        return dict(error), "trusted"
    if engine.config.planner_data == "handles":
        return error_view(error, labels), "trusted (untrusted text withheld)"
    run.shown_untrusted = True
    return dict(error), "untrusted"


def value_for_planner(
    engine: EngineView, run: _Run, expr: Any, value: Any, labels: frozenset[str]
) -> tuple[Any, str]:
    """A value handed to a next stage (`expr` as the plan wrote it, `value` resolved) as its
    planner sees it, and its provenance label."""
    if is_clean(labels):
        run.shown_trusted = True
        return value, "trusted"
    if engine.config.planner_data == "handles":
        run.shown_trusted = True
        return _continue_view(engine, run, expr, value), "trusted (untrusted parts as handles)"
    run.shown_untrusted = True
    return value, "untrusted"


def _continue_view(engine: EngineView, run: _Run, expr: Any, value: Any) -> Any:
    if is_reference(expr):
        ref = Reference.parse(expr["$ref"])
        tree = run.label_trees.get(ref.step)
        sub = (
            tree.subtree(ref.tokens) if tree is not None else LabelTree(run.labels.get(ref.step, _UNTRUSTED))
        )
        return handle_view(value, sub, expr["$ref"], step_schema(engine, run, ref.step), ref.tokens)[0]
    if isinstance(expr, dict) and isinstance(value, dict):
        return {key: _continue_view(engine, run, expr[key], value.get(key)) for key in expr}
    if isinstance(expr, list) and isinstance(value, list):
        return [_continue_view(engine, run, e, v) for e, v in zip(expr, value, strict=False)]
    if canonical_json(expr) in run.request_literals or not run.shown_untrusted:
        return value  # a literal of a plan that saw no untrusted text
    return {
        WITHHELD_KEY: "a literal written by a planner that was shown untrusted text",
        "labels": ["untrusted"],
    }
