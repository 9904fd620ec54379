"""Bad values for every CLI option named in issue 23: exit 2 with a message, never a hang.

Each case runs a real `pte` process under a timeout. A key file that is a FIFO used to hang
six options; numeric options took NaN, infinities, negatives and unbounded counts; nine bad
inputs ended in "internal error" (too-long paths, NUL bytes, store paths naming a FIFO or a
directory, broker URLs Celery cannot load, control characters in a URL, overflowing hours).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# private: the command line's bound under test
from pte._cli import MAX_APPROVAL_TTL_S, MAX_SUBMIT_COUNT, MAX_VALID_FOR_HOURS
from pte.cli import main

REPO = Path(__file__).resolve().parents[2]
PLAN = {
    "pte_plan": "1",
    "steps": [{"id": "a", "tool": "calculator", "args": {"expression": "1 + 2"}}],
    "result": {"$ref": "a/value"},
}
NOWHERE = "redis://127.0.0.1:9/0"  # nothing listens: a command that got this far would hang or fail


def _env() -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PTE_", "OPENAI_"))}
    base["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), base.get("PYTHONPATH", "")) if p)
    return base


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bad_options")
    (root / "plan.json").write_text(json.dumps(PLAN), encoding="utf-8")
    os.mkfifo(root / "fifo")
    (root / "dir").mkdir()
    assert (
        main(
            [
                "--quiet",
                "execute",
                str(root / "plan.json"),
                "--tools",
                "calculator",
                "--audit",
                str(root / "log.jsonl"),
            ]
        )
        == 0
    )
    assert main(["--quiet", "audit", "keygen", str(root / "ck")]) == 0
    (root / "ck.checkpoints").write_text("", encoding="utf-8")
    # `pte worker` and `pte submit` act only under a deployment: theirs names the cases' STORE.
    store = STORE.format(work=root)
    assert main(["--quiet", "init", str(root / "dep"), "--tools", "calculator", "--store", store]) == 0
    return root


def _pte(work: Path, *argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    # Workers and submit under the deployment of the `work` fixture (they refuse to act without).
    deployment = {"PTE_DEPLOYMENT": str(work / "dep")} if argv[0] in ("worker", "submit") else {}
    return subprocess.run(
        [sys.executable, "-m", "pte._cli", "--quiet", *argv],
        cwd=work,
        env={**_env(), **deployment, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,  # a hang fails the test instead of the suite
    )


STORE = "sqlite:///{work}/s.db"
LONG = "x" * 5000

CASES: list[tuple[list[str], str]] = [
    # A FIFO (or device, or directory) as a key file: the six options that hung.
    (
        ["approve", "plan.json", "--tools", "calculator", "--by", "al", "--signing-key", "fifo"],
        "not a regular file",
    ),
    (
        ["execute", "plan.json", "--tools", "calculator", "--audit", "o.jsonl", "--approval-keys", "fifo"],
        "not a regular file",
    ),
    (["replay", "log.jsonl", "--approval-keys", "fifo"], "not a regular file"),
    (["audit", "checkpoint", "log.jsonl", "--key", "fifo"], "not a regular file"),
    (
        ["audit", "verify", "log.jsonl", "--checkpoint", "ck.checkpoints", "--public-key", "fifo"],
        "not a regular file",
    ),
    (
        [
            "audit",
            "report",
            "log.jsonl",
            "-o",
            "r.html",
            "--checkpoint",
            "ck.checkpoints",
            "--public-key",
            "fifo",
        ],
        "not a regular file",
    ),
    (["audit", "checkpoint", "log.jsonl", "--key", "/dev/zero"], "not a regular file"),
    (["audit", "checkpoint", "log.jsonl", "--key", "dir"], "is a directory"),
    # Numeric options: NaN, infinities, negatives, over the documented maximum.
    (
        ["worker", "--tools", "calculator", "--store", STORE, "--broker", NOWHERE, "--approval-ttl", "nan"],
        "--approval-ttl",
    ),
    (
        ["worker", "--tools", "calculator", "--store", STORE, "--broker", NOWHERE, "--approval-ttl", "inf"],
        "--approval-ttl",
    ),
    (
        ["worker", "--tools", "calculator", "--store", STORE, "--broker", NOWHERE, "--approval-ttl", "-5"],
        "--approval-ttl",
    ),
    (
        ["worker", "--tools", "calculator", "--store", STORE, "--broker", NOWHERE, "--approval-ttl", "0"],
        "--approval-ttl",
    ),
    (
        [
            "worker",
            "--tools",
            "calculator",
            "--store",
            STORE,
            "--broker",
            NOWHERE,
            "--approval-ttl",
            str(MAX_APPROVAL_TTL_S * 2),
        ],
        "maximum",
    ),
    (
        [
            "worker",
            "--tools",
            "calculator",
            "--store",
            STORE,
            "--broker",
            NOWHERE,
            "--visibility-timeout",
            "nan",
        ],
        "--visibility-timeout",
    ),
    (
        [
            "worker",
            "--tools",
            "calculator",
            "--store",
            STORE,
            "--broker",
            NOWHERE,
            "--visibility-timeout",
            "-1",
        ],
        "--visibility-timeout",
    ),
    (
        ["worker", "--tools", "calculator", "--store", STORE, "--broker", NOWHERE, "--concurrency", "0"],
        "--concurrency",
    ),
    (
        ["worker", "--tools", "calculator", "--store", STORE, "--broker", NOWHERE, "--concurrency", "100000"],
        "--concurrency",
    ),
    (
        ["worker", "--tools", "calculator", "--store", STORE, "--broker", NOWHERE, "--loglevel", "loud"],
        "--loglevel",
    ),
    (
        ["worker", "--tools", "calculator", "--store", STORE, "--broker", "postgresql://"],
        "no such broker transport",
    ),
    (
        ["worker", "--tools", "calculator", "--store", STORE, "--broker", "sqlite:///x"],
        "no such broker transport",
    ),
    (
        ["execute", "plan.json", "--tools", "calculator", "--store", STORE, "--approval-ttl", "nan"],
        "--approval-ttl",
    ),
    (["run", "x", "--tools", "calculator", "--store", STORE, "--approval-ttl", "-inf"], "--approval-ttl"),
    (
        [
            "submit",
            "plan.json",
            "--tools",
            "calculator",
            "--store",
            STORE,
            "--broker",
            NOWHERE,
            "--count",
            "1e11",
        ],
        "--count",
    ),
    (
        [
            "submit",
            "plan.json",
            "--tools",
            "calculator",
            "--store",
            STORE,
            "--broker",
            NOWHERE,
            "--count",
            "100000000000",
        ],
        "--count",
    ),
    (
        [
            "submit",
            "plan.json",
            "--tools",
            "calculator",
            "--store",
            STORE,
            "--broker",
            NOWHERE,
            "--count",
            str(MAX_SUBMIT_COUNT + 1),
        ],
        "--count",
    ),
    (
        [
            "submit",
            "plan.json",
            "--tools",
            "calculator",
            "--store",
            STORE,
            "--broker",
            NOWHERE,
            "--count",
            "0",
        ],
        "--count",
    ),
    (["approve", "plan.json", "--tools", "calculator", "--by", "al", "--valid-for", "inf"], "--valid-for"),
    (["approve", "plan.json", "--tools", "calculator", "--by", "al", "--valid-for", "1e11"], "maximum"),
    (
        [
            "approve",
            "plan.json",
            "--tools",
            "calculator",
            "--by",
            "al",
            "--valid-for",
            str(MAX_VALID_FOR_HOURS + 1),
        ],
        "maximum",
    ),
    # What ended in "internal error".
    (["execute", "plan.json", "--tools", "calculator", "--audit", LONG], "file name too long"),
    (["execute", "plan.json", "--tools", "calculator", "--store", LONG], "file name too long"),
    (
        ["approve", "plan.json", "--tools", "calculator", "--by", "al", "--approvals", LONG],
        "file name too long",
    ),
    (["keys", "generate", "--private", LONG, "--public", "k.pub"], "file name too long"),
    (["audit", "report", "log.jsonl", "-o", LONG], "file name too long"),
    (["execute", "plan.json", "--tools", "calculator", "--store", "fifo"], "not a regular file"),
    (["execute", "plan.json", "--tools", "calculator", "--store", "dir"], "is a directory"),
    (["run", "x", "--tools", "calculator", "--audit", "o.jsonl", "--base-url", "http://a b/"], "--base-url"),
    (["run", "x", "--tools", "calculator", "--audit", "o.jsonl", "--base-url", "ftp://host/"], "--base-url"),
]


@pytest.mark.parametrize(("argv", "message"), CASES, ids=[" ".join(a)[-70:] for a, _ in CASES])
def test_a_bad_option_value_exits_2_with_a_message(work: Path, argv: list[str], message: str) -> None:
    argv = [a.format(work=work) for a in argv]
    done = _pte(work, *argv)
    assert done.returncode == 2, (argv, done.returncode, done.stderr[-500:])
    assert message in done.stderr, done.stderr[-500:]
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr


def test_a_nul_byte_in_an_argument_is_a_usage_error(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A shell cannot pass one; a program calling main() can.
    for argv in (
        ["execute", "plan.json", "--tools", "calculator", "--audit", "a\x00b"],
        ["audit", "show", "\x00"],
    ):
        with pytest.raises(SystemExit) as caught:
            main(["--quiet", *argv])
        assert caught.value.code == 2
        assert "NUL byte" in capsys.readouterr().err


def test_a_named_failure_is_not_an_internal_error(work: Path) -> None:
    # A JSON Lines store that holds something else: the store names the problem.
    (work / "notjson").write_text("nan\n", encoding="utf-8")
    done = _pte(work, "resume", "some-run", "--tools", "calculator", "--store", "notjson")
    assert done.returncode in (1, 2), done.stderr
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr


def test_submit_to_an_unreachable_broker_stores_nothing_and_says_so(work: Path) -> None:
    store = STORE.format(work=work)  # the deployment's: submit signs its jobs with its key
    done = _pte(work, "submit", "plan.json", "--tools", "calculator", "--store", store, "--broker", NOWHERE)
    assert done.returncode == 1, done.stderr
    assert "not submitted: cannot reach the broker" in done.stderr
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr
    from pte.stores import open_store

    with open_store(store) as opened:
        assert opened.runs() == []


def test_submit_reads_a_plan_file_as_every_command_does(work: Path) -> None:
    (work / "latin1.json").write_bytes(b'{"pte_plan": "1", "note": "caf\xe9"}')
    for plan, message in (("latin1.json", "not UTF-8"), ("fifo", "not a regular file"), ("dir", "directory")):
        done = _pte(
            work,
            "submit",
            plan,
            "--tools",
            "calculator",
            "--store",
            STORE.format(work=work),
            "--broker",
            NOWHERE,
        )
        assert done.returncode == 2, done.stderr
        assert message in done.stderr


@pytest.mark.parametrize("ttl", [float("nan"), float("inf"), -1.0, 0.0, MAX_APPROVAL_TTL_S * 2])
def test_a_worker_configuration_refuses_a_bad_approval_ttl(
    ttl: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Below the CLI too: the worker's environment is read in each worker process, where a
    # NaN TTL used to fail every paused run instead of the configuration.
    from pte import PTEError

    # private: the decision's bound under test
    from pte._deploy import MAX_APPROVAL_TTL_S as WORKER_MAX

    # private: the worker and job internals, white-box
    from pte._deploy import WorkerConfig

    assert WORKER_MAX == MAX_APPROVAL_TTL_S  # the CLI's documented maximum is the worker's
    with pytest.raises(ValueError, match="approval TTL"):
        WorkerConfig("/srv/pte", ("calculator",), ttl)
    monkeypatch.setenv("PTE_DEPLOYMENT", "/srv/pte")
    monkeypatch.setenv("PTE_WORKER_TOOLS", "calculator")
    monkeypatch.setenv("PTE_WORKER_APPROVAL_TTL", str(ttl))
    with pytest.raises(PTEError, match="approval TTL"):
        WorkerConfig.from_env()
