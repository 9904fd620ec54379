"""The cookbook's model input per task, all calls, against a ReAct agent's estimated the same way.

Every cookbook task (tests/cookbook: the honest plans, each with a finalizer call, and the
model-written tasks with their stage and repair calls) runs through the real engine with a
`ScriptedModel`; its audit log holds every message the model was shown. Counted per task:

- PTE: the characters of every message of every model call (planner, stage, repair,
  replanner, finalizer), and how many of them are the deployment's static prompt
  (`pte._run.static_prompt`: rules and catalogue, byte-identical at the start of every planner
  call, so a provider's prompt cache serves it; a repair shown only its plan's tools shares the
  rules, the static prompt up to the notation): the cacheable share.
- ReAct, idealised: one model call per call of a domain tool the run made (the shaping,
  text and date steps it does in its head, for free), in the run's order, plus one for the
  answer. Each call holds the system prompt and the catalogue, the request and the transcript
  so far: every earlier action (tool name and arguments as JSON) and observation (the tool's
  output as JSON). The catalogue is shown as providers' tool calling sends it, JSON Schemas
  (`Registry.catalogue()`), and, for a comparison on equal terms, as PTE's signatures.

Characters, not tokens: both sides are counted the same way.

    PYTHONPATH=. python bench/bench_cookbook_input.py
"""

from __future__ import annotations

import importlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pte._audit import AuditLog, read_records
from pte._catalogue import STOCK_PACKS, load_registry
from pte._policy import Policy
from pte._run import Engine, EngineConfig, catalogue_text, static_prompt
from pte.testing import ScriptedModel
from pte.testing.cookbook import cookbook_registry, run_model_task
from pte.testing.domains import DOMAINS

#: bench/bench_llm_calls.py's ReAct system prompt, without its last line (the catalogue follows).
REACT_SYSTEM = """You are a helpful assistant that answers the user's request by calling tools.
Work step by step. At each turn write exactly:
Thought: <your reasoning about what to do next>
Action: <one tool name from the list below>
Action Input: <the tool's arguments as one JSON object>
You will then receive the tool's result as "Observation: <JSON>". Repeat as needed. When you \
have everything you need, write instead:
Thought: I now know the final answer
Final Answer: <the answer for the user>
Use only the tools listed.

The tools:
"""
STOCK_TOOLS = frozenset(load_registry(STOCK_PACKS).names)


def _runs() -> list[tuple[str, str, list[dict[str, Any]]]]:
    """(task, domain, records) for every cookbook task run through the engine."""
    from tests.cookbook.model_written import MODEL_TASKS

    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for domain in DOMAINS:
            registry = cookbook_registry(domain)
            for task in importlib.import_module(f"tests.cookbook.{domain}").TASKS:
                model = ScriptedModel(planner=[task.document()], finalizer=["Done."])
                log = Path(tmp) / f"{task.name}.jsonl"
                with AuditLog(log) as audit:
                    Engine(registry, model, config=EngineConfig(llm_answer=True)).run(task.request, audit)
                out.append((task.name, domain, read_records(log)))
        for model_task in MODEL_TASKS:
            _, records = run_model_task(model_task, Path(tmp) / f"{model_task.name}.jsonl")
            out.append((model_task.name, model_task.domain, records))
    return out


def _react(records: list[dict[str, Any]], catalogue: str) -> int:
    """Characters an idealised ReAct agent reads for the run in `records`."""
    request = next(r["request"] for r in records if r["type"] == "run_started")
    fixed = len(REACT_SYSTEM) + len(catalogue) + len(request)
    transcript, total, calls = 0, 0, 0
    started = {r["step_id"]: r for r in records if r["type"] == "step_started"}
    for record in records:
        if record["type"] != "step_finished" or record.get("tool") in STOCK_TOOLS:
            continue
        if record.get("status") != "succeeded" or record["step_id"] not in started:
            continue
        total += fixed + transcript
        calls += 1
        args = json.dumps(started[record["step_id"]].get("args"), ensure_ascii=False, sort_keys=True)
        action = f"Thought: I call {record['tool']}.\nAction: {record['tool']}\nAction Input: {args}"
        observation = "Observation: " + json.dumps(record.get("output"), ensure_ascii=False, sort_keys=True)
        transcript += len(action) + len(observation)
    return total + fixed + transcript  # and the call that writes the final answer


def main() -> None:
    runs = _runs()
    static: dict[str, str] = {}
    react_json: dict[str, str] = {}
    react_sig: dict[str, str] = {}
    for domain in DOMAINS:
        registry = cookbook_registry(domain)
        policy = Policy.from_registry(registry)
        static[domain] = static_prompt(registry, policy)
        react_json[domain] = json.dumps(registry.catalogue(), indent=1, ensure_ascii=False, sort_keys=True)
        react_sig[domain] = catalogue_text(registry, policy)
    pte_total = cached = calls = 0
    by_role: dict[str, list[int]] = {}
    react_total = react_sig_total = 0
    for _, domain, records in runs:
        for record in records:
            if record["type"] != "llm_call":
                continue
            calls += 1
            shown = sum(len(m["content"]) for m in record["messages"])
            pte_total += shown
            by_role.setdefault(record["role"], []).append(shown)
            first = record["messages"][0]["content"]
            rules = static[domain].split("\n\nTools: ")[0]
            if first.startswith(static[domain]):
                cached += len(static[domain])
            elif first.startswith(rules):  # a repair shown its plan's tools: the rules still open it
                cached += len(rules)
        react_total += _react(records, react_json[domain])
        react_sig_total += _react(records, react_sig[domain])
    n = len(runs)
    print(f"cookbook: {n} tasks, {calls} model calls ({calls / n:.2f} per task)")
    print(f"  PTE input per task                      {pte_total / n:10,.0f} characters")
    print(f"    of it the static prompt (cacheable)   {cached / n:10,.0f}  ({cached / pte_total:.0%})")
    for label, react in (("JSON Schemas", react_total), ("PTE's signatures", react_sig_total)):
        print(f"  ReAct, catalogue as {label:18} {react / n:10,.0f}   PTE / ReAct {pte_total / react:.2f}")
    for role, sizes_of in sorted(by_role.items()):
        print(f"  {role:10} {len(sizes_of):4d} calls, mean {sum(sizes_of) / len(sizes_of):10,.0f} characters")
    sizes = {domain: len(text) for domain, text in static.items()}
    print("  static prompt per domain: " + ", ".join(f"{d} {c:,}" for d, c in sizes.items()))


if __name__ == "__main__":
    main()
