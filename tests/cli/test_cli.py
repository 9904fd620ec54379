"""The `pte` command line, command by command: output and exit codes.

Exit codes are part of the CLI's contract: 0 ok, 1 rejected or failed closed, 2 usage error
(a missing file, a bad flag, a tool pack that cannot be loaded). Most tests call
`pte._cli._main.main` in-process (with ``--quiet``: the engine's logs are tested on their own);
a few run ``python -m pte._cli._main`` as a real subprocess to prove the entry point and the
split of logs (stderr) and results (stdout).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pte import __version__, verify

# private: the demo's scenarios
from pte._cli import SCENARIOS
from pte.audit import canonical_json, read_records
from pte.cli import main
from pte.runs import replay_file
from pte.testing import FakeOpenAIServer
from tests._cli_run import cli, make_deployment

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "audit_samples"
STOCK = "backoffice,calculator,shaping"

CALC_PLAN = {
    "pte_plan": "1",
    "steps": [{"id": "a", "tool": "calculator", "args": {"expression": "1 + 2"}}],
    "result": {"$ref": "a/value"},
}
# An integer where the calculator wants an expression string.
BAD_CALC_PLAN = {"pte_plan": "1", "steps": [{"id": "a", "tool": "calculator", "args": {"expression": 1}}]}
# A shaping tool: not in a registry narrowed to the calculator.
PICK_PLAN = {
    "pte_plan": "1",
    "steps": [{"id": "p", "tool": "pick", "args": {"records": [{"a": 1, "b": 2}], "fields": ["a"]}}],
}
BALANCE_PLAN = {
    "pte_plan": "1",
    "steps": [
        {"id": "a", "tool": "customer_balance", "args": {"customer_id": "C002"}},
        {
            "id": "t",
            "tool": "calculator",
            "args": {"expression": "x * 2", "variables": {"x": {"$ref": "a/open_total"}}},
        },
    ],
    "result": {"$ref": "t/value"},
}
# get_invoice of an invoice that does not exist: the step fails at run time.
FAILING_PLAN = {
    "pte_plan": "1",
    "steps": [{"id": "inv", "tool": "get_invoice", "args": {"invoice_id": "INV-9999"}}],
    "result": {"$ref": "inv/outstanding"},
}
# The IBAN comes from a trusted tool (the supplier master data): fine by the default policy.
PAYMENT_PLAN = {
    "pte_plan": "1",
    "steps": [
        {"id": "sup", "tool": "get_supplier", "args": {"supplier_id": "S003"}},
        {
            "id": "pay",
            "tool": "send_payment",
            "args": {
                "iban": {"$ref": "sup/iban"},
                "amount": "1240.00",
                "currency": "EUR",
                "reference": "DPM-7781",
            },
        },
    ],
    "result": {"$ref": "pay/payment_id"},
}


# --- helpers --------------------------------------------------------------------------------


def write_json(path: Path, value: Any) -> Path:
    """Write `value` as JSON to `path` and return the path."""
    path.write_text(json.dumps(value, indent=1), encoding="utf-8")
    return path


def record_types(path: Path) -> list[str]:
    """The record types of an audit log, in order."""
    return [r["type"] for r in read_records(path)]


def scenario(name: str) -> Any:
    """A demo scenario by name (its recorded LLM answers are reused here)."""
    return next(s for s in SCENARIOS if s.name == name)


def subprocess_env(**extra: str) -> dict[str, str]:
    """The environment for `python -m pte._cli._main` run from any directory."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PTE_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env.update(extra)
    return env


def run_stock(
    capsys: pytest.CaptureFixture[str], request: str, log: Path, *options: str
) -> tuple[int, str, str]:
    """`pte run REQUEST --tools STOCK --audit LOG OPTIONS…`."""
    return cli(capsys, "run", request, "--tools", STOCK, "--audit", str(log), *options)


