"""Resume after a crash: killed by SIGKILL at every record boundary in turn, then resumed.

Each `write` tool's side effect must be applied exactly once (checked in the SQLite ledger),
the finished log must verify, and replay must agree with it. A non-idempotent write that was
in flight at the crash is never re-run: the run ends `failed_closed(needs_review)`.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pte import FailedClosed, ReasonCode, Registry, load_registry, verify
from pte.audit import read_records
from pte.runs import replay_file, resume_file
from tests._cli_run import make_deployment
from tests._crash import ENGINE_CHILD, KILL_PATCH
from tests._ledger import new_ledger
from tests._services import run_python

REPO = Path(__file__).resolve().parents[2]
PACKS = ["backoffice", "calculator", "shaping"]

# Reads, an idempotent single write, an idempotent batch write, then a read that uses it.
IDEMPOTENT_PLAN = """{"pte_plan": "1", "steps": [
 {"id": "inv", "tool": "list_overdue_invoices", "args": {"days": 30}},
 {"id": "one", "tool": "queue_reminder", "args": {"invoice_id": "INV-1006", "channel": "letter"}},
 {"id": "all", "tool": "send_reminders", "args": {"invoice_ids": {"$ref": "inv/ids"}}},
 {"id": "n", "tool": "calculator",
  "args": {"expression": "q + 0", "variables": {"q": {"$ref": "all/queued"}}}}
], "result": {"$ref": "n/value"}}"""

PAYMENT_PLAN = """{"pte_plan": "1", "steps": [
 {"id": "inv", "tool": "get_invoice", "args": {"invoice_id": "INV-1011"}},
 {"id": "pay", "tool": "record_payment",
  "args": {"invoice_id": "INV-1011", "amount": "100.00", "currency": {"$ref": "inv/currency"}}},
 {"id": "after", "tool": "get_invoice", "args": {"invoice_id": "INV-1011"}, "after": ["pay"]}
], "result": {"$ref": "after/outstanding"}}"""

CHILD = ENGINE_CHILD


def _crash(tmp: Path, plan: str, kill_at: int, mode: str, ledger: Path) -> tuple[Path, int]:
    log = tmp / f"run-{mode}-{kill_at}.jsonl"
    plan_file = tmp / "plan.json"
    plan_file.write_text(plan, encoding="utf-8")
    env = {**os.environ, "PTE_LEDGER": str(ledger), "KILL_AT": str(kill_at), "KILL_MODE": mode}
    child = run_python(
        CHILD.format(repo=str(REPO), packs=repr(PACKS)),
        str(log),
        str(plan_file),
        env=env,
        timeout=60,
        warm=PACKS,
    )
    return log, child.returncode


@pytest.fixture(scope="module")
def registry() -> Registry:
    return load_registry(PACKS)


def _reminders(ledger: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(ledger) as conn:
        return sorted(conn.execute("select invoice_id, channel from reminders_outbox").fetchall())


def test_killed_at_every_record_boundary_then_resumed_applies_each_write_exactly_once(
    tmp_path: Path, registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An uninterrupted run, for the expected outcome and the number of records.
    ledger = tmp_path / "clean.sqlite"
    new_ledger(ledger)
    log, code = _crash(tmp_path, IDEMPOTENT_PLAN, 10_000, "after", ledger)
    assert code == 0
    expected = _reminders(ledger)
    total = len(read_records(log))
    assert len(expected) == 11 and total == 11  # 10 overdue invoices by email, INV-1006 by letter too
    kills = 0
    # "after k" for k = 0 .. total-2 and "before k" for k = 1 .. total-1: every boundary between
    # two records, once with the kill just after the earlier record, once just before the later.
    boundaries = [(k, "after") for k in range(total - 1)] + [(k, "before") for k in range(1, total)]
    for kill_at, mode in boundaries:
        ledger = tmp_path / f"ledger-{mode}-{kill_at}.sqlite"
        new_ledger(ledger)
        log, code = _crash(tmp_path, IDEMPOTENT_PLAN, kill_at, mode, ledger)
        assert code == -9, f"the child was not killed at {mode} {kill_at}"
        kills += 1
        report = verify(log)
        assert report.intact and not report.complete
        monkeypatch.setenv("PTE_LEDGER", str(ledger))
        result = resume_file(log, registry)
        assert result.ok, (mode, kill_at, result.reason, result.message)
        # 10 newly queued, or 0 when the batch had run just before the kill and its
        # idempotent re-run found everything already queued.
        assert result.result in ("10", "0")
        assert _reminders(ledger) == expected, (mode, kill_at)
        assert verify(log).ok
        assert replay_file(log).ok
        records = read_records(log)
        assert [r["type"] for r in records].count("run_resumed") == 1
    assert kills == 2 * (total - 1)


def _payments(ledger: Path) -> int:
    with sqlite3.connect(ledger) as conn:
        return int(conn.execute("select count(*) from payments where invoice_id = 'INV-1011'").fetchone()[0])


@pytest.mark.parametrize("mode", ["after", "before"])
def test_an_in_flight_non_idempotent_write_is_never_rerun(
    tmp_path: Path, registry: Registry, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    ledger = tmp_path / "ledger.sqlite"
    new_ledger(ledger)
    before = _payments(ledger)
    # Records: 0 run_started, 1 plan_accepted, 2/3 inv, 4 pay step_started, 5 pay step_finished.
    # "after 4": killed before the payment ran; "before 5": killed after it ran, unrecorded.
    kill_at = 4 if mode == "after" else 5
    log, code = _crash(tmp_path, PAYMENT_PLAN, kill_at, mode, ledger)
    assert code == -9
    applied = _payments(ledger) - before
    assert applied == (0 if mode == "after" else 1)
    monkeypatch.setenv("PTE_LEDGER", str(ledger))
    result = resume_file(log, registry)
    assert result.status == "failed_closed"
    assert result.reason is ReasonCode.NEEDS_REVIEW
    assert "'pay'" in (result.message or "") and "record_payment" in (result.message or "")
    assert _payments(ledger) - before == applied  # never applied twice
    assert verify(log).ok
    assert replay_file(log).ok
    finished = [r for r in read_records(log) if r["type"] == "run_finished"]
    assert finished[-1]["reason"] == "needs_review"


def test_resume_refuses_a_finished_run(tmp_path: Path, registry: Registry) -> None:
    ledger = tmp_path / "ledger.sqlite"
    new_ledger(ledger)
    log, code = _crash(tmp_path, IDEMPOTENT_PLAN, 10_000, "after", ledger)
    assert code == 0
    with pytest.raises(FailedClosed, match="already finished"):
        resume_file(log, registry)


#: The crash child run under the deployment of ``$PTE_DEPLOYMENT``: its engine and anchors, so the
#: run's start is anchored as `pte execute` anchors it (a write is resumed only under it).
DEPLOYMENT_CHILD = KILL_PATCH + textwrap.dedent(
    """
    import pte

    deployment = pte.Deployment.from_folder(os.environ["PTE_DEPLOYMENT"])
    with AuditLog(sys.argv[1], anchors=deployment.anchors()) as audit:
        deployment.engine().execute(open(sys.argv[2]).read(), audit)
    """
)


def test_cli_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from pte.cli import main

    where = make_deployment(
        tmp_path, monkeypatch, capsys, "--tools", ",".join(PACKS), "--no-store"
    )  # it writes
    ledger = tmp_path / "ledger.sqlite"
    new_ledger(ledger)
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(IDEMPOTENT_PLAN, encoding="utf-8")
    log = tmp_path / "run.jsonl"
    env = {**os.environ, "PTE_LEDGER": str(ledger), "KILL_AT": "6", "KILL_MODE": "after"}
    child = run_python(DEPLOYMENT_CHILD.format(repo=str(REPO)), str(log), str(plan_file), env=env, timeout=60)
    assert child.returncode == -9, child.stderr
    assert os.environ["PTE_DEPLOYMENT"] == str(where)
    monkeypatch.setenv("PTE_LEDGER", str(ledger))
    assert main(["--quiet", "resume", str(log), "--tools", "backoffice,calculator,shaping", "--json"]) == 0
    assert '"status": "succeeded"' in capsys.readouterr().out
    # Already finished: nothing to resume, refused with exit 1 (not a usage error).
    assert main(["--quiet", "resume", str(log), "--tools", "backoffice,calculator,shaping"]) == 1
    assert "already finished" in capsys.readouterr().err


def test_the_forked_child_behaves_like_a_fresh_python_process(tmp_path: Path) -> None:
    """The crash tests start their child with `run_python` (a fork of a process with pte
    imported): the same exit status, signal, argv, environment and output as `python -c`."""
    code = textwrap.dedent(
        """
        import os, signal, sys
        print("out", sys.argv, os.environ.get("PTE_PROBE"), os.environ.get("HOME"), os.getcwd())
        print("err", file=sys.stderr)
        if sys.argv[1] == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if sys.argv[1] == "raise":
            raise ValueError("boom")
        sys.exit(int(sys.argv[2]))
        """
    )
    # The job's environment, not the server's: HOME (which the server has) is unset here.
    env = {k: v for k, v in os.environ.items() if k != "HOME"} | {"PTE_PROBE": "probe"}
    for argv in (["exit", "0"], ["exit", "3"], ["kill", "0"], ["raise", "0"]):
        fresh = subprocess.run(
            [sys.executable, "-c", code, *argv], env=env, cwd=tmp_path, capture_output=True, timeout=60
        )
        forked = run_python(code, *argv, env=env, timeout=60, warm=PACKS, cwd=tmp_path)
        assert forked.returncode == fresh.returncode, argv
        assert forked.stdout == fresh.stdout == f"out {['-c', *argv]} probe None {tmp_path}\n".encode(), argv
        assert forked.stderr.splitlines()[0] == fresh.stderr.splitlines()[0] == b"err", argv
        assert forked.stderr.splitlines()[-1] == fresh.stderr.splitlines()[-1], argv
    assert [forked.returncode, fresh.returncode] == [1, 1]  # the last: an uncaught exception
    with pytest.raises(subprocess.TimeoutExpired):
        run_python("import time; time.sleep(30)", env=env, timeout=0.5)
