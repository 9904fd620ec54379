"""Plans as a model writes them (issue 25): long descriptive ids, types across stages,
`when` defaults of any JSON value, and one repair of a fixable rejection.

Every run here goes through the whole engine with a scripted model (`pte.testing`), is
verified, and replays to the same records.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from pte import (
    AuditLog,
    Engine,
    EngineConfig,
    PlanRejected,
    ReasonCode,
    Registry,
    RunResult,
    compile_plan,
    verify,
)

# private: the reason-code groups
from pte._core import REPAIRABLE_REASONS
from pte.audit import canonical_json, read_records
from pte.engine import ReplayClient
from pte.runs import replay_file, resume_file
from pte.testing import DataCase, ScriptedModel, data_plans, example_registry, invalid_plan_cases, json_values
from pte.testing.cookbook import cookbook_registry, ref, step

WORKSPACE = cookbook_registry("workspace")


def plan(*steps: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"pte_plan": "1", "steps": list(steps), **extra}


def run(
    answers: list[Any], tmp_path: Path, registry: Registry = WORKSPACE, **config: Any
) -> tuple[RunResult, list[dict[str, Any]]]:
    """Run with the answers in order; the log verifies and replays the same."""
    log = tmp_path / "run.jsonl"
    llm = ReplayClient([a if isinstance(a, str) else json.dumps(a) for a in answers])
    engine = Engine(registry, llm, config=EngineConfig(llm_answer=False, **config))
    with AuditLog(log) as audit:
        result = engine.run("a request", audit)
    assert verify(log).ok
    report = replay_file(log, registry=registry)
    assert report.ok, report.render()
    return result, read_records(log)


# --- step ids -----------------------------------------------------------------------------------

LONG_ID = "family_reunion_emails_oldest_first_then_the_newest_ones_sorted"[:60]


def test_a_60_character_step_id_compiles_runs_and_is_recorded(tmp_path: Path) -> None:
    assert len(LONG_ID) == 60
    doc = plan(
        step(LONG_ID, "search_emails", query="Budget review"),
        step("how_many_budget_review_emails_were_found", "count", records=ref(f"{LONG_ID}/emails")),
        result=ref("how_many_budget_review_emails_were_found/count"),
    )
    result, records = run([doc], tmp_path)
    assert result.ok, result.message
    assert result.result == 2
    assert LONG_ID in {r.get("step_id") for r in records}


def test_a_65_character_step_id_is_still_a_schema_violation() -> None:
    doc = plan(step("a" * 65, "list_files"))
    with pytest.raises(PlanRejected) as info:
        compile_plan(json.dumps(doc), WORKSPACE)
    assert info.value.reason is ReasonCode.SCHEMA_VIOLATION


# --- types across stages ------------------------------------------------------------------------


def stage_one(*steps: dict[str, Any], hand: dict[str, Any]) -> dict[str, Any]:
    return plan(*steps, **{"continue": hand})


@pytest.mark.parametrize(
    ("generic_step", "pointer", "expected"),
    [
        (
            step("files_with_content", "pick", records=ref("all_files/files"), fields=["id", "content"]),
            "files_with_content/records/2/content",
            "Pancakes",
        ),
        (
            step(
                "latest_file",
                "extreme_by",
                records=ref("all_files/files"),
                field="last_modified",
                which="max",
            ),
            "latest_file/record/filename",
            "team-roster.csv",
        ),
        (
            step("files_by_size", "sort_records", records=ref("all_files/files"), by="size", descending=True),
            "files_by_size/records/0/filename",
            "team-roster.csv",
        ),
    ],
    ids=["pick", "extreme_by", "sort_records"],
)
def test_a_later_stage_references_an_earlier_generic_step_by_its_exact_type(
    generic_step: dict[str, Any], pointer: str, expected: str, tmp_path: Path
) -> None:
    first = stage_one(step("all_files", "list_files"), generic_step, hand={"shown": ref(generic_step["id"])})
    second = plan(
        step("first_line", "format_text", template="{v}", values={"v": ref(pointer)}),
        result=ref("first_line/text"),
    )
    result, records = run([first, second], tmp_path)
    assert result.ok, result.message
    assert str(result.result).startswith(expected)
    assert [r["origin"] for r in records if r["type"] == "plan_accepted"] == ["planner", "stage"]


def test_the_stage_planner_is_shown_the_type_a_generic_step_was_compiled_with(tmp_path: Path) -> None:
    """A model can only write `files_with_content/records/0/content` if it sees that `pick`
    kept `content`: the stage prompt lists each completed generic step with its instantiation."""
    generic = step("files_with_content", "pick", records=ref("all_files/files"), fields=["id", "content"])
    first = stage_one(
        step("all_files", "list_files"), generic, hand={"shown": ref("files_with_content/count")}
    )
    second = plan(step("n", "format_text", template="{v}", values={"v": ref("files_with_content/count")}))
    result, records = run([first, second], tmp_path)
    assert result.ok, result.message
    (stage_call,) = [r for r in records if r["type"] == "llm_call" and r["role"] == "stage"]
    prompt = "\n".join(m["content"] for m in stage_call["messages"])
    (line,) = [ln for ln in prompt.splitlines() if ln.startswith("- files_with_content (tool pick)")]
    assert "content" in line and "id" in line and "owner" not in line, line
    assert "- all_files (tool list_files)\n" in prompt + "\n"  # a plain tool: its catalogue type


def test_a_later_stage_reference_outside_the_instantiation_is_refused(tmp_path: Path) -> None:
    # `pick` kept id and content only: a later stage cannot read the owner it dropped.
    first = stage_one(
        step("all_files", "list_files"),
        step("files_with_content", "pick", records=ref("all_files/files"), fields=["id", "content"]),
        hand={"shown": ref("files_with_content")},
    )
    second = plan(
        step("owner", "format_text", template="{v}", values={"v": ref("files_with_content/records/0/owner")}),
        result=ref("owner/text"),
    )
    result, _ = run([first, second], tmp_path, max_replans=0)
    assert result.status == "failed_closed"
    assert result.reason is ReasonCode.BAD_REFERENCE
    assert "'/records/0/owner'" in (result.message or "")


def test_compile_plan_checks_prior_steps_against_prior_types() -> None:
    prior = {"picked": "pick"}
    kept = {
        "type": "object",
        "properties": {
            "records": {
                "type": "array",
                "items": {"type": "object", "properties": {"id": {"type": "string"}}},
            },
            "count": {"type": "integer"},
        },
        "required": ["records", "count"],
    }
    doc = plan(step("n", "format_text", template="{v}", values={"v": ref("picked/records/0/id")}))
    with pytest.raises(PlanRejected):  # the generic declaration alone cannot prove the field
        compile_plan(json.dumps(doc), WORKSPACE, prior=prior)
    compile_plan(json.dumps(doc), WORKSPACE, prior=prior, prior_types={"picked": kept})


# --- when defaults of any JSON value ------------------------------------------------------------

PARTY_SEARCH = step("party_emails", "search_emails", query="summer party")  # finds nothing
NEWEST_PARTY_EMAIL = {
    **step(
        "newest_party_email", "extreme_by", records=ref("party_emails/emails"), field="timestamp", which="max"
    ),
    "when": {"nonempty": ref("party_emails/emails")},
    "default": None,
}


def test_a_null_default_is_what_whole_value_readers_get_when_the_step_is_skipped(tmp_path: Path) -> None:
    note = step("note", "format_text", template="newest: {e}", values={"e": ref("newest_party_email")})
    doc = plan(
        PARTY_SEARCH,
        NEWEST_PARTY_EMAIL,
        note,
        result={"email": ref("newest_party_email"), "note": ref("note/text")},
    )
    result, records = run([doc], tmp_path)
    assert result.ok, result.message
    assert result.result == {"email": None, "note": "newest: "}
    skipped = [r for r in records if r["type"] == "condition" and r["step_id"] == "newest_party_email"]
    assert skipped and skipped[0]["outcome"] == "skipped"


def test_a_message_default_is_allowed_too(tmp_path: Path) -> None:
    doc = plan(
        PARTY_SEARCH, {**NEWEST_PARTY_EMAIL, "default": "no party e-mail"}, result=ref("newest_party_email")
    )
    result, _ = run([doc], tmp_path)
    assert result.ok and result.result == "no party e-mail"


def test_a_reader_of_a_field_of_a_null_default_is_refused_with_why(tmp_path: Path) -> None:
    subject = step(
        "subject", "format_text", template="{s}", values={"s": ref("newest_party_email/record/subject")}
    )
    doc = plan(PARTY_SEARCH, NEWEST_PARTY_EMAIL, subject, result=ref("subject/text"))
    with pytest.raises(PlanRejected) as info:
        compile_plan(json.dumps(doc), WORKSPACE)
    assert info.value.reason is ReasonCode.BAD_REFERENCE
    assert (
        "'newest_party_email/record/subject' may be null when 'newest_party_email' is skipped"
        in info.value.message
    )
    assert info.value.path == "$.steps[2].args.values.s"
    # The plan's result reading a field is refused the same way.
    doc = plan(PARTY_SEARCH, NEWEST_PARTY_EMAIL, result=ref("newest_party_email/record/subject"))
    with pytest.raises(PlanRejected, match="may be null when 'newest_party_email' is skipped"):
        compile_plan(json.dumps(doc), WORKSPACE)


def test_a_typed_parameter_does_not_take_a_possibly_null_value() -> None:
    # send_email's subject is a string: the union string | null does not fit it.
    subject = step("pick_subject", "first", records=ref("party_emails/emails"))
    guarded = {**subject, "when": {"nonempty": ref("party_emails/emails")}, "default": None}
    send = step(
        "send", "send_email", recipients=["emma@work.example"], subject=ref("pick_subject"), body="hi"
    )
    with pytest.raises(PlanRejected) as info:
        compile_plan(json.dumps(plan(PARTY_SEARCH, guarded, send)), WORKSPACE)
    assert info.value.reason is ReasonCode.INVALID_ARGS


def _literal_default(value: Any) -> bool:
    """A value a plan can hold as a default: no reference, no integer beyond a double's range."""
    try:
        return "$ref" not in canonical_json(value)
    except ValueError:
        return False


