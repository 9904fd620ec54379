"""Concurrency does not leak into the record: properties over random DAGs.

- Random DAGs of async reads (random delays, some failing) and writes, run concurrently
  several times: the recorded decisions are the same every time, and the same as one step
  at a time; replay of each log agrees with it.
- A concurrent run killed with SIGKILL at every record boundary (before and after each
  record reaches the file), then resumed: every write is applied at most once, exactly
  once when the resumed run succeeds, and the finished log verifies and replays.
"""

from __future__ import annotations

import json
import os
import random
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pte import AuditLog, Engine, Registry, load_registry, verify

# private: replay's parts, white-box
from pte._replay import DECISION_FIELDS
from pte.audit import read_records
from pte.runs import replay_file, resume_file
from tests._crash import ENGINE_CHILD
from tests._services import run_python

REPO = Path(__file__).resolve().parents[2]

# The tools, as a pack file: the crash test's child process loads the very same code.
PACK = textwrap.dedent(
    """
    import asyncio, os
    from pte._core._errors import ToolError
    from pte._catalogue._tool_decorator import tool

    EFFECTS = os.environ.get("PTE_TEST_EFFECTS", "")

    @tool(timeout_s=5.0)
    async def fetch(key: str, delay_ms: int, fail: bool) -> str:
        await asyncio.sleep(delay_ms / 1000)
        if fail:
            raise ToolError("not_found", f"no record {key}")
        return key.upper()

    def _apply(line: str) -> None:
        fd = os.open(EFFECTS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (line + "\\n").encode())
        finally:
            os.close(fd)

    @tool(effect="write", idempotent=True, timeout_s=5.0)
    def upsert(key: str, value: str) -> bool:
        # Idempotent: applies its effect only if it is not there yet.
        if os.path.exists(EFFECTS) and key in open(EFFECTS).read().split():
            return False
        _apply(key)
        return True

    @tool(effect="write", timeout_s=5.0)
    def append(key: str, value: str) -> bool:
        # Not idempotent: every call applies its effect.
        _apply(key)
        return True
    """
)


@pytest.fixture(scope="module")
def pack(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("pack") / "dag_tools.py"
    path.write_text(PACK, encoding="utf-8")
    return path


_EFFECTS_LOCK = threading.Lock()


def dag_plan(rng: random.Random, n: int, *, failures: bool = True, writes: bool = True) -> str:
    """A random plan: n steps, random dependencies (references and `after`), reads and writes."""
    steps: list[dict[str, Any]] = []
    for i in range(n):
        earlier = [s["id"] for s in steps]
        deps = [d for d in earlier if rng.random() < 0.35]
        kind = "write" if writes and rng.random() < 0.3 else "read"
        if kind == "read":
            fail = failures and rng.random() < 0.15
            args: dict[str, Any] = {"key": f"k{i}", "delay_ms": rng.randint(0, 25), "fail": fail}
            step: dict[str, Any] = {"id": f"s{i}", "tool": "fetch", "args": args}
            if deps:
                step["after"] = deps
        else:
            reads = [d for d in deps if next(s for s in steps if s["id"] == d)["tool"] == "fetch"]
            value: Any = {"$ref": reads[0]} if reads else "literal"
            tool = "upsert" if rng.random() < 0.5 else "append"
            step = {"id": f"s{i}", "tool": tool, "args": {"key": f"w{i}", "value": value}}
            others = [d for d in deps if not reads or d != reads[0]]
            if others:
                step["after"] = others
        steps.append(step)
    return json.dumps({"pte_plan": "1", "steps": steps})


def decisions(path: Path) -> list[tuple[Any, ...]]:
    return [
        (r["type"], *(json.dumps(r.get(f), sort_keys=True) for f in DECISION_FIELDS.get(r["type"], ())))
        for r in read_records(path)
    ]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(2, 9))
def test_decisions_do_not_depend_on_which_concurrent_step_finishes_first(
    seed: int, n: int, pack: Path, tmp_path: Path
) -> None:
    registry = load_registry([str(pack)])
    text = dag_plan(random.Random(seed), n)
    runs = []
    for attempt, concurrency in enumerate([8, 8, 3, 1]):
        log = tmp_path / f"{seed}-{n}-{attempt}.jsonl"
        effects = tmp_path / f"{seed}-{n}-{attempt}.effects"
        with _EFFECTS_LOCK:
            os.environ["PTE_TEST_EFFECTS"] = str(effects)
            sys.modules[registry["upsert"].func.__module__].EFFECTS = str(effects)  # type: ignore[attr-defined]
            engine = Engine(registry, max_concurrency=concurrency)
            with AuditLog(log, run_id=f"run-{attempt}") as audit:
                result = engine.execute(text, audit)
        runs.append(decisions(log))
        assert verify(log).ok
        report = replay_file(log, registry=registry)
        assert report.ok, report.render()
        assert result.status in ("succeeded", "failed_closed")
    assert runs[0] == runs[1] == runs[2] == runs[3]


CHILD = ENGINE_CHILD.replace("{packs}", "[sys.argv[3]]")


@pytest.mark.slow
@pytest.mark.parametrize("seed", [7])
def test_resume_after_sigkill_at_any_record_applies_each_write_at_most_once(
    seed: int, pack: Path, tmp_path: Path
) -> None:
    text = dag_plan(random.Random(seed), 6, failures=False)
    writes = [s["args"]["key"] for s in json.loads(text)["steps"] if s["tool"] != "fetch"]
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(text, encoding="utf-8")
    registry = load_registry([str(pack)])
    total = 2 + 2 * 6 + 1  # run_started, plan_accepted, two per step, run_finished
    for kill_at in range(2, total):
        for mode in ("before", "after") if kill_at < total - 1 else ("before",):
            log = tmp_path / f"{mode}-{kill_at}.jsonl"
            effects = tmp_path / f"{mode}-{kill_at}.effects"
            env = {**os.environ, "KILL_AT": str(kill_at), "KILL_MODE": mode, "PTE_TEST_EFFECTS": str(effects)}
            # Not warmed: the pack reads PTE_TEST_EFFECTS when it is imported, in the child.
            child = run_python(
                CHILD.format(repo=str(REPO)), str(log), str(plan_file), str(pack), env=env, timeout=60
            )
            assert child.returncode == -9, child.stderr.decode()
            with _EFFECTS_LOCK:
                sys.modules[registry["upsert"].func.__module__].EFFECTS = str(effects)  # type: ignore[attr-defined]
                result = resume_file(log, registry)
            applied = effects.read_text().split() if effects.exists() else []
            where = f"killed {mode} record {kill_at}"
            assert len(applied) == len(set(applied)), f"{where}: a write was applied twice: {applied}"
            if result.status == "succeeded":
                assert sorted(applied) == sorted(writes), where
            else:
                assert result.reason is not None and result.reason.value == "needs_review", (
                    where,
                    result.message,
                )
            assert verify(log).ok, where
            assert replay_file(log, registry=registry).ok, where


def test_the_random_plans_compile(pack: Path) -> None:
    registry = Registry(load_registry([str(pack)]))
    from pte import compile_plan

    for seed in range(50):
        compile_plan(dag_plan(random.Random(seed), 9), registry)
