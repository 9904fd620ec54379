"""Data-flow (provenance) policies, checked statically when a plan is compiled.

A fixed plan stops injected text from adding actions, but not from steering arguments: an
IBAN copied out of an untrusted e-mail into a payment. Every data flow in a plan is an
explicit reference, so PTE can label every value before anything runs:

- a label set says where a value may have come from: ``request`` (a literal the planner
  wrote, standing for the user's request), ``trusted`` (a trusted tool's output) and/or
  ``untrusted`` (third-party text);
- a step's whole output carries one label set: ``{"trusted"}`` or ``{"untrusted"}`` for
  those tools, and for ``derived`` (deterministic shaping) tools the union of the label
  sets of *all* their arguments, literals included;
- a literal counts as ``request``, except in a replan whose prompt showed untrusted data:
  there the replanner may have copied that data into a literal, so it counts as
  ``untrusted`` (`Policy.check(literal="untrusted")`);
- a *sink* parameter accepts a value only if the value's label set is a subset of what the
  sink allows. Otherwise the plan is rejected with ``policy_violation`` and the whole flow,
  e.g. ``send_payment.iban ← s3/text ← format_text ← s2/iban ← read_document (untrusted)``.

Tools declare their output provenance and sinks in code (`pte.tool`); a policy file owned
by compliance (schemas/policy.schema.json) overrides or extends those declarations.

What counts as a literal: every string, number, boolean or null written in the plan, every
empty array or object, and every object key below the argument names (keys are data too:
a shaping tool may emit them). A derived tool called with no arguments counts as a literal.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from types import MappingProxyType
from typing import Any, Literal, cast

import jsonschema

from pte._catalogue import OutputProvenance, Registry, ToolSpec
from pte._core import FileRefused, PolicyError, StrictJSONError, load_schema, read_bounded_text
from pte._core import strict_json as strict_json
from pte._plan import CompileContext, Plan, json_path
from pte._policy._flow import LABELS, Decided, _checked_prior, _flow_graph
from pte._policy._labels import LabelTree, SchemaLabels, parse_field_pointer, schema_fields
from pte._policy._storage import check_stores, parse_stores
from pte._policy._tool_policy import ToolPolicy

__all__ = [
    "DEFAULT_MODES",
    "POLICY_FORMAT_VERSION",
    "DefaultMode",
    "Label",
    "Policy",
    "PolicyCheck",
    "load_policy",
]

POLICY_FORMAT_VERSION = "1"
_SCHEMA_FILE = "policy.schema.json"

Label = Literal["request", "trusted", "untrusted"]
DefaultMode = Literal["guarded", "open"]
DEFAULT_MODES: tuple[str, ...] = ("guarded", "open")
#: What an undeclared parameter of a write tool accepts in guarded mode.
_GUARDED = frozenset({"request", "trusted"})


def _declared(spec: ToolSpec) -> ToolPolicy:
    """What a tool declares itself: output provenance, sinks, and labelled output fields."""
    if spec.provenance == "derived":
        return ToolPolicy(spec.provenance, _frozen_sinks(spec.sinks))
    labels = SchemaLabels(spec.output_schema)
    fields = schema_fields(spec.output_schema, labels.walk)
    return ToolPolicy(
        spec.provenance, _frozen_sinks(spec.sinks), MappingProxyType(fields), schema_labels=labels
    )


def _frozen_sinks(sinks: Mapping[str, frozenset[str]]) -> Mapping[str, frozenset[str]]:
    return MappingProxyType({param: frozenset(allowed) for param, allowed in sinks.items()})


def _call_sink(entry: ToolPolicy, guarded: frozenset[str] | None) -> frozenset[str] | None:
    """Which labels may decide whether and how often a call runs (docs/labels.md): the policy's
    ``call`` when it declares one; else `guarded` (a write in guarded mode, an egress read: whatever
    its parameters, none included) narrowed by every declared sink, since whether a value
    arrives is a flow into it; else (open mode) the declared sinks alone (None: none)."""
    if entry.call is not None:
        return entry.call
    out = guarded
    for allowed in entry.sinks.values():
        out = allowed if out is None else out & allowed
    return out


# --- the policy --------------------------------------------------------------------------------


class Policy:
    """Output provenance and sink parameters per tool: the tools' own declarations, then files.

    Immutable: `with_file` and `with_document` return new policies. A tool this policy does
    not know (not in the registry it was built from) falls back to its own declarations in
    whatever registry a plan is compiled against.
    """

    def __init__(
        self,
        tools: Mapping[str, ToolPolicy] | None = None,
        *,
        registry: Registry | None = None,
        sources: Sequence[str] = (),
        default: DefaultMode = "guarded",
    ) -> None:
        if default not in DEFAULT_MODES:
            raise ValueError(f"default must be one of {list(DEFAULT_MODES)}, not {default!r}")
        self._tools: Mapping[str, ToolPolicy] = MappingProxyType(dict(tools or {}))
        self._registry = registry
        #: The policy files applied, in order (for audit records and error messages).
        self.sources: tuple[str, ...] = tuple(sources)
        #: ``guarded``: every parameter of a ``write`` tool that no declaration names accepts
        #: only request/trusted data. ``open``: only declared sinks are guarded.
        self.default: DefaultMode = default
        # Labels survive storage (pte._policy._storage): refused here, so no such policy ever exists.
        check_stores(self, self.sources[-1] if self.sources else "<policy>", PolicyError)

    @property
    def registry(self) -> Registry | None:
        """The catalogue this policy was built over (None: the tools' own declarations only)."""
        return self._registry

    @classmethod
    def from_registry(cls, registry: Registry, *, default: DefaultMode = "guarded") -> Policy:
        """The policy the tools declare themselves (`provenance`, `sinks` in `pte.tool`).

        `default` is ``guarded`` unless a caller (or a policy file) opens it explicitly.
        """
        tools = {spec.name: _declared(spec) for spec in registry}
        return cls(tools, registry=registry, default=default)

    # -- reading ------------------------------------------------------------------------------

    @property
    def tools(self) -> Mapping[str, ToolPolicy]:
        """Tool name -> `ToolPolicy`, for every tool this policy knows."""
        return self._tools

    def tool_policy(self, tool: str) -> ToolPolicy:
        """The entry for `tool` (KeyError if this policy does not know it)."""
        return self._tools[tool]

    def output_label(self, tool: str) -> str:
        """``trusted``, ``untrusted`` or ``derived``: what `tool`'s output counts as."""
        return self._tools[tool].output

    def sinks(self, tool: str) -> Mapping[str, frozenset[str]]:
        """Sink parameters of `tool`: parameter -> the labels it accepts (empty if none).

        In ``guarded`` mode this includes the guarded defaults of a ``write`` tool's
        undeclared parameters (see `effective`).
        """
        if tool not in self._tools:
            raise KeyError(tool)
        return self._entry(tool, self._registry).sinks

    def effective(self, tool: str, registry: Registry | None = None) -> ToolPolicy:
        """What is enforced for `tool`: its declarations plus, in ``guarded`` mode, a
        ``request``/``trusted`` sink on every other parameter of a ``write`` tool."""
        return self._entry(tool, registry if registry is not None else self._registry)

    def entry_document(self, tool: str, registry: Registry | None = None) -> dict[str, Any]:
        """`effective` as a policy-file entry (approvals bind it through the catalogue fingerprint)."""
        return self.effective(tool, registry).to_dict()

    def to_document(self) -> dict[str, Any]:
        """This policy as a policy-file document (valid against schemas/policy.schema.json)."""
        return {
            "pte_policy": POLICY_FORMAT_VERSION,
            "default": self.default,
            "tools": {name: entry.to_dict() for name, entry in sorted(self._tools.items())},
        }

    def describe(self) -> dict[str, Any]:
        """A JSON summary for audit records: the files applied and the effective policy."""
        return {"sources": list(self.sources), **self.to_document()}

    # -- applying files ----------------------------------------------------------------------

    def with_file(self, path: str | os.PathLike[str], *, ignore_unknown: bool = False) -> Policy:
        """A new policy with the policy file at `path` applied on top of this one.

        Raises `PolicyError` when the file cannot be read, is not strict JSON (duplicate keys
        included: a second entry for a tool must not silently win), breaks the schema, names a
        tool this policy's registry does not have (unless `ignore_unknown`), or names a sink
        parameter the tool does not take.
        """
        source = os.fspath(path)
        try:
            text = read_bounded_text(source, "policy file")
        except FileRefused as exc:
            raise PolicyError(str(exc)) from None
        return self.with_document(_parse_json(text, source), source=source, ignore_unknown=ignore_unknown)

    def with_document(
        self, document: Any, *, source: str = "<policy document>", ignore_unknown: bool = False
    ) -> Policy:
        """A new policy with a parsed policy document applied (see `with_file`).

        Entries override or extend the tools' own declarations: `output` replaces the
        tool's output provenance, and each parameter under `sinks` replaces (or adds) what
        that parameter accepts; sinks the file does not mention stay as they were.

        A tool name the registry does not have is an error, so that a typo cannot silently
        leave a payment unguarded. A deployment that narrows its registry (``--allow``, a
        manifest) while sharing one policy file across deployments passes
        `ignore_unknown=True`: entries for tools that cannot be called are then skipped.
        A policy built without a registry accepts any tool name.
        """
        _validate_document(document, source)
        tools = dict(self._tools)
        for name, entry in document["tools"].items():
            if self._registry is not None and name not in self._registry:
                if ignore_unknown:
                    continue
                raise PolicyError(_unknown_tool_message(source, name, self._registry.names))
            current = tools.get(name)
            if current is None:  # no registry: an entry for a tool not declared anywhere yet
                current = ToolPolicy("trusted", _frozen_sinks({}))
            sinks = dict(current.sinks)
            for param, allowed in entry.get("sinks", {}).items():
                _check_sink_param(source, name, param, self._registry)
                sinks[param] = frozenset(allowed)
            output = cast(OutputProvenance, entry.get("output", current.output))
            fields = dict(current.fields)
            for pointer, label in entry.get("fields", {}).items():
                try:
                    parse_field_pointer(pointer)
                except ValueError as exc:
                    raise PolicyError(f"policy {source!r}: tool {name!r}: {exc}") from None
                fields[pointer] = label
            stores = dict(current.stores)
            for param, landings in parse_stores(entry.get("stores", {})).items():
                _check_sink_param(source, name, param, self._registry)
                stores[param] = landings
            if fields and output == "derived":
                raise PolicyError(
                    f"policy {source!r}: tool {name!r} is derived (its output has its inputs' labels); "
                    "'fields' applies to trusted or untrusted outputs"
                )
            egress = bool(entry.get("egress", current.egress))
            endorse = set(current.endorse)
            endorse_call = current.endorse_call
            on_violation = entry.get("on_violation", {})
            if isinstance(on_violation, str):  # the whole call (pte._policy._endorsement)
                endorse_call = on_violation == "endorse"
                on_violation = {}
            for param, action in on_violation.items():
                _check_sink_param(source, name, param, self._registry)
                if action == "endorse":
                    endorse.add(param)
                else:
                    endorse.discard(param)
            call = current.call if "call" not in entry else frozenset(entry["call"])
            tools[name] = ToolPolicy(
                output,
                _frozen_sinks(sinks),
                MappingProxyType(fields),
                MappingProxyType(stores),
                egress,
                frozenset(endorse),
                call,
                endorse_call,
                schema_labels=current.schema_labels,
            )
        default = cast(DefaultMode, document.get("default", self.default))
        return Policy(tools, registry=self._registry, sources=(*self.sources, source), default=default)

    # -- checking plans -----------------------------------------------------------------------

    def check(
        self,
        *,
        literal: str = "request",
        prior: Mapping[str, frozenset[str]] | None = None,
        request_literals: Iterable[str] = (),
        prior_trees: Mapping[str, LabelTree] | None = None,
        exposure: Iterable[str] = (),
        decided: Decided | None = None,
        endorsable: bool = False,
    ) -> PolicyCheck:
        """A compile check enforcing this policy; pass it to `compile_plan(checks=...)`.

        `literal`: what the plan's literals count as (``request``; ``untrusted`` for a replan
        whose prompt showed untrusted data). `prior`: label sets of steps completed before
        this plan (a replan may reference them); a prior step missing from it gets its tool's
        declared output label, or every label when that tool is derived (its inputs are
        unknown here, so assume the worst). `request_literals`: canonical JSON of literal values
        known to come from the request (see `plan_literals`); they stay ``request`` in a replan.
        `exposure`: labels of what the plan's writer was shown (pte._run._exposure), joined into the
        label of every call: ``{"untrusted"}`` makes every guarded sink of the plan refuse.
        `decided`: run-level labels of what decided that this plan runs at all (the requires and
        failures of the earlier stages and plans: the last check's `PolicyCheck.completion`);
        every call of the plan carries them (docs/labels.md).
        `endorsable`: the engine can pause for a person's endorsement (pte._policy._endorsement): a
        plan whose only violations are values reaching sinks the policy marks
        ``on_violation: "endorse"`` (of write tools) compiles, those steps listed in
        `PolicyCheck.endorsements`. Without it (the default) such a plan is refused as before.
        """
        return PolicyCheck(
            self,
            literal=literal,
            prior=prior,
            request_literals=request_literals,
            prior_trees=prior_trees,
            exposure=exposure,
            decided=decided,
            endorsable=endorsable,
        )

    def label_plan(
        self,
        plan: Plan | CompileContext,
        *,
        literal: str = "request",
        prior: Mapping[str, frozenset[str]] | None = None,
        request_literals: Iterable[str] = (),
    ) -> dict[str, frozenset[str]]:
        """The label set of every step of a compiled plan (or of a context past `check_acyclic`).

        Nothing is enforced: this explains a plan (tests, ``pte plan --explain``) and gives an
        engine the labels of the steps it ran, to carry into a replan as `prior`.
        """
        return _flow_graph(self, plan, literal, prior, frozenset(request_literals)).label_all()

    def _entry(self, tool: str, registry: Registry | None) -> ToolPolicy:
        spec = registry.get(tool) if registry is not None else None
        if spec is None and self._registry is not None:
            spec = self._registry.get(tool)
        entry = self._tools.get(tool)
        if entry is None:
            if spec is None:
                raise KeyError(tool)
            # A tool outside this policy's registry: its own declarations are all we know.
            entry = _declared(spec)
        guard_all = entry.egress or (
            self.default == "guarded" and spec is not None and spec.effect == "write"
        )
        if spec is None or not guard_all:
            return dataclasses.replace(entry, decided_by=_call_sink(entry, None))
        params = spec.input_schema.get("properties") or {}
        # The idempotency key is the engine's, never a plan's: not a sink (pte._catalogue._idempotency).
        missing = [p for p in params if p not in entry.sinks and p != spec.idempotency_key]
        # Declared sinks first (their order is the check order), then the guarded defaults.
        sinks = dict(entry.sinks)
        sinks.update(dict.fromkeys(missing, _GUARDED))
        return dataclasses.replace(entry, sinks=_frozen_sinks(sinks), decided_by=_call_sink(entry, _GUARDED))


class PolicyCheck:
    """A compile check (a callable taking a `CompileContext`) that enforces a `Policy`.

    It labels every step in topological order, stores the label sets in
    ``ctx.provenance`` (step id -> frozenset of labels, this plan's steps only) and
    in `labels`, then checks every sink parameter in plan order and raises
    `PlanRejected(policy_violation)` on the first violation.
    """

    def __init__(
        self,
        policy: Policy,
        *,
        literal: str = "request",
        prior: Mapping[str, frozenset[str]] | None = None,
        request_literals: Iterable[str] = (),
        prior_trees: Mapping[str, LabelTree] | None = None,
        exposure: Iterable[str] = (),
        decided: Decided | None = None,
        endorsable: bool = False,
    ) -> None:
        if literal not in LABELS:
            raise ValueError(f"literal must be one of {list(LABELS)}, not {literal!r}")
        self.policy = policy
        #: Labels of what the plan's writer was shown, joined into every call (pte._run._exposure).
        self.exposure: frozenset[str] = frozenset(
            _checked_prior({"exposure": frozenset(exposure)})["exposure"]
        )
        #: Field-level labels of prior steps (pte._policy._labels); `prior` stays the whole-output view.
        self.prior_trees: Mapping[str, LabelTree] = MappingProxyType(dict(prior_trees or {}))
        #: Field-level labels of the last plan this check labelled.
        self.trees: dict[str, LabelTree] = {}
        self.literal = literal
        self.prior: Mapping[str, frozenset[str]] = MappingProxyType(_checked_prior(prior))
        self.request_literals = frozenset(request_literals)
        #: Label sets of the last plan this check labelled (also in ctx.provenance).
        self.labels: dict[str, frozenset[str]] = {}
        #: The labels of each step's arguments (what its error message may quote).
        self.input_labels: dict[str, frozenset[str]] = {}
        #: The labels of what decides whether each call runs (docs/labels.md): its condition,
        #: list, the requires and failures before it, the run-level `decided` labels.
        self.decisions: dict[str, frozenset[str]] = {}
        #: The labels of what decides whether each step runs and fails: a replan after its
        #: failure carries them (pte._run._stages.decided_for).
        self.triggers: dict[str, frozenset[str]] = {}
        #: Run-level labels of what decided that the plan runs at all (see `Policy.check`).
        self.decided = decided or Decided()
        #: What decides whether anything after the last plan this check labelled runs (a next
        #: stage, a replan): `decided` joined with every require and failure of that plan.
        self.completion: Decided = self.decided
        self.endorsable = endorsable
        #: Steps of the last plan this check accepted that need a person's endorsement:
        #: step id -> {parameter: the violation's explanation (its provenance chain)}; a step
        #: whose only violation is what decides it runs has no parameters here.
        self.endorsements: dict[str, dict[str, str]] = {}
        #: step id -> the decisions a person is shown (and endorses) with the call: what brings
        #: untrusted data into whether and how often it runs (`_FlowGraph.call_decisions`).
        self.endorse_decisions: dict[str, list[dict[str, Any]]] = {}

    def configured(
        self,
        *,
        literal: str | None = None,
        prior: Mapping[str, frozenset[str]] | None = None,
        request_literals: Iterable[str] | None = None,
        decided: Decided | None = None,
    ) -> PolicyCheck:
        """The same check for another compile: a replan's literal rule and completed steps."""
        return PolicyCheck(
            self.policy,
            literal=self.literal if literal is None else literal,
            prior=self.prior if prior is None else prior,
            request_literals=self.request_literals if request_literals is None else request_literals,
            prior_trees=self.prior_trees,
            exposure=self.exposure,
            decided=self.decided if decided is None else decided,
            endorsable=self.endorsable,
        )

    def __call__(self, ctx: CompileContext) -> None:
        graph = _flow_graph(self.policy, ctx, self.literal, self.prior, self.request_literals, self.decided)
        graph.prior_trees = self.prior_trees
        graph.exposure = self.exposure
        labels = graph.label_all()
        self.labels = labels
        self.completion = graph.completion
        self.input_labels = {step.id: graph.input_labels(step) for step in graph.steps}
        self.decisions = {step.id: graph.implicit_labels(step) for step in graph.steps}
        self.triggers = {step.id: graph.trigger_labels(step) for step in graph.steps}
        self.trees = {sid: graph.trees[sid] for sid in labels}
        ctx.provenance = dict(labels)
        self.endorsements = {}
        self.endorse_decisions = {}
        needs: dict[str, dict[str, str]] = {}
        decisions: dict[str, list[dict[str, Any]]] = {}
        for step, param, violation in graph.violations():
            if not self.endorsable or not self._write(graph, step.tool):
                raise violation
            entry = graph.entry(step.tool)
            if param is not None:
                if not (entry.endorse_call or param in entry.endorse):
                    raise violation
                needs.setdefault(step.id, {})[param] = violation.message
                continue
            # Whether (and how often) it runs: endorsable where its values are (or the call
            # is), and only for decisions a person can be shown at the call.
            shown = None
            if entry.endorse_call or entry.endorse:
                assert entry.decided_by is not None
                shown = graph.call_decisions(
                    graph.index[step.id], graph.implicit_labels(graph.index[step.id]) - entry.decided_by
                )
            if not shown:
                raise violation
            needs.setdefault(step.id, {})
            decisions[step.id] = shown
        self.endorsements = needs
        self.endorse_decisions = decisions
        if needs:
            ctx.needs_endorsement = {sid: sorted(params) for sid, params in needs.items()}

    @staticmethod
    def _write(graph: Any, tool: str) -> bool:
        # Only a write's call waits at its turn, after every earlier step is recorded: the
        # place a run can pause for a person without losing or repeating anything.
        spec = graph.spec(tool)
        return spec is not None and spec.effect == "write"

    def __repr__(self) -> str:
        return f"PolicyCheck(literal={self.literal!r}, prior={len(self.prior)} step(s))"


def load_policy(
    registry: Registry, path: str | os.PathLike[str] | None, *, ignore_unknown: bool = False
) -> Policy:
    """The policy for `registry`: the tools' own declarations, with the file at `path` applied (if any)."""
    policy = Policy.from_registry(registry)
    if path is None:
        return policy
    return policy.with_file(path, ignore_unknown=ignore_unknown)


# --- the policy file ---------------------------------------------------------------------------


def _parse_json(text: str, source: str) -> Any:
    try:
        return strict_json.loads(text)
    except StrictJSONError as exc:
        raise PolicyError(f"policy file {source!r} is not valid JSON: {exc.message}") from None


@cache
def _validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(load_schema(_SCHEMA_FILE))


def _validate_document(document: Any, source: str) -> None:
    error = jsonschema.exceptions.best_match(_validator().iter_errors(document))
    if error is not None:
        where = json_path(error.absolute_path)
        raise PolicyError(f"policy {source!r} is invalid at {where}: {error.message}")


def _unknown_tool_message(source: str, name: str, known: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return (
        f"policy {source!r} names tool {name!r}, which is not in the registry "
        f"({', '.join(known) or 'none'}){hint} "
        "(load it with ignore_unknown=True to skip tools this deployment does not allow)"
    )


def _check_sink_param(source: str, tool: str, param: str, registry: Registry | None) -> None:
    if registry is None or tool not in registry:
        return
    params = registry[tool].input_schema.get("properties", {})
    if param not in params:
        raise PolicyError(
            f"policy {source!r}: tool {tool!r} has no parameter {param!r} to guard "
            f"(its parameters: {', '.join(params) or 'none'})"
        )
