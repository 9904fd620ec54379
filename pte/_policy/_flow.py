"""One plan's data flows: the provenance labels of every step, and the sink violations.

`pte._policy._document` holds what a policy *says* (tools' declarations and policy files) and the
compile check that enforces it; this module is the analysis that check runs: it walks
every reference and literal of a plan (arguments, `when`/`for_each`/`require` conditions,
`when` defaults), labels each step in topological order and explains the first flow that
reaches a sink it may not.

The rule (docs/labels.md, `LABEL_RULE` in the planner prompt): **a call's label is the join
of the labels of its arguments and of everything that decides whether it runs**, on the
execution order (`Plan.order`, which the executor follows: a step runs only once every step
before it in that order has finished without a failure and every require before it held):

- its own `when` condition and `for_each` list (the list's length label, `LabelTree.length`);
- every `require` before it in the execution order (not in the plan's text order);
- every step before it in the execution order, through whether that step fails: a step
  fails depending on what it is called with (its arguments, its own condition and list),
  so those labels decide every later call -- except labels the call's own arguments
  already carry (it could fail on those itself: a failure before it adds nothing). A
  source tool's own availability (whether it answers at all) is not counted: see
  docs/labels.md for what that leaves out;
- the run-level `Decided` labels: what decided that this plan runs at all (every earlier
  stage's or plan's requires and failures, handed across ``continue`` and to a replan).

A `when` default is a literal like any other of its plan. `plan_literals` (which `pte._policy._document`
uses) lives here for the same reason.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from pte._catalogue import Registry, ToolSpec
from pte._catalogue import schema_types as st
from pte._core import PlanRejected, ReasonCode, canonical_json
from pte._plan import CompileContext, Plan, Reference, is_reference, json_path
from pte._policy._labels import LabelTree
from pte._policy._shaping_labels import shaped_tree
from pte._policy._tool_policy import PolicyEntries, ToolPolicy, output_labels

__all__ = ["LABELS", "Decided", "plan_literals"]

#: Every provenance label, from the most to the least trusted.
LABELS: tuple[str, ...] = ("request", "trusted", "untrusted")
_ALL = frozenset(LABELS)
_REQUEST = frozenset({"request"})
#: Which offending label a violation message traces first: the most alarming one.
_EXPLAIN_ORDER: tuple[str, ...] = ("untrusted", "trusted", "request")
_LITERAL_SHOWN = 40
#: Why the run-level ``decided`` labels are there (violation messages).
_DECIDED_WHY = "what decided that this plan runs at all (an earlier stage or plan of the run)"


def _checked_prior(prior: Mapping[str, frozenset[str]] | None) -> dict[str, frozenset[str]]:
    out: dict[str, frozenset[str]] = {}
    for step_id, labels in (prior or {}).items():
        frozen = frozenset(labels)
        if not frozen <= _ALL:
            raise ValueError(f"prior labels of {step_id!r} name unknown labels {sorted(frozen - _ALL)}")
        out[step_id] = frozen
    return out


@dataclass(frozen=True)
class Decided:
    """Run-level labels of what decided that a plan runs at all (pte._run._stages, replans).

    `conditions`: requires (and hand-offs) of earlier plans, which decide every later call;
    `failures`: what earlier steps' failures depended on, which decide every later call
    except where the call's own arguments already carry the label (see the module docstring).
    """

    conditions: frozenset[str] = frozenset()
    failures: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        for labels in (self.conditions, self.failures):
            if not labels <= _ALL:
                raise ValueError(f"decided labels name unknown labels {sorted(labels - _ALL)}")

    def __or__(self, other: Decided) -> Decided:
        return Decided(self.conditions | other.conditions, self.failures | other.failures)


# --- labelling -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Literal:
    """A literal in a plan (a value, or an object key written by the planner)."""

    value: Any
    key: bool = False

    @property
    def canon(self) -> str:
        """Canonical JSON, to match request literals (computed only when there are some)."""
        return canonical_json(self.value)

    @property
    def shown(self) -> str:
        """How flow messages show it: JSON, shortened."""
        text = json.dumps(self.value, ensure_ascii=True)
        if len(text) > _LITERAL_SHOWN:
            text = text[: _LITERAL_SHOWN - 1] + "…"
        return f"literal key {text}" if self.key else f"literal {text}"


@dataclass(frozen=True, slots=True)
class _Length:
    """An ``empty`` / ``nonempty`` operand: it reads the list's length label, not its contents."""

    ref: Reference

    def __str__(self) -> str:
        return f"{self.ref} (its length)"


