"""Running the `pte` command in-process for the tests, and the ledger they pay into: one copy
of each, shared by the CLI tests (import the `ledger` fixture by name where it is used).

The hint tests' parts too: a printed hint is taken from the output (`hint`, which checks it is
a whole command) and run as printed (`run_hint`); `PAY` is the supplier payment they approve,
`payments` counts what the ledger paid."""

from __future__ import annotations

import json
import os
import re
import shlex
import sqlite3
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from pte.cli import main


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run `pte --quiet ARGV` in-process; return (exit code, stdout, stderr).

    Usage errors leave `main` through `SystemExit(2)` (as argparse's own errors do), so the
    exit code is taken from whichever way it ends.
    """
    try:
        code = main(["--quiet", *argv])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


REPO = Path(__file__).resolve().parents[1]


def child_env() -> dict[str, str]:
    """This process's environment without its ``PTE_`` variables, this checkout first on the path."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("PTE_")}
    base["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), base.get("PYTHONPATH", "")) if p)
    return base


def pte_child(*argv: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run `pte --quiet ARGV` as a user runs it: a child process (`child_env`) whose output is
    a real pipe, read as UTF-8."""
    return subprocess.run(
        [sys.executable, "-m", "pte._cli", "--quiet", *argv],
        cwd=cwd,
        env=child_env(),
        capture_output=True,
        encoding="utf-8",
        timeout=timeout,
    )


#: Runs `pte --quiet ARGV` counting the times the process opens the file named first (an audit
#: hook: every open, by any library), written as JSON on stderr's last line; exits as pte did.
_WATCHING = """
import json, os, sys

watched, opened = os.path.abspath(sys.argv[1]), []


def hook(event, args):
    if event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
        if os.path.abspath(os.fsdecode(args[0])) == watched:
            opened.append(args[0])


sys.addaudithook(hook)
from pte.cli import main

try:
    code = main(["--quiet", *sys.argv[2:]])
finally:
    sys.stderr.write("\\n" + json.dumps({"opened": len(opened)}) + "\\n")
sys.exit(code)
"""


def pte_child_watching(
    watched: Path, *argv: str, cwd: Path, env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess[str], int]:
    """`pte_child`, and how many times the process opened `watched` (a relative path: from `cwd`)."""
    done = subprocess.run(
        [sys.executable, "-c", _WATCHING, str(cwd / watched), *argv],
        cwd=cwd,
        env=child_env() if env is None else env,
        capture_output=True,
        encoding="utf-8",
        timeout=120,
    )
    return done, json.loads(done.stderr.strip().splitlines()[-1])["opened"]


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Path:
    """A fresh backoffice ledger (`pte ledger init`) in the test's folder, its working
    directory, named by ``PTE_LEDGER`` for the tools."""
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "ledger.sqlite"
    code, out, err = cli(capsys, "ledger", "init", "--path", str(path))
    assert code == 0, out + err
    monkeypatch.setenv("PTE_LEDGER", str(path))
    return path


def naming_tools(folder: Path, *tools: str) -> Path:
    """The deployment document in `folder` edited to serve `tools`, as an operator edits it."""
    document_path = folder / "pte-deployment.json"
    document = json.loads(document_path.read_text(encoding="utf-8"))
    document["tools"] = list(tools)
    document_path.write_text(json.dumps(document), encoding="utf-8")
    return folder


def make_deployment(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    *options: str,
    folder: str = "deployment",
) -> Path:
    """A deployment made by `pte init FOLDER OPTIONS…` in `tmp_path`, named by ``PTE_DEPLOYMENT``
    for the commands the test runs (as an operator exports it); its folder."""
    where = tmp_path / folder
    code, out, err = cli(capsys, "init", str(where), *options)
    assert code == 0, out + err
    monkeypatch.setenv("PTE_DEPLOYMENT", str(where))
    for name in ("PTE_STORE", "PTE_BROKER", "PTE_APPROVAL_PUBLIC_KEYS_FILE", "PTE_ANCHORS_FILE",
                 "PTE_DEPLOYMENT_KEY_FILE"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    return where


def approver_keys(tmp_path: Path, name: str = "approver") -> tuple[Path, Path]:
    """An approver's key pair in `tmp_path`: (private key file, mode 0600; public key file)."""
    from pte import SigningKey

    signer = SigningKey.generate()
    private, public = tmp_path / f"{name}.pem", tmp_path / f"{name}.pub"
    private.write_bytes(signer.to_pem())
    private.chmod(0o600)
    public.write_bytes(signer.public_key.to_pem())
    return private, public


def store_deployment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *options: str
) -> str:
    """`make_deployment` with the backoffice tools, its runs in a SQLite store in `tmp_path` and
    `OPTIONS`, and `PAY` written to ``pay.json``; the store's URL."""
    url = f"sqlite://{tmp_path / 'runs.db'}"
    make_deployment(tmp_path, monkeypatch, capsys, "--tools", "backoffice", "--store", url, *options)
    (tmp_path / "pay.json").write_text(PAY, encoding="utf-8")
    return url


# --- hints: every command the CLI prints runs as printed -----------------------------------------

#: A supplier payment: a write, so it needs a person's approval.
PAY = """{"pte_plan": "1", "steps": [
 {"id": "sup", "tool": "get_supplier", "args": {"supplier_id": "S001"}},
 {"id": "pay", "tool": "send_payment", "args": {"iban": {"$ref": "sup/iban"}, "amount": "120.00",
  "currency": "EUR", "reference": "Invoice 7"}}
], "result": {"$ref": "pay/payment_id"}}"""
#: What a template to fill in has and a command that runs as printed has not.
PLACEHOLDER = re.compile(r"\bURL\b|\bNAME\b|…|\.\.\.|\bLOG\b|\bRUN_ID\b|PLAN_FILE|\bFILE\b|\bPATH\b")


def payments(ledger: Path) -> int:
    """How many supplier payments the ledger has sent."""
    with sqlite3.connect(ledger) as conn:
        count = int(conn.execute("SELECT count(*) FROM payments_out").fetchone()[0])
    conn.close()
    return count


def hint(text: str, after: str, *, never: Sequence[str] = ()) -> str:
    """The command printed after `after` on its line: a `pte` command with no placeholder and
    none of the flags `never`."""
    line = next(line for line in text.splitlines() if after in line)
    command = line[line.index(after) + len(after) :].strip()
    assert command.startswith("pte "), line
    assert not PLACEHOLDER.search(command), command
    assert not any(flag in shlex.split(command) for flag in never), command
    return command


def run_hint(command: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Run a printed `pte ...` command as printed (in-process); (exit code, stdout, stderr)."""
    words = shlex.split(command)
    assert words[0] == "pte", command
    return cli(capsys, *words[1:])
