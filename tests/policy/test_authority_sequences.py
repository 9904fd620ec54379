"""Property (issue 33): no sequence of commands and tamperings pays twice, or pays unapproved.

Two runs of a payment plan (a read, then a write that needs a person's approval) live in one
SQLite run store shared by two worker machines of one deployment (one anchor chain in the
store, a high-water file per machine; approvals must be signed by the approver's key).
Hypothesis draws a sequence of operations:

- start a run, or resume one (a redelivery), on either machine, optionally crashing after a
  random number of records (the store refuses the next record: what a killed worker leaves);
- approve a paused run, signed or unsigned;
- a database writer without the key: cut a run's rows back, edit a record, drop a record (each
  re-chained so that it verifies, the run marked ``running`` again), or delete the anchor
  chain's last rows.

After every operation: each run's payment happened at most once, and only for a run a
person approved with a trusted signature.
"""

from __future__ import annotations

import json
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from pte import Engine, PTEError, Registry, SigningKey, TrustedKeys, tool
from pte.audit import Anchors, canonical_json
from pte.deployment import decide, pausing_gate, resume_run, run_in_store
from pte.errors import StoreError
from pte.stores import SQLiteStore
from tests._chain import chain_hash

DEPLOYMENT = SigningKey.generate()
APPROVER = SigningKey.generate()
KEYS = TrustedKeys([APPROVER.public_key])
RUNS = ("r0", "r1")
#: run id -> payments made by that run.
PAID: dict[str, int] = {}


class Payee(BaseModel):
    iban: str


class Paid(BaseModel):
    payment_id: str


@tool(effect="read")
def get_payee(name: str) -> Payee:
    """The payee's IBAN."""
    return Payee(iban="DE89370400440532013000")


@tool(effect="write", requires_approval=True)
def pay(iban: str, run: str) -> Paid:
    """A non-idempotent payment (needs a person's approval)."""
    PAID[run] = PAID.get(run, 0) + 1
    return Paid(payment_id=f"{run}-{PAID[run]}")


REGISTRY = Registry([get_payee, pay])


def _plan(run_id: str) -> str:
    return json.dumps(
        {
            "pte_plan": "1",
            "steps": [
                {"id": "payee", "tool": "get_payee", "args": {"name": "ACME"}},
                {"id": "pay", "tool": "pay", "args": {"iban": {"$ref": "payee/iban"}, "run": run_id}},
            ],
            "result": {"$ref": "pay/payment_id"},
        }
    )


class _CrashingStore(SQLiteStore):
    """The real SQLite store, whose writers refuse every record after `crash_after` of them
    (a worker killed there: what was committed stays, nothing follows)."""

    crash_after: int | None = None

    def writer(self, run_id: str, *, durability: Any = "batch") -> Any:
        inner = super().writer(run_id, durability=durability)
        store = self

        class Writer:
            written = 0

            def head(self) -> Any:
                return inner.head()

            def write(self, record: Any, line: bytes) -> None:
                if store.crash_after is not None and self.written >= store.crash_after:
                    raise StoreError("killed (the test's crash)")
                inner.write(record, line)
                self.written += 1

            def sync(self) -> None:
                inner.sync()

            def close(self) -> None:
                inner.close()

        return Writer()


def _sql(store: SQLiteStore, statement: str, params: tuple[Any, ...] = ()) -> None:
    with sqlite3.connect(store.path) as conn:
        conn.execute(statement, params)


def _rewrite(store: SQLiteStore, run_id: str, records: list[dict[str, Any]]) -> None:
    """Replace a run's rows with `records`, re-chained; the run looks unfinished (no key)."""
    _sql(store, "DELETE FROM pte_records WHERE run_id = ?", (run_id,))
    _sql(store, "DELETE FROM pte_checkpoints WHERE run_id = ?", (run_id,))
    prev = "0" * 64
    for seq, record in enumerate(records):
        record = {k: v for k, v in record.items() if k != "hash"}
        record["seq"], record["prev"] = seq, prev
        prev = record["hash"] = chain_hash(prev, record)
        _sql(
            store,
            "INSERT INTO pte_records (run_id, seq, type, ts, prev, hash, line) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (run_id, seq, record["type"], record["ts"], record["prev"], prev, canonical_json(record)),
        )
    _sql(store, "UPDATE pte_runs SET status = 'running', reason = NULL WHERE run_id = ?", (run_id,))


