"""Reading a run back (`RunView`) takes a record's ``step[i]`` for a for_each element by the one
index rule the engine writes and the endorsement gate reads (`pte._core.array_index`).

Found in the review of #37: `_ELEMENT_ID` used Python's ``\\d``, so a record of ``remind[\\u0661]``
(Arabic-Indic one) or ``remind[01]`` was folded into element 1, a record the engine never writes
standing in for one it did; and ``remind[`` + 5000 digits + ``]`` made `int` raise, a traceback
out of `RunView.fold` (the report, ``pte audit show``). The property fails before the fix.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import given

# private: the content store of a run_started
from pte._catalogue import stored_contents

# private: the rule the engine's element ids follow
from pte._core import array_index
from pte.audit import read_records
from pte.runs import RunView
from tests._pointer_tokens import index_tokens

SAMPLE = Path(__file__).resolve().parents[2] / "audit_samples" / "control.jsonl"
RECORDS = read_records(SAMPLE)
CONTENTS = stored_contents(RECORDS)
RUN = str(RECORDS[0]["run_id"])
FOR_EACH, ELEMENT = "remind", 1


def _elements(records: list[dict[str, Any]]) -> list[tuple[int, str, Any]]:
    view = RunView.fold(RUN, [r for r in records if r["run_id"] == RUN], CONTENTS)
    (step,) = [s for plan in view.plans for s in plan.steps if s.id == FOR_EACH]
    return [(e.index, e.status, e.args) for e in step.elements]


def _renamed(token: str | None) -> list[dict[str, Any]]:
    """The sample's records, element 1's two records named ``remind[token]`` (None: left out)."""
    out = []
    for record in RECORDS:
        if record.get("step_id") == f"{FOR_EACH}[{ELEMENT}]":
            if token is None:
                continue
            record = {**record, "step_id": f"{FOR_EACH}[{token}]"}
        out.append(record)
    return out


AS_WRITTEN = _elements(_renamed(str(ELEMENT)))
WITHOUT = _elements(_renamed(None))


def test_the_sample_has_the_element() -> None:
    assert AS_WRITTEN[ELEMENT][1] == "ok" and WITHOUT[ELEMENT][1] == "not run"


@given(index_tokens)
def test_a_record_is_an_element_exactly_when_its_index_is_one(token: str) -> None:
    elements = _elements(_renamed(token))  # never raises
    index = array_index(token)
    if index == ELEMENT:
        assert elements == AS_WRITTEN
    elif index is None or index >= len(AS_WRITTEN):
        assert elements == WITHOUT  # not an element of the step: left out of the view
    else:  # another element's id: folded there (that element's own records follow), not at 1
        assert len(elements) == len(AS_WRITTEN) and elements[ELEMENT] == WITHOUT[ELEMENT]
