"""The Node verifier checks runs of a deployment whose anchor chain is in its run store (#33).

`pte init --anchors store` keeps the chain in the store's ``pte_anchors`` table, which
verifier/verify.mjs cannot read. `pte audit anchors export STORE_URL FILE` writes the chain as
the anchors file it reads, and `pte audit export STORE_URL --run RUN_ID FILE` a run as a log.
The lines are exported as signed, so whoever exports them cannot change one unnoticed: the
verifier checks the deployment key's signatures.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

import pte
import tests._services as _services

# private: the verdict with anchors, as `pte audit verify` gives it
from pte._audit import verdict
from pte.audit import Anchors
from pte.deployment import run_in_store
from pte.stores import SQLiteStore, open_store
from tests._chain import chain_hash, line_of
from tests._cli_run import cli
from tests._cli_run import ledger as ledger  # the fixture

REPO = Path(__file__).resolve().parents[2]
VERIFIER = REPO / "verifier" / "verify.mjs"

PLAN = json.dumps(
    {
        "pte_plan": "1",
        "steps": [
            {"id": "inv", "tool": "get_invoice", "args": {"invoice_id": "INV-1011"}},
            {
                "id": "pay",
                "tool": "record_payment",
                "args": {"invoice_id": "INV-1011", "amount": "100.00", "currency": {"$ref": "inv/currency"}},
            },
        ],
        "result": {"$ref": "pay/payment_id"},
    }
)


def _node(log: Path, key: Path, anchors: Path) -> tuple[int, dict[str, Any]]:
    cmd = [_services.node(), str(VERIFIER), str(log), "--deployment-key", str(key), "--anchors", str(anchors)]
    out = subprocess.run([*cmd, "--json"], capture_output=True, text=True, timeout=60)
    assert out.returncode in (0, 1), out.stderr
    return out.returncode, json.loads(out.stdout)


def _rechained(path: Path, edit: str, into: str) -> Path:
    """The log with `edit` replaced by `into` in every record, re-hashed as a writer can."""
    prev, lines = "0" * 64, []
    for line in path.read_text(encoding="utf-8").splitlines():
        record = json.loads(line.replace(edit, into))
        body = {k: v for k, v in record.items() if k != "hash"}
        body["prev"] = prev
        prev = chain_hash(prev, body)
        lines.append(line_of({**body, "hash": prev}))
    edited = path.with_name("edited.jsonl")
    edited.write_bytes(b"".join(lines))
    return edited


@pytest.fixture
def exported(tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    """A paid run of a deployment whose anchors are in its SQLite store, exported for Node."""
    folder = tmp_path / "dep"
    url = f"sqlite://{tmp_path / 'runs.db'}"
    code, out, err = cli(
        capsys, "init", str(folder), "--tools", "backoffice", "--store", url, "--anchors", "store"
    )
    assert code == 0, out + err
    deployment = pte.Deployment.from_folder(folder)
    with open_store(url) as store:
        result = run_in_store(
            deployment.engine(), store, run_id="paid", plan_text=PLAN, anchors=deployment.anchors()
        )
        assert result.ok
        assert isinstance(store, SQLiteStore) and store.anchor_lines(0)  # the chain is the store's, no file
    assert not (folder / "anchors.jsonl").exists()
    code, out, err = cli(capsys, "audit", "anchors", "export", url, str(tmp_path / "anchors.jsonl"))
    assert code == 0 and "anchor(s)" in out, out + err
    code, out, err = cli(capsys, "audit", "export", url, "--run", "paid", str(tmp_path / "paid.jsonl"))
    assert code == 0, out + err
    return {
        "log": tmp_path / "paid.jsonl",
        "anchors": tmp_path / "anchors.jsonl",
        "key": folder / "deployment.key.pub",
        "url": url,
    }


def test_the_node_verifier_checks_a_store_run_against_the_exported_chain(exported: dict[str, Any]) -> None:
    code, found = _node(exported["log"], exported["key"], exported["anchors"])
    assert code == 0 and found["checks"]["anchors"]["state"] == "checked", found
    # Python's verdict with the same files says the same.
    key = pte.TrustedKeys.load(exported["key"])
    (public,) = key.values()
    anchors = Anchors(exported["anchors"], public=public)
    assert verdict(exported["log"], anchors=anchors).ok


def test_the_node_verifier_refuses_an_edited_anchored_store_run(exported: dict[str, Any]) -> None:
    """The red team's 100.00 -> 10.00 edit, re-hashed: the chain verifies, the anchors refuse it."""
    edited = _rechained(exported["log"], '"100.00"', '"10.00"')
    assert pte.verify(edited).ok  # the chain alone cannot tell
    code, found = _node(edited, exported["key"], exported["anchors"])
    assert code == 1 and found["checks"]["anchors"]["state"] == "failed", found


def test_an_exporter_cannot_forge_the_chain(exported: dict[str, Any]) -> None:
    """Anchors edited to vouch for the edited run (each head set to the edited record's hash)
    do not verify under the deployment key."""
    edited = _rechained(exported["log"], '"100.00"', '"10.00"')
    hashes = {r["seq"]: r["hash"] for r in map(json.loads, edited.read_text(encoding="utf-8").splitlines())}
    forged = []
    for line in exported["anchors"].read_text(encoding="utf-8").splitlines():
        anchor = json.loads(line)
        anchor["head"] = hashes[anchor["seq"]]
        forged.append(line_of(anchor))
    exported["anchors"].write_bytes(b"".join(forged))
    code, found = _node(edited, exported["key"], exported["anchors"])
    assert code == 1 and found["checks"]["anchors"]["state"] == "failed", found
    assert "signature" in found["checks"]["anchors"]["detail"], found


def test_export_refuses_bad_input(
    exported: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = exported["url"]
    # An export never replaces a file (it could be a deployment's own anchors file).
    code, _, err = cli(capsys, "audit", "anchors", "export", url, str(exported["anchors"]))
    assert code == 2 and "exists" in err
    code, _, err = cli(capsys, "audit", "anchors", "export", "run.jsonl", str(tmp_path / "a.jsonl"))
    assert code == 2 and "sqlite:" in err
    code, _, err = cli(capsys, "audit", "export", url, "--run", "../etc", str(tmp_path / "x.jsonl"))
    assert code == 2 and "bad run id" in err
    code, _, err = cli(capsys, "audit", "export", url, "--run", "nosuchrun", str(tmp_path / "y.jsonl"))
    assert code == 1 and "no run nosuchrun" in err and not (tmp_path / "y.jsonl").exists()
