"""Issue 24: no store, approval file or log writer without a private key can cause a payment.

One test per attack of the red team (docs/threat-model.md points at each), on SQLite and
PostgreSQL where a store is involved. Each attack succeeded on the main branch before
approvals bound runs and the deployment signed its checkpoints; each now fails closed.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from pte import Engine, Registry, SigningKey, TrustedKeys, load_registry, tool
from pte.deployment import PausedRun, decide, pausing_gate, resume_run, run_in_store
from pte.stores import Store
from tests._ledger import ledger
from tests._services import postgres_url, store_fixture, write_tables  # noqa: F401 - postgres_url: the session fixture

__all__ = ["ledger"]  # the fixture, used by name

PAY = """{"pte_plan": "1", "steps": [
 {"id": "sup", "tool": "get_supplier", "args": {"supplier_id": "S001"}},
 {"id": "pay", "tool": "send_payment", "args": {"iban": {"$ref": "sup/iban"}, "amount": "120.00",
  "currency": "EUR", "reference": "Invoice 7"}}
], "result": {"$ref": "pay/payment_id"}}"""

REGISTRY = load_registry(["backoffice", "calculator", "shaping"])
SIGNER = SigningKey.generate()
KEYS = TrustedKeys([SIGNER.public_key])


store = store_fixture("t_authority")


def _payments(ledger: Path) -> int:
    with sqlite3.connect(ledger) as conn:
        return int(conn.execute("SELECT count(*) FROM payments_out").fetchone()[0])


def _start(
    store: Store, run_id: str, registry: Registry = REGISTRY, plan: str = PAY, anchors: Any = None
) -> PausedRun:
    gate = pausing_gate(store, registry, keys=KEYS)
    result = run_in_store(
        Engine(registry, approval=gate), store, run_id=run_id, plan_text=plan, anchors=anchors
    )
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
        write_tables(
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
    write_tables(
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


# --- 2. the approver is shown a copy, not the plan they sign -----------------------------------


def test_the_approver_sees_the_plan_the_records_hash_to_not_the_run_table_copy(
    store: Store, ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Attack 2: the store writer puts a 12.40 EUR plan in ``pte_runs.plan``; the run's records
    hold the 9,800 EUR plan whose hash the approver signs. The listing shows the records' plan."""
    from pte.cli import main

    big = PAY.replace('"120.00"', '"9800.00"')
    paused = _start(store, "big", plan=big)
    decoy = json.loads(PAY.replace('"120.00"', '"12.40"'))
    write_tables(store, "UPDATE pte_runs SET plan = ? WHERE run_id = 'big'", (json.dumps(decoy),))
    assert main(["--quiet", "approvals", "list", "--plans", "--store", store.url]) == 0
    out = capsys.readouterr().out
    assert "9800.00" in out and "12.40" not in out
    assert main(["--quiet", "approvals", "list", "--store", store.url, "--json"]) == 0
    (listed,) = json.loads(capsys.readouterr().out)
    assert (
        listed["plan_hash"] == paused.plan_hash and listed["plan"]["steps"][1]["args"]["amount"] == "9800.00"
    )
    # The hash the approver signs names what they were shown, and what resume runs.
    decision = decide(store, "big", by="alice", approve=True, signing_key=SIGNER)
    assert decision.plan_hash == paused.plan_hash
    assert _resume(store, "big").status == "succeeded"
    with sqlite3.connect(ledger) as conn:
        assert conn.execute("SELECT amount FROM payments_out").fetchall() == [("9800.00",)]


