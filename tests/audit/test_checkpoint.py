"""Signed checkpoints through the command line: keys from files or the environment, exit codes."""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

# private: anchor keys to sign and check anchors by hand; checkpoints read back raw
from pte._audit import load_private_key, load_public_key, read_checkpoints
from pte.cli import main
from pte.errors import CheckpointError

SAMPLES = Path(__file__).resolve().parents[2] / "audit_samples"


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(["--quiet", *argv])
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def checkpointed(capsys: pytest.CaptureFixture[str], log: Path, key: Path) -> Path:
    """A fresh key pair at `key` (and `key`.pub) and a checkpoint of `log` signed with it; `key`."""
    assert cli(capsys, "audit", "keygen", str(key))[0] == 0
    assert cli(capsys, "audit", "checkpoint", str(log), "--key", str(key))[0] == 0
    return key


def verify_checkpointed(
    capsys: pytest.CaptureFixture[str], log: Path, key: Path, *options: str
) -> tuple[int, str, str]:
    """`pte audit verify LOG` against the checkpoint `checkpointed` wrote, with `key`'s public half."""
    checkpoint = ["--checkpoint", f"{log}.checkpoints", "--public-key", f"{key}.pub"]
    return cli(capsys, "audit", "verify", str(log), *checkpoint, *options)


@pytest.fixture
def log(tmp_path: Path) -> Path:
    path = tmp_path / "audit.jsonl"
    shutil.copyfile(SAMPLES / "approved_payment.jsonl", path)
    return path


def test_keygen_checkpoint_verify_round_trip(
    tmp_path: Path, log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key = tmp_path / "cp.pem"
    assert cli(capsys, "audit", "keygen", str(key))[0] == 0
    assert key.stat().st_mode & 0o777 == 0o600
    code, out, _ = cli(capsys, "audit", "checkpoint", str(log), "--key", str(key), "--json")
    assert code == 0, out
    doc = json.loads(out)
    assert doc["file"] == f"{log}.checkpoints" and doc["records"] == len(log.read_bytes().splitlines())
    private_pem = key.read_bytes()
    # The key appears nowhere but in its own file.
    assert private_pem not in log.read_bytes()
    assert b"PRIVATE" not in Path(doc["file"]).read_bytes()
    code, out, _ = cli(
        capsys, "audit", "verify", str(log), "--checkpoint", doc["file"], "--public-key", f"{key}.pub"
    )
    assert code == 0 and "1 signed checkpoint(s) hold" in out
    # A second checkpoint after more records are appended: both are checked.
    assert cli(capsys, "audit", "checkpoint", str(log), "--key", str(key))[0] == 0
    assert len(read_checkpoints(doc["file"])) == 2
    # Refuses to overwrite a key.
    code, _, err = cli(capsys, "audit", "keygen", str(key))
    assert code == 2 and "refusing to overwrite" in err


def test_keys_from_the_environment(
    tmp_path: Path, log: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    key = Ed25519PrivateKey.generate()
    seed = key.private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
    )
    public = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    monkeypatch.setenv("PTE_TEST_CP_KEY", base64.b64encode(seed).decode())
    monkeypatch.setenv("PTE_TEST_CP_PUB", base64.b64encode(public).decode())
    out = tmp_path / "anchors"
    assert (
        cli(capsys, "audit", "checkpoint", str(log), "--key", "env:PTE_TEST_CP_KEY", "-o", str(out))[0] == 0
    )
    code, text, _ = cli(
        capsys, "audit", "verify", str(log), "--checkpoint", str(out), "--public-key", "env:PTE_TEST_CP_PUB"
    )
    assert code == 0, text
    assert base64.b64encode(seed) not in out.read_bytes()


def test_truncation_after_a_checkpoint_fails_verify(
    tmp_path: Path, log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key = checkpointed(capsys, log, tmp_path / "k.pem")
    lines = log.read_bytes().splitlines(keepends=True)
    # Cut the whole run: the remaining (empty) log, or a prefix that ends sealed, verifies alone.
    log.write_bytes(b"".join(lines[:-3]))
    code, out, _ = verify_checkpointed(capsys, log, key)
    assert code == 1 and "truncated" in out
    code, out, _ = verify_checkpointed(capsys, log, key, "--json")
    assert code == 1 and json.loads(out)["status"] == "tampered"


def test_a_damaged_log_is_not_signed(tmp_path: Path, log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    key = tmp_path / "k.pem"
    cli(capsys, "audit", "keygen", str(key))
    lines = log.read_bytes().splitlines(keepends=True)
    log.write_bytes(b"".join([lines[0], lines[2], lines[1], *lines[3:]]))
    code, out, _ = cli(capsys, "audit", "checkpoint", str(log), "--key", str(key))
    assert code == 1 and "not signing it" in out
    assert not Path(f"{log}.checkpoints").exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["audit", "checkpoint", "{log}", "--key", "{tmp}/missing.pem"],
        ["audit", "checkpoint", "{log}", "--key", "env:PTE_TEST_NOT_SET"],
        ["audit", "checkpoint", "{log}", "--key", "{log}"],
        ["audit", "checkpoint", "{tmp}/missing.jsonl", "--key", "{tmp}/k.pem"],
        ["audit", "verify", "{log}", "--checkpoint", "{log}"],
        ["audit", "verify", "{log}", "--checkpoint", "{log}", "--public-key", "{tmp}/k.pem.pub"],
        ["audit", "verify", "{log}", "--checkpoint", "{tmp}/none", "--public-key", "{tmp}/k.pem.pub"],
        ["audit", "verify", "{log}", "--checkpoint", "{tmp}/none", "--public-key", "{tmp}/k.pem"],
    ],
)
def test_usage_errors_exit_2_without_a_traceback(
    argv: list[str], tmp_path: Path, log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cli(capsys, "audit", "keygen", str(tmp_path / "k.pem"))
    args = [a.format(log=log, tmp=tmp_path) for a in argv]
    code, _, err = cli(capsys, *args)
    assert code == 2, err
    assert "Traceback" not in err and "pte: error:" in err


def test_wrong_key_kinds_are_refused(tmp_path: Path) -> None:
    from cryptography.hazmat.primitives.asymmetric import ec

    other = ec.generate_private_key(ec.SECP256R1())
    pem = tmp_path / "ec.pem"
    pem.write_bytes(
        other.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    with pytest.raises(CheckpointError, match="not an Ed25519 key"):
        load_private_key(str(pem))
    pub = tmp_path / "ec.pub"
    pub.write_bytes(
        other.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    with pytest.raises(CheckpointError, match="not an Ed25519 key"):
        load_public_key(str(pub))


def test_cutting_whole_sealed_runs_is_caught_only_by_the_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pte import AuditLog, verify

    log = tmp_path / "two_runs.jsonl"
    for run_id in ("first", "second"):
        with AuditLog(log, run_id=run_id) as audit:
            audit.append("run_started", mode="run", request=None, tools=[], config={})
            audit.append(
                "run_finished",
                status="succeeded",
                reason=None,
                message=None,
                answer=None,
                result=None,
                steps_run=0,
                llm_calls=0,
            )
    key = checkpointed(capsys, log, tmp_path / "k.pem")
    log.write_bytes(b"".join(log.read_bytes().splitlines(keepends=True)[:2]))
    assert verify(log).ok  # the chain alone cannot tell
    code, out, _ = verify_checkpointed(capsys, log, key)
    assert code == 1 and "truncated: the checkpoint covers 4 records, the log has 2" in out
