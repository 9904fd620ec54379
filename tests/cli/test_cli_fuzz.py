"""Property: any `pte` argument vector over any kind of file ends in 0, 1 or 2, never a traceback.

Hypothesis draws a command, its flags (good and bad values) and, for every path argument, a
file kind: missing, directory, FIFO, empty, binary, huge (over the plan byte limit), deeply
nested JSON, non-UTF-8, random text, a valid plan, a valid log, a replay-responses file.
Whatever it draws, the command must exit 0, 1 or 2 with no traceback and must not hang; a
usage error (2) must leave every file as it was.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pte.cli import main
from pte.plan import DEFAULT_LIMITS

PLAN = {
    "pte_plan": "1",
    "steps": [{"id": "a", "tool": "calculator", "args": {"expression": "1 + 2"}}],
    "result": {"$ref": "a/value"},
}

KINDS = [
    "missing",
    "directory",
    "fifo",
    "empty",
    "binary",
    "huge",
    "nested",
    "latin1",
    "text",
    "plan",
    "log",
    "responses",
]


def _make(kind: str, path: Path, data: bytes) -> None:
    if kind == "missing":
        return
    if kind == "directory":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "binary":
        path.write_bytes(data or b"\x00\xff\xfe")
    elif kind == "huge":
        with open(path, "wb") as fh:  # sparse: a few blocks on disk, 3x the plan limit long
            fh.truncate(3 * DEFAULT_LIMITS.max_bytes)
    elif kind == "nested":
        path.write_text('{"a":' * 50_000 + "1" + "}" * 50_000 + "\n", encoding="utf-8")
    elif kind == "latin1":
        path.write_bytes(b'{"pte_plan": "1", "steps": [], "note": "caf\xe9"}\n')
    elif kind == "text":
        path.write_bytes(data.decode("utf-8", "replace").encode("utf-8"))
    elif kind == "plan":
        path.write_text(json.dumps(PLAN), encoding="utf-8")
    elif kind == "log":
        _ran_log(path)
    elif kind == "responses":
        path.write_text(json.dumps([json.dumps(PLAN)]), encoding="utf-8")


_LOG_CACHE: dict[str, bytes] = {}


def _ran_log(path: Path) -> None:
    """A real, sealed audit log (made once, copied after)."""
    if "log" not in _LOG_CACHE:
        with tempfile.TemporaryDirectory() as scratch:
            plan = Path(scratch) / "plan.json"
            plan.write_text(json.dumps(PLAN), encoding="utf-8")
            log = Path(scratch) / "log.jsonl"
            assert main(["--quiet", "execute", str(plan), "--tools", "calculator", "--audit", str(log)]) == 0
            _LOG_CACHE["log"] = log.read_bytes()
    path.write_bytes(_LOG_CACHE["log"])


FLAG_VALUES: dict[str, list[str]] = {
    "--timeout": ["5", "-1", "nan", "inf", "0", "x"],
    "--max-retries": ["0", "2", "-1", "x"],
    "--max-replans": ["0", "-5", "1"],
    "--max-output-tokens": ["64", "0", "-3"],
    "--by": ["alice", "", "  ", "eve\x1b]0;x\x07"],
    "--tools": ["calculator", "calculator,shaping", "nosuchpack", ""],
    "--allow": ["calculator", "nosuchtool"],
    "--durability": ["batch", "none", "sometimes"],
}
FILE_FLAGS = ["--policy", "--manifest", "--approvals", "--audit", "-o", "--replay-responses", "--out"]

COMMANDS: dict[str, tuple[list[str], list[str]]] = {
    # command words, positional kinds ("FILE" = a path drawn from KINDS, "TEXT" = a request)
    "validate": (["validate"], ["FILE"]),
    "execute": (["execute"], ["FILE"]),
    "approve": (["approve"], ["FILE"]),
    "verify": (["audit", "verify"], ["FILE"]),
    "show": (["audit", "show"], ["FILE"]),
    "replay": (["replay"], ["FILE"]),
    "resume": (["resume"], ["FILE"]),
    "plan": (["plan"], ["TEXT"]),
    "run": (["run"], ["TEXT"]),
    "schema": (["schema"], []),
}


@st.composite
def invocations(draw: st.DrawFn) -> tuple[list[str], dict[str, tuple[str, bytes]]]:
    """(argv with {name} placeholders for files, name -> (kind, random bytes))."""
    command = draw(st.sampled_from(sorted(COMMANDS)))
    words, positionals = COMMANDS[command]
    argv = list(words)
    files: dict[str, tuple[str, bytes]] = {}

    def new_file() -> str:
        name = f"f{len(files)}"
        files[name] = (draw(st.sampled_from(KINDS)), draw(st.binary(max_size=64)))
        return "{" + name + "}"

    for positional in positionals:
        argv.append(new_file() if positional == "FILE" else draw(st.sampled_from(["add 1 and 2", ""])))
    for flag in draw(st.lists(st.sampled_from(sorted(FLAG_VALUES) + FILE_FLAGS), max_size=4, unique=True)):
        argv += [flag, new_file() if flag in FILE_FLAGS else draw(st.sampled_from(FLAG_VALUES[flag]))]
    if draw(st.booleans()):
        argv.append("--json")
    return argv, files


def _snapshot(root: Path) -> dict[str, tuple[str, int, bytes]]:
    out = {}
    for path in sorted(root.rglob("*")):
        kind = "dir" if path.is_dir() else "fifo" if path.is_fifo() else "file"
        size = path.stat().st_size if kind == "file" else 0
        head = path.read_bytes()[:4096] if kind == "file" and size < 10_000_000 else b""
        out[str(path.relative_to(root))] = (kind, size, head)
    return out


@settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(invocation=invocations())
def test_any_invocation_ends_in_0_1_or_2_without_a_traceback(
    invocation: tuple[list[str], dict[str, tuple[str, bytes]]],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    argv, files = invocation
    for name in ("PTE_LEDGER", "PTE_APPROVAL_KEY", "OPENAI_BASE_URL", "OPENAI_API_KEY", "PTE_DEBUG"):
        monkeypatch.delenv(name, raising=False)
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        paths: dict[str, Any] = {}
        for name, (kind, data) in files.items():
            path = root / name
            _make(kind, path, data)
            paths[name] = str(path)
        argv = [a.format(**paths) if a.startswith("{") else a for a in argv]
        before = _snapshot(root)
        cwd = os.getcwd()
        os.chdir(root)
        try:
            try:
                code: Any = main(["--quiet", *argv])
            except SystemExit as exc:
                code = exc.code
        finally:
            os.chdir(cwd)
        out, err = capsys.readouterr()
        assert code in (0, 1, 2), (argv, code, err)
        assert "Traceback" not in err and "Traceback" not in out, (argv, err)
        assert "internal error" not in err, (argv, err)
        if code == 2:
            assert _snapshot(root) == before, argv
