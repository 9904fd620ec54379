"""Issue 33: one anchor chain per deployment, shared by its machines; each keeps its high-water mark.

The red team's case: two worker machines share one run store; a database writer cuts a paid
run back before its payment. With an anchors file per machine, the machine that anchored the
run refused it and the other treated it as fresh and paid again. Now the machines share one
chain (rows of the run store, or one file the deployment names), so both see the run's
anchors and refuse. A writer who also cuts the chain's last rows (a rollback: every row left
still verifies) is caught by each machine's high-water file, which remembers how far that
machine has seen the chain.

A "machine" here is its own `Anchors` (own cache, own high-water file) over the shared place.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import pte
from pte import Engine, FailedClosed, Registry, SigningKey, tool
from pte.audit import Anchors, anchors_from_env, canonical_json
from pte.deployment import resume_run, run_in_store
from pte.errors import AnchorError
from pte.stores import JsonlStore, Store, open_store
from tests._services import postgres_url, store_fixture, write_tables  # noqa: F401 - postgres_url: the session fixture

KEY = SigningKey.generate()
PAID: list[str] = []


class Payee(BaseModel):
    iban: str


class Paid(BaseModel):
    payment_id: str


@tool(effect="read")
def get_payee(name: str) -> Payee:
    """The payee's IBAN from the deployment's own records."""
    return Payee(iban="DE89370400440532013000")


@tool(effect="write")
def wire(iban: str, amount: str) -> Paid:
    """Pay `amount` EUR to `iban`."""
    PAID.append(iban)
    return Paid(payment_id=f"P{len(PAID)}")


REGISTRY = Registry([get_payee, wire])
PLAN = json.dumps(
    {
        "pte_plan": "1",
        "steps": [
            {"id": "payee", "tool": "get_payee", "args": {"name": "ACME"}},
            {"id": "pay", "tool": "wire", "args": {"iban": {"$ref": "payee/iban"}, "amount": "120.00"}},
        ],
        "result": {"$ref": "pay/payment_id"},
    }
)


@pytest.fixture(autouse=True)
def _no_payments() -> Iterator[None]:
    PAID.clear()
    yield
    PAID.clear()


store = store_fixture("t_shared_anchors")


def _machine(store: Store, tmp_path: Path, name: str) -> Anchors:
    """One worker machine of the deployment: its key, the shared chain, its own high-water file."""
    return Anchors(store, key=KEY, high_water=tmp_path / f"{name}.anchors-seen.json")


def _cut_before_payment(store: Store, run_id: str) -> int:
    """The database writer's cut: the paid run's rows from its payment's write-ahead record on."""
    pay = next(
        r["seq"] for r in store.records(run_id) if r["type"] == "step_started" and r["step_id"] == "pay"
    )
    write_tables(store, "DELETE FROM pte_records WHERE run_id = ? AND seq >= ?", (run_id, pay))
    write_tables(store, "DELETE FROM pte_checkpoints WHERE run_id = ?", (run_id,))
    write_tables(store, "UPDATE pte_runs SET status = 'running', reason = NULL WHERE run_id = ?", (run_id,))
    return int(pay)


def _redeliver(store: Store, run_id: str, machine: Anchors) -> Any:
    return resume_run(store, run_id, REGISTRY, anchors=machine)


def test_a_paid_run_cut_back_in_the_store_is_refused_by_both_machines(store: Store, tmp_path: Path) -> None:
    machine_a, machine_b = _machine(store, tmp_path, "a"), _machine(store, tmp_path, "b")
    assert run_in_store(Engine(REGISTRY), store, run_id="paid", plan_text=PLAN, anchors=machine_a).ok
    assert PAID == ["DE89370400440532013000"]
    _cut_before_payment(store, "paid")
    for machine in (machine_a, machine_b):
        with pytest.raises(FailedClosed, match="falls short of its signed anchor"):
            _redeliver(store, "paid", machine)
    assert len(PAID) == 1


