"""Every path a flag, the environment or a deployment names is a bounded regular file before it is read (#34).

A FIFO named ``*.json`` in ``--procedures DIR`` hung ``pte execute``; ``PTE_SECRET_RULES``
naming a FIFO hung every command; ``PTE_ANCHORS_FILE=/dev/zero`` ran out of memory. Each
read now goes through pte._core's bounded read: a FIFO, a device or a file over the bound is
refused naming the path and why; on the CLI a usage error (exit 2). Every case runs in a
process of its own under a timeout, so a regression fails instead of hanging the suite.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests._services import run_python

REPO = Path(__file__).resolve().parents[2]
TIMEOUT_S = 60
PLAN = {
    "pte_plan": "1",
    "steps": [{"id": "a", "tool": "calculator", "args": {"expression": "1 + 2"}}],
    "result": {"$ref": "a/value"},
}


def _env(**extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PTE_", "OPENAI_"))}
    base["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), base.get("PYTHONPATH", "")) if p)
    return {**base, **extra}


def pte(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    # A process of its own per command, forked from one with pte imported (`run_python`): a fresh
    # interpreter per command cost a second of CPU.
    done = run_python(
        "import sys; from pte._cli._main import main; sys.exit(main(sys.argv[1:]))",
        *args,
        cwd=cwd,
        env=_env(**env),
        timeout=TIMEOUT_S,
        imports=["pte._cli"],
    )
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout.decode(), done.stderr.decode())


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("named_paths")
    (root / "plan.json").write_text(json.dumps(PLAN), encoding="utf-8")
    os.mkfifo(root / "fifo")
    (root / "procs").mkdir()
    os.mkfifo(root / "procs" / "evil.json")
    (root / "devprocs").mkdir()
    os.symlink("/dev/zero", root / "devprocs" / "zero.json")
    with open(root / "big.json", "wb") as fh:  # sparse: 17 MB of zeros on no disk
        fh.truncate(17 * 1024 * 1024)
    assert pte("--quiet", "audit", "keygen", str(root / "deploy"), cwd=root).returncode == 0
    return root


@pytest.mark.parametrize(
    ("args", "env", "why"),
    [
        (["execute", "plan.json", "--tools", "calculator", "--procedures", "procs"], {}, "a FIFO"),
        (["execute", "plan.json", "--tools", "calculator", "--procedures", "devprocs"], {}, "a device"),
        (["schema", "plan"], {"PTE_SECRET_RULES": "fifo"}, "a FIFO"),
        (["schema", "plan"], {"PTE_SECRET_RULES": "/dev/zero"}, "a device"),
        (["schema", "plan"], {"PTE_SECRET_RULES": "big.json"}, "is over"),
        (
            ["execute", "plan.json", "--tools", "calculator", "--audit", "log.jsonl"],
            {"PTE_DEPLOYMENT_KEY_FILE": "deploy", "PTE_ANCHORS_FILE": "/dev/zero"},
            "a device",
        ),
        (
            ["execute", "plan.json", "--tools", "calculator", "--audit", "log2.jsonl"],
            {"PTE_DEPLOYMENT_KEY_FILE": "deploy", "PTE_ANCHORS_FILE": "fifo"},
            "a FIFO",
        ),
        (
            [
                "execute",
                "plan.json",
                "--tools",
                "calculator",
                "--audit",
                "log3.jsonl",
                "--policy",
                "big.json",
            ],
            {},
            "is over",
        ),
    ],
)
def test_the_cli_refuses_a_named_path_that_is_no_bounded_file(
    work: Path, args: list[str], env: dict[str, str], why: str
) -> None:
    done = pte("--quiet", *args, cwd=work, **env)
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert why in done.stderr and "Traceback" not in done.stderr, done.stderr
    named = env.get("PTE_SECRET_RULES") or env.get("PTE_ANCHORS_FILE") or args[-1]
    assert named in done.stderr, done.stderr


LIBRARY = {
    "procedures": (
        "from pte import load_pack; from pte._plan import load_procedures; "
        "load_procedures('procs', load_pack('calculator'))",
        "ProcedureError",
    ),
    "specialists": ("from pte import load_specialists; load_specialists('/dev/zero')", "SpecialistError"),
    "policy": (
        "from pte import Policy, load_pack; Policy.from_registry(load_pack('calculator')).with_file('fifo')",
        "PolicyError",
    ),
    "tool manifest": (
        "from pte._catalogue import load_registry; load_registry(['calculator'], manifest='fifo')",
        "ToolPackError",
    ),
    "import manifest": (
        "from pte.importers import ImportManifest; ImportManifest.load('fifo')",
        "ImportRefused",
    ),
    "openapi document": (
        "from pte.importers.openapi import load_openapi; load_openapi('/dev/zero')",
        "OpenAPIError",
    ),
    "recorded responses": ("from pte import ReplayClient; ReplayClient.from_file('fifo')", "ReplayDataError"),
    "checkpoints": (
        "from pte._audit import read_checkpoints; read_checkpoints('/dev/zero')",
        "CheckpointError",
    ),
    "anchors": (
        "from pte._audit import Anchors; from pte._core import SigningKey; "
        "Anchors('fifo', key=SigningKey.generate()).all()",
        "AnchorError",
    ),
    "approval store": (
        "from pte._core import read_shared; read_shared('fifo')",
        "FileRefused",
    ),
}


@pytest.mark.parametrize("case", sorted(LIBRARY))
def test_every_reader_refuses_a_fifo_a_device_or_a_huge_file(work: Path, case: str) -> None:
    code, error = LIBRARY[case]
    program = textwrap.dedent(
        f"""
        try:
            {code}
        except Exception as exc:
            print(type(exc).__name__, exc)
        else:
            print("read")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", program],
        cwd=work,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(error), done.stdout
    assert any(why in done.stdout for why in ("a FIFO", "a device", "is over")), done.stdout
