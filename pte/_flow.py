"""One plan's data flows: the provenance labels of every step, and the sink violations.

`pte._policy` holds what a policy *says* (tools' declarations and policy files) and the
compile check that enforces it; this module is the analysis that check runs: it walks
every reference and literal of a plan (arguments, `when`/`for_each`/`require` conditions),
labels each step in topological order and explains the first flow that reaches a sink
it may not. `plan_literals` (re-exported by `pte._policy`) lives here for the same reason.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from pte._canonical import canonical_json
from pte._compile_context import CompileContext, json_path
from pte._errors import PlanRejected, ReasonCode
from pte._labels import LabelTree
from pte._plan import Plan, Reference, is_reference
from pte._registry import Registry
from pte._shaping_labels import shaped_tree
from pte._tool_spec import ToolSpec

if TYPE_CHECKING:
    from pte._policy import Policy, ToolPolicy

__all__ = ["LABELS", "plan_literals"]

#: Every provenance label, from the most to the least trusted.
LABELS: tuple[str, ...] = ("request", "trusted", "untrusted")
_ALL = frozenset(LABELS)
_REQUEST = frozenset({"request"})
#: Which offending label a violation message traces first: the most alarming one.
_EXPLAIN_ORDER: tuple[str, ...] = ("untrusted", "trusted", "request")
_LITERAL_SHOWN = 40


def _checked_prior(prior: Mapping[str, frozenset[str]] | None) -> dict[str, frozenset[str]]:
    out: dict[str, frozenset[str]] = {}
    for step_id, labels in (prior or {}).items():
        frozen = frozenset(labels)
        if not frozen <= _ALL:
            raise ValueError(f"prior labels of {step_id!r} name unknown labels {sorted(frozen - _ALL)}")
        out[step_id] = frozen
    return out


def _output_labels(output: str) -> frozenset[str] | None:
    """The fixed label set of a tool kind; None for derived (it depends on the arguments)."""
    if output == "trusted":
        return frozenset({"trusted"})
    if output == "untrusted":
        return frozenset({"untrusted"})
    return None


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
class _StepView:
    id: str
    tool: str
    args: Mapping[str, Any]
    #: Where the step sits in the plan (for JSON paths).
    position: int
    # pte._control: what decides whether and how often the step runs (implicit flows).
    when: Any = None
    for_each: Reference | None = None
    #: Conditions of the require steps before this one in the plan.
    requires: tuple[Any, ...] = ()


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
        policy: Policy,
        registry: Registry | None,
        steps: Sequence[_StepView],
        order: Sequence[str],
        prior_tools: Mapping[str, str],
        prior_labels: Mapping[str, frozenset[str]],
        literal: str,
        request_literals: frozenset[str],
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
        #: Labels of what the planner that wrote this plan was shown (pte._exposure): a planner
        #: that read untrusted text chose every call, so this joins into each call's label.
        self.exposure: frozenset[str] = frozenset()

    def entry(self, tool: str) -> ToolPolicy:
        return self.policy._entry(tool, self.registry)

    def spec(self, tool: str) -> ToolSpec | None:
        """The tool itself (the policy entry says what it is declared as, not what code it runs)."""
        for registry in (self.registry, self.policy._registry):
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
        return {s.id: self.labels[s.id] for s in self.steps}

    def step_tree(self, step: _StepView) -> LabelTree:
        """The labels of a step's output, by field (pte._labels), implicit flows included."""
        tree = self.entry(step.tool).output_tree()
        if tree is None and step.args:  # a stock shaping operation: by field (pte._shaping_labels)
            tree = shaped_tree(
                self.spec(step.tool),
                step.args,
                lambda ref: self.step_tree_of(ref.step).subtree(ref.tokens),
                lambda value: self.value_labels(_components(value)),
            )
        if tree is None:  # derived: as trusted as the least trusted argument
            labels = self.value_labels(_arg_components(step.args)) if step.args else frozenset({self.literal})
            tree = LabelTree(labels)
        if step.for_each is not None:
            tree = LabelTree(self.membership(step.for_each), MappingProxyType({"*": tree}))
        if step.when is not None:  # its output (or default) exists depending on the condition
            tree = tree.with_own(self.condition_labels(step.when))
        return tree

    def membership(self, ref: Reference) -> frozenset[str]:
        """Who chose which elements a for_each list has (pte._control implicit flow)."""
        return self.step_tree_of(ref.step).membership(ref.tokens)

    def condition_labels(self, cond: Any) -> frozenset[str]:
        out: set[str] = set()
        for component in _condition_components(cond):
            out |= self.component_labels(component)
        return frozenset(out)

    def implicit_labels(self, step: _StepView) -> frozenset[str]:
        """Labels of what decides whether and how often a step runs: its `when`, the require
        steps before it, and its for_each list's membership (pte._control)."""
        out: set[str] = set(self.exposure)
        if step.when is not None:
            out |= self.condition_labels(step.when)
        for cond in step.requires:
            out |= self.condition_labels(cond)
        if step.for_each is not None:
            out |= self.membership(step.for_each)
        return frozenset(out)

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

    def component_labels(self, component: Reference | _Literal) -> frozenset[str]:
        if isinstance(component, _Literal):
            if self.request_literals and component.canon in self.request_literals:
                return _REQUEST  # the same value the request-time plan wrote: nothing new
            return frozenset({self.literal})
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
        for step in self.steps:  # plan order, so the first violation is the first one a reader meets
            sinks = self.entry(step.tool).sinks
            implicit = self.implicit_labels(step) if sinks else frozenset()
            for param, allowed in sinks.items():
                if param in step.args:
                    labels = self.value_labels(_components(step.args[param]))
                    offending = labels - allowed
                    if offending:
                        return self.violation(step, param, allowed, offending)
                # Whether (and how often) the call happens is itself a flow into every sink.
                if implicit - allowed:
                    return self.implicit_violation(step, param, allowed, implicit - allowed)
        return None

    def implicit_violation(
        self, step: _StepView, param: str, allowed: frozenset[str], offending: frozenset[str]
    ) -> PlanRejected:
        label = next(lab for lab in _EXPLAIN_ORDER if lab in offending)
        accepts = " or ".join(lab for lab in LABELS if lab in allowed) or "no"
        if label in self.exposure:
            why = f"the plan was written by a planner that was shown {label} text (pte._exposure)"
        elif step.for_each is not None and label in self.membership(step.for_each):
            why = f"the for_each list {str(step.for_each)!r} (its elements were chosen by {label} data)"
        else:
            conds = [c for c in (step.when, *step.requires) if c is not None]
            cond = next(c for c in conds if label in self.condition_labels(c))
            ref = next((c for c in _condition_components(cond) if label in self.component_labels(c)), None)
            source = str(ref) if isinstance(ref, Reference) else "a literal"
            why = f"a condition on {source} ({label})"
        message = (
            f"step {step.id!r}: {step.tool}.{param} accepts only {accepts} data, but whether and how often "
            f"{step.tool} runs depends on {label} data: {why}"
        )
        return PlanRejected(
            ReasonCode.POLICY_VIOLATION, message, json_path(("steps", step.position, "args", param))
        )

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
        parts = [f"{step.tool}.{param}"]
        components: Iterator[Reference | _Literal] = _components(step.args[param])
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
            return _output_labels(self.entry(tool).output)
        except KeyError:
            return None


