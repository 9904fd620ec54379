"""The independent verifier (verifier/verify.mjs, Node.js) agrees with `pte audit verify`.

On every sample, and on generated tamperings of each: an edited byte, a deleted record, two
records swapped, truncation (a partial line, whole runs cut off the end), a re-hashed chain
after an edit (only a checkpoint can catch it), and forged checkpoint signatures.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import tests._services as _services
from pte import verify

# private: anchor keys, to check anchors by hand
from pte._audit import load_public_key
from pte.audit import hash_json, verify_checkpoints, write_checkpoint
from pte.policy import Endorsement
from tests._chain import GENESIS, chain_hash, line_of

REPO = Path(__file__).resolve().parents[2]
# The independent verifier reads format 2 only (docs/audit-format.md); format 1 samples are
# checked by tests/audit/test_audit_v1.py's rules in Python.
SAMPLES = sorted(
    p for p in (REPO / "audit_samples").glob("*.jsonl") if b'"format":"pte-audit/2"' in p.read_bytes()[:65536]
)
VERIFIER = REPO / "verifier" / "verify.mjs"


def _node() -> str:
    return _services.node()


def node_verify(log: Path, checkpoint: Path | None = None, public_key: Path | None = None) -> dict[str, Any]:
    cmd = [_node(), str(VERIFIER), str(log), "--json"]
    if checkpoint is not None and public_key is not None:
        cmd += ["--checkpoint", str(checkpoint), "--public-key", str(public_key)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert out.returncode in (0, 1), out.stderr
    doc: dict[str, Any] = json.loads(out.stdout)
    assert (out.returncode == 0) == doc["ok"]
    return doc


def python_verify(
    log: Path, checkpoint: Path | None = None, public_key: Path | None = None
) -> dict[str, Any]:
    if checkpoint is not None and public_key is not None:
        result = verify_checkpoints(log, checkpoint, load_public_key(str(public_key)))
        report = result.log
        return {**report.to_dict(), "ok": report.ok and result.ok, "checkpoint_ok": result.ok}
    return verify(log).to_dict()


def assert_agree(log: Path, checkpoint: Path | None = None, public_key: Path | None = None) -> bool:
    mine = python_verify(log, checkpoint, public_key)
    theirs = node_verify(log, checkpoint, public_key)
    assert mine["ok"] == theirs["ok"], (mine, theirs)
    assert mine["intact"] == theirs["intact"], (mine, theirs)
    if mine["intact"]:
        assert mine["records"] == theirs["records"]
        assert mine["last_hash"] == theirs["last_hash"]
        assert mine["log_id"] == theirs["log_id"]
    if checkpoint is not None:
        assert mine["checkpoint_ok"] == theirs["checkpoint"]["ok"], (mine, theirs)
    ok: bool = mine["ok"]
    return ok


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    where = tmp_path_factory.mktemp("keys")
    out: dict[str, Any] = {}
    for name in ("signer", "forger"):
        key = Ed25519PrivateKey.generate()
        public = where / f"{name}.pub"
        public.write_bytes(
            key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
        out[name] = key
        out[name + "_pub"] = public
    return out


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: p.stem)
def test_both_verifiers_agree_on_every_sample(sample: Path) -> None:
    ok = assert_agree(sample)
    # Every sample is whole except the run killed mid-way, which is intact but incomplete.
    assert ok == (sample.stem != "crashed_mid_run")


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def _rehash(lines: list[bytes]) -> list[bytes]:
    """Recompute every hash from the first line on: what someone who can write the file can do."""
    out = []
    prev = GENESIS
    for raw in lines:
        record = json.loads(raw)
        record.pop("hash")
        record["prev"] = prev
        prev = chain_hash(prev, record)
        out.append(line_of({**record, "hash": prev}))
    return out


def _edit(lines: list[bytes]) -> list[bytes]:
    target = len(lines) // 2
    line = lines[target]
    at = line.index(b'"ts":"') + 8  # a digit of the year
    return [
        *lines[:target],
        line[:at] + (b"1" if line[at : at + 1] != b"1" else b"2") + line[at + 1 :],
        *lines[target + 1 :],
    ]


TAMPERINGS: dict[str, Callable[[list[bytes]], list[bytes]]] = {
    "edit_a_byte": _edit,
    "delete_a_record": lambda lines: lines[:2] + lines[3:],
    "swap_two_records": lambda lines: [lines[0], lines[2], lines[1], *lines[3:]],
    "truncate_mid_line": lambda lines: [*lines[:-1], lines[-1][: len(lines[-1]) // 2]],
    "drop_the_last_record": lambda lines: lines[:-1],
    "whitespace_in_a_line": lambda lines: [lines[0].replace(b'","', b'", "', 1), *lines[1:]],
    "rehash_after_an_edit": lambda lines: _rehash(_edit(lines)),
}


@pytest.mark.parametrize("kind", sorted(TAMPERINGS))
@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: p.stem)
def test_both_verifiers_agree_on_tamperings(sample: Path, kind: str, tmp_path: Path) -> None:
    tampered = tmp_path / "tampered.jsonl"
    tampered.write_bytes(b"".join(TAMPERINGS[kind](_lines(sample))))
    ok = assert_agree(tampered)
    if kind == "rehash_after_an_edit":
        # A consistent forgery: the chain alone cannot tell (a checkpoint can, below).
        assert ok == (sample.stem != "crashed_mid_run")
    else:
        assert not ok


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: p.stem)
def test_checkpoints_catch_truncation_rewriting_and_forgery_in_both(
    sample: Path, keys: dict[str, Any], tmp_path: Path
) -> None:
    log = tmp_path / "log.jsonl"
    shutil.copyfile(sample, log)
    checkpoints = tmp_path / "log.checkpoints"
    write_checkpoint(log, keys["signer"], checkpoints)
    assert assert_agree(log, checkpoints, keys["signer_pub"]) == (sample.stem != "crashed_mid_run")
    original = _lines(log)

    # Rewritten and re-hashed: the chain verifies, the checkpoint does not hold.
    log.write_bytes(b"".join(_rehash(_edit(original))))
    assert not assert_agree(log, checkpoints, keys["signer_pub"])
    assert not python_verify(log, checkpoints, keys["signer_pub"])["checkpoint_ok"]

    # Whole runs cut off the end (or any records): truncation.
    log.write_bytes(b"".join(original[:-1]))
    assert not assert_agree(log, checkpoints, keys["signer_pub"])

    # Appending after a checkpoint is fine: the checkpoint covers a prefix.
    log.write_bytes(b"".join(original))
    assert python_verify(log, checkpoints, keys["signer_pub"])["checkpoint_ok"]

    # A forged signature: another key, or an altered checkpoint.
    forged = tmp_path / "forged.checkpoints"
    write_checkpoint(log, keys["forger"], forged)
    assert not assert_agree(log, forged, keys["signer_pub"])
    doc = json.loads(checkpoints.read_bytes())
    doc["records"] = doc["records"] - 1
    altered = tmp_path / "altered.checkpoints"
    altered.write_bytes(line_of(doc))
    assert not assert_agree(log, altered, keys["signer_pub"])


def _with_approval(
    lines: list[bytes], change: Callable[[dict[str, Any]], None], kind: str = "approval"
) -> list[bytes]:
    """Edit the first record of type `kind` with `change`, then re-hash the whole chain."""
    out = []
    done = False
    for raw in lines:
        record = json.loads(raw)
        if not done and record["type"] == kind:
            change(record)
            done = True
        out.append(line_of(record))
    assert done, f"the sample holds no {kind}"
    return _rehash(out)


def _set(name: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda record: record.__setitem__(name, value)


def _flip_signature(record: dict[str, Any]) -> None:
    sig = record["signature"]
    record["signature"] = ("0" if sig[0] != "0" else "1") + sig[1:]


SIGNED = [p for p in SAMPLES if b'"signed":true' in p.read_bytes()]
UNSIGNED = [p for p in SAMPLES if b'"type":"approval"' in p.read_bytes() and p not in SIGNED]


def test_the_samples_hold_a_signed_and_an_unsigned_approval() -> None:
    assert SIGNED and UNSIGNED


@pytest.mark.parametrize(
    "change",
    [
        _set("by", "mallory"),
        _set("plan_hash", "f" * 64),
        _flip_signature,
        _set("expires", "2099-01-01T00:00:00Z"),
    ],
    ids=["other_signer_name", "other_plan", "forged_signature", "later_expiry"],
)
@pytest.mark.parametrize("sample", SIGNED, ids=lambda p: p.stem)
def test_an_edited_signed_approval_is_caught_by_both_even_rehashed(
    sample: Path, change: Callable[[dict[str, Any]], None], tmp_path: Path
) -> None:
    # The chain is re-hashed, so only the approval's own signature can tell.
    tampered = tmp_path / "tampered.jsonl"
    tampered.write_bytes(b"".join(_with_approval(_lines(sample), change)))
    assert not assert_agree(tampered)
    assert "approval" in str(verify(tampered).issue)


@pytest.mark.parametrize("sample", UNSIGNED, ids=lambda p: p.stem)
def test_an_unsigned_approval_claiming_signed_is_caught_by_both(sample: Path, tmp_path: Path) -> None:
    tampered = tmp_path / "tampered.jsonl"
    tampered.write_bytes(b"".join(_with_approval(_lines(sample), _set("signed", True))))
    assert not assert_agree(tampered)
    assert "signed" in str(verify(tampered).issue)


ENDORSED = REPO / "audit_samples" / "endorsed_payment.jsonl"


_ENDORSEMENT_MEMBERS = [f.name for f in dataclasses.fields(Endorsement)]  # what its id hashes


def _reid(change: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    """`change`, then recompute the endorsement's id as anyone who can write the file can."""

    def changed(record: dict[str, Any]) -> None:
        change(record)
        stored = {"pte_endorsement": "1", **{k: record.get(k) for k in _ENDORSEMENT_MEMBERS}}
        record["endorsement_id"] = hash_json(stored)

    return changed


