"""The planner prompt keeps every fact the cookbook's plans use (#37): a shorter prompt must not
lose a tool, a parameter, an enum value, an output field a plan references or a control word.

Each cookbook task's plans (the honest plans of tests/cookbook/<domain>.py and every answer of
the model-written tasks) are checked against the planner prompt the engine shows for that
domain: the text a scripted model is given is enough to write them.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from pte import Policy, Registry

# private: the prompts' text, white-box
from pte._run import planner_messages, stage_messages
from pte.testing.cookbook import ModelTask, cookbook_registry, run_model_task
from pte.testing.domains import DOMAINS
from tests.cookbook.model_written import MODEL_TASKS

_CONTROL_WORDS = ("for_each", "max_items", "when", "default", "require", "message", "continue", "after")


def _plans() -> Iterator[tuple[str, str, bool, dict[str, Any]]]:
    """(task name, domain, whether its plans are all correct, plan document) of every cookbook
    plan; a model-written task whose plan the compiler sends back holds a deliberate mistake."""
    for domain in DOMAINS:
        for task in importlib.import_module(f"tests.cookbook.{domain}").TASKS:
            yield task.name, task.domain, True, task.document()
    for model_task in MODEL_TASKS:
        for answers in (model_task.planner, model_task.stage, model_task.repair, model_task.replanner):
            for answer in answers:
                if isinstance(answer, dict) and isinstance(answer.get("steps"), list):
                    yield model_task.name, model_task.domain, not model_task.expect_rejected, answer


PLANS = list(_plans())


def _entries(system: str) -> dict[str, str]:
    """Tool name -> its entry (signature, labels, description) in a planner's system prompt."""
    tools = system[system.index("\nTools:\n") + 8 :] if "\nTools:\n" in system else system
    out: dict[str, str] = {}
    for block in tools.split("\n\n"):
        name = re.match(r"([a-z_][a-z0-9_]*)(?:\[[^\]]*\])?\(", block)
        if name is not None:
            out[name.group(1)] = block
    return out


def _types(system: str) -> dict[str, str]:
    """Shared type name -> its definition line (a list shape's, ``Records<T>``, by its name)."""
    return {m.group(1): m.group(2) for m in re.finditer(r"^([A-Z]\w*)(?:<T>)? = (.*)$", system, re.M)}


