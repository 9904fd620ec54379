"""A corpus of real-format fake credentials never reaches the log, stderr or --json output.

The corpus (tests/secrets_corpus.py) holds more than 40 credentials of more than 15
providers, in free text and under secret-looking keys. They go through real `pte` processes
as plan arguments, tool outputs, tool error messages and rejected plans; then every byte
the processes printed and the audit log are searched for each secret. A catalogue whose
tools take `password` and `token` parameters still replays.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest
import re2

from pte import verify

# private: run_started's stored fingerprint, expanded; the content store of a run_started
from pte._catalogue import expand_run_started, stored_contents

# private: the redaction marker; the secret rules under test
from pte._core import REDACTED, SecretRules, default_rule_files
from pte.audit import Redactor
from tests._services import run_python
from tests.secrets_corpus import ALL_SECRETS, FREE_TEXT, KEYED, PROVIDERS, fragments

REPO = Path(__file__).resolve().parents[2]

PACK = textwrap.dedent(
    '''
    from typing import Any

    from pte import tool

    @tool(effect="read")
    def echo(text: str) -> dict[str, str]:
        """Return the text (a tool whose output carries whatever it was given)."""
        return {"text": text}

    @tool(effect="read")
    def profile(record: dict[str, str]) -> dict[str, Any]:
        """Return a record as a service would (secret-looking keys included)."""
        return {"profile": record, "note": "loaded"}

    @tool(effect="read")
    def fail(text: str) -> dict[str, str]:
        """Fail with the text in the error message (as a driver quoting its DSN would)."""
        raise ValueError(f"cannot connect: {text}")

    @tool(effect="write", idempotent=True)
    def set_password(user: str, password: str, token: str) -> dict[str, str]:
        """Set a user's password (the catalogue has password and token parameters)."""
        return {"user": user, "status": "changed"}
    '''
)


def test_the_corpus_is_broad_enough() -> None:
    assert len(FREE_TEXT) + len(KEYED) >= 40
    assert len(PROVIDERS) >= 15
    assert len(set(ALL_SECRETS)) == len(ALL_SECRETS)


def test_every_default_rule_compiles_on_re2() -> None:
    rules = SecretRules.from_files(default_rule_files(), eager=True)
    assert len(rules) > 200  # gitleaks' release rules plus PTE's
    for rule in rules.rules:
        assert isinstance(rule.regex, re2._Regexp), rule.id


@pytest.mark.parametrize(
    ("provider", "text", "secret"), FREE_TEXT, ids=[f"{p}-{i}" for i, (p, _, _) in enumerate(FREE_TEXT)]
)
def test_the_redactor_finds_each_secret_in_free_text(provider: str, text: str, secret: str) -> None:
    out = Redactor().redact(text)
    assert REDACTED in out
    for piece in fragments(secret):
        assert piece not in out


def test_the_redactor_finds_each_keyed_secret() -> None:
    out = Redactor().redact({"record": KEYED})
    assert out["record"] == dict.fromkeys(KEYED, REDACTED)


# --- through real pte processes ---------------------------------------------------------


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PTE_", "OPENAI_"))}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    return env


def _pte(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    # Logs on (JSON lines on stderr), so the engine's own log lines are searched too. A process of
    # its own per command, forked from one with pte imported (`run_python`: fast to start).
    done = run_python(
        "import sys; from pte._cli._main import main; sys.exit(main(sys.argv[1:]))",
        "--log-format",
        "json",
        *argv,
        cwd=cwd,
        env=_env(),
        timeout=300,
        imports=["pte._cli"],
    )
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout.decode(), done.stderr.decode())


def _leaks(text: str) -> list[str]:
    return [piece for secret in ALL_SECRETS for piece in fragments(secret) if piece in text]


def _plan(steps: list[dict[str, Any]], result: Any = None) -> str:
    plan: dict[str, Any] = {"pte_plan": "1", "steps": steps}
    if result is not None:
        plan["result"] = result
    return json.dumps(plan)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "pack.py").write_text(PACK, encoding="utf-8")
    return tmp_path


def test_no_secret_reaches_the_log_stderr_or_json_output(workdir: Path) -> None:
    log = workdir / "audit.jsonl"
    printed: list[str] = []

    # 1. Secrets as plan arguments and tool outputs (free text and keyed), --json result.
    steps = [
        {"id": f"e{i}", "tool": "echo", "args": {"text": text}} for i, (_, text, _) in enumerate(FREE_TEXT)
    ]
    steps.append({"id": "p", "tool": "profile", "args": {"record": KEYED}})
    result = {"texts": [{"$ref": f"e{i}/text"} for i in range(len(FREE_TEXT))], "profile": {"$ref": "p"}}
    (workdir / "ok.json").write_text(_plan(steps, result), encoding="utf-8")
    done = _pte(workdir, "execute", "ok.json", "--tools", "pack.py", "--audit", str(log), "--json")
    assert done.returncode == 0, done.stderr
    output = json.loads(done.stdout)  # redacted as a value: still valid JSON
    assert output["status"] == "succeeded"
    assert REDACTED in done.stdout
    printed += [done.stdout, done.stderr]

    # 2. Secrets in a tool's error message: the failure line on stderr, then with --json.
    for extra in ([], ["--json"]):
        text = " ".join(t for _, t, _ in FREE_TEXT[:20])
        (workdir / "fail.json").write_text(
            _plan([{"id": "f", "tool": "fail", "args": {"text": text}}]), encoding="utf-8"
        )
        done = _pte(workdir, "execute", "fail.json", "--tools", "pack.py", "--audit", str(log), *extra)
        assert done.returncode == 1, done.stderr
        assert "cannot connect" in done.stdout + done.stderr
        printed += [done.stdout, done.stderr]

    # 3. Secrets in a rejected plan (the rejection quotes the offending value).
    (workdir / "bad.json").write_text(
        _plan([{"id": "b", "tool": "echo", "args": {"text": {"nested": [t for _, t, _ in FREE_TEXT]}}}]),
        encoding="utf-8",
    )
    for command in (["validate"], ["execute", "--audit", str(log)]):
        done = _pte(workdir, command[0], "bad.json", "--tools", "pack.py", *command[1:], "--json")
        assert done.returncode == 1, done.stderr
        printed += [done.stdout, done.stderr]

    # 4. The commands that print the log back.
    for argv in (["audit", "show", str(log)], ["audit", "verify", str(log), "--json"], ["replay", str(log)]):
        done = _pte(workdir, *argv)
        printed += [done.stdout, done.stderr]

    assert verify(log).ok
    log_text = log.read_text(encoding="utf-8")
    assert _leaks(log_text) == []
    assert log_text.count(REDACTED) >= len(ALL_SECRETS)
    for text in printed:
        assert _leaks(text) == []


def test_a_catalogue_with_password_and_token_parameters_replays(workdir: Path) -> None:
    log = workdir / "audit.jsonl"
    password, token = KEYED["password"], KEYED["refresh_token"]
    (workdir / "pw.json").write_text(
        _plan(
            [
                {
                    "id": "s",
                    "tool": "set_password",
                    "args": {"user": "ann", "password": password, "token": token},
                }
            ],
            {"$ref": "s/status"},
        ),
        encoding="utf-8",
    )
    # set_password writes: under a deployment (found here, as `pte init` makes it).
    assert _pte(workdir, "init", "--tools", "pack.py", "--no-store").returncode == 0
    done = _pte(workdir, "execute", "pw.json", "--tools", "pack.py", "--audit", str(log))
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    # Format 2 stores the catalogue and policy once, by hash: read the full view.
    started = expand_run_started(records[0], stored_contents(records))
    entry = next(t for t in started["tools"] if t["name"] == "set_password")
    # The schema keeps its structure: `password` and `token` are parameters, not secrets.
    assert entry["input_schema"]["properties"]["password"]["type"] == "string"
    assert entry["input_schema"]["properties"]["token"]["type"] == "string"
    assert "set_password" in started["config"]["policy"]["tools"]
    assert password not in log.read_text(encoding="utf-8")
    for argv in (["replay", str(log)], ["replay", str(log), "--tools", "pack.py"]):
        done = _pte(workdir, *argv)
        assert done.returncode == 0, (argv, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr


def test_configured_keys_patterns_and_environment_secrets(tmp_path: Path) -> None:
    rules = tmp_path / "extra.toml"
    rules.write_text(
        "[[rules]]\nid = \"iban\"\nregex = '''\\bCH\\d{19}\\b'''\nkeywords = [\"ch\"]\n", encoding="utf-8"
    )
    redactor = Redactor.from_env(
        {"PTE_REDACT_KEYS": "iban_owner, cvv", "PTE_SECRET_RULES": str(rules), "DB_PASSWORD": "plainword1"}
    )
    out = redactor.redact(
        {"cvv": "123", "iban_owner": "Ann", "note": "pay CH9300762011623852957 as plainword1"}
    )
    assert out == {"cvv": REDACTED, "iban_owner": REDACTED, "note": f"pay {REDACTED} as {REDACTED}"}
    bad = tmp_path / "bad.toml"
    bad.write_text("[[rules]]\nid = 'x'\nregex = '''(?<=a)b'''\n", encoding="utf-8")  # lookbehind: not RE2
    with pytest.raises(ValueError, match="RE2"):
        Redactor.from_env({"PTE_SECRET_RULES": str(bad)})
    with pytest.raises(ValueError, match="RE2"):
        Redactor(extra_patterns=[r"(a)\1"])  # a backreference: not linear, refused
