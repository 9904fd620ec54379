"""Property: the compile check enforces exactly the one label rule (docs/labels.md).

Hypothesis draws a first plan and a later-stage plan (`pte.testing.control_plans`: for_each,
when, require, continue; `when` defaults added here) over the world catalogue, whose tools have
whole-output labels. The later stage is written by a compromised planner: every literal it
writes (arguments, conditions, defaults) is the attacker's. An oracle written here from the
rule alone, at whole-step granularity (exact for this catalogue), computes for every call the
labels of what it receives and of what decides whether it runs, on the execution order:
conditions, defaults, for_each lists, every require and every failure before it (less what
the call's own arguments carry), and the first stage's requires and failures. The check must
accept a plan exactly when no guarded sink would receive a value, or run under a decision,
that its parameter does not accept.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import pte
from pte import Plan, PlanRejected, Policy, ReasonCode
from pte.plan import Reference
from pte.policy import Decided
from pte.testing import control_plans
from tests.packs import world

REGISTRY = pte.load_registry([str(Path(world.__file__))])
POLICY = Policy.from_registry(REGISTRY)
SETTINGS = settings(
    max_examples=max(30, settings().max_examples // 3),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    deadline=None,
)


def _refs_and_literals(value: Any, literal: str, labels: Mapping[str, frozenset[str]]) -> set[str]:
    """The labels of a value: each reference its step's labels, each literal `literal`."""
    out: set[str] = set()
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict) and set(item) == {"$ref"}:
            out |= labels[Reference.parse(item["$ref"]).step]
        elif isinstance(item, dict) and item:
            out.add(literal)  # object keys are literals too
            stack.extend(item.values())
        elif isinstance(item, list) and item:
            stack.extend(item)
        else:
            out.add(literal)
    return out


def _condition(cond: Any, literal: str, labels: Mapping[str, frozenset[str]]) -> set[str]:
    ((op, arg),) = cond.items()
    if op in ("and", "or"):
        return set().union(*(_condition(c, literal, labels) for c in arg))
    if op == "not":
        return _condition(arg, literal, labels)
    if op in ("empty", "nonempty"):
        return set(labels[Reference.parse(arg["$ref"]).step])
    return set().union(*(_refs_and_literals(o, literal, labels) for o in arg))


@dataclass
class Verdict:
    allowed: bool  # the rule allows every call of the plan
    handed: Decided  # what decides whether a later stage runs
    decisions: dict[str, frozenset[str]]  # per call: what decides whether it runs
    labels: dict[str, frozenset[str]]  # per step: its output's labels


def oracle(plan: Plan, literal: str, decided: Decided) -> Verdict:
    """The rule, applied to `plan` at whole-step granularity."""
    labels: dict[str, frozenset[str]] = {}
    for sid in plan.order:
        step = plan.step(sid)
        if step.is_require:
            continue
        output = POLICY.output_label(step.tool)
        out = _refs_and_literals(step.args, literal, labels) or {literal} if output == "derived" else {output}
        if step.for_each is not None:
            out |= labels[step.for_each.step]
        if step.condition is not None:
            out |= _condition(step.condition, literal, labels)
            if step.default_json is not None:
                out.add(literal)
        labels[sid] = frozenset(out)
    conditions, failures = set(decided.conditions), set(decided.failures)
    ok = True
    decisions: dict[str, frozenset[str]] = {}
    for sid in plan.order:
        step = plan.step(sid)
        if step.is_require:
            conditions |= _condition(step.condition, literal, labels)
            continue
        given = set().union(*(_refs_and_literals(v, literal, labels) for v in step.args.values()))
        own = set()
        if step.condition is not None:
            own |= _condition(step.condition, literal, labels)
        if step.for_each is not None:
            own |= labels[step.for_each.step]
        implicit = own | conditions | (failures - given)
        decisions[sid] = frozenset(implicit)
        for param, allowed in POLICY.sinks(step.tool).items():
            value = _refs_and_literals(step.args[param], literal, labels) if param in step.args else set()
            if not (value | implicit) <= allowed:
                ok = False
        failures |= given | own
    return Verdict(ok, Decided(frozenset(conditions), frozenset(failures)), decisions, labels)


def _with_defaults(draw: st.DrawFn, doc: dict[str, Any]) -> dict[str, Any]:
    """A `when` default on every conditional find_user step: a literal of the plan."""
    for step in doc["steps"]:
        if "when" in step and step.get("tool") == "find_user" and draw(st.booleans()):
            step["default"] = {"name": draw(st.text(max_size=4)), "email": draw(st.text(max_size=24))}
    return doc


def _fresh(doc: dict[str, Any], stem: str) -> str:
    ids = {s["id"] for s in doc["steps"]}
    return next(f"{stem}{i}" for i in range(100) if f"{stem}{i}" not in ids)


def _require_on_a_page(draw: st.DrawFn, doc: dict[str, Any], at: int) -> None:
    page, need = _fresh(doc, "page"), _fresh(doc, "need")
    url = draw(st.sampled_from(sorted(world.PAGES)))
    cond = {draw(st.sampled_from(["empty", "nonempty"])): {"$ref": f"{page}/tasks"}}
    doc["steps"][at:at] = [
        {"id": page, "tool": "read_page", "args": {"url": url}},
        {"id": need, "require": cond, "message": "m"},
    ]