def _keys(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _keys(item)
    elif isinstance(value, list):
        for item in value:
            yield from _keys(item)


def _references(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        if isinstance(value.get("$ref"), str):
            yield value["$ref"]
        for item in value.values():
            yield from _references(item)
    elif isinstance(value, list):
        for item in value:
            yield from _references(item)


_PROMPTS: dict[str, str] = {}


def _system(domain: str) -> str:
    if domain not in _PROMPTS:
        registry = cookbook_registry(domain)
        _PROMPTS[domain] = planner_messages("x", registry, Policy.from_registry(registry))[0]["content"]
    return _PROMPTS[domain]


@pytest.mark.parametrize(("name", "domain", "correct", "doc"), PLANS, ids=[p[0] for p in PLANS])
def test_the_planner_prompt_states_what_the_plan_uses(
    name: str, domain: str, correct: bool, doc: dict[str, Any]
) -> None:
    _check_the_prompt_states_what_the_plan_uses(
        name, _system(domain), cookbook_registry(domain), correct, doc
    )


def _check_the_prompt_states_what_the_plan_uses(
    name: str, system: str, registry: Registry, correct: bool, doc: dict[str, Any]
) -> None:
    entries, types = _entries(system), _types(system)
    produced_by = {s.get("id"): s.get("tool") for s in doc["steps"]}
    for item in doc["steps"]:
        for word in _CONTROL_WORDS:
            if word in item:
                assert f'"{word}"' in system, (name, word)
        for key in (*_keys(item.get("when")), *_keys(item.get("require"))):
            if key != "$ref":
                assert f'"{key}"' in system, (name, key)
        tool = item.get("tool")
        if tool is None or tool not in registry.names:
            continue  # a delegate step, or a tool the compiler sends back (the model's mistake)
        entry = entries[tool]
        signature = entry.split("\n")[0]
        inputs = registry[tool].planner_input_schema.get("properties", {})
        for arg, value in (item.get("args") or {}).items():
            if arg not in inputs:
                continue  # a mistake the compiler sends back
            # A str parameter is written by its name alone (``query``, ``folder? = "inbox"``).
            assert re.search(rf"[(, ]{re.escape(arg)}\??(?:: |[,)]| = )", signature), (name, tool, arg)
            enum = inputs[arg].get("enum") if isinstance(inputs[arg], dict) else None
            if enum and isinstance(value, str):
                assert f'"{value}"' in signature, (name, tool, arg, value)
    for pointer in _references(doc) if correct else ():
        step_id, _, rest = pointer.partition("/")
        tool = produced_by.get(step_id)
        field = rest.split("/")[0]
        if not field or tool not in registry.names or field in ("*",) or field.isdigit():
            continue
        output = entries[tool].split("\n")[0].split(") -> ", 1)[1]
        named = re.fullmatch(r"([A-Z]\w*)(<.*>)?", output)
        if named:  # a shared type (Invoice) or list shape (Records<R>, its items R)
            output = types[named.group(1)] + (named.group(2) or "")
        if output.startswith("{[key]: "):  # a map: its keys are named in the description
            assert re.search(rf"\b{re.escape(field)}\b", entries[tool]), (name, tool, field)
            continue
        if re.search(r"\b[A-Z]\b|\bR[A-Z]?\b|Pick<|groups<", output) and f"{field}" not in output:
            continue  # a generic tool: the field is one of the data's, not the catalogue's
        assert re.search(rf"[{{ ]{re.escape(field)}\??(?:: |[,}}]| /\*)", output), (name, tool, field, output)


def test_the_stage_prompt_starts_with_the_planner_prompt_byte_for_byte() -> None:
    """The static part (rules and catalogue) comes first and is the same in every planner call of
    a deployment, so a provider's prompt cache serves it: a stage adds its part after it."""
    registry = cookbook_registry("workspace")
    policy = Policy.from_registry(registry)
    planner = planner_messages("x", registry, policy)[0]["content"]
    stage = stage_messages("y", registry, policy, 2, {}, [])[0]["content"]
    assert stage.startswith(planner + "\n\n")
    assert len(planner) / len(stage) > 0.9


REPAIRED = [task for task in MODEL_TASKS if task.repair]


@pytest.mark.parametrize("task", REPAIRED, ids=[t.name for t in REPAIRED])
def test_the_repair_prompt_states_what_the_repaired_plan_uses(task: ModelTask, tmp_path: Path) -> None:
    """A repair is shown the plan's own tools, not the whole catalogue (#37): each repaired plan
    of the cookbook is written from the repair prompt the engine sent."""
    sent: list[list[dict[str, str]]] = []

    def seen(answer: Any) -> Any:
        def write(messages: list[dict[str, str]], call: Any) -> Any:
            sent.append(messages)
            return answer

        return write

    run_model_task(replace(task, repair=[seen(a) for a in task.repair]), tmp_path / "run.jsonl")
    assert len(sent) == len(task.repair)
    registry = cookbook_registry(task.domain)
    for messages, answer in zip(sent, task.repair, strict=True):
        system = messages[0]["content"]
        if isinstance(answer, dict) and isinstance(answer.get("steps"), list):
            accepted = task.expect_status == "succeeded"  # else it repeats the mistake, sent back
            _check_the_prompt_states_what_the_plan_uses(task.name, system, registry, accepted, answer)
        # The rejected plan's tools alone, not the whole catalogue.
        assert len(system) < 0.5 * len(_system(task.domain)), (task.name, len(system))
