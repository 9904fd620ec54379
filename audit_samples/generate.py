"""Regenerate the audit samples: real logs of each kind of run.

    python audit_samples/generate.py            # rewrites audit_samples/*.jsonl

Every sample is produced by the real engine on a fresh sample ledger, with the demo's
recorded LLM answers (`pte._cli._demo`), except `crashed_mid_run`, which is a `pte execute` run
in a child process that is killed with SIGKILL part-way through (after its 7th record).
The tests replay and verify every sample (tests/audit/test_audit_samples.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

from pte import load_pack  # noqa: E402
from pte._cli import SCENARIOS, demo_registry, run_scenario  # noqa: E402
from pte._core import SigningKey  # noqa: E402

#: sample file -> demo scenario
SAMPLES = {
    "success": "three_figures_share",
    "success_with_write": "overdue_reminders",
    "replan": "replan_after_failure",
    "invalid_json": "invalid_json",
    "disallowed_tool": "tool_not_allowed",
    "bad_args": "bad_args",
    "repaired": "repaired_plan",
    "replans_exhausted": "replans_exhausted",
    "policy_violation": "injected_iban_blocked",
    "approval_missing": "payment_unapproved",
    "approved_payment": "payment_approved",
    "endorsed_payment": "bill_endorsed",
}

#: The plan the crashed run executes: reads, then two idempotent writes.
CRASH_PLAN = """{
 "pte_plan": "1",
 "steps": [
  {"id": "inv", "tool": "list_overdue_invoices", "args": {"days": 30}},
  {"id": "first", "tool": "queue_reminder", "args": {"invoice_id": "INV-1006", "channel": "letter"}},
  {"id": "all", "tool": "send_reminders", "args": {"invoice_ids": {"$ref": "inv/ids"}}},
  {"id": "total", "tool": "calculator",
   "args": {"expression": "n * 1", "variables": {"n": {"$ref": "all/queued"}}}}
 ],
 "result": {"$ref": "total/value"}
}
"""

#: pte._plan._control: a require that holds, a for_each over an idempotent write, a step run by its
#: `when` and one skipped (with a default).
CONTROL_PLAN = """{
 "pte_plan": "1",
 "steps": [
  {"id": "inv", "tool": "list_overdue_invoices", "args": {"days": 60}},
  {"id": "need", "require": {"nonempty": {"$ref": "inv/ids"}}, "message": "nothing is 60 days overdue"},
  {"id": "remind", "tool": "queue_reminder", "for_each": {"$ref": "inv/ids"}, "max_items": 20,
   "args": {"invoice_id": {"$ref": "inv/ids/*"}, "channel": "letter"}},
  {"id": "big", "tool": "calculator", "when": {"gt": [{"$ref": "inv/total"}, "1000"]},
   "args": {"expression": "t / n", "variables": {"t": {"$ref": "inv/total"}, "n": {"$ref": "inv/count"}}},
   "default": {"value": "0", "expression": "skipped"}},
  {"id": "none", "tool": "calculator", "when": {"empty": {"$ref": "inv/ids"}},
   "args": {"expression": "0"}, "default": {"value": "0", "expression": "skipped"}}
 ],
 "result": {"reminders": {"$ref": "remind"}, "average": {"$ref": "big/value"}, "none": {"$ref": "none/value"}}
}
"""


def control_sample(log: Path) -> str:
    """Run CONTROL_PLAN with `pte execute` semantics (no LLM); return the run's status."""
    from pte import AuditLog, Engine, load_registry

    registry = load_registry(["backoffice", "calculator", "shaping"])
    with AuditLog(log) as audit:
        return Engine(registry).execute(CONTROL_PLAN, audit).status


#: pte._run._stages: the first plan reads the overdue invoices and hands their ids to a second
#: planning stage, which queues the reminders by reference (recorded planner answers).
STAGED_REQUEST = "Look at what is more than 60 days overdue, then queue letter reminders for those invoices."
STAGED_ANSWERS = [
    """{"pte_plan": "1", "steps": [{"id": "inv", "tool": "list_overdue_invoices", "args": {"days": 60}}],
 "continue": {"overdue": {"$ref": "inv/ids"}, "total": {"$ref": "inv/total"}}}""",
    """{"pte_plan": "1", "steps": [{"id": "remind", "tool": "send_reminders",
 "args": {"invoice_ids": {"$ref": "inv/ids"}, "channel": "letter"}}], "result": {"$ref": "remind/queued"}}""",
]


