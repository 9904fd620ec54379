"""YAML read as strictly as JSON: for files people write by hand that carry authority.

PyYAML's ``safe_load`` keeps the last of two equal keys (a reviewer and the engine could
read different declarations), turns dates into `datetime` objects, and expands aliases:
``*name`` shares one node many times, so a few lines can stand for a billion list items
that any later walk visits. `loads` refuses all three: a duplicate key, an alias or a key
that is not text is a `StrictJSONError`; timestamps and binary stay text; the result is
checked as strict JSON (no NaN, bounded nesting). PyYAML is imported on first use (an
ImportError then, should it be missing), so importing PTE never needs it.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from pte._core._errors import StrictJSONError
from pte._core._strict_json import loads as _strict_json_loads

__all__ = ["loads"]


@functools.cache
def _loader() -> Any:
    """PyYAML's SafeLoader with mappings checked for duplicate and non-text keys, dates as text."""
    import yaml  # type: ignore[import-untyped, unused-ignore]

    class Strict(yaml.SafeLoader):  # type: ignore[misc, unused-ignore]
        pass

    def mapping(loader: Any, node: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            if not isinstance(key, str):
                raise StrictJSONError("syntax", f"a key that is not text: {key!r}")
            if key in out:
                raise StrictJSONError("duplicate_key", f"duplicate key {key!r} in a mapping")
            out[key] = loader.construct_object(value_node, deep=True)
        return out

    def text(loader: Any, node: Any) -> str:
        return str(loader.construct_scalar(node))

    Strict.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    Strict.add_constructor("tag:yaml.org,2002:timestamp", text)
    Strict.add_constructor("tag:yaml.org,2002:binary", text)
    return Strict


def loads(text: str) -> Any:
    """Parse one YAML document strictly (see the module doc); `StrictJSONError` says why not."""
    import yaml  # type: ignore[import-untyped, unused-ignore]

    loader = _loader()
    try:
        for event in yaml.parse(text, Loader=loader):
            if isinstance(event, yaml.AliasEvent):
                raise StrictJSONError("alias", "YAML aliases (*name) are not accepted")
        document = yaml.load(text, Loader=loader)  # a SafeLoader: no Python objects
    except yaml.YAMLError as exc:
        raise StrictJSONError("syntax", f"not valid YAML: {exc}") from None
    except RecursionError:
        raise StrictJSONError("too_deep", "nesting is too deep") from None
    try:
        return _strict_json_loads(json.dumps(document, allow_nan=False))
    except StrictJSONError:
        raise
    except ValueError as exc:  # .nan or .inf
        raise StrictJSONError("constant", f"{exc}: .nan and .inf are not JSON") from None
