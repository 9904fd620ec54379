"""Safe by default (#33): a command that can call a write does so only under a deployment whose
key this machine holds; without one it says how to make one (`pte init`), exit 2, nothing
appended. Read-only work keeps working with flags alone."""

from __future__ import annotations

import json
import shlex
import shutil
import sqlite3
from pathlib import Path

import pytest

from tests._cli_run import approver_keys, cli, ledger, make_deployment

__all__ = ["ledger"]  # the fixture, used by name

SAMPLES = Path(__file__).resolve().parents[2] / "audit_samples"

PAY = """{"pte_plan": "1", "steps": [
 {"id": "sup", "tool": "get_supplier", "args": {"supplier_id": "S001"}},
 {"id": "pay", "tool": "send_payment", "args": {"iban": {"$ref": "sup/iban"}, "amount": "120.00",
  "currency": "EUR", "reference": "Invoice 7"}}
], "result": {"$ref": "pay/payment_id"}}"""
READ = """{"pte_plan": "1", "steps": [
 {"id": "sup", "tool": "get_supplier", "args": {"supplier_id": "S001"}}
], "result": {"$ref": "sup/iban"}}"""


def _payments(ledger: Path) -> int:
    with sqlite3.connect(ledger) as conn:
        return int(conn.execute("SELECT count(*) FROM payments_out").fetchone()[0])


@pytest.fixture(autouse=True)
def _no_deployment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("PTE_DEPLOYMENT", "PTE_STORE", "PTE_DEPLOYMENT_KEY_FILE"):
        monkeypatch.delenv(name, raising=False)