def plan_stock(
    capsys: pytest.CaptureFixture[str], request: str, out_file: Path, *options: str
) -> tuple[int, str, str]:
    """`pte plan REQUEST --tools STOCK -o OUT_FILE OPTIONS…`."""
    return cli(capsys, "plan", request, "--tools", STOCK, "-o", str(out_file), *options)


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test works in its own directory (default stores such as pte_approvals.jsonl land there)."""
    monkeypatch.chdir(tmp_path)
    for name in ("PTE_LEDGER", "PTE_APPROVAL_KEY", "OPENAI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def ledger(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Iterator[Path]:
    """A fresh sample ledger made with `pte ledger init`, in use through PTE_LEDGER."""
    path = tmp_path / "ledger.sqlite"
    code, out, _ = cli(capsys, "ledger", "init", "--path", str(path))
    assert code == 0, out
    monkeypatch.setenv("PTE_LEDGER", str(path))
    yield path


@pytest.fixture
def stock_deployment(
    tmp_path: Path, ledger: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Path:
    """A deployment of the STOCK tools without a run store, in use through PTE_DEPLOYMENT (the
    tools write, and a write runs only under a deployment); its folder."""
    return make_deployment(tmp_path, monkeypatch, capsys, "--tools", STOCK, "--no-store")


# --- pte --version, pte schema ----------------------------------------------------------------


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "--version")
    assert code == 0
    assert out.strip() == f"pte {__version__}"


@pytest.mark.parametrize("which", ["plan", "audit", "manifest", "policy"])
def test_schema_prints_each_schema(capsys: pytest.CaptureFixture[str], which: str) -> None:
    code, out, _ = cli(capsys, "schema", which)
    assert code == 0
    schema = json.loads(out)
    assert schema["$id"].startswith("https://")
    assert "$schema" in schema


def test_schema_default_is_the_plan_schema(capsys: pytest.CaptureFixture[str]) -> None:
    _, default, _ = cli(capsys, "schema")
    _, plan, _ = cli(capsys, "schema", "plan")
    assert json.loads(default) == json.loads(plan)


def test_schema_unknown_name_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(capsys, "schema", "nonsense")
    assert code == 2
    assert "invalid choice" in err


# --- pte validate ----------------------------------------------------------------------------


def test_validate_accepts_and_prints_the_hash(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = write_json(tmp_path / "plan.json", CALC_PLAN)
    code, text, _ = cli(capsys, "validate", str(plan), "--tools", "calculator")
    assert code == 0
    assert text.startswith("accepted: 1 step(s), plan hash ")
    code, out, _ = cli(capsys, "validate", str(plan), "--tools", "calculator", "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["status"] == "accepted"
    assert len(doc["plan_hash"]) == 64
    assert f"plan hash {doc['plan_hash']}" in text
    assert doc["order"] == ["a"]


def test_validate_hash_is_stable_across_formatting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    compact = tmp_path / "compact.json"
    compact.write_text(json.dumps(CALC_PLAN, separators=(",", ":")), encoding="utf-8")
    pretty = write_json(tmp_path / "pretty.json", CALC_PLAN)
    hashes = set()
    for path in (compact, pretty):
        code, out, _ = cli(capsys, "validate", str(path), "--tools", "calculator", "--json")
        assert code == 0
        hashes.add(json.loads(out)["plan_hash"])
    assert len(hashes) == 1


def test_validate_rejects_with_reason_message_and_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = write_json(tmp_path / "bad.json", BAD_CALC_PLAN)
    code, out, _ = cli(capsys, "validate", str(plan), "--tools", "calculator", "--json")
    assert code == 1
    doc = json.loads(out)
    assert doc["status"] == "rejected"
    assert doc["reason"] == "invalid_args"
    assert doc["path"] == "$.steps[0].args.expression"
    assert "string" in doc["message"]
    code, out, _ = cli(capsys, "validate", str(plan), "--tools", "calculator")
    assert code == 1
    assert out.startswith("rejected: invalid_args at $.steps[0].args.expression")


def test_validate_rejects_invalid_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = tmp_path / "prose.json"
    plan.write_text("Sure! First I would add the numbers.", encoding="utf-8")
    code, out, _ = cli(capsys, "validate", str(plan), "--tools", "calculator", "--json")
    assert code == 1
    assert json.loads(out)["reason"] == "invalid_json"


def test_validate_missing_plan_file_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, "validate", "no-such-plan.json", "--tools", "calculator")
    assert code == 2
    assert out == ""
    assert "no-such-plan.json" in err and "does not exist" in err


def test_validate_unknown_pack_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = write_json(tmp_path / "plan.json", CALC_PLAN)
    code, _, err = cli(capsys, "validate", str(plan), "--tools", "no_such_pack_xyz")
    assert code == 2
    assert "no_such_pack_xyz" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["validate", "PLAN", "--tools", "calculator", "--no-such-flag"],
        ["validate", "PLAN"],  # --tools is required
        ["validate"],  # the plan file is required
        ["no-such-command"],
        [],
    ],
    ids=["unknown-flag", "no-tools", "no-plan", "unknown-command", "no-command"],
)
def test_bad_invocations_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    plan = write_json(tmp_path / "plan.json", CALC_PLAN)
    code, out, err = cli(capsys, *(str(plan) if a == "PLAN" else a for a in argv))
    assert code == 2
    assert out == ""
    assert "usage: pte" in err


def test_allow_narrows_the_allow_list(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = write_json(tmp_path / "pick.json", PICK_PLAN)
    code, _, _ = cli(capsys, "validate", str(plan), "--tools", "calculator,shaping")
    assert code == 0
    code, out, _ = cli(
        capsys, "validate", str(plan), "--tools", "calculator,shaping", "--allow", "calculator", "--json"
    )
    assert code == 1
    doc = json.loads(out)
    assert doc["reason"] == "tool_not_allowed"
    assert doc["path"] == "$.steps[0].tool"
    assert "pick" in doc["message"]


def test_allow_naming_an_unknown_tool_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = write_json(tmp_path / "plan.json", CALC_PLAN)
    code, _, err = cli(capsys, "validate", str(plan), "--tools", "calculator", "--allow", "no_such_tool")
    assert code == 2
    assert "no_such_tool" in err


def test_manifest_narrows_the_allow_list(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = write_json(tmp_path / "pick.json", PICK_PLAN)
    allow = write_json(tmp_path / "allow.json", {"allow": ["calculator"]})
    deny = write_json(tmp_path / "deny.json", {"deny": ["pick"]})
    for manifest in (allow, deny):
        code, out, _ = cli(
            capsys,
            "validate",
            str(plan),
            "--tools",
            "calculator,shaping",
            "--manifest",
            str(manifest),
            "--json",
        )
        assert code == 1, manifest.name
        assert json.loads(out)["reason"] == "tool_not_allowed"
    code, _, _ = cli(
        capsys,
        "validate",
        str(write_json(tmp_path / "c.json", CALC_PLAN)),
        "--tools",
        "calculator,shaping",
        "--manifest",
        str(allow),
    )
    assert code == 0


def test_invalid_or_missing_manifest_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = write_json(tmp_path / "plan.json", CALC_PLAN)
    bad = write_json(tmp_path / "bad-manifest.json", {"allow": "calculator"})
    for manifest in (str(bad), str(tmp_path / "missing-manifest.json")):
        code, _, err = cli(capsys, "validate", str(plan), "--tools", "calculator", "--manifest", manifest)
        assert code == 2
        assert "manifest" in err


def test_policy_file_makes_a_tool_untrusted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = write_json(tmp_path / "pay.json", PAYMENT_PLAN)
    # By the tools' own declarations the supplier master data is trusted: the plan compiles.
    code, _, _ = cli(capsys, "validate", str(plan), "--tools", STOCK)
    assert code == 0
    policy = write_json(
        tmp_path / "policy.json",
        {
            "pte_policy": "1",
            "description": "compliance: supplier master data is editable by suppliers",
            "tools": {"get_supplier": {"output": "untrusted"}},
        },
    )
    code, out, _ = cli(capsys, "validate", str(plan), "--tools", STOCK, "--policy", str(policy), "--json")
    assert code == 1
    doc = json.loads(out)
    assert doc["reason"] == "policy_violation"
    assert doc["path"] == "$.steps[1].args.iban"
    # The whole flow is named: sink <- reference <- source tool.
    assert (
        "send_payment.iban" in doc["message"]
        and "sup/iban" in doc["message"]
        and "get_supplier" in doc["message"]
    )


def test_bad_policy_file_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = write_json(tmp_path / "plan.json", CALC_PLAN)
    broken = tmp_path / "broken.json"
    broken.write_text("{not json", encoding="utf-8")
    unknown = write_json(
        tmp_path / "unknown.json", {"pte_policy": "1", "tools": {"no_such_tool": {"output": "trusted"}}}
    )
    for policy in (broken, unknown, tmp_path / "missing.json"):
        code, out, err = cli(capsys, "validate", str(plan), "--tools", "calculator", "--policy", str(policy))
        assert code == 2, policy.name
        assert out == ""
        assert "policy" in err


# --- pte ledger init -------------------------------------------------------------------------


def test_ledger_init_creates_and_refuses_to_overwrite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "l.sqlite"
    code, out, _ = cli(capsys, "ledger", "init", "--path", str(path))
    assert code == 0
    assert path.is_file() and str(path) in out
    before = path.stat().st_mtime_ns
    code, _, err = cli(capsys, "ledger", "init", "--path", str(path))
    assert code == 2
    assert "--force" in err
    assert path.stat().st_mtime_ns == before
    code, _, _ = cli(capsys, "ledger", "init", "--path", str(path), "--force")
    assert code == 0


def test_ledger_init_defaults_to_pte_ledger_env(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PTE_LEDGER", str(tmp_path / "from-env.sqlite"))
    code, _, _ = cli(capsys, "ledger", "init")
    assert code == 0
    assert (tmp_path / "from-env.sqlite").is_file()


# --- pte execute -----------------------------------------------------------------------------


def test_execute_succeeds_and_the_log_verifies(
    tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = write_json(tmp_path / "plan.json", BALANCE_PLAN)
    log = tmp_path / "audit.jsonl"
    code, out, _ = cli(capsys, "execute", str(plan), "--tools", STOCK, "--audit", str(log), "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["status"] == "succeeded" and doc["reason"] is None
    assert doc["result"] == "89148.78"  # 2 x C002's open balance (44574.39)
    assert doc["llm_calls"] == 0
    assert [s["id"] for s in doc["steps"]] == ["a", "t"]
    assert doc["audit"] == str(log)
    assert verify(log).ok
    assert record_types(log) == [
        "run_started",
        "plan_accepted",
        "step_started",
        "step_finished",
        "step_started",
        "step_finished",
        "run_finished",
    ]
    assert replay_file(log).ok
    # Without --json: the answer, then a summary naming the log.
    code, out, _ = cli(capsys, "execute", str(plan), "--tools", STOCK, "--audit", str(tmp_path / "b.jsonl"))
    assert code == 0
    assert out.splitlines()[0] == "89148.78"
    assert "succeeded: 2 step(s)" in out


def test_execute_appends_runs_to_the_same_log(
    tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = write_json(tmp_path / "plan.json", BALANCE_PLAN)
    log = tmp_path / "audit.jsonl"
    for _ in range(2):
        code, _, _ = cli(capsys, "execute", str(plan), "--tools", STOCK, "--audit", str(log))
        assert code == 0
    report = verify(log)
    assert report.ok and report.runs == 2


def test_execute_failing_step_fails_closed(
    tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = write_json(tmp_path / "fail.json", FAILING_PLAN)
    log = tmp_path / "audit.jsonl"
    code, out, _ = cli(capsys, "execute", str(plan), "--tools", STOCK, "--audit", str(log), "--json")
    assert code == 1
    doc = json.loads(out)
    assert doc["status"] == "failed_closed"
    assert doc["reason"] == "step_failed"
    assert "INV-9999" in doc["message"]
    assert doc["steps"][0]["status"] == "failed"
    assert verify(log).ok
    finished = read_records(log)[-1]
    assert finished["type"] == "run_finished" and finished["reason"] == "step_failed"
    # Without --json the reason goes to stderr.
    code, _, err = cli(capsys, "execute", str(plan), "--tools", STOCK, "--audit", str(tmp_path / "b.jsonl"))
    assert code == 1
    assert err.startswith("failed_closed(step_failed):")


def test_quiet_after_a_logging_run_in_the_same_process_logs_nothing(
    tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`main` without --quiet configures logging; a later `main("--quiet", ...)` undoes it."""
    plan = write_json(tmp_path / "fail.json", FAILING_PLAN)
    first = ["execute", str(plan), "--tools", STOCK, "--audit", str(tmp_path / "a.jsonl")]
    assert main(["--log-format", "json", *first]) == 1
    logged = capsys.readouterr().err
    assert '"event"' in logged and "get_invoice" in logged  # the engine's log lines
    code, _, err = cli(capsys, "execute", str(plan), "--tools", STOCK, "--audit", str(tmp_path / "b.jsonl"))
    assert code == 1
    assert err.startswith("failed_closed(step_failed):"), err


