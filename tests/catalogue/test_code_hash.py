"""A tool's code hash (``run_started.tools[].code_hash``) is the hash of its function's source,
kept per function: read once, read again when the function is given other code."""

from __future__ import annotations

import hashlib
import inspect

import pte

# private: the code hash a run_started records for each tool (no public name)
from pte._catalogue._fingerprint import tool_fingerprint


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def test_the_code_hash_is_the_sources_and_follows_new_code() -> None:
    def first(x: int) -> dict[str, int]:
        """One."""
        return {"x": x}

    def second(x: int) -> dict[str, int]:
        """Two."""
        return {"x": x + 1}

    registry = pte.Registry([pte.tool(first), pte.tool(second)])
    spec, other = registry["first"], registry["second"]
    assert tool_fingerprint(spec)["code_hash"] == _sha(inspect.getsource(first))
    assert tool_fingerprint(spec)["code_hash"] == _sha(inspect.getsource(first))  # kept: the same
    assert (
        tool_fingerprint(other)["code_hash"]
        == _sha(inspect.getsource(second))
        != _sha(inspect.getsource(first))
    )
    # The same function object running other code hashes that code, not what it ran before.
    first.__code__ = second.__code__
    assert tool_fingerprint(spec)["code_hash"] == _sha(inspect.getsource(second))
