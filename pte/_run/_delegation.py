"""Delegation: a coordinator's plan hands tasks to specialists, whose sub-plans are inlined.

A coordinating planner (shown the specialists' descriptions instead of their tools,
pte._plan._specialists) writes a delegate step::

    {"id": "x", "delegate": "payments", "task": "Pay the invoice", "inputs": {"invoice": {"$ref": "inv"}}}

Before anything runs, `compile_delegating`

1. refuses a step naming a tool only a specialist may use, or an unknown specialist
   (``tool_not_allowed``, saying what the coordinator may use);
2. asks each delegated specialist, in step order, for a sub-plan (an ``llm_call`` of role
   ``specialist``, recorded like every call): its prompt holds only its catalogue, the task text
   and each input's schema and labels (handles: never a value);
3. checks the sub-plan against the specialist's catalogue alone (a tool outside it is
   ``tool_not_allowed``, telling the model what it may use; it reads only declared inputs and
   its own steps);
4. inlines every sub-plan as a procedure body (pte._plan._procedures): the inputs are its
   ``$param``s, its steps run as ``x__STEP`` (path ``x/STEP``), later references to ``x``
   read its result; and compiles the whole tree against the deployment's catalogue with the
   coordinator's checks: types, labels (an input's labels flow into the sub-plan exactly as if
   it had been written inline), policy, limits and, by the engine, approval, as one plan.

A sub-plan rejected for a reason its writer can fix goes back to the specialist once
(pte._run._repair's rule and budget: a ``repair`` record of origin ``specialist``). The executor
never calls a model: every specialist is asked before the first step runs. Replay re-drives
the same code with the recorded answers, so it asks the same questions and decides the same.

`compile_delegating` is a generator of its inputs that never calls out: it yields what it needs
done (`CompileText`, `AskSpecialist`, `RepairSpecialist`) and the run loop (pte._run._loop), which
writes every record and asks every model, does it and sends the answer back in (a rejected
compile is thrown in as the `PlanRejected`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Generator, Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import pte._run._prompts as prompts
from pte._core import (
    REPAIRABLE_REASONS,
    FailedClosed,
    PlanRejected,
    ReasonCode,
    StrictJSONError,
    canonical_json,
    sha256_hex,
)
from pte._core import strict_json as strict_json
from pte._plan import (
    PATH_SEPARATOR,
    Procedure,
    Reference,
    Specialist,
    check_inlined_ids,
    expand_procedures,
    json_path,
    owned_tools,
    specialist_registry,
)
from pte._policy import LabelTree, schema_at
from pte._run._exposure import literal_of
from pte._run._repair import may_repair

if TYPE_CHECKING:
    from pte._catalogue import Registry
    from pte._plan import Plan
    from pte._policy import PolicyCheck
    from pte._run._state import Planning, PlanOrigin, RunState

__all__ = [
    "AskSpecialist",
    "CompileText",
    "Delegating",
    "RepairSpecialist",
    "compile_delegating",
    "delegates",
]

_STEP_ID = re.compile(r"[a-z][a-z0-9_]{0,63}")
_INPUT = re.compile(r"[a-z][a-z0-9_]{0,31}")
#: A rejection's path into a plan's steps, ``$.steps[3]...``: ASCII digits (`\d` takes any script's).
_STEP_PATH = re.compile(r"\$\.steps\[(0|[1-9][0-9]*)\]")
_DELEGATE_KEYS = frozenset({"id", "delegate", "task", "inputs", "after"})
#: The tool name a delegate step takes while its sub-plan is inlined (no tool can have it).
_CALL = "<delegate:{}>"


@dataclass(frozen=True)
class CompileText:
    """Compile this text as a plan of the coordinator's origin (no record written): send back
    ``(plan, policy_check)``, or throw in the `PlanRejected`."""

    text: str


@dataclass(frozen=True)
class AskSpecialist:
    """Ask a specialist's model for a sub-plan (an ``llm_call`` of role ``specialist``): send
    back its answer text."""

    messages: list[dict[str, str]]


@dataclass(frozen=True)
class RepairSpecialist:
    """A sub-plan goes back to its specialist: count a replan and write its ``repair`` record
    (origin ``specialist``) before the question is asked again."""

    rejection: PlanRejected
    specialist: str


Request = CompileText | AskSpecialist | RepairSpecialist
_T = TypeVar("_T")
#: What a delegation yields, is sent, and returns.
Steps = Generator[Request, Any, _T]
Delegating = Steps["tuple[Plan, PolicyCheck]"]


def delegates(document: Any) -> bool:
    """Whether a plan document has a delegate step."""
    steps = document.get("steps") if isinstance(document, dict) else None
    return isinstance(steps, list) and any(isinstance(s, dict) and "delegate" in s for s in steps)


@dataclass
class _Delegation:
    index: int
    step: dict[str, Any]
    specialist: Specialist
    messages: list[dict[str, str]] = field(default_factory=list)
    text: str = ""
    body: dict[str, Any] = field(default_factory=dict)
    repaired: bool = False

    @property
    def call_id(self) -> str:
        return str(self.step["id"])


def _text(document: Any) -> str:
    """A document as plan text for the compiler. Not canonical JSON: that writes a whole-number
    float beyond 2**53 as an integer, which the compiler then refuses; ``json.dumps`` keeps a
    float a float, as the model wrote it."""
    return json.dumps(document, ensure_ascii=False, allow_nan=False)


def _reject(reason: ReasonCode, message: str, *path: str | int) -> PlanRejected:
    return PlanRejected(reason, message, json_path(path))


def compile_delegating(planning: Planning, run: RunState, origin: PlanOrigin, text: str) -> Delegating:
    """Compile a coordinator's plan with its delegations inlined (see the module docstring)."""
    compiled: tuple[Plan, PolicyCheck]
    try:
        document = strict_json.loads(text)
    except (StrictJSONError, ValueError, RecursionError):
        compiled = yield CompileText(text)  # the compiler reports it
        return compiled
    if not isinstance(document, dict) or not isinstance(document.get("steps"), list):
        compiled = yield CompileText(text)
        return compiled
    if not all(isinstance(s, dict) and isinstance(s.get("id"), str) for s in document["steps"]):
        compiled = yield CompileText(text)  # a step of no shape: the schema check reports it
        return compiled
    specialists = {spec.name: spec for spec in planning.config.specialists}
    _check_coordinator_tools(document, specialists, planning.registry)
    if not delegates(document):
        compiled = yield CompileText(text)
        return compiled
    _check_delegate_ids(document, run)
    calls = [
        _delegation(index, step, specialists)
        for index, step in enumerate(document["steps"])
        if isinstance(step, dict) and "delegate" in step
    ]
    views = yield from _input_views(planning, run, origin, document, {c.call_id for c in calls})
    for call in calls:
        yield from _ask(planning, run, call, views.get(call.call_id, {}))
    while True:
        inlined = _inline(document, calls)
        try:
            compiled = yield CompileText(_text(inlined))
            return compiled
        except PlanRejected as rejection:
            blamed = _blamed(inlined, calls, planning.registry, rejection)
            if blamed is None:
                raise
            call, step_id = blamed
            yield from _repair(planning, run, call, _for_specialist(rejection, call, step_id))