_NO_DEFAULT: Any = object()


@dataclass(frozen=True, slots=True)
class _StepView:
    id: str
    tool: str
    args: Mapping[str, Any]
    #: Where the step sits in the plan (for JSON paths).
    position: int
    # pte._plan._control: what decides whether and how often the step runs (implicit flows).
    when: Any = None
    for_each: Reference | None = None
    #: The `when` default: a literal of this plan (`_NO_DEFAULT` when there is none).
    default: Any = _NO_DEFAULT


def _components(value: Any) -> Iterator[Reference | _Literal]:
    """The data components of a value in document order: its references and its literals.

    Iterative: a compiled plan's depth is bounded, but labelling must not depend on it.
    """
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, _Literal):
            yield item
        elif is_reference(item):
            yield Reference.parse(item["$ref"])
        elif isinstance(item, dict):
            if not item:
                yield _Literal(item)
            pending: list[Any] = []
            for key, sub in item.items():
                pending.append(_Literal(key, key=True))
                pending.append(sub)
            stack.extend(reversed(pending))
        elif isinstance(item, list):
            if not item:
                yield _Literal(item)
            stack.extend(reversed(item))
        else:
            yield _Literal(item)


def _arg_components(args: Mapping[str, Any]) -> Iterator[Reference | _Literal]:
    # The argument names are the tool's parameters, not data: only their values count.
    for value in args.values():
        yield from _components(value)


