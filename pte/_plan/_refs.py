"""Compile checks on a plan's structure: step ids, allowed tools, references and their order.

`duplicate_step_id`, `tool_not_allowed`, `bad_reference` and `plan_cycle`: what must hold
before any argument can be type-checked (`pte._plan._args`). The reference helpers are
shared with `pte._plan._control`, which checks the references in conditions and lists.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from typing import Any

from pte._catalogue import schema_types as st
from pte._core import ReasonCode, array_index, canonical_json
from pte._plan._context import CompileContext, _reject
from pte._plan._model import ELEMENT, Reference, is_reference

__all__ = ["check_acyclic", "check_references", "check_tools_allowed", "check_unique_ids"]


def check_unique_ids(ctx: CompileContext) -> None:
    """duplicate_step_id: two steps share an id."""
    for i, step in enumerate(ctx.steps):
        if step["id"] in ctx.prior:
            raise _reject(
                ReasonCode.DUPLICATE_STEP_ID,
                f"step id {step['id']!r} is already used by a completed step; choose a new id",
                "steps",
                i,
                "id",
            )
        if step["id"] in ctx.index:
            first = ctx.index[step["id"]]
            raise _reject(
                ReasonCode.DUPLICATE_STEP_ID,
                f"step id {step['id']!r} is used by steps {first} and {i}",
                "steps",
                i,
                "id",
            )
        ctx.index[step["id"]] = i


def check_tools_allowed(ctx: CompileContext) -> None:
    """tool_not_allowed: a step names a tool that is not registered and allowed."""
    for i, step in enumerate(ctx.steps):
        if "require" in step:  # pte._plan._control: a require step calls no tool
            continue
        if step["tool"] not in ctx.registry:
            allowed = ", ".join(ctx.registry.names) or "(none)"
            raise _reject(
                ReasonCode.TOOL_NOT_ALLOWED,
                f"step {step['id']!r} calls {step['tool']!r}, which is not in the allow-list ({allowed})",
                "steps",
                i,
                "tool",
            )


class _TooDeep(Exception):
    pass


def _collect(
    value: Any, path: tuple[str | int, ...], out: list[tuple[tuple[str | int, ...], Reference]], depth: int
) -> None:
    """Find every reference in `value`, and enforce the nesting limit on the way down."""
    if depth <= 0:
        raise _TooDeep
    if isinstance(value, dict):
        if is_reference(value):
            out.append((path, Reference.parse(value["$ref"])))
            return
        for key, item in value.items():
            if isinstance(item, (dict, list)):
                _collect(item, (*path, key), out, depth - 1)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            if isinstance(item, (dict, list)):
                _collect(item, (*path, index), out, depth - 1)


def _collect_checked(value: Any, ctx: CompileContext, start_depth: int, *where: str | int) -> list[Any]:
    sites: list[tuple[tuple[str | int, ...], Reference]] = []
    try:
        _collect(value, (), sites, ctx.limits.max_depth - start_depth + 1)
    except _TooDeep:
        raise _reject(
            ReasonCode.PLAN_TOO_LARGE,
            f"plan nesting depth exceeds the limit of {ctx.limits.max_depth}",
            *where,
        ) from None
    return sites


def _select(ctx: CompileContext, ref: Reference) -> st.Schema | None:
    """The schema of the value a reference selects: its pointer into the producer's output type."""
    schema, root = ctx.output_type(ref.step)
    return st.select(schema, root, ref.tokens)


def _check_ref_target(
    ctx: CompileContext, ref: Reference, where: tuple[str | int, ...], owner: str | None
) -> None:
    if ref.step not in ctx.index and ref.step not in ctx.prior:
        raise _reject(ReasonCode.BAD_REFERENCE, f"reference {str(ref)!r} names no step of this plan", *where)
    if ref.step == owner:
        raise _reject(ReasonCode.PLAN_CYCLE, f"step {owner!r} refers to its own output", *where)
    if ref.step in ctx.index and "require" in ctx.steps[ctx.index[ref.step]]:  # pte._plan._control
        raise _reject(
            ReasonCode.BAD_REFERENCE,
            f"reference {str(ref)!r}: a require step has no output (use 'after' to wait for it)",
            *where,
        )
    if ref.step not in ctx.index and ctx.prior[ref.step] not in ctx.registry:
        raise _reject(
            ReasonCode.BAD_REFERENCE, f"reference {str(ref)!r}: that step's tool is not available", *where
        )
    if ref.step in ctx.index and ctx.producer(ref.step).generic:
        return  # its output type is known once its own arguments are typed (check_args)
    _check_pointer(ctx, ref, where)


