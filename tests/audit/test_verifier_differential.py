"""Differential test: the Node verifier and `pte audit verify` agree on generated tamperings.

Hypothesis takes a format 2 sample log, edits one record (a field's value, a value's type, a
member added or removed, at any depth), sometimes re-keys edited stored content by its new
hash, then re-chains every hash from there on, as someone who can write the file can. The
chain then holds; only the record schema and the content checks (docs/audit-format.md) can
refuse the record. Both verifiers must reach the same verdict (ok, intact, and the record
count and head hashes when intact). Before the Node verifier checked the schema, 69 of 186
such tamperings were accepted by Node and refused by Python.

Node runs once for the whole test (a small driver imports verifier/verify.mjs and reads log
paths on stdin), so hundreds of examples cost seconds.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from pte import verify

# private: the one verdict every surface shows
from pte._audit import verdict
from pte.audit import canonical_json, hash_json
from tests._chain import GENESIS, chain_hash, line_of

REPO = Path(__file__).resolve().parents[2]
VERIFIER = REPO / "verifier" / "verify.mjs"
SAMPLES = sorted(
    p for p in (REPO / "audit_samples").glob("*.jsonl") if b'"format":"pte-audit/2"' in p.read_bytes()[:65536]
)
RECORDS = {p.stem: [json.loads(line) for line in p.read_bytes().splitlines()] for p in SAMPLES}

DRIVER = """
import { verifyLog, readAnchors, judge } from %s;
import { readFileSync, existsSync } from "node:fs";
import { createPublicKey } from "node:crypto";
import { createInterface } from "node:readline";
for await (const line of createInterface({ input: process.stdin })) {
  let out;
  try {
    // A log's path, or {"log", "key", "anchors"}: the log with the deployment's key and anchors.
    const job = line.startsWith("{") ? JSON.parse(line) : { log: line };
    const report = verifyLog(readFileSync(job.log));
    let anchors;
    if (job.key !== undefined) {
      try {
        const key = createPublicKey(readFileSync(job.key));
        anchors = existsSync(job.anchors) ? readAnchors(readFileSync(job.anchors), key) : [];
      } catch (e) {
        anchors = e;
      }
    }
    const { heads, runRecords, ...rest } = report;
    out = { ...rest, verdict: judge(report, anchors, null) };
  } catch (e) {
    out = { error: String(e && e.stack) };
  }
  process.stdout.write(JSON.stringify(out) + "\\n");
}
"""


class NodeVerifier:
    """One Node process verifying the logs whose paths it is sent, one JSON report per line."""

    def __init__(self) -> None:
        node = shutil.which("node") or shutil.which("nodejs")
        assert node is not None, "node is required (.ci/run installs nodejs)"
        self.proc = subprocess.Popen(
            [node, "--input-type=module", "-e", DRIVER % json.dumps(VERIFIER.as_uri())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def __call__(self, path: Path, key: Path | None = None, anchors: Path | None = None) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        job = (
            str(path)
            if key is None
            else json.dumps({"log": str(path), "key": str(key), "anchors": str(anchors)})
        )
        self.proc.stdin.write(f"{job}\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, "the Node verifier ended"
        report: dict[str, Any] = json.loads(line)
        assert "error" not in report, report  # a crash is not a verdict
        return report

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)
        if self.proc.stdout is not None:
            self.proc.stdout.close()  # else collected in some later test: a ResourceWarning there


@pytest.fixture(scope="module")
def node() -> Iterator[NodeVerifier]:
    verifier = NodeVerifier()
    yield verifier
    verifier.close()


# --- tamperings -----------------------------------------------------------------------------

SAFE_INT = 2**53 - 1  # beyond it a JSON number is not one IEEE double (RFC 8785 section 3.2.2.3)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-SAFE_INT, SAFE_INT)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
    | st.sampled_from(["", "0" * 64, "a" * 64, "run_started", "step_finished", "ok", "pte-audit/2", "read"])
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)


def _containers(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    if isinstance(value, dict | list):
        yield path, value
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            yield from _containers(item, (*path, key))


def _different_type(value: Any) -> Any:
    """A value of another JSON type standing for `value` (a string for a number, and so on)."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return {"0": value[0]} if value else {}
    if isinstance(value, dict):
        return list(value.values())
    return False  # null


