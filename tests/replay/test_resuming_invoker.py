"""Resume's invoker has one path (#35): a step its log recorded is served from the log, the rest
run live, whether the executor drives it (`served`, then `start`) or it is called directly
(`LiveInvoker.__call__` asks `served` first, so no subclass needs a call path of its own)."""

from __future__ import annotations

import json
from typing import Any

from pte import AuditLog, Executor, compile_plan

# private: the live part resume is given
from pte._execution import LiveInvoker

# private: resume's invoker, white-box (this area's)
from pte._replay._replayer import ResumingInvoker
from tests._two_step_tools import CALLED, REGISTRY, Effects
from tests.audit_runs import begun

PLAN = json.dumps(
    {
        "pte_plan": "1",
        "steps": [
            {"id": "read_balance", "tool": "balance", "args": {}},
            {"id": "send_transfer", "tool": "transfer", "args": {"cents": {"$ref": "read_balance/cents"}}},
        ],
        "result": {"$ref": "send_transfer/id"},
    }
)


def crashed_after_the_read() -> list[dict[str, Any]]:
    """A run's records up to the read's end: the write never started (a crash between them)."""
    audit = begun(AuditLog(keep=True))
    Executor(REGISTRY).run(compile_plan(PLAN, REGISTRY), audit)
    records = list(audit.records)
    cut = next(
        i for i, r in enumerate(records) if r["type"] == "step_finished" and r["step_id"] == "read_balance"
    )
    CALLED.clear()
    return records[: cut + 1]


def test_called_directly_it_serves_the_recorded_step_and_calls_the_rest_live() -> None:
    invoker = ResumingInvoker(crashed_after_the_read(), LiveInvoker())
    plan = compile_plan(PLAN, REGISTRY)
    read, write = plan.steps
    assert invoker(REGISTRY["balance"], {}, read) == {"cents": 100}
    assert CALLED == []  # served from the log: the tool is not called again
    assert invoker(REGISTRY["transfer"], {"cents": 100}, write) == {"id": "t1"}
    assert CALLED == ["transfer"] and invoker.live_calls == ["send_transfer"]


def test_driven_by_the_executor_it_serves_the_recorded_step_and_gates_only_the_live_write() -> None:
    invoker = ResumingInvoker(crashed_after_the_read(), LiveInvoker())
    gate = Effects()
    result = Executor(REGISTRY, invoker=invoker).run(
        compile_plan(PLAN, REGISTRY), begun(AuditLog()), gate=gate
    )
    assert result.failure is None and result.outputs["send_transfer"] == {"id": "t1"}
    assert CALLED == ["transfer"] and gate.effects == ["send_transfer"]
    assert invoker.live_calls == ["send_transfer"]