def _check_delegate_ids(document: dict[str, Any], run: RunState) -> None:
    """A delegate step's id is unique (`check_inlined_ids`, as a procedure call's)."""
    check_inlined_ids(document["steps"], lambda step: "delegate" in step, run.prior)


def _check_coordinator_tools(
    document: dict[str, Any], specialists: Mapping[str, Specialist], registry: Registry
) -> None:
    """A coordinator's own step may not name a tool only a specialist may use."""
    owned = owned_tools(specialists.values(), registry)
    for index, step in enumerate(document["steps"]):
        tool = step.get("tool") if isinstance(step, dict) else None
        if isinstance(tool, str) and tool in owned:
            raise _reject(
                ReasonCode.TOOL_NOT_ALLOWED,
                f"tool {tool!r} is one of specialist {owned[tool]!r}'s tools, not yours: delegate the "
                f'task to it ({{"id": ..., "delegate": "{owned[tool]}", "task": ..., "inputs": ...}})',
                "steps",
                index,
                "tool",
            )


def _delegation(index: int, step: Any, specialists: Mapping[str, Specialist]) -> _Delegation:
    """A delegate step, checked for shape; an unknown specialist is tool_not_allowed."""
    unknown = sorted(set(step) - _DELEGATE_KEYS)
    if unknown:
        raise _reject(
            ReasonCode.SCHEMA_VIOLATION,
            f"a delegate step takes id, delegate, task, inputs and after; not {unknown}",
            "steps",
            index,
        )
    if not isinstance(step.get("id"), str) or not _STEP_ID.fullmatch(step["id"]):
        raise _reject(
            ReasonCode.SCHEMA_VIOLATION,
            "a delegate step needs an id (^[a-z][a-z0-9_]{0,63}$)",
            "steps",
            index,
            "id",
        )
    name = step["delegate"]
    spec = specialists.get(name) if isinstance(name, str) else None
    if spec is None:
        raise _reject(
            ReasonCode.TOOL_NOT_ALLOWED,
            f"there is no specialist {name!r}; the specialists are {sorted(specialists)}",
            "steps",
            index,
            "delegate",
        )
    if not isinstance(step.get("task"), str) or not step["task"].strip():
        raise _reject(
            ReasonCode.SCHEMA_VIOLATION, "a delegate step needs a task (text)", "steps", index, "task"
        )
    inputs = step.get("inputs", {})
    if not isinstance(inputs, dict) or not all(_INPUT.fullmatch(k) for k in inputs):
        raise _reject(
            ReasonCode.SCHEMA_VIOLATION,
            "inputs is an object whose names match ^[a-z][a-z0-9_]{0,31}$",
            "steps",
            index,
            "inputs",
        )
    after = step.get("after", [])
    if not isinstance(after, list) or not all(isinstance(a, str) for a in after):
        raise _reject(ReasonCode.SCHEMA_VIOLATION, "after is a list of step ids", "steps", index, "after")
    return _Delegation(index, step, spec)


