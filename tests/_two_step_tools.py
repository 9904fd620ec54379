"""A read and a write for tests of what runs live (approval interface, replay, resume): the
balance, then a transfer of it. `CALLED` lists the tools' real calls (clear it per test)."""

from __future__ import annotations

from pydantic import BaseModel

from pte import Registry, tool

CALLED: list[str] = []


class Balance(BaseModel):
    """An account's balance."""

    cents: int


class Sent(BaseModel):
    """A transfer sent."""

    id: str


@tool
def balance() -> Balance:
    """The account's balance."""
    CALLED.append("balance")
    return Balance(cents=100)


@tool(effect="write")
def transfer(cents: int) -> Sent:
    """Send a transfer."""
    CALLED.append("transfer")
    return Sent(id="t1")


REGISTRY = Registry([balance, transfer])
