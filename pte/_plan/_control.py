"""Control in plans: per-item steps (`for_each`), conditions (`when`), `require` steps, `continue`.

Everything here is checked statically by `check_control`, a step of the compile pipeline,
before anything runs:

- **for_each** maps a tool over a list reference, bounded by ``max_items``. Inside the
  step's args, a reference to the same list followed by the token ``*`` selects the current
  element (``{"$ref": "users/members/*/email"}``). The step's output is the list of the
  calls' outputs; each call is an audited sub-step ``id[i]``. The list must be an array
  by its schema; ``*`` anywhere else is refused.
- **when** runs a step only if a typed condition over references holds (comparisons
  ``eq ne lt le gt ge``, ``and``/``or``/``not``, ``empty``/``nonempty``). Operands are typed at
  compile time: equality needs comparable types, ordering needs numbers (JSON numbers and
  decimal strings, compared exactly) or instants (``date``/``date-time`` strings); a
  string ordering is refused. A step whose condition is false is recorded as skipped; its
  output is its ``default`` if it has one: any JSON value (``null``, a short message). Its
  readers see the union of the tool's output and the default's type, so a reader of a
  field the default lacks is refused ("'lunch/x' may be null when 'lunch' is skipped") and
  a reader of the whole value is fine where the union fits. Without a default, only steps
  under the same condition (their ``when`` equal to it, or an ``and`` that contains it) may
  read it.
- **require** ends the run ``condition_not_met`` with its message when its condition is
  false: not a failure, no replan. Every later step of the plan waits for it.
- **continue** hands named values to the next planning stage (see `pte._run._stages`).

The run-time half is `pte._execution._control_run`, used by the executor; it never calls a model.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from pte._catalogue import schema_types as st
from pte._core import DECIMAL_STRING_PATTERN, PlanRejected, ReasonCode, canonical_json, is_decimal_string
from pte._plan._context import CompileContext, json_path
from pte._plan._model import ELEMENT, Reference, is_reference
from pte._plan._refs import _check_pointer, _check_ref_target, _collect_checked, _select

__all__ = [
    "COMPARISONS",
    "check_control",
    "check_control_types",
    "condition_references",
]

COMPARISONS = ("eq", "ne", "lt", "le", "gt", "ge")

_ORDERING = frozenset({"lt", "le", "gt", "ge"})
_INSTANT_FORMATS = frozenset({"date-time", "date"})


def _json_path(parts: tuple[str | int, ...]) -> str:
    return json_path(parts)


def _reject(reason: ReasonCode, message: str, *path: str | int) -> PlanRejected:
    return PlanRejected(reason, message, _json_path(path))


# --- walking conditions -------------------------------------------------------------------------


def condition_references(cond: Any) -> Iterator[tuple[tuple[str | int, ...], Reference]]:
    """(path inside the condition, Reference) for every reference in a condition."""
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(cond, ())]
    while stack:
        node, path = stack.pop()
        ((op, arg),) = node.items()
        if op in COMPARISONS:
            for k, operand in enumerate(arg):
                if is_reference(operand):
                    yield (*path, op, k), Reference.parse(operand["$ref"])
        elif op in ("and", "or"):
            stack.extend((c, (*path, op, k)) for k, c in reversed(list(enumerate(arg))))
        elif op == "not":
            stack.append((arg, (*path, op)))
        else:  # empty, nonempty
            yield (*path, op), Reference.parse(arg["$ref"])


def _comparisons(cond: Any) -> Iterator[tuple[tuple[str | int, ...], str, list[Any]]]:
    """(path, operator, operands) of every comparison, in document order."""
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(cond, ())]
    while stack:
        node, path = stack.pop()
        ((op, arg),) = node.items()
        if op in COMPARISONS:
            yield path, op, arg
        elif op in ("and", "or"):
            stack.extend((c, (*path, op, k)) for k, c in reversed(list(enumerate(arg))))
        elif op == "not":
            stack.append((arg, (*path, op)))


def _conjuncts(cond: Any) -> set[str]:
    """The canonical forms of a condition and of the members of its (nested) top-level ``and``."""
    out = {canonical_json(cond)}
    if "and" in cond:
        for member in cond["and"]:
            out |= _conjuncts(member)
    return out


# --- kinds: what a comparison may compare -------------------------------------------------------


def schema_kinds(schema: st.Schema, root: Mapping[str, Any], depth: int = 0) -> frozenset[str]:
    """Comparable kinds of a schema: number (integers, numbers, decimal strings), instant
    (date / date-time strings), string, boolean, null, array, object."""
    schema = st.deref(schema, root)
    if schema is True or depth > 16:
        return frozenset({"number", "instant", "string", "boolean", "null", "array", "object"})
    if not isinstance(schema, Mapping):
        return frozenset()
    for keyword in ("anyOf", "oneOf"):
        if keyword in schema:
            out: frozenset[str] = frozenset()
            for branch in schema[keyword]:
                out |= schema_kinds(branch, root, depth + 1)
            return out
    kinds: set[str] = set()
    for kind in st.types_of(schema, root):
        if kind in ("integer", "number"):
            kinds.add("number")
        elif kind == "string":
            if schema.get("pattern") == DECIMAL_STRING_PATTERN:
                kinds.add("number")
            elif schema.get("format") in _INSTANT_FORMATS:
                kinds.add("instant")
            else:
                kinds.add("string")
        else:
            kinds.add(kind)
    return frozenset(kinds)


def _literal_kinds(value: Any, other: frozenset[str]) -> frozenset[str]:
    """A literal's kinds; a string literal takes the number or instant kind of the other side
    when it is written that way ("12.50", "2024-05-15T10:00:00")."""
    if value is None:
        return frozenset({"null"})
    if isinstance(value, bool):
        return frozenset({"boolean"})
    if isinstance(value, (int, float)):
        return frozenset({"number"})
    kinds = {"string"}
    if "number" in other and is_decimal_string(value):  # as run time reads it (pte._execution)
        kinds.add("number")
    if "instant" in other and as_instant(value) is not None:
        kinds.add("instant")
    return frozenset(kinds)


def as_instant(value: Any) -> datetime | date | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


# --- the compile check --------------------------------------------------------------------------


@dataclass
class _Site:
    """Where a step reads another step's output (for the skipped-reader rule)."""

    reader: int | None  # step index; None for the plan's result / continue
    ref: Reference
    path: tuple[str | int, ...]


