"""How `compile_plan` scales with plan size: median compile time for 10 … 10,000 steps.

The plans are realistic: a mix of the example catalogue's tools (pte.testing), where most
steps take some arguments from earlier steps through references (pointers into lists,
nested models and dicts) and others are plain literals, with a few `after` edges. The
per-step cost and its ratio to the 10-step plan's per-step cost show whether growth is
linear (a ratio near 1, or below as fixed costs amortise).

    PYTHONPATH=. python bench/bench_compile.py [--sizes 10,100,1000,10000] [--repeat 7]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

from pte import compile_plan
from pte.plan import Limits
from pte.testing._catalogue import example_registry


def _ref(step_id: str, pointer: str = "") -> dict[str, str]:
    return {"$ref": step_id + pointer}


def build_plan(size: int, seed: int = 0) -> dict[str, Any]:
    """A plan of `size` steps over the example catalogue, wired to earlier steps at random."""
    rng = random.Random(seed)
    made: dict[str, list[str]] = {}  # tool -> ids of earlier steps that call it
    steps: list[dict[str, Any]] = []

    def earlier(tool: str) -> str | None:
        ids = made.get(tool)
        return rng.choice(ids) if ids else None

    def invoices(i: int) -> dict[str, Any]:
        return {"days": 1 + i % 365, "currency": rng.choice(["EUR", "USD", None]), "limit": 50}

    def customer(i: int) -> dict[str, Any]:
        return {"customer_id": f"C{i % 1000:03d}"}

    def total(i: int) -> dict[str, Any]:
        inv = earlier("list_overdue_invoices")
        amounts: Any = _ref(inv, "/amounts") if inv else ["1.00", "2.50"]
        return {"expression": "sum(amounts) * rate", "variables": {"amounts": amounts, "rate": "1.19"}}

    def convert(i: int) -> dict[str, Any]:
        calc, inv = earlier("calculator"), earlier("list_overdue_invoices")
        amount: Any = _ref(calc, "/value") if calc else (_ref(inv, "/invoices/0/amount") if inv else "10.00")
        return {"amount": amount, "from_currency": "EUR", "to_currency": rng.choice(["USD", "GBP"])}

    def risk(i: int) -> dict[str, Any]:
        cust, inv = earlier("lookup_customer"), earlier("list_overdue_invoices")
        return {
            "customer": _ref(cust) if cust else _literal_customer(),
            "overdue_days": _ref(inv, "/invoices/0/days_overdue") if inv else 30,
            "threshold": 0.7,
        }

    def remind(i: int) -> dict[str, Any]:
        inv, cust = earlier("list_overdue_invoices"), earlier("lookup_customer")
        args: dict[str, Any] = {"invoice_ids": _ref(inv, "/ids") if inv else ["INV-0001"], "channel": "email"}
        if cust:
            args["note"] = _ref(cust, "/email")
        return args

    def journal(i: int) -> dict[str, Any]:
        conv = earlier("convert_currency")
        debit: Any = _ref(conv, "/amount") if conv else "5.00"
        lines = [{"account": 1200, "debit": debit}, {"account": 4000, "credit": debit}]
        return {"lines": lines, "memo": f"batch {i}", "posted_on": "2024-06-30"}

    def total_by_customer(i: int) -> dict[str, Any]:
        inv = earlier("list_overdue_invoices")
        amount: Any = _ref(inv, "/by_customer/C001") if inv else 1
        return {"amount": amount, "from_currency": "EUR", "to_currency": "GBP", "on": "2024-06-30"}

    mix: list[tuple[str, Callable[[int], dict[str, Any]]]] = [
        ("list_overdue_invoices", invoices),
        ("lookup_customer", customer),
        ("calculator", total),
        ("convert_currency", convert),
        ("score_risk", risk),
        ("send_reminder", remind),
        ("post_journal_entry", journal),
        ("convert_currency", total_by_customer),
    ]
    for i in range(size):
        tool, make = mix[i % len(mix)] if i < len(mix) else rng.choice(mix)
        step: dict[str, Any] = {"id": f"s{i}", "tool": tool, "args": make(i)}
        if tool in ("send_reminder", "post_journal_entry") and steps and rng.random() < 0.5:
            step["after"] = [rng.choice(steps)["id"]]  # e.g. write only after a check ran
        steps.append(step)
        made.setdefault(tool, []).append(step["id"])
    result = _ref(made["calculator"][-1], "/value") if "calculator" in made else _ref("s0")
    return {"pte_plan": "1", "steps": steps, "result": result}


def _literal_customer() -> dict[str, Any]:
    address = {"street": "1 Main St", "city": "Springfield", "postcode": "12345", "country": "US"}
    return {"id": "C002", "name": "Globex", "address": address}


def measure(size: int, repeat: int, seed: int) -> tuple[float, int, int]:
    """(median seconds, text bytes, references) for compiling a plan of `size` steps."""
    registry = example_registry()
    text = json.dumps(build_plan(size, seed))
    limits = Limits(max_steps=max(size, 1), max_bytes=len(text.encode()) + 1, max_values=len(text))
    plan = compile_plan(text, registry, limits)  # warm-up, and proof that the plan is valid
    references = sum(len(s.references) for s in plan.steps)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        compile_plan(text, registry, limits)
        times.append(time.perf_counter() - start)
    return statistics.median(times), len(text.encode()), references


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,100,1000,10000", help="comma-separated step counts")
    parser.add_argument("--repeat", type=int, default=7, help="runs per size (the median is reported)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]

    print(f"compile_plan over the example catalogue, median of {args.repeat} runs")
    print(f"{'steps':>7} {'bytes':>10} {'refs':>7} {'median ms':>10} {'µs/step':>9} {'x 10-step':>10}")
    base: float | None = None
    for size in sizes:
        seconds, size_bytes, refs = measure(size, args.repeat, args.seed)
        per_step = seconds / size * 1e6
        base = per_step if base is None else base
        ratio = per_step / base
        print(f"{size:>7} {size_bytes:>10,} {refs:>7} {seconds * 1e3:>10.2f} {per_step:>9.1f} {ratio:>10.2f}")


if __name__ == "__main__":
    main()