def _flow_graph(
    policy: Policy,
    plan: Plan | CompileContext,
    literal: str,
    prior: Mapping[str, frozenset[str]] | None,
    request_literals: frozenset[str],
) -> _FlowGraph:
    if literal not in LABELS:
        raise ValueError(f"literal must be one of {list(LABELS)}, not {literal!r}")
    prior_labels = _checked_prior(prior)
    registry: Registry | None
    prior_tools: Mapping[str, str]
    if isinstance(plan, CompileContext):
        # pte._control: require steps call no tool; their conditions are implicit flows.
        raw = [
            (
                s["id"],
                s.get("tool", ""),
                s.get("args", {}),
                s.get("when"),
                s.get("for_each"),
                s.get("require"),
            )
            for s in plan.steps
        ]
        registry, prior_tools = plan.registry, plan.prior
    else:
        raw = [
            (
                s.id,
                s.tool,
                s.args,
                None if s.is_require else s.condition,
                None if s.for_each is None else {"$ref": str(s.for_each)},
                s.condition if s.is_require else None,
            )
            for s in plan.steps
        ]
        registry, prior_tools = policy._registry, {}
    steps = []
    requires: tuple[Any, ...] = ()
    for i, (sid, tool, args, when, for_each, require) in enumerate(raw):
        if require is not None:
            requires = (*requires, require)
            continue
        each = None if for_each is None else Reference.parse(for_each["$ref"])
        steps.append(_StepView(sid, tool, args, i, when, each, requires))
    tool_ids = {s.id for s in steps}
    order = [sid for sid in plan.order if sid in tool_ids]
    return _FlowGraph(policy, registry, steps, order, prior_tools, prior_labels, literal, request_literals)


def _condition_components(cond: Any) -> Iterator[Reference | _Literal]:
    """The references and literals of a `when` / `require` condition (pte._control)."""
    stack = [cond]
    while stack:
        node = stack.pop()
        ((op, arg),) = node.items()
        if op in ("and", "or"):
            stack.extend(reversed(arg))
        elif op == "not":
            stack.append(arg)
        elif op in ("empty", "nonempty"):
            yield Reference.parse(arg["$ref"])
        else:
            for operand in arg:
                yield Reference.parse(operand["$ref"]) if is_reference(operand) else _Literal(operand)


def plan_literals(plan: Plan | CompileContext) -> frozenset[str]:
    """The canonical JSON of every literal in a plan's step arguments.

    An engine passes the literals of the plans written *before* any untrusted data was shown
    (the first plan) as `request_literals` to the checks of later replans: a replanner that
    copies one of those values verbatim adds nothing an attacker chose.
    """
    args = (
        [s["args"] for s in plan.steps] if isinstance(plan, CompileContext) else [s.args for s in plan.steps]
    )
    return frozenset(c.canon for a in args for c in _arg_components(a) if isinstance(c, _Literal))