def _check_pointer(ctx: CompileContext, ref: Reference, where: tuple[str | int, ...]) -> None:
    if ref.tokens:
        _check_default_has(ctx, ref, where)
    if ref.tokens and _select(ctx, ref) is None:
        raise _reject(
            ReasonCode.BAD_REFERENCE,
            f"reference {str(ref)!r}: the output of {ctx.producer(ref.step).name!r} has no {ref.pointer!r}",
            *where,
        )


def _selects(value: Any, tokens: tuple[str, ...]) -> bool:
    """Whether a pointer selects something in a literal value ('*': in every element)."""
    for n, token in enumerate(tokens):
        if isinstance(value, dict) and token in value:
            value = value[token]
        elif isinstance(value, list) and token == ELEMENT:
            return all(_selects(item, tokens[n + 1 :]) for item in value)
        elif isinstance(value, list) and (index := array_index(token)) is not None:
            if index >= len(value):
                return False
            value = value[index]
        else:
            return False
    return True


def _check_default_has(ctx: CompileContext, ref: Reference, where: tuple[str | int, ...]) -> None:
    """A reader of a field of a step whose `when` default lacks that field would fail whenever
    the step is skipped: refused, with what the reader would get instead."""
    found, default = ctx.default_outside(ref.step)
    if not found or _selects(default, ref.tokens):
        return
    shown = canonical_json(default)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    what = "null" if default is None else "missing"
    raise _reject(
        ReasonCode.BAD_REFERENCE,
        f"reference {str(ref)!r}: {str(ref)!r} may be {what} when {ref.step!r} is skipped (its default is "
        f"{shown}): read {ref.step!r} as a whole, or give it a default that has {ref.pointer!r}",
        *where,
    )


def check_references(ctx: CompileContext) -> None:
    """bad_reference: a `$ref` or `after` names a missing step or a pointer its output cannot have.

    Also plan_too_large for arguments nested deeper than `max_depth` (found on the same walk).
    """
    ctx.references = []
    for i, step in enumerate(ctx.steps):
        # Depth: the document (1) > steps (2) > step (3) > args (4).
        sites = _collect_checked(step.get("args", {}), ctx, 4, "steps", i, "args")
        for path, ref in sites:
            _check_ref_target(ctx, ref, ("steps", i, "args", *path), step["id"])
        for j, dep in enumerate(step.get("after", ())):
            if dep not in ctx.index and dep not in ctx.prior:
                raise _reject(
                    ReasonCode.BAD_REFERENCE, f"'after' names no step {dep!r}", "steps", i, "after", j
                )
            if dep == step["id"]:
                raise _reject(ReasonCode.PLAN_CYCLE, f"step {dep!r} waits for itself", "steps", i, "after", j)
        ctx.references.append(sites)
    if "result" in ctx.document:
        sites = _collect_checked(ctx.document["result"], ctx, 2, "result")
        for path, ref in sites:
            _check_ref_target(ctx, ref, ("result", *path), None)


def check_acyclic(ctx: CompileContext) -> None:
    """plan_cycle: the dependencies (references and `after`) do not form a DAG.

    Also fixes the execution order: topological, ties broken by plan order.
    """
    steps = ctx.steps
    control_deps: Mapping[str, list[str]] = ctx.control_deps
    dependents: list[list[int]] = [[] for _ in steps]
    pending = [0] * len(steps)
    for i, step in enumerate(steps):
        # Prior (completed) steps are already satisfied: only this plan's steps order it.
        deps = {ctx.index[ref.step] for _, ref in ctx.references[i] if ref.step in ctx.index}
        deps.update(ctx.index[d] for d in step.get("after", ()) if d in ctx.index)
        # pte._plan._control: conditions, for_each lists and require steps add dependencies.
        deps.update(ctx.index[d] for d in control_deps.get(step["id"], ()) if d in ctx.index)
        deps.discard(i)
        pending[i] = len(deps)
        for d in deps:
            dependents[d].append(i)
    ready = [i for i, n in enumerate(pending) if n == 0]
    heapq.heapify(ready)
    order: list[str] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(steps[i]["id"])
        for j in dependents[i]:
            pending[j] -= 1
            if pending[j] == 0:
                heapq.heappush(ready, j)
    if len(order) < len(steps):
        stuck = [steps[i]["id"] for i, n in enumerate(pending) if n > 0]
        first = min(ctx.index[s] for s in stuck)
        raise _reject(
            ReasonCode.PLAN_CYCLE,
            f"steps {stuck} depend on each other in a cycle (through references or 'after')",
            "steps",
            first,
        )
    ctx.order = tuple(order)
