"""Finding and editing positions in a drawn plan: what the invalid-plan mutations share.

Dependencies between steps, literal positions below an argument object, unknown ids and
fresh keys, and the `_Mutation` signature each per-reason generator implements.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from hypothesis.strategies import DrawFn

from pte._plan import Limits
from pte.testing._strategies.base import (
    _KEYS,
    Doc,
    Json,
    _fresh,
)
from pte.testing._strategies.catalogue import (
    _Catalogue,
)
from pte.testing._strategies.valid import _Drawn
from pte.testing._strategies.values import _STEP_IDS


def _dependents(doc: Doc, index: int) -> set[int]:
    """Steps that (transitively) depend on step `index`, and the step itself."""
    ids = {s["id"]: i for i, s in enumerate(doc["steps"])}
    edges: dict[int, set[int]] = {i: set() for i in range(len(doc["steps"]))}
    for i, step in enumerate(doc["steps"]):
        for dep in _step_deps(step):
            if dep in ids:
                edges[ids[dep]].add(i)
    seen = {index}
    todo = [index]
    while todo:
        for nxt in edges[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def _step_deps(step: Doc) -> list[str]:
    deps: list[str] = list(step.get("after", ()))

    def walk(value: Json) -> None:
        if isinstance(value, dict):
            if set(value) == {"$ref"} and isinstance(value["$ref"], str):
                deps.append(value["$ref"].partition("/")[0])
                return
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(step["args"])
    return deps


def _locations(value: Json, path: tuple[str | int, ...] = ()) -> list[tuple[str | int, ...]]:
    """Paths of every non-reference position below `value` (not `value` itself)."""
    out: list[tuple[str | int, ...]] = []
    if isinstance(value, dict) and set(value) != {"$ref"}:
        for key, item in value.items():
            out.append((*path, key))
            out.extend(_locations(item, (*path, key)))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            out.append((*path, index))
            out.extend(_locations(item, (*path, index)))
    return out


def _set(container: Json, path: tuple[str | int, ...], value: Json) -> None:
    for key in path[:-1]:
        container = container[key]
    container[path[-1]] = value


_Mutation = Callable[[DrawFn, _Catalogue, _Drawn, Limits], "str | Doc | None"]


def _unknown_id(draw: DrawFn, doc: Doc) -> str:
    ids = {s["id"] for s in doc["steps"]}
    found = draw(_STEP_IDS)
    return found if found not in ids else _fresh(found, ids)


def _new_key(draw: DrawFn, taken: Mapping[str, Any]) -> str:
    key: str = draw(_KEYS)
    return key if key not in taken else _fresh("k" + key[:8].replace("$", "_"), taken)


def _get(container: Json, path: tuple[str | int, ...]) -> Json:
    for key in path:
        container = container[key]
    return container