# --- what a specialist is shown of its inputs ---------------------------------------------------


def _refs(value: Any) -> list[str]:
    out: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if len(item) == 1 and isinstance(item.get("$ref"), str):
                out.append(item["$ref"])
            else:
                stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return out


def _depends(step: Mapping[str, Any]) -> set[str]:
    deps = {
        Reference.parse(r).step for r in _refs({k: v for k, v in step.items() if k != "id"}) if _valid_ref(r)
    }
    after = step.get("after")
    if isinstance(after, list):
        deps |= {a for a in after if isinstance(a, str)}
    return deps


def _valid_ref(text: str) -> bool:
    try:
        Reference.parse(text)
    except (ValueError, TypeError):
        return False
    return True


def _input_views(
    planning: Planning, run: RunState, origin: PlanOrigin, document: dict[str, Any], calls: set[str]
) -> Steps[dict[str, dict[str, tuple[Any, list[str]]]]]:
    """Each delegation's inputs as handles: (schema, labels), never a value.

    Types and labels come from compiling the coordinator's steps that do not wait for a
    delegation (the prefix), with the same checks; what cannot be told is shown ``unknown``.
    Only a prompt's view: the whole tree is labelled and checked again once inlined.
    """
    steps = [s for s in document["steps"] if isinstance(s, dict)]
    waiting = set(calls)
    changed = True
    while changed:
        changed = False
        for step in steps:
            sid = step.get("id")
            if isinstance(sid, str) and sid not in waiting and _depends(step) & waiting:
                waiting.add(sid)
                changed = True
    prefix = [s for s in steps if s.get("id") not in waiting]
    plan = check = None
    if prefix:
        with suppress(PlanRejected):  # the whole tree's compile reports it
            plan, check = yield CompileText(_text({"pte_plan": "1", "steps": prefix, "result": None}))
    literal = "request" if origin == "file" else literal_of(run)

    def view(value: Any) -> tuple[Any, list[str]]:
        if isinstance(value, dict) and len(value) == 1 and isinstance(value.get("$ref"), str):
            return _ref_view(planning.registry, run, plan, check, value["$ref"])
        refs = _refs(value)
        labels = {literal}
        for ref in refs:
            labels |= set(_ref_view(planning.registry, run, plan, check, ref)[1])
        return {"type": _json_type(value)}, sorted(labels)

    out: dict[str, dict[str, tuple[Any, list[str]]]] = {}
    for step in steps:
        if step.get("id") in calls and isinstance(step.get("inputs"), dict):
            out[step["id"]] = {name: view(value) for name, value in step["inputs"].items()}
    return out