def check_control(ctx: CompileContext) -> None:
    """Compile check for for_each, when, require and continue (see the module docstring).

    Runs after `check_references` (the args' references are known and valid) and before
    `check_acyclic`, to which it adds the dependencies that conditions, lists and require
    steps create (``ctx.control_deps``: step id -> ids).
    """
    steps: list[dict[str, Any]] = ctx.steps
    deps: dict[str, list[str]] = {}
    reads: list[_Site] = []
    requires: list[str] = []
    for i, step in enumerate(steps):
        sid = step["id"]
        extra = deps.setdefault(sid, [])
        extra.extend(requires)  # a require step guards every later step of the plan
        for path, ref in ctx.references[i]:
            reads.append(_Site(i, ref, ("steps", i, "args", *path)))
        cond = step.get("require", step.get("when"))
        where = "require" if "require" in step else "when"
        if cond is not None:
            for path, ref in condition_references(cond):
                full = ("steps", i, where, *path)
                _no_element(ref, full)
                _check_ref_target(ctx, ref, full, sid)
                extra.append(ref.step)
                reads.append(_Site(i, ref, full))
        if "for_each" in step:
            ref = Reference.parse(step["for_each"]["$ref"])
            full = ("steps", i, "for_each")
            _no_element(ref, full)
            _check_ref_target(ctx, ref, full, sid)
            extra.append(ref.step)
            reads.append(_Site(i, ref, full))
        for path, ref in ctx.references[i]:
            if ELEMENT in ref.tokens:
                _check_element(step, ref, ("steps", i, "args", *path))
        if "default" in step and _has_reference(step["default"]):
            raise _reject(
                ReasonCode.BAD_REFERENCE,
                "a default is a literal value, not a reference",
                "steps",
                i,
                "default",
            )
        if "require" in step:
            requires.append(sid)
    for name in ("result", "continue"):
        if name in ctx.document:
            for path, ref in _collect_checked(ctx.document[name], ctx, 2, name):
                full = (name, *path)
                _no_element(ref, full)
                _check_ref_target(ctx, ref, full, None)
                reads.append(_Site(None, ref, full))
    _check_reads(ctx, reads)
    ctx.control_deps = {k: v for k, v in deps.items() if v}


