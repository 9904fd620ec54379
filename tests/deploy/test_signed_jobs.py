"""Signed jobs (issue 33): a worker runs only what ``pte submit`` signed with the deployment key.

The red team's two findings, re-run: a database writer who replaces a queued run's job in
``pte_runs.job`` made the worker pay what nobody submitted; the same column kept a secret in
clear that the run's records redact. Here the job is signed for its run id with the deployment
key (what is stored: redacted, with its allow-list and deployment fingerprint), and a worker
ends a job whose signature does not verify ``failed_closed(job_signature_invalid)`` on the
record, before any tool runs. The fast tests drive `process_run` over SQLite; the slow one is
the attack through real PostgreSQL, Redis and a ``pte worker`` process.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pte import SigningKey, load_registry

# private: the worker and job internals, white-box
from pte._deploy import (
    enqueue,
    job_fingerprint,
    job_refusal,
    make_app,
    process_run,
    redact_job,
    sign_job,
    submit_job,
)
from pte.audit import Redactor
from pte.cli import main
from pte.deployment import decide
from pte.stores import Store, open_store
from tests._ledger import new_ledger
from tests._services import postgres_url, redis_url  # noqa: F401 - the session fixtures
from tests.deploy.test_workers import TOOLS, _pte, _wait_for, _worker, workers_env  # noqa: F401 - the fixture

KEY = SigningKey.generate()
OTHER = SigningKey.generate()
TOKEN = "ghp_" + "Zx8Kq2Lm4Np6Rt8Vw0Yb2Dc4Fg6Hj8Kl0Mn2P"

READ = """{"pte_plan": "1", "steps": [
  {"id": "invoice", "tool": "get_invoice", "args": {"invoice_id": "INV-1025"}}
], "result": {"$ref": "invoice/currency"}}"""
# What the database writer puts in the job instead: a write nobody submitted.
PAY_IN = """{"pte_plan": "1", "steps": [
  {"id": "invoice", "tool": "get_invoice", "args": {"invoice_id": "INV-1025"}},
  {"id": "pay", "tool": "record_payment",
   "args": {"invoice_id": "INV-1025", "amount": "1.00", "currency": {"$ref": "invoice/currency"}}}
], "result": {"$ref": "pay/payment_id"}}"""
WITH_SECRET = (
    '{"pte_plan": "1", "steps": [{"id": "note", "tool": "format_text", "args": {"template": "deploy with '
    + TOKEN
    + '", "values": {}}}], "result": {"$ref": "note/text"}}'
)
PACKS = ["backoffice", "shaping"]


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = new_ledger(tmp_path / "ledger.sqlite")
    monkeypatch.setenv("PTE_LEDGER", str(path))
    for name in ("PTE_STORE", "PTE_BROKER", "PTE_DEPLOYMENT_KEY_FILE", "PTE_DEPLOYMENT_PUBLIC_KEY_FILE"):
        monkeypatch.delenv(name, raising=False)
    return path


def _payments(ledger: Path) -> int:
    with sqlite3.connect(ledger) as conn:
        return int(
            conn.execute(
                "SELECT (SELECT count(*) FROM payments) + (SELECT count(*) FROM payments_out)"
            ).fetchone()[0]
        )


def _job(plan: str, registry: Any) -> dict[str, Any]:
    return {
        "mode": "execute",
        "plan_text": plan,
        "tools": PACKS,
        "allow": sorted(registry.names),
        "policy": None,
        "deployment": job_fingerprint(registry, None),
    }


def _run(store: Store, run_id: str, registry: Any) -> str:
    return process_run(store, run_id, registry, PACKS, owner="w", job_key=KEY.public_key, require_signed=True)


def _types(store: Store, run_id: str) -> list[str]:
    return [r["type"] for r in store.records(run_id)]


def _stored_job(store: Store, run_id: str) -> dict[str, Any]:
    """The job a queued run holds in its row."""
    run = store.run(run_id)
    assert run is not None and run.job is not None, run_id
    return run.job


def _replace_job(store: Store, run_id: str, job: dict[str, Any]) -> None:
    """What a writer of the database does: a new job in the run's row."""
    with store._transaction() as cur:  # type: ignore[attr-defined]
        cur.execute("UPDATE pte_runs SET job = ? WHERE run_id = ?", (json.dumps(job), run_id))


