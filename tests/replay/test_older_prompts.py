"""A log recorded by an older pte, whose prompts differ from today's, still replays.

Replay re-drives a run with its recorded model answers and compares every record. The
messages a model was sent are written by the prompt code, which the ``prompts`` hash names;
a log recorded by an earlier pte (tests/data/older_pte holds main 5aa60c6's samples,
recorded before issue 37's prompt cuts) names that version's hash, and today's code cannot
write its messages. They were compared byte for byte, so every older log diverged at
``run_started.prompts``. For a hash an earlier pte shipped (`PRIOR_PROMPTS`) those messages
are not compared and the replay says so; the answers and every decision still are. Any other
hash is still a divergence (a log writer cannot opt a run out by editing it), and under
today's hash an edited message is too (tests/run/test_prompts.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pte import verify
from pte.runs import replay_file
from tests._chain import OLDER_PTE, records_of, write_relinked

OLDER = sorted(OLDER_PTE.glob("*.jsonl"))


@pytest.mark.parametrize("log", OLDER, ids=lambda p: p.stem)
def test_a_log_of_an_older_pte_verifies_and_replays_saying_what_was_not_compared(log: Path) -> None:
    assert verify(log).ok
    report = replay_file(log)
    assert report.ok, report.render()
    assert all(run.note and "recorded under the prompts of pte 0.1.0" in run.note for run in report.runs)
    assert "the messages it was sent" in report.render()


def test_the_rechaining_helper_writes_what_verify_accepts(tmp_path: Path) -> None:
    # The tamper test below relies on it: an unedited re-chain is the log itself.
    log = OLDER[0]
    again = write_relinked(records_of(log), tmp_path / "again.jsonl")
    assert again.read_bytes() == log.read_bytes()


@pytest.mark.parametrize("log", OLDER, ids=lambda p: p.stem)
def test_a_decision_edited_in_an_older_log_still_diverges(log: Path, tmp_path: Path) -> None:
    """Leaving the messages uncompared leaves nothing else uncompared: a step's arguments
    edited (and the log re-chained, so that it verifies) are a divergence."""
    records = records_of(log)
    started = next(i for i, r in enumerate(records) if r["type"] == "step_started" and r.get("args"))
    args = records[started]["args"]
    name = next(iter(args))
    records[started] = {**records[started], "args": {**args, name: "edited by a log writer"}}
    edited = write_relinked(records, tmp_path / "edited.jsonl")
    assert verify(edited).ok  # no key: a consistent rewrite verifies
    report = replay_file(edited)
    assert not report.ok and "step_started.args" in report.render(), report.render()


def test_a_model_answer_edited_in_an_older_log_diverges(tmp_path: Path) -> None:
    """The answers are compared too: a planner answer swapped for another plan re-drives
    another run, whose records differ from the recorded ones."""
    log = next(p for p in OLDER if p.stem == "success")
    records = records_of(log)
    planner = next(i for i, r in enumerate(records) if r["type"] == "llm_call" and r["role"] == "planner")
    answer = records[planner]["response"]
    assert '"C016"' in answer
    records[planner] = {**records[planner], "response": answer.replace('"C016"', '"C015"')}
    edited = write_relinked(records, tmp_path / "edited.jsonl")
    assert verify(edited).ok
    assert not replay_file(edited).ok


def test_a_prompts_hash_no_pte_shipped_is_still_a_divergence(tmp_path: Path) -> None:
    records = records_of(OLDER[0])
    records[0] = {**records[0], "prompts": "f" * 64}
    edited = write_relinked(records, tmp_path / "edited.jsonl")
    assert verify(edited).ok
    report = replay_file(edited)
    assert not report.ok and "run_started.prompts" in report.render()
