"""The areas of docs/architecture.md hold: import-linter's contracts pass, and every face imports.

The contracts (.importlinter) are import-linter's, run here as CI runs them (`lint-imports` in
.ci/run), so a change that imports upward, closes a cycle or lets the executor reach an LLM
client fails the tests too. The faces are imported each in a fresh interpreter, through their
public names only, so none of them works just because another face ran first.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Every public face: the package, and the public subpackages and modules a user imports.
FACES = [
    "pte",
    "pte.stores",
    "pte.stores.postgres",
    "pte.importers",
    "pte.importers.mcp",
    "pte.importers.openapi",
    "pte.importers.langchain",
    "pte.testing",
    "pte.testing.cookbook",
]


def test_import_linter_contracts_are_kept() -> None:
    done = subprocess.run(
        [sys.executable, "-c", "from importlinter.cli import lint_imports_command; lint_imports_command()"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


@pytest.mark.parametrize("face", FACES)
def test_every_face_imports_alone_with_every_public_name(face: str) -> None:
    code = (
        "import importlib\n"
        f"m = importlib.import_module({face!r})\n"
        "names = getattr(m, '__all__', None)\n"
        "assert names, 'a face declares its public names in __all__'\n"
        "missing = [n for n in names if getattr(m, n, None) is None and n != '__version__']\n"
        "assert not missing, missing\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
