"""The planner is told the label rules only where a plan can break one (#37).

`label_rules` leaves the "Labels" section out when no tool a plan may run has a sink that refuses
a label (a parameter's, or the call-level one: guarded-mode writes, egress reads, ``call``).
Safety: for every policy whose prompt leaves it out, the label check rejects no plan, even in
the worst case (literals untrusted, the writer shown untrusted text, every earlier decision
untrusted). Conversely every policy with a refusing sink gets the rules, the endorsable bullet
exactly when a write's sink is endorsable, and the extraction bullet exactly when some output
is untrusted.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pte
from pte import PlanRejected, Policy

# private: which label rules the prompt shows, and why, is the prompts' white-box
from pte._run import label_reach, prompts
from pte.catalogue import Registry
from pte.policy import Decided
from pte.testing import control_plans, invalid_plans
from tests.packs import world

REGISTRY = pte.load_registry([str(Path(world.__file__)), "shaping"])
LABELS = ("request", "trusted", "untrusted")
SETTINGS = settings(
    max_examples=60,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
    deadline=None,
)


def _params(registry: Registry, tool: str) -> list[str]:
    spec = registry[tool]
    return [p for p in spec.input_schema.get("properties") or {} if p != spec.idempotency_key]


@st.composite
def policy_documents(draw: st.DrawFn, among: tuple[str, ...] = ()) -> dict[str, Any]:
    """A policy file over REGISTRY: half of them open every sink (open mode, every declared sink
    accepting every label), so that the section is left out often, some with one refusing sink
    (a call-level one, an egress read, a parameter's) on a tool `among` those given; untrusted
    outputs either way."""
    opened = draw(st.booleans())
    labels = st.lists(st.sampled_from(LABELS), unique=True).map(sorted)
    hole = draw(st.sampled_from([None, "call", "egress", "sink"])) if opened else None
    holed = draw(st.sampled_from(among or REGISTRY.names))
    tools: dict[str, Any] = {}
    for spec in REGISTRY:
        entry: dict[str, Any] = {}
        if spec.provenance != "derived" and draw(st.integers(0, 3)) == 0:
            entry["output"] = draw(st.sampled_from(["trusted", "untrusted"]))
        if opened:
            if spec.sinks:
                entry["sinks"] = {p: list(LABELS) for p in spec.sinks}
            if draw(st.booleans()):
                entry["call"] = list(LABELS)
            if spec.name == holed and hole == "call":
                entry["call"] = ["request", "trusted"]
            elif spec.name == holed and hole == "egress":
                entry["egress"] = True
            elif spec.name == holed and hole == "sink" and _params(REGISTRY, spec.name):
                entry.setdefault("sinks", {})[_params(REGISTRY, spec.name)[0]] = ["request"]
        else:
            params = _params(REGISTRY, spec.name)
            chosen = draw(st.lists(st.sampled_from(params), unique=True, max_size=2)) if params else []
            if chosen:
                entry["sinks"] = {p: draw(labels) for p in chosen}
            if draw(st.integers(0, 5)) == 0:
                entry["egress"] = True
            if draw(st.integers(0, 5)) == 0:
                entry["call"] = draw(labels)
            if spec.effect == "write" and draw(st.integers(0, 3)) == 0:
                entry["on_violation"] = draw(st.sampled_from(["endorse", {p: "endorse" for p in chosen}]))
        if entry:
            tools[spec.name] = entry
    default = "open" if opened else draw(st.sampled_from(["open", "guarded"]))
    return {"pte_policy": "1", "default": default, "tools": tools}


def _worst_check(policy: Policy) -> Any:
    """The check in the worst case it can face: every literal the attacker's, the plan's writer
    shown untrusted text, every earlier decision untrusted."""
    everything = frozenset(LABELS)
    return policy.check(literal="untrusted", exposure=["untrusted"], decided=Decided(everything, everything))


def _refusing(policy: Policy) -> bool:
    everything = frozenset(LABELS)
    for spec in REGISTRY:
        entry = policy.effective(spec.name, REGISTRY)
        calls = [] if entry.decided_by is None else [entry.decided_by]
        if any(not allowed >= everything for allowed in [*entry.sinks.values(), *calls]):
            return True
    return False


@SETTINGS
@given(st.lists(control_plans(REGISTRY), min_size=3, max_size=3), st.data())
def test_where_the_label_rules_are_left_out_no_plan_can_break_a_label(plans: list[Any], data: Any) -> None:
    used = tuple(sorted({s["tool"] for plan in plans for s in plan["steps"] if "tool" in s}))
    policy = Policy.from_registry(REGISTRY).with_document(data.draw(policy_documents(used)))
    system = prompts.planner_messages("x", REGISTRY, policy)[0]["content"]
    if prompts.LABELS_HEAD in system:
        assert _refusing(policy)
        return
    assert not _refusing(policy) and prompts.LABEL_RULE not in system
    for plan in plans:
        try:
            pte.compile_plan(json.dumps(plan), REGISTRY, checks=[_worst_check(policy)])
        except PlanRejected as exc:
            raise AssertionError(f"rejected without label rules in the prompt: {exc}") from exc


@SETTINGS
@given(policy_documents())
def test_every_policy_that_can_refuse_a_label_gets_the_rules_that_apply(doc: dict[str, Any]) -> None:
    policy = Policy.from_registry(REGISTRY).with_document(doc)
    system = prompts.planner_messages("x", REGISTRY, policy)[0]["content"]
    stage = prompts.stage_messages("x", REGISTRY, policy, 2, {}, [])[0]["content"]
    assert stage.startswith(system + "\n\n")  # the same static prefix, byte for byte
    shown = prompts.LABELS_HEAD in system
    assert shown == _refusing(policy)
    if not shown:
        return
    for part in (prompts.LABEL_KINDS, prompts.GUARD_RULE, prompts.LABEL_RULE, prompts.LITERAL_RULE):
        assert part in system
    endorsable = any(
        "endorsable " in line for line in system.splitlines() if line.startswith("[") and "write" in line
    )
    assert (prompts.ENDORSABLE_RULE in system) == endorsable
    untrusted = any(
        policy.effective(s.name, REGISTRY).output == "untrusted"
        or "untrusted" in policy.effective(s.name, REGISTRY).fields.values()
        for s in REGISTRY
    )
    assert (prompts.UNTRUSTED_SOURCE_RULE in system) == untrusted


def test_the_six_generic_packs_are_not_told_label_rules_they_cannot_break() -> None:
    registry = pte.load_registry(["calculator", "shaping", "text", "extract", "dates", "containers"])
    system = prompts.planner_messages("x", registry, Policy.from_registry(registry))[0]["content"]
    assert prompts.LABELS_HEAD not in system and "guarded" not in system
    assert prompts.planner_messages("x", registry)[0]["content"] == system  # no policy: the tools' own
    try:
        invalid_plans(registry, "policy_violation")
    except ValueError:
        pass  # no untrusted output reaches any guarded parameter: none can be made
    else:
        raise AssertionError("the generic packs have a flow the label check could refuse")


def test_a_guarded_write_brings_the_rules_and_a_stock_deployment_keeps_them() -> None:
    registry = pte.load_registry(["backoffice", "shaping"])
    system = prompts.planner_messages("x", registry, Policy.from_registry(registry))[0]["content"]
    for part in (prompts.LABELS_HEAD, prompts.GUARD_RULE, prompts.LABEL_RULE, prompts.UNTRUSTED_SOURCE_RULE):
        assert part in system
    assert prompts.ENDORSABLE_RULE not in system  # nothing endorsable by default
    endorsing = Policy.from_registry(registry).with_document(
        {"pte_policy": "1", "tools": {"send_payment": {"on_violation": {"iban": "endorse"}}}}
    )
    assert prompts.ENDORSABLE_RULE in prompts.planner_messages("x", registry, endorsing)[0]["content"]


def test_a_coordinator_is_told_the_rules_its_specialists_tools_need() -> None:
    """A coordinator's plan is checked against the whole registry: a guarded write its
    specialist owns can refuse it, so the rules are shown though no tool listed is guarded."""
    # private: the coordinator's view of a catalogue, white-box
    from pte._plan import coordinator_view
    from pte.plan import Specialist

    registry = pte.load_registry(["backoffice", "shaping"])
    policy = Policy.from_registry(registry)
    writes = [s.name for s in registry if s.effect == "write"]
    payer = Specialist("payer", "Pays and reminds.", tuple(writes))
    view = coordinator_view(registry, [payer])
    assert not any(s.effect == "write" for s in view)
    assert label_reach(policy, view).rejects
    assert prompts.LABELS_HEAD in prompts.planner_messages("x", view, policy)[0]["content"]