def test_execute_rejected_plan_is_logged_and_sealed(
    tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = write_json(tmp_path / "bad.json", BAD_CALC_PLAN)
    log = tmp_path / "audit.jsonl"
    code, out, _ = cli(capsys, "execute", str(plan), "--tools", STOCK, "--audit", str(log), "--json")
    assert code == 1
    doc = json.loads(out)
    assert doc["reason"] == "invalid_args"
    assert doc["steps"] == []
    assert record_types(log) == ["run_started", "plan_rejected", "run_finished"]
    rejected = read_records(log)[1]
    assert rejected["reason"] == "invalid_args" and rejected["path"] == "$.steps[0].args.expression"
    assert verify(log).ok
    assert replay_file(log).ok


def test_execute_usage_errors(tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = write_json(tmp_path / "plan.json", BALANCE_PLAN)
    # No --audit: the audit log is not optional.
    code, _, err = cli(capsys, "execute", str(plan), "--tools", STOCK)
    assert code == 2 and "--audit" in err
    # A log in a directory that does not exist.
    code, _, err = cli(
        capsys, "execute", str(plan), "--tools", STOCK, "--audit", str(tmp_path / "nope" / "a.jsonl")
    )
    assert code == 2 and "does not exist" in err
    # A missing plan file: nothing is written.
    log = tmp_path / "audit.jsonl"
    code, _, _ = cli(capsys, "execute", str(tmp_path / "missing.json"), "--tools", STOCK, "--audit", str(log))
    assert code == 2
    assert not log.exists()


def test_execute_refuses_a_log_with_a_partial_tail(
    tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = write_json(tmp_path / "plan.json", BALANCE_PLAN)
    log = tmp_path / "audit.jsonl"
    assert cli(capsys, "execute", str(plan), "--tools", STOCK, "--audit", str(log))[0] == 0
    with log.open("ab") as fh:
        fh.write(b'{"seq": 7, "trunc')
    code, _, err = cli(capsys, "execute", str(plan), "--tools", STOCK, "--audit", str(log))
    assert code == 2
    assert "partial" in err


# --- pte audit verify / show -----------------------------------------------------------------


@pytest.fixture
def good_log(tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """A sealed, verified log of one successful execute run (7 records)."""
    plan = write_json(tmp_path / "plan.json", BALANCE_PLAN)
    log = tmp_path / "good.jsonl"
    assert cli(capsys, "execute", str(plan), "--tools", STOCK, "--audit", str(log))[0] == 0
    return log


def test_audit_verify_ok(good_log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "audit", "verify", str(good_log))
    assert code == 0
    assert out.startswith("ok: 7 record(s), 1 run(s)")
    code, out, _ = cli(capsys, "audit", "verify", str(good_log), "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["status"] == "ok" and doc["ok"] is True
    assert doc["records"] == 7 and doc["issue"] is None
    assert doc["last_hash"] == read_records(good_log)[-1]["hash"]


def test_audit_verify_tampered_names_the_line(
    tmp_path: Path, good_log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = good_log.read_text(encoding="utf-8").splitlines(keepends=True)
    # Line 3 is step_started of C002's balance: change the customer, keep the line canonical,
    # so only the hash can tell.
    record = json.loads(lines[2])
    assert record["type"] == "step_started"
    record["args"]["customer_id"] = "C003"
    lines[2] = canonical_json(record) + "\n"
    tampered = tmp_path / "tampered.jsonl"
    tampered.write_text("".join(lines), encoding="utf-8")
    code, out, _ = cli(capsys, "audit", "verify", str(tampered))
    assert code == 1
    assert out.startswith("FAILED: line 3 (seq 2): hash mismatch")
    code, out, _ = cli(capsys, "audit", "verify", str(tampered), "--json")
    assert code == 1
    doc = json.loads(out)
    assert doc["status"] == "tampered"
    assert doc["intact"] is False
    assert doc["issue"]["line"] == 3
    assert doc["records"] == 2


def test_audit_verify_deleted_record(
    tmp_path: Path, good_log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = good_log.read_text(encoding="utf-8").splitlines(keepends=True)
    cut = tmp_path / "cut.jsonl"
    cut.write_text("".join(lines[:3] + lines[4:]), encoding="utf-8")
    code, out, _ = cli(capsys, "audit", "verify", str(cut))
    assert code == 1
    assert out.startswith("FAILED: line 4")


def test_audit_verify_incomplete(tmp_path: Path, good_log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = good_log.read_text(encoding="utf-8").splitlines(keepends=True)
    cut = tmp_path / "cut.jsonl"
    cut.write_text("".join(lines[:4]), encoding="utf-8")  # no run_finished: intact, not sealed
    code, out, _ = cli(capsys, "audit", "verify", str(cut))
    assert code == 1
    assert out.startswith("incomplete:")
    assert "run_finished" in out
    code, out, _ = cli(capsys, "audit", "verify", str(cut), "--json")
    assert code == 1
    doc = json.loads(out)
    assert doc["status"] == "incomplete"
    assert doc["intact"] is True and doc["complete"] is False


def test_audit_verify_crashed_sample_is_incomplete(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "audit", "verify", str(SAMPLES / "crashed_mid_run.jsonl"), "--json")
    assert code == 1
    assert json.loads(out)["status"] == "incomplete"


def test_audit_verify_and_show_missing_log(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for action in ("verify", "show"):
        code, out, err = cli(capsys, "audit", action, str(tmp_path / "missing.jsonl"))
        assert code == 2, action
        assert out == ""
        assert "does not exist" in err


def test_audit_show_prints_one_line_per_record(good_log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    records = read_records(good_log)
    code, out, _ = cli(capsys, "audit", "show", str(good_log))
    assert code == 0
    lines = out.splitlines()
    # One line per record, then the run's steps summary (tests/replay/test_audit_show_steps.py).
    assert lines[len(records)].startswith("steps of run ")
    for line, record in zip(lines[: len(records)], records, strict=True):
        assert line.split()[0] == str(record["seq"])
        assert record["type"] in line
    assert "customer_balance" in lines[2]


@pytest.mark.parametrize("sample", sorted(p.name for p in SAMPLES.glob("*.jsonl")))
def test_audit_show_every_sample(sample: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "audit", "show", str(SAMPLES / sample))
    assert code == 0
    records = read_records(SAMPLES / sample)
    lines = out.splitlines()
    runs = [r for r in records if r.get("type") == "run_started"]
    # One line per record, and a steps summary per run.
    assert sum(1 for line in lines if line.startswith("steps of run ")) == len(runs)
    assert [line.split()[0] for line in lines if line[:6].strip().isdigit()] == [
        str(r["seq"]) for r in records
    ]


def test_audit_show_unparsable_log(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "junk.jsonl"
    log.write_text("this is not json\n", encoding="utf-8")
    code, _, err = cli(capsys, "audit", "show", str(log))
    assert code == 1
    assert "cannot read" in err


# --- pte approve + pte execute ---------------------------------------------------------------


def test_approve_then_execute_a_payment(
    tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = write_json(tmp_path / "pay.json", PAYMENT_PLAN)
    store = tmp_path / "approvals.jsonl"
    common = ["--tools", STOCK, "--approvals", str(store)]
    make_deployment(tmp_path, monkeypatch, capsys, *common)  # a write runs only under a deployment

    unapproved = tmp_path / "unapproved.jsonl"
    code, out, _ = cli(capsys, "execute", str(plan), *common, "--audit", str(unapproved), "--json")
    assert code == 1
    doc = json.loads(out)
    assert doc["reason"] == "approval_missing"
    assert doc["steps"] == []  # nothing ran, not even the read step
    assert verify(unapproved).ok
    assert "step_started" not in record_types(unapproved)

    code, out, _ = cli(capsys, "approve", str(plan), "--by", "controller@example.com", *common)
    assert code == 0
    assert "approved run" in out and "unsigned" in out
    stored = [json.loads(line) for line in store.read_text(encoding="utf-8").splitlines()]
    assert [a["by"] for a in stored] == ["controller@example.com"]

    approved = tmp_path / "approved.jsonl"
    code, out, _ = cli(capsys, "execute", str(plan), *common, "--audit", str(approved), "--json")
    assert code == 0, out
    doc = json.loads(out)
    assert doc["status"] == "succeeded"
    assert doc["result"] == "PO-0001"
    records = read_records(approved)
    approval = [r for r in records if r["type"] == "approval"]
    assert len(approval) == 1
    assert approval[0]["plan_hash"] == stored[0]["plan_hash"] == doc["plan_hashes"][0]
    assert approval[0]["by"] == "controller@example.com"
    # The approval is recorded before the write step starts.
    types = [r["type"] for r in records]
    assert types.index("approval") < types.index("step_started")
    assert verify(approved).ok
    assert replay_file(approved).ok


def test_approval_covers_only_the_exact_plan(
    tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = write_json(tmp_path / "pay.json", PAYMENT_PLAN)
    store = tmp_path / "approvals.jsonl"
    common = ["--tools", STOCK, "--approvals", str(store)]
    make_deployment(tmp_path, monkeypatch, capsys, *common)
    assert cli(capsys, "approve", str(plan), "--by", "alice", *common)[0] == 0
    changed = json.loads(json.dumps(PAYMENT_PLAN))
    changed["steps"][1]["args"]["amount"] = "12400.00"
    other = write_json(tmp_path / "pay2.json", changed)
    code, out, _ = cli(capsys, "execute", str(other), *common, "--audit", str(tmp_path / "a.jsonl"), "--json")
    assert code == 1
    assert json.loads(out)["reason"] == "approval_missing"


def test_unsigned_approval_does_not_count_with_keys(
    tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = write_json(tmp_path / "pay.json", PAYMENT_PLAN)
    store = tmp_path / "approvals.jsonl"
    private, public = tmp_path / "approver.pem", tmp_path / "approver.pub"
    code, out, _ = cli(capsys, "keys", "generate", "--private", str(private), "--public", str(public))
    assert code == 0 and "Ed25519 approval key" in out
    assert private.stat().st_mode & 0o777 == 0o600
    common = ["--tools", STOCK, "--approvals", str(store)]
    # A deployment without approver keys records an unsigned approval in the store...
    make_deployment(tmp_path, monkeypatch, capsys, *common, folder="without-keys")
    assert cli(capsys, "approve", str(plan), "--by", "alice", *common)[0] == 0  # no key: unsigned

    # ...which does not count under one with keys (same store), nor can one be recorded there.
    trusted = [*common, "--approval-keys", str(public)]
    make_deployment(tmp_path, monkeypatch, capsys, *trusted, folder="with-keys")
    code, _, err = cli(capsys, "approve", str(plan), "--by", "mallory", *common)
    assert code == 2 and "signed by its approver keys" in err
    code, out, _ = cli(capsys, "execute", str(plan), *trusted, "--audit", str(tmp_path / "a.jsonl"), "--json")
    assert code == 1
    doc = json.loads(out)
    assert doc["reason"] == "approval_missing"
    assert "unsigned" in doc["message"]

    code, out, _ = cli(capsys, "approve", str(plan), "--by", "bob", "--signing-key", str(private), *common)
    assert code == 0 and "Ed25519-signed" in out
    make_deployment(tmp_path, monkeypatch, capsys, *trusted, folder="with-keys-2")  # its own anchors
    log = tmp_path / "b.jsonl"
    code, out, _ = cli(capsys, "execute", str(plan), *trusted, "--audit", str(log), "--json")
    assert code == 0, out
    approval = next(r for r in read_records(log) if r["type"] == "approval")
    assert approval["by"] == "bob" and approval["signed"] is True
    assert "PRIVATE KEY" not in log.read_text()

    # Another deployment's key: the signature does not verify under it, so nothing counts.
    other = tmp_path / "other.pub"
    cli(capsys, "keys", "generate", "--private", str(tmp_path / "o.pem"), "--public", str(other))
    make_deployment(tmp_path, monkeypatch, capsys, *common, "--approval-keys", str(other), folder="other")
    code, out, _ = cli(capsys, "execute", str(plan), *common, "--audit", str(tmp_path / "c.jsonl"))
    assert code == 1

    # The old HMAC key variable is refused with a clear message, not ignored.
    monkeypatch.setenv("PTE_APPROVAL_KEY", "test-approval-key")
    code, _, err = cli(capsys, "execute", str(plan), *common, "--audit", str(tmp_path / "d.jsonl"))
    assert code == 2 and "PTE_APPROVAL_KEY (an HMAC key) is no longer supported" in err


def test_approve_a_rejected_plan_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = write_json(tmp_path / "bad.json", BAD_CALC_PLAN)
    store = tmp_path / "approvals.jsonl"
    code, _, err = cli(
        capsys, "approve", str(plan), "--by", "alice", "--tools", "calculator", "--approvals", str(store)
    )
    assert code == 1
    assert "not approved" in err
    assert not store.exists() or store.read_text(encoding="utf-8") == ""


def test_approve_by_defaults_to_the_login_and_refuses_an_empty_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import getpass

    plan = write_json(tmp_path / "pay.json", PAYMENT_PLAN)
    approvals = str(tmp_path / "approvals.jsonl")
    code, _, err = cli(capsys, "approve", str(plan), "--tools", STOCK, "--by", "", "--approvals", approvals)
    assert code == 2
    assert "--by" in err
    code, _, err = cli(capsys, "approve", str(plan), "--tools", STOCK, "--approvals", approvals)
    assert code == 0, err
    assert json.loads(Path(approvals).read_text(encoding="utf-8").splitlines()[0])["by"] == getpass.getuser()


# --- pte run / pte plan ----------------------------------------------------------------------


def test_run_with_replayed_responses(
    tmp_path: Path, stock_deployment: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    three = scenario("three_figures_share")
    responses = write_json(tmp_path / "responses.json", list(three.responses))
    log = tmp_path / "run.jsonl"
    code, out, _ = run_stock(capsys, three.request, log, "--replay-responses", str(responses), "--json")
    assert code == 0, out
    doc = json.loads(out)
    assert doc["status"] == "succeeded"
    assert doc["llm_calls"] == 2
    assert doc["answer"] == three.responses[1]
    assert doc["result"]["total_eur"] == "59093.25"
    assert verify(log).ok
    assert replay_file(log).ok
    started = read_records(log)[0]
    assert started["mode"] == "run" and started["request"] == three.request


def test_run_fails_closed_on_prose(
    tmp_path: Path, stock_deployment: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    responses = write_json(tmp_path / "responses.json", ["I would call the calculator for you."])
    log = tmp_path / "run.jsonl"
    code, out, _ = run_stock(capsys, "add it up", log, "--replay-responses", str(responses), "--json")
    assert code == 1
    assert json.loads(out)["reason"] == "invalid_json"
    assert record_types(log) == ["run_started", "llm_call", "plan_rejected", "run_finished"]
    assert verify(log).ok


@pytest.mark.parametrize("no_repair", [False, True], ids=["repair", "no-repair"])
def test_run_sends_a_fixable_plan_back_once_unless_no_repair(
    tmp_path: Path, stock_deployment: Path, capsys: pytest.CaptureFixture[str], no_repair: bool
) -> None:
    repaired = scenario("repaired_plan")
    responses = write_json(tmp_path / "responses.json", list(repaired.responses))
    log = tmp_path / "run.jsonl"
    no_repair_flag = ["--no-repair"] if no_repair else []
    code, out, _ = run_stock(
        capsys, repaired.request, log, "--replay-responses", str(responses), "--json", *no_repair_flag
    )
    doc = json.loads(out)
    if no_repair:
        assert (code, doc["reason"], doc["llm_calls"]) == (1, "invalid_args", 1)
        assert "repair" not in record_types(log)
    else:
        assert (code, doc["status"], doc["llm_calls"]) == (0, "succeeded", 3)
        assert record_types(log).count("repair") == 1
    assert verify(log).ok and replay_file(log).ok


@pytest.mark.parametrize(
    "content", [None, {"not": "a list"}, "{broken"], ids=["missing", "not-a-list", "not-json"]
)
def test_run_bad_replay_responses_file_is_a_usage_error(
    tmp_path: Path, stock_deployment: Path, capsys: pytest.CaptureFixture[str], content: Any
) -> None:
    responses = tmp_path / "responses.json"
    if isinstance(content, str):
        responses.write_text(content, encoding="utf-8")
    elif content is not None:
        write_json(responses, content)
    code, _, err = run_stock(capsys, "x", tmp_path / "r.jsonl", "--replay-responses", str(responses))
    assert code == 2, err
    assert "responses.json" in err


def test_run_against_a_local_openai_compatible_server(
    tmp_path: Path, stock_deployment: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    three = scenario("three_figures_share")
    log = tmp_path / "run.jsonl"
    with FakeOpenAIServer(list(three.responses)) as server:
        code, out, _ = run_stock(
            capsys, three.request, log, "--base-url", server.base_url, "--model", "fake-model", "--json"
        )
        requests = list(server.requests)
    assert code == 0, out
    doc = json.loads(out)
    assert doc["status"] == "succeeded"
    assert doc["llm_calls"] == 2 == len(requests)
    assert doc["usage"]["total_tokens"] > 0
    assert doc["result"]["c016_share_pct"] == "15.04"
    # The planner asked for the plan schema; the finalizer for free text.
    assert requests[0]["response_format"]["type"] == "json_schema"
    assert requests[0]["model"] == "fake-model"
    llm_calls = [r for r in read_records(log) if r["type"] == "llm_call"]
    assert [c["role"] for c in llm_calls] == ["planner", "finalizer"]
    assert verify(log).ok
    assert replay_file(log).ok


def test_run_llm_server_failure_fails_closed(
    tmp_path: Path, stock_deployment: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "run.jsonl"
    with FakeOpenAIServer([]) as server:  # no scripted answer: HTTP 500
        code, out, _ = run_stock(
            capsys, "x", log, "--base-url", server.base_url, "--max-retries", "0", "--json"
        )
    assert code == 1
    assert json.loads(out)["reason"] == "llm_error"
    assert verify(log).ok


def test_run_without_api_key_or_base_url_is_a_usage_error(
    tmp_path: Path,
    stock_deployment: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    log = tmp_path / "run.jsonl"
    code, out, err = cli(capsys, "run", "anything", "--tools", STOCK, "--audit", str(log))
    assert code == 2
    assert out == ""
    assert "OPENAI_API_KEY" in err
    assert "base_url" in err or "--base-url" in err
    assert not log.exists() or log.stat().st_size == 0


def test_plan_writes_a_plan_file_that_validates(
    tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    three = scenario("three_figures_share")
    responses = write_json(tmp_path / "responses.json", [three.responses[0]])
    out_file = tmp_path / "plan.json"
    code, out, _ = plan_stock(capsys, three.request, out_file, "--replay-responses", str(responses), "--json")
    assert code == 0, out
    doc = json.loads(out)
    assert doc["status"] == "accepted" and doc["steps"] == 5 and doc["output"] == str(out_file)
    assert out_file.is_file()
    code, out, _ = cli(capsys, "validate", str(out_file), "--tools", STOCK, "--json")
    assert code == 0
    assert json.loads(out)["plan_hash"] == doc["plan_hash"]
    # And the reviewed file runs without any LLM.
    log = tmp_path / "exec.jsonl"
    code, out, _ = cli(capsys, "execute", str(out_file), "--tools", STOCK, "--audit", str(log), "--json")
    assert code == 0
    assert json.loads(out)["result"]["total_eur"] == "59093.25"


def test_plan_with_audit_records_the_planner_call(
    tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    three = scenario("three_figures_share")
    responses = write_json(tmp_path / "responses.json", [three.responses[0]])
    log = tmp_path / "plan.jsonl"
    code, _, _ = plan_stock(
        capsys, three.request, tmp_path / "p.json", "--audit", str(log), "--replay-responses", str(responses)
    )
    assert code == 0
    assert record_types(log) == ["run_started", "llm_call", "plan_accepted", "run_finished"]
    assert verify(log).ok
    assert replay_file(log).ok


def test_plan_rejected_writes_no_file(
    tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    responses = write_json(tmp_path / "responses.json", [json.dumps(PICK_PLAN)])
    out_file = tmp_path / "plan.json"
    code, _, _ = plan_stock(
        capsys, "x", out_file, "--allow", "calculator", "--replay-responses", str(responses)
    )
    assert code == 1
    assert not out_file.exists()


def test_plan_of_a_payment_can_be_written_for_review(
    tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    responses = write_json(tmp_path / "responses.json", [json.dumps(PAYMENT_PLAN)])
    out_file = tmp_path / "pay.json"
    store = tmp_path / "approvals.jsonl"
    make_deployment(tmp_path, monkeypatch, capsys, "--tools", STOCK, "--approvals", str(store))
    code, _, _ = plan_stock(capsys, "Pay S003", out_file, "--replay-responses", str(responses))
    assert code == 0
    assert (
        cli(capsys, "approve", str(out_file), "--by", "alice", "--tools", STOCK, "--approvals", str(store))[0]
        == 0
    )
    code, _, _ = cli(
        capsys,
        "execute",
        str(out_file),
        "--tools",
        STOCK,
        "--approvals",
        str(store),
        "--audit",
        str(tmp_path / "a.jsonl"),
    )
    assert code == 0


# --- pte replay / pte resume -----------------------------------------------------------------


@pytest.mark.parametrize("sample", sorted(p.name for p in SAMPLES.glob("*.jsonl")))
def test_replay_every_sample(sample: str, capsys: pytest.CaptureFixture[str]) -> None:
    keys = ["--approval-keys", str(SAMPLES / "approver.pub")]  # the samples' signed approval
    signed = b'"signed":true' in (SAMPLES / sample).read_bytes()
    code, out, _ = cli(capsys, "replay", str(SAMPLES / sample), "--json", *(keys if signed else []))
    assert code == 0, out
    doc = json.loads(out)
    assert doc["status"] == "ok"
    expected = "same_incomplete" if sample == "crashed_mid_run.jsonl" else "same"
    assert [r["outcome"] for r in doc["runs"]] == [expected]


def test_replay_text_output(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "replay", str(SAMPLES / "success.jsonl"))
    assert code == 0
    assert "same decisions" in out and "succeeded" in out


def test_replay_detects_a_changed_decision(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = (SAMPLES / "success.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    last = json.loads(lines[-1])
    assert last["type"] == "run_finished"
    last["steps_run"] -= 1
    lines[-1] = canonical_json(last) + "\n"
    edited = tmp_path / "edited.jsonl"
    edited.write_text("".join(lines), encoding="utf-8")
    # Not re-hashed: the log fails verification, and replay refuses to re-drive it at all.
    code, out, err = cli(capsys, "replay", str(edited))
    assert code == 1 and "replay refused" in err and "hash mismatch" in err
    # Re-hashed by a forger: verify passes, replay names the changed decision.
    body = {k: v for k, v in last.items() if k != "hash"}
    last["hash"] = hashlib.sha256((last["prev"] + canonical_json(body)).encode()).hexdigest()
    lines[-1] = canonical_json(last) + "\n"
    edited.write_text("".join(lines), encoding="utf-8")
    code, out, _ = cli(capsys, "replay", str(edited))
    assert code == 1
    assert "DIVERGED" in out
    assert f"at line {len(lines)}: run_finished.steps_run" in out
    code, out, _ = cli(capsys, "replay", str(edited), "--json")
    assert code == 1
    divergence = json.loads(out)["runs"][0]["divergence"]
    assert divergence["line"] == len(lines) and divergence["field"] == "steps_run"


def test_replay_with_stock_tools_and_live_reads(
    tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = cli(capsys, "replay", str(SAMPLES / "success.jsonl"), "--tools", STOCK, "--live", "--json")
    assert code == 0, out
    assert json.loads(out)["runs"][0]["output_diffs"] == []


def test_replay_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(capsys, "replay", str(tmp_path / "missing.jsonl"))
    assert code == 2 and "does not exist" in err
    code, _, err = cli(capsys, "replay", str(SAMPLES / "success.jsonl"), "--live")
    assert code == 2 and "--tools" in err


@pytest.mark.parametrize("command", ["replay", "resume"])
def test_replay_and_resume_of_an_unparsable_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    log = tmp_path / "junk.jsonl"
    log.write_text("this is not json\n", encoding="utf-8")
    code, _, err = cli(capsys, command, str(log), "--tools", "calculator")
    assert code in (1, 2)
    assert "junk.jsonl" in err


def test_replay_of_a_replan_reusing_the_failed_step_id(
    tmp_path: Path, stock_deployment: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = {
        "pte_plan": "1",
        "steps": [{"id": "inv", "tool": "get_invoice", "args": {"invoice_id": "INV-10O6"}}],
        "result": {"$ref": "inv/outstanding"},
    }
    second = json.loads(json.dumps(first))
    second["steps"][0]["args"]["invoice_id"] = "INV-1006"
    responses = write_json(
        tmp_path / "responses.json", [json.dumps(first), json.dumps(second), "GBP 6088.40"]
    )
    log = tmp_path / "run.jsonl"
    code, _, _ = run_stock(capsys, "x", log, "--replay-responses", str(responses))
    assert code == 0
    assert verify(log).ok
    code, out, _ = cli(capsys, "replay", str(log))
    assert code == 0, out


#: A child that runs `pte execute PLAN --audit LOG` (argv 2, 1) under the deployment of its
#: environment and is SIGKILLed right after the record that starts step "all" (a write).
CRASHING_EXECUTE = """
import os, signal, sys
sys.path.insert(0, {repo!r})
from pte import AuditLog
from pte.cli import main

original = AuditLog.write_records  # every write goes through it (`write` and `append` too)

def write_records(self, records):
    written = original(self, records)
    if any(r["type"] == "step_started" and r.get("step_id") == "all" for r in written):
        os.kill(os.getpid(), signal.SIGKILL)
    return written

AuditLog.write_records = write_records
main(["--quiet", "execute", sys.argv[2], "--audit", sys.argv[1]])
"""


def test_resume_a_crashed_run_on_a_fresh_ledger(
    tmp_path: Path, stock_deployment: Path, ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run of the deployment killed inside its write (the sample's crash, made under a
    deployment, so its start is anchored): `pte resume` finishes it."""
    where = stock_deployment
    sample = [json.loads(line) for line in (SAMPLES / "crashed_mid_run.jsonl").read_text().splitlines()]
    plan = write_json(tmp_path / "plan.json", next(r for r in sample if r["type"] == "plan_accepted")["plan"])
    crashed = tmp_path / "crashed.jsonl"
    child = subprocess.run(
        [sys.executable, "-c", CRASHING_EXECUTE.format(repo=str(REPO)), str(crashed), str(plan)],
        env=subprocess_env(PTE_DEPLOYMENT=str(where), PTE_LEDGER=str(ledger)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == -9, child.stderr
    assert read_records(crashed)[-1]["type"] == "step_started" and verify(crashed).complete is False
    before = len(read_records(crashed))
    code, out, _ = cli(capsys, "resume", str(crashed), "--tools", STOCK, "--json")
    assert code == 0, out
    doc = json.loads(out)
    assert doc["status"] == "succeeded"
    records = read_records(crashed)
    assert len(records) > before
    assert records[-1]["type"] == "run_finished"
    assert verify(crashed).ok
    assert replay_file(crashed).ok
    # A sealed log has nothing to resume: refused (exit 1), not a usage error.
    code, _, err = cli(capsys, "resume", str(crashed), "--tools", STOCK)
    assert code == 1
    assert "already finished" in err


def test_resume_missing_log_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(capsys, "resume", str(tmp_path / "missing.jsonl"), "--tools", STOCK)
    assert code == 2
    assert "does not exist" in err


# --- the real entry point, and the engine's logs on stderr -----------------------------------


def test_entry_point_in_a_subprocess(tmp_path: Path) -> None:
    plan = write_json(tmp_path / "plan.json", CALC_PLAN)
    bad = write_json(tmp_path / "bad.json", BAD_CALC_PLAN)
    env = subprocess_env()

    def pte(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pte._cli", *argv],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    version = pte("--version")
    assert version.returncode == 0 and version.stdout.strip() == f"pte {__version__}"
    ok = pte("validate", str(plan), "--tools", "calculator", "--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["status"] == "accepted"
    rejected = pte("validate", str(bad), "--tools", "calculator", "--json")
    assert rejected.returncode == 1
    assert json.loads(rejected.stdout)["reason"] == "invalid_args"
    usage = pte("validate", str(tmp_path / "missing.json"), "--tools", "calculator")
    assert usage.returncode == 2
    assert "does not exist" in usage.stderr


def test_json_logs_on_stderr_and_json_result_on_stdout(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.sqlite"
    env = subprocess_env(PTE_LEDGER=str(ledger))
    base = [sys.executable, "-m", "pte._cli"]
    init = subprocess.run(
        [*base, "ledger", "init"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert init.returncode == 0, init.stderr
    plan = write_json(tmp_path / "plan.json", BALANCE_PLAN)
    log = tmp_path / "audit.jsonl"
    proc = subprocess.run(
        [
            *base,
            "--log-format",
            "json",
            "execute",
            str(plan),
            "--tools",
            STOCK,
            "--audit",
            str(log),
            "--json",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)  # stdout is the result alone
    assert result["status"] == "succeeded"
    events = [json.loads(line) for line in proc.stderr.splitlines() if line.strip()]
    assert [e["event"] for e in events] == ["step_finished", "step_finished", "run_finished"]
    assert {e["run_id"] for e in events} == {result["run_id"]}
    assert all(e["level"] == "info" and "timestamp" in e for e in events)
    assert events[-1]["status"] == "succeeded"

    quiet = subprocess.run(
        [*base, "--quiet", "execute", str(plan), "--tools", STOCK, "--audit", str(log), "--json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert quiet.returncode == 0
    assert quiet.stderr == ""
    assert verify(log).ok


def test_a_policy_file_serves_a_narrowed_allow_list_but_typos_are_still_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(
        json.dumps(
            {"pte_plan": "1", "steps": [{"id": "c", "tool": "calculator", "args": {"expression": "1 + 1"}}]}
        ),
        encoding="utf-8",
    )
    policy = tmp_path / "policy.json"
    policy.write_text(
        json.dumps({"pte_policy": "1", "tools": {"get_supplier": {"output": "trusted"}}}), encoding="utf-8"
    )
    tools = ["--tools", "backoffice,calculator,shaping", "--allow", "calculator"]
    assert main(["--quiet", "validate", str(plan_file), *tools, "--policy", str(policy)]) == 0
    capsys.readouterr()
    policy.write_text(
        json.dumps({"pte_policy": "1", "tools": {"get_suplier": {"output": "trusted"}}}), encoding="utf-8"
    )
    with pytest.raises(SystemExit) as exc:
        main(["--quiet", "validate", str(plan_file), *tools, "--policy", str(policy)])
    assert exc.value.code == 2
    assert "get_suplier" in capsys.readouterr().err