@st.composite
def tamperings(draw: st.DrawFn) -> tuple[str, list[dict[str, Any]], str]:
    """(sample name, the tampered records, what was done)."""
    name = draw(st.sampled_from(sorted(RECORDS)))
    records = json.loads(json.dumps(RECORDS[name]))
    index = draw(st.integers(0, len(records) - 1))
    record = records[index]
    path, container = draw(st.sampled_from(list(_containers(record))))
    keys = list(container) if isinstance(container, dict) else list(range(len(container)))
    op = draw(st.sampled_from(["edit", "retype", "add", "remove"] if keys else ["add"]))
    key: Any
    if op == "add":
        if isinstance(container, dict):
            key = draw(
                st.text(min_size=1, max_size=10) | st.sampled_from(["format", "seq", "extra", "status", "x"])
            )
            assume(key not in container)
            container[key] = draw(json_values)
        else:
            container.insert(draw(st.integers(0, len(container))), draw(json_values))
        key = None
    else:
        key = draw(st.sampled_from(keys))
        if op == "remove":
            del container[key]
        elif op == "retype":
            container[key] = _different_type(container[key])
        else:
            new = draw(json_values)
            assume(new != container[key])
            container[key] = new
    rekeyed = draw(st.booleans()) and _rekey(record)
    done = f"{op} at record {index} {list(path)}{'' if key is None else [key]}"
    return name, records, done + (" (stored content re-keyed)" if rekeyed else "")


def _rekey(record: dict[str, Any]) -> bool:
    """Re-key edited stored content by its new hash, and the references to it: what a writer
    who knows the format does so that only the content checks can still catch the edit."""
    stored = record.get("stored")
    if not isinstance(stored, dict):
        return False
    renamed: dict[str, str] = {}
    fresh: dict[str, Any] = {}
    for key, value in stored.items():
        try:
            new = hash_json(value)
        except (ValueError, TypeError):
            new = key
        fresh[new] = value
        if new != key:
            renamed[key] = new
    record["stored"] = fresh
    for name in ("catalogue", "policy", "prompts"):
        if isinstance(record.get(name), str) and record[name] in renamed:  # a tampering may retype it
            record[name] = renamed[record[name]]
    return bool(renamed)


def _rechain(records: list[dict[str, Any]]) -> bytes | None:
    """The records as a log whose every prev/hash is recomputed (None: not writable as JCS)."""
    out = []
    prev = GENESIS
    try:
        for record in records:
            body = {k: v for k, v in record.items() if k != "hash"}
            body["prev"] = prev
            prev = chain_hash(prev, body)
            out.append(line_of({**body, "hash": prev}))
    except (ValueError, TypeError):
        return None
    return b"".join(out)


def _verdicts(node: NodeVerifier, data: bytes) -> tuple[dict[str, Any], dict[str, Any]]:
    with tempfile.TemporaryDirectory() as scratch:
        log = Path(scratch) / "log.jsonl"
        log.write_bytes(data)
        return {**verify(log).to_dict(), "verdict": verdict(log).to_dict()}, node(log)


def _states(found: dict[str, Any]) -> tuple[str, dict[str, str]]:
    return found["status"], {name: check["state"] for name, check in found["checks"].items()}


def _agree(mine: dict[str, Any], theirs: dict[str, Any]) -> bool:
    if (mine["ok"], mine["intact"]) != (theirs["ok"], theirs["intact"]):
        return False
    # One verdict: the same checks made, failed and not available (pte._audit.verdict).
    if _states(mine["verdict"]) != _states(theirs["verdict"]):
        return False
    if mine["intact"]:
        keys = ("records", "last_hash", "log_id")
        return all(mine[k] == theirs[k] for k in keys)
    return True


def test_the_untouched_samples_agree(node: NodeVerifier) -> None:
    for name, records in RECORDS.items():
        data = _rechain(records)
        assert data is not None
        mine, theirs = _verdicts(node, data)
        assert _agree(mine, theirs), (name, mine, theirs)
        assert mine["intact"], name


@pytest.mark.slow
@settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(tampering=tamperings())
def test_both_verifiers_agree_on_every_rechained_tampering(
    node: NodeVerifier, tampering: tuple[str, list[dict[str, Any]], str]
) -> None:
    name, records, what = tampering
    data = _rechain(records)
    assume(data is not None)
    assert data is not None
    mine, theirs = _verdicts(node, data)
    assert _agree(mine, theirs), (name, what, mine["issue"], theirs["issue"], mine["ok"], theirs["ok"])


def _catalogue(record: dict[str, Any]) -> list[Any]:
    catalogue: list[Any] = record["stored"][record["catalogue"]]
    return catalogue