@settings(max_examples=60, deadline=None)
@given(default=json_values().filter(_literal_default), field=st.sampled_from(["record", "count", "x"]))
def test_any_json_default_compiles_and_a_field_reader_needs_the_field_in_it(default: Any, field: str) -> None:
    step_with_default = {**NEWEST_PARTY_EMAIL, "default": default}
    whole = plan(PARTY_SEARCH, step_with_default, result=ref("newest_party_email"))
    compile_plan(json.dumps(whole), WORKSPACE)
    reader = plan(PARTY_SEARCH, step_with_default, result=ref(f"newest_party_email/{field}"))
    fits_tool = isinstance(default, dict) and set(default) == {"record"}
    has_field = isinstance(default, dict) and field in default
    try:
        compile_plan(json.dumps(reader), WORKSPACE)
    except PlanRejected as rejection:
        assert rejection.reason is ReasonCode.BAD_REFERENCE
        assert not has_field or field != "record" or not fits_tool
    else:
        assert field == "record" and (has_field or fits_tool)


# --- repair: a fixable rejection goes back to the planner once ------------------------------------


def scripted_run(
    model: ScriptedModel, tmp_path: Path, request: str = "a request", **config: Any
) -> tuple[RunResult, list[dict[str, Any]]]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    log = tmp_path / "run.jsonl"
    engine = Engine(WORKSPACE, model, config=EngineConfig(llm_answer=False, **config))
    with AuditLog(log) as audit:
        result = engine.run(request, audit)
    assert verify(log).ok
    report = replay_file(log, registry=WORKSPACE)
    assert report.ok and [r.outcome for r in report.runs] == ["same"], report.render()
    return result, read_records(log)


