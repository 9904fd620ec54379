"""The catalogue renderer's text and work are bounded by the size of the schema document, not by
its expansion (#34): a type reached along many paths is written once, by name, and walked once."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pte import Policy, Registry

# private: the prompts' text, white-box
from pte._run import catalogue_text, planner_messages
from pte.catalogue import tool_from_schema

_ROOT = Path(__file__).resolve().parents[2]


def fan_out(levels: int, width: int = 12) -> dict[str, Any]:
    """An OpenAPI document whose response schema has `width` properties per level, each referring
    to the next of `levels` levels: width**levels paths, levels * width properties."""
    schemas = {
        f"L{i}": {
            "type": "object",
            "properties": {
                f"p{j}": {"$ref": f"#/components/schemas/L{i + 1}"} if i + 1 < levels else {"type": "string"}
                for j in range(width)
            },
        }
        for i in range(levels)
    }
    response = {
        "description": "ok",
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/L0"}}},
    }
    return {
        "openapi": "3.0.0",
        "info": {"title": "fan-out", "version": "1"},
        "paths": {"/x": {"get": {"operationId": "get_x", "responses": {"200": response}}}},
        "components": {"schemas": schemas},
    }


def test_a_fan_out_schema_of_twelve_levels_renders_in_a_child_process_within_its_time_limit() -> None:
    """The red team's document: 12 levels of 12 properties imported in 0.2 s, then the planner
    prompt grew 6x per level and never finished. Run in a child process with a deadline, so a
    regression fails instead of hanging the suite."""
    script = textwrap.dedent(
        """
        import json, sys
        from pte.importers.openapi import import_openapi
        from pte._run import catalogue_text, planner_messages
        document = json.loads(sys.stdin.read())
        registry = import_openapi(document, base_url="http://127.0.0.1:9")
        text = catalogue_text(registry)
        system = planner_messages("Read x.", registry)[0]["content"]
        print(json.dumps({"catalogue": text, "system": len(system)}))
        """
    )
    document = fan_out(12)
    done = subprocess.run(
        [sys.executable, "-c", script],
        input=json.dumps(document),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=_ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout)
    text = out["catalogue"]
    # Each level is one named type, written once; the tool's output is its name.
    assert "get_x() -> L0" in text
    for i in range(12):
        assert text.count(f"\nL{i} = {{") == 1
    assert len(text) <= len(json.dumps(document["components"]))


def _dag_schema(levels: int, width: int, shapes: list[int]) -> dict[str, Any]:
    """An output schema with `levels` named types, each referring to the next `width` times, in
    a shape picked per level (property, list, union, map), so every path is a different pointer."""

    def next_ref(i: int, j: int) -> Any:
        if i + 1 == levels:  # a leaf, marked: a label walk must reach it along every path
            return {"type": "string", "x-pte-provenance": "untrusted"}
        ref = {"$ref": f"#/$defs/T{i + 1}"}
        return [
            ref,
            {"type": "array", "items": ref},
            {"anyOf": [ref, {"type": "null"}]},
            {"type": "object", "additionalProperties": ref},
        ][shapes[(i + j) % len(shapes)]]

    defs = {
        f"T{i}": {"type": "object", "properties": {f"f{j}": next_ref(i, j) for j in range(width)}}
        for i in range(levels)
    }
    return {"$ref": "#/$defs/T0", "$defs": defs}


def _calls(action: Any) -> int:
    """Python function calls made by `action()` (a work counter independent of the machine)."""
    count = 0

    def profile(frame: Any, event: str, arg: Any) -> None:
        nonlocal count
        if event == "call":
            count += 1

    sys.setprofile(profile)
    try:
        action()
    finally:
        sys.setprofile(None)
    return count


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    levels=st.integers(1, 9),
    width=st.integers(1, 4),
    shapes=st.lists(st.integers(0, 3), min_size=1, max_size=4),
    output=st.sampled_from(["trusted", "untrusted", "derived"]),
)
def test_rendering_work_and_text_grow_with_the_schema_not_with_its_paths(
    levels: int, width: int, shapes: list[int], output: Any
) -> None:
    """However many paths a schema's references open (width**levels), the catalogue and the
    planner prompt cost a number of calls and characters proportional to the schema's size."""
    schema = _dag_schema(levels, width, shapes)
    spec = tool_from_schema(
        "read_tree",
        description="Read a tree.",
        input_schema={
            "type": "object",
            "properties": {"root": {"$ref": "#/$defs/T0"}},
            "required": ["root"],
            "$defs": schema["$defs"],
        },
        output_schema=schema,
        func=lambda args: {},
        provenance=output,
    )
    registry = Registry([spec])
    size = len(json.dumps(schema))
    texts: list[str] = []
    calls = _calls(lambda: texts.append(catalogue_text(registry)))
    assert calls <= 40 * size + 5_000, (calls, size)
    assert len(texts[0]) <= 2 * size + 200
    calls = _calls(lambda: planner_messages("Read it.", registry))
    assert calls <= 40 * size + 10_000, (calls, size)
    # With the policy in force (its field labels walked by pte._policy's bounded walker).
    calls = _calls(
        lambda: texts.append(
            planner_messages("Read it.", registry, Policy.from_registry(registry))[0]["content"]
        )
    )
    assert calls <= 400 * size + 20_000, (calls, size)
    assert len(texts[-1]) <= len(texts[0]) + 4 * size + 8_000
