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
from pathlib import Path

import pytest

# private: the command line's bound under test
from pte._cli import MAX_APPROVAL_TTL_S, MAX_SUBMIT_COUNT, MAX_VALID_FOR_HOURS
from pte.cli import main
from tests._services import run_python

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


#: The `pte` command (`python -m pte._cli`), in a process of its own forked from one with the CLI
#: imported (`run_python`): a fresh interpreter per case cost a second of CPU for each of ~50.
PTE = "import sys\nfrom pte._cli._main import main\nsys.exit(main(sys.argv[1:]))"
CLI_IMPORTS = ["pte._cli", "pte._deploy", "pte.stores", "psycopg", "celery", "redis"]


def _pte(work: Path, *argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    # Workers and submit under the deployment of the `work` fixture (they refuse to act without).
    deployment = {"PTE_DEPLOYMENT": str(work / "dep")} if argv[0] in ("worker", "submit") else {}
    done = run_python(
        PTE,
        "--quiet",
        *argv,
        cwd=work,
        env={**_env(), **deployment, **(env or {})},
        timeout=60,  # a hang fails the test instead of the suite
        imports=CLI_IMPORTS,
    )
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout.decode(), done.stderr.decode())


STORE = "sqlite:///{work}/s.db"
LONG = "x" * 5000

#: The commands whose options are under test, each with the arguments that get it that far.
APPROVE = ["approve", "plan.json", "--tools", "calculator", "--by", "al"]
EXECUTE = ["execute", "plan.json", "--tools", "calculator"]
WORKER = ["worker", "--tools", "calculator", "--store", STORE, "--broker", NOWHERE]
SUBMIT = ["submit", "plan.json", "--tools", "calculator", "--store", STORE, "--broker", NOWHERE]
REPORT = ["audit", "report", "log.jsonl", "-o", "r.html", "--checkpoint", "ck.checkpoints"]
RUN_TO_LOG = ["run", "x", "--tools", "calculator", "--audit", "o.jsonl"]

CASES: list[tuple[list[str], str]] = [
    # A FIFO (or device, or directory) as a key file: the six options that hung.
    ([*APPROVE, "--signing-key", "fifo"], "not a regular file"),
    ([*EXECUTE, "--audit", "o.jsonl", "--approval-keys", "fifo"], "not a regular file"),
    (["replay", "log.jsonl", "--approval-keys", "fifo"], "not a regular file"),
    (["audit", "checkpoint", "log.jsonl", "--key", "fifo"], "not a regular file"),
    (
        ["audit", "verify", "log.jsonl", "--checkpoint", "ck.checkpoints", "--public-key", "fifo"],
        "not a regular file",
    ),
    ([*REPORT, "--public-key", "fifo"], "not a regular file"),
    (["audit", "checkpoint", "log.jsonl", "--key", "/dev/zero"], "not a regular file"),
    (["audit", "checkpoint", "log.jsonl", "--key", "dir"], "is a directory"),
    # Numeric options: NaN, infinities, negatives, over the documented maximum.
    *[([*WORKER, "--approval-ttl", ttl], "--approval-ttl") for ttl in ("nan", "inf", "-5", "0")],
    ([*WORKER, "--approval-ttl", str(MAX_APPROVAL_TTL_S * 2)], "maximum"),
    *[([*WORKER, "--visibility-timeout", t], "--visibility-timeout") for t in ("nan", "-1")],
    *[([*WORKER, "--concurrency", n], "--concurrency") for n in ("0", "100000")],
    ([*WORKER, "--loglevel", "loud"], "--loglevel"),
    *[([*WORKER[:-1], broker], "no such broker transport") for broker in ("postgresql://", "sqlite:///x")],
    ([*EXECUTE, "--store", STORE, "--approval-ttl", "nan"], "--approval-ttl"),
    (["run", "x", "--tools", "calculator", "--store", STORE, "--approval-ttl", "-inf"], "--approval-ttl"),
    *[([*SUBMIT, "--count", n], "--count") for n in ("1e11", "100000000000", str(MAX_SUBMIT_COUNT + 1), "0")],
    ([*APPROVE, "--valid-for", "inf"], "--valid-for"),
    *[([*APPROVE, "--valid-for", h], "maximum") for h in ("1e11", str(MAX_VALID_FOR_HOURS + 1))],
    # What ended in "internal error".
    ([*EXECUTE, "--audit", LONG], "file name too long"),
    ([*EXECUTE, "--store", LONG], "file name too long"),
    ([*APPROVE, "--approvals", LONG], "file name too long"),
    (["keys", "generate", "--private", LONG, "--public", "k.pub"], "file name too long"),
    (["audit", "report", "log.jsonl", "-o", LONG], "file name too long"),
    ([*EXECUTE, "--store", "fifo"], "not a regular file"),
    ([*EXECUTE, "--store", "dir"], "is a directory"),
    *[([*RUN_TO_LOG, "--base-url", url], "--base-url") for url in ("http://a b/", "ftp://host/")],
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