def _refused(store: Store, run_id: str, reason: str = "job_signature_invalid") -> str:
    info = store.run(run_id)
    assert info is not None and (info.status, info.reason) == ("failed_closed", reason), info
    assert _types(store, run_id) == ["run_started", "run_finished"]  # no step, no tool
    assert store.verify(run_id).intact
    return str(store.records(run_id)[-1]["message"])


def test_a_signed_job_runs_and_every_other_one_ends_before_any_tool(tmp_path: Path, ledger: Path) -> None:
    registry = load_registry(PACKS)
    before = _payments(ledger)
    with open_store(f"sqlite:{tmp_path / 'runs.db'}") as store:
        submit_job(store, _job(READ, registry), run_id="good", signing_key=KEY)
        assert _run(store, "good", registry) == "succeeded"

        # The repro: the job of a queued run replaced in the table (its signature kept).
        submit_job(store, _job(READ, registry), run_id="victim", signing_key=KEY)
        stored = _stored_job(store, "victim")
        _replace_job(store, "victim", {**stored, "plan_text": PAY_IN})
        assert _run(store, "victim", registry) == "failed_closed"
        assert "changed after pte submit" in _refused(store, "victim")

        # A signed job copied to another run: the signature names its own run.
        store.submit("copy", stored)
        assert _run(store, "copy", registry) == "failed_closed"
        assert "signed for run 'victim'" in _refused(store, "copy")

        # Signed with a key that is not the deployment's; not signed at all.
        submit_job(store, _job(PAY_IN, registry), run_id="stranger", signing_key=OTHER)
        assert _run(store, "stranger", registry) == "failed_closed"
        assert "not by this deployment's key" in _refused(store, "stranger")
        store.submit("forged", _job(PAY_IN, registry))
        assert _run(store, "forged", registry) == "failed_closed"
        assert "not signed" in _refused(store, "forged")

        # A worker without a key to check with runs no job at all.
        submit_job(store, _job(PAY_IN, registry), run_id="nokey", signing_key=KEY)
        outcome = process_run(store, "nokey", registry, PACKS, owner="w", require_signed=True)
        assert outcome == "failed_closed"
        assert "no deployment key" in _refused(store, "nokey")
        # A second delivery of an ended job does nothing.
        assert _run(store, "victim", registry) == "done"
    assert _payments(ledger) == before


def test_a_job_signed_under_another_deployment_ends_deployment_mismatch(tmp_path: Path, ledger: Path) -> None:
    registry = load_registry(PACKS)
    with open_store(f"sqlite:{tmp_path / 'runs.db'}") as store:
        # Submitted while the deployment's policy made get_invoice's output untrusted: not this one.
        other = {"pte_policy": "1", "tools": {"get_invoice": {"output": "untrusted"}}}
        submit_job(
            store, {**_job(READ, registry), "deployment": job_fingerprint(registry, other)}, run_id="old",
            signing_key=KEY,
        )  # fmt: skip
        assert _run(store, "old", registry) == "failed_closed"
        assert "submit it again under this deployment" in _refused(store, "old", "deployment_mismatch")
        # Its allow-list names a tool this worker does not serve.
        submit_job(store, {**_job(READ, registry), "allow": ["get_invoice", "teleport"]}, run_id="wide",
                   signing_key=KEY)  # fmt: skip
        assert _run(store, "wide", registry) == "failed_closed"
        _refused(store, "wide", "tool_not_allowed")


def test_the_signed_allow_list_narrows_what_the_job_may_call(tmp_path: Path, ledger: Path) -> None:
    registry = load_registry(PACKS)
    narrow = registry.allow(["get_invoice"])
    before = _payments(ledger)
    with open_store(f"sqlite:{tmp_path / 'runs.db'}") as store:
        submit_job(store, _job(PAY_IN, narrow), run_id="narrow", signing_key=KEY)
        assert _run(store, "narrow", registry) == "failed_closed"
        info = store.run("narrow")
        assert info is not None and info.reason == "tool_not_allowed"
        assert "step_started" not in _types(store, "narrow")
        # Widening it in the table breaks the signature.
        submit_job(store, _job(PAY_IN, narrow), run_id="widened", signing_key=KEY)
        stored = _stored_job(store, "widened")
        _replace_job(store, "widened", {**stored, "allow": sorted(registry.names)})
        assert _run(store, "widened", registry) == "failed_closed"
        _refused(store, "widened")
    assert _payments(ledger) == before


