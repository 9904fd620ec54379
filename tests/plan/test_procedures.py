"""Procedures (#29): files loaded against the allow-list, calls inlined at compile, evidence in the log."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs
from pydantic import BaseModel

from pte import (
    AuditLog,
    Engine,
    PlanRejected,
    Policy,
    ReasonCode,
    Registry,
    compile_plan,
    load_registry,
    tool,
    verify,
)

# private: the compile pipeline's parts, white-box
from pte._plan import check_inlined_ids, step_path
from pte.audit import read_records
from pte.errors import ProcedureError
from pte.plan import Procedure, load_procedures
from pte.runs import replay_file
from tests._cli_run import cli as _cli
from tests._cli_run import ledger as ledger  # the fixture
from tests._cli_run import make_deployment

BALANCE_REPORT: dict[str, Any] = {
    "pte_procedure": "1",
    "name": "balance_report",
    "description": "What one customer owes, the overdue part too.",
    "parameters": {
        "type": "object",
        "properties": {"customer_id": {"type": "string"}},
        "required": ["customer_id"],
    },
    "plan": {
        "pte_plan": "1",
        "steps": [
            {"id": "balance", "tool": "customer_balance", "args": {"customer_id": {"$param": "customer_id"}}}
        ],
        "result": {"owes": {"$ref": "balance/open_total"}, "overdue": {"$ref": "balance/overdue_total"}},
    },
}

TWO_CALLS: dict[str, Any] = {
    "pte_plan": "1",
    "steps": [
        {"id": "first", "tool": "balance_report", "args": {"customer_id": "C002"}},
        {"id": "second", "tool": "balance_report", "args": {"customer_id": "C004"}},
    ],
    "result": {"c002": {"$ref": "first/owes"}, "c004": {"$ref": "second"}},
}

PAY_SUPPLIER: dict[str, Any] = {
    "pte_procedure": "1",
    "name": "pay_supplier",
    "description": "Pay an amount to an IBAN with a reference.",
    "parameters": {
        "type": "object",
        "properties": {
            "iban": {"type": "string"},
            "amount": {"type": "string"},
            "reference": {"type": "string"},
        },
        "required": ["iban", "amount", "reference"],
    },
    "plan": {
        "pte_plan": "1",
        "steps": [
            {
                "id": "pay",
                "tool": "send_payment",
                "args": {
                    "iban": {"$param": "iban"},
                    "amount": {"$param": "amount"},
                    "currency": "EUR",
                    "reference": {"$param": "reference"},
                },
            }
        ],
        "result": {"$ref": "pay"},
    },
}


def _folder(tmp_path: Path, *docs: dict[str, Any]) -> Path:
    folder = tmp_path / "procedures"
    folder.mkdir(exist_ok=True)
    for doc in docs:
        (folder / f"{doc['name']}.json").write_text(json.dumps(doc), encoding="utf-8")
    return folder


def test_execute_calls_one_procedure_twice_verify_and_replay(
    tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _folder(tmp_path, BALANCE_REPORT)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(TWO_CALLS), encoding="utf-8")
    log = tmp_path / "audit.jsonl"
    deployment = ["--tools", "backoffice", "--procedures", str(folder)]
    code, out, err = _cli(capsys, "execute", str(plan), *deployment, "--audit", str(log), "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["result"]["c002"] == "44574.39"
    assert doc["result"]["c004"]["owes"] == "5630.19"
    # The nested customer_balance calls are steps of the log, in order, with their path.
    started = [r for r in read_records(log) if r["type"] == "step_started"]
    assert [(r["step_id"], r["tool"]) for r in started] == [
        ("first__balance", "customer_balance"),
        ("second__balance", "customer_balance"),
    ]
    assert [step_path(r["step_id"]) for r in started] == ["first/balance", "second/balance"]
    assert verify(log).ok
    assert _cli(capsys, "audit", "verify", str(log))[0] == 0
    code, out, _ = _cli(capsys, "replay", str(log), *deployment)
    assert code == 0 and "same decisions" in out


def test_a_body_outside_the_allow_list_is_refused_before_anything_runs(
    tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _folder(tmp_path, BALANCE_REPORT, PAY_SUPPLIER)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(TWO_CALLS), encoding="utf-8")
    log = tmp_path / "audit.jsonl"
    allow = "customer_balance,get_supplier"  # send_payment is not allowed in this deployment
    code, _, err = _cli(
        capsys,
        "execute",
        str(plan),
        "--tools",
        "backoffice",
        "--allow",
        allow,
        "--procedures",
        str(folder),
        "--audit",
        str(log),
    )
    assert code == 2
    assert "procedure 'pay_supplier' calls tool 'send_payment'" in err and "allow-list" in err
    assert not log.exists()


def test_load_refuses_cycles_and_bad_files(tmp_path: Path) -> None:
    registry = load_registry(["backoffice"])

    def calling(name: str, callee: str) -> Procedure:
        doc = {**BALANCE_REPORT, "name": name}
        doc["plan"] = {**BALANCE_REPORT["plan"], "steps": [{"id": "inner", "tool": callee, "args": {}}]}
        doc["plan"]["result"] = {"$ref": "inner"}
        return Procedure.from_document(doc)

    with pytest.raises(ProcedureError, match=r"'a' calls itself: a -> a"):
        load_procedures([calling("a", "a")], registry)
    with pytest.raises(ProcedureError, match=r"calls itself: a -> b -> a"):
        load_procedures([calling("a", "b"), calling("b", "a")], registry)
    with pytest.raises(ProcedureError, match="not a procedure file"):
        Procedure.from_document({"pte_procedure": "1", "name": "x"})
    with pytest.raises(ProcedureError, match=r"undeclared|do not declare"):
        Procedure.from_document({**BALANCE_REPORT, "parameters": {"type": "object", "properties": {}}})
    with pytest.raises(ProcedureError, match="name of a tool"):
        load_procedures([Procedure.from_document({**BALANCE_REPORT, "name": "get_invoice"})], registry)
    bad = {
        **BALANCE_REPORT,
        "plan": {
            **BALANCE_REPORT["plan"],
            "steps": [{"id": "a__b", "tool": "customer_balance", "args": {"customer_id": "C1"}}],
        },
    }
    with pytest.raises(ProcedureError, match="separator"):
        Procedure.from_document(bad)
    (tmp_path / "broken.json").write_text("{", encoding="utf-8")
    with pytest.raises(ProcedureError, match=r"broken\.json"):
        load_procedures(tmp_path, registry)


def test_untrusted_iban_argument_to_a_paying_procedure_is_refused_at_compile() -> None:
    base = load_registry(["backoffice"])
    registry = base.with_procedures(load_procedures([Procedure.from_document(PAY_SUPPLIER)], base))
    check = Policy.from_registry(registry).check()

    def plan(iban_from: str) -> str:
        return json.dumps(
            {
                "pte_plan": "1",
                "steps": [
                    {"id": "doc", "tool": "read_document", "args": {"document_id": "DOC-004"}},
                    {"id": "sup", "tool": "get_supplier", "args": {"supplier_id": "S002"}},
                    {
                        "id": "pay",
                        "tool": "pay_supplier",
                        "args": {"iban": {"$ref": iban_from}, "amount": "10.00", "reference": "INV 1"},
                    },
                ],
                "result": {"$ref": "pay/payment_id"},
            }
        )

    with pytest.raises(PlanRejected) as info:
        compile_plan(plan("doc/iban"), registry, checks=[check])
    assert info.value.reason is ReasonCode.POLICY_VIOLATION
    assert "pay__pay" in str(info.value)
    compiled = compile_plan(plan("sup/iban"), registry, checks=[check])  # the trusted IBAN compiles
    assert compiled.order[-1] == "pay__pay"


def test_call_rejections_name_the_call() -> None:
    base = load_registry(["backoffice"])
    registry = base.with_procedures(load_procedures([Procedure.from_document(BALANCE_REPORT)], base))

    def rejected(args: dict[str, Any], **extra: Any) -> PlanRejected:
        text = json.dumps(
            {"pte_plan": "1", "steps": [{"id": "x", "tool": "balance_report", "args": args, **extra}]}
        )
        with pytest.raises(PlanRejected) as info:
            compile_plan(text, registry)
        return info.value

    assert rejected({}).reason is ReasonCode.INVALID_ARGS
    assert rejected({"customer_id": 7}).reason is ReasonCode.INVALID_ARGS
    assert rejected({"customer_id": "C1", "other": 1}).reason is ReasonCode.INVALID_ARGS
    cond = {"when": {"eq": [1, 1]}}
    assert rejected({"customer_id": "C1"}, **cond).reason is ReasonCode.INVALID_ARGS
    # A reference into the result the body does not have.
    text = json.dumps(
        {
            "pte_plan": "1",
            "steps": [
                {"id": "x", "tool": "balance_report", "args": {"customer_id": "C1"}},
                {"id": "y", "tool": "get_customer", "args": {"customer_id": {"$ref": "x/nope"}}},
            ],
        }
    )
    with pytest.raises(PlanRejected) as info:
        compile_plan(text, registry)
    assert info.value.reason is ReasonCode.BAD_REFERENCE
    # Injection: a plan cannot smuggle a $param into its own steps to read another call's argument.
    text = json.dumps(
        {
            "pte_plan": "1",
            "steps": [
                {"id": "y", "tool": "get_customer", "args": {"customer_id": {"$param": "customer_id"}}}
            ],
        }
    )
    with pytest.raises(PlanRejected):
        compile_plan(text, registry)


def test_a_call_id_is_unique_like_any_step_id() -> None:
    """Bug: a call's id vanished at inlining, so a second step of that id compiled and
    ``{"$ref": "x"}`` silently read the call's result; a completed step's id likewise."""
    base = load_registry(["backoffice"])
    registry = base.with_procedures(load_procedures([Procedure.from_document(BALANCE_REPORT)], base))
    call = {"id": "x", "tool": "balance_report", "args": {"customer_id": "C002"}}
    other = {"id": "x", "tool": "get_customer", "args": {"customer_id": "C002"}}
    for steps in ([call, other], [other, call], [call, dict(call)]):
        text = json.dumps({"pte_plan": "1", "steps": steps, "result": {"$ref": "x"}})
        with pytest.raises(PlanRejected) as info:
            compile_plan(text, registry)
        assert info.value.reason is ReasonCode.DUPLICATE_STEP_ID, steps
        assert "'x'" in str(info.value)
    # A later stage may not call a procedure under a completed step's id either.
    text = json.dumps({"pte_plan": "1", "steps": [call], "result": {"$ref": "x"}})
    with pytest.raises(PlanRejected) as info:
        compile_plan(text, registry, prior={"x": "get_customer"})
    assert info.value.reason is ReasonCode.DUPLICATE_STEP_ID
    assert "completed step" in str(info.value)
    # Distinct ids still compile.
    compile_plan(json.dumps({"pte_plan": "1", "steps": [call, {**other, "id": "y"}]}), registry)


def test_an_edited_procedure_is_another_version(tmp_path: Path) -> None:
    one = Procedure.from_document(BALANCE_REPORT)
    edited = json.loads(json.dumps(BALANCE_REPORT))
    edited["plan"]["steps"][0]["tool"] = "get_customer"
    assert Procedure.from_document(edited).version != one.version
    assert Procedure.from_document(json.loads(json.dumps(BALANCE_REPORT))).version == one.version


# --- property: calling a procedure == running its inlined body ----------------------------------

EFFECTS: list[tuple[str, Any]] = []


class Out(BaseModel):
    value: str


@tool(effect="read", provenance="trusted")
def trusted_value(key: str) -> Out:
    """A trusted read."""
    return Out(value="T" + key)


@tool(effect="read", provenance="untrusted")
def untrusted_value(key: str) -> Out:
    """An untrusted read."""
    return Out(value="U" + key)


@tool(effect="write", sinks={"target": ["request", "trusted"]})
def guarded_write(target: str, note: str) -> Out:
    """A write whose target may only come from the request or a trusted tool."""
    EFFECTS.append(("guarded_write", (target, note)))
    return Out(value="w:" + target)


PROPERTY_TOOLS = Registry([trusted_value, untrusted_value, guarded_write])
SOURCES = ("request", "trusted", "untrusted")


@hs.composite
def call_and_inline(draw: hs.DrawFn) -> tuple[dict[str, Any], str, str]:
    """A procedure (reads then a guarded write on its parameters), a calling plan, the hand-inlined plan."""
    params = draw(hs.lists(hs.sampled_from(["p", "q", "r"]), min_size=1, max_size=3, unique=True))
    target = draw(hs.sampled_from(params))
    note = draw(hs.sampled_from([*params, "literal"]))
    read_key = draw(hs.sampled_from(params))
    sources = {p: draw(hs.sampled_from(SOURCES)) for p in params}
    body: list[dict[str, Any]] = [
        {"id": "look", "tool": "trusted_value", "args": {"key": {"$param": read_key}}},
        {
            "id": "write",
            "tool": "guarded_write",
            "args": {
                "target": {"$param": target},
                "note": "fixed" if note == "literal" else {"$param": note},
            },
        },
    ]
    procedure = {
        "pte_procedure": "1",
        "name": "proc",
        "description": "generated",
        "parameters": {
            "type": "object",
            "properties": {p: {"type": "string"} for p in params},
            "required": params,
        },
        "plan": {
            "pte_plan": "1",
            "steps": body,
            "result": {"w": {"$ref": "write/value"}, "l": {"$ref": "look"}},
        },
    }
    outer = [
        {"id": "t", "tool": "trusted_value", "args": {"key": "1"}},
        {"id": "u", "tool": "untrusted_value", "args": {"key": "2"}},
    ]
    arg = {"request": "IBAN-REQ", "trusted": {"$ref": "t/value"}, "untrusted": {"$ref": "u/value"}}
    call_args = {p: arg[s] for p, s in sources.items()}
    calling = {
        "pte_plan": "1",
        "steps": [*outer, {"id": "c", "tool": "proc", "args": call_args}],
        "result": {"$ref": "c/w"},
    }

    def sub(value: Any) -> Any:
        if isinstance(value, dict) and "$param" in value:
            return call_args[value["$param"]]
        if isinstance(value, dict):
            return {k: sub(v) for k, v in value.items()}
        return value

    inlined_body: list[Any] = []
    for step in body:
        new = sub(step)
        new["id"] = "c__" + step["id"]
        inlined_body.append(new)
    inlined = {"pte_plan": "1", "steps": [*outer, *inlined_body], "result": {"$ref": "c__write/value"}}
    return procedure, json.dumps(calling), json.dumps(inlined)


def _outcome(registry: Registry, text: str, tmp: Path) -> tuple[Any, ...]:
    """Labels (per step, its inputs', what decides it), the policy decision, and the effects."""
    policy = Policy.from_registry(registry)
    check = policy.check()
    try:
        plan = compile_plan(text, registry, checks=[check])
    except PlanRejected as exc:
        return ("rejected", exc.reason, exc.path, check.labels, check.input_labels, check.decisions)
    labels = (check.labels, check.input_labels, check.decisions)
    EFFECTS.clear()
    log = tmp / f"{plan.hash}.jsonl"
    log.unlink(missing_ok=True)
    with AuditLog(log) as audit:
        result = Engine(registry, None, policy=policy).execute(text, audit)
    steps = [(r["step_id"], r.get("tool")) for r in read_records(log) if r["type"] == "step_finished"]
    return ("ran", plan.hash, labels, result.status, result.result, list(EFFECTS), steps)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=call_and_inline())
