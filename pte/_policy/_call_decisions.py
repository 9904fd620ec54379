"""The decisions that led to a call, in words, for the person asked to endorse it (#38).

The compile check (`pte._flow._FlowGraph.call_decisions`) lists what brings untrusted data into
whether and how often an endorsable write runs: its `when`, its `for_each` list, the requires
and failures before it. At the call, with the run's outputs, each becomes a sentence with the
values that decided it and where they come from::

    runs because the require 'has_iban' held: iban_m/records is nonempty (1 element; from
    iban_m/records ← filter_records ← bill/text ← read_file (untrusted))
    element 3 of 5 of candidates/hotels (untrusted list: candidates/hotels ← search (untrusted))

The endorsement binds these sentences (`call_hash`): a person who vouched for element 3 did
not vouch for element 4, nor for the same values after another decision.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from pte._core import canonical_json
from pte._plan import Reference, is_reference

__all__ = ["call_hash", "render_decisions"]

_SHOWN = 80
_OPS = {"eq": "=", "ne": "≠", "lt": "<", "le": "≤", "gt": ">", "ge": "≥"}


def call_hash(values: Mapping[str, Any], decisions: Sequence[str]) -> str:
    """SHA-256 of what the person is shown: the values alone (as before #38) when nothing but
    the values needs a person; the values and the decisions in words otherwise."""
    shown: Any = dict(values) if not decisions else {"values": dict(values), "decisions": list(decisions)}
    return hashlib.sha256(canonical_json(shown).encode("utf-8")).hexdigest()


def _resolve(ref: Reference, outputs: Mapping[str, Any]) -> tuple[bool, Any]:
    """What the call will read: the value `ref` selects as the executor selects it, if any."""
    try:
        return True, ref.resolve(outputs)
    except KeyError:
        return False, None


def _shown(value: Any) -> str:
    text = canonical_json(value)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 1] + "…"


def _operand(operand: Any, outputs: Mapping[str, Any], sources: Mapping[str, str]) -> str:
    if not is_reference(operand):
        return _shown(operand)
    ref = Reference.parse(operand["$ref"])
    found, value = _resolve(ref, outputs)
    text = f"{ref} = {_shown(value)}" if found else f"{ref} (absent)"
    source = sources.get(str(ref))
    return f"{text} (from {source})" if source else text


def _condition(cond: Any, outputs: Mapping[str, Any], sources: Mapping[str, str]) -> str:
    ((op, arg),) = cond.items()
    if op in ("and", "or"):
        return f" {op} ".join(f"({_condition(c, outputs, sources)})" for c in arg)
    if op == "not":
        return f"not ({_condition(arg, outputs, sources)})"
    if op in ("empty", "nonempty"):
        ref = Reference.parse(arg["$ref"])
        found, value = _resolve(ref, outputs)
        count = len(value) if found and isinstance(value, (list, dict, str)) else 0
        source = sources.get(str(ref))
        where = f"; from {source}" if source else ""
        return f"{ref} is {'empty' if op == 'empty' else 'nonempty'} ({count} element(s){where})"
    left, right = (_operand(o, outputs, sources) for o in arg)
    return f"{left} {_OPS.get(op, op)} {right}"


def render_decisions(
    specs: Sequence[Mapping[str, Any]], element: int | None, outputs: Mapping[str, Any]
) -> list[str]:
    """`specs` (from the compile check) as sentences, with the run's values (`outputs`)."""
    out: list[str] = []
    for spec in specs:
        kind = spec.get("kind")
        sources = spec.get("sources") or {}
        if kind == "require":
            words = _condition(spec["condition"], outputs, sources)
            out.append(f"runs because the require {spec['step']!r} held: {words}")
        elif kind == "when":
            out.append(f"runs because its condition held: {_condition(spec['condition'], outputs, sources)}")
        elif kind == "failure":
            labels = " or ".join(spec.get("labels") or ["untrusted"])
            step = f"step {spec['step']!r} ({spec['tool']})"
            out.append(f"runs because {step} did not fail, which {labels} data could decide")
        elif kind == "for_each":
            found, value = _resolve(Reference.parse(spec["list"]), outputs)
            count = len(value) if found and isinstance(value, list) else 0
            index = "?" if element is None else str(element + 1)
            source = f": {spec['source']}" if spec.get("source") else ""
            out.append(f"element {index} of {count} of {spec['list']} ({spec['label']} list{source})")
    return out