def test_a_secret_in_a_job_is_stored_redacted_and_the_signature_covers_it(
    tmp_path: Path, ledger: Path
) -> None:
    registry = load_registry(PACKS)
    job, redacted = redact_job(_job(WITH_SECRET, registry), Redactor.from_env())
    assert redacted and TOKEN not in json.dumps(job)
    with open_store(f"sqlite:{tmp_path / 'runs.db'}") as store:
        submit_job(store, job, run_id="secret", signing_key=KEY)
        assert _run(store, "secret", registry) == "succeeded"
    with sqlite3.connect(tmp_path / "runs.db") as conn:
        for table in ("pte_runs", "pte_records"):
            rows = conn.execute(f"SELECT * FROM {table}").fetchall()
            assert TOKEN not in json.dumps(rows, default=str)


@given(
    field=st.sampled_from(
        ["mode", "plan_text", "tools", "allow", "policy", "deployment", "run_id", "pte_job"]
    ),
    value=st.one_of(
        st.none(), st.text(max_size=20), st.integers(), st.lists(st.text(max_size=5), max_size=3)
    ),
)
def test_any_change_to_a_stored_job_breaks_its_signature(field: str, value: Any) -> None:
    """Property: whatever field of a signed job a writer sets to whatever other value, it no longer counts."""
    job = sign_job(
        {"mode": "execute", "plan_text": READ, "tools": PACKS, "allow": ["get_invoice"], "policy": None,
         "deployment": "0" * 64}, "r1", KEY,
    )  # fmt: skip
    assert job_refusal(job, "r1", KEY.public_key) is None
    if job.get(field) == value:
        return
    assert job_refusal({**job, field: value}, "r1", KEY.public_key) is not None
    assert job_refusal(job, "r2", KEY.public_key) is not None
    assert job_refusal(job, "r1", OTHER.public_key) is not None