def test_a_rollback_of_the_shared_chain_is_refused_by_every_machine_that_saw_past_it(
    store: Store, tmp_path: Path
) -> None:
    """The writer cuts the run and the chain's rows from the payment's anchor on: what is left
    verifies, and the run looks like a crash before its write. Machine A signed past the cut;
    machine B saw past it when it ran its own run later. Both refuse; nothing pays twice."""
    machine_a, machine_b = _machine(store, tmp_path, "a"), _machine(store, tmp_path, "b")
    assert run_in_store(Engine(REGISTRY), store, run_id="paid", plan_text=PLAN, anchors=machine_a).ok
    assert run_in_store(Engine(REGISTRY), store, run_id="later", plan_text=PLAN, anchors=machine_b).ok
    assert len(PAID) == 2
    pay = _cut_before_payment(store, "paid")
    rows = [json.loads(line) for line in store.anchor_lines(0)]  # type: ignore[attr-defined]
    first_cut = next(i for i, a in enumerate(rows) if a["run_id"] == "paid" and a["seq"] >= pay)
    write_tables(store, "DELETE FROM pte_anchors WHERE n >= ?", (first_cut,))
    assert Anchors(store, public=KEY.public_key).check("paid", store.records("paid"))[0] > 0  # verifies
    for machine in (machine_a, machine_b):
        with pytest.raises(FailedClosed, match="rolled back"):
            _redeliver(store, "paid", machine)
    # A machine restarted (a fresh process: no cache) still has its high-water file.
    with pytest.raises(FailedClosed, match="rolled back"):
        _redeliver(store, "paid", _machine(store, tmp_path, "a"))
    assert len(PAID) == 2


def test_a_run_is_anchored_once_across_machines(store: Store, tmp_path: Path) -> None:
    """Two machines run the same run id at once, each from its own copy: only one anchors."""
    machine_a, machine_b = _machine(store, tmp_path, "a"), _machine(store, tmp_path, "b")
    assert machine_a.sign("r", 0, "a" * 64, expected=0) == 1
    with pytest.raises(AnchorError, match="executes its writes once"):
        machine_b.sign("r", 0, "b" * 64, expected=0)
    assert machine_b.sign("other", 3, "c" * 64, expected=0) == 1
    assert machine_a.sign("r", 5, "d" * 64, expected=1) == 2  # it sees b's line, then appends
    reader = Anchors(store, public=KEY.public_key)
    assert [(a.run_id, a.seq) for a in reader.all()] == [("r", 0), ("other", 3), ("r", 5)]


def test_a_row_deleted_from_the_middle_of_the_chain_stops_every_read(store: Store, tmp_path: Path) -> None:
    machine = _machine(store, tmp_path, "a")
    for n in range(3):
        machine.sign(f"r{n}", 0, "a" * 64, expected=0)
    write_tables(store, "DELETE FROM pte_anchors WHERE n = 1")
    with pytest.raises(AnchorError, match="no line 1"):
        Anchors(store, public=KEY.public_key).all()


def test_the_shared_chain_in_one_file_and_a_rollback_of_it(tmp_path: Path) -> None:
    """The file form: two machines anchor to one file the deployment names (e.g. on a shared
    volume); a writer of that file deletes its last lines. Both machines refuse the cut run."""
    log = tmp_path / "audit.jsonl"
    chain = tmp_path / "shared.anchors.jsonl"
    machine_a = Anchors(chain, key=KEY, high_water=tmp_path / "a.seen.json")
    machine_b = Anchors(chain, key=KEY, high_water=tmp_path / "b.seen.json")
    with pte.AuditLog(log, run_id="paid", anchors=machine_a) as audit:
        assert Engine(REGISTRY).execute(PLAN, audit).ok
    machine_b.all()  # machine b reads the chain (any run it anchors or checks)
    records = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    pay = next(r["seq"] for r in records if r["type"] == "step_started")
    log.write_text("".join(canonical_json(r) + "\n" for r in records[:pay]), encoding="utf-8")
    kept = [
        ln
        for ln in chain.read_text(encoding="utf-8").splitlines(keepends=True)
        if json.loads(ln)["seq"] < pay
    ]
    chain.write_text("".join(kept), encoding="utf-8")
    for machine in (machine_a, machine_b):
        with pytest.raises(FailedClosed, match="rolled back"):
            pte.runs.resume_file(log, REGISTRY, deployment=_deployment(machine))
    assert len(PAID) == 1


def _deployment(anchors: Anchors) -> Any:
    from pte import Deployment

    return Deployment.of(anchors=anchors)


def test_the_high_water_file_is_bound_to_the_deployment_key_and_refuses_damage(tmp_path: Path) -> None:
    chain, seen = tmp_path / "chain.jsonl", tmp_path / "seen.json"
    Anchors(chain, key=KEY, high_water=seen).sign("r", 0, "a" * 64, expected=0)
    assert json.loads(seen.read_text())["lines"] == 1
    other = SigningKey.generate()
    with pytest.raises(AnchorError, match="another deployment key"):
        Anchors(tmp_path / "other.jsonl", key=other, high_water=seen).all()
    seen.write_text("{not json", encoding="utf-8")
    with pytest.raises(AnchorError, match="is damaged"):
        Anchors(chain, key=KEY, high_water=seen).all()