def test_calling_a_procedure_equals_running_its_inlined_body(
    case: tuple[dict[str, Any], str, str], tmp_path: Path
) -> None:
    procedure, calling, inlined = case
    registry = PROPERTY_TOOLS.with_procedures(
        load_procedures([Procedure.from_document(procedure)], PROPERTY_TOOLS)
    )
    assert _outcome(registry, calling, tmp_path) == _outcome(registry, inlined, tmp_path)


def test_a_model_is_shown_procedures_as_tools_and_calls_one(tmp_path: Path, ledger: Path) -> None:
    from pte import Deployment
    from pte.testing import ScriptedModel

    base = load_registry(["backoffice"])
    registry = base.with_procedures(load_procedures([Procedure.from_document(BALANCE_REPORT)], base))
    shown: list[str] = []

    def planner(messages: list[dict[str, str]], call: Any) -> dict[str, Any]:
        shown.append("\n".join(m["content"] for m in messages))
        return TWO_CALLS

    model = ScriptedModel(planner=[planner], finalizer=["C002 owes 44574.39."])
    log = tmp_path / "model.jsonl"
    with AuditLog(log) as audit:
        result = Engine(registry, model).run("What do C002 and C004 owe?", audit)
    assert result.ok, result.message
    assert "balance_report(customer_id) -> {owes: decimal, overdue: decimal}" in shown[0]
    assert "[procedure; runs customer_balance]" in shown[0]
    steps = [r["step_id"] for r in read_records(log) if r["type"] == "step_finished"]
    assert steps == ["first__balance", "second__balance"]
    assert replay_file(log, deployment=Deployment.of(registry=registry)).ok
    # Without the procedures the same log does not replay (the deployment decides, not the log).
    assert not replay_file(log, deployment=Deployment.of(registry=base)).ok


