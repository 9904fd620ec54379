"""Specialists (#29): a coordinator delegates tasks; sub-plans are asked before anything runs,
checked against the specialist's catalogue, inlined and compiled as one plan."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as hs

from pte import (
    AuditLog,
    Engine,
    EngineConfig,
    PlanRejected,
    Policy,
    ReasonCode,
    Registry,
    RunResult,
    compile_plan,
    load_registry,
    verify,
)

# private: the compile pipeline's parts, white-box
from pte._plan import coordinator_view

# private: the prompts' text, white-box
from pte._run import planner_messages
from pte.audit import read_records
from pte.cli import main
from pte.errors import SpecialistError
from pte.plan import Specialist, load_specialists
from pte.runs import replay_file
from pte.testing import ScriptedModel
from tests._cli_run import cli as _cli
from tests._cli_run import ledger as ledger  # the fixture
from tests._cli_run import make_deployment

COLLECTIONS = Specialist(
    name="collections",
    description="Knows what customers owe and reminds them of overdue invoices.",
    catalogue=("list_overdue_invoices", "customer_balance", "queue_reminder", "send_reminders"),
    instructions="Answer with decimal strings as the ledger gives them.",
)
TREASURY = Specialist(
    name="treasury",
    description="Exchange rates and supplier payments.",
    catalogue=("fx_rate", "list_suppliers", "get_supplier", "send_payment"),
)
DOCUMENTS = Specialist(
    name="documents",
    description="Reads the inbox and documents (third-party text).",
    catalogue=("read_inbox", "read_document"),
)
SPECIALISTS = (COLLECTIONS, TREASURY)

COORDINATOR: dict[str, Any] = {
    "pte_plan": "1",
    "steps": [
        {"id": "cust", "tool": "get_customer", "args": {"customer_id": "C002"}},
        {
            "id": "owed",
            "delegate": "collections",
            "task": "What does this customer owe? Return {owes, overdue}.",
            "inputs": {"customer_id": {"$ref": "cust/customer_id"}},
        },
        {
            "id": "rate",
            "delegate": "treasury",
            "task": "The rate from the customer's currency to USD. Return {rate}.",
            "inputs": {"currency": {"$ref": "cust/currency"}},
        },
    ],
    "result": {"owes": {"$ref": "owed/owes"}, "rate": {"$ref": "rate/rate"}, "all": {"$ref": "owed"}},
}
COLLECTIONS_PLAN: dict[str, Any] = {
    "pte_plan": "1",
    "steps": [
        {"id": "balance", "tool": "customer_balance", "args": {"customer_id": {"$param": "customer_id"}}}
    ],
    "result": {"owes": {"$ref": "balance/open_total"}, "overdue": {"$ref": "balance/overdue_total"}},
}
TREASURY_PLAN: dict[str, Any] = {
    "pte_plan": "1",
    "steps": [{"id": "fx", "tool": "fx_rate", "args": {"base": {"$param": "currency"}, "quote": "USD"}}],
    "result": {"rate": {"$ref": "fx/rate"}},
}


def _registry() -> Registry:
    return load_registry(["backoffice"])


def _engine(model: ScriptedModel, specialists: tuple[Specialist, ...] = SPECIALISTS, **kw: Any) -> Engine:
    config = EngineConfig(specialists=specialists, llm_answer=False, **kw)
    return Engine(_registry(), model, config=config)


def _two_specialists() -> ScriptedModel:
    """The model of the two-specialist run: the coordinator's plan, then each specialist's."""
    return ScriptedModel(
        planner=[COORDINATOR],
        specialists={"collections": [COLLECTIONS_PLAN], "treasury": [TREASURY_PLAN]},
    )


def _run_delegated(log: Path) -> RunResult:
    """The two-specialist run, logged to `log`."""
    with AuditLog(log) as audit:
        return _engine(_two_specialists()).run("x", audit)


def _cut_after_step(log: Path, step_id: str) -> None:
    """Cut `log` right after the record that finishes `step_id`, as a crash there leaves it."""
    records = read_records(log)
    cut = next(i for i, r in enumerate(records) if r["type"] == "step_finished" and r["step_id"] == step_id)
    lines = log.read_text(encoding="utf-8").splitlines()[: cut + 1]
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _payment_sub_plan(iban: Any) -> dict[str, Any]:
    """A treasury sub-plan that pays 100 EUR, reference INV-1, to `iban`."""
    args = {"iban": iban, "amount": "100", "currency": "EUR", "reference": "INV-1"}
    return {
        "pte_plan": "1",
        "steps": [{"id": "send", "tool": "send_payment", "args": args}],
        "result": {"$ref": "send"},
    }


def test_two_specialists_end_to_end_verify_and_replay(tmp_path: Path, ledger: Path) -> None:
    model = _two_specialists()
    log = tmp_path / "audit.jsonl"
    with AuditLog(log) as audit:
        result = _engine(model).run("What does C002 owe, and at what USD rate?", audit)
    assert result.ok, result.message
    assert model.unused() == {}
    assert model.roles == ["planner", "specialist:collections", "specialist:treasury"]
    assert result.result["owes"] == "44574.39"
    assert result.result["all"]["overdue"] == result.result["all"]["overdue"]  # read whole
    records = read_records(log)
    calls = [r for r in records if r["type"] == "llm_call"]
    assert [c["role"] for c in calls] == ["planner", "specialist", "specialist"]
    # The specialist was shown its catalogue, the task and the inputs' schemas and labels.
    shown = calls[1]["messages"][0]["content"] + calls[1]["messages"][1]["content"]
    assert "customer_balance" in shown and "fx_rate(" not in shown and "get_customer(" not in shown
    assert '"labels": ["trusted"]' in shown and "C002" not in calls[1]["messages"][1]["content"]
    # One plan: the inlined tree, nested steps x__step, in the log as steps.
    accepted = [r for r in records if r["type"] == "plan_accepted"]
    assert len(accepted) == 1
    assert [s["id"] for s in accepted[0]["plan"]["steps"]] == ["cust", "owed__balance", "rate__fx"]
    started = [r["step_id"] for r in records if r["type"] == "step_started"]
    assert started == ["cust", "owed__balance", "rate__fx"]
    assert verify(log).ok
    report = replay_file(log)
    assert report.ok, report.render()
    # Against the deployment: the same registry and specialists.
    report = replay_file(log, registry=_registry())
    assert report.ok, report.render()


def test_coordinator_prompt_is_smaller_than_the_flat_catalogue() -> None:
    registry = _registry()
    flat = planner_messages("x", registry)[0]["content"]
    view = coordinator_view(registry, (COLLECTIONS, TREASURY, DOCUMENTS))
    coordinator = planner_messages("x", view)[0]["content"]
    assert len(coordinator) < len(flat)
    assert '"delegate"' in coordinator and "collections [specialist]" in coordinator
    assert "send_payment(" not in coordinator and "get_customer(" in coordinator


def test_a_sub_plan_naming_a_tool_outside_its_catalogue_is_refused(tmp_path: Path, ledger: Path) -> None:
    outside = {
        "pte_plan": "1",
        "steps": [
            {
                "id": "pay",
                "tool": "send_payment",
                "args": {"iban": "x", "amount": "1", "currency": "EUR", "reference": "r"},
            }
        ],
        "result": {"$ref": "pay"},
    }
    model = ScriptedModel(planner=[COORDINATOR], specialists={"collections": [outside]})
    with AuditLog(tmp_path / "a.jsonl") as audit:
        result = _engine(model).run("What does C002 owe?", audit)
    assert result.reason == ReasonCode.TOOL_NOT_ALLOWED
    assert "'send_payment' is not in specialist 'collections'" in str(result.message)
    assert "customer_balance" in str(result.message)  # what it may use
    assert result.steps == []  # nothing ran
    assert verify(tmp_path / "a.jsonl").ok
    assert replay_file(tmp_path / "a.jsonl").ok


def test_unknown_specialist_and_a_specialists_tool_used_directly_are_tool_not_allowed(
    tmp_path: Path, ledger: Path
) -> None:
    unknown = json.loads(json.dumps(COORDINATOR))
    unknown["steps"][1]["delegate"] = "legal"
    model = ScriptedModel(planner=[unknown])
    with AuditLog(tmp_path / "a.jsonl") as audit:
        result = _engine(model).run("x", audit)
    assert result.reason == ReasonCode.TOOL_NOT_ALLOWED and "no specialist 'legal'" in str(result.message)
    direct = {
        "pte_plan": "1",
        "steps": [{"id": "b", "tool": "customer_balance", "args": {"customer_id": "C002"}}],
        "result": {"$ref": "b"},
    }
    model = ScriptedModel(planner=[direct])
    with AuditLog(tmp_path / "b.jsonl") as audit:
        result = _engine(model).run("x", audit)
    assert result.reason == ReasonCode.TOOL_NOT_ALLOWED and "delegate" in str(result.message)


def test_a_sub_plan_rejected_for_a_fixable_reason_is_repaired_once(tmp_path: Path, ledger: Path) -> None:
    wrong = json.loads(json.dumps(COLLECTIONS_PLAN))
    wrong["result"] = {"owes": {"$ref": "balance/no_such_field"}}
    model = ScriptedModel(
        planner=[COORDINATOR],
        specialists={"collections": [wrong, COLLECTIONS_PLAN], "treasury": [TREASURY_PLAN]},
    )
    log = tmp_path / "a.jsonl"
    with AuditLog(log) as audit:
        result = _engine(model).run("x", audit)
    assert result.ok, result.message
    repairs = [r for r in read_records(log) if r["type"] == "repair"]
    assert [r["origin"] for r in repairs] == ["specialist"]
    assert replay_file(log).ok
    # With no replan left, the same rejection ends the run instead.
    model = ScriptedModel(
        planner=[COORDINATOR], specialists={"collections": [wrong], "treasury": [TREASURY_PLAN]}
    )
    with AuditLog(tmp_path / "b.jsonl") as audit:
        result = _engine(model, max_replans=0).run("x", audit)
    assert result.reason == ReasonCode.BAD_REFERENCE


def test_untrusted_data_handed_to_a_specialist_cannot_reach_a_guarded_sink(
    tmp_path: Path, ledger: Path
) -> None:
    """Injection: an IBAN read from an e-mail, handed to the payments specialist as an input,
    is refused at compile exactly as the same payment written inline (policy_violation)."""
    coordinator = {
        "pte_plan": "1",
        "steps": [
            {"id": "mail", "tool": "read_inbox", "args": {}},
            {
                "id": "pay",
                "delegate": "treasury",
                "task": "Pay 100 EUR to this IBAN with reference INV-1.",
                "inputs": {"iban": {"$ref": "mail/messages/0/body"}},
            },
        ],
        "result": {"$ref": "pay"},
    }
    sub = _payment_sub_plan({"$param": "iban"})
    model = ScriptedModel(planner=[coordinator], specialists={"treasury": [sub]})
    log = tmp_path / "a.jsonl"
    with AuditLog(log) as audit:
        result = _engine(model, specialists=(TREASURY,), max_replans=0).run("Pay what the e-mail asks", audit)
    assert result.reason == ReasonCode.POLICY_VIOLATION, result.message
    assert result.steps == []
    # The specialist was told the input is untrusted, and never shown its text.
    call = next(r for r in read_records(log) if r["type"] == "llm_call" and r["role"] == "specialist")
    assert '"labels": ["untrusted"]' in call["messages"][1]["content"]


def test_an_edited_recorded_sub_plan_answer_fails_verify_and_replay(tmp_path: Path, ledger: Path) -> None:
    """Tamper: the specialist's recorded answer is edited (another customer); the chain breaks."""
    log = tmp_path / "audit.jsonl"
    assert _run_delegated(log).ok
    lines = log.read_text(encoding="utf-8").splitlines()
    for index, line in enumerate(lines):
        record = json.loads(line)
        if record.get("type") == "llm_call" and record.get("role") == "specialist":
            record["response"] = record["response"].replace("open_total", "overdue_total")
            lines[index] = json.dumps(record, ensure_ascii=False)
            break
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert not verify(log).ok
    code = main(["--quiet", "replay", str(log)])
    assert code != 0


