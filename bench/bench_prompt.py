"""Planner prompt size for the stock catalogue: the catalogue as signatures against the JSON
Schemas it replaced, measured in the same run.

The planner sees every allowed tool, so the catalogue is most of every planner, replan and
stage prompt (issue #25: a request was 50-86k characters, 38.5k of them the six generic
packs). `pte._run._prompts.catalogue_text` writes each tool as a signature (shared types once,
type variables named once, labels on one line); the old rendering, one JCS object per tool
with its raw input and output schemas (as `pte._run._prompts` wrote it before), is kept here only,
to measure against.

Printed for the six generic packs (calculator, shaping, text, extract, dates, containers),
for the 47 of their tools that issue #25 counted, and for the whole stock catalogue (with
the back-office pack): characters and approximate tokens of the catalogue section, and of
the whole planner system prompt (rules, notation, catalogue), new / old.

Then the cacheable share: the static prompt (rules + catalogue, `pte._run.static_prompt`) opens
every planner, replanner and stage call of a deployment byte for byte; printed as its share of
each role's messages for one request (bench/bench_cookbook_input.py measures it over the
cookbook's runs: 96%).

Tokens: tiktoken needs its BPE files from a non-registry host, so this counts the pieces of
cl100k's pre-tokenizer (words with their leading space, runs of 1-3 digits, punctuation
runs, whitespace); BPE only splits long pieces further, so it is a close lower bound.

With specialists (docs/specialists.md) a coordinating planner is shown their descriptions
instead of their tools: the last rows print the coordinator's system prompt for a back-office
deployment with three specialists next to the flat catalogue's prompt, and their ratio, and
the largest specialist's prompt (each specialist is shown only its own catalogue).

    PYTHONPATH=. python bench/bench_prompt.py
"""

from __future__ import annotations

import re
from typing import Any

from pte._catalogue import STOCK_PACKS, Registry, load_registry
from pte._core import canonical_json
from pte._plan import Specialist, coordinator_view, specialist_registry
from pte._policy import Policy
from pte._run import catalogue_text, planner_messages, replanner_messages, stage_messages, static_prompt

#: cl100k's pre-tokenizer pattern with the Unicode classes written for Python's `re`.
_PIECES = re.compile(
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\w]?[^\W\d_]+|\d{1,3}| ?[^\s\w]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
GENERIC_PACKS = ("calculator", "shaping", "text", "extract", "dates", "containers")
#: The generic tools issue #25 measured (38.5k characters as JSON); later ones are left out.
ISSUE_25_TOOLS = frozenset(
    {
        "calculator",
        "percentage",
        "to_number",
        "to_integer",
        "pick",
        "pluck",
        "pluck_numbers",
        "pluck_text",
        "filter_records",
        "sort_records",
        "take",
        "sum_field",
        "group_sum",
        "format_text",
        "count",
        "first",
        "text_match",
        "regex_extract",
        "extract_into",
        "split_text",
        "parse_fields",
        "section",
        "transform_text",
        "replace_text",
        "slice_text",
        "join_text",
        "extract",
        "extract_amounts",
        "parse_datetime",
        "extract_dates",
        "format_datetime",
        "add_duration",
        "time_between",
        "day_bounds",
        "convert_timezone",
        "entries",
        "get_key",
        "keys",
        "has_key",
        "filter_values",
        "sort_values",
        "unique",
        "difference",
        "intersection",
        "count_by",
        "rank",
        "extreme_by",
    }
)


def old_catalogue(registry: Registry, policy: Policy) -> str:
    """The JSON rendering the signatures replaced: each tool's schemas as JCS, one per line."""
    entries: list[dict[str, Any]] = []
    for spec in registry:
        entry = spec.catalogue_entry()
        entry.pop("output_provenance", None)
        entry.pop("guarded_parameters", None)
        output = policy.output_label(spec.name)
        if output != "trusted":
            entry["output_provenance"] = output
        sinks = policy.sinks(spec.name)
        if sinks:
            entry["guarded_parameters"] = {param: sorted(allowed) for param, allowed in sinks.items()}
        entries.append(entry)
    return "[\n" + ",\n".join(canonical_json(e) for e in entries) + "\n]"


def measure(registry: Registry) -> dict[str, tuple[int, int]]:
    """(characters, pieces) of the catalogue and of the planner system prompt, new and old."""
    policy = Policy.from_registry(registry)
    new_catalogue = catalogue_text(registry, policy)
    old = old_catalogue(registry, policy)
    system = planner_messages("x", registry, policy)[0]["content"]
    old_system = system.replace(new_catalogue, old)
    assert old_system != system
    return {
        name: (len(text), len(_PIECES.findall(text)))
        for name, text in (
            ("catalogue new", new_catalogue),
            ("catalogue old", old),
            ("prompt new", system),
            ("prompt old", old_system),
        )
    }


