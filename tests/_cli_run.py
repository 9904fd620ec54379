"""Running the `pte` command in-process for the tests, and the ledger they pay into: one copy
of each, shared by the CLI tests (import the `ledger` fixture by name where it is used)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pte.cli import main


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run `pte --quiet ARGV` in-process; return (exit code, stdout, stderr).

    Usage errors leave `main` through `SystemExit(2)` (as argparse's own errors do), so the
    exit code is taken from whichever way it ends.
    """
    try:
        code = main(["--quiet", *argv])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Path:
    """A fresh backoffice ledger (`pte ledger init`) in the test's folder, its working
    directory, named by ``PTE_LEDGER`` for the tools."""
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "ledger.sqlite"
    code, out, err = cli(capsys, "ledger", "init", "--path", str(path))
    assert code == 0, out + err
    monkeypatch.setenv("PTE_LEDGER", str(path))
    return path


def make_deployment(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    *options: str,
    folder: str = "deployment",
) -> Path:
    """A deployment made by `pte init FOLDER OPTIONS…` in `tmp_path`, named by ``PTE_DEPLOYMENT``
    for the commands the test runs (as an operator exports it); its folder."""
    where = tmp_path / folder
    code, out, err = cli(capsys, "init", str(where), *options)
    assert code == 0, out + err
    monkeypatch.setenv("PTE_DEPLOYMENT", str(where))
    for name in ("PTE_STORE", "PTE_APPROVAL_PUBLIC_KEYS_FILE", "PTE_ANCHORS_FILE", "PTE_DEPLOYMENT_KEY_FILE"):
        monkeypatch.delenv(name, raising=False)
    return where


def approver_keys(tmp_path: Path, name: str = "approver") -> tuple[Path, Path]:
    """An approver's key pair in `tmp_path`: (private key file, mode 0600; public key file)."""
    from pte import SigningKey

    signer = SigningKey.generate()
    private, public = tmp_path / f"{name}.pem", tmp_path / f"{name}.pub"
    private.write_bytes(signer.to_pem())
    private.chmod(0o600)
    public.write_bytes(signer.public_key.to_pem())
    return private, public