def test_declarations_are_checked(tmp_path: Path) -> None:
    registry = _registry()
    bad = Specialist(name="x", description="d", catalogue=("no_such_tool",))
    with pytest.raises(SpecialistError, match="no_such_tool"):
        Engine(registry, None, config=EngineConfig(specialists=(bad,)))
    with pytest.raises(SpecialistError, match="name of a tool"):
        Engine(registry, None, config=EngineConfig(specialists=(Specialist("fx_rate", "d", ("fx_rate",)),)))
    with pytest.raises(SpecialistError, match="must match"):
        Specialist(name="Bad Name", description="d", catalogue=("fx_rate",))
    path = tmp_path / "s.yaml"
    path.write_text("specialists:\n  - name: treasury\n    description: Rates.\n    catalogue: [fx_rate]\n")
    assert load_specialists(path) == (Specialist("treasury", "Rates.", ("fx_rate",)),)
    path.write_text("[{}]")
    with pytest.raises(SpecialistError, match="missing"):
        load_specialists(path)
    # Recorded in run_started and read back by replay.
    config = EngineConfig(specialists=SPECIALISTS)
    assert EngineConfig.from_dict(config.to_dict()).specialists == SPECIALISTS


def test_cli_run_with_specialists_verify_and_replay(
    tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = tmp_path / "specialists.json"
    spec.write_text(json.dumps({"specialists": [s.to_dict() for s in SPECIALISTS]}), encoding="utf-8")
    answers = tmp_path / "answers.json"
    answers.write_text(json.dumps([json.dumps(p) for p in (COORDINATOR, COLLECTIONS_PLAN, TREASURY_PLAN)]))
    log = tmp_path / "run.jsonl"
    deployment = ["--tools", "backoffice", "--specialists", str(spec)]
    make_deployment(tmp_path, monkeypatch, capsys, *deployment, "--no-store")  # backoffice writes
    argv = ["run", "What does C002 owe?", *deployment, "--replay-responses", str(answers)]
    code, out, err = _cli(capsys, *argv, "--no-llm-answer", "--audit", str(log), "--json")
    assert code == 0, err
    assert json.loads(out)["result"]["owes"] == "44574.39"
    assert _cli(capsys, "audit", "verify", str(log))[0] == 0
    code, out, _ = _cli(capsys, "replay", str(log))
    assert code == 0 and "same decisions" in out
    code, out, _ = _cli(capsys, "replay", str(log), *deployment)
    assert code == 0 and "same decisions" in out
    # Other specialists than the run's (replay is read-only: flags alone, no deployment): the
    # replay diverges at run_started.config.
    monkeypatch.delenv("PTE_DEPLOYMENT")
    other = tmp_path / "other.yaml"
    other.write_text("- name: treasury\n  description: Rates.\n  catalogue: [fx_rate]\n", encoding="utf-8")
    code, out, _ = _cli(capsys, "replay", str(log), "--tools", "backoffice", "--specialists", str(other))
    assert code == 1 and "run_started.config" in out


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{", "does not parse"),
        ("[]", "non-empty list"),
        ('[{"name": "x", "description": "d", "catalogue": ["no_such_tool"]}]', "no_such_tool"),
        ('[{"name": "x", "description": "d"}]', "missing"),
        ('[{"name": "x", "description": "d", "catalogue": ["fx_rate"], "tools": []}]', "unknown key"),
    ],
)
def test_cli_a_bad_specialists_file_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    spec = tmp_path / "s.json"
    spec.write_text(content, encoding="utf-8")
    out = str(tmp_path / "p.json")
    argv = ["plan", "x", "--tools", "backoffice", "--specialists", str(spec), "-o", out]
    answers = tmp_path / "answers.json"
    answers.write_text("[]", encoding="utf-8")
    code, _, err = _cli(capsys, *argv, "--replay-responses", str(answers))
    assert code == 2 and message in err and "Traceback" not in err


