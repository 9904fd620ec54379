"""Procedures: named, versioned plans a plan calls like a tool, compiled by inlining.

A procedure is one JSON file (schemas/procedure.schema.json)::

    {"pte_procedure": "1", "name": "pay_supplier", "description": "...",
     "parameters": {"type": "object", "properties": {...}, "required": [...]},
     "plan": {"pte_plan": "1", "steps": [...], "result": ...}}

where the body reads its arguments as ``{"$param": "NAME"}``. The deployment loads a folder
of them (`load_procedures`) and attaches them to its registry (`Registry.with_procedures`).
A plan calls one as ``{"id": "x", "tool": "pay_supplier", "args": {...}}``.

Compile expands every call before any other check (`expand_procedures`, the compile
pipeline's second step): the call is replaced, in place, by its body's steps, each renamed
``x__STEP`` (its path ``x/STEP``: ``__`` is the separator, which body step ids may not
contain), ``$param`` replaced by the call's argument (a reference or a literal, verbatim),
and every reference to the call's output replaced by the body's result. The compiled plan is
then an ordinary plan: types, labels, policy, limits, approval and the audit log see exactly
the steps that run, as if the body had been written inline. Nothing new runs: a procedure
is never executed as a unit, so it cannot hide a step from the log or the policy.

Authority: procedures come from the deployment's folder (like the tool packs), never from a
plan or a log. Loading refuses a body that names a tool outside the deployment's allow-list
or calls a procedure that calls it back (directly or through others).
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema

from pte._core import (
    ExplainingValidator,
    FileRefused,
    PlanRejected,
    ProcedureError,
    ReasonCode,
    array_index,
    canonical_json,
    check_folder,
    load_schema,
    read_bounded_text,
    sha256_hex,
    strict_json,
)
from pte._plan._model import ProcedureOrigin, Reference

__all__ = [
    "PATH_SEPARATOR",
    "Procedure",
    "check_inlined_ids",
    "expand_procedures",
    "expand_with_origins",
    "load_procedures",
    "procedure_schema",
    "procedures_record",
    "recorded_procedures",
    "step_path",
]

#: Largest procedure file read: a procedure's body is a plan (1 MB at most), with its header.
MAX_PROCEDURE_FILE_BYTES = 2_000_000

#: The separator of a nested step's id: call ``x`` of a body step ``fetch`` runs as ``x__fetch``.
#: Step ids allow only ``[a-z0-9_]`` and references use ``/``, so the path ``x/fetch`` is written
#: with ``__``; body step ids may not contain it, so a nested id splits back into its path.
PATH_SEPARATOR = "__"

#: How deep procedures may call procedures (a cycle is refused at load; this bounds the text).
MAX_NESTING = 8


@cache
def procedure_schema() -> dict[str, Any]:
    """The procedure file JSON Schema (schemas/procedure.schema.json)."""
    return load_schema("procedure.schema.json")


@dataclass(frozen=True)
class Procedure:
    """A loaded procedure: its file's document and version (the SHA-256 of its canonical JSON)."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    body: Mapping[str, Any]
    version: str
    source: str = ""

    @classmethod
    def from_document(cls, document: Any, source: str = "") -> Procedure:
        """Check one procedure document against the schema and its own structure."""
        where = source or "procedure"
        try:
            jsonschema.Draft202012Validator(procedure_schema()).validate(document)
        except jsonschema.ValidationError as exc:
            path = "/".join(str(p) for p in exc.absolute_path)
            raise ProcedureError(f"{where}: not a procedure file: {exc.message[:300]} (at /{path})") from None
        name = document["name"]
        body = document["plan"]
        params = document["parameters"].get("properties", {})
        for index, step in enumerate(body["steps"]):
            step_id = step.get("id", "")
            if PATH_SEPARATOR in step_id:
                raise ProcedureError(
                    f"procedure {name!r}: step id {step_id!r} contains {PATH_SEPARATOR!r}, "
                    "the separator of nested step paths"
                )
            for used in _params_used(step):
                if used not in params:
                    raise ProcedureError(
                        f"procedure {name!r}: step {step_id or index!r} reads $param {used!r}, "
                        f"which its parameters do not declare ({sorted(params)})"
                    )
        for used in _params_used(body.get("result")):
            if used not in params:
                raise ProcedureError(f"procedure {name!r}: its result reads undeclared $param {used!r}")
        return cls(
            name=name,
            description=document["description"],
            parameters=document["parameters"],
            body=body,
            version=sha256_hex(canonical_json(document)),
            source=source,
        )

    def to_document(self) -> dict[str, Any]:
        """The procedure file's document (what ``run_started.config.procedures`` records)."""
        return {
            "pte_procedure": "1",
            "name": self.name,
            "description": self.description,
            "parameters": dict(self.parameters),
            "plan": dict(self.body),
        }

    @property
    def tools(self) -> list[str]:
        """The tools (and procedures) the body calls, in step order."""
        return [s["tool"] for s in self.body["steps"] if "tool" in s]