def check_control_types(ctx: CompileContext) -> None:
    """The types of the control constructs: conditions, for_each lists and defaults.

    Runs after `check_args`, when the output type of every step (generic ones inferred from
    their arguments) is known. Records how each comparison compares
    (``ctx.condition_modes``: step id -> modes).
    """

    def pointer(ref: Reference, where: tuple[str | int, ...]) -> None:
        if ref.step in ctx.inferred:  # a generic producer: its pointers are checkable only now
            _check_pointer(ctx, ref, where)

    modes: dict[str, tuple[str, ...]] = {}
    for i, step in enumerate(ctx.steps):
        where = "require" if "require" in step else "when"
        cond = step.get(where)
        if cond is not None:
            for path, ref in condition_references(cond):
                pointer(ref, ("steps", i, where, *path))
            modes[step["id"]] = _check_condition_types(ctx, cond, ("steps", i, where))
        if "for_each" in step:
            ref = Reference.parse(step["for_each"]["$ref"])
            pointer(ref, ("steps", i, "for_each"))
            _check_list(ctx, ref, ("steps", i, "for_each"))
    if "continue" in ctx.document:
        for path, ref in _collect_checked(ctx.document["continue"], ctx, 2, "continue"):
            pointer(ref, ("continue", *path))
    ctx.condition_modes = modes


def _no_element(ref: Reference, where: tuple[str | int, ...]) -> None:
    if ELEMENT in ref.tokens:
        raise _reject(
            ReasonCode.BAD_REFERENCE,
            f"reference {str(ref)!r}: '*' selects the current element only inside the args of a "
            "for_each step over that list",
            *where,
        )


def _check_element(step: Mapping[str, Any], ref: Reference, where: tuple[str | int, ...]) -> None:
    """A '*' in an args reference must be the step's own for_each list, then '*', once."""
    if "for_each" in step:
        lst = Reference.parse(step["for_each"]["$ref"])
        n = len(lst.tokens)
        if (
            ref.step == lst.step
            and ref.tokens[:n] == lst.tokens
            and len(ref.tokens) > n
            and ref.tokens[n] == ELEMENT
            and ELEMENT not in ref.tokens[n + 1 :]
        ):
            return
        raise _reject(
            ReasonCode.BAD_REFERENCE,
            f"reference {str(ref)!r}: '*' selects the current element of the for_each list "
            f"{str(lst)!r} only, written {lst!s}/*[/...]",
            *where,
        )
    _no_element(ref, where)


def _ref_schema(ctx: CompileContext, ref: Reference) -> tuple[st.Schema, Mapping[str, Any]]:
    schema = _select(ctx, ref)
    assert schema is not None  # check_references / _check_ref_target proved it exists
    return schema, ctx.output_type(ref.step)[1]


def _check_list(ctx: CompileContext, ref: Reference, where: tuple[str | int, ...]) -> None:
    schema, root = _ref_schema(ctx, ref)
    types = st.types_of(schema, root)
    if types != {"array"}:
        raise _reject(
            ReasonCode.INVALID_ARGS,
            f"for_each needs a list, but reference {str(ref)!r} gives {st.describe(schema, root)}",
            *where,
        )