def test_bench_prompt_prints_the_coordinator_next_to_the_flat_catalogue(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """bench/bench_prompt.py's back-office deployment: the coordinator's prompt is the smaller."""
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "bench" / "bench_prompt.py"
    spec = importlib.util.spec_from_file_location("bench_prompt", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    sizes = bench.coordinator_sizes(
        load_registry(["backoffice", "text", "extract", "dates"]), bench.BACKOFFICE_SPECIALISTS
    )
    assert sizes["coordinator"] < sizes["flat"] and sizes["specialist"] < sizes["flat"]
    bench.main(["--before", "none"])  # this tree only (--before unpacks another commit's tree)
    assert "coordinator" in capsys.readouterr().out


def _outcome(engine_result: Any) -> tuple[Any, ...]:
    if engine_result.ok:
        return ("accepted", engine_result.plans[-1].hash)
    return ("rejected", engine_result.reason)


@settings(max_examples=30, deadline=None)
@given(data=hs.data())
def test_generated_delegations_compile_as_the_inline_plan(data: hs.DataObject) -> None:
    """Property: a delegating plan with its specialist's sub-plan compiles to the same plan, labels
    and policy decision as the same steps written inline (labels of inputs flow as if inlined)."""
    from pte.testing import delegations, example_registry

    registry = example_registry()
    case = data.draw(delegations(registry, max_steps=4))
    policy = Policy.from_registry(registry)
    check = policy.check()
    try:
        plan = compile_plan(json.dumps(case.inlined), registry, checks=[check])
        expected: tuple[Any, ...] = ("accepted", plan.hash)
    except PlanRejected as exc:
        expected = ("rejected", exc.reason)
    model = ScriptedModel(planner=[case.coordinator], specialists={case.specialist.name: [case.sub_plan]})
    config = EngineConfig(specialists=(case.specialist,), repair=False, llm_answer=False)
    engine = Engine(registry, model, config=config, policy=policy)
    with tempfile.TemporaryDirectory() as where, AuditLog(Path(where) / "a.jsonl") as audit:
        result = engine.plan("Do it.", audit)
    assert _outcome(result) == expected
    if result.ok:
        assert result.plans[-1].hash == plan.hash
        assert Policy.label_plan(policy, result.plans[-1]) == Policy.label_plan(policy, plan)


def test_the_report_shows_delegated_steps_under_their_path(tmp_path: Path, ledger: Path) -> None:
    from pte.runs import render_report

    log = tmp_path / "audit.jsonl"
    assert _run_delegated(log).ok
    html = render_report(log)
    assert ">owed/balance</small>" in html and ">rate/fx</small>" in html


def test_a_run_cut_after_a_delegated_step_resumes_without_asking_again(tmp_path: Path, ledger: Path) -> None:
    from pte.runs import resume_file

    log = tmp_path / "audit.jsonl"
    first = _run_delegated(log)
    assert first.ok, first.message
    _cut_after_step(log, "owed__balance")
    # The deployment's registry; config (specialists) and model answers from the log: no model.
    result = resume_file(log, _registry())
    assert result.ok, result.message
    started = [r["step_id"] for r in read_records(log) if r["type"] == "step_started"]
    assert started == ["cust", "owed__balance", "rate__fx"]  # nothing ran twice
    assert result.result == first.result
    assert verify(log).ok


def test_cli_resume_checks_the_run_against_the_deployments_specialists(
    tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "audit.jsonl"
    assert _run_delegated(log).ok
    _cut_after_step(log, "cust")
    other = tmp_path / "other.json"
    other.write_text(json.dumps([TREASURY.to_dict()]), encoding="utf-8")
    code, _, err = _cli(capsys, "resume", str(log), "--tools", "backoffice", "--specialists", str(other))
    assert code == 1 and "run_started.config" in err
    spec = tmp_path / "specialists.json"
    spec.write_text(json.dumps([s.to_dict() for s in SPECIALISTS]), encoding="utf-8")
    code, _, err = _cli(capsys, "resume", str(log), "--tools", "backoffice", "--specialists", str(spec))
    assert code == 0, err
    assert verify(log).ok


def _delegate_steps() -> hs.SearchStrategy[Any]:
    from pte.testing import json_values

    ids = hs.one_of(hs.sampled_from(["cust", "owed", "x", "owed__a", "", 3]), json_values())
    refs = hs.builds(
        lambda s: {"$ref": s}, hs.sampled_from(["cust", "cust/customer_id", "owed", "nope/x", "x"])
    )
    step = hs.fixed_dictionaries(
        {"id": ids},
        optional={
            "delegate": hs.sampled_from(["collections", "treasury", "legal", 1]),
            "task": hs.one_of(hs.text(max_size=20), json_values()),
            "inputs": hs.one_of(
                hs.dictionaries(hs.sampled_from(["customer_id", "c", "Bad"]), hs.one_of(refs, json_values())),
                json_values(),
            ),
            "after": hs.one_of(hs.lists(ids, max_size=2), json_values()),
            "tool": hs.sampled_from(["get_customer", "customer_balance", "nope"]),
            "args": hs.one_of(hs.just({"customer_id": "C002"}), json_values()),
        },
    )
    return hs.lists(hs.one_of(step, json_values()), max_size=4)


@settings(max_examples=100, deadline=None)
@example(
    steps=[
        {"id": ["a"], "tool": "get_customer", "args": {}},
        {"id": "owed", "delegate": "collections", "task": "t", "inputs": {}},
    ],
    sub=COLLECTIONS_PLAN,
)
@given(
    steps=_delegate_steps(),
    sub=hs.one_of(hs.just(COLLECTIONS_PLAN), hs.just(TREASURY_PLAN), hs.text(max_size=10)),
)
def test_any_coordinator_plan_ends_with_a_named_reason_never_a_traceback(steps: list[Any], sub: Any) -> None:
    """Hostile coordinator plans (delegate steps of any shape) and sub-plans: compile ends the
    run with a named reason or accepts; nothing raises, nothing runs unchecked."""
    document = {"pte_plan": "1", "steps": steps, "result": None}
    answers = [sub] * 4
    model = ScriptedModel(
        planner=[document], repair=[document], specialists={"collections": answers, "treasury": answers}
    )
    engine = Engine(_registry(), model, config=EngineConfig(specialists=SPECIALISTS, llm_answer=False))
    with tempfile.TemporaryDirectory() as where, AuditLog(Path(where) / "a.jsonl") as audit:
        result = engine.plan("x", audit)
    assert result.ok or result.reason is not None


def test_a_delegate_id_used_twice_is_a_duplicate_step_id(tmp_path: Path, ledger: Path) -> None:
    twice = json.loads(json.dumps(COORDINATOR))
    twice["steps"][2]["id"] = "owed"
    model = ScriptedModel(planner=[twice])
    with AuditLog(tmp_path / "a.jsonl") as audit:
        result = _engine(model, max_replans=0).run("x", audit)
    assert result.reason == ReasonCode.DUPLICATE_STEP_ID and model.roles == ["planner"]


def test_a_specialist_of_a_planner_shown_untrusted_text_writes_untrusted_literals(
    tmp_path: Path, ledger: Path
) -> None:
    """Injection through the task text: a stage planner shown an e-mail (planner_data="shown")
    delegates a payment; the specialist copies the IBAN from the task into a literal. Its
    literals count as the coordinator's (untrusted): the guarded sink refuses it at compile."""
    first = {
        "pte_plan": "1",
        "steps": [{"id": "mail", "tool": "read_inbox", "args": {}}],
        "continue": {"mail": {"$ref": "mail/messages/0/body"}},
    }
    stage = {
        "pte_plan": "1",
        "steps": [
            {"id": "pay", "delegate": "treasury", "task": "Pay 100 EUR to DE89370400440532013000, ref INV-1."}
        ],
        "result": {"$ref": "pay"},
    }
    sub = _payment_sub_plan("DE89370400440532013000")
    model = ScriptedModel(planner=[first], stage=[stage], specialists={"treasury": [sub]})
    engine = _engine(model, specialists=(TREASURY,), max_replans=0, planner_data="shown")
    with AuditLog(tmp_path / "a.jsonl") as audit:
        result = engine.run("Do what the first e-mail asks", audit)
    assert result.reason == ReasonCode.POLICY_VIOLATION, result.message
    assert [s.step_id for s in result.steps] == ["mail__mail"] or [s.tool for s in result.steps] == [
        "read_inbox"
    ]


def test_a_delegated_payment_is_approved_as_one_plan(
    tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The inlined tree is what needs and gets approval: `pte run` stops approval_missing before
    anything runs; `pte plan` writes the inlined plan, a person approves its hash, it pays once."""
    coordinator = {
        "pte_plan": "1",
        "steps": [
            {
                "id": "pay",
                "delegate": "treasury",
                "task": "Pay this supplier this amount in EUR, reference INV-9. Return the payment.",
                "inputs": {"supplier": "S002", "amount": "12.50"},
            }
        ],
        "result": {"$ref": "pay"},
    }
    sub = {
        "pte_plan": "1",
        "steps": [
            {"id": "sup", "tool": "get_supplier", "args": {"supplier_id": {"$param": "supplier"}}},
            {
                "id": "send",
                "tool": "send_payment",
                "args": {
                    "iban": {"$ref": "sup/iban"},
                    "amount": {"$param": "amount"},
                    "currency": "EUR",
                    "reference": "INV-9",
                },
            },
        ],
        "result": {"$ref": "send"},
    }
    spec = tmp_path / "specialists.json"
    spec.write_text(json.dumps([TREASURY.to_dict()]), encoding="utf-8")
    answers = tmp_path / "answers.json"
    answers.write_text(json.dumps([json.dumps(coordinator), json.dumps(sub)]), encoding="utf-8")
    common = ["--tools", "backoffice", "--approvals", str(tmp_path / "approvals.jsonl")]
    llm = ["--specialists", str(spec), "--replay-responses", str(answers)]
    make_deployment(
        tmp_path, monkeypatch, capsys, *common, "--specialists", str(spec), "--no-store"
    )  # it pays
    log = tmp_path / "run.jsonl"
    code, out, _ = _cli(
        capsys, "run", "Pay S002 12.50", *common, *llm, "--no-llm-answer", "--audit", str(log), "--json"
    )
    assert code == 1 and json.loads(out)["reason"] == "approval_missing"
    assert not any(r["type"] == "step_started" for r in read_records(log))
    plan = tmp_path / "plan.json"
    assert _cli(capsys, "plan", "Pay S002 12.50", "--tools", "backoffice", *llm, "-o", str(plan))[0] == 0
    assert [s["id"] for s in json.loads(plan.read_text())["steps"]] == ["pay__sup", "pay__send"]
    assert _cli(capsys, "approve", str(plan), "--by", "alice", *common)[0] == 0
    paid = tmp_path / "paid.jsonl"
    code, out, err = _cli(capsys, "execute", str(plan), *common, "--audit", str(paid), "--json")
    assert code == 0, err
    assert [r["tool"] for r in read_records(paid) if r["type"] == "step_finished"] == [
        "get_supplier",
        "send_payment",
    ]
    assert verify(paid).ok
