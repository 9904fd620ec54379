"""A log reopened to append (resume, a second writer after the first closed) reads its last line
as JSON text, whose numbers are doubles: a float the writer wrote as a big integer
(``-4.195987812418477e16`` is written ``-41959878124184770``) is the same number read back.

Found by tests/replay/test_replay_floats.py's property: reopening such a log raised
`IntegerDomainError` out of `AuditLog(path)` (a traceback instead of a chained append), since the
tail check re-serialised the parsed line as Python data, where JCS refuses the integer
(the chain check of `verify` had the same bug, fixed in cb96963).
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from pte import AuditLog, verify
from tests.audit_runs import begun


def _reopened(path: Path, value: float) -> int:
    """Write a record holding `value`, reopen the log and append one more; the records verified."""
    with begun(AuditLog(path)) as log:
        log.append("run_finished", status="succeeded", reason=None, message=None, answer=None,
                   result={"amount": value}, steps_run=0, llm_calls=0)  # fmt: skip
    with AuditLog(path) as log:  # a new run in the same file, chained onto the last line
        log.append("run_started", mode="run", request=None, tools=[], config={})
    report = verify(path)
    assert report.intact, report.issue  # the second run is left open: intact, not complete
    return report.records


def test_a_log_whose_last_record_holds_a_float_written_as_a_big_integer_reopens(tmp_path: Path) -> None:
    assert _reopened(tmp_path / "a.jsonl", -4.195987812418477e16) == 3


@settings(max_examples=60, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_any_float_in_the_last_record_reopens_and_verifies(value: float) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        assert _reopened(Path(folder) / "a.jsonl", value) == 3