def _has_reference(value: Any) -> bool:
    if is_reference(value):
        return True
    if isinstance(value, dict):
        return any(_has_reference(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_reference(v) for v in value)
    return False


def _operand_kinds(ctx: CompileContext, operand: Any, other: frozenset[str] | None) -> frozenset[str]:
    if is_reference(operand):
        schema, root = _ref_schema(ctx, Reference.parse(operand["$ref"]))
        return schema_kinds(schema, root)
    return _literal_kinds(operand, other or frozenset())


def _orders(operand: Any, kinds: frozenset[str], mode: str) -> bool:
    """Whether an operand can take part in an ordering of `mode` (a nullable reference may)."""
    if is_reference(operand):
        return kinds - {"null"} == {mode}
    return mode in kinds


def _describe_kinds(kinds: frozenset[str]) -> str:
    return " | ".join(sorted(kinds)) or "nothing"


def _check_condition_types(ctx: CompileContext, cond: Any, where: tuple[str | int, ...]) -> tuple[str, ...]:
    """Type-check a condition; return the comparison mode of each comparison, in order."""
    for path, ref in condition_references(cond):
        op = path[-1]
        if op in ("empty", "nonempty"):
            schema, root = _ref_schema(ctx, ref)
            kinds = schema_kinds(schema, root) - {"null"}
            if not kinds or not kinds <= {"array", "string", "object"}:
                raise _reject(
                    ReasonCode.INVALID_ARGS,
                    f"{op} needs a list, a string or an object, but {str(ref)!r} gives "
                    f"{st.describe(schema, root)}",
                    *where,
                    *path,
                )
    modes: list[str] = []
    for path, op, (left, right) in _comparisons(cond):
        # A string literal adapts to the other side: "12.50" next to an amount is a number.
        hint = [_operand_kinds(ctx, o, None) for o in (left, right) if is_reference(o)]
        lk = _operand_kinds(ctx, left, hint[-1] if hint else None)
        rk = _operand_kinds(ctx, right, hint[0] if hint else None)
        full = (*where, *path, op)
        if op in _ORDERING:
            mode = next(
                (m for m in ("number", "instant") if _orders(left, lk, m) and _orders(right, rk, m)), None
            )
            if mode is None:
                raise _reject(
                    ReasonCode.INVALID_ARGS,
                    f"{op} orders numbers or instants (date / date-time strings) only, but compares "
                    f"{_describe_kinds(lk)} with {_describe_kinds(rk)}",
                    *full,
                )
            modes.append(mode)
            continue
        both = lk & rk
        if not both:
            raise _reject(
                ReasonCode.INVALID_ARGS,
                f"{op} compares {_describe_kinds(lk)} with {_describe_kinds(rk)}: they can never be equal",
                *full,
            )
        plain = both - {"null"}
        modes.append("number" if plain == {"number"} else "instant" if plain == {"instant"} else "json")
    return tuple(modes)


def _check_reads(ctx: CompileContext, reads: list[_Site]) -> None:
    """Refuse reading a possibly skipped output without a default, unless under the same condition."""
    steps: list[dict[str, Any]] = ctx.steps
    guarded: dict[str, Any] = {s["id"]: s["when"] for s in steps if "when" in s and "default" not in s}
    requires = {s["id"] for s in steps if "require" in s}
    for site in reads:
        if site.ref.step in requires:
            raise _reject(
                ReasonCode.BAD_REFERENCE,
                f"reference {str(site.ref)!r}: a require step has no output (use 'after' to wait for it)",
                *site.path,
            )
        cond = guarded.get(site.ref.step)
        if cond is None:
            continue
        reader = None if site.reader is None else steps[site.reader]
        if reader is not None and "when" in reader and canonical_json(cond) in _conjuncts(reader["when"]):
            continue
        who = "the plan's " + str(site.path[0]) if reader is None else f"step {reader['id']!r}"
        raise _reject(
            ReasonCode.BAD_REFERENCE,
            f"reference {str(site.ref)!r}: step {site.ref.step!r} may be skipped (its 'when' may be false), "
            f"so {who} cannot read it: give {site.ref.step!r} a 'default', or put the reader under the "
            "same 'when'",
            *site.path,
        )