class _FlowGraph:
    """One plan's data flows: labels every step, finds and explains sink violations."""

    def __init__(
        self,
        policy: PolicyEntries,
        registry: Registry | None,
        steps: Sequence[_StepView],
        order: Sequence[str],
        prior_tools: Mapping[str, str],
        prior_labels: Mapping[str, frozenset[str]],
        literal: str,
        request_literals: frozenset[str],
        *,
        requires: Mapping[str, tuple[int, Any]] | None = None,
        full_order: Sequence[str] = (),
        decided: Decided | None = None,
        handed: Sequence[Reference] = (),
        may_be_absent: Callable[[Reference], bool] | None = None,
    ) -> None:
        self.policy = policy
        self.registry = registry
        self.steps = steps
        self.index = {s.id: s for s in steps}
        self.order = order
        self.prior_tools = prior_tools
        self.prior_labels = prior_labels
        self.literal = literal
        self.request_literals = request_literals
        self.labels: dict[str, frozenset[str]] = {}
        self.trees: dict[str, LabelTree] = {}
        self.prior_trees: Mapping[str, LabelTree] = {}
        #: Labels of what the planner that wrote this plan was shown (pte._run._exposure): a planner
        #: that read untrusted text chose every call, so this joins into each call's label.
        self.exposure: frozenset[str] = frozenset()
        #: require step id -> (plan position, condition).
        self.requires: Mapping[str, tuple[int, Any]] = requires or {}
        #: Every step of the plan in execution order, require steps included.
        self.full_order: Sequence[str] = full_order or order
        #: Run-level: what decided that this plan runs at all (pte._run._stages hand-off, replans).
        self.decided = decided or Decided()
        #: The references the plan hands to a next stage (`continue`).
        self.handed = handed
        self.may_be_absent = may_be_absent or _always
        #: What a tool step's failure depends on (its inputs), by step id (set by `step_tree`).
        self.fail_inputs: dict[str, frozenset[str]] = {}
        #: Per step: label -> why it decides whether the step runs: every earlier require
        #: (and the run-level conditions), on the execution order. Set by `label_all`.
        self.before: dict[str, dict[str, str]] = {}
        #: Per step, the same for every earlier failure (and the run-level failures).
        self.before_failures: dict[str, dict[str, str]] = {}
        #: What decides whether anything after this plan runs (a next stage or a replan):
        #: every require and failure of the plan, and whether what its `continue` selects exists.
        self.completion = Decided()

    def entry(self, tool: str) -> ToolPolicy:
        return self.policy.effective(tool, self.registry)

    def spec(self, tool: str) -> ToolSpec | None:
        """The tool itself (the policy entry says what it is declared as, not what code it runs)."""
        for registry in (self.registry, self.policy.registry):
            spec = registry.get(tool) if registry is not None else None
            if spec is not None:
                return spec
        return None

    # -- labels ----------------------------------------------------------------------------

    def label_all(self) -> dict[str, frozenset[str]]:
        # Topological order: every reference points at a step already labelled (or a prior one).
        for step_id in self.order:
            tree = self.step_tree(self.index[step_id])
            self.trees[step_id] = tree
            self.labels[step_id] = tree.everything()
        self.decide()
        return {s.id: self.labels[s.id] for s in self.steps}

    def decide(self) -> None:
        """What decides whether each step runs, on the execution order (see the module docstring)."""
        conds: dict[str, str] = dict.fromkeys(sorted(self.decided.conditions), _DECIDED_WHY)
        fails: dict[str, str] = dict.fromkeys(sorted(self.decided.failures), _DECIDED_WHY)
        for sid in self.full_order:
            self.before[sid] = dict(conds)
            self.before_failures[sid] = dict(fails)
            if sid in self.requires:
                cond = self.requires[sid][1]
                for label in sorted(self.condition_labels(cond) - conds.keys()):
                    conds[label] = f"{self.condition_source(cond, label)} of the require step {sid!r}"
            elif sid in self.index:
                step = self.index[sid]
                for label in sorted(self.failure_labels(step) - fails.keys()):
                    fails[label] = f"step {sid!r} ({step.tool}) runs before it and may fail on {label} data"
        for ref in self.handed:  # a hand-off that selects nothing ends the run (pte._run._stages)
            if self.may_be_absent(ref):
                for label in self.step_tree_of(ref.step).length(ref.tokens) - conds.keys():
                    conds[label] = f"whether {str(ref)!r} exists"
        self.completion = Decided(frozenset(conds), frozenset(fails))

    def failure_labels(self, step: _StepView) -> frozenset[str]:
        """What decides whether `step` fails: what it is called with, its own condition and list."""
        out = set(self.fail_inputs.get(step.id, frozenset()))
        if step.when is not None:
            out |= self.condition_labels(step.when)
        if step.for_each is not None:
            out |= self.membership(step.for_each)
        return frozenset(out)

    def step_tree(self, step: _StepView) -> LabelTree:
        """The labels of a step's output, by field (pte._policy._labels), implicit flows included."""
        tree = self.entry(step.tool).output_tree()
        # What the step's failure depends on: everything it is called with ...
        self.fail_inputs[step.id] = self.input_labels(step)
        if tree is None and step.args:  # a stock shaping operation: by field (pte._policy._shaping_labels)
            tree = shaped_tree(
                self.spec(step.tool),
                step.args,
                lambda ref: self.step_tree_of(ref.step).subtree(ref.tokens),
                lambda value: self.value_labels(_components(value)),
            )
            if tree is not None:
                # ... except, for a stock operation, the parts of its list it only copies
                # (it reads the deciding fields, whose labels are on the output's own node).
                self.fail_inputs[step.id] = tree.own
        if tree is None:  # derived: as trusted as the least trusted argument
            labels = self.value_labels(_arg_components(step.args)) if step.args else frozenset({self.literal})
            tree = LabelTree(labels)
        if step.for_each is not None:
            tree = LabelTree(self.membership(step.for_each), MappingProxyType({"*": tree}))
        if step.when is not None:  # its output (or default) exists depending on the condition
            tree = tree.with_own(self.condition_labels(step.when))
            if step.default is not _NO_DEFAULT:  # a literal this plan's planner wrote
                tree = tree.with_own(self.value_labels(_components(step.default)) or {self.literal})
        return tree

    def membership(self, ref: Reference) -> frozenset[str]:
        """Who chose which elements a for_each list has: its length label (pte._plan implicit flow)."""
        return self.step_tree_of(ref.step).length(ref.tokens)

    def condition_labels(self, cond: Any) -> frozenset[str]:
        """The labels a condition's outcome depends on (an empty/nonempty: the length label)."""
        out: set[str] = set()
        for component in _condition_components(cond):
            out |= self.component_labels(component)
        return frozenset(out)

    def implicit_labels(self, step: _StepView) -> frozenset[str]:
        """Labels of what decides whether and how often a step runs: what its writer was shown,
        its `when`, its for_each list's length, and every require and failure before it on the
        execution order."""
        out: set[str] = set(self.exposure)
        out |= self.before.get(step.id, {}).keys()
        # A call could fail on its own arguments' labels itself: an earlier failure on those adds nothing.
        out |= self.before_failures.get(step.id, {}).keys() - self.input_labels(step)
        if step.when is not None:
            out |= self.condition_labels(step.when)
        if step.for_each is not None:
            out |= self.membership(step.for_each)
        return frozenset(out)

    def trigger_labels(self, step: _StepView) -> frozenset[str]:
        """What decides whether `step` runs *and fails* (a replan's trigger, pte._run._stages): its
        failure labels and every decision before it, without the exception `implicit_labels`
        makes for its own arguments (the replan is a new plan: it may carry none of them)."""
        out = set(self.failure_labels(step)) | self.exposure
        out |= self.before.get(step.id, {}).keys() | self.before_failures.get(step.id, {}).keys()
        return frozenset(out)

    def call_decisions(self, step: _StepView, offending: frozenset[str]) -> list[dict[str, Any]] | None:
        """What brings `offending` into whether and how often `step` runs, as decisions a person
        can be shown at the call (pte._policy._endorsement renders them with their values): its
        `when`, its `for_each` list, the requires and failures before it in this plan. None when
        some of it cannot be shown there: what its planner was shown (exposure), or what decided
        that the plan runs at all (an earlier stage, a replan's trigger)."""
        decided = self.decided.conditions | (self.decided.failures - self.input_labels(step))
        if offending & (self.exposure | decided):
            return None
        out: list[dict[str, Any]] = []
        fails: set[str] = set()
        own = self.input_labels(step)
        for sid in self.full_order:
            if sid == step.id:
                break
            if sid in self.requires:
                cond = self.requires[sid][1]
                if self.condition_labels(cond) & offending:
                    sources = self.sources(cond, offending)
                    out.append({"kind": "require", "step": sid, "condition": cond, "sources": sources})
            elif sid in self.index:
                other = self.index[sid]
                labels = (self.failure_labels(other) - own) & offending
                if labels - fails:
                    fails |= labels
                    out.append({"kind": "failure", "step": sid, "tool": other.tool, "labels": sorted(labels)})
        if step.when is not None and self.condition_labels(step.when) & offending:
            sources = self.sources(step.when, offending)
            out.append({"kind": "when", "step": step.id, "condition": step.when, "sources": sources})
        if step.for_each is not None and self.membership(step.for_each) & offending:
            each = step.for_each
            label = next(lab for lab in _EXPLAIN_ORDER if lab in self.membership(each) & offending)
            chain = self.chain(iter([each]), label) if label in self.component_labels(each) else []
            out.append({"kind": "for_each", "list": str(each), "label": label, "source": " ← ".join(chain)})
        return out

    def sources(self, cond: Any, offending: frozenset[str]) -> dict[str, str]:
        """Where each reference of a condition comes from, in words (for the offending labels)."""
        out: dict[str, str] = {}
        for part in _condition_components(cond):
            ref = part.ref if isinstance(part, _Length) else part
            if isinstance(ref, _Literal):
                continue
            labels = self.component_labels(part) & offending
            if not labels or str(ref) in out:
                continue
            label = next(lab for lab in _EXPLAIN_ORDER if lab in labels)
            hops = self.chain(iter([ref]), label) if label in self.component_labels(ref) else [str(ref)]
            out[str(ref)] = " ← ".join(hops) if hops else f"{ref} ({label})"
        return out

    def condition_source(self, cond: Any, label: str) -> str:
        """'a condition on <what>' for the first part of `cond` that brings `label`."""
        part = next((c for c in _condition_components(cond) if label in self.component_labels(c)), None)
        source = "a literal" if part is None or isinstance(part, _Literal) else str(part)
        return f"a condition on {source} ({label})"

    def input_labels(self, step: _StepView) -> frozenset[str]:
        """The labels of everything `step` is called with (empty for no arguments)."""
        return self.value_labels(_arg_components(step.args)) if step.args else frozenset()

    def value_labels(self, components: Iterator[Reference | _Literal]) -> frozenset[str]:
        out: set[str] = set()
        for component in components:
            out |= self.component_labels(component)
            if len(out) == len(_ALL):
                break  # nothing more to learn from the rest of a large value
        return frozenset(out)

    def component_labels(self, component: Reference | _Literal | _Length) -> frozenset[str]:
        if isinstance(component, _Literal):
            if self.request_literals and component.canon in self.request_literals:
                return _REQUEST  # the same value the request-time plan wrote: nothing new
            return frozenset({self.literal})
        if isinstance(component, _Length):
            return self.step_tree_of(component.ref.step).length(component.ref.tokens)
        return self.step_tree_of(component.step).select(component.tokens)

    def step_tree_of(self, step_id: str) -> LabelTree:
        """A step's output labels by field: this plan's, or a prior step's (by field when known)."""
        tree = self.trees.get(step_id) or self.prior_trees.get(step_id)
        if tree is not None:
            return tree
        if step_id not in self.labels and step_id not in self.prior_labels:
            entry = self.prior_entry(step_id)
            if entry is not None and (fixed := entry.output_tree()) is not None:
                return fixed
        return LabelTree(self.step_id_labels(step_id))

    def prior_entry(self, step_id: str) -> ToolPolicy | None:
        tool = self.prior_tools.get(step_id)
        try:
            return None if tool is None else self.entry(tool)
        except KeyError:
            return None

    def step_id_labels(self, step_id: str) -> frozenset[str]:
        if step_id in self.labels:
            return self.labels[step_id]
        if step_id in self.prior_labels:
            return self.prior_labels[step_id]
        tool = self.prior_tools.get(step_id)
        fixed = None if tool is None else self.fixed_output(tool)
        if fixed is not None:
            return fixed
        # A derived or unknown earlier step whose inputs are not known here: assume the worst.
        return _ALL

    # -- sinks -----------------------------------------------------------------------------

    def first_violation(self) -> PlanRejected | None:
        for violation in self.violations():
            return violation[2]
        return None

    def violations(self) -> Iterator[tuple[_StepView, str | None, PlanRejected]]:
        """Every sink violation in plan order: (step, parameter, rejection).

        The parameter is None for an implicit flow (whether and how often the call happens
        depends on the data): only a value can be endorsed (pte._policy._endorsement), not that.
        """
        for step in self.steps:  # plan order, so the first violation is the first one a reader meets
            entry = self.entry(step.tool)
            for param, allowed in entry.sinks.items():
                if param in step.args:
                    labels = self.value_labels(_components(step.args[param]))
                    offending = labels - allowed
                    if offending:
                        yield step, param, self.violation(step, param, allowed, offending)
            # The call-level sink: whether (and how often) the call happens, whatever its
            # parameters, none included (explained after the explicit flows: those are what a
            # reader fixes first).
            call = entry.decided_by
            if call is not None:
                offending = self.implicit_labels(step) - call
                if offending:
                    yield step, None, self.implicit_violation(step, call, offending)

    def implicit_violation(
        self, step: _StepView, allowed: frozenset[str], offending: frozenset[str]
    ) -> PlanRejected:
        label = next(lab for lab in _EXPLAIN_ORDER if lab in offending)
        accepts = " or ".join(lab for lab in LABELS if lab in allowed) or "no"
        where: tuple[str, ...] = ()
        if label in self.exposure:
            why = f"the plan was written by a planner that was shown {label} text (pte._run._exposure)"
        elif step.for_each is not None and label in self.membership(step.for_each):
            why = f"the for_each list {str(step.for_each)!r} (its elements were chosen by {label} data)"
            where = ("for_each",)
        elif step.when is not None and label in self.condition_labels(step.when):
            why = self.condition_source(step.when, label)
            where = ("when",)
        else:
            why = self.before[step.id].get(label) or self.before_failures[step.id][label]
        message = (
            f"step {step.id!r}: only {accepts} data may decide whether {step.tool} runs, but whether and "
            f"how often {step.tool} runs depends on {label} data: {why}"
        )
        return PlanRejected(ReasonCode.POLICY_VIOLATION, message, json_path(("steps", step.position, *where)))

    def violation(
        self, step: _StepView, param: str, allowed: frozenset[str], offending: frozenset[str]
    ) -> PlanRejected:
        label = next(lab for lab in _EXPLAIN_ORDER if lab in offending)
        flow = " ← ".join(self.trace(step, param, label))
        accepts = " or ".join(lab for lab in LABELS if lab in allowed)
        accepts = f"accepts only {accepts} data" if accepts else "accepts no data from a plan"
        message = f"step {step.id!r}: {step.tool}.{param} {accepts}, but would receive {label} data: {flow}"
        return PlanRejected(
            ReasonCode.POLICY_VIOLATION, message, json_path(("steps", step.position, "args", param))
        )

    def trace(self, step: _StepView, param: str, label: str) -> list[str]:
        """The flow that brings `label` into ``step.tool.param``, hop by hop back to its source."""
        return [f"{step.tool}.{param}", *self.chain(_components(step.args[param]), label)]

    def chain(self, components: Iterator[Reference | _Literal], label: str) -> list[str]:
        """The hops that bring `label` out of `components`, back to its source."""
        parts: list[str] = []
        while True:
            component = next(c for c in components if label in self.component_labels(c))
            if isinstance(component, _Literal):
                parts.append(f"{component.shown} ({self.literal_note(label)})")
                return parts
            parts.append(str(component))
            producer = self.index.get(component.step)
            if producer is None:
                parts.append(self.prior_note(component.step, label))
                return parts
            if producer.when is not None and label in self.condition_labels(producer.when):
                why = self.condition_source(producer.when, label)
                parts.append(f"whether step {producer.id!r} runs: {why}")
                return parts
            default = producer.default
            if default is not _NO_DEFAULT and label in self.value_labels(_components(default)):
                shown = _Literal(producer.default).shown
                parts.append(f"the default of step {producer.id!r}: {shown} ({self.literal_note(label)})")
                return parts
            output = self.entry(producer.tool).output
            if output != "derived":
                parts.append(f"{producer.tool} ({output})")
                return parts
            parts.append(producer.tool)
            if not producer.args:
                parts.append(f"no arguments ({self.literal_note(label)})")
                return parts
            components = _arg_components(producer.args)

    @staticmethod
    def literal_note(label: str) -> str:
        if label == "untrusted":
            return "untrusted: written by a replanner that was shown untrusted data"
        return label

    def prior_note(self, step_id: str, label: str) -> str:
        tool = self.prior_tools.get(step_id)
        if step_id in self.prior_labels or (tool is not None and self.fixed_output(tool) is not None):
            return f"{tool or 'an earlier step'} ({label}, completed earlier)"
        return f"{tool or 'an earlier step'} (labels unknown: completed earlier, assumed {label})"

    def fixed_output(self, tool: str) -> frozenset[str] | None:
        """The fixed labels of a source tool; None for derived tools and tools nobody declares."""
        try:
            return output_labels(self.entry(tool).output)
        except KeyError:
            return None