_run = st.sampled_from(["r0", "r0", "r0", "r1"])  # most commands on one run: it gets somewhere
_machine = st.integers(0, 1)
_crash = st.sampled_from([None, None, None, 1]).flatmap(  # a crash in one command of four
    lambda crash: st.none() if crash is None else st.integers(0, 12)
)
_ARGS: dict[str, Any] = {
    "start": st.tuples(_run, _machine, _crash),
    "resume": st.tuples(_run, _machine, _crash),
    "approve": st.tuples(_run, st.sampled_from([True, True, True, False]), st.none()),
    "cut": st.tuples(_run, st.floats(0, 1), st.none()),
    "edit": st.tuples(_run, st.floats(0, 1), st.none()),
    "drop": st.tuples(_run, st.floats(0, 1), st.none()),
    "rollback": st.tuples(st.none(), st.integers(1, 4), st.none()),
}
#: Resumes and approvals are drawn more often than tamperings: a sequence gets somewhere.
_KINDS = ["resume"] * 5 + ["approve"] * 3 + ["start", "cut", "edit", "drop", "rollback"]
operation = st.sampled_from(_KINDS).flatmap(lambda kind: _ARGS[kind].map(lambda args: (kind, *args)))
#: What a sequence ends with: tamperings and redeliveries (after whatever paid before).
aftermath = st.sampled_from(["cut", "edit", "drop", "rollback", "resume", "resume", "resume"]).flatmap(
    lambda kind: _ARGS[kind].map(lambda args: (kind, *args))
)
#: Both runs start first (each may crash); the drawn operations follow, then an aftermath.
operations_strategy = st.tuples(
    st.tuples(st.just("start"), st.just("r0"), _machine, _crash),
    st.tuples(st.just("start"), st.just("r1"), _machine, _crash),
    st.lists(operation, min_size=3, max_size=10),
    st.lists(aftermath, min_size=2, max_size=4),
).map(lambda drawn: [drawn[0], drawn[1], *drawn[2], *drawn[3]])


@pytest.mark.slow
def test_no_sequence_of_commands_and_tamperings_pays_twice_or_unapproved() -> None:
    seen = {"examples": 0, "paid": 0, "tampered_after_paying": 0}

    @settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(operations=operations_strategy)
    def sequences(operations: list[tuple[Any, ...]]) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            paid_at = _check(Path(tmp), operations)
        seen["examples"] += 1
        seen["paid"] += paid_at is not None
        later = [op for op, *_ in operations[(paid_at or len(operations)) + 1 :]]
        seen["tampered_after_paying"] += any(k in ("cut", "edit", "drop", "rollback") for k in later)

    sequences()
    # Not vacuous: some drawn sequences paid, and tampered with the run or chain afterwards.
    assert seen["paid"] >= 1 and seen["tampered_after_paying"] >= 1, seen


def _check(tmp: Path, operations: list[tuple[Any, ...]]) -> int | None:
    """Apply `operations`, checking the property after each; the index of the one that paid."""
    PAID.clear()
    paid_at: int | None = None
    store = _CrashingStore(tmp / "runs.db")
    machines = [Anchors(store, key=DEPLOYMENT, high_water=tmp / f"machine{m}.seen.json") for m in (0, 1)]
    signed: set[str] = set()
    try:
        for index, (op, run_id, arg, crash) in enumerate(operations):
            store.crash_after = crash
            try:
                _apply(store, machines, signed, op, run_id, arg)
            except PTEError:
                pass  # refused or failed closed: a command's clear error, never a payment
            finally:
                store.crash_after = None
            assert all(n <= 1 for n in PAID.values()), (operations, PAID)
            assert set(PAID) <= signed, (operations, PAID, signed)
            if PAID and paid_at is None:
                paid_at = index
    finally:
        store.close()
    return paid_at


def _apply(
    store: _CrashingStore, machines: list[Anchors], signed: set[str], op: str, run_id: Any, arg: Any
) -> None:
    gate = pausing_gate(store, REGISTRY, keys=KEYS)
    if op == "start":
        if store.run(run_id) is None:
            engine = Engine(REGISTRY, approval=gate)
            run_in_store(engine, store, run_id=run_id, plan_text=_plan(run_id), anchors=machines[arg])
    elif op == "resume":
        resume_run(store, run_id, REGISTRY, gate=gate, anchors=machines[arg])
    elif op == "approve":
        decide(store, run_id, by="alice", approve=True, signing_key=APPROVER if arg else None)
        if arg:
            signed.add(run_id)
    elif op == "rollback":
        rows = store.anchor_lines(0)
        _sql(store, "DELETE FROM pte_anchors WHERE n >= ?", (max(0, len(rows) - arg),))
    else:
        records = store.records(run_id)
        if len(records) < 2:
            return
        at = 1 + int(arg * (len(records) - 2))
        if op == "cut":
            records = records[:at]
        elif op == "drop":
            del records[at]
        else:
            target = records[at]
            if target["type"] == "step_finished" and isinstance(target.get("output"), dict):
                target["output"] = {**target["output"], "iban": "GB33BUKB20201555555555"}
            else:
                target["ts"] = "2020-01-01T00:00:00.000000Z"
        _rewrite(store, run_id, records)


def test_a_crash_after_the_payment_and_a_cut_redelivered_to_the_other_machine_pays_once() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        _check(
            Path(tmp),
            [
                ("start", "r0", 0, None),
                ("approve", "r0", True, None),
                ("resume", "r0", 0, 6),  # killed after the payment, before its step_finished
                ("resume", "r0", 1, None),  # redelivered: the other machine
                ("cut", "r0", 0.5, None),
                ("resume", "r0", 1, None),
                ("rollback", None, 3, None),
                ("resume", "r0", 0, None),
            ],
        )
    assert PAID == {"r0": 1}