def _params_used(value: Any) -> Iterable[str]:
    if isinstance(value, dict):
        if set(value) == {"$param"} and isinstance(value["$param"], str):
            yield value["$param"]
            return
        for item in value.values():
            yield from _params_used(item)
    elif isinstance(value, list):
        for item in value:
            yield from _params_used(item)


def load_procedures(folder: str | Path | Iterable[Procedure], registry: Any) -> dict[str, Procedure]:
    """The procedures of a folder (every ``*.json`` file), checked against `registry`.

    Refused (`ProcedureError`, naming the procedure): a file that is not a procedure, two
    procedures of one name, a name that is also a tool's, a body naming a tool outside the
    allow-list (`registry`), and a procedure that calls itself directly or through others.
    """
    procedures: dict[str, Procedure] = {}
    if isinstance(folder, (str, Path)):
        root = Path(folder)
        try:
            check_folder(root, "procedures folder")
        except FileRefused as exc:
            raise ProcedureError(str(exc)) from None
        items = []
        for path in sorted(root.glob("*.json")):
            try:
                # A FIFO named *.json would block the read: refused, as a device or a huge file is.
                text = read_bounded_text(path, "procedure file", MAX_PROCEDURE_FILE_BYTES)
                document = strict_json.loads(text)  # duplicate keys, NaN: refused, as in every authority file
            except FileRefused as exc:
                raise ProcedureError(str(exc)) from None
            except ValueError as exc:
                raise ProcedureError(f"{path.name}: cannot read a procedure: {exc}") from None
            items.append(Procedure.from_document(document, path.name))
    else:
        items = list(folder)
    for proc in items:
        if proc.name in procedures:
            raise ProcedureError(f"two procedures are named {proc.name!r}")
        if proc.name in registry:
            raise ProcedureError(f"procedure {proc.name!r} has the name of a tool")
        procedures[proc.name] = proc
    for proc in procedures.values():
        for tool in proc.tools:
            if tool not in registry and tool not in procedures:
                raise ProcedureError(
                    f"procedure {proc.name!r} calls tool {tool!r}, which is not in the deployment's "
                    "allow-list"
                )
    _check_cycles(procedures)
    return procedures


def _check_cycles(procedures: Mapping[str, Procedure]) -> None:
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        if name in path:
            cycle = " -> ".join([*path[path.index(name) :], name])
            raise ProcedureError(f"procedure {path[0]!r} calls itself: {cycle}")
        if name in done:
            return
        for tool in procedures[name].tools:
            if tool in procedures:
                visit(tool, [*path, name])
        done.add(name)

    for name in procedures:
        visit(name, [])


def procedures_record(procedures: Mapping[str, Procedure]) -> list[dict[str, Any]]:
    """The procedures a run may call, as ``run_started.config.procedures`` records them (by name)."""
    return [procedures[name].to_document() for name in sorted(procedures)]


def recorded_procedures(config: Mapping[str, Any], registry: Any) -> dict[str, Procedure]:
    """The procedures a ``run_started.config`` records, checked against `registry` as at load.

    For replay from the log alone (the recorded catalogue), as the recorded tools are; an
    entry that does not load is left out, so a plan calling it diverges instead of replaying.
    """
    documents = config.get("procedures")
    if not isinstance(documents, list):
        return {}
    try:
        return load_procedures([Procedure.from_document(d) for d in documents], registry)
    except ProcedureError:
        return {}


def step_path(step_id: str) -> str:
    """The path of a (possibly nested) step id: ``x__fetch`` -> ``x/fetch``."""
    return step_id.replace(PATH_SEPARATOR, "/")


