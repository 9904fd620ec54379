"""One exit-status table, over every command (docs/concepts.md, "Exit statuses").

0: the command did what it says (a run succeeded, or ended `condition_not_met`).
1: a run ended closed (a rejected plan, a policy refusal, a failed step) or a check failed.
2: the command itself was wrong (usage, a bad option, unreadable or missing input, a refused
   file); then nothing is written: no log, store, key or report is created or appended to.

Every command the parser knows is driven with an option it does not have; every command
that reads a file is driven with one that does not exist; each must exit 2 with a message
and leave its working directory as it found it.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import pytest

# private: the command line's parser
from pte._cli import build_parser
from pte.cli import main

REPO = Path(__file__).resolve().parents[2]


def _commands(
    parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()
) -> list[tuple[tuple[str, ...], list[str]]]:
    """Every leaf command, with placeholder values for what it requires (so that argparse
    gets as far as the options)."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if subs:
        return [c for name, sub in subs[0].choices.items() for c in _commands(sub, (*prefix, name))]
    required: list[str] = []
    for action in parser._actions:
        if not action.option_strings and action.nargs != "?":
            required.append("x")
        elif action.required and action.option_strings:
            required += [action.option_strings[-1], "x"]
    return [(prefix, required)]


LEAVES = _commands(build_parser())
COMMANDS = [command for command, _ in LEAVES]

# Every command that reads a file or a store, given one that does not exist.
MISSING_INPUT = [
    ("validate", "missing.json", "--tools", "calculator"),
    ("execute", "missing.json", "--tools", "calculator", "--audit", "log.jsonl"),
    ("approve", "missing.json", "--by", "ann", "--tools", "calculator"),
    ("audit", "verify", "missing.jsonl"),
    ("audit", "show", "missing.jsonl"),
    ("audit", "checkpoint", "missing.jsonl", "--key", "missing.key"),
    ("audit", "report", "missing.jsonl", "-o", "report.html"),
    ("replay", "missing.jsonl"),
    ("resume", "missing.jsonl"),
    ("endorse", "missing.jsonl"),
    ("submit", "missing.json", "--tools", "calculator", "--store", "sqlite:///store.db"),
    ("tools", "no_such_pack"),
    ("schema", "no_such_schema"),
    ("approvals", "list"),  # no store named
    ("reject", "abc", "--by", "ann"),  # no store named
    ("runs", "requeue", "abc"),  # no broker named
    ("runs", "end", "abc"),  # no deployment
    ("demo", "--out", "plan.json"),  # not a folder
    ("audit", "export", "sqlite:missing.db", "--run", "abc", "out.jsonl"),  # no store there
    ("audit", "anchors", "export", "sqlite:missing.db", "anchors.jsonl"),  # no store there
]


def _run(*argv: str) -> tuple[int, str]:
    try:
        code = main(["--quiet", *argv])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    return code, ""


@pytest.fixture
def empty_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in list(os.environ):
        if name.startswith(("PTE_", "OPENAI_")):
            monkeypatch.delenv(name)
    where = tmp_path / "work"
    where.mkdir()
    monkeypatch.chdir(where)
    return where


def test_the_walk_finds_every_command() -> None:
    assert ("execute",) in COMMANDS and ("audit", "verify") in COMMANDS and ("runs", "requeue") in COMMANDS
    assert len(COMMANDS) >= 20


