"""A step id is text like any other in a record: one the rules flag is redacted wherever the
log carries it (the step ids are redacted record by record, with no pre-filled cache: #27)."""

from __future__ import annotations

import json
from pathlib import Path

from pte import AuditLog, Executor, Registry, compile_plan, tool
from pte.audit import Redactor
from tests.audit_runs import begun

#: What a redacted value or substring becomes (docs/audit-log.md).
REDACTED = "[REDACTED]"


@tool
def echo(note: str) -> str:
    """Returns its note."""
    return note


def test_a_step_id_that_looks_like_a_secret_is_redacted_in_the_log(tmp_path: Path) -> None:
    # The executor hands the plan's step ids to the log up front (AuditLog.expect): an id the
    # rules flag must still be redacted in every record that carries it.
    registry = Registry([echo])
    redactor = Redactor(extra_patterns=[r"leaky_[0-9]+"])
    text = json.dumps(
        {
            "pte_plan": "1",
            "steps": [
                {"id": "a", "tool": "echo", "args": {"note": "x"}},
                {"id": "leaky_42", "tool": "echo", "args": {"note": "y"}},
            ],
        }
    )
    path = tmp_path / "audit.jsonl"
    with begun(AuditLog(path, redactor=redactor)) as log:
        assert Executor(registry).run(compile_plan(text, registry), log).ok
    data = path.read_text(encoding="utf-8")
    assert "leaky_42" not in data
    steps = [json.loads(line) for line in data.splitlines()][1:]
    assert [r["step_id"] for r in steps] == ["a", "a", REDACTED, REDACTED]