# --- expansion ---------------------------------------------------------------------------------


def _reject(reason: ReasonCode, message: str, *path: str | int) -> PlanRejected:
    from pte._plan._context import json_path

    return PlanRejected(reason, message, json_path(path))


def _is_ref(value: Any) -> bool:
    return type(value) is dict and len(value) == 1 and isinstance(value.get("$ref"), str)


def _instantiate(value: Any, prefix: str, body_ids: set[str], args: Mapping[str, Any]) -> Any:
    """A body value with its references renamed into the call and its `$param`s replaced."""
    if isinstance(value, dict):
        if _is_ref(value):
            ref = Reference.parse(value["$ref"])
            if ref.step in body_ids:
                return {"$ref": prefix + str(ref)}
            return value  # a bad reference: the reference check reports it on the expanded plan
        if set(value) == {"$param"} and isinstance(value["$param"], str):
            return args[value["$param"]]  # verbatim: a caller's reference stays the caller's
        return {k: _instantiate(v, prefix, body_ids, args) for k, v in value.items()}
    if isinstance(value, list):
        return [_instantiate(v, prefix, body_ids, args) for v in value]
    return value


_NOT_ON_A_CALL = ("for_each", "max_items", "when", "default")


def _call_args(step: Mapping[str, Any], proc: Procedure, index: int) -> dict[str, Any]:
    """The call's arguments, checked against the parameters (defaults filled in)."""
    params = proc.parameters
    props: Mapping[str, Any] = params.get("properties", {})
    args = dict(step.get("args") or {})
    unknown = sorted(set(args) - set(props))
    if unknown:
        raise _reject(
            ReasonCode.INVALID_ARGS,
            f"procedure {proc.name!r} has no parameter(s) {unknown}; it takes {sorted(props)}",
            "steps",
            index,
            "args",
        )
    for name in params.get("required", []):
        if name not in args:
            raise _reject(
                ReasonCode.INVALID_ARGS,
                f"procedure {proc.name!r} needs argument {name!r}",
                "steps",
                index,
                "args",
            )
    for name, schema in props.items():
        if name not in args:
            if isinstance(schema, dict) and "default" in schema:
                args[name] = schema["default"]
            else:
                args[name] = None
            continue
        value = args[name]
        if _has_ref(value) or not isinstance(schema, dict):
            continue  # a reference: its type is checked where the body's tool reads it
        # Patterns as ECMA-262 reads them (\d is [0-9]), in linear time: not by Python's `re`.
        errors = list(ExplainingValidator(schema).iter_errors(value))
        if errors:
            raise _reject(
                ReasonCode.INVALID_ARGS,
                f"argument {name!r} of procedure {proc.name!r}: {errors[0].message[:200]}",
                "steps",
                index,
                "args",
                name,
            )
    return args


