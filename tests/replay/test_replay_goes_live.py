"""Replay's invoker tells the executor which call goes live (#35, `GoesLive`): the run's call gate
is asked before exactly those calls' side effects (an approval is consumed by a write re-run with
``--live --allow-writes``), never before an outcome served from the log."""

from __future__ import annotations

import json
from typing import Any

from pte import AuditLog, Executor, compile_plan

# private: the live part replay is given
from pte._execution import LiveInvoker

# private: replay's invoker, white-box (this area's)
from pte._replay._replayer import RecordedInvoker
from tests._two_step_tools import CALLED, REGISTRY, Effects
from tests.audit_runs import begun

PLAN = json.dumps(
    {
        "pte_plan": "1",
        "steps": [
            {"id": "bal", "tool": "balance", "args": {}},
            {"id": "pay", "tool": "transfer", "args": {"cents": {"$ref": "bal/cents"}}},
        ],
    }
)


def recorded() -> list[dict[str, Any]]:
    audit = begun(AuditLog(keep=True))
    Executor(REGISTRY).run(compile_plan(PLAN, REGISTRY), audit)
    CALLED.clear()
    return list(audit.records)


def replayed(**options: Any) -> list[str]:
    invoker = RecordedInvoker(recorded(), **options)
    gate = Effects()
    result = Executor(REGISTRY, invoker=invoker).run(
        compile_plan(PLAN, REGISTRY), begun(AuditLog()), gate=gate
    )
    assert result.failure is None
    return gate.effects


def test_a_plain_replay_goes_live_for_nothing_and_asks_the_gate_nothing() -> None:
    assert replayed() == [] and CALLED == []


def test_live_reads_ask_the_gate_before_each_read_re_run_and_never_for_the_served_write() -> None:
    assert replayed(live=LiveInvoker(), live_reads=True) == ["bal"]
    assert CALLED == ["balance"]


def test_a_write_re_run_with_allow_writes_asks_the_gate_before_its_call() -> None:
    assert replayed(live=LiveInvoker(), live_reads=True, allow_writes=True) == ["bal", "pay"]
    assert CALLED == ["balance", "transfer"]