UNREAD = step("unread_emails", "get_unread_emails")
#: `count` of the e-mails list, written with a pointer the output does not have ("/messages").
WRONG_POINTER = plan(
    UNREAD,
    step("how_many_unread", "count", records=ref("unread_emails/messages")),
    result=ref("how_many_unread/count"),
)
FIXED = plan(
    UNREAD,
    step("how_many_unread", "count", records=ref("unread_emails/emails")),
    result=ref("how_many_unread/count"),
)


def test_a_rejected_plan_is_repaired_in_one_replan(tmp_path: Path) -> None:
    model = ScriptedModel(planner=[WRONG_POINTER], repair=[FIXED])
    result, records = scripted_run(model, tmp_path)
    assert result.ok, result.message
    assert result.result == 4
    assert model.roles == ["planner", "repair"] and model.unused() == {}
    kinds = [(r["type"], r.get("origin") or r.get("role")) for r in records if r["type"] != "step_started"]
    assert kinds[:5] == [
        ("run_started", None),
        ("llm_call", "planner"),
        ("plan_rejected", "planner"),
        ("repair", "planner"),
        ("llm_call", "repair"),
    ]
    assert ("plan_accepted", "repair") in kinds
    repair = next(r for r in records if r["type"] == "repair")
    assert repair["attempt"] == 1 and repair["reason"] == "bad_reference"
    assert repair["path"] == "$.steps[1].args.records"
    # The model is shown its own plan and exactly what was wrong with it, where: the request and
    # the rules as the planner was, and of the catalogue the entries of the plan's tools (#37).
    first, messages = model.calls[0]["messages"], model.calls[1]["messages"]
    assert messages[1] == first[1] and len(messages) == len(first) + 2
    rules = first[0]["content"].split("\n\nTools: ")[0]
    assert messages[0]["content"].startswith(rules + "\n\nTools: ")
    assert set(re.findall(r"^([a-z_]+)\(", messages[0]["content"], re.M)) == {"get_unread_emails", "count"}
    assert messages[-2] == {"role": "assistant", "content": json.dumps(WRONG_POINTER)}
    assert "bad_reference at $.steps[1].args.records" in messages[-1]["content"]
    assert "'/messages'" in messages[-1]["content"]
    assert "Literals you write count as request." in messages[-1]["content"]


