"""The deterministic executor: order, references, validation, failures, timeouts and the audit trail.

Every test drives the real `Executor` with real `@tool` functions (no mocks of the
executor itself); the only instrumentation is on the audit log (to observe write-ahead
ordering and to inject write failures) and on the tools (to record what was called).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any

import jsonschema
import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as hs
from pydantic import Field
from typing_extensions import TypedDict

from pte import AuditLog, Engine, Executor, Plan, ReasonCode, Registry, ToolError, compile_plan, tool, verify

# private: the record schema, checked against directly
from pte._audit import load_audit_schema

# private: the effect literal type
from pte._catalogue import Effect

# private: the invoker with call hooks
from pte._execution import LiveInvoker
from pte.audit import read_records
from pte.catalogue import ToolSpec
from pte.errors import AuditWriteError
from pte.plan import PlanStep
from tests._chain import sha256_text
from tests.audit_runs import begun

REPO = Path(__file__).resolve().parents[2]

#: Every tool call made by the tools below, in order: ``(tool, tag)``.
CALLS: list[tuple[str, str]] = []

#: Released at the end of each test so that a timed-out (abandoned) tool thread ends too.
RELEASE = threading.Event()

SECRET = "sk-proj-Zq81mXc0VbNw7TkL2rPa9sDfGh3J"


@pytest.fixture(autouse=True)
def _fresh_state() -> Iterator[None]:
    CALLS.clear()
    RELEASE.clear()
    yield
    RELEASE.set()


# --- tools --------------------------------------------------------------------------------------


class Inner(TypedDict):
    b: list[int]
    c: str


class Produced(TypedDict):
    a: Inner
    n: int
    neg: int


# RFC 6901 escaping needs keys with "/" and "~", which only the functional form can spell.
Weird = TypedDict("Weird", {"a/b": int, "t~": int})


class Partial(TypedDict, total=False):
    present: int
    absent: int


class Pair(TypedDict):
    left: int
    right: int


@tool
def produce(n: int) -> Produced:
    """Structured output for reference tests."""
    CALLS.append(("produce", str(n)))
    return {"a": {"b": [n, n + 1, n + 2], "c": f"c{n}"}, "n": n, "neg": -n}


@tool
def weird() -> Weird:
    """Keys that need JSON Pointer escaping."""
    CALLS.append(("weird", ""))
    return {"a/b": 1, "t~": 2}


@tool
def partial() -> Partial:
    """An output whose `absent` key is optional and, at run time, missing."""
    CALLS.append(("partial", ""))
    return {"present": 1}


@tool
def ident(x: Any = None) -> Any:
    """Echo: its output is exactly its (resolved) input."""
    CALLS.append(("ident", ""))
    return x


@tool
def trace(tag: str, inputs: list[Any] | None = None) -> str:
    """Record the call; `inputs` only carries references to create dependencies."""
    CALLS.append(("trace", tag))
    return tag


@tool
def need_nonneg(x: Annotated[int, Field(ge=0)]) -> int:
    """Its input schema has a value constraint that a referenced value can break."""
    CALLS.append(("need_nonneg", str(x)))
    return x


@tool
def want_int(x: int) -> int:
    CALLS.append(("want_int", str(x)))
    return x


@tool
def wrong_shape() -> int:
    """Declares an int, returns a string."""
    CALLS.append(("wrong_shape", ""))
    return "not an int"  # type: ignore[return-value]


@tool
def wrong_dict() -> Pair:
    """Declares a Pair, returns one without `right`."""
    CALLS.append(("wrong_dict", ""))
    return {"left": 1}  # type: ignore[typeddict-item]


@tool
def boom() -> int:
    """Raises an ordinary exception."""
    CALLS.append(("boom", ""))
    raise RuntimeError("kaboom")


@tool
def rate_limited() -> int:
    """Raises a ToolError of its own kind, which the executor keeps."""
    CALLS.append(("rate_limited", ""))
    raise ToolError("rate_limited", "try later")


@tool(timeout_s=0.2)
def slow() -> int:
    """Blocks far longer than its 0.2 s timeout (until the test releases it)."""
    CALLS.append(("slow", ""))
    RELEASE.wait(30)
    return 0


@tool(effect="write")
def write_note(tag: str) -> bool:
    """A write tool: its side effect is the CALLS entry."""
    CALLS.append(("write_note", tag))
    return True


@tool
def leak() -> dict[str, str]:
    """Returns a credential, as a careless tool might."""
    CALLS.append(("leak", ""))
    return {"api_key": SECRET, "note": f"use Bearer {SECRET} for the API"}


@tool
def login(user: str, password: str) -> bool:
    CALLS.append(("login", user))
    return True


@tool
def mutate(data: dict[str, Any]) -> int:
    """Mutates everything it was given, in place."""
    CALLS.append(("mutate", ""))
    size = len(data)
    for value in data.values():
        if isinstance(value, list):
            value.append(99)
        elif isinstance(value, dict):
            value["injected"] = True
    data.clear()
    data["evil"] = 1
    return size


@tool
def mutate_list(items: Any) -> int:
    """Mutates a list it received by reference (`Any`: pydantic passes the object through)."""
    CALLS.append(("mutate_list", ""))
    items.append(99)
    return len(items)


@tool
def count(items: list[int]) -> int:
    CALLS.append(("count", str(items)))
    return len(items)


ALL_TOOLS: list[Callable[..., Any]] = [
    produce,
    weird,
    partial,
    ident,
    trace,
    need_nonneg,
    want_int,
    wrong_shape,
    wrong_dict,
    boom,
    rate_limited,
    slow,
    write_note,
    leak,
    login,
    mutate,
    mutate_list,
    count,
]
REGISTRY = Registry(ALL_TOOLS)


def make_plan(*steps: Mapping[str, Any], result: Any = None, registry: Registry = REGISTRY) -> Plan:
    doc: dict[str, Any] = {"pte_plan": "1", "steps": list(steps)}
    if result is not None:
        doc["result"] = result
    return compile_plan(json.dumps(doc), registry)


def step(sid: str, tool_name: str, after: Sequence[str] = (), **args: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"id": sid, "tool": tool_name, "args": args}
    if after:
        out["after"] = list(after)
    return out


def ref(text: str) -> dict[str, str]:
    return {"$ref": text}


def tool_names() -> list[str]:
    return [name for name, _ in CALLS]


# --- order --------------------------------------------------------------------------------------


def test_order_is_topological_with_ties_broken_by_plan_order() -> None:
    plan = make_plan(
        step("a", "trace", after=["c"], tag="a"),
        step("b", "trace", tag="b"),
        step("c", "trace", tag="c"),
        step("d", "trace", tag="d", inputs=[ref("a")]),
        step("e", "trace", tag="e"),
    )
    # Ready at first: b, c, e. After c, a is ready and precedes e in the plan;
    # after a, d (index 3) precedes e.
    assert plan.order == ("b", "c", "a", "d", "e")
    # One step at a time, the tools are called in that order.
    result = Executor(REGISTRY, max_concurrency=1).run(plan)
    assert result.ok
    assert [tag for _, tag in CALLS] == ["b", "c", "a", "d", "e"]
    assert [r.step_id for r in result.results] == ["b", "c", "a", "d", "e"]
    # Concurrently, independent steps may be called in any order, but each after what it
    # depends on, and the results (and records) still come in plan order.
    CALLS.clear()
    result = Executor(REGISTRY).run(plan)
    assert result.ok
    calls = [tag for _, tag in CALLS]
    assert sorted(calls) == ["a", "b", "c", "d", "e"]
    assert calls.index("c") < calls.index("a") < calls.index("d")
    assert [r.step_id for r in result.results] == ["b", "c", "a", "d", "e"]


def _expected_order(n: int, deps: dict[int, set[int]]) -> list[int]:
    """Reference scheduler, written independently: run the lowest-index ready step each time."""
    done: list[int] = []
    while len(done) < n:
        ready = [i for i in range(n) if i not in done and deps[i] <= set(done)]
        done.append(min(ready))
    return done


@hs.composite
def dags(draw: hs.DrawFn) -> tuple[int, dict[int, set[int]], list[bool]]:
    n = draw(hs.integers(1, 9))
    # A hidden topological rank makes any drawn edge set acyclic, whatever the listing order.
    rank = draw(hs.permutations(range(n)))
    deps: dict[int, set[int]] = {i: set() for i in range(n)}
    for i in range(n):
        for j in range(n):
            if rank[j] < rank[i] and draw(hs.booleans()):
                deps[i].add(j)
    # Per step: wire its dependencies as references (True) or as `after` (False).
    as_refs = draw(hs.lists(hs.booleans(), min_size=n, max_size=n))
    return n, deps, as_refs


@given(dags())
def test_order_matches_a_reference_scheduler(case: tuple[int, dict[int, set[int]], list[bool]]) -> None:
    n, deps, as_refs = case
    steps = []
    for i in range(n):
        names = [f"s{j}" for j in sorted(deps[i])]
        if as_refs[i]:
            steps.append(step(f"s{i}", "trace", tag=f"s{i}", inputs=[ref(x) for x in names]))
        else:
            steps.append(step(f"s{i}", "trace", after=names, tag=f"s{i}"))
    plan = make_plan(*steps)
    expected = [f"s{i}" for i in _expected_order(n, deps)]
    assert list(plan.order) == expected
    for _ in range(2):  # and the same again: nothing about a run changes the order
        CALLS.clear()
        assert Executor(REGISTRY, max_concurrency=1).run(plan).ok
        assert [tag for _, tag in CALLS] == expected
    # Concurrently: every call after the calls it depends on; results in plan order.
    CALLS.clear()
    result = Executor(REGISTRY, max_concurrency=4).run(plan)
    assert result.ok and [r.step_id for r in result.results] == expected
    calls = [tag for _, tag in CALLS]
    assert sorted(calls) == sorted(expected)
    for i in range(n):
        for j in deps[i]:
            assert calls.index(f"s{j}") < calls.index(f"s{i}")


# --- references ---------------------------------------------------------------------------------


def test_references_resolve_nested_pointers_indexes_whole_outputs_and_escapes() -> None:
    plan = make_plan(
        step("p", "produce", n=3),
        step("w", "weird"),
        step(
            "e",
            "ident",
            x={
                "whole": ref("p"),
                "index": ref("p/a/b/1"),
                "nested": ref("p/a/c"),
                "list": [ref("p/n"), 5, {"deep": ref("p/a")}],
                "slash": ref("w/a~1b"),
                "tilde": ref("w/t~0"),
            },
        ),
        result={"index": ref("p/a/b/1"), "tilde": ref("w/t~0"), "whole": ref("e")},
    )
    log = begun(AuditLog(keep=True))
    result = Executor(REGISTRY).run(plan, log)
    assert result.ok, result.failure
    produced = {"a": {"b": [3, 4, 5], "c": "c3"}, "n": 3, "neg": -3}
    expected = {
        "whole": produced,
        "index": 4,
        "nested": "c3",
        "list": [3, 5, {"deep": produced["a"]}],
        "slash": 1,
        "tilde": 2,
    }
    assert result.outputs["e"] == expected
    assert result.results[-1].args == {"x": expected}
    assert result.result_value() == {"index": 4, "tilde": 2, "whole": expected}
    started = [r for r in log.records if r["type"] == "step_started" and r["step_id"] == "e"]
    assert started[0]["args"] == {"x": expected}, "the log records the resolved arguments"


def test_reference_to_an_optional_part_that_is_absent_fails_the_step_without_calling_the_tool() -> None:
    plan = make_plan(step("p", "partial"), step("q", "want_int", x=ref("p/absent")))
    log = begun(AuditLog(keep=True))
    result = Executor(REGISTRY).run(plan, log)
    assert result.failure is not None and result.failure.step_id == "q"
    assert result.failure.error is not None and result.failure.error.kind == "unresolved_reference"
    assert "want_int" not in tool_names()
    # The step is still on record, with its arguments as written (they could not be resolved).
    started = [r for r in log.records if r["type"] == "step_started" and r["step_id"] == "q"]
    assert started[0]["args"] == {"x": {"$ref": "p/absent"}}


# --- validation ---------------------------------------------------------------------------------


def test_resolved_args_are_validated_at_run_time_and_the_tool_is_not_called() -> None:
    # Statically fine (an int feeds an int), but the value -3 breaks `ge=0` at run time.
    plan = make_plan(
        step("p", "produce", n=3),
        step("q", "need_nonneg", x=ref("p/neg")),
        step("r", "trace", tag="after-q"),
    )
    result = Executor(REGISTRY).run(plan)
    failure = result.failure
    assert failure is not None and failure.step_id == "q" and failure.status == "failed"
    assert failure.error is not None and failure.error.kind == "invalid_args"
    assert "minimum" in failure.error.message
    assert failure.args == {"x": -3}
    assert "need_nonneg" not in tool_names(), "the invalid step's tool never ran"
    assert [r.step_id for r in result.results] == ["p", "q"], "nothing after it is recorded"
    assert "r" not in result.outputs
    # One step at a time, nothing after the failed step even starts.
    CALLS.clear()
    assert Executor(REGISTRY, max_concurrency=1).run(plan).failure is not None
    assert tool_names() == ["produce"], "neither the invalid step nor anything after it ran"


def test_resolved_args_that_satisfy_the_constraint_pass() -> None:
    plan = make_plan(step("p", "produce", n=3), step("q", "need_nonneg", x=ref("p/n")))
    result = Executor(REGISTRY).run(plan)
    assert result.ok and result.outputs["q"] == 3


@pytest.mark.parametrize("tool_name", ["wrong_shape", "wrong_dict"])
def test_output_that_breaks_the_output_schema_fails_the_step(tool_name: str) -> None:
    plan = make_plan(step("bad", tool_name), step("later", "trace", tag="later"))
    result = Executor(REGISTRY).run(plan)
    assert result.failure is not None and result.failure.step_id == "bad"
    assert result.failure.error is not None and result.failure.error.kind == "invalid_output"
    assert "bad" not in result.outputs, "an invalid output is never handed to later steps"
    assert "later" not in result.outputs and [r.step_id for r in result.results] == ["bad"]
    CALLS.clear()
    Executor(REGISTRY, max_concurrency=1).run(plan)
    assert ("trace", "later") not in CALLS


def test_tool_exception_is_a_failed_step_with_kind_tool_error() -> None:
    result = Executor(REGISTRY).run(make_plan(step("x", "boom")))
    assert result.failure is not None
    assert result.failure.error is not None
    assert result.failure.error.kind == "tool_error"
    assert "RuntimeError" in result.failure.error.message and "kaboom" in result.failure.error.message


def test_tool_error_raised_by_the_tool_keeps_its_kind() -> None:
    result = Executor(REGISTRY).run(make_plan(step("x", "rate_limited")))
    assert result.failure is not None and result.failure.error is not None
    assert result.failure.error.to_dict() == {"kind": "rate_limited", "message": "try later"}


def test_execution_stops_at_the_first_failure() -> None:
    plan = make_plan(
        step("one", "trace", tag="one"),
        step("two", "boom"),
        step("three", "trace", tag="three"),  # independent of "two": only the stop rule keeps it from running
        step("four", "write_note", tag="four"),
    )
    result = Executor(REGISTRY).run(plan)
    # "three" is an independent read: it may have run beside "two", but it is not recorded
    # and its output is not kept. The write after the failure never runs.
    assert ("write_note", "four") not in CALLS
    assert [r.step_id for r in result.results] == ["one", "two"]
    assert result.failure is result.results[-1]
    assert set(result.outputs) == {"one"}
    # One step at a time, nothing after the failure even starts.
    CALLS.clear()
    Executor(REGISTRY, max_concurrency=1).run(plan)
    assert tool_names() == ["trace", "boom"]


def test_completed_outputs_are_not_run_again_and_feed_later_steps() -> None:
    plan = make_plan(
        step("p", "produce", n=3),
        step("q", "ident", x=ref("p/a/b/0")),
        step("r", "trace", tag="r"),
    )
    recorded = {"p": {"a": {"b": [70, 71, 72], "c": "old"}, "n": 70, "neg": -70}}
    log = begun(AuditLog(keep=True))
    seen: list[str] = []
    result = Executor(REGISTRY).run(plan, log, completed=recorded, on_step=lambda s: seen.append(s.step_id))
    assert result.ok
    assert "produce" not in tool_names()
    assert result.outputs["q"] == 70, "the completed output is what the reference reads"
    assert [r.step_id for r in result.results] == ["q", "r"] == seen
    assert result.outputs["p"] == recorded["p"]
    assert all(r.get("step_id") != "p" for r in log.records)


def test_a_step_result_cannot_be_changed_and_compares_by_its_fields() -> None:
    # StepResult is a frozen msgspec Struct (#37): still read-only, still equal by value.
    plan = make_plan(step("p", "produce", n=3), step("q", "boom"))
    result = Executor(REGISTRY).run(plan)
    ok, failed = result.results
    for step_result in (ok, failed):
        for name in ("status", "output", "error", "args", "duration_ms", "attempts"):
            with pytest.raises(AttributeError):
                setattr(step_result, name, None)
    assert ok.ok and ok.output == result.outputs["p"] and not failed.ok
    assert msgspec.structs.replace(ok, duration_ms=0.0) == msgspec.structs.replace(ok, duration_ms=0.0)
    assert msgspec.structs.replace(ok, duration_ms=0.0) != msgspec.structs.replace(ok, duration_ms=1.0)
    assert failed.error is not None and failed.error.kind == "tool_error" and failed.output is None


# --- timeouts -----------------------------------------------------------------------------------


def test_timeout_fails_the_step_promptly_and_the_executor_stays_usable() -> None:
    executor = Executor(REGISTRY)
    plan = make_plan(step("s", "slow"), step("after", "trace", tag="after"))
    started = time.monotonic()
    result = executor.run(plan)
    elapsed = time.monotonic() - started
    assert result.failure is not None and result.failure.error is not None
    assert result.failure.error.kind == "timeout"
    assert elapsed < 2.0, f"the run took {elapsed:.2f}s for a 0.2s timeout"
    assert [r.step_id for r in result.results] == ["s"] and "after" not in result.outputs
    # The hung call still occupies its abandoned thread; a new run must not queue behind it.
    started = time.monotonic()
    again = executor.run(make_plan(step("t", "trace", tag="next")))
    assert again.ok and time.monotonic() - started < 1.0


HANG_SCRIPT = textwrap.dedent(
    """
    import json, sys, time
    from pte._plan._compiler import compile_plan
    from pte._execution._executor import Executor
    from pte._catalogue._registry import Registry; from pte._catalogue._tool_decorator import tool

    @tool(timeout_s=0.2)
    def hang() -> int:
        time.sleep(3600)
        return 0

    registry = Registry([hang])
    plan = compile_plan('{"pte_plan": "1", "steps": [{"id": "h", "tool": "hang", "args": {}}]}', registry)
    started = time.monotonic()
    result = Executor(registry).run(plan)
    print(json.dumps({"kind": result.failure.error.kind, "elapsed": time.monotonic() - started}))
    sys.stdout.flush()
    """
)


def test_a_hung_tool_does_not_keep_the_process_alive() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", HANG_SCRIPT], env=env, capture_output=True, text=True, timeout=60, cwd=REPO
    )
    elapsed = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["kind"] == "timeout"
    assert report["elapsed"] < 2.0
    # Interpreter start-up and imports take ~1 s; a hang would take an hour.
    assert elapsed < 10.0, f"the process took {elapsed:.1f}s to exit"


# --- nothing but the plan -----------------------------------------------------------------------


def _recording_tool(name: str, effect: Effect = "read") -> Callable[..., Any]:
    """A distinct tool called `name` that records its calls."""

    def fn(tag: str = "") -> str:
        CALLS.append((name, tag))
        return name

    fn.__name__ = name
    return tool(name=name, effect=effect)(fn)


def test_the_executor_calls_only_what_the_plan_names() -> None:
    used = [_recording_tool("used_a"), _recording_tool("used_b", "write")]
    extras = [
        _recording_tool("extra_read"),
        _recording_tool("extra_write", "write"),
        _recording_tool("extra_c"),
    ]
    registry = Registry([*used, *extras])
    plan = make_plan(
        step("one", "used_a", tag="1"),
        step("two", "used_b", tag="2"),
        step("three", "used_a", tag="3"),
        registry=registry,
    )
    assert Executor(registry).run(plan).ok
    assert Counter(CALLS) == Counter([("used_a", "1"), ("used_b", "2"), ("used_a", "3")])
    assert not {name for name, _ in CALLS} & {"extra_read", "extra_write", "extra_c"}


# --- immutability -------------------------------------------------------------------------------


class MutatingInvoker:
    """Calls the tool, then vandalises the arguments dict it was handed."""

    def __init__(self) -> None:
        self.inner = LiveInvoker()

    def __call__(self, spec: ToolSpec, args: dict[str, Any], step: PlanStep) -> Any:
        output = self.inner(spec, args, step)
        for value in args.values():
            if isinstance(value, dict):
                value["injected"] = True
        args.clear()
        args["evil"] = {"$ref": "nowhere"}
        return output


def test_a_tool_that_mutates_its_args_cannot_change_the_plan() -> None:
    plan = make_plan(
        step("p", "produce", n=2),
        step("m", "mutate", data={"lit": [1, 2], "obj": {"k": "v"}, "r": ref("p/a/b")}),
        step("again", "mutate", data={"lit": [1, 2], "obj": {"k": "v"}}),
    )
    before_hash, before_canonical = plan.hash, plan.canonical
    before_args = {s.id: s.args for s in plan}
    for invoker in (None, MutatingInvoker()):
        result = Executor(REGISTRY, invoker=invoker).run(plan)
        assert result.ok
        assert plan.hash == before_hash == sha256_text(plan.canonical)
        assert plan.canonical == before_canonical
        assert {s.id: s.args for s in plan} == before_args
        # The step's result keeps the arguments as resolved, not as the tool left them.
        assert result.results[1].args == {"data": {"lit": [1, 2], "obj": {"k": "v"}, "r": [2, 3, 4]}}
        assert result.outputs["p"]["a"]["b"] == [2, 3, 4]
    # The second `mutate` step saw pristine literals although the first vandalised its copy.
    assert result.outputs["again"] == 2


def test_a_tool_that_mutates_a_referenced_value_cannot_change_an_earlier_output() -> None:
    """Data flows only through declared references: a consumer must not rewrite its producer's output.

    Otherwise a later step would see a value the log never recorded for the producer, and a
    replay (which serves the logged outputs) would diverge from the live run.
    """
    plan = make_plan(
        step("p", "produce", n=1),
        step("m", "mutate_list", items=ref("p/a/b")),
        step("c", "count", items=ref("p/a/b")),
        result=ref("p"),
    )
    log = begun(AuditLog(keep=True))
    result = Executor(REGISTRY).run(plan, log)
    assert result.ok
    logged = next(r["output"] for r in log.records if r["type"] == "step_finished" and r["step_id"] == "p")
    assert result.outputs["p"] == logged == {"a": {"b": [1, 2, 3], "c": "c1"}, "n": 1, "neg": -1}
    assert result.results[0].output == logged
    assert result.outputs["c"] == 3, "the later step reads what p really returned"
    assert result.result_value() == logged


# --- audit records ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def audit_validator() -> jsonschema.Draft202012Validator:
    schema = load_audit_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


SCENARIOS: dict[str, list[dict[str, Any]]] = {
    "ok": [
        step("p", "produce", n=3),
        step("w", "write_note", tag="w"),
        step("e", "ident", x={"v": ref("p/a/b/2"), "all": ref("p")}),
        step("n", "ident"),
    ],
    "invalid_args": [step("p", "produce", n=3), step("q", "need_nonneg", x=ref("p/neg"))],
    "invalid_output": [step("bad", "wrong_dict")],
    "tool_error": [step("w", "write_note", tag="w"), step("b", "boom")],
    "custom_error": [step("r", "rate_limited")],
    "timeout": [step("s", "slow")],
    "unresolved_reference": [step("p", "partial"), step("q", "want_int", x=ref("p/absent"))],
}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_every_record_the_executor_writes_is_schema_valid_and_paired(
    scenario: str, audit_validator: jsonschema.Draft202012Validator, tmp_path: Path
) -> None:
    path = tmp_path / "audit.jsonl"
    with begun(AuditLog(path, keep=True)) as log:
        result = Executor(REGISTRY).run(make_plan(*SCENARIOS[scenario]), log)
    kinds = [r.error.kind for r in result.results if r.error is not None]
    assert kinds == ([] if scenario == "ok" else ["rate_limited" if scenario == "custom_error" else scenario])
    records = read_records(path)
    assert records == log.records, "what is on disk is what the log returned"
    assert records, "steps were recorded"
    for record in records:
        errors = sorted(audit_validator.iter_errors(record), key=str)
        assert not errors, f"{record['type']}: {errors[0].message}"
    # Each step that ran has exactly one step_started, then exactly one step_finished.
    assert records[0]["type"] == "run_started"
    steps = records[1:]
    positions: dict[str, list[tuple[int, str]]] = {}
    for index, record in enumerate(steps):
        assert record["type"] in {"step_started", "step_finished"}
        positions.setdefault(record["step_id"], []).append((index, record["type"]))
    assert list(positions) == [r.step_id for r in result.results]
    for sid, events in positions.items():
        assert [kind for _, kind in events] == ["step_started", "step_finished"], sid
    # And each step_finished says what the step's result says.
    for record, step_result in zip(steps[1::2], result.results, strict=True):
        assert record["status"] == step_result.status
        if step_result.error is None:
            assert record["output"] == step_result.output
        else:
            assert record["error"] == step_result.error.to_dict()


def test_engine_execute_writes_a_log_that_verifies(
    audit_validator: jsonschema.Draft202012Validator, tmp_path: Path
) -> None:
    path = tmp_path / "audit.jsonl"
    doc = {"pte_plan": "1", "steps": SCENARIOS["ok"], "result": ref("p/a/b/2")}
    with AuditLog(path) as log:
        run = Engine(REGISTRY).execute(json.dumps(doc), log)
    assert run.status == "succeeded" and run.result == 5
    report = verify(path)
    assert report.ok, report.issue
    for record in read_records(path):
        assert audit_validator.is_valid(record), record["type"]


# --- write-ahead --------------------------------------------------------------------------------


def test_write_ahead_sync_happens_after_step_started_and_before_the_write_tool_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[tuple[str, str]] = []
    log = begun(AuditLog(tmp_path / "audit.jsonl", durability="batch"))
    real_append, real_write_records, real_sync, real_fsync = log.append, log.write_records, log.sync, os.fsync

    def append(type: str, /, **fields: Any) -> dict[str, Any]:
        record = real_append(type, **fields)
        events.append((type, str(fields.get("step_id"))))
        return record

    def write_records(records: Any) -> list[dict[str, Any]]:
        written = real_write_records(records)
        events.append(("together", ""))  # the records that follow went in one write
        events.extend((record["type"], str(record.get("step_id"))) for record in written)
        return written

    def sync() -> None:
        events.append(("sync", ""))
        real_sync()

    def fsync(fd: int) -> None:
        events.append(("fsync", ""))
        real_fsync(fd)

    monkeypatch.setattr(log, "append", append)
    monkeypatch.setattr(log, "write_records", write_records)
    monkeypatch.setattr(log, "sync", sync)
    monkeypatch.setattr(os, "fsync", fsync)

    @tool(name="ledger_write", effect="write")
    def ledger_write(tag: str) -> bool:
        # Where the tool function runs relative to the log: what write-ahead is about.
        events.append(("tool", tag))
        return True

    @tool(name="ledger_read")
    def ledger_read(tag: str) -> str:
        events.append(("tool", tag))
        return tag

    registry = Registry([ledger_write, ledger_read])
    plan = make_plan(
        step("r1", "ledger_read", tag="r1"),
        step("w1", "ledger_write", tag="w1"),
        step("r2", "ledger_read", tag="r2"),
        step("w2", "ledger_write", tag="w2"),
        registry=registry,
    )
    assert Executor(registry).run(plan, log).ok
    log.close()
    for write_step in ("w1", "w2"):
        started = events.index(("step_started", write_step))
        called = events.index(("tool", write_step))
        between = [kind for kind, _ in events[started + 1 : called]]
        assert "sync" in between, f"{write_step}: no sync between step_started and the tool call: {events}"
        assert "fsync" in between[between.index("sync") :], f"{write_step}: the sync did not reach the disk"
        assert events.index(("step_finished", write_step)) > called
    # Read tools need no write-ahead sync: durability "batch" keeps them cheap. The run's
    # first step has its intent written before its call (the log takes the run's records
    # before any tool runs); a later read's two records go together, in one write, once the
    # call returned (r2 runs beside w1 and is recorded in its turn, after w1).
    assert events.index(("step_started", "r1")) < events.index(("tool", "r1"))
    assert ("sync", "") not in events[: events.index(("step_started", "w1"))]
    called, started = events.index(("tool", "r2")), events.index(("step_started", "r2"))
    assert called < started
    assert events[started - 1 : started + 2] == [
        ("together", ""),
        ("step_started", "r2"),
        ("step_finished", "r2"),
    ]


def test_a_failed_write_ahead_sync_stops_the_run_before_the_write_tool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "audit.jsonl"
    text = json.dumps(
        {"pte_plan": "1", "steps": [step("r1", "trace", tag="r1"), step("w1", "write_note", tag="w1")]}
    )

    def failing_fsync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    log = AuditLog(path, durability="batch")
    monkeypatch.setattr(os, "fsync", failing_fsync)
    run = Engine(REGISTRY).execute(text, log)
    assert run.status == "failed_closed" and run.reason is ReasonCode.AUDIT_WRITE_FAILED
    # The read step needs no sync and ran; the write step's intent could not be made durable.
    assert CALLS == [("trace", "r1")]
    assert [(r["type"], r.get("step_id")) for r in read_records(path)][-3:] == [
        ("step_started", "r1"),
        ("step_finished", "r1"),
        ("step_started", "w1"),
    ]


# --- audit failure: fail closed -----------------------------------------------------------------


def _fail_writes_after(monkeypatch: pytest.MonkeyPatch, allowed: int) -> None:
    """Make the audit log's low-level write fail (as a full disk would) once it would take the
    file past `allowed` records (lines): a write of a read step's two records at once fails
    whole when only one of them would fit."""
    real = os.write
    written = [0]

    def write_all(fd: int, data: bytes) -> int:
        lines = bytes(data).count(b"\n")
        if written[0] + lines > allowed:
            raise OSError(28, "No space left on device")
        written[0] += lines
        return real(fd, data)

    monkeypatch.setattr(os, "write", write_all)


def _records_up_to_the_failure(records: list[dict[str, Any]], allowed: int) -> None:
    """The log holds the `allowed` records that fit, or one fewer where the next write was a
    read step's pair that did not fit whole: a read's two records are never split, but for the
    run's first step, whose intent is written before its call."""
    assert len(records) in (allowed, allowed - 1)
    finished = {r["step_id"] for r in records if r["type"] == "step_finished"}
    started = [r for r in records if r["type"] == "step_started"]
    for record in started[1:]:
        if record["effect"] == "read":
            assert record["step_id"] in finished, record


