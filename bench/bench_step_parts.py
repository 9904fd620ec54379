"""The executor's own work per step, part by part, in instructions (callgrind), before and after.

Each part of a step of `bench_executor.py`'s chain (a no-op tool whose argument is the
previous step's output) is called 1,000 times in a segment of its own, after a warm-up, in
one child process under callgrind (`callgrind_segments`): the parts `_Run._start` and
`_Run._complete` call for every step with the audit log off. A segment that calls nothing
is subtracted (the loop's own cost). ``--before REV`` runs the same child on an earlier
revision's code in the same run, so each part reads before/after side by side.

    python bench/bench_step_parts.py [--before REV]
"""

from __future__ import annotations

import argparse
import queue
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

CALLS = 1000


def parts() -> dict[str, Callable[[], Any]]:
    """The parts, each a call of what the executor calls once per step."""
    from bench_executor import REGISTRY, compiled

    from pte._execution._invoke import CallOutcome
    from pte._execution._owner import OwnerCalls
    from pte._plan import copy_json
    from pte.execution import StepResult

    plan = compiled("chain", 10)
    spec = REGISTRY["noop"]
    step = plan.step("s1")
    outputs = {"s0": 5}
    args = step.resolve_args(outputs)
    completions: queue.SimpleQueue[Any] = queue.SimpleQueue()

    class Run:  # what OwnerCalls holds of a run: a way to start a new owner (never needed here)
        def new_owner(self) -> None:
            raise AssertionError("no hand-over in this bench")

    run = Run()
    owner = OwnerCalls(completions, run.new_owner)

    def owner_call() -> None:  # the call on the run's owner thread, its outcome taken back
        owner.call(1, spec, args, hand_over=False)
        completions.get()

    return {
        "nothing (subtracted from the others)": lambda: None,
        "PlanStep.resolve_args": lambda: step.resolve_args(outputs),
        "copy_json (the tool's private copy)": lambda: copy_json(args),
        "ToolSpec.validate_args (jsonschema-rs)": lambda: spec.validate_args(args),
        "ToolSpec.to_kwargs (pydantic)": lambda: spec.to_kwargs(args),
        "ToolSpec.to_output": lambda: spec.to_output(5),
        "ToolSpec.invoke (to_kwargs, the tool, to_output)": lambda: spec.invoke(args),
        "OwnerCalls.call (invoke included) + queue get": owner_call,
        "ToolSpec.validate_output": lambda: spec.validate_output(5),
        "Plan.output_error": lambda: plan.output_error("s1", 5),
        "StepResult(...)": lambda: StepResult(
            step_id="s1", tool="noop", status="ok", args=args, output=5, duration_ms=0.1
        ),
        "CallOutcome(...)": lambda: CallOutcome(5, None),
        "time.perf_counter": time.perf_counter,
    }


def child() -> None:
    from callgrind_segments import mark

    calls = parts()
    for call in calls.values():  # warm-up: caches, specialisation, lazy imports
        for _ in range(50):
            call()
    for call in calls.values():
        mark()
        for _ in range(CALLS):
            call()
    mark()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--before", metavar="REV", help="also this git revision's code, in the same run")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child()
        return 0
    from callgrind_segments import segments, tree_at

    names = list(parts())
    with tempfile.TemporaryDirectory() as tmp:
        trees: dict[str, Path | None] = {"now": None}
        if args.before:
            trees = {f"before ({args.before})": tree_at(args.before, Path(tmp)), **trees}
        counts: dict[str, list[float]] = {}
        for label, tree in trees.items():
            env = {"PYTHONPATH": str(tree)} if tree is not None else None
            counts[label] = [c / CALLS for c in segments([__file__, "--child"], env)]
    print(f"instructions per call (callgrind, {CALLS} calls each, the empty loop subtracted)")
    print(f"  {'part':<52}" + "".join(f"{label:>22}" for label in counts))
    for k, name in enumerate(names[1:], start=1):
        row = "".join(f"{values[k] - values[0]:22,.0f}" for values in counts.values())
        print(f"  {name:<52}{row}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.exit(main())