def _ref_view(
    registry: Registry, run: RunState, plan: Plan | None, check: PolicyCheck | None, text: str
) -> tuple[Any, list[str]]:
    if not _valid_ref(text):
        return {}, ["unknown"]
    ref = Reference.parse(text)
    tokens = tuple(ref.tokens)
    tree: LabelTree | None = None
    schema: Any = None
    if plan is not None and check is not None and ref.step in check.trees:
        tree = check.trees[ref.step]
        step = plan.step(ref.step)
        schema = plan.output_schema(ref.step)
        spec = registry.get(step.tool)
        if schema is None and spec is not None:
            schema = spec.output_schema
            if step.for_each is not None:
                schema = {"type": "array", "items": schema, "$defs": schema.get("$defs", {})}
    elif ref.step in run.prior:
        tree = run.label_trees.get(ref.step)
        spec = registry.get(run.prior[ref.step])
        schema = run.output_types.get(ref.step) or (spec.output_schema if spec is not None else None)
    if tree is None:
        return {}, ["unknown"]
    described = schema_at(schema, schema, tokens) if isinstance(schema, Mapping) else None
    return described or {}, sorted(tree.select(tokens))


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


# --- asking, checking and inlining ----------------------------------------------------------------


def _ask(
    planning: Planning, run: RunState, call: _Delegation, inputs: Mapping[str, tuple[Any, list[str]]]
) -> Steps[None]:
    spec = call.specialist
    registry = specialist_registry(spec, planning.registry)
    call.messages = prompts.specialist_messages(
        spec.name, spec.instructions, registry, planning.policy, call.step["task"], inputs
    )
    call.text = yield AskSpecialist(call.messages)
    try:
        call.body = _checked(call, call.text)
    except PlanRejected as rejection:
        yield from _repair(planning, run, call, rejection)


def _repair(planning: Planning, run: RunState, call: _Delegation, rejection: PlanRejected) -> Steps[None]:
    """A sub-plan rejected for a fixable reason goes back to its specialist once (pte._run._repair)."""
    where = f"specialist {call.specialist.name!r} (step {call.call_id!r})"
    if call.repaired or not may_repair(planning.config, run.replans, "specialist", rejection):
        if call.repaired and rejection.reason in REPAIRABLE_REASONS:
            raise FailedClosed(
                ReasonCode.REPLANS_EXHAUSTED,
                f"the sub-plan of {where} was sent back once and rejected again "
                f"({rejection.reason.value} at {rejection.path}: {rejection.message})",
            ) from None
        raise PlanRejected(
            rejection.reason, f"the sub-plan of {where}: {rejection.message}", call_path(call)
        ) from None
    call.repaired = True
    yield RepairSpecialist(rejection, call.specialist.name)  # the loop counts and records it
    messages = prompts.repair_messages(
        call.messages,
        call.text,
        rejection.to_dict(),
        literals=literal_of(run),
        registry=specialist_registry(call.specialist, planning.registry),
        policy=planning.policy,
    )
    call.text = yield AskSpecialist(messages)
    try:
        call.body = _checked(call, call.text)
    except PlanRejected as again:
        yield from _repair(planning, run, call, again)


def call_path(call: _Delegation) -> str:
    return json_path(("steps", call.index))


