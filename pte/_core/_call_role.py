"""Which role an LLM call is made for: ``planner``, ``replanner``, ``stage``, ``repair`` or ``finalizer``.

The run loop sets it around each call (`RunLoop._call_llm`); an `LLMClient` may read it with
`current_role` (`pte.testing.ScriptedModel` answers each role from its own script). It is
not part of the client protocol: a client that ignores it behaves the same.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

__all__ = ["call_role", "current_role"]

_ROLE: ContextVar[str | None] = ContextVar("pte_llm_call_role", default=None)


def current_role() -> str | None:
    """The role of the LLM call in progress, or None outside an engine's call."""
    return _ROLE.get()


@contextmanager
def call_role(role: str) -> Iterator[None]:
    """Mark the calls made inside the block as made for `role`."""
    token = _ROLE.set(role)
    try:
        yield
    finally:
        _ROLE.reset(token)
