"""`pte demo`: the engine end to end, fully offline, on the back-office pack.

The planner's, replanner's and finalizer's answers are RECORDED responses served by
`ReplayClient` (no model is called and no network is used); everything else is the real
engine: compile, policy checks, approvals, the executor, the SQLite ledger tools and the
audit log, which is verified at the end of every scenario.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pte._audit import AuditLog, read_records, verdict
from pte._catalogue import Registry, load_registry
from pte._core import RunPaused
from pte._deploy import Deployment
from pte._policy import ApprovalStore, endorse, pending_endorsement
from pte._run import EngineConfig, ReplayClient, RunResult

__all__ = [
    "SCENARIOS",
    "DemoOutcome",
    "Scenario",
    "answer_problem",
    "demo_deployment",
    "demo_registry",
    "run_demo",
    "run_scenario",
]

STOCK = ("backoffice", "calculator", "shaping")


def _ref(target: str) -> dict[str, str]:
    return {"$ref": target}


def _plan(*steps: dict[str, Any], result: Any = None) -> str:
    doc: dict[str, Any] = {"pte_plan": "1", "steps": list(steps)}
    if result is not None:
        doc["result"] = result
    return json.dumps(doc, indent=1)


def _step(step_id: str, tool: str, **args: Any) -> dict[str, Any]:
    return {"id": step_id, "tool": tool, "args": args}


@dataclass(frozen=True)
class Scenario:
    """One demo run: a request, the recorded LLM answers, and what the run must end with."""

    name: str
    request: str
    responses: Sequence[str]
    expect_status: str
    expect_reason: str | None = None
    max_replans: int = 2
    approve_by: str | None = None
    note: str = ""
    #: pte._policy._endorsement: the run pauses at a call whose value only a person can vouch for;
    #: this person endorses the exact value shown (signed) and the run is resumed.
    endorse_by: str | None = None
    #: ...or rejects it (the run ends failed_closed(endorsement_rejected)).
    endorse_reject: bool = False


_THREE_FIGURES = _plan(
    _step("a", "customer_balance", customer_id="C002"),
    _step("b", "customer_balance", customer_id="C004"),
    _step("c", "customer_balance", customer_id="C016"),
    _step(
        "total",
        "calculator",
        expression="a + b + c",
        variables={"a": _ref("a/open_total"), "b": _ref("b/open_total"), "c": _ref("c/open_total")},
    ),
    _step(
        "share",
        "calculator",
        expression="c / t * 100",
        variables={"c": _ref("c/open_total"), "t": _ref("total/value")},
        places=2,
    ),
    result={
        "figures": {"C002": _ref("a/open_total"), "C004": _ref("b/open_total"), "C016": _ref("c/open_total")},
        "total_eur": _ref("total/value"),
        "c016_share_pct": _ref("share/value"),
    },
)

_SUPPLIER_PAYMENT = _plan(
    _step("sup", "get_supplier", supplier_id="S003"),
    _step(
        "pay", "send_payment", iban=_ref("sup/iban"), amount="1240.00", currency="EUR", reference="DPM-7781"
    ),
    result=_ref("pay/payment_id"),
)

BILL_PAYMENT = _plan(
    _step("bill", "read_document", document_id="DOC-001"),
    _step(
        "pay",
        "send_payment",
        iban=_ref("bill/iban"),
        amount=_ref("bill/amount"),
        currency=_ref("bill/currency"),
        reference="RB-5512",
    ),
    result=_ref("pay/payment_id"),
)

#: The deployment's policy for the endorsement scenario: a payment's details read from a
#: document may be endorsed by a person, value by value, instead of being refused.
ENDORSE_POLICY: dict[str, Any] = {
    "pte_policy": "1",
    "tools": {
        "send_payment": {"on_violation": {"iban": "endorse", "amount": "endorse", "currency": "endorse"}}
    },
}

SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        name="overdue_reminders",
        request="Which invoices are more than 30 days overdue, what is outstanding in EUR, "
        "and queue email reminders.",
        responses=[
            _plan(
                _step("inv", "list_overdue_invoices", days=30),
                _step("remind", "send_reminders", invoice_ids=_ref("inv/ids"), channel="email"),
                result={
                    "overdue": _ref("inv/count"),
                    "outstanding": _ref("inv/total"),
                    "currency": _ref("inv/total_currency"),
                    "reminders_queued": _ref("remind/queued"),
                },
            ),
            "10 invoices are more than 30 days overdue, with EUR 84454.79 outstanding in total; "
            "an email reminder was queued for each of them.",
        ],
        expect_status="succeeded",
        note="read tool → idempotent write tool by reference",
    ),
    Scenario(
        name="three_figures_share",
        request="Look up the open balances of customers C002, C004 and C016, total them, "
        "and give C016's share of the total in percent.",
        responses=[
            _THREE_FIGURES,
            "C002 owes EUR 44574.39, C004 EUR 5630.19 and C016 EUR 8888.67: EUR 59093.25 in total, "
            "of which C016's share is 15.04%.",
        ],
        expect_status="succeeded",
        note="every figure moves by reference into the calculator: the total is exact",
    ),
    Scenario(
        name="replan_after_failure",
        request="How much is outstanding on invoice INV-1006?",
        responses=[
            _plan(_step("inv", "get_invoice", invoice_id="INV-10O6"), result=_ref("inv/outstanding")),
            _plan(_step("inv2", "get_invoice", invoice_id="INV-1006"), result=_ref("inv2/outstanding")),
            "GBP 6088.40 is outstanding on invoice INV-1006 (Baker Street Legal LLP), 147 days overdue.",
        ],
        expect_status="succeeded",
        note="a failed step, then one replan",
    ),
    Scenario(
        name="invalid_json",
        request="Total the overdue invoices.",
        responses=["Sure! I would call list_overdue_invoices and then add up the amounts for you."],
        expect_status="failed_closed",
        expect_reason="invalid_json",
        note="prose instead of a plan",
    ),
    Scenario(
        name="tool_not_allowed",
        request="Clean up the paid invoices.",
        responses=[_plan(_step("rm", "delete_invoice", invoice_id="INV-1001"))],
        expect_status="failed_closed",
        expect_reason="tool_not_allowed",
        note="a tool outside the allow-list",
    ),
    Scenario(
        name="bad_args",
        request="Queue reminders for the overdue invoices.",
        responses=[
            _plan(
                _step("inv", "list_overdue_invoices", days=30),
                _step("remind", "send_reminders", invoice_ids=_ref("inv/count")),
            )
        ],
        expect_status="failed_closed",
        expect_reason="invalid_args",
        max_replans=0,
        note="an integer wired into a list parameter, caught before anything runs (max_replans=0: no repair)",
    ),
    Scenario(
        name="repaired_plan",
        request="Queue reminders for the overdue invoices.",
        responses=[
            _plan(
                _step("overdue_invoices", "list_overdue_invoices", days=30),
                _step("queue_reminders", "send_reminders", invoice_ids=_ref("overdue_invoices/count")),
                result=_ref("queue_reminders/queued"),
            ),
            _plan(
                _step("overdue_invoices", "list_overdue_invoices", days=30),
                _step("queue_reminders", "send_reminders", invoice_ids=_ref("overdue_invoices/ids")),
                result=_ref("queue_reminders/queued"),
            ),
            # The run before this one queued them: this run queued none anew (its result is 0).
            "0 reminders were newly queued: the 10 invoices more than 30 days overdue already had one.",
        ],
        expect_status="succeeded",
        note="the same mistake, sent back once with the compiler's reason: the repaired plan runs",
    ),
    Scenario(
        name="replans_exhausted",
        request="How much is outstanding on invoice INV-2001?",
        responses=[
            _plan(_step("inv", "get_invoice", invoice_id="INV-2001"), result=_ref("inv/outstanding")),
            _plan(_step("inv2", "get_invoice", invoice_id="INV-2001"), result=_ref("inv2/outstanding")),
        ],
        expect_status="failed_closed",
        expect_reason="replans_exhausted",
        max_replans=1,
        note="the invoice does not exist: one replan, then fail closed",
    ),
    Scenario(
        name="injected_iban_blocked",
        request="Pay the supplier invoice in document DOC-004.",
        responses=[
            _plan(
                _step("doc", "read_document", document_id="DOC-004"),
                _step(
                    "pay",
                    "send_payment",
                    iban=_ref("doc/iban"),
                    amount=_ref("doc/amount"),
                    currency=_ref("doc/currency"),
                    reference="NW-2291",
                ),
            )
        ],
        expect_status="failed_closed",
        expect_reason="policy_violation",
        max_replans=0,
        note="an untrusted e-mail's IBAN wired into a payment: refused before any step runs",
    ),
    Scenario(
        name="payment_unapproved",
        request="Pay Dutch Paper Mills (S003) EUR 1240.00 for invoice DPM-7781.",
        responses=[_SUPPLIER_PAYMENT],
        expect_status="failed_closed",
        expect_reason="approval_missing",
        note="a clean payment plan, but nobody approved its hash",
    ),
    Scenario(
        name="payment_approved",
        request="Pay Dutch Paper Mills (S003) EUR 1240.00 for invoice DPM-7781.",
        responses=[
            _SUPPLIER_PAYMENT,
            "Payment PO-0001 of EUR 1240.00 to Dutch Paper Mills B.V. (the IBAN on file) was submitted.",
        ],
        expect_status="succeeded",
        approve_by="controller@example.com",
        note="the same plan after `pte approve` recorded its hash",
    ),
    Scenario(
        name="bill_endorsed",
        request="Pay the bill in document DOC-001.",
        responses=[
            BILL_PAYMENT,
            "Payment PO-0002 of EUR 612.40 to the IBAN in the bill (endorsed by a person) was submitted.",
        ],
        expect_status="succeeded",
        approve_by="controller@example.com",
        endorse_by="controller@example.com",
        note="the IBAN and amount exist only in the bill (untrusted): the run pauses at send_payment "
        "showing them and their source; a person endorses exactly those values; it resumes and pays once",
    ),
)


@dataclass
class DemoOutcome:
    """What one scenario did, whether its audit log verified, and whether its answer says what
    its result is (`answer_problem`: None when it does)."""

    scenario: Scenario
    result: RunResult
    audit_path: Path
    audit_ok: bool
    as_expected: bool
    extra: dict[str, Any] = field(default_factory=dict)
    answer_problem: str | None = None


#: An identifier in a result or an answer: a payment PO-0002, an invoice INV-1006, a reminder...
_IDENTIFIER = re.compile(r"\b([A-Z]{1,6})-(\d+)\b")


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [leaf for item in value.values() for leaf in _leaves(item)]
    if isinstance(value, list):
        return [leaf for item in value for leaf in _leaves(item)]
    return [value]


def _says(answer: str, text: str) -> bool:
    """`text` (a figure or an identifier) stands in `answer` on its own: not inside a longer one."""
    return re.search(rf"(?<![\w.]){re.escape(text)}(?![\w]|[.,]\d)", answer) is not None


def answer_problem(answer: Any, result: Any) -> str | None:
    """How a run's answer (a model's words) contradicts its result (what the tools returned), or
    None. Every figure and identifier of the result must stand in the answer, and every
    identifier the answer gives of a kind the result has (``PO-…``) must be one of the result's:
    an answer saying "Payment PO-0001" of a run that paid PO-0002 is wrong."""
    if not isinstance(answer, str) or result is None:
        return None
    facts = [
        leaf for leaf in _leaves(result) if isinstance(leaf, str | int | float) and not isinstance(leaf, bool)
    ]
    ids = {f"{m[0]}-{m[1]}" for leaf in facts for m in _IDENTIFIER.findall(str(leaf))}
    kinds = {identifier.split("-")[0] for identifier in ids}
    for kind, number in _IDENTIFIER.findall(answer):
        said = f"{kind}-{number}"
        if kind in kinds and said not in ids:
            return f"the answer says {said}, the result is {', '.join(sorted(ids))}"
    for fact in facts:
        text = str(fact)
        is_figure = re.fullmatch(r"-?\d+(\.\d+)?", text) is not None
        if (is_figure or text in ids) and not _says(answer, text):
            return f"the answer does not say {text}, which the result holds"
    return None


def demo_registry() -> Registry:
    """The stock packs the demo runs on."""
    return load_registry(STOCK)


def run_scenario(
    scenario: Scenario,
    registry: Registry,
    workdir: Path,
    *,
    audit_path: Path | None = None,
    audit_factory: Callable[..., AuditLog] | None = None,
) -> DemoOutcome:
    """Run one scenario against the ledger in $PTE_LEDGER, writing its audit log under `workdir`."""
    from pte._plan import compile_plan
    from pte._policy import approve, catalogue_fingerprint

    path = audit_path or workdir / f"{scenario.name}.jsonl"
    # The demo's own deployment (made here the first time): the engine, the stores, the anchors
    # and resume all come from it, as for every command (pte.Deployment).
    deployment = demo_deployment(workdir, endorsing=bool(scenario.endorse_by))
    store = ApprovalStore(deployment.approvals_path)
    policy = deployment.policy(registry)
    run_id = None
    if scenario.approve_by:
        # The person reviewed the plan file (`pte plan`) and approved one run of its exact hash
        # (`pte approve`); that run is the one that executes.
        plan = compile_plan(
            scenario.responses[0], registry, checks=[policy.check(endorsable=bool(scenario.endorse_by))]
        )
        approval = approve(
            plan, scenario.approve_by, store, catalogue=catalogue_fingerprint(registry, plan, policy)
        )
        run_id = approval.run
    engine = deployment.engine(
        ReplayClient(scenario.responses, model="recorded-demo-responses"),
        registry=registry,
        config=EngineConfig(max_replans=scenario.max_replans),
    )
    anchors = deployment.anchors()  # every run is anchored with the deployment's key as it starts
    if audit_factory:
        audit = audit_factory(path, run_id=run_id)
    else:
        audit = AuditLog(path, run_id=run_id, anchors=anchors)
    extra: dict[str, Any] = {}
    try:
        with audit:
            result = engine.run(scenario.request, audit)
    except RunPaused:
        # The person sees the exact values and where they come from, and endorses them.
        from pte._deploy import resume_file  # imports the engine, as the demo does

        request = pending_endorsement(read_records(path))
        gate = deployment.endorsement_gate()
        assert request is not None and scenario.endorse_by is not None and gate is not None
        extra["endorsement_request"] = request.describe()
        endorse(
            gate.store,
            request,
            scenario.endorse_by,
            reject=scenario.endorse_reject,
            note="not our supplier's account" if scenario.endorse_reject else None,
            signing_key=_demo_key(workdir),
        )
        result = resume_file(
            path,
            registry,
            llm=ReplayClient(scenario.responses[1:], model="recorded-demo-responses"),
            deployment=deployment,
        )
    # The verdict `pte audit verify` gives: the chain, and the deployment's anchors of the run.
    report = verdict(path, anchors=anchors if audit_factory is None else None)
    as_expected = result.status == scenario.expect_status and (
        (result.reason.value if result.reason else None) == scenario.expect_reason
    )
    # The answer is a model's (recorded) words about the result: it must not contradict it.
    wrong = answer_problem(result.answer, result.result) if result.ok else None
    return DemoOutcome(
        scenario, result, path, report.ok, as_expected and report.ok and wrong is None, extra, wrong
    )


#: The demo's two deployments (folders in its directory): the default guarded policy, and one
#: whose policy lets a person endorse a payment's values (`ENDORSE_POLICY`).
DEPLOYMENTS = ("pte-demo-deployment", "pte-demo-deployment-endorsing")


def demo_deployment(workdir: Path, *, endorsing: bool = False) -> Deployment:
    """The demo's deployment in `workdir` (made by the demo the first time, as ``pte init`` makes
    one): the stock packs, the guarded policy (or `ENDORSE_POLICY`), its approval and endorsement
    stores and anchors beside it, its own key; no run store (the demo writes audit logs)."""
    from pte._deploy import DOCUMENT_NAME, DeploymentDocument, init_deployment

    folder = workdir / DEPLOYMENTS[endorsing]
    if (folder / DOCUMENT_NAME).is_file():
        return Deployment.from_folder(folder)
    folder.mkdir(parents=True, exist_ok=True)
    policy = None
    if endorsing:
        (folder / "policy.json").write_text(json.dumps(ENDORSE_POLICY, indent=1), encoding="utf-8")
        policy = "policy.json"
    document = DeploymentDocument(
        tools=STOCK, policy=policy, endorsements="endorsements.jsonl" if endorsing else None, store=None
    )
    made, _ = init_deployment(folder, document)
    return made.check()


def _demo_key(workdir: Path) -> Any:
    """The demo approver's Ed25519 key (made once per demo directory; never a real key)."""
    from pte._core import SigningKey

    path = workdir / "demo-approver.key"
    if path.exists():
        return SigningKey.load(path)
    key = SigningKey.generate()
    path.write_bytes(key.to_pem())
    path.chmod(0o600)
    return key