def _flow_graph(
    policy: PolicyEntries,
    plan: Plan | CompileContext,
    literal: str,
    prior: Mapping[str, frozenset[str]] | None,
    request_literals: frozenset[str],
    decided: Decided | None = None,
) -> _FlowGraph:
    if literal not in LABELS:
        raise ValueError(f"literal must be one of {list(LABELS)}, not {literal!r}")
    prior_labels = _checked_prior(prior)
    registry: Registry | None
    prior_tools: Mapping[str, str]
    handed: list[Reference] = []
    may_be_absent: Callable[[Reference], bool] = _always
    if isinstance(plan, CompileContext):
        # pte._plan._control: require steps call no tool; their conditions are implicit flows.
        raw = [
            (
                s["id"],
                s.get("tool", ""),
                s.get("args", {}),
                s.get("when"),
                s.get("for_each"),
                s.get("require"),
                s.get("default", _NO_DEFAULT),
            )
            for s in plan.steps
        ]
        registry, prior_tools = plan.registry, plan.prior
        handed = _references(plan.document.get("continue"))
        may_be_absent = _absence_check(plan)
    else:
        raw = [
            (
                s.id,
                s.tool,
                s.args,
                None if s.is_require else s.condition,
                None if s.for_each is None else {"$ref": str(s.for_each)},
                s.condition if s.is_require else None,
                _NO_DEFAULT if s.default_json is None else s.default,
            )
            for s in plan.steps
        ]
        registry, prior_tools = policy.registry, {}
        handed = _references(plan.continue_values) if plan.continues else []
    steps = []
    requires: dict[str, tuple[int, Any]] = {}
    for i, (sid, tool, args, when, for_each, require, default) in enumerate(raw):
        if require is not None:
            requires[sid] = (i, require)
            continue
        each = None if for_each is None else Reference.parse(for_each["$ref"])
        steps.append(_StepView(sid, tool, args, i, when, each, default))
    tool_ids = {s.id for s in steps}
    order = [sid for sid in plan.order if sid in tool_ids]
    return _FlowGraph(
        policy,
        registry,
        steps,
        order,
        prior_tools,
        prior_labels,
        literal,
        request_literals,
        requires=requires,
        full_order=list(plan.order),
        decided=decided,
        handed=handed,
        may_be_absent=may_be_absent,
    )


