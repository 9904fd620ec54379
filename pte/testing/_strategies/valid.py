"""Valid plans: `valid_plans`, documents that compile against a registry."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st
from hypothesis.strategies import DrawFn, SearchStrategy

from pte._catalogue import Registry
from pte._plan import PLAN_FORMAT_VERSION
from pte.testing._strategies.base import (
    _TEXT,
    Doc,
    Json,
    _choice,
    _fresh,
    _percent,
    _ref,
    _subset,
)
from pte.testing._strategies.catalogue import (
    _Catalogue,
    _catalogue_for,
    _Tool,
)
from pte.testing._strategies.values import _STEP_IDS, _draw_value, _Wiring

# --- valid plans ----------------------------------------------------------------------------------


@dataclass
class _Drawn:
    """A generated valid plan and what the generator knows about it."""

    doc: Doc
    #: Tool of each step, in the document's step order.
    tools: list[_Tool]


def _draw_plan(
    draw: DrawFn, catalogue: _Catalogue, min_steps: int, max_steps: int, ref_chance: int = 30
) -> _Drawn:
    usable = catalogue.usable
    count = draw(st.integers(min_steps, max_steps))
    ids: list[str] = []
    for _ in range(count):
        step_id = draw(_STEP_IDS)
        ids.append(step_id if step_id not in ids else _fresh(step_id, set(ids)))
    steps: list[Doc] = []
    chosen: list[_Tool] = []
    for i, step_id in enumerate(ids):
        tool = _choice(draw, usable)
        wiring = _Wiring(catalogue, list(zip(ids[:i], chosen, strict=True)), ref_chance)
        args = _draw_value(draw, tool.root, tool.root, wiring, 0)
        step: Doc = {"id": step_id, "tool": tool.name, "args": args}
        if i and _percent(draw, 30):
            step["after"] = _subset(draw, ids[:i][-12:]) or [ids[i - 1]]
        steps.append(step)
        chosen.append(tool)
    pairs = list(zip(steps, chosen, strict=True))
    if len(pairs) > 1 and _percent(draw, 40):
        # Any order of the same steps is still acyclic: plan order need not be execution order.
        pairs = draw(st.permutations(pairs))
    doc: Doc = {"pte_plan": PLAN_FORMAT_VERSION, "steps": [s for s, _ in pairs]}
    if _percent(draw, 60):
        index = draw(st.integers(0, len(ids) - 1))
        tokens = _choice(draw, [t for t, _ in chosen[index].pointers])
        result: Json = _ref(ids[index], tokens)
        if _percent(draw, 20):
            result = {"answer": result, "steps": len(ids), "note": draw(_TEXT)}
        doc["result"] = result
    return _Drawn(doc, [t for _, t in pairs])


def valid_plans(
    registry: Registry, *, min_steps: int = 1, max_steps: int = 8
) -> SearchStrategy[dict[str, Any]]:
    """Plan documents (JSON-ready dicts) that `compile_plan` accepts against `registry`.

    Each step calls a tool of the registry with arguments drawn from its input schema
    (types, enums, ranges, lengths, patterns, nested models, ``$defs``, dates); some
    arguments, at any depth, are references to earlier steps' outputs whose type fits the
    parameter. Steps may wait on earlier steps through ``after``, may appear in any
    order that keeps the dependencies acyclic, and the plan may have a ``result``.
    Tools whose input schema the generator cannot satisfy are never chosen.
    """
    if not 1 <= min_steps <= max_steps:
        raise ValueError(f"need 1 <= min_steps <= max_steps, got {min_steps}, {max_steps}")
    catalogue = _catalogue_for(registry)

    @st.composite
    def plans(draw: DrawFn) -> Doc:
        return _draw_plan(draw, catalogue, min_steps, max_steps).doc

    return plans()