def test_the_log_records_the_procedures_and_replays_from_itself(
    tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _folder(tmp_path, BALANCE_REPORT)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(TWO_CALLS), encoding="utf-8")
    log = tmp_path / "audit.jsonl"
    code, _, err = _cli(
        capsys,
        "execute",
        str(plan),
        "--tools",
        "backoffice",
        "--procedures",
        str(folder),
        "--audit",
        str(log),
    )
    assert code == 0, err
    started = read_records(log)[0]
    recorded = started["config"]["procedures"]
    assert recorded == [Procedure.from_document(BALANCE_REPORT).to_document()]
    code, out, _ = _cli(capsys, "replay", str(log))  # from the log alone: its recorded catalogue
    assert code == 0 and "same decisions" in out
    # The deployment decides: without its procedures, or with an edited one, the run diverges.
    code, out, _ = _cli(capsys, "replay", str(log), "--tools", "backoffice")
    assert code == 1 and "run_started.config" in out
    edited = json.loads(json.dumps(BALANCE_REPORT))
    edited["plan"]["result"] = {
        "owes": {"$ref": "balance/overdue_total"},
        "overdue": {"$ref": "balance/overdue_total"},
    }
    (tmp_path / "other").mkdir()
    other = _folder(tmp_path / "other", edited)
    code, out, _ = _cli(capsys, "replay", str(log), "--tools", "backoffice", "--procedures", str(other))
    assert code == 1 and "DIVERGED" in out
    # Tamper: the recorded procedure edited in the log breaks the chain.
    lines = log.read_text(encoding="utf-8").splitlines()
    lines[0] = lines[0].replace("open_total", "overdue_total")
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert not verify(log).ok