def test_the_environment_keeps_the_chain_in_the_run_store(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key_file = tmp_path / "deployment.key"
    key_file.write_bytes(KEY.to_pem())
    env = {"PTE_DEPLOYMENT_KEY_FILE": str(key_file), "PTE_ANCHORS_FILE": "store"}
    anchors = anchors_from_env(env, store=store)
    assert anchors is not None and anchors.path is None
    assert run_in_store(Engine(REGISTRY), store, run_id="r", plan_text=PLAN, anchors=anchors).ok
    assert len(store.anchor_lines(0)) == 4  # type: ignore[attr-defined] # start, plan, write, seal
    assert (tmp_path / "deployment.key.anchors-seen.json").is_file()  # this machine's high-water mark
    with pytest.raises(AnchorError, match="has no run store"):
        anchors_from_env(env)
    with pytest.raises(AnchorError, match="cannot keep anchors"):
        anchors_from_env(env, store=JsonlStore(tmp_path / "log.jsonl"))


@pytest.mark.parametrize("anchors", [["--anchors", "store"], []], ids=["asked", "by-default"])
def test_a_deployment_copied_to_a_second_machine_shares_one_chain_in_its_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], anchors: list[str]
) -> None:
    """`pte init --store URL` (a SQL store: the chain goes there unless a file is asked for), the
    folder copied to a second worker machine (docs/deployment.md): both anchor to the run store's
    chain, each keeps its high-water mark in its folder."""
    import shutil

    from tests._cli_run import cli

    machine_a, machine_b = tmp_path / "machine-a", tmp_path / "machine-b"
    store_url = f"sqlite://{tmp_path / 'runs.db'}"
    code, out, err = cli(
        capsys, "init", str(machine_a), "--tools", "backoffice", "--store", store_url, *anchors
    )
    assert code == 0, out + err
    assert json.loads((machine_a / "pte-deployment.json").read_text(encoding="utf-8"))["anchors"] == "store"
    shutil.copytree(machine_a, machine_b)
    deployed_a, deployed_b = pte.Deployment.from_folder(machine_a), pte.Deployment.from_folder(machine_b)
    assert deployed_a.fingerprint == deployed_b.fingerprint and not deployed_b.problems()
    with open_store(store_url) as store:
        anchors_a = deployed_a.anchors()
        assert anchors_a.path is None  # the chain is the store's
        assert run_in_store(Engine(REGISTRY), store, run_id="paid", plan_text=PLAN, anchors=anchors_a).ok
        _cut_before_payment(store, "paid")
        with pytest.raises(FailedClosed, match="falls short of its signed anchor"):
            _redeliver(store, "paid", deployed_b.anchors())
    assert (machine_a / "anchors-seen.json").is_file() and (machine_b / "anchors-seen.json").is_file()
    assert len(PAID) == 1
    # A deployment whose run store is a JSON Lines file cannot keep the chain there.
    code, out, err = cli(
        capsys,
        "init",
        str(tmp_path / "c"),
        "--tools",
        "backoffice",
        "--store",
        "jsonl:x.jsonl",
        "--anchors",
        "store",
    )
    assert 'anchors: "store"' in out + err


@pytest.mark.parametrize(
    ("options", "anchors"),
    [
        ([], "anchors.jsonl"),  # the default store (sqlite:runs.db in the folder): one machine's file
        (["--no-store"], "anchors.jsonl"),
        (["--store", "jsonl:runs.jsonl"], "anchors.jsonl"),  # a file store cannot hold the chain
        (["--store", "sqlite:runs.db"], "store"),
        (["--store", "postgresql://pte@db.internal:5432/pte"], "store"),
        (["--store", "sqlite:runs.db", "--anchors", "dep/mine.jsonl"], "mine.jsonl"),  # a file when asked
    ],
)
def test_pte_init_keeps_the_chain_in_a_sql_store_it_is_given_unless_a_file_is_asked_for(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    options: list[str], anchors: str,
) -> None:  # fmt: skip
    from tests._cli_run import cli

    monkeypatch.chdir(tmp_path)
    code, out, err = cli(capsys, "init", "dep", "--tools", "backoffice", *options)
    assert code == 0, out + err
    assert (
        json.loads((tmp_path / "dep" / "pte-deployment.json").read_text(encoding="utf-8"))["anchors"]
        == anchors
    )
