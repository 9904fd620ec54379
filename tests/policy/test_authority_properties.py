"""Property (issue 24): with a deployment key, no edit, cut or re-chaining of a log makes a write run twice.

Generated plans mix reads and non-idempotent writes (writes take earlier reads' values). Each
runs to the end with the deployment's anchors; then a crash is simulated at a random record
(the log, the anchors file and the world as they would be after a crash there); then a log
writer without the key tampers with the crashed log: nothing, a cut, an edited record or a
dropped record, re-chained so that the hash chain verifies. Resume must refuse every change
to an anchored record, and no write ever runs twice.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from pte import AuditLog, Deployment, Engine, Policy, PTEError, Registry, SigningKey, tool
from pte.audit import Anchors
from pte.runs import resume_file
from tests._chain import log_text, relinked

KEY = SigningKey.generate()
#: write step id -> how often the world saw it applied.
WORLD: dict[str, int] = {}


class Value(BaseModel):
    value: int


class Posted(BaseModel):
    posted: str


@tool
def read_value(n: int) -> Value:
    """A deterministic read."""
    return Value(value=n * 2)


@tool(effect="write", idempotent=False, sinks={"tag": ["request"], "value": ["request", "trusted"]})
def post(tag: str, value: int) -> Posted:
    """A non-idempotent write: every call is one more effect."""
    WORLD[tag] = WORLD.get(tag, 0) + 1
    return Posted(posted=tag)


REGISTRY = Registry([read_value, post])
POLICY = Policy.from_registry(REGISTRY)


def _plan(kinds: list[str]) -> str:
    steps: list[dict[str, Any]] = []
    last_read: str | None = None
    for i, kind in enumerate(kinds):
        sid = f"s{i}"
        if kind == "read":
            steps.append({"id": sid, "tool": "read_value", "args": {"n": i + 1}})
            last_read = sid
        else:
            value: Any = {"$ref": f"{last_read}/value"} if last_read else 7
            steps.append({"id": sid, "tool": "post", "args": {"tag": sid, "value": value}})
    return json.dumps({"pte_plan": "1", "steps": steps})


def _rechain(records: list[dict[str, Any]], path: Path) -> None:
    path.write_text(log_text(relinked(records, number=True)), encoding="utf-8")


kinds_strategy = st.lists(st.sampled_from(["read", "write"]), min_size=2, max_size=5).filter(
    lambda kinds: "write" in kinds
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kinds=kinds_strategy,
    crash=st.floats(min_value=0.0, max_value=1.0),
    tamper=st.sampled_from(["none", "truncate", "edit", "drop"]),
    where=st.floats(min_value=0.0, max_value=1.0),
)
def test_a_resumed_log_never_pays_twice(kinds: list[str], crash: float, tamper: str, where: float) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        _check(Path(tmp), kinds, crash, tamper, where)


def _check(tmp: Path, kinds: list[str], crash: float, tamper: str, where: float) -> None:
    WORLD.clear()
    anchors_path = tmp / "anchors.jsonl"
    anchors = Anchors(anchors_path, key=KEY)
    log = tmp / "audit.jsonl"
    plan = _plan(kinds)
    with AuditLog(log, anchors=anchors) as audit:
        assert Engine(REGISTRY, policy=POLICY).execute(plan, audit).ok
    lines = log.read_text(encoding="utf-8").splitlines(keepends=True)
    records = [json.loads(line) for line in lines]

    # The crash: the log keeps `cut` records; the anchors file what was signed by then; the
    # world the writes whose write-ahead record (and anchor) was durable (their call ran).
    cut = 1 + int(crash * (len(records) - 2))
    kept = records[:cut]
    anchor_lines = [
        line for line in anchors_path.read_text(encoding="utf-8").splitlines(keepends=True)
        if json.loads(line)["seq"] < cut
    ]  # fmt: skip
    anchors_path.write_text("".join(anchor_lines), encoding="utf-8")
    WORLD.clear()
    for record in kept:
        if record["type"] == "step_started" and record["tool"] == "post":
            WORLD[record["step_id"]] = 1
    last_anchor = max((json.loads(line)["seq"] for line in anchor_lines), default=-1)

    # The tamper, without the key: the result is re-chained so that it verifies.
    crashed = tmp / "crashed.jsonl"
    touched: int | None = None
    if tamper == "none" or cut < 2:
        crashed.write_text("".join(lines[:cut]), encoding="utf-8")
    elif tamper == "truncate":
        touched = 1 + int(where * (cut - 2))  # keep at least run_started
        crashed.write_text("".join(lines[:touched]), encoding="utf-8")
    else:
        touched = 1 + int(where * (cut - 2))
        changed = [dict(r) for r in kept]
        if tamper == "edit":
            target = changed[touched]
            if target["type"] == "step_finished" and isinstance(target.get("output"), dict):
                target["output"] = {**target["output"], **{k: 999 for k in target["output"] if k == "value"}}
                if target["tool"] == "post":
                    target["output"] = {"posted": "forged"}
            else:
                target["ts"] = "2020-01-01T00:00:00.000000Z"
        else:
            del changed[touched]
        _rechain(changed, crashed)

    deployment = Deployment.of(policy=POLICY, anchors=anchors)
    try:
        result: Any = resume_file(crashed, REGISTRY, deployment=deployment)
    except PTEError:
        result = None
    if touched is not None and touched <= last_anchor:
        # A change to an anchored record (or a cut before one) is refused, or fails closed.
        assert result is None or not result.ok, (tamper, touched, last_anchor)
    if tamper == "none" and result is not None and result.ok:
        assert all(WORLD.get(f"s{i}") == 1 for i, k in enumerate(kinds) if k == "write"), WORLD
    assert all(count <= 1 for count in WORLD.values()), (tamper, cut, touched, WORLD)