def staged_sample(log: Path) -> str:
    """A two-stage `pte run` with recorded planner answers; return the run's status."""
    from pte import AuditLog, Engine, EngineConfig, load_registry
    from pte.engine import ReplayClient

    registry = load_registry(["backoffice", "calculator", "shaping"])
    llm = ReplayClient(STAGED_ANSWERS, model="recorded-demo-responses")
    with AuditLog(log) as audit:
        engine = Engine(registry, llm, config=EngineConfig(llm_answer=False))
        return engine.run(STAGED_REQUEST, audit).status


#: pte._run._delegation: a coordinator looks a customer up and delegates two tasks to two
#: specialists (recorded answers: the coordinator's plan, then each specialist's sub-plan).
DELEGATED_REQUEST = "What does customer C002 owe, and at what rate does its currency convert to USD?"
DELEGATED_ANSWERS = [
    """{"pte_plan": "1", "steps": [
 {"id": "cust", "tool": "get_customer", "args": {"customer_id": "C002"}},
 {"id": "owed", "delegate": "collections", "task": "What does this customer owe? Return {owes, overdue}.",
  "inputs": {"customer_id": {"$ref": "cust/customer_id"}}},
 {"id": "rate", "delegate": "treasury", "task": "The rate from this currency to USD. Return {rate}.",
  "inputs": {"currency": {"$ref": "cust/currency"}}}],
 "result": {"owes": {"$ref": "owed"}, "usd_rate": {"$ref": "rate/rate"}}}""",
    """{"pte_plan": "1", "steps": [{"id": "balance", "tool": "customer_balance",
 "args": {"customer_id": {"$param": "customer_id"}}}],
 "result": {"owes": {"$ref": "balance/open_total"}, "overdue": {"$ref": "balance/overdue_total"}}}""",
    """{"pte_plan": "1", "steps": [{"id": "fx", "tool": "fx_rate",
 "args": {"base": {"$param": "currency"}, "quote": "USD"}}], "result": {"rate": {"$ref": "fx/rate"}}}""",
]


def delegated_sample(log: Path) -> str:
    """A `pte run` whose coordinator delegates to two specialists (recorded answers)."""
    from pte import AuditLog, Engine, EngineConfig, load_registry
    from pte.engine import ReplayClient
    from pte.plan import Specialist

    registry = load_registry(["backoffice", "calculator", "shaping"])
    specialists = (
        Specialist(
            name="collections",
            description="Customer receivables: balances, overdue invoices, reminders.",
            catalogue=("list_overdue_invoices", "customer_balance", "queue_reminder"),
        ),
        Specialist(
            name="treasury",
            description="Exchange rates, suppliers and payments.",
            catalogue=("fx_rate", "list_suppliers", "get_supplier", "send_payment"),
        ),
    )
    llm = ReplayClient(DELEGATED_ANSWERS, model="recorded-demo-responses")
    with AuditLog(log) as audit:
        engine = Engine(registry, llm, config=EngineConfig(llm_answer=False, specialists=specialists))
        return engine.run(DELEGATED_REQUEST, audit).status


_CRASH_CHILD = textwrap.dedent(
    """
    import os, signal, sys
    sys.path.insert(0, {repo!r})
    from pte import AuditLog
    from pte import Engine
    from pte import load_registry

    kill_after = int(os.environ["PTE_SAMPLE_KILL_AFTER"])
    original = AuditLog.write_records  # every write goes through it (`write` and `append` too)

    def write_records(self, records):
        written = original(self, records)
        if written and written[-1]["seq"] + 1 >= kill_after:
            os.kill(os.getpid(), signal.SIGKILL)  # a crash right after these records reached the OS
        return written

    AuditLog.write_records = write_records
    registry = load_registry(["backoffice", "calculator", "shaping"])
    with AuditLog(sys.argv[1]) as audit:
        Engine(registry).execute(open(sys.argv[2]).read(), audit)
    """
)


def _create_ledger(path: Path) -> None:
    module = sys.modules[load_pack("backoffice")["list_overdue_invoices"].func.__module__]
    module.create_sample_ledger(path, overwrite=True)


def crash_sample(log: Path, ledger: Path, *, kill_after: int = 7) -> int:
    """Run CRASH_PLAN in a child process killed by SIGKILL after `kill_after` records; return its code."""
    with tempfile.TemporaryDirectory() as tmp:
        plan = Path(tmp) / "plan.json"
        plan.write_text(CRASH_PLAN, encoding="utf-8")
        env = {**os.environ, "PTE_LEDGER": str(ledger), "PTE_SAMPLE_KILL_AFTER": str(kill_after)}
        child = subprocess.run(
            [sys.executable, "-c", _CRASH_CHILD.format(repo=str(REPO)), str(log), str(plan)],
            env=env,
            capture_output=True,
            timeout=120,
        )
    return child.returncode