def test_submit_and_worker_without_a_deployment_or_its_key_are_usage_errors(
    tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Workers take their authority only from a deployment: without one, `pte submit` and `pte
    worker` refuse (no_deployment, exit 2) naming the `pte init` that makes it, even with the
    variables that once configured them; with a deployment whose key is not on this machine, too.
    Nothing is stored."""
    from tests._cli_run import make_deployment

    (tmp_path / "read.json").write_text(READ, encoding="utf-8")
    url = f"sqlite:{tmp_path / 'runs.db'}"
    common = ["--tools", "backoffice", "--store", url, "--broker", "redis://127.0.0.1:9/0"]
    (tmp_path / "deployment.key").write_bytes(KEY.to_pem())
    monkeypatch.delenv("PTE_DEPLOYMENT", raising=False)
    monkeypatch.setenv("PTE_DEPLOYMENT_KEY_FILE", str(tmp_path / "deployment.key"))  # no longer enough
    for argv in (["submit", str(tmp_path / "read.json"), *common], ["worker", *common]):
        with pytest.raises(SystemExit) as exited:
            main(["--quiet", *argv])
        assert exited.value.code == 2
        err = capsys.readouterr().err
        assert "no_deployment" in err and f"pte init --tools backoffice --store {url}" in err
    monkeypatch.delenv("PTE_DEPLOYMENT_KEY_FILE")
    where = make_deployment(tmp_path, monkeypatch, capsys, "--tools", "backoffice", "--store", url)
    (where / "deployment.key").unlink()  # a verifier's copy of the folder
    for argv in (["submit", str(tmp_path / "read.json"), *common], ["worker", *common]):
        with pytest.raises(SystemExit) as exited:
            main(["--quiet", *argv])
        assert exited.value.code == 2
        assert "does not hold the deployment's key" in capsys.readouterr().err
    with open_store(url) as store:
        assert store.runs() == []  # nothing stored


@pytest.mark.slow
def test_through_postgres_redis_and_a_worker_a_replaced_job_pays_nothing(
    workers_env: dict[str, Any],  # noqa: F811
    tmp_path: Path,
) -> None:
    """The red team's repro as they ran it: `pte submit`, a database writer edits and inserts
    jobs, a real `pte worker` takes them. Only the signed job runs; the secret is nowhere stored."""
    store_url, broker, ledger = workers_env["store_url"], workers_env["broker"], workers_env["ledger"]
    env = workers_env["env"]  # the deployment's: its key signs what `pte submit` queues
    for name, plan in (("read.json", READ), ("secret.json", WITH_SECRET)):
        (tmp_path / name).write_text(plan, encoding="utf-8")
    for run_id, plan in (("victim", "read.json"), ("secret", "secret.json")):
        done = _pte(
            "submit", str(tmp_path / plan), "--tools", TOOLS, "--store", store_url, "--broker", broker,
            "--run-id", run_id, env=env,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert TOKEN not in done.stdout + done.stderr
    said = _pte(
        "submit", str(tmp_path / "secret.json"), "--tools", TOOLS, "--store", store_url,
        "--broker", broker, "--run-id", "secret2", env=env,
    )  # fmt: skip
    assert said.returncode == 0 and "[REDACTED]" in said.stderr
    store = open_store(store_url)
    stored = _stored_job(store, "victim")
    with store._transaction() as cur:  # type: ignore[attr-defined]
        cur.execute(
            "UPDATE pte_runs SET job = %s WHERE run_id = 'victim'",
            (json.dumps({**stored, "plan_text": PAY_IN}),),
        )
        forged = {k: v for k, v in stored.items() if k != "signature"} | {
            "plan_text": PAY_IN,
            "run_id": "forged",
        }
        cur.execute(
            "INSERT INTO pte_runs (run_id, status, created_at, updated_at, job) "
            "VALUES ('forged', 'queued', '2026-01-01', '2026-01-01', %s)",
            (json.dumps(forged),),
        )
    enqueue(make_app(broker), ["forged"])
    before = _payments(ledger)
    workers_env["procs"].append(_worker("a", broker, env))
    runs = ("victim", "forged", "secret", "secret2")

    def status(run_id: str) -> tuple[str, str | None]:
        info = store.run(run_id)
        assert info is not None
        return info.status, info.reason

    _wait_for(lambda: all(status(r)[0] not in ("queued", "running") for r in runs), 120, "jobs", every=0.2)
    for run_id in ("victim", "forged"):
        _refused(store, run_id)
    assert [status("secret"), status("secret2")] == [("succeeded", None)] * 2
    assert _payments(ledger) == before
    rows = store._query("SELECT job FROM pte_runs UNION ALL SELECT line FROM pte_records")  # type: ignore[attr-defined]
    assert rows and TOKEN not in json.dumps(rows)
    store.close()


PAY_OUT = """{"pte_plan": "1", "steps": [
 {"id": "supplier", "tool": "get_supplier", "args": {"supplier_id": "S001"}},
 {"id": "pay", "tool": "send_payment", "args": {"iban": {"$ref": "supplier/iban"}, "amount": "120.00",
  "currency": "EUR", "reference": "Invoice 7"}}
], "result": {"$ref": "pay/payment_id"}}"""


def test_a_paused_run_under_changed_packs_ends_deployment_mismatch_instead_of_a_traceback(
    tmp_path: Path, ledger: Path
) -> None:
    """A worker whose packs changed while a run waited: it failed in the worker's log with a
    ReplayDivergence traceback and left the run paused; now the run ends on the record."""
    served = load_registry(["backoffice"])
    before = _payments(ledger)
    with open_store(f"sqlite:{tmp_path / 'runs.db'}") as store:
        job = {"mode": "execute", "plan_text": PAY_OUT, "tools": ["backoffice"], "policy": None}
        submit_job(store, job, run_id="p", signing_key=KEY)
        outcome = process_run(store, "p", served, ["backoffice"], owner="w", job_key=KEY.public_key)
        assert outcome == "awaiting_approval"
        decide(store, "p", by="alice", approve=True)
        wider = load_registry(["backoffice", "calculator"])  # the worker now serves another pack too
        outcome = process_run(
            store, "p", wider, ["backoffice", "calculator"], owner="w", job_key=KEY.public_key
        )
        assert outcome == "failed_closed"
        info = store.run("p")
        assert info is not None and (info.status, info.reason) == ("failed_closed", "deployment_mismatch")
        records = store.records("p")
        assert [r["type"] for r in records[-2:]] == ["run_resumed", "run_finished"]
        assert "started under another deployment" in records[-1]["message"]
        assert store.verify("p").intact
    assert _payments(ledger) == before
