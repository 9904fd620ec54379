"""Retries: a transient failure of an idempotent tool is retried with backoff; attempts are
recorded; only a step whose retries are used up fails (and costs a replan)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pte import AuditLog, Executor, Plan, Registry, compile_plan, tool, verify
from pte.audit import read_records
from pte.errors import ToolRegistrationError, TransientError
from tests._vandal import vandalise
from tests.audit_runs import begun

#: Failures left before each tool succeeds, and the times of its calls.
FAILURES: dict[str, int] = {}
CALLS: dict[str, list[float]] = {}


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    FAILURES.clear()
    CALLS.clear()
    SEEN.clear()
    yield


def _called(name: str) -> bool:
    """Record a call; True when this call should fail."""
    CALLS.setdefault(name, []).append(time.monotonic())
    left = FAILURES.get(name, 0)
    FAILURES[name] = left - 1
    return left > 0


@tool(retries=2, backoff_s=0.05)
def flaky_503() -> int:
    if _called("flaky_503"):
        raise TransientError("503 Service Unavailable")
    return 7


@tool(retries=2, backoff_s=0.0, retry_on=(ConnectionError,))
def flaky_socket() -> int:
    if _called("flaky_socket"):
        raise ConnectionResetError("connection reset by peer")
    return 8


@tool(retries=1, backoff_s=0.0, timeout_s=0.2)
async def hangs_once() -> int:
    if _called("hangs_once"):
        await asyncio.sleep(3600)
    return 9


@tool(retries=3, backoff_s=0.0)
def broken() -> int:
    """Fails for a reason that is not transient: never retried."""
    _called("broken")
    raise ValueError("not transient")


#: What each attempt of the vandals was handed (a JSON snapshot taken before it vandalises it).
SEEN: list[Any] = []


@tool(retries=2, backoff_s=0.0)
def vandal(data: Any) -> Any:
    """Takes anything (`Any`: pydantic passes the object through), vandalises it, fails while told to."""
    SEEN.append(json.loads(json.dumps(data)))
    vandalise(data)
    if _called("vandal"):
        raise TransientError("try again")
    return SEEN[-1]


@tool(retries=2, backoff_s=0.0)
async def async_vandal(data: Any) -> Any:
    """`vandal`, on the event loop."""
    SEEN.append(json.loads(json.dumps(data)))
    vandalise(data)
    if _called("async_vandal"):
        raise TransientError("try again")
    return SEEN[-1]


REGISTRY = Registry([flaky_503, flaky_socket, hangs_once, broken, vandal, async_vandal])


def make_plan(*tools: str) -> Plan:
    doc = {"pte_plan": "1", "steps": [{"id": f"s{i}", "tool": t, "args": {}} for i, t in enumerate(tools)]}
    return compile_plan(json.dumps(doc), REGISTRY)


def run(plan: Plan, log: AuditLog | None = None) -> Any:
    return Executor(REGISTRY).run(plan, log)


def test_a_transient_failure_is_retried_with_backoff_and_the_attempts_are_recorded(tmp_path: Path) -> None:
    FAILURES["flaky_503"] = 2
    path = tmp_path / "audit.jsonl"
    with begun(AuditLog(path, validate=True)) as log:
        result = run(make_plan("flaky_503"), log)
    assert result.ok and result.outputs == {"s0": 7}
    step = result.results[0]
    assert step.attempts == 3 and [e.kind for e in step.retry_errors] == ["transient", "transient"]
    calls = CALLS["flaky_503"]
    assert calls[1] - calls[0] >= 0.045 and calls[2] - calls[1] >= 0.095, "backoff doubles"
    finished = read_records(path)[-1]
    assert finished["attempts"] == 3
    assert finished["retry_errors"] == [{"kind": "transient", "message": "503 Service Unavailable"}] * 2
    assert verify(path).intact  # schema-valid as well as chained (validated on append too)


def test_retries_used_up_fail_the_step_with_the_last_error() -> None:
    FAILURES["flaky_503"] = 5
    result = run(make_plan("flaky_503"))
    assert result.failure is not None and result.failure.error is not None
    assert result.failure.error.kind == "transient" and result.failure.attempts == 3
    assert len(CALLS["flaky_503"]) == 3


def test_retry_on_names_further_transient_exception_types() -> None:
    FAILURES["flaky_socket"] = 1
    result = run(make_plan("flaky_socket"))
    assert result.ok and result.results[0].attempts == 2


def test_a_timed_out_attempt_is_retried() -> None:
    FAILURES["hangs_once"] = 1
    result = run(make_plan("hangs_once"))
    assert result.ok, result.failure
    assert result.results[0].attempts == 2 and result.results[0].retry_errors[0].kind == "timeout"


def test_other_failures_are_not_retried() -> None:
    result = run(make_plan("broken"))
    assert result.failure is not None and result.failure.attempts == 1
    assert len(CALLS["broken"]) == 1


_DATA = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | st.text(max_size=3),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.sampled_from("abc"), children, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=max(50, settings().max_examples // 5))  # a run per example
@given(data=_DATA, failures=st.integers(0, 2), name=st.sampled_from(["vandal", "async_vandal"]))
def test_every_attempt_gets_the_arguments_as_planned_whatever_the_one_before_did(
    data: Any, failures: int, name: str
) -> None:
    # Found in #37: a retried call handed every attempt the same dict, so an attempt after one
    # that changed its arguments and failed saw them changed (an `Any` parameter, or a list
    # in one). The recorded arguments said otherwise, and the output was computed from others.
    FAILURES.clear()
    SEEN.clear()
    FAILURES[name] = failures
    doc = {"pte_plan": "1", "steps": [{"id": "v", "tool": name, "args": {"data": data}}]}
    result = run(compile_plan(json.dumps(doc), REGISTRY))
    assert result.ok, result.failure
    step = result.results[0]
    assert step.attempts == failures + 1
    assert [data] * (failures + 1) == SEEN, "each attempt was handed the planned arguments"
    assert step.args == {"data": data} and step.output == data


def test_only_idempotent_tools_may_declare_retries() -> None:
    with pytest.raises(ToolRegistrationError, match="idempotent"):

        @tool(effect="write", retries=2)
        def pay(amount: int) -> bool:
            return True

    @tool(effect="write", idempotent=True, retries=2)
    def upsert(key: str) -> bool:
        return True

    with pytest.raises(ToolRegistrationError, match="retries"):

        @tool(retries=-1)
        def bad(x: int) -> int:
            return x
