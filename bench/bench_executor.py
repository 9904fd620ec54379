"""Executor overhead per step, next to the LangGraph plan-and-execute loop measured in the same run.

PTE: `Executor.run` over a compiled 1,000-step plan of a no-op tool, with the audit log on
(a temp file, durability "none", so the figure is the executor's cost and not the disk's)
and off. Each step still resolves its references, validates its arguments and output
against the tool's schemas, and runs the tool under its timeout (a SIGALRM timer, since the
bench runs on the main thread; see pte/executor.py). With the audit log on, each step also
writes two hash-chained, redacted, canonical records (step_started before the call,
step_finished after), each checked against another writer and handed to the OS at once.

Baseline: the common LangGraph plan-and-execute design (LangGraph's plan-and-execute
tutorial): a `StateGraph` whose `execute` node runs ONE step of the plan per invocation,
appends ``(step, result)`` to ``past_steps`` (an ``operator.add`` reducer) and loops on a
conditional edge until the plan is done. It calls the same no-op function directly, with
no validation, no timeout and no log, so the comparison is conservative for PTE.

Shapes: ``chain`` (each step takes the previous step's output through a reference) and
``independent`` (literal arguments only). The three are timed in turn within each
repetition; reported are the median and best µs per step and the ratio PTE/LangGraph of
the medians (target: ≤ 0.2).

    python bench/bench_executor.py [--steps 1000] [--repeat 7] [--shape chain|independent|both]
"""

from __future__ import annotations

import argparse
import json
import operator
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

from typing_extensions import TypedDict

from pte.audit import AuditLog
from pte.compiler import Limits, compile_plan
from pte.executor import Executor
from pte.plan import Plan
from pte.tools import Registry, tool

TARGET_RATIO = 0.2


@tool
def noop(x: int) -> int:
    """Does nothing: returns its input."""
    return x


REGISTRY = Registry([noop])


def plan_text(steps: int, shape: str) -> str:
    """A plan of `steps` no-op steps, chained through references or independent."""
    doc_steps: list[dict[str, Any]] = []
    for i in range(steps):
        arg: Any = {"$ref": f"s{i - 1}"} if shape == "chain" and i else i
        doc_steps.append({"id": f"s{i}", "tool": "noop", "args": {"x": arg}})
    return json.dumps({"pte_plan": "1", "steps": doc_steps, "result": {"$ref": f"s{steps - 1}"}})


def pte_runner(plan: Plan, audit_dir: Path | None) -> Callable[[], float]:
    """A function that runs the whole plan once and returns the seconds it took."""
    executor = Executor(REGISTRY)
    executor.run(plan)  # warm-up
    runs = iter(range(1_000_000))

    def run() -> float:
        log = None
        if audit_dir is not None:  # a fresh log per run, opened outside the timed region
            log = AuditLog(audit_dir / f"audit-{next(runs)}.jsonl", durability="none")
        started = time.perf_counter()
        result = executor.run(plan, log)
        elapsed = time.perf_counter() - started
        if log is not None:
            log.close()
        if not result.ok:
            raise SystemExit(f"PTE run failed: {result.failure}")
        return elapsed

    return run


class PlanExecute(TypedDict):
    """The tutorial's graph state, plus the index of the next step to run."""

    input: str
    plan: list[dict[str, Any]]
    past_steps: Annotated[list[tuple[str, Any]], operator.add]
    step: int
    response: Any