def _has_ref(value: Any) -> bool:
    if isinstance(value, dict):
        return _is_ref(value) or any(_has_ref(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_ref(v) for v in value)
    return False


Origins = dict[str, tuple[ProcedureOrigin, ...]]


def _expand_level(
    document: dict[str, Any], procedures: Mapping[str, Procedure], origins: Origins
) -> tuple[dict[str, Any], bool]:
    steps = document["steps"]
    calls: dict[str, tuple[list[str], Any]] = {}  # call id -> (body step ids, result value)
    out: list[Any] = []
    for index, step in enumerate(steps):
        proc = procedures.get(str(step.get("tool"))) if isinstance(step, dict) else None
        if proc is None:
            out.append(step)
            continue
        for key in _NOT_ON_A_CALL:
            if key in step:
                raise _reject(
                    ReasonCode.INVALID_ARGS,
                    f"a call of procedure {proc.name!r} cannot have {key!r} (call it from a plan "
                    "step without it, or write the steps inline)",
                    "steps",
                    index,
                    key,
                )
        call_id = step["id"]
        args = _call_args(step, proc, index)
        body_ids = {s["id"] for s in proc.body["steps"]}
        prefix = call_id + PATH_SEPARATOR
        # The call's own origin (a call inside a body inlined one level up), then this call.
        chain = (*origins.pop(call_id, ()), ProcedureOrigin(call_id, proc.name, proc.version))
        new_ids = []
        for body_step in proc.body["steps"]:
            new = _instantiate(body_step, prefix, body_ids, args)
            new["id"] = prefix + body_step["id"]
            inner_after = [prefix + a if a in body_ids else a for a in body_step.get("after", [])]
            outer_after = [a for a in step.get("after", []) if a not in inner_after]
            if inner_after or outer_after:
                new["after"] = [*inner_after, *outer_after]
            new_ids.append(new["id"])
            origins[new["id"]] = chain
            out.append(new)
        result = _instantiate(proc.body.get("result"), prefix, body_ids, args)
        calls[call_id] = (new_ids, result)
    if not calls:
        return document, False

    def resolve(value: Any, seen: tuple[str, ...], path: tuple[str | int, ...]) -> Any:
        if isinstance(value, dict):
            if _is_ref(value):
                ref = Reference.parse(value["$ref"])
                if ref.step not in calls:
                    return value
                if ref.step in seen:
                    raise _reject(
                        ReasonCode.PLAN_CYCLE,
                        f"procedure call {ref.step!r} reads its own result",
                        *path,
                    )
                target = _navigate(calls[ref.step][1], ref.tokens, str(ref), path)
                return resolve(target, (*seen, ref.step), path)
            return {k: resolve(v, seen, (*path, k)) for k, v in value.items()}
        if isinstance(value, list):
            return [resolve(v, seen, (*path, i)) for i, v in enumerate(value)]
        return value

    resolved = []
    for index, step in enumerate(out):
        if not isinstance(step, dict):
            resolved.append(step)
            continue
        new_step = {}
        for key, value in step.items():
            if key == "after" and isinstance(value, list):
                expanded: list[Any] = []
                for dep in value:
                    for item in calls[dep][0] if dep in calls else [dep]:
                        if item not in expanded:
                            expanded.append(item)
                new_step[key] = expanded
            elif key in ("id", "tool", "message", "max_items"):
                new_step[key] = value
            else:
                new_step[key] = resolve(value, (), ("steps", index, key))
        resolved.append(new_step)
    new_doc = {**document, "steps": resolved}
    for key in ("result", "continue"):
        if key in document:
            new_doc[key] = resolve(document[key], (), (key,))
    return new_doc, True


def _check_call_ids(steps: list[Any], procedures: Mapping[str, Procedure], taken: Iterable[str]) -> None:
    """duplicate_step_id: a call's id is unique (`check_inlined_ids`)."""
    check_inlined_ids(steps, lambda step: str(step.get("tool")) in procedures, set(taken))


def check_inlined_ids(
    steps: list[Any], inlined: Callable[[dict[str, Any]], bool], taken: Container[str]
) -> None:
    """duplicate_step_id: the id of a step that is inlined (`inlined(step)`: a procedure call, a
    delegation) is unique. Once inlined it is no step's id, so the compiler's own check could not
    tell a second step of that id (or a completed one, in `taken`) from it, and a reference to
    the id would silently read its result."""
    seen: dict[str, int] = {}
    for index, step in enumerate(steps):
        sid = step.get("id") if isinstance(step, dict) else None
        if not isinstance(sid, str):
            continue
        special = inlined(step)
        if special and sid in taken:
            raise _reject(
                ReasonCode.DUPLICATE_STEP_ID,
                f"step id {sid!r} is already used by a completed step; choose a new id",
                "steps",
                index,
                "id",
            )
        if sid in seen and (special or inlined(steps[seen[sid]])):
            raise _reject(
                ReasonCode.DUPLICATE_STEP_ID,
                f"step id {sid!r} is used by steps {seen[sid]} and {index}",
                "steps",
                index,
                "id",
            )
        seen.setdefault(sid, index)


def _navigate(value: Any, tokens: Sequence[str], text: str, path: tuple[str | int, ...]) -> Any:
    for position, token in enumerate(tokens):
        if _is_ref(value):
            rest = "".join("/" + t.replace("~", "~0").replace("/", "~1") for t in tokens[position:])
            return {"$ref": value["$ref"] + rest}
        if isinstance(value, dict) and token in value:
            value = value[token]
        elif isinstance(value, list) and (index := array_index(token)) is not None and index < len(value):
            value = value[index]
        else:
            raise _reject(
                ReasonCode.BAD_REFERENCE,
                f"reference {text!r}: the procedure's result has no {token!r} there",
                *path,
            )
    return value


def expand_procedures(
    document: dict[str, Any], procedures: Mapping[str, Procedure], *, max_steps: int | None = None
) -> dict[str, Any]:
    """The plan with every procedure call replaced by its body (see the module docstring).

    A plan calling no procedure is returned as it is (its canonical text and hash unchanged).
    `max_steps` bounds the steps after each level of inlining (`plan_too_large`), so that
    calls of procedures that call others many times cannot grow the plan without bound.
    """
    return expand_with_origins(document, procedures, max_steps=max_steps)[0]


def expand_with_origins(
    document: dict[str, Any],
    procedures: Mapping[str, Procedure],
    *,
    max_steps: int | None = None,
    taken: Iterable[str] = (),
) -> tuple[dict[str, Any], dict[str, tuple[ProcedureOrigin, ...]]]:
    """`expand_procedures`, and for each inlined step the calls it came from, outermost first.

    `taken` are the ids of completed steps (an earlier stage's): a call may not reuse one.
    The origins are what a procedure approval covers (pte._policy._procedure_approval): they exist only
    here, computed from the deployment's procedures, never from the plan's text, so a step a
    planner writes as ``x__pay`` itself has none.
    """
    origins: Origins = {}
    if not procedures or not isinstance(document.get("steps"), list):
        return document, origins
    _check_call_ids(document["steps"], procedures, taken)
    for _ in range(MAX_NESTING + 1):
        document, changed = _expand_level(document, procedures, origins)
        if not changed:
            return document, origins
        if max_steps is not None and len(document["steps"]) > max_steps:
            raise _reject(
                ReasonCode.PLAN_TOO_LARGE,
                f"with its procedure calls inlined the plan has over {max_steps} steps, the limit",
                "steps",
            )
    raise _reject(ReasonCode.PLAN_TOO_LARGE, f"procedures nest deeper than {MAX_NESTING} levels", "steps")


# --- what the planner is shown ------------------------------------------------------------------


def _schema_at(schema: Any, tokens: Sequence[str], root: Mapping[str, Any]) -> Any:
    """The sub-schema a JSON pointer selects in a tool's output schema ({} when it cannot tell)."""
    for token in tokens:
        for _ in range(8):  # follow local $refs ("#/$defs/Name")
            ref = schema.get("$ref") if isinstance(schema, Mapping) else None
            if not (isinstance(ref, str) and ref.startswith("#/")):
                break
            target: Any = root
            for part in ref[2:].split("/"):
                target = target.get(part, {}) if isinstance(target, Mapping) else {}
            schema = target
        if not isinstance(schema, Mapping):
            return {}
        if token in (schema.get("properties") or {}):
            schema = schema["properties"][token]
        elif (array_index(token) is not None or token == "*") and isinstance(schema.get("items"), Mapping):
            schema = schema["items"]
        else:
            return {}
    return _plain(schema)


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def procedure_output_schema(
    proc: Procedure, registry: Any, procedures: Mapping[str, Procedure], _depth: int = 0
) -> dict[str, Any]:
    """The type of a procedure's result, from the output schemas of the body's tools."""
    steps = {s["id"]: s for s in proc.body["steps"] if "tool" in s}

    def of(value: Any) -> Any:
        if _is_ref(value):
            ref = Reference.parse(value["$ref"])
            step = steps.get(ref.step)
            if step is None:
                return {}
            tool = step["tool"]
            if tool in procedures and _depth < MAX_NESTING:
                schema: Any = procedure_output_schema(procedures[tool], registry, procedures, _depth + 1)
            elif tool in registry:
                schema = registry[tool].planner_output_schema
            else:
                return {}
            if "for_each" in step:
                schema = {"type": "array", "items": schema}
            return _schema_at(schema, ref.tokens, schema)
        if isinstance(value, dict):
            props = {k: of(v) for k, v in value.items()}
            return {"type": "object", "properties": props, "required": list(props)}
        if isinstance(value, list):
            return {"type": "array"}
        if isinstance(value, bool):
            return {"type": "boolean"}
        if isinstance(value, (int, float)):
            return {"type": "number"}
        if isinstance(value, str):
            return {"type": "string"}
        return {"type": "null"}

    out = of(proc.body.get("result"))
    return dict(out) if isinstance(out, Mapping) else {}