def _table(outcomes: Sequence[DemoOutcome]) -> str:
    header = ("scenario", "status", "reason", "LLM calls", "steps", "audit", "answer")
    rows = [
        (
            o.scenario.name,
            o.result.status,
            o.result.reason.value if o.result.reason else "-",
            str(o.result.llm_calls),
            str(len(o.result.steps)),
            "verified" if o.audit_ok else "FAILED",
            ("agrees" if o.result.ok else "-") if o.answer_problem is None else "CONTRADICTS",
        )
        for o in outcomes
    ]
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
    line = "  ".join(f"{{:<{w}}}" for w in widths)
    out = [line.format(*header), line.format(*("-" * w for w in widths))]
    out += [line.format(*r) for r in rows]
    return "\n".join(out)


def run_demo(
    *, out_dir: str | None = None, as_json: bool = False, scenarios: Sequence[Scenario] = SCENARIOS
) -> int:
    """Run every scenario on a fresh sample ledger; print a table; exit 0 if all ended as expected
    (status and reason, a verified log, and an answer that agrees with the result)."""
    import os

    from pte._catalogue import load_pack

    with tempfile.TemporaryDirectory(prefix="pte-demo-") as tmp:
        workdir = Path(out_dir) if out_dir else Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        ledger = workdir / "ledger.sqlite"
        backoffice = load_pack("backoffice")["list_overdue_invoices"].func
        create = vars(__import__("sys").modules[backoffice.__module__])["create_sample_ledger"]
        create(ledger, overwrite=True)
        previous = os.environ.get("PTE_LEDGER")
        os.environ["PTE_LEDGER"] = str(ledger)
        try:
            registry = demo_registry()
            # Only this demo's own files: --out may point at a directory holding other logs.
            own = ("demo-approver.key",)
            for stale in [workdir / f"{s.name}.jsonl" for s in scenarios] + [workdir / name for name in own]:
                stale.unlink(missing_ok=True)
            for folder in DEPLOYMENTS:  # its deployments (their stores, anchors and keys): made anew
                if (workdir / folder / "pte-deployment.json").is_file():
                    shutil.rmtree(workdir / folder)
            outcomes = [run_scenario(s, registry, workdir) for s in scenarios]
        finally:
            if previous is None:
                os.environ.pop("PTE_LEDGER", None)
            else:
                os.environ["PTE_LEDGER"] = previous
        all_ok = all(o.as_expected for o in outcomes)
        if as_json:
            print(
                json.dumps(
                    {
                        "status": "ok" if all_ok else "unexpected",
                        "scenarios": [
                            {
                                "scenario": o.scenario.name,
                                **o.result.to_dict(),
                                "audit_verified": o.audit_ok,
                                "answer_problem": o.answer_problem,
                                "as_expected": o.as_expected,
                                "audit": str(o.audit_path) if out_dir else None,
                            }
                            for o in outcomes
                        ],
                    },
                    indent=2,
                    default=str,
                )
            )
        else:
            print(
                "PTE demo: recorded LLM responses (no model, no network); "
                "real engine, tools and audit logs.\n"
            )
            print(_table(outcomes))
            three = next((o for o in outcomes if o.scenario.name == "three_figures_share"), None)
            if three is not None and three.result.ok:
                print(f"\nthree_figures_share result: {json.dumps(three.result.result)}")
            for o in outcomes:
                if o.answer_problem is not None:
                    print(f"\n{o.scenario.name}: {o.answer_problem}")
            print(f"\naudit logs: {workdir if out_dir else '(temporary; use --out DIR to keep them)'}")
            print("all scenarios ended as expected" if all_ok else "SOME SCENARIOS DID NOT END AS EXPECTED")
    return 0 if all_ok else 1
