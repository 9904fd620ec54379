"""Text from outside a run that holds a lone surrogate never makes its records unwritable.

A model's answer decoded from JSON (``"\\ud800"``) or a tool's error message may hold a lone
surrogate, which UTF-8 (and so the audit log) cannot encode. Recorded as it was, such text broke
the log: the run ended `audit_write_failed` with a log that no longer verified, so a planner
that had seen untrusted data, or a tool quoting a service's reply, could stop every run's audit.
The engine now takes such text as `well_formed` makes it (each lone surrogate U+FFFD), in the
record and in what it compiles or replans from alike: the run goes on as for any other answer
or failure, its log verifies and replays.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from pte import AuditLog, Engine, Registry, tool, verify
from pte.runs import replay_file
from pte.testing import ScriptedModel

# Text holding at least one lone surrogate, anywhere, among ordinary characters.
lone_surrogates = st.builds(
    lambda before, surrogate, after: before + surrogate + after,
    st.text(max_size=8),
    st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF),
    st.text(max_size=8),
)


@tool
def look_up(name: str) -> str:
    """Look a name up."""
    return f"found {name}"


def _run(model: ScriptedModel, registry: Registry, folder: Path) -> tuple[str, str | None, Path]:
    log = folder / "run.jsonl"
    with AuditLog(log) as audit:
        result = Engine(registry, model).run("Look up the customer, please.", audit)
    return result.status, result.reason, log


def _plan(name: str) -> str:
    return json.dumps(
        {
            "pte_plan": "1",
            "steps": [{"id": "customer_lookup", "tool": "look_up", "args": {"name": name}}],
            "result": {"$ref": "customer_lookup"},
        }
    )


@settings(max_examples=40, deadline=None)
@given(text=lone_surrogates)
def test_a_tool_error_quoting_a_lone_surrogate_is_recorded_and_replanned(text: str) -> None:
    calls = []

    @tool
    def flaky_lookup(name: str) -> str:
        """Look a name up in the old system."""
        calls.append(name)
        raise RuntimeError(f"the service said: {text}")

    registry = Registry([flaky_lookup, look_up])
    first = json.dumps(
        {
            "pte_plan": "1",
            "steps": [{"id": "old_lookup", "tool": "flaky_lookup", "args": {"name": "Ada"}}],
            "result": {"$ref": "old_lookup"},
        }
    )
    model = ScriptedModel(planner=[first], replanner=[_plan("Ada")], finalizer=["Found Ada."])
    with tempfile.TemporaryDirectory() as scratch:
        status, reason, log = _run(model, registry, Path(scratch))
        assert (status, reason) == ("succeeded", None)
        assert calls == ["Ada"]
        assert verify(log).ok
        assert replay_file(log, registry=registry).ok


@settings(max_examples=40, deadline=None)
@given(text=lone_surrogates)
def test_a_model_answer_holding_a_lone_surrogate_is_compiled_and_recorded(text: str) -> None:
    # The surrogate as a character of the answer (an escaped "\\ud800" is JSON that compile
    # refuses by name: the next test's kind of answer).
    registry = Registry([look_up])
    answer = _plan("NAME").replace('"NAME"', json.dumps(text, ensure_ascii=False))
    model = ScriptedModel(planner=[answer], finalizer=["Done."])
    with tempfile.TemporaryDirectory() as scratch:
        status, reason, log = _run(model, registry, Path(scratch))
        assert (status, reason) == ("succeeded", None)
        assert verify(log).ok
        assert replay_file(log, registry=registry).ok


@settings(max_examples=40, deadline=None)
@given(text=lone_surrogates, escaped=st.booleans())
def test_a_model_answer_that_is_no_plan_and_holds_a_lone_surrogate_fails_closed_by_name(
    text: str, escaped: bool
) -> None:
    registry = Registry([look_up])
    answer = _plan(text) if escaped else f"Sure! {text}"  # escaped inside a plan, or raw prose
    model = ScriptedModel(planner=[answer], repair=[_plan("Ada")], finalizer=["Done."])
    with tempfile.TemporaryDirectory() as scratch:
        status, reason, log = _run(model, registry, Path(scratch))
        assert reason != "audit_write_failed"
        assert status in {"succeeded", "failed_closed"}
        assert verify(log).ok
