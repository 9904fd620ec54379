"""Prompt sizes per role, before and after, measured in the same run; the catalogue as
signatures against the JSON Schemas it replaced.

`--before REV` (default: main before this round of #37) unpacks that commit's tree
(`git archive`) into a temporary folder and runs this same script there with `--json`, so
both columns are measured by one method, now, on one machine; `--before none` prints this
tree alone.

Printed:

- the planner system prompt for the six generic packs (calculator, shaping, text, extract,
  dates, containers) and for the whole stock catalogue (with the back-office pack), split into
  the rules (plan, control, label rules and the notation) and the catalogue, before / after;
- each role's messages for one request over the stock catalogue (planner, stage, replanner,
  repair of a wrong argument, repair of a payment to a document's IBAN, finalizer), before / after,
  with the share that is the deployment's static prompt (rules + catalogue,
  `pte._run.static_prompt`): it opens every planner, replanner and stage call byte for byte, so
  a provider's prompt cache serves it (the cacheable share; bench/bench_cookbook_input.py
  measures it over the cookbook's runs); a repair shown only its plan's tools shares the rules;
- the catalogue as signatures against the JSON Schemas it replaced (one JCS object per tool with
  its raw schemas, as `pte._run._prompts` wrote it before #25), in characters and approximate
  tokens;
- with specialists (docs/specialists.md): the coordinator's system prompt for a back-office
  deployment with three specialists next to the flat catalogue's, and the largest
  specialist's.

Tokens: tiktoken needs its BPE files from a non-registry host, so this counts the pieces of
cl100k's pre-tokenizer (words with their leading space, runs of 1-3 digits, punctuation
runs, whitespace); BPE only splits long pieces further, so it is a close lower bound.

    PYTHONPATH=. python bench/bench_prompt.py [--before REV|none]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from pte._catalogue import STOCK_PACKS, Registry, load_registry
from pte._core import canonical_json
from pte._plan import Specialist, coordinator_view, specialist_registry
from pte._policy import Policy
from pte._run import (
    catalogue_text,
    finalizer_messages,
    planner_messages,
    replanner_messages,
    stage_messages,
    static_prompt,
)
from pte._run._prompts import repair_messages

#: main just before this round of #37's prompt work (the sizes docs/benchmarks.md states "before";
#: the earlier rounds were measured against 5aa60c6).
BEFORE = "80c17a8"
REPO = Path(__file__).resolve().parents[1]

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


REQUEST = "Total the overdue invoices of customer C002 and remind them by letter."
PLAN = {
    "pte_plan": "1",
    "steps": [{"id": "inv", "tool": "list_overdue_invoices", "args": {"currency": "EUR"}}],
    "result": {"$ref": "inv/total"},
}
INVOICES = {"ids": ["INV-1001", "INV-1004"], "total": "1234.50", "total_currency": "EUR", "count": 2}


#: A payment to the IBAN a document claims: a flow the policy forbids (the fix: the IBAN on file).
PAY_FROM_DOCUMENT = {
    "pte_plan": "1",
    "steps": [
        {"id": "doc", "tool": "read_document", "args": {"document_id": "DOC-001"}},
        {
            "id": "pay",
            "tool": "send_payment",
            "args": {
                "iban": {"$ref": "doc/iban"},
                "amount": {"$ref": "doc/amount"},
                "currency": "EUR",
                "reference": "DOC-001",
            },
        },
    ],
    "result": {"$ref": "pay/payment_id"},
}


def _repair(planner: list[dict[str, str]], reason: str, registry: Registry, policy: Policy) -> Any:
    """A repair: of `PLAN` (a wrong argument) or `PAY_FROM_DOCUMENT` (a policy violation). This
    tree shows the plan's tools and those their descriptions name; trees before that take no
    catalogue and repeat the conversation, the whole catalogue in it."""
    plan = PAY_FROM_DOCUMENT if reason == "policy_violation" else PLAN
    rejection = {"reason": reason, "path": "$.steps[1].args.iban", "message": "not one of EUR, USD"}
    try:
        return repair_messages(
            planner, json.dumps(plan), rejection, literals="request", registry=registry, policy=policy
        )
    except TypeError:
        return repair_messages(planner, json.dumps(plan), rejection, literals="request")


def role_messages(registry: Registry, policy: Policy) -> dict[str, list[dict[str, str]]]:
    """One call of each role for `REQUEST`, with the same data in every tree measured."""
    planner = planner_messages(REQUEST, registry, policy)
    return {
        "planner": planner,
        "stage": stage_messages(
            REQUEST, registry, policy, 2, {"ids": ({"$ref": "inv/ids"}, INVOICES["ids"], "trusted")}, []
        ),
        "replanner": replanner_messages(
            REQUEST,
            registry,
            PLAN,
            [],
            "inv",
            "list_overdue_invoices",
            {"kind": "tool_error", "message": "timeout"},
            policy=policy,
        ),
        "repair": _repair(planner, "invalid_args", registry, policy),
        "repair, policy_violation": _repair(planner, "policy_violation", registry, policy),
        "finalizer": finalizer_messages(
            REQUEST, INVOICES["total"], [("inv", "list_overdue_invoices", INVOICES, "trusted")]
        ),
    }


def figures() -> dict[str, Any]:
    """Everything this script prints, for the tree it runs in (JSON for --before)."""
    generic = load_registry(GENERIC_PACKS)
    stock = load_registry(STOCK_PACKS)
    out: dict[str, Any] = {"prompts": {}, "roles": {}}
    for key, registry in (("generic", generic), ("stock", stock)):
        sizes = measure(registry)
        out["prompts"][key] = {
            "tools": len(registry),
            "prompt": sizes["prompt new"][0],
            "catalogue": sizes["catalogue new"][0],
            "prompt tokens": sizes["prompt new"][1],
            "json prompt": sizes["prompt old"][0],
            "json catalogue": sizes["catalogue old"][0],
            "json prompt tokens": sizes["prompt old"][1],
        }
    policy = Policy.from_registry(stock)
    static = static_prompt(stock, policy)
    out["static"] = len(static)
    rules = static.split("\n\nTools: ")[0]  # the rules: the static prompt up to the notation
    out["rules"] = len(rules)
    for role, messages in role_messages(stock, policy).items():
        head = messages[0]["content"]
        # A provider caches a call's longest prefix it has seen: the whole static prompt, else
        # (a repair shown its plan's tools) the rules, which open every planner call too.
        cached = len(static) if head.startswith(static) else len(rules) if head.startswith(rules) else 0
        out["roles"][role] = {"sent": sum(len(m["content"]) for m in messages), "cached": cached}
    out["specialists"] = coordinator_sizes(stock, BACKOFFICE_SPECIALISTS)
    return out


def figures_at(rev: str) -> dict[str, Any]:
    """`figures()` of commit `rev`: its tree unpacked, this script run there with --json."""
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "-C", str(REPO), "archive", rev], capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
        env = {**os.environ, "PYTHONPATH": tmp}
        done = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), "--json"],
            cwd=tmp,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        result: dict[str, Any] = json.loads(done.stdout)
        return result


def _row(label: str, before: int | None, after: int, extra: str = "") -> str:
    if before is None:
        return f"  {label:38} {after:10,d}{extra}"
    return f"  {label:38} {before:10,d} {after:10,d} {after / before:7.2f}{extra}"


def report(after: dict[str, Any], before: dict[str, Any] | None, rev: str) -> None:
    columns = f"{'after':>10}" if before is None else f"{'before':>10} {'after':>10} {'ratio':>7}"
    head = f"  {'':38} {columns}"
    print("planner system prompt, characters" + (f" (before: {rev})" if before else ""))
    print(head)
    for key, label in (("generic", "six generic packs"), ("stock", "whole stock catalogue")):
        a = after["prompts"][key]
        b = before["prompts"][key] if before else None
        print(_row(f"{label} ({a['tools']} tools)", b and b["prompt"], a["prompt"]))
        print(_row("  rules and notation", b and b["prompt"] - b["catalogue"], a["prompt"] - a["catalogue"]))
        print(_row("  catalogue", b and b["catalogue"], a["catalogue"]))
    static, rules = after["static"], after["rules"]
    print(
        f"\neach role's messages for one request, whole stock catalogue (static prefix {static:,d}, "
        f"of it the rules {rules:,d})"
    )
    print(head + "   cacheable share after (before)")
    for role, a in after["roles"].items():
        b = before["roles"].get(role) if before else None
        share = f"   {a['cached'] / a['sent']:4.0%}" + (f" ({b['cached'] / b['sent']:.0%})" if b else "")
        print(_row(role, b and b["sent"], a["sent"], share))
    print("\nsignatures against the JSON Schemas they replaced (this tree; ~tokens: cl100k pieces)")
    for key in ("generic", "stock"):
        a = after["prompts"][key]
        print(
            f"  {key:8} prompt {a['prompt']:8,d} vs {a['json prompt']:8,d} characters "
            f"({a['prompt'] / a['json prompt']:.2f}), "
            f"~tokens {a['prompt tokens']:,d} vs {a['json prompt tokens']:,d}; "
            f"catalogue {a['catalogue']:,d} vs {a['json catalogue']:,d}"
        )
    sizes = after["specialists"]
    owned = sum(len(s.catalogue) for s in BACKOFFICE_SPECIALISTS)
    tools = after["prompts"]["stock"]["tools"]
    print(
        f"\nwith {len(BACKOFFICE_SPECIALISTS)} specialists ({owned} of {tools} tools "
        f"theirs): planner system prompt, characters\n"
        f"  flat catalogue {sizes['flat']:10,d}\n"
        f"  coordinator    {sizes['coordinator']:10,d}   ratio {sizes['coordinator'] / sizes['flat']:.2f}\n"
        f"  largest specialist {sizes['specialist']:6,d}   ratio {sizes['specialist'] / sizes['flat']:.2f}"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", default=BEFORE, help="a commit to measure too, or 'none'")
    parser.add_argument("--json", action="store_true", help="print this tree's figures as JSON")
    args = parser.parse_args(argv)
    if args.json:
        print(json.dumps(figures()))
        return
    before = None if args.before == "none" else figures_at(args.before)
    report(figures(), before, args.before)


if __name__ == "__main__":
    main()
