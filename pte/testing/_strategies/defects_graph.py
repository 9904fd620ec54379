"""Defects of the step graph: ``duplicate_step_id``, ``bad_reference`` and ``plan_cycle``."""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.strategies import DrawFn

from pte._plan import Limits
from pte.testing._strategies.base import (
    _KEYS,
    Doc,
    _copy,
    _percent,
    _ref,
)
from pte.testing._strategies.catalogue import (
    _NO_SUCH_TOKENS,
    _Catalogue,
)
from pte.testing._strategies.edits import (
    _dependents,
    _locations,
    _set,
    _unknown_id,
)
from pte.testing._strategies.valid import _Drawn

# duplicate_step_id -------------------------------------------------------------------------------


def _mutate_duplicate_step_id(
    draw: DrawFn, catalogue: _Catalogue, drawn: _Drawn, limits: Limits
) -> str | Doc | None:
    steps = drawn.doc["steps"]
    if len(steps) == 1 or _percent(draw, 25):
        # A copy of an existing step (same id) at some position.
        source = draw(st.sampled_from(steps))
        steps.insert(draw(st.integers(0, len(steps))), _copy(source))
        return drawn.doc
    first, second = draw(st.lists(st.integers(0, len(steps) - 1), min_size=2, max_size=2, unique=True))
    steps[second]["id"] = steps[first]["id"]
    return drawn.doc


# bad_reference -----------------------------------------------------------------------------------


def _mutate_bad_reference(
    draw: DrawFn, catalogue: _Catalogue, drawn: _Drawn, limits: Limits
) -> str | Doc | None:
    doc = drawn.doc
    steps = doc["steps"]
    kind = draw(st.sampled_from(["unknown_step", "unknown_after", "bad_pointer", "result"]))
    if kind == "unknown_after":
        step = draw(st.sampled_from(steps))
        after = list(step.get("after", ()))
        after.insert(draw(st.integers(0, len(after))), _unknown_id(draw, doc))
        step["after"] = after
        return doc
    index = draw(st.integers(0, len(steps) - 1))
    if kind == "bad_pointer" or (kind == "result" and _percent(draw, 50)):
        # Not into a step that depends on this one: that would add a cycle as a second defect.
        blocked = _dependents(doc, index) if kind == "bad_pointer" else set()
        options = [
            (steps[j]["id"], tokens)
            for j in range(len(steps))
            if j not in blocked
            for tokens in drawn.tools[j].bad_pointers
        ]
        if options:
            ref = _ref(*draw(st.sampled_from(options)))
        else:
            ref = _ref(_unknown_id(draw, doc), draw(st.sampled_from(_NO_SUCH_TOKENS)))
    else:
        ref = _ref(_unknown_id(draw, doc), draw(st.sampled_from([(), *_NO_SUCH_TOKENS])))
    if kind == "result":
        doc["result"] = draw(st.sampled_from([ref, {"total": ref}, [1, ref]]))
        return doc
    args = steps[index]["args"]
    spots = _locations(args)
    if spots and _percent(draw, 80):
        _set(args, draw(st.sampled_from(spots)), ref)
    else:
        args[draw(_KEYS)] = ref
    return doc


# plan_cycle --------------------------------------------------------------------------------------


def _add_edge(draw: DrawFn, step: Doc, target: str) -> None:
    """Make `step` depend on step `target`, through `after` or through a reference in its args."""
    spots = [p for p in _locations(step["args"])]
    if spots and _percent(draw, 50):
        _set(step["args"], draw(st.sampled_from(spots)), _ref(target))
        return
    after = list(step.get("after", ()))
    if target not in after:
        after.insert(draw(st.integers(0, len(after))), target)
    step["after"] = after


def _mutate_plan_cycle(
    draw: DrawFn, catalogue: _Catalogue, drawn: _Drawn, limits: Limits
) -> str | Doc | None:
    steps = drawn.doc["steps"]
    if len(steps) == 1 or _percent(draw, 30):
        step = draw(st.sampled_from(steps))
        tokens = draw(st.sampled_from([(), ("value",), ("0", "a")]))
        if _percent(draw, 50):
            spots = _locations(step["args"])
            if spots:
                _set(step["args"], draw(st.sampled_from(spots)), _ref(step["id"], tokens))
            else:
                step["args"][draw(_KEYS)] = _ref(step["id"], tokens)
        else:
            after = list(step.get("after", ()))
            after.insert(draw(st.integers(0, len(after))), step["id"])
            step["after"] = after
        return drawn.doc
    size = draw(st.integers(2, len(steps)))
    members = draw(st.permutations(range(len(steps))))[:size]
    # c0 waits for c1, c1 for c2, ... and the last for c0: a cycle through every member.
    for position, member in enumerate(members):
        _add_edge(draw, steps[member], steps[members[(position + 1) % size]]["id"])
    return drawn.doc