CONTENT_TAMPERINGS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "a null catalogue entry": lambda r: _catalogue(r).append(None),
    "a number as catalogue entry": lambda r: _catalogue(r).__setitem__(0, 5),
    "a list as catalogue entry": lambda r: _catalogue(r).__setitem__(0, []),
    "an object as catalogue": lambda r: r["stored"].__setitem__(r["catalogue"], {"a": 1}),
    "a tool twice in the catalogue": lambda r: _catalogue(r).append(dict(_catalogue(r)[0])),
    "a tool's effect changed in the catalogue": lambda r: _catalogue(r)[0].__setitem__("effect", "write"),
    "a tool's schema changed in the catalogue": lambda r: _catalogue(r)[0].__setitem__("input_schema", {}),
    "the catalogue emptied": lambda r: _catalogue(r).clear(),
    # A tool without its schemas hashed `undefined` in the Node verifier, which crashed on it.
    "a tool's input schema removed from the catalogue": lambda r: _catalogue(r)[0].pop("input_schema"),
    "a tool's output schema removed from the catalogue": lambda r: _catalogue(r)[0].pop("output_schema"),
}


@pytest.mark.parametrize("what", sorted(CONTENT_TAMPERINGS))
def test_both_verifiers_agree_on_rekeyed_content_tamperings(node: NodeVerifier, what: str) -> None:
    # Stored content edited and re-keyed by its new hash: only the content checks can refuse it
    # (a null entry used to crash the Node verifier instead of refusing the log).
    records = json.loads(json.dumps(RECORDS["success"]))
    CONTENT_TAMPERINGS[what](records[0])
    assert _rekey(records[0])
    data = _rechain(records)
    assert data is not None
    mine, theirs = _verdicts(node, data)
    assert _agree(mine, theirs), (what, mine["issue"], theirs["issue"])
    assert not mine["ok"]


# --- anchored logs: the deployment's public key and anchors (docs/audit-format.md, "Anchors") ---

REMIND = json.dumps(
    {
        "pte_plan": "1",
        "steps": [
            {"id": "overdue", "tool": "list_overdue_invoices", "args": {"days": 30}},
            {"id": "remind", "tool": "send_reminders", "args": {"invoice_ids": {"$ref": "overdue/ids"}}},
        ],
        "result": {"$ref": "overdue/total"},
    }
)
READ_ONLY = json.dumps(
    {"pte_plan": "1", "steps": [{"id": "inv", "tool": "get_invoice", "args": {"invoice_id": "INV-1006"}}]}
)


