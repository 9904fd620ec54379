"""`Selection`: how a tool's output is made of its inputs, so labels stay as precise as the data.

By default the output of a ``derived`` tool carries the labels of *all* its arguments
(`pte._policy._document`). An operation that selects, orders, groups or aggregates the elements of a
list knows better: `filter_records` returns whole records, and which ones depends only on
the compared field. A `Selection` declares that, in two parts:

- ``output``: output JSON Pointer -> input path(s) it is copied from, e.g.
  ``{"/records/*": "records/*"}`` (each output record is an element of argument
  ``records``), ``{"/values/*": "records/*/{field}"}`` (a column), or
  ``{"/pairs/*/left": "left/*", "/pairs/*/right": "right/*"}``;
- ``decides``: the input paths the decision reads, e.g. ``("records/*/{field}",)`` for
  a filter (argument ``field`` names the field compared) or ``("values/*", "remove")``.

An input path is a parameter name, then tokens: ``*`` (every element or key),
``{param}`` (the field named by that argument: a string names one field, a list of
strings keeps those fields, no value stands for the element itself, and a reference
stands for every field), or a literal key.

The labels that follow (`pte._policy._shaping_labels`): every output part listed in ``output``
carries the labels of what it is copied from; the output itself (its structure, its
lists' lengths, every part not listed, such as a ``count`` or a ``total``) carries the
labels of the decision: who chose the input lists' elements (the path down to each
element), every part ``decides`` names, and every other argument (the field name, the
operator, the value compared with, ``n``). Nothing else: an untrusted ``subject`` beside a
trusted ``amount`` does not taint a record a filter on ``amount`` selects.

The declaration is a claim about the tool's code, made by whoever registers the tool (like
``provenance="trusted"``): declare only what the function really does. It is stored in
the output schema (``x-pte-selection``), so a tool rebuilt from an audit log keeps it and
the catalogue fingerprint (hence every approval) binds it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

__all__ = ["SELECTION_KEY", "Selection"]

#: The output-schema keyword that holds a tool's `Selection` (its `to_json` form).
SELECTION_KEY = "x-pte-selection"
_PARAM_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_MAX_PATHS = 32
_MAX_TOKENS = 8


def _tokens(path: str) -> tuple[str, ...]:
    return tuple(path.split("/"))


def _field_param(token: str) -> str | None:
    """The parameter of a ``{param}`` token, else None."""
    if len(token) > 2 and token[0] == "{" and token[-1] == "}" and _PARAM_RE.fullmatch(token[1:-1]):
        return token[1:-1]
    return None


@dataclass(frozen=True)
class Selection:
    """How a tool's output is made of its inputs (see the module docstring); for ``derived`` tools.

    ``Selection({"/records/*": "records/*"}, decides=("records/*/{field}",))`` is a filter.
    ``inputs`` names further list/object parameters whose elements the output does not copy
    and the decision does not read (only their structure counts: ``count``, ``keys``).
    """

    output: Mapping[str, str | tuple[str, ...]] = field(default_factory=dict)
    decides: tuple[str, ...] = ()
    inputs: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        output = {
            str(ptr): (src,) if isinstance(src, str) else tuple(src) for ptr, src in dict(self.output).items()
        }
        object.__setattr__(self, "output", MappingProxyType(output))
        object.__setattr__(self, "decides", tuple(self.decides))
        object.__setattr__(self, "inputs", tuple(self.inputs))
        problem = self._problem()
        if problem is not None:
            raise ValueError(f"invalid selection: {problem}")

    def _problem(self) -> str | None:
        paths = [p for sources in self.output.values() for p in sources] + list(self.decides)
        if len(paths) + len(self.inputs) > _MAX_PATHS:
            return f"more than {_MAX_PATHS} paths"
        for pointer in self.output:
            parts = pointer.split("/")
            if not pointer.startswith("/") or len(parts) > _MAX_TOKENS + 1 or "" in parts[1:]:
                return f"output pointer {pointer!r} must be '/name/...' with at most {_MAX_TOKENS} tokens"
        for path in paths:
            if not isinstance(path, str):
                return f"a path is text, not {path!r}"
            tokens = _tokens(path)
            if not _PARAM_RE.fullmatch(tokens[0]) or len(tokens) > _MAX_TOKENS + 1 or "" in tokens:
                return f"path {path!r} must be 'param/...' with at most {_MAX_TOKENS} tokens"
            for token in tokens[1:]:
                if token.startswith("{") and _field_param(token) is None:
                    return f"path {path!r}: {token!r} is not a '{{param}}' token"
        for name in self.inputs:
            if not isinstance(name, str) or not _PARAM_RE.fullmatch(name):
                return f"input {name!r} is not a parameter name"
        return None

    @property
    def params(self) -> frozenset[str]:
        """Every parameter the declaration names (heads of paths, ``{param}`` tokens, inputs)."""
        out = set(self.inputs)
        for path in self.paths():
            tokens = _tokens(path)
            out.add(tokens[0])
            out.update(p for t in tokens[1:] if (p := _field_param(t)) is not None)
        return frozenset(out)

    @property
    def sources(self) -> frozenset[str]:
        """The list/object parameters the output is selected from: only their structure is a flow
        into the whole output (their elements flow only where ``output`` and ``decides`` say)."""
        return frozenset({*self.inputs, *(_tokens(p)[0] for p in self.paths())})

    def paths(self) -> Iterable[str]:
        """Every input path, output sources first."""
        for sources in self.output.values():
            yield from sources
        yield from self.decides

    def decision_fields(self) -> dict[str, str]:
        """argument -> the list parameter whose elements' field it names, for each decision path
        of the form ``list/*/{argument}`` (what a length label reads, besides the list)."""
        out: dict[str, str] = {}
        for path in self.decides:
            tokens = _tokens(path)
            if len(tokens) == 3 and tokens[1] == "*" and (param := _field_param(tokens[2])) is not None:
                out[param] = tokens[0]
        return out

    def check(self, tool: str, params: Iterable[str]) -> None:
        """Raise ValueError unless every parameter named is one of the tool's `params`."""
        unknown = sorted(self.params - set(params))
        if unknown:
            raise ValueError(f"tool {tool!r}: the selection names unknown parameter(s) {unknown}")

    def to_json(self) -> dict[str, Any]:
        """The JSON form stored in the output schema under `SELECTION_KEY`."""
        out: dict[str, Any] = {"output": {ptr: list(src) for ptr, src in self.output.items()}}
        if self.decides:
            out["decides"] = list(self.decides)
        if self.inputs:
            out["inputs"] = list(self.inputs)
        return out

    @classmethod
    def from_json(cls, value: Any) -> Selection | None:
        """The selection of a stored JSON form; None when it is malformed (then: no precision)."""
        if not isinstance(value, Mapping) or set(value) - {"output", "decides", "inputs"}:
            return None
        output, decides, inputs = value.get("output", {}), value.get("decides", []), value.get("inputs", [])
        if not isinstance(output, Mapping) or not isinstance(decides, list) or not isinstance(inputs, list):
            return None
        if not all(isinstance(src, list) for src in output.values()):
            return None
        try:
            return cls({ptr: tuple(src) for ptr, src in output.items()}, tuple(decides), tuple(inputs))
        except (ValueError, TypeError):
            return None

    @classmethod
    def of_schema(cls, output_schema: Mapping[str, Any]) -> Selection | None:
        """The selection an output schema declares, or None."""
        raw = output_schema.get(SELECTION_KEY) if isinstance(output_schema, Mapping) else None
        return None if raw is None else cls.from_json(raw)