def build_langgraph(plan: Plan) -> Callable[[], dict[str, Any]]:
    """The plan-and-execute loop of LangGraph's tutorial, with one plan step per `execute` call."""
    from langgraph.graph import END, START, StateGraph

    steps = [s.to_dict() for s in plan.steps_in_order()]

    def execute(state: PlanExecute) -> dict[str, Any]:
        task = state["plan"][state["step"]]
        x = task["args"]["x"]
        if isinstance(x, dict):  # a reference: the tutorial's executor reads earlier results from state
            x = state["past_steps"][-1][1]
        result = noop(x=x)
        return {"past_steps": [(task["id"], result)], "step": state["step"] + 1, "response": result}

    def should_continue(state: PlanExecute) -> str:
        return END if state["step"] >= len(state["plan"]) else "execute"

    graph = StateGraph(PlanExecute)
    graph.add_node("execute", execute)
    graph.add_edge(START, "execute")
    graph.add_conditional_edges("execute", should_continue, ["execute", END])
    app = graph.compile()
    # One super-step per plan step; LangGraph's default limit (25) would stop the loop early.
    config: Any = {"recursion_limit": len(steps) + 10}
    initial: PlanExecute = {"input": "bench", "plan": steps, "past_steps": [], "step": 0, "response": None}

    def run() -> dict[str, Any]:
        out: dict[str, Any] = app.invoke(initial, config)
        return out

    return run


def langgraph_runner(plan: Plan) -> Callable[[], float]:
    """A function that runs the LangGraph loop over the plan once and returns the seconds it took."""
    invoke = build_langgraph(plan)
    invoke()  # warm-up

    def run() -> float:
        started = time.perf_counter()
        final = invoke()
        elapsed = time.perf_counter() - started
        if len(final["past_steps"]) != len(plan):
            raise SystemExit(f"LangGraph ran {len(final['past_steps'])} of {len(plan)} steps")
        return elapsed

    return run


def bench_shape(shape: str, steps: int, repeat: int) -> bool:
    text = plan_text(steps, shape)
    started = time.perf_counter()
    plan = compile_plan(
        text, REGISTRY, Limits(max_steps=max(steps, 1000), max_bytes=max(len(text), 1_000_000))
    )
    compile_us = (time.perf_counter() - started) / steps * 1e6
    with tempfile.TemporaryDirectory() as tmp:
        runners = {
            "PTE executor, audit on (file, durability=none)": pte_runner(plan, Path(tmp)),
            "PTE executor, audit off": pte_runner(plan, None),
            "LangGraph plan-and-execute loop (baseline)": langgraph_runner(plan),
        }
        # Interleaved, so that load from other processes (or CPU frequency drift) hits all
        # three alike instead of whichever happened to run during it.
        times: dict[str, list[float]] = {name: [] for name in runners}
        for _ in range(repeat):
            for name, run in runners.items():
                times[name].append(run())
    median = {name: statistics.median(t) / steps * 1e6 for name, t in times.items()}
    best = {name: min(t) / steps * 1e6 for name, t in times.items()}
    baseline_name = "LangGraph plan-and-execute loop (baseline)"
    print(f"\n{steps}-step plan, shape={shape}, {repeat} interleaved runs, µs per step")
    print(f"  {'':<50} {'median':>9} {'best':>9}   PTE/LangGraph (median)")
    for name in runners:
        ratio = median[name] / median[baseline_name]
        print(f"  {name:<50} {median[name]:9.1f} {best[name]:9.1f}   {ratio:5.3f}")
    print(f"  {'PTE compile (once per plan, not included above)':<50} {compile_us:9.1f}")
    ratio_on = median["PTE executor, audit on (file, durability=none)"] / median[baseline_name]
    ok = ratio_on <= TARGET_RATIO
    print(
        f"  PTE (audit on) / LangGraph = {ratio_on:.3f}; target ≤ {TARGET_RATIO}: {'met' if ok else 'MISSED'}"
    )
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--shape", choices=["chain", "independent", "both"], default="both")
    args = parser.parse_args(argv)
    try:
        import langgraph  # noqa: F401
    except ImportError:
        print("langgraph is not installed, so there is no baseline to compare with.")
        print("Install the bench extra and run again:  pip install -e .[bench]")
        return 0
    from importlib.metadata import version

    print(
        f"Python {platform.python_version()} on {platform.machine()}, langgraph {version('langgraph')}; "
        "no-op tool, timings exclude compile"
    )
    shapes = ["chain", "independent"] if args.shape == "both" else [args.shape]
    for shape in shapes:
        bench_shape(shape, args.steps, args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