def _always(ref: Reference) -> bool:
    return True


def _references(value: Any) -> list[Reference]:
    return [c for c in _components(value) if isinstance(c, Reference)] if value is not None else []


def _absence_check(ctx: CompileContext) -> Callable[[Reference], bool]:
    """Whether a reference may select nothing at run time: it goes through an array index,
    an optional property, or a schema this check cannot read (then: assume it may)."""

    def may_be_absent(ref: Reference) -> bool:
        try:
            schema, root = ctx.output_type(ref.step)
        except (KeyError, ValueError, TypeError):
            return True
        for token in ref.tokens:
            node = st.deref(schema, root)
            if not isinstance(node, Mapping) or token not in (node.get("required") or ()):
                return True
            properties = node.get("properties")
            if not isinstance(properties, Mapping) or token not in properties:
                return True
            schema = properties[token]
        return False

    return may_be_absent


def _condition_components(cond: Any) -> Iterator[Reference | _Literal | _Length]:
    """The references and literals of a `when` / `require` condition (pte._plan._control); an
    ``empty`` / ``nonempty`` reads only the length of what it names."""
    stack = [cond]
    while stack:
        node = stack.pop()
        ((op, arg),) = node.items()
        if op in ("and", "or"):
            stack.extend(reversed(arg))
        elif op == "not":
            stack.append(arg)
        elif op in ("empty", "nonempty"):
            yield _Length(Reference.parse(arg["$ref"]))
        else:
            for operand in arg:
                yield Reference.parse(operand["$ref"]) if is_reference(operand) else _Literal(operand)


def plan_literals(plan: Plan | CompileContext) -> frozenset[str]:
    """The canonical JSON of every literal in a plan's step arguments.

    An engine passes the literals of the plans written *before* any untrusted data was shown
    (the first plan) as `request_literals` to the checks of later replans: a replanner that
    copies one of those values verbatim adds nothing an attacker chose.
    """
    if isinstance(plan, CompileContext):
        args = [s.get("args", {}) for s in plan.steps]
        defaults = [s["default"] for s in plan.steps if "default" in s]
    else:
        args = [s.args for s in plan.steps]
        defaults = [s.default for s in plan.steps if s.default_json is not None]
    values = [c for a in args for c in _arg_components(a)] + [c for d in defaults for c in _components(d)]
    return frozenset(c.canon for c in values if isinstance(c, _Literal))
