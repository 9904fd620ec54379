"""Resume's checker writes each record past the recording once, and checks each recorded one once,
whatever batches the engine hands it (review of #37).

The reviewer saw `CheckingAuditLog.write_records` hand the rest of a batch (the records past the
end of the recording) both to its own log and to the log it forwards to, and asked whether a
record could be written or checked twice. Its own log is an in-memory shadow that builds every
record as a log would (redaction, common fields) before anything is compared or forwarded; only
the forwarded log is the run's. This property pins that: for every point a run may have crashed
at and every way its records may be batched, the resumed log holds the crashed prefix, one
``run_resumed``, then every later record once, in order, and verifies.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from pte import AuditLog, verify

# private: the records the engine writes, built as the engine builds them
from pte._audit import Record, records

# private: resume's checker (replay's RecordSink) under test
from pte._replay import CheckingAuditLog
from pte.audit import read_records

RUN_ID = "resumed-run"
PLAN_HASH = "ab" * 32


def _run() -> list[Record]:
    """A run of three steps (two reads, a write); the executor writes a read's two records together."""
    steps: list[Record] = []
    for sid, effect in (("s1", "read"), ("s2", "read"), ("s3", "write")):
        tool = f"{effect}_tool"
        steps += [
            records.step_started(step_id=sid, tool=tool, effect=effect, args={}, plan_hash=PLAN_HASH),
            records.step_finished(step_id=sid, tool=tool, status="ok", duration_ms=1.5, output={"v": sid}),
        ]
    return [
        records.run_started(mode="execute", request=None, config={"refused": False}),
        *steps,
        records.run_finished(
            status="succeeded", reason=None, message=None, answer=None, result=None, steps_run=3, llm_calls=0
        ),
    ]


RUN = _run()
#: (type, step id) of each record of the run, in order.
SHAPES = [(record.type, record.fields.get("step_id")) for record in RUN]


def _shape(record: dict[str, object]) -> tuple[object, ...]:
    return (record["type"], record.get("step_id"))


@st.composite
def _batches(draw: st.DrawFn) -> list[int]:
    """Batch sizes covering the run after its run_started (which is written alone)."""
    sizes, left = [], len(RUN) - 1
    while left:
        size = draw(st.integers(min_value=1, max_value=min(3, left)))
        sizes.append(size)
        left -= size
    return sizes


@given(st.integers(min_value=1, max_value=len(RUN) - 1), _batches())
def test_every_record_past_the_recording_is_written_once(kept: int, sizes: list[int]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "crashed.jsonl"
        with AuditLog(path, run_id=RUN_ID) as crashed:
            for record in RUN[:kept]:
                crashed.write(record)
        prefix = read_records(path)
        with AuditLog(path, run_id=RUN_ID, repair_partial_tail=True) as forward:
            checker = CheckingAuditLog(list(enumerate(prefix, start=1)), run_id=RUN_ID, forward=forward)
            returned = [checker.write(RUN[0])]
            at = 1
            for size in sizes:  # a batch may hold recorded records and new ones
                returned += checker.write_records(RUN[at : at + size])
                at += size
            checker.sync()
        # Each recorded record checked once; the rest forwarded once, after one run_resumed.
        assert (checker.checked, checker.pending, checker.resumed_at) == (kept, 0, kept)
        assert [_shape(r) for r in returned] == SHAPES
        resumed = read_records(path)
        assert resumed[:kept] == prefix
        assert [_shape(r) for r in resumed[kept:]] == [("run_resumed", None), *SHAPES[kept:]]
        assert resumed[kept]["after_records"] == kept
        assert returned[kept:] == resumed[kept + 1 :]  # what the engine got back is what the log holds
        assert verify(path).ok