def test_a_plan_that_is_not_repaired_ends_replans_exhausted(tmp_path: Path) -> None:
    model = ScriptedModel(planner=[WRONG_POINTER], repair=[WRONG_POINTER])
    result, records = scripted_run(model, tmp_path)
    assert result.status == "failed_closed"
    assert result.reason is ReasonCode.REPLANS_EXHAUSTED
    assert "sent back once" in (result.message or "") and "bad_reference" in (result.message or "")
    assert [r["origin"] for r in records if r["type"] == "plan_rejected"] == ["planner", "repair"]
    assert not any(r["type"] == "step_started" for r in records)
    assert result.llm_calls == 2  # one second chance, not max_replans of them


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        ("Sure! I would call get_unread_emails and count them.", ReasonCode.INVALID_JSON),
        ({"pte_plan": "1", "steps": []}, ReasonCode.SCHEMA_VIOLATION),
        (plan(step("wipe", "delete_everything")), ReasonCode.TOOL_NOT_ALLOWED),
        (plan(*[step(f"s{i}", "list_files") for i in range(251)]), ReasonCode.PLAN_TOO_LARGE),
    ],
    ids=["invalid_json", "schema_violation", "tool_not_allowed", "plan_too_large"],
)
def test_faults_a_model_cannot_fix_from_a_reason_still_stop_at_once(
    answer: Any, reason: ReasonCode, tmp_path: Path
) -> None:
    model = ScriptedModel(planner=[answer], repair=[FIXED])
    result, records = scripted_run(model, tmp_path)
    assert result.status == "failed_closed" and result.reason is reason
    assert result.llm_calls == 1 and model.unused() == {"repair": 1}
    assert not any(r["type"] == "repair" for r in records)