def _unsign(record: dict[str, Any]) -> None:
    record.update(signature=None, signed=True)


@pytest.mark.parametrize(
    ("change", "issue"),
    [
        (_set("by", "mallory"), "endorsement_id is not the hash"),
        (_reid(_set("by", "mallory")), "endorsement signature does not verify"),
        (_reid(_set("value_hash", "f" * 64)), "endorsement signature does not verify"),
        (_reid(_flip_signature), "endorsement signature does not verify"),
        (_reid(_set("public_key", "0" * 64)), "endorsement key_id does not name its public key"),
        (_reid(_set("signature", "zz")), "signature"),  # the schema refuses it first
        (_reid(_unsign), "endorsement marked signed carries no signature"),
        (_set("signed", True), None),
    ],
    ids=[
        "edited",
        "other_signer",
        "other_value",
        "forged",
        "other_key",
        "malformed",
        "unsigned",
        "signed_flag",
    ],
)
def test_an_edited_endorsement_is_caught_by_both_even_rehashed(
    change: Callable[[dict[str, Any]], None], issue: str | None, tmp_path: Path
) -> None:
    """The signed-decision checks both verifiers share (one copy each) on an endorsement."""
    tampered = tmp_path / "tampered.jsonl"
    tampered.write_bytes(b"".join(_with_approval(_lines(ENDORSED), change, "endorsement")))
    ok = assert_agree(tampered)
    if issue is None:  # `signed` says a trusted key was checked; the log alone cannot refute it
        assert ok
    else:
        assert not ok and issue in str(verify(tampered).issue), verify(tampered).issue
        assert issue in str(node_verify(tampered).get("issue")), node_verify(tampered)
