"""The command line on hostile input and on a bad day: exit codes 0/1/2 only, no traceback.

Bad arguments exit 2 with a message; input files must be regular files and are read
bounded; a closed pipe, Ctrl-C (130, run sealed as interrupted) and tools that try to end
the process all end in a one-line message and an exit code.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from pte import AuditLog, verify
from pte.audit import read_records
from tests._cli_run import child_env, cli, pte_child
from tests.audit_runs import begun

REPO = Path(__file__).resolve().parents[2]

CALC_PLAN = {
    "pte_plan": "1",
    "steps": [{"id": "a", "tool": "calculator", "args": {"expression": "1 + 2"}}],
    "result": {"$ref": "a/value"},
}

ENDING_PACK = textwrap.dedent(
    '''
    import os
    import sys
    import time

    from pte import tool

    @tool(effect="read")
    def slow(seconds: float) -> dict[str, float]:
        """Sleep (stands in for a long tool call)."""
        time.sleep(seconds)
        return {"slept": seconds}

    @tool(effect="read")
    def quit_zero() -> dict[str, int]:
        """Call sys.exit(0) (a tool that tries to end the process with success)."""
        sys.exit(0)

    @tool(effect="read")
    def interrupt() -> dict[str, int]:
        """Raise KeyboardInterrupt itself."""
        raise KeyboardInterrupt

    @tool(effect="read")
    def base_exception() -> dict[str, int]:
        """Raise a bare BaseException."""
        raise BaseException("bare")
    '''
)


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for name in ("PTE_LEDGER", "PTE_APPROVAL_KEY", "OPENAI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def plan_file(tmp_path: Path) -> Path:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(CALC_PLAN), encoding="utf-8")
    return path


# --- argument validation ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "x", "--tools", "calculator", "--audit", "a.jsonl", "--timeout", "-1"], "--timeout"),
        (["run", "x", "--tools", "calculator", "--audit", "a.jsonl", "--timeout", "nan"], "--timeout"),
        (["run", "x", "--tools", "calculator", "--audit", "a.jsonl", "--timeout", "inf"], "--timeout"),
        (["run", "x", "--tools", "calculator", "--audit", "a.jsonl", "--timeout", "0"], "--timeout"),
        (["run", "x", "--tools", "calculator", "--audit", "a.jsonl", "--max-retries", "-1"], "--max-retries"),
        (["run", "x", "--tools", "calculator", "--audit", "a.jsonl", "--max-replans", "-5"], "--max-replans"),
        (["plan", "x", "--tools", "calculator", "-o", "p.json", "--max-retries", "two"], "--max-retries"),
        (["approve", "PLAN", "--tools", "calculator", "--by", ""], "--by"),
        (["approve", "PLAN", "--tools", "calculator", "--by", "   "], "--by"),
        (["approve", "PLAN", "--tools", "calculator", "--by", "eve\x1b[2J"], "--by"),
        (["approve", "PLAN", "--tools", "calculator", "--by", "bob", "--approvals", "DIR"], "directory"),
        (["execute", "PLAN", "--tools", "calculator", "--audit", "a.jsonl", "--approvals", "DIR"], "dir"),
        (["execute", "PLAN", "--tools", "calculator", "--audit", "DIR"], "directory"),
        (["execute", "PLAN", "--tools", "calculator", "--audit", "nowhere/a.jsonl"], "does not exist"),
        (["plan", "x", "--tools", "calculator", "-o", "DIR", "--replay-responses", "r.json"], "directory"),
        (["demo", "--out", "PLAN"], "not a directory"),
        (["validate", "DIR", "--tools", "calculator"], "directory"),
        (["audit", "verify", "DIR"], "directory"),
        (["audit", "show", "DIR"], "directory"),
        (["replay", "DIR"], "directory"),
        (["resume", "DIR", "--tools", "calculator"], "directory"),
        (["validate", "PLAN", "--tools", "calculator", "--policy", "DIR"], "directory"),
        (["validate", "PLAN", "--tools", "calculator", "--manifest", "DIR"], "directory"),
    ],
)
def test_bad_arguments_exit_2_with_a_message(
    tmp_path: Path, plan_file: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    directory = tmp_path / "somedir"
    directory.mkdir()
    argv = [str(directory) if a == "DIR" else str(plan_file) if a == "PLAN" else a for a in argv]
    before = sorted(p.name for p in tmp_path.iterdir())
    code, out, err = cli(capsys, *argv)
    assert code == 2, (argv, out, err)
    assert message in err
    assert "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written


# --- input files --------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["validate", "execute", "approve"])
def test_a_fifo_as_plan_file_is_refused_without_hanging(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    fifo = tmp_path / "plan.fifo"
    os.mkfifo(fifo)
    extra = {"execute": ["--audit", str(tmp_path / "a.jsonl")], "approve": ["--by", "bob"]}.get(command, [])
    code, _, err = cli(capsys, command, str(fifo), "--tools", "calculator", *extra)
    assert code == 2
    assert "not a regular file" in err
    assert not (tmp_path / "a.jsonl").exists()


def test_a_device_as_plan_file_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(capsys, "validate", "/dev/zero", "--tools", "calculator")
    assert code == 2
    assert "not a regular file" in err


def test_a_fifo_as_audit_log_is_refused(
    tmp_path: Path, plan_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fifo = tmp_path / "audit.fifo"
    os.mkfifo(fifo)
    for argv in (
        ["execute", str(plan_file), "--tools", "calculator", "--audit", str(fifo)],
        ["audit", "verify", str(fifo)],
        ["audit", "show", str(fifo)],
        ["replay", str(fifo)],
    ):
        code, _, err = cli(capsys, *argv)
        assert code == 2, argv
        assert "not a regular file" in err


def test_a_huge_plan_file_is_rejected_after_reading_only_the_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pte.plan import DEFAULT_LIMITS

    huge = tmp_path / "huge.json"
    with open(huge, "wb") as fh:
        fh.truncate(50 * DEFAULT_LIMITS.max_bytes)  # sparse: 50 MB of zero bytes
    code, out, err = cli(capsys, "validate", str(huge), "--tools", "calculator", "--json")
    assert code == 1, err
    assert json.loads(out)["reason"] == "plan_too_large"


def test_non_utf8_plan_file_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "latin1.json"
    path.write_bytes(b'{"pte_plan": "1", "steps": [], "x": "\xe9"}')
    code, _, err = cli(capsys, "validate", str(path), "--tools", "calculator")
    assert code == 2
    assert "not UTF-8" in err


# --- exit codes of resume and show ------------------------------------------------------


def test_resume_of_a_sealed_or_empty_log_exits_1(
    tmp_path: Path, plan_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "a.jsonl"
    code, _, _ = cli(capsys, "execute", str(plan_file), "--tools", "calculator", "--audit", str(log))
    assert code == 0
    code, _, err = cli(capsys, "resume", str(log), "--tools", "calculator")
    assert code == 1
    assert "already finished" in err
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    code, _, err = cli(capsys, "resume", str(empty), "--tools", "calculator")
    assert code == 1
    assert "no run" in err


# --- the process: pipes, Ctrl-C, tools that end it -----------------------------------------


def test_a_closed_stdout_pipe_ends_quietly(tmp_path: Path) -> None:
    log = tmp_path / "big.jsonl"
    with begun(AuditLog(log, durability="none")) as audit:
        for i in range(3_000):
            audit.append("note", text=f"line {i} " + "x" * 200)
    proc = subprocess.Popen(
        [sys.executable, "-m", "pte._cli", "--quiet", "audit", "show", str(log)],
        cwd=tmp_path,
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.readline()
    proc.stdout.close()  # like `| head -1`
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 1
    assert "Traceback" not in err
    assert "BrokenPipe" not in err


def _sigint_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_seals_the_run_as_interrupted_and_exits_130(tmp_path: Path) -> None:
    pack = tmp_path / "ending.py"
    pack.write_text(ENDING_PACK, encoding="utf-8")
    plan = tmp_path / "slow.json"
    plan.write_text(
        json.dumps({"pte_plan": "1", "steps": [{"id": "s", "tool": "slow", "args": {"seconds": 20}}]}),
        encoding="utf-8",
    )
    log = tmp_path / "audit.jsonl"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pte._cli",
            "--quiet",
            "execute",
            str(plan),
            "--tools",
            str(pack),
            "--audit",
            str(log),
        ],
        cwd=tmp_path,
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # As at a terminal: SIGINT at its default, so Python turns it into KeyboardInterrupt.
        # A suite run in the background (`pytest &`, nohup) has SIGINT ignored, and a child
        # inherits that: it would sleep through the Ctrl-C (issue 28).
        preexec_fn=_sigint_default,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if log.exists() and b'"step_started"' in log.read_bytes():
            break
        time.sleep(0.05)
    else:
        proc.kill()
        pytest.fail("the step never started")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert "interrupted" in err
    records = read_records(log)
    assert records[-1]["type"] == "run_finished"
    assert records[-1]["status"] == "failed_closed"
    assert records[-1]["reason"] == "interrupted"
    assert verify(log).ok


def test_the_ctrl_c_test_holds_when_the_suite_runs_in_the_background(tmp_path: Path) -> None:
    # Re-run the Ctrl-C test in a pytest whose SIGINT is ignored, as under `pytest &`.
    script = (
        "import signal, sys, pytest; signal.signal(signal.SIGINT, signal.SIG_IGN); "
        "sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', '-k', 'seals_the_run_as_interrupted', "
        "sys.argv[1]]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(Path(__file__))],
        cwd=REPO,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout[-2000:]
    assert "1 passed" in done.stdout


@pytest.mark.parametrize("tool", ["quit_zero", "interrupt", "base_exception"])
def test_a_tool_that_tries_to_end_the_process_never_gives_exit_0(tmp_path: Path, tool: str) -> None:
    pack = tmp_path / "ending.py"
    pack.write_text(ENDING_PACK, encoding="utf-8")
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"pte_plan": "1", "steps": [{"id": "t", "tool": tool, "args": {}}]}))
    log = tmp_path / "audit.jsonl"
    done = pte_child("execute", str(plan), "--tools", str(pack), "--audit", str(log), cwd=tmp_path)
    assert done.returncode not in (0, 2), done
    assert "Traceback" not in done.stderr