def test_max_replans_zero_disables_repair(tmp_path: Path) -> None:
    model = ScriptedModel(planner=[WRONG_POINTER], repair=[FIXED])
    result, _ = scripted_run(model, tmp_path, max_replans=0)
    assert result.reason is ReasonCode.BAD_REFERENCE and model.unused() == {"repair": 1}
    model = ScriptedModel(planner=[WRONG_POINTER], repair=[FIXED])
    result, _ = scripted_run(model, tmp_path / "off", repair=False)
    assert result.reason is ReasonCode.BAD_REFERENCE and model.unused() == {"repair": 1}


def test_a_repair_uses_a_replan(tmp_path: Path) -> None:
    # max_replans=1: the repair takes it, so a later failed step is not replanned.
    failing = plan(
        UNREAD,
        step("how_many_unread", "count", records=ref("unread_emails/emails")),
        step("missing_file", "search_files_by_filename", filename="no-such-file.txt"),
        step("first_missing", "first", records=ref("missing_file/files")),  # fails: an empty list
        result=ref("how_many_unread/count"),
    )
    broken = {
        **failing,
        "steps": [*failing["steps"][:1], step("how_many_unread", "count", records=ref("x/y"))],
    }
    model = ScriptedModel(planner=[broken], repair=[failing])
    result, records = scripted_run(model, tmp_path, max_replans=1)
    assert result.reason is ReasonCode.REPLANS_EXHAUSTED, result.message
    assert "1 replan(s) allowed, all used" in (result.message or "")
    assert not any(r["type"] == "replan" for r in records)


def test_a_run_recorded_before_repair_replays_without_it() -> None:
    assert EngineConfig.from_dict({"max_replans": 2}).repair is False
    assert EngineConfig.from_dict(EngineConfig().to_dict()).repair is True


def test_a_repair_after_untrusted_data_was_shown_cannot_launder_a_literal(tmp_path: Path) -> None:
    # Injection: stage 1 hands an untrusted e-mail to stage 2, whose planner (the attacker's,
    # once it has read it) wires the e-mail's sender into send_email: policy_violation. The
    # repair copies the address as a literal: after untrusted data was shown, a literal is
    # untrusted too, so the repaired plan is refused as well and nothing is sent.
    first = stage_one(
        step("budget_emails", "search_emails", query="Budget review"),
        hand={"latest": ref("budget_emails/emails/1")},
    )
    by_reference = plan(
        step(
            "forward_to_sender",
            "send_email",
            recipients=[ref("budget_emails/emails/1/sender")],
            subject="Numbers",
            body="Attached.",
        ),
        result=ref("forward_to_sender"),
    )
    as_literal = plan(
        step(
            "forward_to_sender",
            "send_email",
            recipients=["lisa@partner.example"],
            subject="Numbers",
            body="x",
        ),
        result=ref("forward_to_sender"),
    )
    model = ScriptedModel(planner=[first], stage=[by_reference], repair=[as_literal])
    result, records = scripted_run(model, tmp_path, planner_data="shown")  # the e-mail is shown
    assert result.reason is ReasonCode.REPLANS_EXHAUSTED
    assert "policy_violation" in (result.message or "")
    assert [r["origin"] for r in records if r["type"] == "plan_rejected"] == ["stage", "repair"]
    assert not any(r["type"] == "step_started" and r["tool"] == "send_email" for r in records)
    assert "count as untrusted" in model.calls[-1]["messages"][-1]["content"]


def test_a_tampered_repair_record_is_caught(tmp_path: Path) -> None:
    model = ScriptedModel(planner=[WRONG_POINTER], repair=[FIXED])
    scripted_run(model, tmp_path)
    log = tmp_path / "run.jsonl"
    lines = log.read_text(encoding="utf-8").splitlines()
    n = next(i for i, line in enumerate(lines) if '"type":"repair"' in line)
    lines[n] = lines[n].replace('"reason":"bad_reference"', '"reason":"invalid_args"')
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert not verify(log).ok


# --- property: a reference valid inside a plan stays valid from a later stage ---------------------


