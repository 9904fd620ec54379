"""The command line shows text holding a lone surrogate instead of ending "internal error"
(review of #37).

A log edited by hand (or by an attacker) can hold JSON's ``"\\ud800"``: decoded, a surrogate
code point that no encoding takes. ``pte audit show`` and ``pte audit report`` read such a
record and printed or wrote it: redaction (RE2 takes UTF-8 only) and then the UTF-8 pipe or
page raised UnicodeEncodeError, and the command ended "internal error". Each shows U+FFFD in
its place now, with the exit status it has for any log (``verify`` still says FAILED).
Run as a user runs them: a child process whose output is a real pipe.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pte import AuditLog
from tests._cli_run import pte_child


@pytest.fixture
def tampered_log(tmp_path: Path) -> Path:
    """A run's log whose request an editor replaced with text holding escaped lone surrogates."""
    path = tmp_path / "audit.jsonl"
    with AuditLog(path) as log:
        log.append("run_started", mode="run", request="pay invoice INV-7", tools=[], config={})
    text = path.read_text(encoding="utf-8")
    assert '"pay invoice INV-7"' in text
    path.write_text(
        text.replace('"pay invoice INV-7"', '"pay \\ud800 invoice \\udfff INV-7"'), encoding="utf-8"
    )
    return path


def test_audit_show_prints_the_replacement_character(tampered_log: Path) -> None:
    shown = pte_child("audit", "show", str(tampered_log), cwd=tampered_log.parent)
    assert shown.returncode == 0, shown.stderr
    assert "internal error" not in shown.stderr
    assert "pay \ufffd invoice \ufffd INV-7" in shown.stdout


def test_audit_report_writes_the_page(tampered_log: Path) -> None:
    page = tampered_log.parent / "report.html"
    made = pte_child("audit", "report", str(tampered_log), "-o", str(page), cwd=tampered_log.parent)
    assert made.returncode == 0, made.stderr
    assert "pay \ufffd invoice \ufffd INV-7" in page.read_text(encoding="utf-8")


def test_audit_verify_still_fails_such_a_log(tampered_log: Path) -> None:
    checked = pte_child("audit", "verify", str(tampered_log), cwd=tampered_log.parent)
    assert checked.returncode == 1
    assert "internal error" not in checked.stderr + checked.stdout