@pytest.mark.parametrize(("command", "required"), LEAVES, ids=[" ".join(c) for c, _ in LEAVES])
def test_an_unknown_option_is_a_usage_error(
    command: tuple[str, ...], required: list[str], empty_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _ = _run(*command, *required, "--no-such-option")
    err = capsys.readouterr().err
    assert code == 2, err
    assert "--no-such-option" in err and "Traceback" not in err
    assert not any(empty_dir.iterdir())


@pytest.mark.parametrize("argv", MISSING_INPUT, ids=" ".join)
def test_a_missing_input_is_a_usage_error_and_writes_nothing(
    argv: tuple[str, ...], empty_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if argv[0] == "demo":
        (empty_dir / "plan.json").write_text("{}", encoding="utf-8")
    before = sorted(p.name for p in empty_dir.iterdir())
    code, _ = _run(*argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert "error:" in err and "Traceback" not in err
    assert sorted(p.name for p in empty_dir.iterdir()) == before, "a refused command wrote a file"


def test_init_refuses_a_folder_of_other_files(empty_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`pte init --dir /` (a fuzzed value, run as root) spread a key pair into the root."""
    (empty_dir / "notes.txt").write_text("mine", encoding="utf-8")
    for argv in (("init", "."), ("init", "--dir", str(empty_dir))):
        code, _ = _run(*argv)
        assert code == 2 and "holds other files" in capsys.readouterr().err
        assert sorted(p.name for p in empty_dir.iterdir()) == ["notes.txt"]
    assert _run("init", "--tools", "calculator")[0] == 0  # the default: a folder of its own
    assert (empty_dir / ".pte" / "pte-deployment.json").exists()
    (empty_dir / "fresh").mkdir()
    assert _run("init", "fresh", "--tools", "calculator")[0] == 0  # an empty folder


def test_every_command_with_an_input_is_in_the_table() -> None:
    """A new command that reads a file gets a row above (or this list says why not)."""
    no_input = {
        ("init",), ("keys", "generate"), ("audit", "keygen"), ("ledger", "init"), ("worker",),
        ("approvals", "expire"), ("run",), ("plan",),
    }  # fmt: skip
    covered = {c for argv in MISSING_INPUT for c in COMMANDS if argv[: len(c)] == c}
    for command in COMMANDS:
        assert command in no_input or command in covered, command


def test_a_rejected_plan_ends_the_run_closed_and_a_good_one_succeeds(
    empty_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = {"pte_plan": "1", "steps": [{"id": "a", "tool": "calculator", "args": {"expression": "1 + 2"}}]}
    bad = {"pte_plan": "1", "steps": [{"id": "a", "tool": "no_such_tool", "args": {}}]}
    (empty_dir / "good.json").write_text(json.dumps(good), encoding="utf-8")
    (empty_dir / "bad.json").write_text(json.dumps(bad), encoding="utf-8")
    assert _run("execute", "good.json", "--tools", "calculator", "--audit", "good.jsonl")[0] == 0
    assert _run("execute", "bad.json", "--tools", "calculator", "--audit", "bad.jsonl")[0] == 1
    assert "tool_not_allowed" in capsys.readouterr().err
    assert _run("audit", "verify", "bad.jsonl")[0] == 0  # the rejected run is recorded, sealed


def test_the_docs_state_the_table() -> None:
    page = (REPO / "docs" / "concepts.md").read_text(encoding="utf-8")
    section = page.split("## Exit statuses", 1)[1].split("\n## ", 1)[0]
    for row in ("| 0 |", "| 1 |", "| 2 |"):
        assert row in section


def test_the_key_commands_share_one_convention(empty_dir: Path) -> None:
    """PATH and PATH.pub, as `pte init` writes deployment.key and deployment.key.pub (three
    commands used three conventions); --private/--public still name the two files."""
    assert _run("keys", "generate", "approver.pem")[0] == 0
    assert _run("audit", "keygen", "checkpoints.key")[0] == 0
    assert _run("init", "--tools", "calculator")[0] == 0
    names = {p.name for p in empty_dir.iterdir()} | {p.name for p in (empty_dir / ".pte").iterdir()}
    for private in ("approver.pem", "checkpoints.key", "deployment.key"):
        assert {private, f"{private}.pub"} <= names
    assert _run("keys", "generate", "--private", "a.pem", "--public", "a.pub")[0] == 0
    assert _run("keys", "generate", "b.pem", "--public", "b.pub")[0] == 2  # one form or the other
    assert _run("keys", "generate")[0] == 2