def _pointers(schema: Any, depth: int = 3) -> list[str]:
    """Pointers a value of `schema` has for sure: required properties, and element 0 of lists."""
    if depth == 0 or not isinstance(schema, dict):
        return []
    out: list[str] = []
    if schema.get("type") == "object" or "properties" in schema:
        for name in schema.get("required", []):
            sub = schema.get("properties", {}).get(name)
            if sub is not None and "/" not in name and "~" not in name:
                out += [name, *(f"{name}/{p}" for p in _pointers(sub, depth - 1))]
    if schema.get("type") == "array" and isinstance(schema.get("items"), dict):
        out += [f"0/{p}" for p in _pointers(schema["items"], depth - 1)]
    return out


@settings(max_examples=40, deadline=None)
@given(case=data_plans())
def test_a_later_stage_references_generic_steps_by_their_instantiation(case: DataCase) -> None:
    """Every pointer a generic step's inferred type guarantees can be referenced from a later
    stage: completed steps keep the exact types they were compiled with."""
    first = compile_plan(json.dumps(case.document), case.registry)
    types = {
        s.id: t for s in first.steps if s.for_each is None and (t := first.output_schema(s.id)) is not None
    }
    refs = {
        f"r{i}": ref(f"{sid}/{p}")
        for i, (sid, p) in enumerate((sid, p) for sid, t in types.items() for p in _pointers(t))
    }
    if not refs:
        return
    later = plan(step("stage_two_marker", "count", records=[]), result=refs)
    compile_plan(
        json.dumps(later),
        case.registry,
        prior={s.id: s.tool for s in first.steps},
        prior_lists={s.id for s in first.steps if s.for_each is not None},
        prior_types=types,
    )


def test_resume_rebuilds_the_instantiations_a_later_stage_was_compiled_against(tmp_path: Path) -> None:
    first = stage_one(
        step("all_files", "list_files"),
        step("files_with_content", "pick", records=ref("all_files/files"), fields=["id", "content"]),
        hand={"shown": ref("files_with_content")},
    )
    second = plan(
        step("first_line", "split_text", text=ref("files_with_content/records/0/content")),
        result=ref("first_line/values/0"),
    )
    result, _ = run([first, second], tmp_path)
    log = tmp_path / "run.jsonl"
    lines = log.read_text(encoding="utf-8").splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if '"origin":"stage"' in line and "plan_accepted" in line)
    crashed = tmp_path / "crashed.jsonl"
    crashed.write_text("".join(lines[: cut + 1]), encoding="utf-8")  # the process died here
    resumed = resume_file(crashed, WORKSPACE)
    assert resumed.ok, resumed.message
    assert resumed.result == result.result == "# Trip to Lisbon"
    assert verify(crashed).ok


# --- property: exactly the fixable rejections are sent back, once -------------------------------

EXAMPLE = example_registry()


@settings(max_examples=80, deadline=None)
@given(case=invalid_plan_cases(EXAMPLE))
def test_exactly_the_fixable_rejections_are_sent_back_once(case: tuple[ReasonCode, str]) -> None:
    reason, text = case
    assume(text.strip())  # an empty answer is a failed model call (llm_error), not a plan
    try:  # a lone surrogate is not text a model client can return (the log records it redacted)
        text.encode("utf-8")
    except UnicodeEncodeError:
        assume(False)
    model = ScriptedModel(planner=[text], repair=[text])  # the model writes the same plan again
    audit = AuditLog(None)
    result = Engine(EXAMPLE, model, config=EngineConfig(llm_answer=False)).run("a request", audit)
    repairs = [r for r in audit.records if r["type"] == "repair"]
    rejected = [r["reason"] for r in audit.records if r["type"] == "plan_rejected"]
    if reason in REPAIRABLE_REASONS:
        assert [r["reason"] for r in repairs] == [reason.value] and rejected == [reason.value] * 2
        assert result.reason is ReasonCode.REPLANS_EXHAUSTED and model.roles == ["planner", "repair"]
    else:
        assert repairs == [] and rejected == [reason.value] and model.roles == ["planner"]
        assert result.reason is reason
    assert not any(r["type"] == "step_started" for r in audit.records)