def test_the_flag_only_repro_cannot_run_a_write_without_a_deployment(
    tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The red team's exact commands with no deployment: a flag given to one command and not
    the next was the bug, so a write is refused until a deployment names keys for every command."""
    _, public = approver_keys(tmp_path)
    (tmp_path / "pay.json").write_text(PAY, encoding="utf-8")
    url = f"sqlite:{tmp_path / 'runs.db'}"
    code, out, err = cli(
        capsys, "execute", "pay.json", "--tools", "backoffice", "--approval-keys", str(public),
        "--store", url, "--run-id", "r1",
    )  # fmt: skip
    assert code == 2, out + err
    assert "send_payment" in err
    assert _init_hint(err) == [
        "init",
        "--tools",
        "backoffice",
        "--approval-keys",
        str(public),
        "--store",
        url,
    ]
    assert not (tmp_path / "runs.db").exists() and _payments(ledger) == 0
    # The variable that named the keys is refused the same way.
    monkeypatch.setenv("PTE_APPROVAL_PUBLIC_KEYS_FILE", str(public))
    code, out, err = cli(capsys, "execute", "pay.json", "--tools", "backoffice", "--audit", "a.jsonl")
    assert code == 2 and _init_hint(err) == ["init", "--tools", "backoffice", "--approval-keys", str(public)]
    assert not (tmp_path / "a.jsonl").exists() and _payments(ledger) == 0


def test_a_plan_of_reads_still_runs_with_flags_alone(
    tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "read.json").write_text(READ, encoding="utf-8")
    code, out, err = cli(capsys, "execute", "read.json", "--tools", "backoffice", "--audit", "a.jsonl")
    assert code == 0 and "DE" in out, err


def _init_hint(err: str) -> list[str]:
    """The `pte init` a refusal prints: the end of its message, a command that runs as printed."""
    assert "no_deployment:" in err and "Nothing was run" in err, err
    line = next(line for line in err.splitlines() if "no_deployment:" in line)
    command = line[line.index("run this command again: ") + len("run this command again: ") :]
    words = shlex.split(command)
    assert words[:2] == ["pte", "init"], command
    return words[1:]


def test_without_a_deployment_a_write_is_refused_with_the_init_that_makes_one(
    tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Safe by default: a write under flags alone is refused (exit 2, no log, nothing paid),
    naming the `pte init` that makes the deployment; run as printed, the same command then runs
    under it, and a plan approved before it (under no deployment) does not count there."""
    (tmp_path / "pay.json").write_text(PAY, encoding="utf-8")
    code, _, err = cli(capsys, "approve", "pay.json", "--by", "alice", "--tools", "backoffice")
    assert code == 0, err
    command = ("execute", "pay.json", "--tools", "backoffice", "--audit", "a.jsonl")
    code, out, err = cli(capsys, *command)
    assert code == 2 and "send_payment" in err, out + err
    assert not (tmp_path / "a.jsonl").exists() and _payments(ledger) == 0
    init = _init_hint(err)
    assert init == ["init", "--tools", "backoffice"]
    code, out, err = cli(capsys, *init)
    assert code == 0, out + err
    # The same command again, as it was: under the deployment now. Its approval store is the
    # deployment's, so the approval given under flags alone does not count: refused, not paid.
    code, out, err = cli(capsys, *command)
    assert code == 1 and "approval_missing" in out + err, out + err
    assert _payments(ledger) == 0
    assert cli(capsys, "approve", "pay.json", "--by", "alice")[0] == 0
    code, out, err = cli(capsys, "execute", "pay.json", "--tools", "backoffice", "--audit", "b.jsonl")
    assert code == 0, out + err
    assert _payments(ledger) == 1


def test_the_init_hint_carries_the_authority_the_command_was_given(
    tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its policy, procedures and store go into the deployment, so the same command (which
    repeats the deployment's own values) runs again unchanged under it."""
    (tmp_path / "pay.json").write_text(PAY, encoding="utf-8")
    (tmp_path / "procedures").mkdir()
    (tmp_path / "policy.json").write_text(json.dumps({"pte_policy": "1", "tools": {}}), encoding="utf-8")
    command = (
        "execute", "pay.json", "--tools", "backoffice", "--policy", "policy.json",
        "--procedures", "procedures", "--store", "sqlite:my runs.db", "--run-id", "r1",
    )  # fmt: skip
    code, out, err = cli(capsys, *command)
    assert code == 2, out + err
    assert not (tmp_path / "my runs.db").exists() and _payments(ledger) == 0
    init = _init_hint(err)
    assert init == [
        "init", "--tools", "backoffice", "--policy", "policy.json", "--procedures", "procedures",
        "--store", "sqlite:my runs.db",
    ]  # fmt: skip
    assert cli(capsys, *init)[0] == 0
    code, out, err = cli(capsys, *command)
    assert code == 0 and "awaiting_approval" in out, out + err  # paused in the deployment's store
    assert (tmp_path / "my runs.db").exists() and _payments(ledger) == 0


def test_run_with_a_write_in_its_allow_list_is_refused_without_a_deployment(
    tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`pte run`: the planner may call any tool it is shown, so a write in the allow-list counts."""
    (tmp_path / "answers.json").write_text(json.dumps([READ, "done"]), encoding="utf-8")
    command = ("run", "the IBAN of S001", "--tools", "backoffice", "--replay-responses", "answers.json")
    code, out, err = cli(capsys, *command, "--audit", "a.jsonl")
    assert code == 2 and "no_deployment" in err and "(its allow-list)" in err, out + err
    assert not (tmp_path / "a.jsonl").exists()
    # Narrowed to reads, the same request runs with flags alone.
    code, out, err = cli(capsys, *command, "--allow", "get_supplier", "--audit", "b.jsonl")
    assert code == 0, out + err


def test_resuming_a_log_with_a_write_is_refused_without_a_deployment(
    tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A crashed run's log (recorded before runs were bound to a deployment) that calls writes:
    no resume under flags alone; under the deployment the hint makes, it is refused as never
    anchored (started without the deployment's key), so it is started again, never continued."""
    crashed = tmp_path / "crashed.jsonl"
    shutil.copyfile(SAMPLES / "crashed_mid_run.jsonl", crashed)
    before = crashed.read_bytes()
    command = ("resume", "crashed.jsonl", "--tools", "backoffice,calculator,shaping")
    code, out, err = cli(capsys, *command)
    assert code == 2 and "send_reminders" in err, out + err
    assert crashed.read_bytes() == before
    assert cli(capsys, *_init_hint(err))[0] == 0
    code, out, err = cli(capsys, *command)
    assert code == 1 and "never anchored" in err and "start it again" in err, out + err
    assert crashed.read_bytes() == before


def test_approving_a_stored_run_then_resuming_it_is_refused_without_a_deployment(
    tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run paused in a store by a library caller (no deployment): `pte approve` records the
    decision (no write runs) and says the run cannot continue without a deployment, printing the
    `pte init` that makes one; under it, resume refuses the run (never anchored): nothing paid."""
    from pte import Engine, load_registry
    from pte.deployment import PausedRun, pausing_gate, run_in_store
    from pte.stores import open_store

    url = f"sqlite:{tmp_path / 'runs.db'}"
    registry = load_registry(["backoffice"])
    with open_store(url) as store:
        paused = run_in_store(
            Engine(registry, approval=pausing_gate(store, registry)), store, run_id="r1", plan_text=PAY
        )
    assert isinstance(paused, PausedRun)
    code, out, err = cli(capsys, "approve", "r1", "--by", "alice", "--store", url, "--tools", "backoffice")
    assert code == 0, out + err
    assert "pte resume" not in out  # it would only be refused (no_deployment)
    line = next(line for line in out.splitlines() if "started without a deployment" in line)
    init = shlex.split(line[line.index("made with: ") + len("made with: ") :])
    assert init == ["pte", "init", "--tools", "backoffice", "--store", url]
    code, out, err = cli(capsys, "resume", "r1", "--store", url, "--tools", "backoffice")
    assert code == 2 and "no_deployment" in err and "send_payment" in err, out + err
    assert cli(capsys, *init[1:])[0] == 0
    code, out, err = cli(capsys, "resume", "r1")  # under the deployment it printed: never anchored
    assert code == 1 and "never anchored" in err, out + err
    with open_store(url) as store:
        info = store.run("r1")
        assert info is not None and info.status == "awaiting_approval"
    assert _payments(ledger) == 0


def test_endorsements_by_flag_need_a_deployment(
    tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # private: the demo's scenario
    from pte._cli import BILL_PAYMENT

    (tmp_path / "bill.json").write_text(BILL_PAYMENT, encoding="utf-8")
    code, _, err = cli(
        capsys,
        "execute",
        "bill.json",
        "--tools",
        "backoffice",
        "--endorsements",
        "e.jsonl",
        "--audit",
        "a.jsonl",
    )
    assert code == 2 and _init_hint(err) == ["init", "--tools", "backoffice", "--endorsements", "e.jsonl"]
    assert not (tmp_path / "a.jsonl").exists()


def test_resuming_a_write_needs_the_deployment_it_started_under(
    tmp_path: Path, ledger: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    make_deployment(tmp_path, monkeypatch, capsys, "--tools", "backoffice")
    (tmp_path / "pay.json").write_text(PAY, encoding="utf-8")
    assert cli(capsys, "execute", "pay.json", "--run-id", "r1")[0] == 0  # paused for approval
    store = f"sqlite:{tmp_path / 'deployment' / 'runs.db'}"
    monkeypatch.delenv("PTE_DEPLOYMENT")
    code, out, err = cli(capsys, "resume", "r1", "--store", store, "--tools", "backoffice")
    assert code == 2 and "continue it under that deployment" in err, out + err


def test_a_machine_without_the_deployment_key_runs_no_write(
    tmp_path: Path, ledger: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    where = make_deployment(tmp_path, monkeypatch, capsys, "--tools", "backoffice")
    (where / "deployment.key").unlink()  # a verifier's copy: the public key only
    (tmp_path / "pay.json").write_text(PAY, encoding="utf-8")
    code, out, err = cli(capsys, "execute", "pay.json", "--audit", "a.jsonl")
    assert code == 2 and "does not hold the deployment's key" in err, out + err
    assert not (tmp_path / "a.jsonl").exists()
    (tmp_path / "read.json").write_text(READ, encoding="utf-8")
    assert cli(capsys, "validate", "read.json")[0] == 0


def test_pte_plan_of_a_write_without_a_deployment_prints_the_init_first_and_every_hint_runs(
    tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`pte plan` under flags alone, of a plan that writes: its hints are the `pte init`, then the
    approve and execute under that deployment (an approval given before it would not count
    there). Followed as printed, in order, the plan pays once."""
    (tmp_path / "resp.json").write_text(json.dumps([PAY]), encoding="utf-8")
    code, out, err = cli(
        capsys, "plan", "pay a supplier", "--tools", "backoffice", "-o", "plan.json",
        "--replay-responses", "resp.json",
    )  # fmt: skip
    assert code == 0, out + err
    hints = {}
    for line in out.splitlines():
        for label in ("make one first: ", "needs approval): ", "execute it: "):
            if label in line:
                hints[label] = shlex.split(line[line.index(label) + len(label) :])
    assert hints["make one first: "] == ["pte", "init", "--tools", "backoffice"]
    assert "--tools" not in hints["needs approval): "] and "--tools" not in hints["execute it: "]
    for label in ("make one first: ", "needs approval): ", "execute it: "):
        code, out, err = cli(capsys, *hints[label][1:])
        assert code == 0, (label, out + err)
    assert _payments(ledger) == 1