def test_a_paused_run_whose_records_were_edited_cannot_be_reviewed(
    store: Store, ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The writer edits the plan inside the records instead: the chain breaks, nothing is shown."""
    from pte.cli import main
    from pte.stores import StoreError

    _start(store, "edited", plan=PAY.replace('"120.00"', '"9800.00"'))
    write_tables(
        store, "UPDATE pte_records SET line = REPLACE(line, '9800.00', '12.40') WHERE run_id = 'edited'"
    )
    assert main(["--quiet", "approvals", "list", "--plans", "--store", store.url]) == 0
    out = capsys.readouterr().out
    assert "CANNOT BE REVIEWED" in out and "12.40" not in out
    with pytest.raises(StoreError, match="does not verify"):
        decide(store, "edited", by="alice", approve=True, signing_key=SIGNER)


# --- 6. a keyed, approved write that crashed after its effect -----------------------------------

WORLD: dict[str, Path] = {}


class Transfer(BaseModel):
    transfer_id: str


@tool(effect="write", requires_approval=True, idempotency_key="key", sinks={"account": ["request"]})
def transfer(account: str, amount: str, key: str) -> Transfer:
    """A payment API with idempotency keys: a known key pays nothing and returns the first transfer."""
    with sqlite3.connect(WORLD["db"]) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS t (key TEXT PRIMARY KEY, account TEXT, amount TEXT)")
        conn.execute("INSERT OR IGNORE INTO t VALUES (?, ?, ?)", (key, account, amount))
    return Transfer(transfer_id=f"T-{key[-8:]}")


KEYED = json.dumps(
    {
        "pte_plan": "1",
        "steps": [{"id": "pay", "tool": "transfer", "args": {"account": "DE89", "amount": "9800.00"}}],
        "result": {"$ref": "pay/transfer_id"},
    }
)


def _transfers() -> int:
    with sqlite3.connect(WORLD["db"]) as conn:
        return int(conn.execute("SELECT count(*) FROM t").fetchone()[0])


def test_a_keyed_approved_write_that_crashed_after_its_effect_completes_once(tmp_path: Path) -> None:
    """Attack 6: the run crashed after the keyed payment took effect. Before, resume said
    "approve the plan again" (which pays twice). Now the keyed re-call completes the run, once."""
    from pte import AuditLog, Deployment, Policy, approve, compile_plan
    from pte.policy import ApprovalStore, approval_hook, catalogue_fingerprint
    from pte.runs import resume_file

    WORLD["db"] = tmp_path / "world.sqlite"
    registry = Registry([transfer])
    policy = Policy.from_registry(registry)
    approvals = ApprovalStore(tmp_path / "approvals.jsonl")
    plan = compile_plan(KEYED, registry, checks=[policy.check()])
    given = approve(
        plan, "alice", approvals, catalogue=catalogue_fingerprint(registry, plan, policy), signing_key=SIGNER
    )
    full = tmp_path / "full.jsonl"
    gate = approval_hook(approvals, registry=registry, keys=KEYS, policy=policy)
    with AuditLog(full, run_id=given.run) as audit:
        assert Engine(registry, policy=policy, approval=gate).execute(KEYED, audit).ok
    assert _transfers() == 1
    # The crash: the log ends right after the payment's write-ahead record (the effect happened).
    lines = full.read_text(encoding="utf-8").splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if json.loads(line)["type"] == "step_started")
    crashed = tmp_path / "crashed.jsonl"
    crashed.write_text("".join(lines[: cut + 1]), encoding="utf-8")
    deployment = Deployment.of(
        policy=policy, approvals=approval_hook(approvals, registry=registry, keys=KEYS, policy=policy)
    )
    result = resume_file(crashed, registry, deployment=deployment)
    assert result.ok, result.message
    assert "approve" not in (result.message or "")
    assert _transfers() == 1  # the keyed re-call applied the same key: one payment


# --- 3, 4, 5: with a deployment key, a log writer cannot cut, re-hash or replay a run -----------

DEPLOYMENT = SigningKey.generate()


def _anchors(path: Path) -> Any:
    from pte.audit import Anchors

    return Anchors(path, key=DEPLOYMENT)


def _rehash(records: list[dict[str, Any]], path: Path) -> None:
    """Re-chain edited records into a log that verifies (what a log writer without a key can do)."""
    from tests._chain import log_text, relinked

    path.write_text(log_text(relinked(records)), encoding="utf-8")


class _Paid:
    """A signed approval of one run of PAY, in a fresh approval store, and the deployment's gate."""

    def __init__(self, tmp_path: Path) -> None:
        from pte import Policy, approve, compile_plan
        from pte.policy import ApprovalStore, approval_hook, catalogue_fingerprint

        self.policy = Policy.from_registry(REGISTRY)
        self.approvals = ApprovalStore(tmp_path / "approvals.jsonl")
        plan = compile_plan(PAY, REGISTRY, checks=[self.policy.check()])
        fingerprint = catalogue_fingerprint(REGISTRY, plan, self.policy)
        self.approval = approve(plan, "alice", self.approvals, catalogue=fingerprint, signing_key=SIGNER)
        self.gate: Callable[[], Any] = lambda: approval_hook(
            self.approvals, registry=REGISTRY, keys=KEYS, policy=self.policy
        )

    def execute(self, log: Path, anchors: Any) -> Any:
        from pte import AuditLog

        with AuditLog(log, run_id=self.approval.run, anchors=anchors) as audit:
            return Engine(REGISTRY, policy=self.policy, approval=self.gate()).execute(PAY, audit)

    def resume(self, log: Path, anchors: Any) -> Any:
        from pte import Deployment
        from pte.runs import resume_file

        deployment = Deployment.of(policy=self.policy, approvals=self.gate(), anchors=anchors)
        return resume_file(log, REGISTRY, deployment=deployment)


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _cut_before(path: Path, out: Path, kind: str, step: str | None = None) -> None:
    records = _records(path)
    cut = next(
        i for i, r in enumerate(records) if r["type"] == kind and (step is None or r.get("step_id") == step)
    )
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    out.write_text("".join(lines[:cut]), encoding="utf-8")


def _anchors_up_to(path: Path, records: int) -> None:
    """Keep the anchors file's lines that name a record before `records` (a crash there)."""
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    path.write_text("".join(line for line in lines if json.loads(line)["seq"] < records), encoding="utf-8")


def test_a_consumed_line_deleted_from_the_approval_store_pays_nothing_again(
    tmp_path: Path, ledger: Path
) -> None:
    """Attack 3: the approval store's ``consumed`` line is deleted and the approved run executed
    again (in a fresh log). The run's write-ahead anchor is its consumption, in the signed chain."""
    paid = _Paid(tmp_path)
    anchors = _anchors(tmp_path / "anchors.jsonl")
    assert paid.execute(tmp_path / "1.jsonl", anchors).ok
    store = paid.approvals.path
    kept = [
        line
        for line in store.read_text(encoding="utf-8").splitlines(keepends=True)
        if '"consumed"' not in line
    ]
    store.write_text("".join(kept), encoding="utf-8")
    again = paid.execute(tmp_path / "2.jsonl", anchors)
    assert again.status == "failed_closed" and "executes its writes once" in (again.message or "")
    assert _payments(ledger) == 1


def test_a_finished_log_truncated_before_its_write_is_not_resumed(tmp_path: Path, ledger: Path) -> None:
    """Attack 5: a paid run's log is cut just before the payment and resumed: refused."""
    paid = _Paid(tmp_path)
    anchors = _anchors(tmp_path / "anchors.jsonl")
    log = tmp_path / "paid.jsonl"
    assert paid.execute(log, anchors).ok
    _cut_before(log, log, "step_started", "pay")
    paid.approvals.path.write_text(
        "".join(
            line
            for line in paid.approvals.path.read_text(encoding="utf-8").splitlines(keepends=True)
            if '"consumed"' not in line
        ),
        encoding="utf-8",
    )  # and the writer of the approval store helps: consumption undone there too
    from pte import FailedClosed

    with pytest.raises(FailedClosed, match="falls short of its signed anchor"):
        paid.resume(log, anchors)
    assert _payments(ledger) == 1


def test_a_re_hashed_read_output_before_an_anchor_is_refused(tmp_path: Path, ledger: Path) -> None:
    """Attack 4: the run crashed after the payment's write-ahead record; the attacker edits the
    supplier's IBAN in the recorded read and re-chains the log. The anchor's head no longer matches."""
    from pte import FailedClosed

    paid = _Paid(tmp_path)
    anchors = _anchors(tmp_path / "anchors.jsonl")
    log = tmp_path / "paid.jsonl"
    assert paid.execute(log, anchors).ok
    records = _records(log)
    crash = next(i for i, r in enumerate(records) if r["type"] == "step_started" and r["step_id"] == "pay")
    records = records[: crash + 1]
    for r in records:
        if r["type"] == "step_finished" and r["step_id"] == "sup":
            r["output"]["iban"] = "GB33BUKB20201555555555"
        if r["type"] == "step_started" and r["step_id"] == "pay":
            r["args"]["iban"] = "GB33BUKB20201555555555"
    _rehash(records, log)
    with pytest.raises(FailedClosed, match="not the one the deployment signed"):
        paid.resume(log, anchors)
    assert _payments(ledger) == 1


def test_a_re_hashed_read_output_in_the_unsigned_tail_is_called_again(tmp_path: Path, ledger: Path) -> None:
    """Attack 4, before any anchor: the run crashed after reading the IBAN, before the payment.
    The tail is unsigned; resume calls the read again, sees the edit, and pays nothing."""
    paid = _Paid(tmp_path)
    scratch = tmp_path / "scratch.jsonl"
    assert paid.execute(scratch, _anchors(tmp_path / "anchors.jsonl")).ok
    with sqlite3.connect(ledger) as conn:
        conn.execute("DELETE FROM payments_out")
    # The crash: the log ends after the read; its start and plan were anchored, the read not
    # (no write had started). The anchors file keeps what was signed by then.
    crashed = tmp_path / "crashed.jsonl"
    _cut_before(scratch, crashed, "step_started", "pay")
    _anchors_up_to(tmp_path / "anchors.jsonl", len(_records(crashed)))
    paid.approvals.path.write_text(
        "".join(
            line
            for line in paid.approvals.path.read_text(encoding="utf-8").splitlines(keepends=True)
            if '"consumed"' not in line
        ),
        encoding="utf-8",
    )
    anchors = _anchors(tmp_path / "anchors.jsonl")
    records = _records(crashed)
    for r in records:
        if r["type"] == "step_finished" and r["step_id"] == "sup":
            r["output"]["iban"] = "GB33BUKB20201555555555"
    edited = tmp_path / "edited.jsonl"
    _rehash(records, edited)
    from pte import FailedClosed

    with pytest.raises(FailedClosed, match="after the run's last signed anchor"):
        paid.resume(edited, anchors)
    assert _payments(ledger) == 0
    # The honest crashed log resumes: the read is called again, agrees, and the payment runs once.
    assert paid.resume(crashed, anchors).ok
    assert _payments(ledger) == 1


# --- 7. a consistently rewritten sealed store run ----------------------------------------------


def _rewrite_store_run(store: Store, run_id: str, edit: Any) -> None:
    """Edit a stored run's records and re-hash all of its rows (and the store's own seal
    checkpoint), as a database writer without the deployment key can."""
    from pte.audit import canonical_json
    from tests._chain import chain_hash

    records = store.records(run_id)
    edit(records)
    prev = "0" * 64
    for record in records:
        record = {k: v for k, v in record.items() if k != "hash"}
        record["prev"] = prev
        prev = record["hash"] = chain_hash(prev, record)
        write_tables(
            store,
            "UPDATE pte_records SET prev = ?, hash = ?, line = ? WHERE run_id = ? AND seq = ?",
            (record["prev"], record["hash"], canonical_json(record), run_id, record["seq"]),
        )
    write_tables(store, "UPDATE pte_checkpoints SET hash = ? WHERE run_id = ?", (prev, run_id))


def test_a_consistently_rewritten_sealed_store_run_is_refused_with_the_deployment_key(
    store: Store,
    ledger: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Attack 7: a sealed run's recorded IBAN is rewritten and every row re-hashed in the
    database. The chain verifies (even the server's own check); the anchors outside it do not."""
    from pte.cli import main

    key_file = tmp_path / "deployment.key"
    key_file.write_bytes(DEPLOYMENT.to_pem())
    anchors = _anchors(tmp_path / "deployment.key.anchors.jsonl")
    _start(store, "sealed", anchors=anchors)
    decide(store, "sealed", by="alice", approve=True, signing_key=SIGNER)
    assert resume_run(
        store, "sealed", REGISTRY, gate=pausing_gate(store, REGISTRY, keys=KEYS), anchors=anchors
    ).ok

    def edit(records: list[dict[str, Any]]) -> None:
        for r in records:
            if r["type"] == "step_finished" and r["step_id"] == "sup":
                r["output"]["iban"] = "GB33BUKB20201555555555"

    _rewrite_store_run(store, "sealed", edit)
    assert store.verify("sealed").ok  # the chain alone cannot tell
    assert main(["--quiet", "audit", "verify", store.url, "--run", "sealed"]) == 0
    capsys.readouterr()
    monkeypatch.setenv("PTE_DEPLOYMENT_KEY_FILE", str(key_file))
    assert main(["--quiet", "audit", "verify", store.url, "--run", "sealed"]) == 1
    assert "not the one the deployment signed" in capsys.readouterr().out


def test_a_run_made_up_in_the_store_is_not_the_deployments(
    store: Store,
    ledger: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A store writer runs a whole payment run elsewhere and inserts it: it verifies as a chain,
    but the deployment never anchored it."""
    from pte.cli import main

    key_file = tmp_path / "deployment.key"
    key_file.write_bytes(DEPLOYMENT.to_pem())
    registry = load_registry(["calculator"])
    plan = '{"pte_plan": "1", "steps": [{"id": "a", "tool": "calculator", "args": {"expression": "1+1"}}]}'
    assert run_in_store(Engine(registry), store, run_id="forged", plan_text=plan).ok  # no key: unanchored
    monkeypatch.setenv("PTE_DEPLOYMENT_KEY_FILE", str(key_file))
    assert main(["--quiet", "audit", "verify", store.url, "--run", "forged"]) == 1
    assert "never anchored" in capsys.readouterr().out


# --- the CLI: pte init, and a log cut before its write -----------------------------------------


def test_pte_init_then_a_cut_log_is_not_resumed_by_the_cli(
    tmp_path: Path, ledger: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from pte.cli import main

    assert main(["--quiet", "init", str(tmp_path / "deploy"), "--tools", "backoffice"]) == 0
    assert f"PTE_DEPLOYMENT={tmp_path / 'deploy'}" in capsys.readouterr().out
    with pytest.raises(SystemExit) as usage:  # never replaced
        main(["--quiet", "init", "--dir", str(tmp_path / "deploy")])
    assert usage.value.code == 2
    capsys.readouterr()
    monkeypatch.setenv("PTE_DEPLOYMENT", str(tmp_path / "deploy"))
    plan = tmp_path / "post.json"
    plan.write_text(
        json.dumps(
            {
                "pte_plan": "1",
                "steps": [
                    {"id": "inv", "tool": "list_overdue_invoices", "args": {"days": 30}},
                    {"id": "mail", "tool": "queue_reminder", "args": {"invoice_id": {"$ref": "inv/ids/0"}}},
                ],
            }
        ),
        encoding="utf-8",
    )
    log = tmp_path / "audit.jsonl"
    tools = ["--tools", "backoffice"]
    assert main(["--quiet", "execute", str(plan), *tools, "--audit", str(log)]) == 0
    assert (tmp_path / "deploy" / "anchors.jsonl").exists()
    assert main(["--quiet", "audit", "verify", str(log)]) == 0
    _cut_before(log, log, "step_started", "mail")
    capsys.readouterr()
    assert main(["--quiet", "resume", str(log), *tools]) == 1
    assert "falls short of its signed anchor" in capsys.readouterr().err
    assert main(["--quiet", "audit", "verify", str(log)]) == 1


def test_a_keyed_approved_store_write_that_crashed_after_its_effect_completes_once(
    store: Store, tmp_path: Path
) -> None:
    """Attack 6 in a store: the approved run crashed after the keyed transfer took effect
    (its rows end at the write-ahead record); resume completes it with the same key, once."""
    WORLD["db"] = tmp_path / "world.sqlite"
    registry = Registry([transfer])
    _start(store, "k", registry, KEYED)
    decide(store, "k", by="alice", approve=True, signing_key=SIGNER)
    assert _resume(store, "k", registry).ok
    assert _transfers() == 1
    started = next(r["seq"] for r in store.records("k") if r["type"] == "step_started")
    write_tables(store, "DELETE FROM pte_records WHERE run_id = 'k' AND seq > ?", (started,))
    write_tables(store, "DELETE FROM pte_checkpoints WHERE run_id = 'k'")
    write_tables(store, "UPDATE pte_runs SET status = 'running', reason = NULL WHERE run_id = 'k'")
    result = _resume(store, "k", registry)
    assert result.ok, result
    assert _transfers() == 1


# --- the anchors file itself ------------------------------------------------------------------


def test_the_anchors_file_refuses_forged_edited_and_removed_lines(tmp_path: Path) -> None:
    from pte.audit import Anchors
    from pte.errors import AnchorError

    path = tmp_path / "anchors.jsonl"
    signer = Anchors(path, key=DEPLOYMENT)
    assert signer.sign("r1", 3, "a" * 64, expected=0) == 1
    assert signer.sign("r2", 5, "b" * 64, expected=0) == 1
    assert signer.sign("r1", 9, "c" * 64, expected=1) == 2
    assert signer.sign("r1", 9, "c" * 64, expected=2) == 2  # the same point again: nothing new
    with pytest.raises(AnchorError, match="executes its writes once"):
        signer.sign("r1", 12, "d" * 64, expected=1)  # a writer that did not verify them all
    reader = Anchors(path, public=DEPLOYMENT.public_key)
    assert [a.seq for a in reader.for_run("r1")] == [3, 9]
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    for damaged, why in (
        ([lines[0], lines[2]], "chain is broken"),  # a line removed from the middle
        ([lines[0].replace('"seq":3', '"seq":4'), *lines[1:]], "does not verify"),  # edited
        ([*lines, lines[-1]], "chain is broken"),  # a line replayed
    ):
        path.write_text("".join(damaged), encoding="utf-8")
        with pytest.raises(AnchorError, match=why):
            Anchors(path, public=DEPLOYMENT.public_key).all()
    path.write_text("".join(lines), encoding="utf-8")
    forger = Anchors(tmp_path / "other.jsonl", key=SigningKey.generate())
    forger.sign("r1", 20, "e" * 64, expected=0)
    path.write_text("".join(lines) + (tmp_path / "other.jsonl").read_text(encoding="utf-8"), encoding="utf-8")
    with pytest.raises(AnchorError, match=r"chain is broken|not the deployment's key"):
        Anchors(path, public=DEPLOYMENT.public_key).all()
