"""`pte audit show`: each run's steps summary has RunView's statuses (the report's), escaped."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

# private: the content store of a run_started
from pte._catalogue import stored_contents

# private: replay's parts, white-box
from pte._replay import StepsSummary, render_steps, status_text
from pte.audit import read_records
from pte.runs import RunView, render_report
from pte.stores import open_store
from tests._cli_run import cli

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "audit_samples"

HOSTILE = "\x1b]0;owned\x07\x1b[2J\x9b1m\rpaid \u202eyaw\u202c \u2066iso\u2069 zero\u200bwidth\x00"
RAW = re.compile(r"[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")
_COMMON = {"seq", "ts", "run_id", "type", "hash", "prev"}
_REPORT_STEP = re.compile(r'<tr class="step" data-step-id="([^"]*)"[^>]*? data-status="([^"]*)"')
_REPORT_ELEMENT = re.compile(
    r'<tr class="element" data-step-id="([^"]*)" data-index="\d+" data-status="([^"]*)"'
)


def _views(path: Path) -> list[RunView]:
    records = read_records(path)
    contents = stored_contents(records)
    runs: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        runs.setdefault(str(record["run_id"]), []).append(record)
    return [RunView.fold(run_id, rs, contents) for run_id, rs in runs.items()]


def _summary(out: str) -> list[str]:
    lines = out.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("steps of run "))
    return lines[first:]


def _shown_statuses(summary: list[str]) -> dict[str, str]:
    """step id (and ``id[i]`` per element) -> the status the summary shows."""
    shown = {}
    for line in summary:
        match = re.match(r"^    (\S+)  \S+  (.+?)(?:  (?:for_each|when|require|args|error) .*)?$", line)
        if match:
            shown[match[1]] = match[2]
        element = re.match(r"^      (\S+\[\d+\])  (\S[^ ]*(?: [^ ]+)*?)(?:  (?:args|error) .*)?$", line)
        if element:
            shown[element[1]] = element[2]
    return shown


@pytest.mark.parametrize("sample", ["control.jsonl", "paused_then_approved.jsonl", "staged.jsonl"])
def test_show_steps_have_run_view_and_report_statuses(
    sample: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = cli(capsys, "audit", "show", str(SAMPLES / sample))
    assert code == 0, err
    shown = _shown_statuses(_summary(out))
    expected: dict[str, str] = {}
    for view in _views(SAMPLES / sample):
        assert f"steps of run {view.run_id}: {view.status}" in out
        for step in (s for plan in view.plans for s in plan.steps):
            expected[step.id] = status_text(step)
            expected.update({f"{step.id}[{e.index}]": e.status for e in step.elements})
    assert expected and shown == expected
    # The HTML report shows the same statuses (its badge text is `status_text` too).
    page = render_report(SAMPLES / sample)
    reported = dict(_REPORT_STEP.findall(page)) | dict(_REPORT_ELEMENT.findall(page))
    assert {k: v.split(" (")[0] for k, v in shown.items()} == reported


def test_control_sample_shows_for_each_when_and_require(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "audit", "show", str(SAMPLES / "control.jsonl"))
    assert code == 0
    summary = "\n".join(_summary(out))
    # Not "not run": the for_each ran 6 elements, each ok, with its resolved arguments.
    assert '    remind  queue_reminder  ok (6/6 elements)  for_each {"$ref":"inv/ids"}' in summary
    assert '      remind[0]  ok  args {"channel":"letter","invoice_id":"INV-1006"}' in summary
    assert summary.count("      remind[") == 6
    assert (
        '    need  require  met  require {"nonempty":{"$ref":"inv/ids"}} -> met (operands [{"size":6}])'
        in summary
    )
    assert "    big  calculator  ok  when " in summary and "-> run (operands" in summary
    assert '    none  calculator  skipped  when {"empty":{"$ref":"inv/ids"}} -> skipped' in summary


def _hostile_run() -> list[dict[str, Any]]:
    plan = {
        "pte_plan": "1",
        "steps": [
            {"id": "a", "tool": HOSTILE, "args": {"x": HOSTILE}},
            {"id": "gate", "require": {"nonempty": {"$ref": "a/x"}}, "message": HOSTILE},
            {"id": "each", "tool": "t", "for_each": {"$ref": "a/x"}, "args": {"v": {"$ref": "a/x/*"}}},
            {"id": HOSTILE, "tool": "t", "when": {"eq": [HOSTILE, 1]}, "args": {}},
        ],
    }
    base = {"run_id": "r" + HOSTILE, "ts": "2026-01-01T00:00:00.000000Z"}
    rows: list[dict[str, Any]] = [
        {"type": "run_started", "mode": "execute", "tools": [], "config": {}},
        {"type": "plan_accepted", "origin": HOSTILE, "plan_hash": HOSTILE, "plan": plan, "order": []},
        {"type": "step_started", "step_id": "a", "tool": HOSTILE, "args": {"x": HOSTILE}},
        {
            "type": "step_finished",
            "step_id": "a",
            "tool": HOSTILE,
            "status": "ok",
            "output": {"x": [HOSTILE]},
        },
        {"type": "condition", "step_id": "gate", "kind": "require", "outcome": "met", "values": [HOSTILE]},
        {"type": "for_each", "step_id": "each", "tool": "t", "items": 1},
        {"type": "step_started", "step_id": "each[0]", "tool": "t", "args": {"v": HOSTILE}},
        {
            "type": "step_finished",
            "step_id": "each[0]",
            "tool": "t",
            "status": "failed",
            "error": {"kind": HOSTILE},
        },
        {
            "type": "condition",
            "step_id": HOSTILE,
            "kind": "when",
            "outcome": "skipped",
            "values": [[HOSTILE, 1]],
        },
        {"type": "run_finished", "status": "failed_closed", "reason": HOSTILE},
    ]
    return [{"seq": i, **base, **row} for i, row in enumerate(rows)]


def test_untrusted_text_in_the_steps_summary_is_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    records = _hostile_run()
    lines = list(render_steps(RunView.fold("r", records)))
    assert len(lines) > 5
    for line in lines:
        assert RAW.search(line) is None, line
    log = tmp_path / "hostile.jsonl"
    log.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    code, out, err = cli(capsys, "audit", "show", str(log))
    assert code == 0, err
    summary = _summary(out)
    assert RAW.search("".join(summary)) is None
    text = "\n".join(summary)
    # The hostile values are there, shown as escapes: the step id, the tool, the arguments
    # (as called and per element), the condition's operands and the element's error.
    assert text.count("\\u202e") >= 5 and "\\x1b]0;owned" in text
    assert "each[0]  failed  args" in text
    assert "skipped  when" in text


def test_a_forged_record_for_a_step_the_plan_lacks_adds_no_step(capsys: pytest.CaptureFixture[str]) -> None:
    """A record naming a step no accepted plan has (edited into a log) is not shown as a step."""
    records = _hostile_run()
    forged = {**records[3], "step_id": "wire_money", "tool": "send_payment", "status": "ok"}
    steps = StepsSummary()
    lines = [line for r in [*records[:-1], forged, records[-1]] for line in steps.add(r)] + steps.finish()
    assert lines and not any("wire_money" in line for line in lines)
    assert lines == list(render_steps(RunView.fold(str(records[0]["run_id"]), records)))


def test_an_element_index_past_the_list_adds_no_element() -> None:
    """Bug: a record naming ``step[i]`` padded the step with i empty elements, so an index of
    10**9 in a log (an edited one, or any file given to show/report) hung the fold."""
    records = list(read_records(SAMPLES / "control.jsonl"))
    run_id = str(records[0]["run_id"])
    honest = RunView.fold(run_id, records)
    step = next(s for plan in honest.plans for s in plan.steps if s.kind == "for_each" and s.items)
    finished = next(
        r for r in records if r.get("step_id") == f"{step.id}[0]" and r["type"] == "step_finished"
    )
    forged = [{**finished, "step_id": f"{step.id}[{index}]"} for index in (step.items, 1000, 10**9)]
    view = RunView.fold(run_id, [*records[:-1], *forged, records[-1]])
    again = next(s for plan in view.plans for s in plan.steps if s.id == step.id)
    assert len(again.elements) == step.items and again.status == step.status


def test_steps_summary_keeps_only_step_records_per_run() -> None:
    """Many non-step records in a run do not change (or grow) what the summary folds."""
    records = _hostile_run()
    noisy = [records[0], *({**records[1], "type": "note", "seq": 100 + i} for i in range(1000)), *records[1:]]
    steps = StepsSummary()
    assert [line for r in noisy for line in steps.add(r)] == []
    assert steps.finish() == list(render_steps(RunView.fold(str(records[0]["run_id"]), records)))


def test_show_of_a_stored_run_ends_with_its_steps(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite://{tmp_path / 'runs.db'}"
    records = _hostile_run()
    with open_store(url) as store:
        log = store.audit_log("r1")
        for record in records:
            log.append(str(record["type"]), **{k: v for k, v in record.items() if k not in _COMMON})
    code, out, err = cli(capsys, "audit", "show", url, "--run", "r1")
    assert code == 0, err
    summary = _summary(out)
    assert summary == list(render_steps(RunView.fold("r1", records)))
    assert "    each  t  failed (0/1 elements)" in "\n".join(summary)
    assert RAW.search(out.replace("\n", "")) is None