AUDIT_FAILURE_PLAN = [
    step("r1", "trace", tag="r1"),
    step("w1", "write_note", tag="w1"),
    step("r2", "trace", tag="r2"),
    step("w2", "write_note", tag="w2"),
]


def _check_calls_against_the_log(started: list[str], concurrency: int) -> None:
    # A write runs only once its step_started is in the log, and in plan order; a read runs
    # before its records are written (and, when they cannot be, is never recorded).
    writes = [tag for name, tag in CALLS if name == "write_note"]
    assert writes == [s for s in started if s.startswith("w")]
    if concurrency == 1:
        # One at a time: the steps in the log were called, in order, and after them at most
        # the read whose records could not be written.
        calls = [tag for _, tag in CALLS]
        assert calls[: len(started)] == started
        assert len(calls) - len(started) <= 1 and all(tag.startswith("r") for tag in calls[len(started) :])


@pytest.mark.parametrize("concurrency", [1, 8])
@pytest.mark.parametrize("allowed", range(2 * len(AUDIT_FAILURE_PLAN)))
def test_audit_write_failure_raises_and_no_further_tool_is_called(
    allowed: int, concurrency: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "audit.jsonl"
    plan = make_plan(*AUDIT_FAILURE_PLAN)
    log = begun(AuditLog(path))
    _fail_writes_after(monkeypatch, allowed)
    with pytest.raises(AuditWriteError) as caught:
        Executor(REGISTRY, max_concurrency=concurrency).run(plan, log)
    assert caught.value.reason is ReasonCode.AUDIT_WRITE_FAILED
    records = read_records(path)
    assert records[0]["type"] == "run_started"  # written before the failures began
    _records_up_to_the_failure(records[1:], allowed)
    started = [r["step_id"] for r in records if r["type"] == "step_started"]
    _check_calls_against_the_log(started, concurrency)
    assert log.broken
    with pytest.raises(AuditWriteError):
        log.append("step_started", step_id="x", tool="trace", effect="read", args={}, plan_hash="0" * 64)


@pytest.mark.parametrize("allowed", [0, 1, 2, 3, 4, 5, 8, 9, 10])
def test_engine_execute_fails_closed_when_the_audit_log_fails(
    allowed: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # run_started, plan_accepted, 2 records per step (8), run_finished: 11 records in all.
    path = tmp_path / "audit.jsonl"
    text = json.dumps({"pte_plan": "1", "steps": AUDIT_FAILURE_PLAN})
    log = AuditLog(path)
    _fail_writes_after(monkeypatch, allowed)
    run = Engine(REGISTRY).execute(text, log)
    assert run.status == "failed_closed"
    assert run.reason is ReasonCode.AUDIT_WRITE_FAILED
    records = read_records(path)
    _records_up_to_the_failure(records, allowed)
    assert all(r["type"] != "run_finished" for r in records)
    started = [r["step_id"] for r in records if r["type"] == "step_started"]
    _check_calls_against_the_log(started, 8)
    report = verify(path)
    assert report.records == len(records)
    assert not report.complete
    if records:
        assert report.intact, report.issue


# --- secrets ------------------------------------------------------------------------------------


def test_secrets_in_tool_outputs_and_args_never_reach_the_log(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    doc = {
        "pte_plan": "1",
        "steps": [
            step("k", "leak"),
            step("copy", "ident", x={"forwarded": ref("k/api_key"), "text": ref("k/note")}),
            step("auth", "login", user="ops", password="hunter2-correct-horse"),
        ],
        "result": {"key": ref("k/api_key")},
    }
    with AuditLog(path) as log:
        run = Engine(REGISTRY).execute(json.dumps(doc), log)
    assert run.status == "succeeded"
    assert run.outputs["k"]["api_key"] == SECRET, "the run itself still has the real value"
    content = path.read_text(encoding="utf-8")
    assert SECRET not in content
    assert SECRET[8:24] not in content, "not even a fragment of it"
    assert "hunter2-correct-horse" not in content
    assert verify(path).ok
    leaked = next(r for r in read_records(path) if r["type"] == "step_finished" and r["step_id"] == "k")
    assert leaked["output"]["api_key"] == "[REDACTED]"  # the marker docs/audit-log.md names
