"""A read and a write for tests of what runs live (approval interface, replay, resume): the
balance, then a transfer of it. `CALLED` lists the tools' real calls (clear it per test);
`Effects`, a call gate, the calls whose side effect the executor asked it about."""

from __future__ import annotations

from typing import Any

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


class Effects:
    """A call gate that notes the calls whose side effect it is asked about."""

    def __init__(self) -> None:
        self.effects: list[str] = []

    def calls_to_check(self, step_ids: Any) -> frozenset[str]:
        return frozenset()

    def check_call(self, step_id: str, tool: str, args: Any, outputs: Any = None, hidden: Any = ()) -> None:
        raise AssertionError("no call needs an endorsement here")

    def before_effect(self, spec: Any, args: dict[str, Any], step: Any) -> None:
        self.effects.append(step.id)
