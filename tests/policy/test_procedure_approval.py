"""Approving a procedure version once (#29): its writes run in any run, for any arguments the policy allows.

Authority is the deployment's (its procedures folder, approval store and trusted keys): an
edited store line, a copied approval, an approval of another version, a plan that writes the
nested id itself and a tampered log are all refused.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest

import tests._services as _services
from pte import Policy, SigningKey, TrustedKeys, compile_plan, load_registry, verify

# private: the approval gate, driven directly; the policy checks' parts, white-box
from pte._policy import ApprovalGate, ProcedureCover, procedure_cover
from pte.audit import ProcedureApproval, canonical_json, read_records
from pte.errors import ApprovalConsumed, ApprovalMissing
from pte.plan import Procedure, load_procedures
from pte.policy import ApprovalStore, approve_procedure, procedure_fingerprint
from tests._chain import chain_hash, sha256_text
from tests._cli_run import cli as _cli
from tests._cli_run import ledger as ledger  # the fixture
from tests.plan.test_procedures import PAY_SUPPLIER as PAY  # the procedure approved here

REPO = Path(__file__).resolve().parents[2]

# A request-given IBAN (literal) in the plan; mod-97 valid.
IBAN_A = "DE89370400440532013000"
IBAN_B = "GB82WEST12345698765432"


def _call(call_id: str, iban: Any, amount: str, reference: str = "INV 1") -> dict[str, Any]:
    return {
        "id": call_id,
        "tool": "pay_supplier",
        "args": {"iban": iban, "amount": amount, "reference": reference},
    }


def _plan(*steps: dict[str, Any]) -> str:
    return json.dumps({"pte_plan": "1", "steps": list(steps), "result": {"$ref": steps[-1]["id"]}})


def _payments(ledger: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(ledger) as conn:
        return [(r[0], r[1]) for r in conn.execute("SELECT iban, amount FROM payments_out ORDER BY id")]


@pytest.fixture(autouse=True)
def _deployment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    """$PTE_DEPLOYMENT as `Deployment` sets it, restored (unset) after each test."""
    monkeypatch.setenv("PTE_DEPLOYMENT", "")


class Deployment:
    """A deployment on disk: procedures folder, approval store, an approver's key pair."""

    def __init__(self, tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
        self.tmp, self.capsys = tmp, capsys
        self.folder = tmp / "procedures"
        self.folder.mkdir()
        self.write(PAY)
        self.store = tmp / "approvals.jsonl"
        self.private, self.public = tmp / "approver.pem", tmp / "approver.pub"
        assert (
            self.cli("keys", "generate", "--private", str(self.private), "--public", str(self.public))[0] == 0
        )
        # The deployment these flags name: a write under approver keys runs only under one (the
        # flags then repeat its values, which is accepted). `_deployment_variable` restores it.
        code, out, err = self.cli("init", str(tmp / "deployment"), *self.flags, "--no-store")
        assert code == 0, out + err
        os.environ["PTE_DEPLOYMENT"] = str(tmp / "deployment")

    def write(self, document: dict[str, Any]) -> Path:
        path = self.folder / f"{document['name']}.json"
        path.write_text(json.dumps(document), encoding="utf-8")
        return path

    def cli(self, *argv: str) -> tuple[int, str, str]:
        return _cli(self.capsys, *argv)

    @property
    def flags(self) -> list[str]:
        return [
            "--tools",
            "backoffice",
            "--procedures",
            str(self.folder),
            "--approvals",
            str(self.store),
            "--approval-keys",
            str(self.public),
        ]

    def approve(self, path: Path | None = None) -> tuple[int, str, str]:
        target = path or self.folder / "pay_supplier.json"
        return self.cli(
            "approve",
            "--procedure",
            str(target),
            "--by",
            "compliance",
            "--signing-key",
            str(self.private),
            *self.flags[:-2],  # an approver holds the private key; executing machines the public one
        )

    def execute(self, text: str, name: str) -> tuple[int, dict[str, Any], Path]:
        plan, log = self.tmp / f"{name}.json", self.tmp / f"{name}.jsonl"
        plan.write_text(text, encoding="utf-8")
        code, out, err = self.cli("execute", str(plan), *self.flags, "--audit", str(log), "--json")
        assert out, err
        return code, json.loads(out), log


def _node_verify(log: Path) -> dict[str, Any]:
    cmd = [_services.node(), str(REPO / "verifier" / "verify.mjs"), str(log), "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_one_procedure_approval_pays_in_two_runs_and_twice_in_one_plan(
    tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dep = Deployment(tmp_path, capsys)
    code, _, _ = dep.execute(_plan(_call("p", IBAN_A, "10.00")), "unapproved")
    assert code == 1  # the inlined write needs an approval, and there is none
    code, out, err = dep.approve()
    assert code == 0, err
    assert "approved procedure pay_supplier version" in out
    # Two runs, two different arguments, one approval.
    code, first, log1 = dep.execute(_plan(_call("p", IBAN_A, "10.00")), "run1")
    assert code == 0, first
    code, second, log2 = dep.execute(_plan(_call("p", IBAN_B, "20.00", "INV 2")), "run2")
    assert code == 0, second
    # One plan calling it twice.
    code, both, log3 = dep.execute(_plan(_call("a", IBAN_A, "30.00"), _call("b", IBAN_B, "40.00")), "run3")
    assert code == 0, both
    assert _payments(ledger) == [(IBAN_A, "10.00"), (IBAN_B, "20.00"), (IBAN_A, "30.00"), (IBAN_B, "40.00")]
    approvals = [r for r in read_records(log3) if r["type"] == "approval"]
    assert len(approvals) == 1
    record = approvals[0]
    assert (record["procedure"], record["steps"], record["signed"]) == (
        "pay_supplier",
        ["a__pay", "b__pay"],
        True,
    )
    assert record["version"] == Procedure.from_document(PAY).version and "run" not in record
    # Consumption is keyed by run and step: each run's writes once, the approval for many runs.
    consumed = [json.loads(line) for line in dep.store.read_text().splitlines() if '"consumed"' in line]
    assert sorted((c["run_id"], c["step_id"]) for c in consumed) == sorted(
        [
            (read_records(log1)[0]["run_id"], "p__pay"),
            (read_records(log2)[0]["run_id"], "p__pay"),
            (read_records(log3)[0]["run_id"], "a__pay"),
            (read_records(log3)[0]["run_id"], "b__pay"),
        ]
    )
    for log in (log1, log2, log3):
        assert verify(log).ok
        assert dep.cli("audit", "verify", str(log))[0] == 0
        assert _node_verify(log)["ok"] is True
        code, out, _ = dep.cli("replay", str(log), *dep.flags)
        assert code == 0 and "same decisions" in out, out
        code, out, _ = dep.cli("replay", str(log))  # from the log alone (recorded procedures)
        assert code == 0 and "same decisions" in out, out


def test_an_edited_body_is_refused_under_the_old_approval(
    tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dep = Deployment(tmp_path, capsys)
    assert dep.approve()[0] == 0
    edited = json.loads(json.dumps(PAY))
    edited["plan"]["steps"][0]["args"]["currency"] = "USD"
    dep.write(edited)
    code, doc, log = dep.execute(_plan(_call("p", IBAN_A, "10.00")), "edited")
    assert code == 1 and doc["reason"] == "approval_missing"
    assert "the procedure was edited: approve the new version" in doc["message"]
    assert not any(r["type"] == "step_started" for r in read_records(log))
    assert _payments(ledger) == []
    # Approving the edited file (the new version) lets it run.
    assert dep.approve()[0] == 0
    code, doc, _ = dep.execute(_plan(_call("p", IBAN_A, "10.00")), "approved")
    assert code == 0, doc
    assert _payments(ledger) == [(IBAN_A, "10.00")]


def test_an_untrusted_iban_argument_is_refused_at_compile_under_an_approval(
    tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dep = Deployment(tmp_path, capsys)
    assert dep.approve()[0] == 0
    doc_step = {"id": "doc", "tool": "read_document", "args": {"document_id": "DOC-004"}}
    code, doc, log = dep.execute(_plan(doc_step, _call("p", {"$ref": "doc/iban"}, "10.00")), "untrusted")
    assert code == 1 and doc["reason"] == "policy_violation", doc
    assert "p__pay" in doc["message"]
    assert [r["type"] for r in read_records(log)].count("step_started") == 0
    assert _payments(ledger) == []


def test_a_plan_forging_the_nested_id_or_provenance_gains_nothing(
    tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dep = Deployment(tmp_path, capsys)
    assert dep.approve()[0] == 0
    # The planner writes the inlined step itself, id and all: no call, so no procedure origin.
    forged = {
        "id": "p__pay",
        "tool": "send_payment",
        "args": {"iban": IBAN_A, "amount": "10.00", "currency": "EUR", "reference": "INV 1"},
    }
    code, doc, log = dep.execute(_plan(forged), "forged")
    assert code == 1 and doc["reason"] == "approval_missing", doc
    assert not any(r["type"] in ("step_started", "approval") for r in read_records(log))
    # Provenance-looking keys in the plan are not a plan (schema), never an origin.
    sneaky = {**forged, "procedure": "pay_supplier", "version": Procedure.from_document(PAY).version}
    code, doc, _ = dep.execute(_plan(sneaky), "sneaky")
    assert code == 1 and doc["reason"] == "schema_violation", doc
    # A real call beside a forged write: the forged step is not covered, so nothing runs.
    code, doc, log = dep.execute(_plan(_call("a", IBAN_A, "1.00"), {**forged, "id": "b__pay"}), "mixed")
    assert code == 1 and doc["reason"] == "approval_missing", doc
    assert not any(r["type"] == "step_started" for r in read_records(log))
    assert _payments(ledger) == []
    # In Python: the origin exists only on steps compile inlined.
    base = load_registry(["backoffice"])
    registry = base.with_procedures(load_procedures([Procedure.from_document(PAY)], base))
    plan = compile_plan(_plan(_call("a", IBAN_A, "1.00"), {**forged, "id": "b__pay"}), registry)
    assert [o.procedure for o in plan.procedure_origin("a__pay")] == ["pay_supplier"]
    assert plan.procedure_origin("b__pay") == ()
    assert procedure_cover(plan, registry) is None


def test_a_tampered_store_line_a_copied_approval_and_another_version_are_refused(
    tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dep = Deployment(tmp_path, capsys)
    edited = json.loads(json.dumps(PAY))
    edited["description"] = "Pay, second version."
    other = dep.tmp / "other.json"
    other.write_text(json.dumps(edited), encoding="utf-8")
    assert dep.approve(other)[0] == 0  # an approval of another version of the procedure
    code, doc, _ = dep.execute(_plan(_call("p", IBAN_A, "10.00")), "other_version")
    assert code == 1 and doc["reason"] == "approval_missing" and "approve the new version" in doc["message"]
    # Someone with write access to the store edits that approval to name the deployed version.
    deployed = Procedure.from_document(PAY).version
    line = json.loads(dep.store.read_text())
    line["version"] = deployed
    dep.store.write_text(canonical_json(line) + "\n")
    code, doc, _ = dep.execute(_plan(_call("p", IBAN_A, "10.00")), "edited_line")
    assert code == 1 and doc["reason"] == "approval_missing" and "bad signature" in doc["message"], doc
    # An approval by a key the deployment does not trust (a copied decision signed elsewhere).
    stranger = SigningKey.generate()
    store = ApprovalStore(dep.store)
    base = load_registry(["backoffice"])
    procedure = Procedure.from_document(PAY)
    registry = base.with_procedures(load_procedures([procedure], base))
    policy = Policy.from_registry(registry)
    approve_procedure(
        procedure,
        "mallory",
        store,
        catalogue=procedure_fingerprint(registry, procedure, policy),
        signing_key=stranger,
    )
    code, doc, _ = dep.execute(_plan(_call("p", IBAN_A, "10.00")), "stranger")
    assert code == 1 and "not a trusted approval key" in doc["message"], doc
    # A trusted approval of another procedure, renamed: its signature covers the name.
    trusted = SigningKey.load(dep.private)
    decoy = Procedure.from_document({**PAY, "name": "pay_other"})
    good = approve_procedure(
        decoy,
        "compliance",
        ApprovalStore(tmp_path / "elsewhere.jsonl"),
        catalogue=procedure_fingerprint(registry, procedure, policy),
        signing_key=trusted,
    )
    copied = {**good.to_dict(), "procedure": "pay_supplier", "version": deployed}
    with dep.store.open("a") as fh:
        fh.write(canonical_json(copied) + "\n")
    code, doc, _ = dep.execute(_plan(_call("p", IBAN_A, "10.00")), "copied")
    assert code == 1 and doc["reason"] == "approval_missing", doc
    assert _payments(ledger) == []
    # A plan approval of one plan is no procedure approval for another.
    gate = ApprovalGate(store, registry, keys=TrustedKeys.load(dep.public), policy=policy)
    plan = compile_plan(_plan(_call("p", IBAN_A, "10.00")), registry, checks=[policy.check()])
    with pytest.raises(ApprovalMissing):
        gate.check(plan, run_id="r1")


def test_each_run_runs_each_write_once_under_one_procedure_approval(tmp_path: Path) -> None:
    base = load_registry(["backoffice"])
    procedure = Procedure.from_document(PAY)
    registry = base.with_procedures(load_procedures([procedure], base))
    policy = Policy.from_registry(registry)
    store = ApprovalStore(tmp_path / "approvals.jsonl")
    approval = approve_procedure(
        procedure, "compliance", store, catalogue=procedure_fingerprint(registry, procedure, policy)
    )
    plan = compile_plan(_plan(_call("p", IBAN_A, "10.00")), registry, checks=[policy.check()])
    store.consume(approval, plan.hash, "p__pay", "run-1")
    with pytest.raises(ApprovalConsumed, match="run run-1 already used its approval"):
        store.consume(approval, plan.hash, "p__pay", "run-1")
    store.consume(approval, plan.hash, "p__pay", "run-2")  # another run: its own once
    gate = ApprovalGate(store, registry, policy=policy)
    with pytest.raises(ApprovalConsumed):  # a fresh start of run-1 is refused before anything runs
        gate.check(plan, run_id="run-1")
    cover = gate.check(plan, run_id="run-3")
    assert cover is not None and not isinstance(cover, ProcedureApproval)


def test_a_tampered_procedure_approval_record_fails_verify_node_and_replay(
    tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dep = Deployment(tmp_path, capsys)
    assert dep.approve()[0] == 0
    code, doc, log = dep.execute(_plan(_call("a", IBAN_A, "30.00"), _call("b", IBAN_B, "40.00")), "run")
    assert code == 0, doc
    records = read_records(log)

    def tampered(name: str, change: dict[str, Any]) -> Path:
        out = tmp_path / f"{name}.jsonl"
        prev = "0" * 64
        with out.open("w", encoding="utf-8") as fh:
            for record in records:
                record = {k: v for k, v in record.items() if k != "hash"}
                if record["type"] == "approval":
                    record.update(change)
                record["prev"] = prev
                prev = record["hash"] = chain_hash(prev, record)
                fh.write(canonical_json(record) + "\n")
        return out

    other_version = sha256_text("another version")
    cases: list[tuple[str, dict[str, Any], bool]] = [
        ("version", {"version": other_version}, False),  # signature and id break
        ("by", {"by": "mallory"}, False),
        ("steps", {"steps": ["a__pay"]}, True),  # not signed: replay recomputes the cover
        ("unsigned", {"signature": None, "key_id": None, "public_key": None, "signed": False}, False),
    ]
    for name, change, replay_only in cases:
        path = tampered(name, change)
        if not replay_only:
            assert not verify(path).ok, name
            assert dep.cli("audit", "verify", str(path))[0] == 1, name
            assert _node_verify(path)["ok"] is False, name
        code, out, _ = dep.cli("replay", str(path), *dep.flags)
        assert code != 0 and "same decisions" not in out, (name, out)
    # An edited byte without re-hashing breaks the chain.
    text = log.read_text().replace('"procedure":"pay_supplier"', '"procedure":"pay_supplieR"')
    broken = tmp_path / "broken.jsonl"
    broken.write_text(text)
    assert not verify(broken).ok and _node_verify(broken)["ok"] is False


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (None, "procedure file"),
        ("{not json", "not JSON"),
        (json.dumps({"pte_procedure": "1", "name": "x"}), "not a procedure file"),
        (
            json.dumps({**PAY, "plan": {**PAY["plan"], "steps": [{"id": "s", "tool": "rm_rf", "args": {}}]}}),
            "allow-list",
        ),
    ],
)
def test_a_bad_procedure_file_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, needle: str
) -> None:
    path = tmp_path / "p.json"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    store = tmp_path / "approvals.jsonl"
    code, out, err = _cli(
        capsys,
        "approve",
        "--procedure",
        str(path),
        "--by",
        "x",
        "--tools",
        "backoffice",
        "--approvals",
        str(store),
    )
    assert code == 2 and needle in err and "Traceback" not in err + out, err
    assert not store.exists()
    # Neither or both of PLAN_FILE and --procedure: a usage error too.
    assert _cli(capsys, "approve", "--by", "x", "--tools", "backoffice")[0] == 2
    assert (
        _cli(capsys, "approve", str(path), "--procedure", str(path), "--by", "x", "--tools", "backoffice")[0]
        == 2
    )


def test_an_approval_of_a_procedure_is_refused_for_one_of_its_callers_nested_body(tmp_path: Path) -> None:
    """An approval covers the innermost call's version: approving an outer procedure does not vouch
    for the body of one it calls, which can be edited on its own."""
    base = load_registry(["backoffice"])
    inner = Procedure.from_document(PAY)
    outer = Procedure.from_document(
        {
            "pte_procedure": "1",
            "name": "pay_twice",
            "description": "Pay the same IBAN twice.",
            "parameters": PAY["parameters"],
            "plan": {
                "pte_plan": "1",
                "steps": [
                    {
                        "id": f"s{i}",
                        "tool": "pay_supplier",
                        "args": {k: {"$param": k} for k in PAY["parameters"]["properties"]},
                    }
                    for i in (1, 2)
                ],
                "result": {"$ref": "s1"},
            },
        }
    )
    registry = base.with_procedures(load_procedures([inner, outer], base))
    policy = Policy.from_registry(registry)
    store = ApprovalStore(tmp_path / "a.jsonl")
    plan = compile_plan(
        json.dumps({"pte_plan": "1", "steps": [{**_call("x", IBAN_A, "1.00"), "tool": "pay_twice"}]}),
        registry,
        checks=[policy.check()],
    )
    assert [[o.call for o in plan.procedure_origin(s)] for s in plan.order] == [
        ["x", "x__s1"],
        ["x", "x__s2"],
    ]
    gate = ApprovalGate(store, registry, policy=policy)
    approve_procedure(outer, "c", store, catalogue=procedure_fingerprint(registry, outer, policy))
    with pytest.raises(ApprovalMissing, match="no approval of procedure pay_supplier"):
        gate.check(plan, run_id="r")
    approve_procedure(inner, "c", store, catalogue=procedure_fingerprint(registry, inner, policy))
    cover = gate.check(plan, run_id="r")
    assert cover is not None and not isinstance(cover, ProcedureApproval)
    assert isinstance(cover, ProcedureCover)
    assert [steps for _, steps in cover.approvals] == [("x__s1__pay", "x__s2__pay")]


def test_approve_checks_valid_for_and_the_key_and_says_unsigned_alike_for_a_plan_and_a_procedure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dep = Deployment(tmp_path, capsys)
    plan = tmp_path / "plan.json"
    plan.write_text(_plan(_call("p", IBAN_A, "10.00")), encoding="utf-8")
    for target in (["--procedure", str(dep.folder / "pay_supplier.json")], [str(plan)]):
        base = ["approve", *target, "--by", "compliance", *dep.flags[:-2]]
        code, out, err = dep.cli(*base, "--valid-for", "0")
        assert code == 2 and "--valid-for" in err, (target, err)
        code, out, err = dep.cli(*base, "--signing-key", str(tmp_path / "missing.pem"))
        assert code == 2 and "missing.pem" in err and "Traceback" not in err, (target, err)
        # The deployment has approver keys: an unsigned approval would never count, so it is
        # refused, saying how to sign (without keys it is recorded "unsigned": test_cli.py).
        code, out, err = dep.cli(*base)
        assert code == 2 and "signed by its approver keys" in err and "--signing-key" in err, (target, err)
        code, out, err = dep.cli(*base, "--signing-key", str(dep.private))
        assert code == 0 and "Ed25519-signed by key " in out, (target, out, err)
