"""Write ordering: a write waits for every step before it in plan order, not only its dependencies.

The stricter rule is deliberate (README, "Writes"): plan order is the plan author's
statement of intent even where no reference or ``after`` links two steps, and a run ends at
its first failed step in plan order. So a write never runs when a step before it failed,
even one it does not depend on (a check that the planner forgot to wire with ``after``),
and its ``step_started`` can go into the log at its plan position, durable before the call,
whatever finishes first. These tests pin both consequences down with independent steps, so
that a relaxation to "dependencies only" would fail them.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from pte import AuditLog, Executor, Registry, ToolError, compile_plan, tool
from tests.audit_runs import begun

PAID: list[str] = []
SEEN_IN_LOG: list[list[tuple[str, str]]] = []
LOG: dict[str, AuditLog] = {}


@tool(timeout_s=10.0)
async def sanctions_check(party: str, delay_ms: int, hit: bool) -> bool:
    """A slow check that may fail (an independent earlier step)."""
    await asyncio.sleep(delay_ms / 1000)
    if hit:
        raise ToolError("sanctioned", f"{party} is on a sanctions list")
    return True


@tool(effect="write", idempotent=True, timeout_s=10.0)
def pay(party: str) -> bool:
    """The write: notes the records already in the log when it is called."""
    PAID.append(party)
    SEEN_IN_LOG.append([(r["type"], r.get("step_id", "")) for r in LOG["log"].records[1:]])
    return True


REGISTRY = Registry([sanctions_check, pay])


def _plan(hit: bool) -> Any:
    # No reference and no `after` link the two steps: only plan order does.
    steps = [
        {"id": "check", "tool": "sanctions_check", "args": {"party": "ACME", "delay_ms": 200, "hit": hit}},
        {"id": "pay", "tool": "pay", "args": {"party": "ACME"}},
    ]
    return compile_plan(json.dumps({"pte_plan": "1", "steps": steps}), REGISTRY)


def _run(hit: bool, **options: Any) -> Any:
    PAID.clear()
    SEEN_IN_LOG.clear()
    LOG["log"] = begun(AuditLog())
    return Executor(REGISTRY, **options).run(_plan(hit), LOG["log"])


def test_a_write_never_runs_when_an_unrelated_earlier_step_fails() -> None:
    for concurrency in (1, 2, 8):
        result = _run(hit=True, max_concurrency=concurrency)
        assert result.failure is not None and result.failure.step_id == "check"
        assert PAID == []  # the payment waited for the check, and the failed check ended the run
        types = [(r["type"], r.get("step_id")) for r in LOG["log"].records]
        assert ("step_started", "pay") not in types


def test_a_write_waits_until_every_earlier_step_is_recorded() -> None:
    result = _run(hit=False, max_concurrency=8)
    assert result.ok and PAID == ["ACME"]
    # When the write was called, the independent check before it was finished and recorded,
    # and the write's own intent was already written after it.
    assert SEEN_IN_LOG == [[("step_started", "check"), ("step_finished", "check"), ("step_started", "pay")]]


def test_serial_writes_changes_nothing_for_the_writes_own_order() -> None:
    result = _run(hit=False, max_concurrency=8, serial_writes=True)
    assert result.ok and PAID == ["ACME"]
    assert SEEN_IN_LOG == [[("step_started", "check"), ("step_finished", "check"), ("step_started", "pay")]]
