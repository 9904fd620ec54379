"""Hypothesis strategies for plans with control: `for_each`, `when`, `require`, `continue`.

`control_plans(registry)` draws a valid plan (`valid_plans`) and adds control to it: a
per-item step mapping a tool over an array in an earlier output (element references where the
types fit), a typed `when` on a step (with every step that depends on it put under the same
condition, so reading its output stays legal), a `require` step, or `continue` in place of the
result. `invalid_control_plans(registry, reason)` breaks one control rule so that compile
rejects the plan with exactly `reason`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from hypothesis import assume
from hypothesis import strategies as st
from hypothesis.strategies import DrawFn, SearchStrategy

from pte._catalogue import Registry
from pte._catalogue import schema_types as types
from pte._core import ReasonCode
from pte._plan import ELEMENT, schema_kinds
from pte.testing._strategies.base import _choice, _fresh, _percent, _ref, _serialise
from pte.testing._strategies.catalogue import _catalogue_for, _Tool
from pte.testing._strategies.valid import _draw_plan

__all__ = ["CONTROL_REASONS", "control_plans", "invalid_control_plans"]

Doc = dict[str, Any]

#: The compile-time reasons `invalid_control_plans` can produce.
CONTROL_REASONS: tuple[ReasonCode, ...] = (
    ReasonCode.BAD_REFERENCE,
    ReasonCode.INVALID_ARGS,
    ReasonCode.SCHEMA_VIOLATION,
)


def _refs(value: Any) -> set[str]:
    """Step ids referenced anywhere in a value (args, for_each, when, ...)."""
    out: set[str] = set()
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if set(item) == {"$ref"} and isinstance(item["$ref"], str):
                out.add(item["$ref"].partition("/")[0])
            else:
                stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return out


def _dependents(doc: Doc, index: int) -> set[int]:
    """Steps that (transitively) depend on step `index` through references or after, and itself."""
    steps = doc["steps"]
    deps = [_refs(s) | set(s.get("after", ())) for s in steps]
    seen = {index}
    changed = True
    while changed:
        changed = False
        for i, d in enumerate(deps):
            if i not in seen and any(steps[j]["id"] in d for j in seen):
                seen.add(i)
                changed = True
    return seen


def _ancestors(doc: Doc, index: int) -> set[int]:
    """Steps that step `index` (transitively) depends on, and itself."""
    steps = doc["steps"]
    ids = {s["id"]: i for i, s in enumerate(steps)}
    seen = {index}
    todo = [index]
    while todo:
        step = steps[todo.pop()]
        for dep in _refs(step) | set(step.get("after", ())):
            j = ids.get(dep)
            if j is not None and j not in seen:
                seen.add(j)
                todo.append(j)
    return seen


def _operands(doc: Doc, tools: Mapping[str, _Tool]) -> list[tuple[int, tuple[str, ...], frozenset[str], Any]]:
    """(step index, pointer, comparable kinds, schema) of every typed pointer of every plain step."""
    out = []
    for i, step in enumerate(doc["steps"]):
        if "tool" not in step or "for_each" in step or "when" in step:
            continue
        tool = tools[step["id"]]
        for tokens, schema in tool.pointers:
            kinds = schema_kinds(schema, tool.spec.output_schema)
            if kinds and len(kinds) <= 2:
                out.append((i, tokens, kinds, schema))
    return out


def _condition_on(draw: DrawFn, sid: str, tokens: tuple[str, ...], kinds: frozenset[str]) -> Doc | None:
    ref = _ref(sid, tokens)
    plain = kinds - {"null"}
    if plain == {"number"}:
        op = draw(st.sampled_from(["lt", "le", "gt", "ge", "eq", "ne"]))
        cond: Doc = {op: [ref, draw(st.integers(-5, 5))]}
    elif plain == {"boolean"}:
        cond = {draw(st.sampled_from(["eq", "ne"])): [ref, draw(st.booleans())]}
    elif plain == {"string"}:
        cond = {draw(st.sampled_from(["eq", "ne"])): [draw(st.text(max_size=4)), ref]}
    elif plain and plain <= {"array", "object"}:
        cond = {draw(st.sampled_from(["empty", "nonempty"])): ref}
    else:
        return None
    if _percent(draw, 25):
        cond = {"not": cond}
    return cond


def _add_when(draw: DrawFn, doc: Doc, tools: dict[str, _Tool]) -> bool:
    steps = doc["steps"]
    target = draw(st.integers(0, len(steps) - 1))
    if "tool" not in steps[target]:
        return False
    affected = _dependents(doc, target)  # the step and everything that depends on it
    if any("when" in steps[i] or "require" in steps[i] for i in affected):
        return False
    candidates = [o for o in _operands(doc, tools) if o[0] not in affected]
    if not candidates:
        return False
    source, tokens, kinds, _ = _choice(draw, candidates)
    cond = _condition_on(draw, steps[source]["id"], tokens, kinds)
    if cond is None:
        return False
    for i in sorted(affected):
        # A reader of a possibly skipped output must be under the same condition.
        steps[i]["when"] = cond
    if "result" in doc and any(steps[i]["id"] in json.dumps(doc["result"]) for i in affected):
        del doc["result"]
    return True


def _add_for_each(draw: DrawFn, doc: Doc, tools: dict[str, _Tool]) -> bool:
    steps = doc["steps"]
    lists = [
        (i, tokens, schema)
        for i, tokens, _, schema in _operands(doc, tools)
        if types.types_of(schema, tools[steps[i]["id"]].spec.output_schema) == {"array"}
    ]
    if not lists:
        return False
    source, tokens, schema = _choice(draw, lists)
    plain = [s for s in steps if "tool" in s and "for_each" not in s and "when" not in s]
    if not plain:
        return False
    template = _choice(draw, plain)
    tool = tools[template["id"]]
    root = tools[steps[source]["id"]].spec.output_schema
    items = types.select(schema, root, (ELEMENT,))
    args = json.loads(json.dumps(template["args"]))
    params: Mapping[str, Any] = tool.spec.planner_input_schema.get("properties", {})
    for name, param in params.items():
        if items is not None and types.assignable(items, root, param, tool.root) and _percent(draw, 60):
            args[name] = _ref(steps[source]["id"], (*tokens, ELEMENT))
    if any("when" in s and s["id"] in _refs(args) for s in steps):
        return False  # the copy must not read a possibly skipped step
    new_id = _fresh("each", {s["id"] for s in steps})
    steps.append(
        {
            "id": new_id,
            "tool": template["tool"],
            "args": args,
            "for_each": _ref(steps[source]["id"], tokens),
            "max_items": draw(st.integers(1, 1000)),
        }
    )
    tools[new_id] = tool
    return True


def _add_require(draw: DrawFn, doc: Doc, tools: dict[str, _Tool]) -> bool:
    steps = doc["steps"]
    candidates = _operands(doc, tools)
    if not candidates:
        return False
    source, tokens, kinds, _ = _choice(draw, candidates)
    cond = _condition_on(draw, steps[source]["id"], tokens, kinds)
    if cond is None:
        return False
    # Later steps wait for a require: it must sit after what its condition reads and its inputs.
    position = max(_ancestors(doc, source)) + 1
    step = {"id": _fresh("need", {s["id"] for s in steps}), "require": cond, "message": "condition not met"}
    steps.insert(position, step)
    return True


def control_plans(registry: Registry, *, max_steps: int = 6) -> SearchStrategy[dict[str, Any]]:
    """Plan documents with for_each / when / require / continue that compile against `registry`."""
    catalogue = _catalogue_for(registry)

    @st.composite
    def plans(draw: DrawFn) -> Doc:
        drawn = _draw_plan(draw, catalogue, 1, max_steps)
        doc = drawn.doc
        tools = {s["id"]: t for s, t in zip(doc["steps"], drawn.tools, strict=True)}
        added = False
        for add in draw(st.permutations([_add_for_each, _add_when, _add_require])):
            if _percent(draw, 70):
                added = add(draw, doc, tools) or added
        assume(added)
        if "result" in doc and _percent(draw, 30):
            doc["continue"] = {"value": doc.pop("result")}
        return doc

    return plans()


def _break(draw: DrawFn, doc: Doc, reason: ReasonCode) -> bool:
    steps = doc["steps"]
    tool_steps = [s for s in steps if "tool" in s]
    if reason is ReasonCode.SCHEMA_VIOLATION:
        kind = draw(st.sampled_from(["max_items", "default", "both", "require_tool", "condition"]))
        step = _choice(draw, tool_steps)
        if kind == "max_items":
            step["for_each"] = step.get("for_each") or {"$ref": steps[0]["id"]}
            step.pop("max_items", None)
        elif kind == "default":
            step.pop("when", None)
            step["default"] = None
        elif kind == "both":
            doc["result"] = 1
            doc["continue"] = {"x": 1}
        elif kind == "require_tool":
            need = _fresh("need", {s["id"] for s in steps})
            cond = {"nonempty": {"$ref": "x"}}
            steps.append({"id": need, "require": cond, "message": "m", "tool": step["tool"]})
        else:
            step["when"] = {draw(st.sampled_from(["eq", "and", "xor"])): [1]}
        return True
    if reason is ReasonCode.BAD_REFERENCE:
        conditional = [s for s in tool_steps if "when" in s and "default" not in s]
        if conditional and _percent(draw, 50):
            # The plan's result reads a possibly skipped output.
            doc.pop("continue", None)
            doc["result"] = {"$ref": _choice(draw, conditional)["id"]}
            return True
        each = [s for s in tool_steps if "for_each" in s]
        if each:
            # An element reference used outside its for_each (in the result).
            lst = _choice(draw, each)["for_each"]["$ref"]
            doc.pop("continue", None)
            doc["result"] = {"$ref": f"{lst}/{ELEMENT}"}
            return True
        return False
    if reason is ReasonCode.INVALID_ARGS:
        each = [s for s in tool_steps if "for_each" in s]
        if not each:
            return False
        # A comparison of a list with a number can never hold: refused by type.
        step = _choice(draw, each)
        if any(step["id"] in _refs(s) for s in steps if s is not step) or "result" in doc:
            return False
        bad = {"eq": [step["for_each"], 1.5]}
        # Keep any condition it had: readers of a conditional step must stay under it.
        step["when"] = {"and": [step["when"], bad]} if "when" in step else bad
        return True
    raise ValueError(f"no control generator for {reason.value}")


def invalid_control_plans(registry: Registry, reason: ReasonCode) -> SearchStrategy[str]:
    """Plan text with control that compile rejects with exactly `reason` (one of CONTROL_REASONS)."""
    if reason not in CONTROL_REASONS:
        choices = [r.value for r in CONTROL_REASONS]
        raise ValueError(f"no control generator for {reason.value}; choose from {choices}")

    @st.composite
    def texts(draw: DrawFn) -> str:
        doc = draw(control_plans(registry))
        assume(_break(draw, doc, reason))
        return _serialise(draw, doc)

    return texts()
