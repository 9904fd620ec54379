"""Live and replayed prompts are byte-identical whatever numbers the tools returned (#24).

The log's canonical form (RFC 8785) writes the float ``10.0`` as ``10``, which reads back as
an int: a prompt that rendered the live ``10.0`` could never be replayed (every banking-style
run with a whole amount diverged on its finalizer or replanner prompt). The prompt renders
values as they read back from the log, so live and replay agree byte for byte.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pte import AuditLog, Engine, EngineConfig, Registry, tool

# private: canonical JSON read back with JCS's number model, as a file log reads it
from pte._core import canonical_loads

# private: the prompts' text, white-box
from pte._run import data_block, finalizer_messages
from pte.audit import canonical_json
from pte.runs import replay_file
from pte.testing import FunctionClient

_SAFE = 2**53 - 1
#: Floats a tool may return, whole numbers (``10.0``, ``-0.0``, ``1e16``) weighted in.
floats = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.integers(-(10**6), 10**6).map(float),
    st.sampled_from([10.0, -0.0, 0.0, 1e16, 1e21, 2.0**53, 12.40, 1e-7, 9800.0]),
)
leaves = st.one_of(st.none(), st.booleans(), st.integers(-_SAFE, _SAFE), floats, st.text(max_size=8))
json_values = st.recursive(
    leaves,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=400, deadline=None)
@given(json_values)
def test_a_data_block_reads_the_same_after_the_values_went_through_the_log(value: Any) -> None:
    logged = canonical_json(value).encode()
    # A file log reads numbers back with JCS's number model; the run stores with json.loads.
    for read_back in (canonical_loads(logged), json.loads(logged)):
        assert data_block("x", read_back).encode() == data_block("x", value).encode()
        assert finalizer_messages("r", read_back, [("s", "t", read_back, "trusted")]) == finalizer_messages(
            "r", value, [("s", "t", value, "trusted")]
        )


def test_a_whole_amount_is_shown_as_the_log_writes_it() -> None:
    assert "\n10\n" in data_block("x", 10.0)
    assert "\n12.4\n" in data_block("x", 12.40)
    assert data_block("x", {"amount": 9800.0, "ok": True}) == data_block("x", {"amount": 9800, "ok": True})


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=st.dictionaries(st.sampled_from(["amount", "fee", "rate"]), floats, min_size=1))
def test_a_run_whose_tool_returned_floats_replays_the_same(tmp_path: Path, value: dict[str, float]) -> None:
    """End to end: a read returns floats, a step fails (replan), the finalizer phrases the result."""

    @tool(effect="read")
    def balance(account: str) -> dict[str, Any]:
        """The account's figures."""
        return dict(value)

    @tool(effect="read")
    def flaky(account: str) -> str:
        """Fails."""
        raise RuntimeError("ledger offline")

    registry = Registry([balance, flaky])

    def answer(messages: list[dict[str, str]], call: Any) -> str:
        if not call.wants_json:
            return "done"
        steps: list[dict[str, Any]] = [{"id": "b", "tool": "balance", "args": {"account": "a"}}]
        if call.number == 1:
            steps.append({"id": "f", "tool": "flaky", "args": {"account": "a"}, "after": ["b"]})
            return json.dumps({"pte_plan": "1", "steps": steps, "result": {"$ref": "b"}})
        again = [{"id": "c", "tool": "balance", "args": {"account": "b"}}]
        return json.dumps({"pte_plan": "1", "steps": again, "result": {"$ref": "b"}})

    path = tmp_path / f"run-{abs(hash(json.dumps(value)))}.jsonl"
    engine = Engine(registry, FunctionClient(answer), config=EngineConfig(llm_answer=True))
    with AuditLog(path) as log:
        result = engine.run("figures?", log)
    assert result.status == "succeeded", result.message
    report = replay_file(path, registry=registry)
    assert report.to_dict()["status"] == "ok", report.to_dict()
