"""Every audit sample verifies and replays to the same end; altered outputs are caught by replay."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from pte import Deployment, TrustedKeys, verify
from pte.audit import read_records
from pte.cli import main
from pte.errors import LogNotIntact
from pte.runs import replay_file
from tests._chain import log_text, relinked

SAMPLES = Path(__file__).resolve().parents[2] / "audit_samples"
SAMPLE_FILES = sorted(SAMPLES.glob("*.jsonl"))
EXPECTED_END = {
    "success": ("succeeded", None),
    "success_with_write": ("succeeded", None),
    "replan": ("succeeded", None),
    "invalid_json": ("failed_closed", "invalid_json"),
    "disallowed_tool": ("failed_closed", "tool_not_allowed"),
    "bad_args": ("failed_closed", "invalid_args"),
    "repaired": ("succeeded", None),
    "replans_exhausted": ("failed_closed", "replans_exhausted"),
    "policy_violation": ("failed_closed", "policy_violation"),
    "approval_missing": ("failed_closed", "approval_missing"),
    "approved_payment": ("succeeded", None),
    "control": ("succeeded", None),
    "staged": ("succeeded", None),
    "delegated": ("succeeded", None),
    "paused_then_approved": ("succeeded", None),
    "paused_then_rejected": ("failed_closed", "approval_rejected"),
    "endorsed_payment": ("succeeded", None),
    "endorsement_rejected": ("failed_closed", "endorsement_rejected"),
}


def test_every_kind_of_run_has_a_sample() -> None:
    names = {p.stem for p in SAMPLE_FILES}
    assert set(EXPECTED_END) | {"crashed_mid_run"} <= names
    readme = (SAMPLES / "README.md").read_text(encoding="utf-8")
    for name in names:
        assert f"{name}.jsonl" in readme, f"audit_samples/README.md does not describe {name}"


def sample_deployment(path: Path) -> Deployment | None:
    """A sample whose approval is signed replays with the approver's published public key, as
    a deployment that trusts that approver would (`signed: true` is re-checked, not believed)."""
    if b'"signed":true' not in path.read_bytes():
        return None
    return Deployment.of(keys=TrustedKeys.load(path.parent / "approver.pub"))


def test_a_signed_log_replays_without_the_key_and_says_the_signer_was_not_checked(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """README: without keys, a recorded signature is checked under its own embedded key (#24).

    That shows the approval is unaltered, not who signed it: the run replays the same, and
    the report says so and names the key, so a reader knows to pass ``--approval-keys``.
    """
    signed = [p for p in SAMPLE_FILES if sample_deployment(p) is not None]
    assert signed
    for path in signed:
        report = replay_file(path)
        assert report.ok, report.render()
        assert "not who signed them" in report.render() and "--approval-keys" in report.render()
        # With the approver's key the same log replays, and nothing is left unchecked.
        checked = replay_file(path, deployment=sample_deployment(path))
        assert checked.ok and "note" not in checked.render()
        assert main(["replay", str(path)]) == 0
        assert "same decisions" in capsys.readouterr().out


def _resigned(path: Path, tmp_path: Path, edit: Any) -> Path:
    """`path` with its approval records edited, their ids and the chain re-derived (verify passes)."""
    import dataclasses

    from pte.audit import Approval

    records = read_records(path)
    for record in records:
        if record["type"] == "approval":
            edit(record)
            fields: dict[str, Any] = {f.name: record.get(f.name) for f in dataclasses.fields(Approval)}
            record["approval_id"] = Approval(**fields).id
    out = tmp_path / path.name
    _rehash(records, out)
    return out


def test_a_signed_record_whose_signature_is_gone_or_wrong_is_refused_without_keys(tmp_path: Path) -> None:
    path = next(p for p in SAMPLE_FILES if sample_deployment(p) is not None)

    def strip(record: dict[str, Any]) -> None:  # claims signed, carries no signature
        record.update(signature=None, public_key=None, key_id=None)

    def break_signature(record: dict[str, Any]) -> None:
        record["signature"] = "00" * 64

    with pytest.raises(LogNotIntact, match="marked signed carries no signature"):
        replay_file(_resigned(path, tmp_path, strip))  # verify refuses it before replay
    with pytest.raises(LogNotIntact, match="does not verify under its own public key"):
        replay_file(_resigned(path, tmp_path, break_signature))


def test_an_approval_re_signed_with_another_key_is_named_without_keys_and_refused_with_them(
    tmp_path: Path,
) -> None:
    import dataclasses

    from pte import SigningKey
    from pte.audit import Approval

    path = next(p for p in SAMPLE_FILES if sample_deployment(p) is not None)
    forger = SigningKey.generate()
    public = forger.public_key

    def resign(record: dict[str, Any]) -> None:  # the same approval, signed by someone else
        fields: dict[str, Any] = {f.name: record.get(f.name) for f in dataclasses.fields(Approval)}
        fields.update(key_id=public.key_id, public_key=public.raw.hex(), signature="0" * 128)
        message = Approval(**fields).message()
        forged = dataclasses.replace(Approval(**fields), signature=forger.sign(message).hex())
        record.update({k: v for k, v in forged.to_dict().items() if k != "pte_approval"})

    forged = _resigned(path, tmp_path, resign)
    without = replay_file(forged)
    assert without.ok and public.key_id in without.render()
    assert not replay_file(forged, deployment=sample_deployment(path)).ok


@pytest.mark.parametrize("path", SAMPLE_FILES, ids=lambda p: p.stem)
def test_sample_verifies(path: Path) -> None:
    report = verify(path)
    assert report.intact, report.issue
    if path.stem == "crashed_mid_run":
        assert not report.complete
    else:
        assert report.ok


@pytest.mark.parametrize("path", SAMPLE_FILES, ids=lambda p: p.stem)
def test_sample_replays_to_the_same_end(path: Path) -> None:
    report = replay_file(path, deployment=sample_deployment(path))
    assert report.ok, report.render()
    [run] = report.runs
    if path.stem == "crashed_mid_run":
        assert run.outcome == "same_incomplete"
        return
    assert run.outcome == "same"
    assert (run.status, run.reason) == EXPECTED_END[path.stem]
    recorded_end = [r for r in read_records(path) if r["type"] == "run_finished"][-1]
    assert (recorded_end["status"], recorded_end["reason"]) == EXPECTED_END[path.stem]


def _rehash(records: list[dict[str, Any]], path: Path) -> None:
    path.write_text(log_text(relinked(records)), encoding="utf-8")


def _dependents(records: list[dict[str, Any]]) -> dict[str, dict[str, set[str]]]:
    """step id -> {pointer tokens joined by '/' -> ids of the steps whose args reference it}."""
    out: dict[str, dict[str, set[str]]] = {}
    for record in records:
        if record["type"] != "plan_accepted":
            continue
        for step in record["plan"]["steps"]:
            for ref in _refs(step["args"]):
                producer, _, pointer = ref.partition("/")
                out.setdefault(producer, {}).setdefault(pointer, set()).add(step["id"])
    return out


def _alter_at(output: Any, pointer: str) -> Any:
    """`output` with the part `pointer` selects changed (same types, so it stays schema-valid)."""
    if not pointer:
        return _alter(output)
    head, _, rest = pointer.partition("/")
    copy = json.loads(json.dumps(output))
    if isinstance(copy, list):
        copy[int(head)] = _alter_at(copy[int(head)], rest)
    else:
        copy[head] = _alter_at(copy[head], rest)
    return copy


def _refs(value: Any) -> list[str]:
    if isinstance(value, dict):
        if set(value) == {"$ref"}:
            return [value["$ref"]]
        return [r for v in value.values() for r in _refs(v)]
    if isinstance(value, list):
        return [r for v in value for r in _refs(v)]
    return []


def _alter(value: Any) -> Any:
    """A different value of the same JSON type (strings, numbers and lists all change)."""
    if isinstance(value, dict):
        return {k: _alter(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_alter(v) for v in value] + ([] if value else ["extra"])
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, str):
        return value + "1"  # "6088.40" -> "6088.401": still a decimal string
    return value


@pytest.mark.parametrize("sample", ["success", "success_with_write"])
def test_an_altered_output_rehashed_still_verifies_but_replay_reports_the_divergence(
    sample: str, tmp_path: Path
) -> None:
    records = read_records(SAMPLES / f"{sample}.jsonl")
    dependents = _dependents(records)
    checked = 0
    for index, record in enumerate(records):
        if record["type"] != "step_finished" or record["status"] != "ok":
            continue
        pointers = dependents.get(record["step_id"])
        if not pointers:
            continue
        pointer, readers = sorted(pointers.items())[0]
        altered = json.loads(json.dumps(records))
        altered[index]["output"] = _alter_at(record["output"], pointer)
        path = tmp_path / f"{sample}-{record['step_id']}.jsonl"
        _rehash(altered, path)
        assert verify(path).ok  # the forger re-hashed the chain: verify alone cannot tell
        report = replay_file(path)
        assert not report.ok
        divergence = report.runs[0].divergence
        assert divergence is not None
        assert divergence.line > index + 1  # found later, where the output was used
        assert divergence.record_type == "step_started" and divergence.field == "args"
        assert altered[divergence.line - 1]["step_id"] in readers
        checked += 1
    assert checked >= 1


def test_a_replanned_run_replays_its_replan(tmp_path: Path) -> None:
    records = read_records(SAMPLES / "replan.jsonl")
    assert [r["type"] for r in records].count("plan_accepted") == 2
    assert any(r["type"] == "replan" for r in records)
    # Change the replanner's answer: the second plan (and its hash) no longer match.
    altered = json.loads(json.dumps(records))
    calls = [i for i, r in enumerate(altered) if r["type"] == "llm_call" and r["role"] == "replanner"]
    altered[calls[0]]["response"] = altered[calls[0]]["response"].replace("INV-1006", "INV-1011")
    path = tmp_path / "replan.jsonl"
    _rehash(altered, path)
    report = replay_file(path)
    assert not report.ok
    assert report.runs[0].divergence is not None
    assert report.runs[0].divergence.record_type == "plan_accepted"
    assert report.runs[0].divergence.field in ("plan", "plan_hash")


def test_cli_replay_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--quiet", "replay", str(SAMPLES / "success.jsonl")]) == 0
    assert "same decisions" in capsys.readouterr().out
    records = read_records(SAMPLES / "success.jsonl")
    first = next(i for i, r in enumerate(records) if r["type"] == "step_finished")
    records[first]["output"]["open_total"] = "1.00"
    path = tmp_path / "forged.jsonl"
    _rehash(records, path)
    assert main(["--quiet", "replay", str(path), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["status"] == "diverged"
    divergence = report["runs"][0]["divergence"]
    assert divergence["record_type"] == "step_started" and divergence["field"] == "args"
    assert divergence["recorded"] != divergence["replayed"]
    with pytest.raises(SystemExit) as exc:
        main(["--quiet", "replay", str(tmp_path / "missing.jsonl")])
    assert exc.value.code == 2


def test_live_replay_reports_read_outputs_that_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from pte import load_pack

    module = __import__("sys").modules[load_pack("backoffice")["get_invoice"].func.__module__]
    ledger = tmp_path / "ledger.sqlite"
    module.create_sample_ledger(ledger, overwrite=True)
    monkeypatch.setenv("PTE_LEDGER", str(ledger))
    log = tmp_path / "success.jsonl"
    shutil.copy(SAMPLES / "success.jsonl", log)
    tools = ["--tools", "backoffice,calculator,shaping"]
    assert main(["--quiet", "replay", str(log), "--live", *tools]) == 0
    capsys.readouterr()
    # The ledger changes after the run: C004 pays an invoice. The read tool now says otherwise.
    balance = load_pack("backoffice")["customer_balance"].invoke({"customer_id": "C004"})
    invoice = balance["open_invoice_ids"][0]
    load_pack("backoffice")["record_payment"].invoke(
        {"invoice_id": invoice, "amount": "100.00", "currency": "EUR"}
    )
    assert main(["--quiet", "replay", str(log), "--live", "--json", *tools]) == 1
    report = json.loads(capsys.readouterr().out)
    diffs = report["runs"][0]["output_diffs"]
    assert [d["step_id"] for d in diffs] == ["b"]
    assert diffs[0]["tool"] == "customer_balance"


def test_live_replay_never_reruns_write_tools_unless_allowed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pte import load_pack

    module = __import__("sys").modules[load_pack("backoffice")["get_invoice"].func.__module__]
    ledger = tmp_path / "ledger.sqlite"
    module.create_sample_ledger(ledger, overwrite=True)
    monkeypatch.setenv("PTE_LEDGER", str(ledger))
    registry = __import__("pte").load_registry(["backoffice", "calculator", "shaping"])
    report = replay_file(SAMPLES / "approved_payment.jsonl", registry=registry, live=True)
    assert report.ok, report.render()
    import sqlite3

    with sqlite3.connect(ledger) as conn:
        assert conn.execute("select count(*) from payments_out").fetchone()[0] == 0


def test_every_record_of_every_kind_of_run_is_valid_against_the_audit_schema() -> None:
    """Checked with the reference jsonschema validator, independently of `verify`'s own checks."""
    import jsonschema

    # private: the record schema, checked against directly
    from pte._audit import load_audit_schema

    schema = load_audit_schema()
    validator = jsonschema.Draft202012Validator(schema)
    types: set[str] = set()
    for path in SAMPLE_FILES:
        for record in read_records(path, skip_partial_tail=True):
            errors = sorted(validator.iter_errors(record), key=str)
            assert not errors, f"{path.name} seq {record['seq']}: {errors[0].message}"
            types.add(record["type"])
    # Every record type the schema defines appears in some sample (the paused samples resume).
    assert types == set(schema["properties"]["type"]["enum"])