#: A back-office deployment's specialists over the whole stock catalogue (docs/specialists.md).
BACKOFFICE_SPECIALISTS = (
    Specialist(
        name="collections",
        description="Customer receivables: open and overdue invoices, balances, recording customer "
        "payments, payment reminders.",
        catalogue=(
            "list_overdue_invoices",
            "get_invoice",
            "customer_balance",
            "record_payment",
            "queue_reminder",
            "send_reminders",
        ),
    ),
    Specialist(
        name="payments",
        description="Suppliers and outgoing payments; exchange rates.",
        catalogue=("list_suppliers", "get_supplier", "fx_rate", "send_payment"),
    ),
    Specialist(
        name="documents",
        description="Reads the inbox and documents (third-party text) and extracts fields, amounts "
        "and dates from them.",
        catalogue=(
            "read_inbox",
            "read_document",
            "extract",
            "extract_amounts",
            "extract_dates",
            *(t for t in load_registry(["text"]).names),
        ),
    ),
)


def coordinator_sizes(registry: Registry, specialists: tuple[Specialist, ...]) -> dict[str, int]:
    """Characters of the flat planner prompt, the coordinator's and the largest specialist's."""
    policy = Policy.from_registry(registry)
    flat = planner_messages("x", registry, policy)[0]["content"]
    coordinator = planner_messages("x", coordinator_view(registry, specialists), policy)[0]["content"]
    largest = max(
        len(planner_messages("x", specialist_registry(s, registry), policy)[0]["content"])
        for s in specialists
    )
    return {"flat": len(flat), "coordinator": len(coordinator), "specialist": largest}


def main() -> None:
    generic = load_registry(GENERIC_PACKS)
    rows = [
        (
            f"{len(ISSUE_25_TOOLS)} generic tools of #25",
            Registry([s for s in generic if s.name in ISSUE_25_TOOLS]),
        ),
        (f"six generic packs ({len(generic)} tools)", generic),
        ("whole stock catalogue", load_registry(STOCK_PACKS)),
    ]
    print(
        f"{'':32} {'tools':>5} {'':10} {'chars new':>10} {'old':>8} {'ratio':>6} {'~tok new':>9} {'old':>7}"
    )
    for label, registry in rows:
        sizes = measure(registry)
        for part in ("catalogue", "prompt"):
            new_chars, new_tok = sizes[f"{part} new"]
            old_chars, old_tok = sizes[f"{part} old"]
            print(
                f"{label:32} {len(registry):5d} {part:10} {new_chars:10,d} {old_chars:8,d} "
                f"{new_chars / old_chars:6.2f} {new_tok:9,d} {old_tok:7,d}"
            )
            label = ""
    stock = load_registry(STOCK_PACKS)
    policy = Policy.from_registry(stock)
    static = static_prompt(stock, policy)
    request = "Total the overdue invoices of customer C002 and remind them by letter."
    calls = {
        "planner": planner_messages(request, stock, policy),
        "stage": stage_messages(
            request, stock, policy, 2, {"ids": ({"$ref": "inv/ids"}, ["INV-1"], "trusted")}, []
        ),
        "replanner": replanner_messages(
            request,
            stock,
            {"pte_plan": "1", "steps": []},
            [],
            "inv",
            "list_overdue_invoices",
            {"kind": "tool_error", "message": "timeout"},
            policy=policy,
        ),
    }
    print("\nstatic prompt (cacheable prefix), whole stock catalogue:", f"{len(static):,d} characters")
    for role, messages in calls.items():
        assert messages[0]["content"].startswith(static)
        total = sum(len(m["content"]) for m in messages)
        print(f"  {role:10} {total:8,d} characters sent, {len(static) / total:.0%} of them the cached prefix")
    sizes = coordinator_sizes(stock, BACKOFFICE_SPECIALISTS)
    owned = sum(len(s.catalogue) for s in BACKOFFICE_SPECIALISTS)
    print(
        f"\nwith {len(BACKOFFICE_SPECIALISTS)} specialists ({owned} of {len(stock)} tools theirs): planner "
        f"system prompt, characters\n"
        f"  flat catalogue {sizes['flat']:10,d}\n"
        f"  coordinator    {sizes['coordinator']:10,d}   ratio {sizes['coordinator'] / sizes['flat']:.2f}\n"
        f"  largest specialist {sizes['specialist']:6,d}   ratio {sizes['specialist'] / sizes['flat']:.2f}"
    )


if __name__ == "__main__":
    main()
