"""docs/planning.md's example runs as written (a user copies it into their own suite)."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "planning.md"


def test_the_scripted_model_example_runs() -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.DOTALL)
    assert len(blocks) == 1
    exec(compile(blocks[0], str(DOC), "exec"), {"__name__": "planning_example"})


def test_the_page_states_the_limits_the_schema_enforces() -> None:
    # private: the step id pattern
    from pte._plan import STEP_ID_RE

    text = DOC.read_text(encoding="utf-8")
    assert f"^{STEP_ID_RE.pattern}$" in text
    # private: the reason-code groups
    from pte._core import REPAIRABLE_REASONS

    for reason in REPAIRABLE_REASONS:
        assert f"`{reason.value}`" in text
