"""Secret leaks found by the red team (issue 23): credentials as object keys, the working
directory taken for a password. The OTel span status leak is in tests/run/test_otel.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from pte import verify
from pte.audit import Redactor
from tests.secrets_corpus import FREE_TEXT, fragments

#: What a redacted value or substring becomes (docs/audit-log.md).
REDACTED = "[REDACTED]"

REPO = Path(__file__).resolve().parents[2]

PACK = textwrap.dedent(
    '''
    from typing import Any

    from pte import tool

    @tool(effect="read")
    def grants(tokens: list[str]) -> dict[str, Any]:
        """Each token mapped to its scopes (a credential used as an object key)."""
        return {"grants": {t: ["repo", "read:org"] for t in tokens}, "count": len(tokens)}

    @tool(effect="read")
    def echo(text: str) -> dict[str, str]:
        """Return the text."""
        return {"text": text}
    '''
)

TOKENS = [secret for provider, _, secret in FREE_TEXT if provider in {"github", "openai", "stripe"}]


def _pte(cwd: Path, *argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PTE_", "OPENAI_"))}
    base["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), base.get("PYTHONPATH", "")) if p)
    base.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "pte._cli", "--log-format", "json", *argv],
        cwd=cwd,
        env=base,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _leaks(text: str) -> list[str]:
    return [piece for secret in TOKENS for piece in fragments(secret) if piece in text]


def test_a_credential_used_as_a_key_is_redacted_in_log_json_and_report(tmp_path: Path) -> None:
    (tmp_path / "pack.py").write_text(PACK, encoding="utf-8")
    plan = {
        "pte_plan": "1",
        "steps": [{"id": "g", "tool": "grants", "args": {"tokens": TOKENS}}],
        "result": {"$ref": "g"},
    }
    (tmp_path / "plan.json").write_text(json.dumps(plan), encoding="utf-8")
    log = tmp_path / "audit.jsonl"
    done = _pte(tmp_path, "execute", "plan.json", "--tools", "pack.py", "--audit", str(log), "--json")
    assert done.returncode == 0, done.stderr
    grants = json.loads(done.stdout)["result"]["grants"]
    # Every entry kept (none overwrites another), every key scrubbed.
    assert sorted(grants) == sorted([REDACTED] + [f"{REDACTED}#{n}" for n in range(2, len(TOKENS) + 1)])
    report = tmp_path / "report.html"
    shown = _pte(tmp_path, "audit", "report", str(log), "-o", str(report))
    assert shown.returncode == 0, shown.stderr
    assert verify(log).ok
    for text in (
        log.read_text(encoding="utf-8"),
        done.stdout,
        done.stderr,
        report.read_text(encoding="utf-8"),
    ):
        assert _leaks(text) == []


@given(
    st.dictionaries(
        st.sampled_from([*TOKENS, "a", "b", REDACTED, f"{REDACTED}#2"]), st.integers(), max_size=8
    )
)
def test_redacted_keys_never_collide_or_leak(value: dict[str, int]) -> None:
    out = Redactor().redact(value)
    assert len(out) == len(value)  # no entry lost to a collision
    assert list(out.values()) == list(value.values())  # order kept
    assert not any(token in key for key in out for token in TOKENS)
    assert Redactor().redact_structure(value).keys() == out.keys()


def test_the_working_directory_is_not_a_secret(tmp_path: Path) -> None:
    # PWD ends in "pwd", a password key: its value (the working directory, 8+ characters) was
    # registered as a secret and every path under it was erased from the hashed chain.
    redactor = Redactor.from_env(
        {"PWD": str(tmp_path), "OLDPWD": "/home/someone/src", "DB_PWD": "hunter2hunter2"}
    )
    note = f"wrote {tmp_path}/out.csv after /home/someone/src; password hunter2hunter2"
    assert (
        redactor.redact_text(note) == f"wrote {tmp_path}/out.csv after /home/someone/src; password {REDACTED}"
    )

    (tmp_path / "pack.py").write_text(PACK, encoding="utf-8")
    path = f"{tmp_path}/exports/ledger.csv"
    plan = {
        "pte_plan": "1",
        "steps": [{"id": "e", "tool": "echo", "args": {"text": path}}],
        "result": {"$ref": "e/text"},
    }
    (tmp_path / "plan.json").write_text(json.dumps(plan), encoding="utf-8")
    log = tmp_path / "audit.jsonl"
    done = _pte(
        tmp_path,
        "execute", "plan.json", "--tools", "pack.py", "--audit", str(log), "--json",
        env={"PWD": str(tmp_path), "OLDPWD": str(tmp_path)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["result"] == path
    assert path in log.read_text(encoding="utf-8")