@pytest.fixture(scope="module")
def anchored(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A log of three runs (two with a write, one read-only) written with a deployment key."""
    from pte import AuditLog, Engine, SigningKey, load_registry
    from pte.audit import Anchors
    from pte.cli import main

    where = tmp_path_factory.mktemp("anchored")
    key = SigningKey.generate()
    public = where / "deployment.key.pub"
    public.write_bytes(key.public_key.to_pem())
    anchors_file = where / "anchors.jsonl"
    log = where / "log.jsonl"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PTE_LEDGER", str(where / "ledger.sqlite"))
        assert main(["--quiet", "ledger", "init", "--path", str(where / "ledger.sqlite")]) == 0
        # Bound to a deployment: each run is anchored at its start and its plan, as well as
        # before its write and at its seal (docs/audit-format.md, "Anchors").
        engine = Engine(load_registry(["backoffice"]), deployment="differential-test-deployment")
        for plan in (REMIND, READ_ONLY, REMIND):
            with AuditLog(log, anchors=Anchors(anchors_file, key=key)) as audit:
                assert engine.execute(plan, audit).ok
    return {
        "log": log.read_bytes(),
        "anchors": anchors_file.read_bytes(),
        "public": public,
        "checker": Anchors(anchors_file, public=key.public_key),
        "key": key,
    }


def _anchored_verdicts(
    node: NodeVerifier, anchored: dict[str, Any], log_bytes: bytes, anchor_bytes: bytes
) -> tuple[dict[str, Any], dict[str, Any]]:
    from pte.audit import Anchors

    with tempfile.TemporaryDirectory() as scratch:
        log = Path(scratch) / "log.jsonl"
        log.write_bytes(log_bytes)
        anchors_file = Path(scratch) / "anchors.jsonl"
        anchors_file.write_bytes(anchor_bytes)
        checker = Anchors(anchors_file, public=anchored["key"].public_key)
        mine = {**verify(log).to_dict(), "verdict": verdict(log, anchors=checker).to_dict()}
        return mine, node(log, anchored["public"], anchors_file)


def test_an_untouched_anchored_log_agrees_and_its_anchors_are_checked(
    node: NodeVerifier, anchored: dict[str, Any]
) -> None:
    mine, theirs = _anchored_verdicts(node, anchored, anchored["log"], anchored["anchors"])
    assert _agree(mine, theirs), (mine, theirs)
    assert _states(mine["verdict"]) == (
        "ok",
        {"chain": "checked", "schema": "checked", "sealed": "checked", "anchors": "checked"},
    )


@st.composite
def anchored_tamperings(draw: st.DrawFn, log: bytes, anchors: bytes) -> tuple[bytes, bytes, str, bool]:
    """(log, anchors file, what was done, whether a checker with the key must refuse it): an edit
    re-chained, a cut, an anchor line removed, edited or signed by another key, or the anchors
    file cut. Not every one can be caught: whole runs cut off the end of a log (anchors name
    runs, not logs), and a run's last anchors dropped while it keeps one (the anchors file
    rolled back; the records after its last anchor are covered by the chain only)."""
    lines = log.splitlines(keepends=True)
    anchor_lines = anchors.splitlines(keepends=True)
    kinds = ["edit", "cut", "drop_anchor", "edit_anchor", "forged_anchor", "drop_last_anchors"]
    kind = draw(st.sampled_from(kinds))
    if kind == "edit":
        records = [json.loads(line) for line in lines]
        index = draw(st.integers(0, len(records) - 1))
        record = records[index]
        fixed = ("hash", "prev", "seq", "run_id", "type")
        field = draw(st.sampled_from(sorted(k for k in record if k not in fixed)))
        new = draw(json_values)
        assume(new != record[field])
        record[field] = new
        data = _rechain(records)
        assume(data is not None)
        assert data is not None
        return data, anchors, f"edit {field} of record {index}, re-chained", True
    if kind == "cut":
        keep = draw(st.integers(1, len(lines) - 1))
        between_runs = json.loads(lines[keep])["type"] == "run_started"
        return b"".join(lines[:keep]), anchors, f"cut after record {keep - 1}", not between_runs
    run_ids = {json.loads(line)["run_id"] for line in lines}
    if kind == "drop_last_anchors":
        keep = draw(st.integers(0, len(anchor_lines) - 1))
        kept = {json.loads(line)["run_id"] for line in anchor_lines[:keep]}
        # A run left with no anchor is refused (sealed, and bound to its deployment).
        return log, b"".join(anchor_lines[:keep]), f"anchors file cut after line {keep}", kept != run_ids
    index = draw(st.integers(0, len(anchor_lines) - 1))
    if kind == "drop_anchor":
        rest = anchor_lines[:index] + anchor_lines[index + 1 :]
        last = index == len(anchor_lines) - 1
        orphan = {json.loads(line)["run_id"] for line in rest} != run_ids
        return log, b"".join(rest), f"anchor line {index} removed", not last or orphan
    doc = json.loads(anchor_lines[index])
    if kind == "edit_anchor":
        name = draw(st.sampled_from(["seq", "head", "run_id", "time"]))
        new = draw(json_values)
        assume(new != doc[name])
        doc[name] = new
    else:  # signed, by a key that is not the deployment's
        from pte import SigningKey

        other = SigningKey.generate()
        doc["key_id"] = other.public_key.key_id
        signed = {k: v for k, v in doc.items() if k != "signature"}
        doc["signature"] = other.sign(b"pte-anchor-v1\n" + canonical_json(signed).encode()).hex()
    line = line_of(doc)
    edited = b"".join([*anchor_lines[:index], line, *anchor_lines[index + 1 :]])
    return log, edited, f"{kind} at line {index}", True


@pytest.mark.slow
@settings(
    deadline=None,
    max_examples=150,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_both_verifiers_agree_on_anchored_logs_and_their_tamperings(
    node: NodeVerifier, anchored: dict[str, Any], data: st.DataObject
) -> None:
    log, anchors, what, caught = data.draw(anchored_tamperings(anchored["log"], anchored["anchors"]))
    mine, theirs = _anchored_verdicts(node, anchored, log, anchors)
    assert _agree(mine, theirs), (what, mine["verdict"], theirs["verdict"])
    if caught:  # a checker with the key refuses it (the spec's MUST), Node as Python
        assert mine["verdict"]["status"] == "tampered", (what, mine["verdict"])


def test_a_big_double_in_stored_content_hashes_as_the_double_it_is(node: NodeVerifier) -> None:
    """Found by the tamperings above: stored content holding the double 4.026231202385854e16
    (JCS: 40262312023858540, read back as an integer no double holds exactly) was refused by
    `pte audit verify` ("does not hash to its key") and accepted by Node. Every number in a log
    is a double (docs/audit-format.md section 1): both accept it."""
    records = json.loads(json.dumps(RECORDS["success"]))
    policy = records[0]["stored"][records[0]["policy"]]
    policy["note"] = {"": 4.026231202385854e16}
    assert _rekey(records[0])
    data = _rechain(records)
    assert data is not None
    mine, theirs = _verdicts(node, data)
    assert _agree(mine, theirs), (mine["issue"], theirs["issue"])
    assert mine["ok"]