def _attacks(draw: st.DrawFn, doc: dict[str, Any]) -> dict[str, Any]:
    """What an attacker's plan adds: a require on a page's tasks, a trusted lookup skipped by a
    condition on trusted data whose default feeds a guarded sink, a write moved before a
    require in text but made to wait for it."""
    steps = doc["steps"]
    if draw(st.booleans()):
        _require_on_a_page(draw, doc, draw(st.integers(0, len(steps))))
    if draw(st.booleans()):
        src, me, dm = _fresh(doc, "src"), _fresh(doc, "me"), _fresh(doc, "dm")
        never = {"ne": [{"$ref": f"{src}/name"}, {"$ref": f"{src}/name"}]}
        email = draw(st.sampled_from(["eve@evil.example", "bob@corp.example"]))
        steps += [
            {"id": src, "tool": "find_user", "args": {"name": "bob"}},
            {
                "id": me,
                "tool": "find_user",
                "args": {"name": "bob"},
                "when": never,
                "default": {"name": "x", "email": email},
            },
            {"id": dm, "tool": "send_dm", "args": {"recipient": {"$ref": f"{me}/email"}, "body": "hi"}},
        ]
    requires = [s["id"] for s in steps if "require" in s]
    writes = [i for i, s in enumerate(steps) if s.get("tool") in ("send_dm", "send_money", "send_email")]
    if requires and writes and draw(st.booleans()):
        moved = steps.pop(draw(st.sampled_from(writes)))
        moved["after"] = sorted({*moved.get("after", ()), *requires})
        steps.insert(0, moved)
    return doc


def _hand_off_whole_steps(draw: st.DrawFn, doc: dict[str, Any]) -> dict[str, Any]:
    """Stage 1 ends with `continue` handing a whole step's output on (it always exists)."""
    plain = [s["id"] for s in doc["steps"] if "tool" in s and "when" not in s]
    doc.pop("result", None)
    doc["continue"] = {"value": {"$ref": draw(st.sampled_from(plain))} if plain else "nothing"}
    return doc


@st.composite
def two_stages(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any], str]:
    first = _with_defaults(draw, draw(control_plans(REGISTRY)))
    if draw(st.booleans()):  # an honest first plan that checks a page last: it decides stage 2
        _require_on_a_page(draw, first, len(first["steps"]))
    first = _hand_off_whole_steps(draw, first)
    second = _attacks(draw, _with_defaults(draw, draw(control_plans(REGISTRY))))
    second.pop("continue", None)
    second.setdefault("result", None)
    # A compromised stage planner: literals count as untrusted (shown untrusted text) or
    # trusted (shown handles only: pte._run._exposure); either way the attacker may choose them.
    return first, second, draw(st.sampled_from(["untrusted", "trusted"]))


def _compile(doc: dict[str, Any], **check: Any) -> tuple[bool, Any]:
    """(whether the check accepted the plan, the check: its labels and decisions either way)."""
    checker = POLICY.check(**check)
    try:
        pte.compile_plan(json.dumps(doc), REGISTRY, checks=[checker])
    except PlanRejected as error:
        if error.reason is not ReasonCode.POLICY_VIOLATION:
            assume(False)  # a default that does not fit, a result under a condition: not our concern
        return False, checker
    return True, checker


SEEN: dict[str, int] = {"accepted": 0, "refused": 0, "stage_decided": 0}


@SETTINGS
@given(two_stages())
def test_the_check_accepts_exactly_what_the_label_rule_allows(case: tuple[Any, ...]) -> None:
    first_doc, second_doc, literal = case
    accepted, check = _compile(first_doc)
    first = oracle(pte.compile_plan(json.dumps(first_doc), REGISTRY), "request", Decided())
    assert (check.decisions, check.labels, accepted) == (first.decisions, first.labels, first.allowed)
    if not accepted:
        return
    assert check.completion == first.handed  # what decides that stage 2 runs at all
    accepted, check = _compile(second_doc, literal=literal, decided=check.completion)
    second = oracle(pte.compile_plan(json.dumps(second_doc), REGISTRY), literal, first.handed)
    # Every call's decision labels, every step's labels (the whole-output view the oracle
    # computes is exact for this catalogue), and the verdict.
    assert check.decisions == second.decisions, (second_doc, literal)
    assert check.labels == second.labels, (second_doc, literal)
    assert accepted == second.allowed, (first_doc, second_doc, literal)
    SEEN["accepted" if accepted else "refused"] += 1
    if first.handed.conditions - {"request"} or first.handed.failures - {"request"}:
        SEEN["stage_decided"] += 1


@pytest.fixture(scope="module", autouse=True)
def _not_vacuous() -> Any:
    yield
    # Both outcomes happened, and stage 1 decided stage 2 with tool data in some cases.
    if sum(SEEN.values()):
        assert SEEN["accepted"] and SEEN["refused"] and SEEN["stage_decided"], SEEN
