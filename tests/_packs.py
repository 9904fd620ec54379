"""Call a stock tool the way the executor does: validate args, invoke, validate the JSON output."""

from __future__ import annotations

from typing import Any

from pte import load_pack


def caller(pack: str) -> Any:
    registry = load_pack(pack)

    def call(name: str, **args: Any) -> Any:
        spec = registry[name]
        spec.validate_args(args)
        out = spec.invoke(args)
        spec.validate_output(out)
        return out

    return call