def _checked(call: _Delegation, text: str) -> dict[str, Any]:
    """A sub-plan, checked against what the specialist may use and read."""
    spec = call.specialist
    try:
        body = strict_json.loads(text)
    except (StrictJSONError, ValueError, RecursionError) as exc:
        raise _reject(ReasonCode.INVALID_JSON, f"not valid JSON: {exc}") from None
    if not isinstance(body, dict) or not isinstance(body.get("steps"), list) or not body["steps"]:
        raise _reject(
            ReasonCode.SCHEMA_VIOLATION, 'a sub-plan is {"pte_plan": "1", "steps": [...], "result": ...}'
        )
    if "continue" in body:
        raise _reject(ReasonCode.SCHEMA_VIOLATION, "a sub-plan ends with result, not continue", "continue")
    inputs = call.step.get("inputs", {})
    ids = set()
    for index, step in enumerate(body["steps"]):
        if not isinstance(step, dict) or not isinstance(step.get("id"), str):
            raise _reject(ReasonCode.SCHEMA_VIOLATION, "every step needs an id", "steps", index)
        ids.add(step["id"])
        if PATH_SEPARATOR in step["id"]:
            raise _reject(
                ReasonCode.SCHEMA_VIOLATION,
                f"step id {step['id']!r} may not contain '__'",
                "steps",
                index,
                "id",
            )
        if "delegate" in step:
            raise _reject(
                ReasonCode.TOOL_NOT_ALLOWED,
                f"a specialist cannot delegate; use only your tools: {', '.join(spec.catalogue)}",
                "steps",
                index,
                "delegate",
            )
        tool = step.get("tool")
        if "require" not in step and tool not in spec.catalogue:
            raise _reject(
                ReasonCode.TOOL_NOT_ALLOWED,
                f"tool {tool!r} is not in specialist {spec.name!r}'s catalogue; it may use only: "
                f"{', '.join(spec.catalogue)}",
                "steps",
                index,
                "tool",
            )
    for index, step in enumerate(body["steps"]):
        for name in _params(step):
            if name not in inputs:
                raise _reject(
                    ReasonCode.BAD_REFERENCE,
                    f"$param {name!r} is not an input of this task (inputs: {sorted(inputs)})",
                    "steps",
                    index,
                )
        for ref in _refs(step):
            if _valid_ref(ref) and Reference.parse(ref).step not in ids:
                raise _reject(
                    ReasonCode.BAD_REFERENCE,
                    f"reference {ref!r}: a sub-plan references only its own steps ({sorted(ids)}); "
                    'read the task\'s inputs as {"$param": NAME}',
                    "steps",
                    index,
                )
    for name in _params(body.get("result")):
        if name not in inputs:
            raise _reject(ReasonCode.BAD_REFERENCE, f"$param {name!r} is not an input of this task", "result")
    return body


def _params(value: Any) -> list[str]:
    out: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if len(item) == 1 and isinstance(item.get("$param"), str):
                out.append(item["$param"])
            else:
                stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return out


def _inline(document: dict[str, Any], calls: list[_Delegation]) -> dict[str, Any]:
    """The plan with every delegate step replaced by its sub-plan (as a procedure call)."""
    procedures: dict[str, Procedure] = {}
    steps = list(document["steps"])
    for call in calls:
        name = _CALL.format(call.call_id)
        inputs = dict(call.step.get("inputs", {}))
        procedures[name] = Procedure(
            name=name,
            description=call.step["task"],
            parameters={"type": "object", "properties": {k: {} for k in inputs}, "required": sorted(inputs)},
            body=call.body,
            version=sha256_hex(canonical_json(call.body)),
        )
        replacement: dict[str, Any] = {"id": call.call_id, "tool": name, "args": inputs}
        if "after" in call.step:
            replacement["after"] = call.step["after"]
        steps[call.index] = replacement
    return expand_procedures({**document, "steps": steps}, procedures)


def _blamed(
    inlined: Mapping[str, Any], calls: list[_Delegation], registry: Registry, rejection: PlanRejected
) -> tuple[_Delegation, str] | None:
    """The delegation whose sub-plan a rejection of the whole tree points into, if any."""
    match = _STEP_PATH.match(rejection.path)
    if match is None:  # e.g. the coordinator's result reads a part of a sub-plan's
        for call in calls:  # a nested step the message names (``x__step``)
            named = re.search(re.escape(call.call_id + PATH_SEPARATOR) + r"[a-z0-9_]+", rejection.message)
            if named is not None:
                return call, named.group(0)
        return None
    procedures = registry.procedures
    try:
        final = expand_procedures(dict(inlined), procedures) if procedures else inlined
    except PlanRejected:
        final = inlined
    steps = final.get("steps") or []
    index = int(match.group(1))
    if index >= len(steps) or not isinstance(steps[index], dict):
        return None
    step_id = str(steps[index].get("id", ""))
    for call in calls:
        if step_id.startswith(call.call_id + PATH_SEPARATOR):
            return call, step_id
    return None


def _for_specialist(rejection: PlanRejected, call: _Delegation, step_id: str) -> PlanRejected:
    """A rejection of the inlined tree as the specialist reads it: its own step ids and paths."""
    prefix = call.call_id + PATH_SEPARATOR
    own = step_id[len(prefix) :].split(PATH_SEPARATOR)[0]
    ids = [s.get("id") for s in call.body.get("steps", [])]
    path = rejection.path
    match = _STEP_PATH.match(path)
    if match is not None and own in ids:
        path = f"$.steps[{ids.index(own)}]" + path[match.end() :]
    return PlanRejected(rejection.reason, rejection.message.replace(prefix, ""), path)
