"""The back-office sample ledger the tests pay into, made fresh for each test.

`new_ledger` writes one where it is asked; the `ledger` fixture (import it by name where it is
used) makes one in the test's folder and names it by ``PTE_LEDGER`` for the tools.
(`tests._cli_run.ledger` makes it through `pte ledger init` instead, for the CLI tests.)
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pte import load_pack


def new_ledger(path: Path) -> Path:
    """A fresh sample ledger at `path` (the backoffice pack's own `create_sample_ledger`)."""
    module = sys.modules[load_pack("backoffice")["get_invoice"].func.__module__]
    module.create_sample_ledger(path, overwrite=True)
    return path


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh sample ledger in the test's folder, named by ``PTE_LEDGER`` for the tools."""
    path = new_ledger(tmp_path / "ledger.sqlite")
    monkeypatch.setenv("PTE_LEDGER", str(path))
    return path
