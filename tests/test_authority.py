"""Issue 24: no store, approval file or log writer without a private key can cause a payment.

One test per attack of the red team (docs/threat-model.md points at each), on SQLite and
PostgreSQL where a store is involved. Each attack succeeded on the main branch before
approvals bound runs and the deployment signed its checkpoints; each now fails closed.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _services import postgres_url  # noqa: F401 - the session fixture
from pydantic import BaseModel

from pte._engine import Engine
from pte._registry import Registry
from pte._runs import PausedRun, decide, pausing_gate, resume_run, run_in_store
from pte._signing import SigningKey, TrustedKeys
from pte._tools import load_pack, load_registry, tool
from pte.stores import SQLiteStore, Store, open_store

PAY = """{"pte_plan": "1", "steps": [
 {"id": "sup", "tool": "get_supplier", "args": {"supplier_id": "S001"}},
 {"id": "pay", "tool": "send_payment", "args": {"iban": {"$ref": "sup/iban"}, "amount": "120.00",
  "currency": "EUR", "reference": "Invoice 7"}}
], "result": {"$ref": "pay/payment_id"}}"""

REGISTRY = load_registry(["backoffice", "calculator", "shaping"])
SIGNER = SigningKey.generate()
KEYS = TrustedKeys([SIGNER.public_key])


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    module = sys.modules[load_pack("backoffice")["get_invoice"].func.__module__]
    path = tmp_path / "ledger.sqlite"
    module.create_sample_ledger(path, overwrite=True)
    monkeypatch.setenv("PTE_LEDGER", str(path))
    return path


@pytest.fixture(scope="module")
def authority_database(postgres_url: str) -> str:  # noqa: F811
    import psycopg

    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS t_authority")
        conn.execute("CREATE DATABASE t_authority")
    return postgres_url.rsplit("/", 1)[0] + "/t_authority"


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    url = (
        f"sqlite://{tmp_path / 'runs.db'}"
        if request.param == "sqlite"
        else request.getfixturevalue("authority_database")
    )
    with open_store(url) as opened:
        if request.param == "postgresql":
            _sql(opened, "TRUNCATE pte_runs, pte_records, pte_approvals, pte_checkpoints")
        yield opened


def _sql(store: Store, statement: str, params: tuple[Any, ...] = ()) -> None:
    """Write the store's tables directly, as anyone with database access can (no key)."""
    if isinstance(store, SQLiteStore):
        with sqlite3.connect(store.path) as conn:
            conn.execute(statement, params)
    else:
        import psycopg

        with psycopg.connect(store.url, autocommit=True) as conn:
            conn.execute(statement.replace("?", "%s"), params)  # type: ignore[arg-type]


def _payments(ledger: Path) -> int:
    with sqlite3.connect(ledger) as conn:
        return int(conn.execute("SELECT count(*) FROM payments_out").fetchone()[0])


def _start(store: Store, run_id: str, registry: Registry = REGISTRY, plan: str = PAY) -> PausedRun:
    gate = pausing_gate(store, registry, keys=KEYS)
    result = run_in_store(Engine(registry, approval=gate), store, run_id=run_id, plan_text=plan)
    assert isinstance(result, PausedRun), result
    return result


def _resume(store: Store, run_id: str, registry: Registry = REGISTRY) -> Any:
    return resume_run(store, run_id, registry, gate=pausing_gate(store, registry, keys=KEYS))


# --- 1. a store decision copied to other paused runs --------------------------------------------


def test_a_store_decision_copied_to_other_paused_runs_pays_once(store: Store, ledger: Path) -> None:
    """Attack 1: alice approves run a; the store writer copies her row (signed approval and
    all) to runs b and c of the same plan. Before: 3 payments. Now the approval names run a."""
    for run_id in ("a", "b", "c"):
        _start(store, run_id)
    decide(store, "a", by="alice", approve=True, signing_key=SIGNER)
    for victim in ("b", "c"):
        _sql(
            store,
            "INSERT INTO pte_approvals (run_id, plan_hash, decision, by_name, at, note, data) "
            "SELECT ?, plan_hash, decision, by_name, at, note, data FROM pte_approvals WHERE run_id = 'a'",
            (victim,),
        )
    assert _resume(store, "a").status == "succeeded"
    for victim in ("b", "c"):
        assert isinstance(_resume(store, victim), PausedRun)  # still waiting for a person
    assert _payments(ledger) == 1


def test_a_store_approval_edited_to_name_another_run_does_not_verify(store: Store, ledger: Path) -> None:
    """Attack 1, variant: the writer also rewrites the copied approval's run; the signature breaks."""
    for run_id in ("a", "b"):
        _start(store, run_id)
    decide(store, "a", by="alice", approve=True, signing_key=SIGNER)
    _sql(
        store,
        "INSERT INTO pte_approvals (run_id, plan_hash, decision, by_name, at, note, data) "
        "SELECT 'b', plan_hash, decision, by_name, at, note, REPLACE(data, ?, ?) "
        "FROM pte_approvals WHERE run_id = 'a'",
        ('"run": "a"', '"run": "b"'),
    )
    assert isinstance(_resume(store, "b"), PausedRun)
    assert _payments(ledger) == 0


# --- a store approval of a write guarded only by the default policy ----------------------------


class Sent(BaseModel):
    transfer_id: str


@tool(effect="write", requires_approval=True)
def wire(account: str, amount: str) -> Sent:
    """Wire money (no sinks declared: only the default guarded policy protects it)."""
    return Sent(transfer_id=f"T-{account}-{amount}")


def test_a_store_approval_counts_for_a_write_guarded_only_by_the_default(store: Store) -> None:
    """Before: decide fingerprinted the catalogue under an open policy (``config.policy`` is
    null in format 2 logs), the gate under the guarded default; the run paused again, forever."""
    registry = Registry([wire])
    plan = json.dumps(
        {"pte_plan": "1", "steps": [{"id": "w", "tool": "wire", "args": {"account": "A1", "amount": "5"}}]}
    )
    _start(store, "g", registry, plan)
    decide(store, "g", by="alice", approve=True, signing_key=SIGNER)
    result = _resume(store, "g", registry)
    assert result.status == "succeeded", result