def test_the_report_shows_each_nested_step_with_its_path(tmp_path: Path, ledger: Path) -> None:
    from pte.runs import write_report

    base = load_registry(["backoffice"])
    registry = base.with_procedures(load_procedures([Procedure.from_document(BALANCE_REPORT)], base))
    log = tmp_path / "audit.jsonl"
    with AuditLog(log) as audit:
        assert Engine(registry, None).execute(json.dumps(TWO_CALLS), audit).ok
    html = write_report(log, tmp_path / "report.html").read_text(encoding="utf-8")
    assert 'data-step-id="first__balance"' in html and 'data-step-id="second__balance"' in html
    assert '<small class="procedure-path" title="inlined from a procedure call">first/balance</small>' in html
    # A run without procedures shows no paths, whatever its ids.
    plain = tmp_path / "plain.jsonl"
    inlined = {
        "pte_plan": "1",
        "steps": [{"id": "a__b", "tool": "customer_balance", "args": {"customer_id": "C002"}}],
    }
    with AuditLog(plain) as audit:
        assert Engine(base, None).execute(json.dumps(inlined), audit).ok
    assert "procedure-path" not in write_report(plain, tmp_path / "plain.html").read_text(encoding="utf-8")


PAY_KNOWN_SUPPLIER: dict[str, Any] = {
    "pte_procedure": "1",
    "name": "pay_known_supplier",
    "description": "Pay a supplier on file to its verified IBAN.",
    "parameters": {
        "type": "object",
        "properties": {"supplier_id": {"type": "string"}, "amount": {"type": "string"}},
        "required": ["supplier_id", "amount"],
    },
    "plan": {
        "pte_plan": "1",
        "steps": [
            {"id": "supplier", "tool": "get_supplier", "args": {"supplier_id": {"$param": "supplier_id"}}},
            {
                "id": "pay",
                "tool": "send_payment",
                "args": {
                    "iban": {"$ref": "supplier/iban"},
                    "amount": {"$param": "amount"},
                    "currency": "EUR",
                    "reference": "procedure payment",
                },
            },
        ],
        "result": {"$ref": "pay/payment_id"},
    },
}


