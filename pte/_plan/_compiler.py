"""`compile`: planner text in, a frozen `Plan` or a `PlanRejected` with a named reason out.

The compiler is a pipeline of small checks run in order (parse → schema → semantics), each
owning its reason code, in the manner of structlog's processor chain. A check reads the
`CompileContext` and either adds to it or raises `PlanRejected`. Nothing in a plan runs
before every check has passed.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from typing import Any

import jsonschema
import jsonschema_rs

from pte._catalogue import Registry
from pte._catalogue import schema_types as st
from pte._core import (
    PlanRejected,
    ReasonCode,
    StrictJSONError,
    canonical_json,
    count_values,
    nests_deeper_than,
    outside_strings,
    sha256_hex,
)
from pte._core import strict_json as strict_json
from pte._plan._args import check_args, check_idempotency_keys
from pte._plan._context import DEFAULT_LIMITS, CompileCheck, CompileContext, Limits, _reject
from pte._plan._control import check_control, check_control_types
from pte._plan._model import Plan, build_plan, plan_schema
from pte._plan._refs import check_acyclic, check_references, check_tools_allowed, check_unique_ids

__all__ = [
    "PIPELINE",
    "compile_plan",
]


# --- parse ------------------------------------------------------------------------------------


def check_size(ctx: CompileContext) -> None:
    """plan_too_large: the text is over `max_bytes` (checked before parsing anything)."""
    size = len(ctx.text.encode("utf-8", "surrogatepass"))
    if size > ctx.limits.max_bytes:
        raise _reject(ReasonCode.PLAN_TOO_LARGE, f"plan is {size} bytes; the limit is {ctx.limits.max_bytes}")


def parse_json(ctx: CompileContext) -> None:
    """invalid_json: not exactly one JSON object (NaN/Infinity, duplicate keys, trailing text, ...)."""
    # Deep or wide text is refused from its skeleton, in a few C-speed passes, before the
    # parser builds a single value (pte._core._nesting). Every string is a value or a key with one.
    most = ctx.limits.max_values
    skeleton = outside_strings(ctx.text, max_strings=None if most is None else 2 * most)
    if skeleton is None:  # (only with a cap)
        message = f"plan holds over {2 * (most or 0)} strings, so over {most} JSON values"
        raise _reject(ReasonCode.PLAN_TOO_LARGE, message)
    # Room above the plan's depth limit (reported precisely below); deep text costs one pass.
    if nests_deeper_than(skeleton, deepest := ctx.limits.max_depth + 16):
        raise _reject(ReasonCode.PLAN_TOO_LARGE, f"plan nesting is deeper than {deepest} levels")
    if most is not None and (values := count_values(skeleton)) > most:
        raise _reject(ReasonCode.PLAN_TOO_LARGE, f"plan holds {values} JSON values; the limit is {most}")
    try:
        value = strict_json.loads(ctx.text, max_depth=ctx.limits.max_depth + 16)
    except StrictJSONError as exc:
        if exc.kind == "too_deep":
            raise _reject(ReasonCode.PLAN_TOO_LARGE, "plan nesting is too deep to parse") from None
        raise _reject(ReasonCode.INVALID_JSON, f"not valid JSON: {exc.message}") from None
    if not isinstance(value, dict):
        raise _reject(
            ReasonCode.INVALID_JSON, f"a plan must be one JSON object, not a JSON {st.json_type(value)}"
        )
    try:
        # RFC 8785 numbers are doubles. An integer a double cannot hold exactly (beyond
        # 2**53 - 1, e.g. an account number) is refused, never silently rounded.
        ctx.canonical = canonical_json(value)
        ctx.canonical.encode("utf-8")
    except (ValueError, UnicodeEncodeError) as exc:
        raise _reject(
            ReasonCode.INVALID_JSON,
            f"not valid JSON text: {exc} (write identifiers and big numbers as strings)",
        ) from None
    except RecursionError:
        raise _reject(ReasonCode.PLAN_TOO_LARGE, "plan nesting is too deep") from None
    ctx.document = value


def expand_procedure_calls(ctx: CompileContext) -> None:
    """Inline every call of a deployment procedure (pte._plan._procedures) before any other check.

    Everything after this sees only the steps that run: types, labels, policy and limits are
    checked on the inlined body exactly as if the planner had written it.
    """
    procedures = getattr(ctx.registry, "procedures", None)
    if not procedures:
        return
    from pte._plan._procedures import expand_with_origins

    expanded, origins = expand_with_origins(
        ctx.document, procedures, max_steps=ctx.limits.max_steps, taken=ctx.prior
    )
    if expanded is not ctx.document:
        ctx.document = expanded
        ctx.canonical = canonical_json(expanded)
        # Which call each inlined step came from: written here only, never read from the plan.
        ctx.procedure_origins = origins


def check_step_count(ctx: CompileContext) -> None:
    """plan_too_large: more than `max_steps` steps (before the schema walks them all)."""
    steps = ctx.document.get("steps")
    if isinstance(steps, list) and len(steps) > ctx.limits.max_steps:
        raise _reject(
            ReasonCode.PLAN_TOO_LARGE,
            f"plan has {len(steps)} steps; the limit is {ctx.limits.max_steps}",
            "steps",
        )


# --- schema -----------------------------------------------------------------------------------


@cache
def _plan_validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(plan_schema())


@cache
def _fast_plan_validator() -> Any:
    # jsonschema-rs compiles the schema to native code: ~250x faster than the pure-Python
    # validator on large plans. The pure-Python one only runs to explain a rejection.
    return jsonschema_rs.validator_for(plan_schema())


def _deepest(error: jsonschema.ValidationError) -> jsonschema.ValidationError:
    # For anyOf failures, the most specific sub-error explains the problem best.
    while error.context:
        best = jsonschema.exceptions.best_match(error.context)
        if best is None or best is error:
            break
        error = best
    return error


def check_schema(ctx: CompileContext) -> None:
    """schema_violation: the document does not match schemas/plan.schema.json."""
    too_deep = _reject(ReasonCode.PLAN_TOO_LARGE, "plan nesting is too deep to validate")
    try:
        if _fast_plan_validator().is_valid(ctx.document):
            return
        # The pure-Python validator explains best, at a cost per level and per error: only for
        # documents at most 12 deep, from their first 32 errors (else: the compiled one's message).
        errors = itertools.islice(_plan_validator().iter_errors(ctx.document), 32)  # lazy
        error = None if nests_deeper_than(ctx.text, 12) else jsonschema.exceptions.best_match(errors)
        if error is None:  # no explanation from the pure-Python validator: report the compiled one's
            fast_error = next(iter(_fast_plan_validator().iter_errors(ctx.document)))
            raise _reject(ReasonCode.SCHEMA_VIOLATION, fast_error.message, *fast_error.instance_path)
    except (RecursionError, ValueError):
        # Both validators recurse; a document deep enough to exhaust them is far beyond any depth limit.
        raise too_deep from None
    detail = _deepest(error)
    path = (
        list(detail.absolute_path)
        if len(detail.absolute_path) >= len(error.absolute_path)
        else list(error.absolute_path)
    )
    message = error.message if len(error.message) <= 300 else error.message[:300] + "…"
    if detail is not error:
        message = f"{message} ({detail.message[:200]})"
    raise _reject(ReasonCode.SCHEMA_VIOLATION, message, *path)


#: The checks `compile_plan` runs, in order. Each raises `PlanRejected` with its own reason code.
PIPELINE: tuple[CompileCheck, ...] = (
    check_size,
    parse_json,
    expand_procedure_calls,
    check_step_count,
    check_schema,
    check_unique_ids,
    check_tools_allowed,
    check_idempotency_keys,
    check_references,
    check_control,
    check_acyclic,
    check_args,
    check_control_types,
)


def compile_plan(
    text: str | bytes,
    registry: Registry,
    limits: Limits | None = None,
    *,
    checks: Sequence[CompileCheck] = (),
    prior: Mapping[str, str] | None = None,
    prior_lists: Iterable[str] = (),
    prior_types: Mapping[str, Any] | None = None,
) -> Plan:
    """Compile planner output into a frozen, hashed `Plan`, or raise `PlanRejected`.

    `checks` are extra checks run after the built-in pipeline (e.g. a data-flow policy).
    Anything unexpected inside a check is itself a rejection: compile never lets an
    exception other than `PlanRejected` escape for any input text.

    `prior` names steps completed earlier in the run (step id -> tool name): a replanned
    plan may reference their outputs, must not reuse their ids, and never re-runs them.
    `prior_lists` names those of them that were for_each steps (their output is a list).
    `prior_types` gives the output schema each prior step of a generic tool was compiled with
    (`Plan.output_schema`): references into them are checked against it.
    """
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _reject(ReasonCode.INVALID_JSON, f"plan is not UTF-8 text: {exc}") from None
    ctx = CompileContext(
        text=text,
        registry=registry,
        limits=limits or DEFAULT_LIMITS,
        prior=dict(prior or {}),
        prior_lists=frozenset(prior_lists),
        prior_types=dict(prior_types or {}),
    )
    for check in PIPELINE:
        check(ctx)
    for check in checks:
        try:
            check(ctx)
        except PlanRejected:
            raise
        except Exception as exc:
            # An extra check (a policy) that cannot decide must not let the plan through.
            name = getattr(check, "__name__", type(check).__name__)
            raise _reject(
                ReasonCode.POLICY_VIOLATION, f"check {name} failed: {type(exc).__name__}: {exc}"
            ) from exc
    return build_plan(
        ctx.document,
        ctx.order,
        sha256_hex(ctx.canonical),
        ctx.canonical,
        ctx.references,
        control_deps=ctx.control_deps,
        condition_modes=ctx.condition_modes,
        output_types={step_id: schema for step_id, (schema, _) in ctx.inferred.items()},
        origins=ctx.procedure_origins,
    )