#: A payment plan that needs approval: the paused samples wait with it.
PAUSED_PLAN = """{"pte_plan": "1", "steps": [
 {"id": "sup", "tool": "get_supplier", "args": {"supplier_id": "S001"}},
 {"id": "pay", "tool": "send_payment", "args": {"iban": {"$ref": "sup/iban"}, "amount": "120.00",
  "currency": "EUR", "reference": "Invoice 7"}}
], "result": {"$ref": "pay/payment_id"}}"""


def paused_sample(target: Path, workdir: Path, *, approve: bool, signer: SigningKey) -> str:
    """A run that paused for approval in a SQLite store, was decided, and was resumed.

    A store keeps one chain per run, so the run's lines on their own are a valid log file.
    """
    from pte import Engine, load_registry
    from pte._core import TrustedKeys
    from pte.deployment import decide, pausing_gate, resume_run, run_in_store
    from pte.stores import open_store

    registry = load_registry(["backoffice", "calculator", "shaping"])
    name = target.stem
    with open_store(f"sqlite://{workdir / (name + '.db')}") as store:
        gate = pausing_gate(store, registry, keys=TrustedKeys([signer.public_key]))
        run_in_store(Engine(registry, approval=gate), store, run_id=name, plan_text=PAUSED_PLAN)
        decide(
            store,
            name,
            by="alice" if approve else "bob",
            approve=approve,
            note=None if approve else "not this supplier",
            signing_key=signer if approve else None,
        )
        result = resume_run(store, name, registry, gate=gate)
        target.write_bytes(b"".join(store.lines(name)))
    return f"{result.status} {getattr(result, 'reason', None) or '-'}"


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="pte-samples-") as tmp:
        workdir = Path(tmp)
        ledger = workdir / "ledger.sqlite"
        _create_ledger(ledger)
        os.environ["PTE_LEDGER"] = str(ledger)
        registry = demo_registry()
        by_name = {s.name: s for s in SCENARIOS}
        for sample, scenario in SAMPLES.items():
            target = HERE / f"{sample}.jsonl"
            target.unlink(missing_ok=True)
            outcome = run_scenario(by_name[scenario], registry, workdir, audit_path=target)
            status = "ok" if outcome.as_expected else "UNEXPECTED"
            print(f"{target.name:28} {outcome.result.status:14} {outcome.result.reason or '-'}  {status}")
        # The person shown the bill's IBAN and amount rejects them (pte._policy._endorsement).
        rejected = replace(
            by_name["bill_endorsed"],
            name="endorsement_rejected",
            endorse_reject=True,
            expect_status="failed_closed",
            expect_reason="endorsement_rejected",
        )
        target = HERE / "endorsement_rejected.jsonl"
        target.unlink(missing_ok=True)
        outcome = run_scenario(rejected, registry, workdir, audit_path=target)
        print(f"{target.name:28} {outcome.result.status:14} {outcome.result.reason or '-'}")
        control = HERE / "control.jsonl"
        control.unlink(missing_ok=True)
        print(f"{control.name:28} {control_sample(control)}")
        staged = HERE / "staged.jsonl"
        staged.unlink(missing_ok=True)
        print(f"{staged.name:28} {staged_sample(staged)}")
        delegated = HERE / "delegated.jsonl"
        delegated.unlink(missing_ok=True)
        print(f"{delegated.name:28} {delegated_sample(delegated)}")
        # A fresh Ed25519 key per generation: the approval in the sample is signed, so that every
        # verifier (verifier/verify.mjs too) checks a real signature. The private key is not
        # kept; its public key is published next to the samples, so that replaying them with
        # `--approval-keys audit_samples/approver.pub` re-checks the approval as a deployment would.
        signer = SigningKey.generate()
        (HERE / "approver.pub").write_bytes(signer.public_key.to_pem())
        for sample, approve in (("paused_then_approved", True), ("paused_then_rejected", False)):
            target = HERE / f"{sample}.jsonl"
            print(f"{target.name:28} {paused_sample(target, workdir, approve=approve, signer=signer)}")
        crashed = HERE / "crashed_mid_run.jsonl"
        crashed.unlink(missing_ok=True)
        code = crash_sample(crashed, ledger)
        print(f"{crashed.name:28} killed (exit {code}, SIGKILL is {-signal.SIGKILL})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