def test_an_approved_call_pays_once_and_an_edited_procedure_is_refused_under_the_old_approval(
    tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _folder(tmp_path, PAY_KNOWN_SUPPLIER)
    plan = tmp_path / "pay.json"
    call = {"id": "p", "tool": "pay_known_supplier", "args": {"supplier_id": "S002", "amount": "12.50"}}
    plan.write_text(json.dumps({"pte_plan": "1", "steps": [call], "result": {"$ref": "p"}}), encoding="utf-8")
    common = ["--tools", "backoffice", "--procedures", str(folder), "--approvals", str(tmp_path / "a.jsonl")]
    make_deployment(tmp_path, monkeypatch, capsys, *common, "--no-store")  # the procedure pays
    code, out, _ = _cli(
        capsys, "execute", str(plan), *common, "--audit", str(tmp_path / "no.jsonl"), "--json"
    )
    assert code == 1 and json.loads(out)["reason"] == "approval_missing"  # the inlined write needs one
    assert _cli(capsys, "approve", str(plan), "--by", "alice", *common)[0] == 0
    # Compliance edits the procedure (the amount's reference text) after the approval.
    edited = json.loads(json.dumps(PAY_KNOWN_SUPPLIER))
    edited["plan"]["steps"][1]["args"]["reference"] = "edited"
    (folder / "pay_known_supplier.json").write_text(json.dumps(edited), encoding="utf-8")
    log = tmp_path / "edited.jsonl"
    code, out, _ = _cli(capsys, "execute", str(plan), *common, "--audit", str(log), "--json")
    assert code == 1 and json.loads(out)["reason"] == "approval_missing"
    assert not any(r["type"] == "step_started" for r in read_records(log))
    # The approved version pays, once; its nested write is a step of the log.
    (folder / "pay_known_supplier.json").write_text(json.dumps(PAY_KNOWN_SUPPLIER), encoding="utf-8")
    log = tmp_path / "paid.jsonl"
    code, out, _ = _cli(capsys, "execute", str(plan), *common, "--audit", str(log), "--json")
    assert code == 0, out
    assert [r["step_id"] for r in read_records(log) if r["type"] == "step_finished"] == [
        "p__supplier",
        "p__pay",
    ]
    assert verify(log).ok


def test_limits_count_nested_steps_and_a_forged_nested_id_is_an_ordinary_step() -> None:
    from pte.plan import Limits

    base = load_registry(["backoffice"])
    procs = [Procedure.from_document(BALANCE_REPORT), Procedure.from_document(PAY_SUPPLIER)]
    registry = base.with_procedures(load_procedures(procs, base))
    three = {
        "pte_plan": "1",
        "steps": [
            {"id": f"c{i}", "tool": "balance_report", "args": {"customer_id": "C002"}} for i in range(3)
        ],
    }
    with pytest.raises(PlanRejected) as info:
        compile_plan(json.dumps(three), registry, Limits(max_steps=2))
    assert info.value.reason is ReasonCode.PLAN_TOO_LARGE
    # A planner writing the inlined id itself gains nothing: the step is checked as any other.
    forged = {
        "pte_plan": "1",
        "steps": [
            {"id": "doc", "tool": "read_document", "args": {"document_id": "DOC-004"}},
            {
                "id": "pay__pay",
                "tool": "send_payment",
                "args": {"iban": {"$ref": "doc/iban"}, "amount": "1.00", "currency": "EUR", "reference": "x"},
            },
        ],
    }
    with pytest.raises(PlanRejected) as info:
        compile_plan(json.dumps(forged), registry, checks=[Policy.from_registry(registry).check()])
    assert info.value.reason is ReasonCode.POLICY_VIOLATION
    # ... and an id a call would produce is a duplicate, not a second step of the call.
    clash = {
        "pte_plan": "1",
        "steps": [
            {"id": "x", "tool": "balance_report", "args": {"customer_id": "C002"}},
            {"id": "x__balance", "tool": "customer_balance", "args": {"customer_id": "C004"}},
        ],
    }
    with pytest.raises(PlanRejected) as info:
        compile_plan(json.dumps(clash), registry)
    assert info.value.reason is ReasonCode.DUPLICATE_STEP_ID


def test_step_spans_of_nested_steps_carry_their_path(tmp_path: Path, ledger: Path) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    base = load_registry(["backoffice"])
    registry = base.with_procedures(load_procedures([Procedure.from_document(BALANCE_REPORT)], base))
    with AuditLog(tmp_path / "audit.jsonl") as audit:
        assert Engine(registry, None, tracer_provider=provider).execute(json.dumps(TWO_CALLS), audit).ok
    steps = [s for s in exporter.get_finished_spans() if s.name == "execute_tool customer_balance"]
    assert sorted(str((s.attributes or {}).get("pte.step.path")) for s in steps) == [
        "first/balance",
        "second/balance",
    ]


def test_pte_schema_procedure_prints_the_file_schema(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _cli(capsys, "schema", "procedure")
    assert code == 0 and json.loads(out)["title"] == "PTE procedure, version 1"


REMIND: dict[str, Any] = {
    "pte_procedure": "1",
    "name": "remind_invoice",
    "description": "Look an invoice up and queue its standard reminder by e-mail.",
    "parameters": {
        "type": "object",
        "properties": {"invoice_id": {"type": "string"}},
        "required": ["invoice_id"],
    },
    "plan": {
        "pte_plan": "1",
        "steps": [
            {"id": "invoice", "tool": "get_invoice", "args": {"invoice_id": {"$param": "invoice_id"}}},
            {
                "id": "remind",
                "tool": "queue_reminder",
                "args": {"invoice_id": {"$ref": "invoice/invoice_id"}},
            },
        ],
        "result": {"$ref": "remind"},
    },
}


def test_a_run_cut_mid_procedure_resumes_at_the_next_nested_step(tmp_path: Path, ledger: Path) -> None:
    from pte.runs import resume_file

    base = load_registry(["backoffice"])
    registry = base.with_procedures(load_procedures([Procedure.from_document(REMIND)], base))
    plan = {
        "pte_plan": "1",
        "steps": [
            {"id": "a", "tool": "remind_invoice", "args": {"invoice_id": "INV-1006"}},
            {"id": "b", "tool": "remind_invoice", "args": {"invoice_id": "INV-1011"}, "after": ["a"]},
        ],
        "result": {"a": {"$ref": "a/reminder_id"}, "b": {"$ref": "b/reminder_id"}},
    }
    log = tmp_path / "audit.jsonl"
    with AuditLog(log) as audit:
        first = Engine(registry, None).execute(json.dumps(plan), audit)
    assert first.ok, first.message
    records = read_records(log)
    # Cut the log just after a's reminder was recorded, inside the run (b's procedure not begun).
    cut = next(
        i for i, r in enumerate(records) if r["type"] == "step_finished" and r["step_id"] == "a__remind"
    )
    lines = log.read_text(encoding="utf-8").splitlines()[: cut + 1]
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = resume_file(log, registry)
    assert result.ok, result.message
    started = [r["step_id"] for r in read_records(log) if r["type"] == "step_started"]
    assert started == ["a__invoice", "a__remind", "b__invoice", "b__remind"]  # nothing ran twice
    assert result.result == first.result
    assert verify(log).ok


def _compiled(registry: Registry, document: dict[str, Any]) -> tuple[Any, ...]:
    check = Policy.from_registry(registry).check()
    try:
        plan = compile_plan(json.dumps(document), registry, checks=[check])
    except PlanRejected as exc:
        return ("rejected", exc.reason, exc.message, exc.path, check.labels, check.decisions)
    return ("accepted", plan.hash, plan.order, check.labels, check.decisions)


@settings(max_examples=30, deadline=None)
@given(data=hs.data())
def test_generated_procedures_compile_as_the_inlined_plan(data: hs.DataObject) -> None:
    from pte.testing import example_registry, procedure_calls

    base = example_registry()
    case = data.draw(procedure_calls(base, max_steps=4))
    registry = base.with_procedures(load_procedures([Procedure.from_document(case.procedure)], base))
    assert _compiled(registry, case.calling) == _compiled(registry, case.inlined)


def test_procedures_calling_procedures_nest_and_cannot_grow_a_plan_without_bound() -> None:
    base = load_registry(["backoffice"])

    def fan(name: str, callee: str, times: int, arg: dict[str, Any]) -> Procedure:
        return Procedure.from_document(
            {
                "pte_procedure": "1",
                "name": name,
                "description": "fan out",
                "parameters": {"type": "object", "properties": {"customer_id": {"type": "string"}}},
                "plan": {
                    "pte_plan": "1",
                    "steps": [{"id": f"s{i}", "tool": callee, "args": arg} for i in range(times)],
                    "result": {"$ref": "s0"},
                },
            }
        )

    leaf_arg = {"customer_id": {"$param": "customer_id"}}
    procs = [
        fan(f"level{d}", f"level{d + 1}" if d < 7 else "customer_balance", 4, leaf_arg) for d in range(8)
    ]
    registry = base.with_procedures(load_procedures(procs, base))
    one = {
        "pte_plan": "1",
        "steps": [{"id": "x", "tool": "level6", "args": {"customer_id": "C002"}}],
        "result": {"$ref": "x"},
    }
    plan = compile_plan(json.dumps(one), registry)  # 4 x 4 = 16 customer_balance steps
    assert len(plan.order) == 16 and "x__s0__s0" in plan.order
    assert [step_path(s) for s in plan.order][:1] == ["x/s0/s0"]
    deep = {**one, "steps": [{"id": "x", "tool": "level0", "args": {"customer_id": "C002"}}]}
    with pytest.raises(PlanRejected) as info:  # 4 ** 8 steps: refused as soon as a level passes the limit
        compile_plan(json.dumps(deep), registry)
    assert info.value.reason is ReasonCode.PLAN_TOO_LARGE and "inlined" in info.value.message


@settings(max_examples=200, deadline=None)
@given(
    steps=hs.lists(hs.tuples(hs.sampled_from(["a", "b", "c"]), hs.booleans()), max_size=6),
    taken=hs.sets(hs.sampled_from(["a", "b", "c"])),
)
def test_property_an_inlined_steps_id_is_unique_for_calls_and_delegations_alike(
    steps: list[tuple[str, bool]], taken: set[str]
) -> None:
    """One check (`check_inlined_ids`) for procedure calls and delegate steps: refused exactly
    when an inlined step's id is a completed step's, or another step's."""
    documents = [
        {"id": sid, "delegate": "x"} if inlined else {"id": sid, "tool": "t"} for sid, inlined in steps
    ]
    ids = [sid for sid, _ in steps]
    expected = any(inlined and (sid in taken or ids.count(sid) > 1) for sid, inlined in steps)
    try:
        check_inlined_ids(documents, lambda step: "delegate" in step, taken)
    except PlanRejected as rejection:
        assert expected and rejection.reason is ReasonCode.DUPLICATE_STEP_ID
    else:
        assert not expected
