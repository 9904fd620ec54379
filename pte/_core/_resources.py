"""Locate the data files that ship with PTE: JSON Schemas and stock tool packs.

An installed wheel carries them under ``pte/_data``; a source checkout (or an editable
install) has them at the repository root. The repository copy is the source of truth.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

_PACKAGE_DIR = Path(__file__).resolve().parents[1]  # pte/


def data_dir(name: str) -> Path:
    """The directory `name` (``schemas`` or ``tools``), packaged copy first, then the repo's."""
    for candidate in (_PACKAGE_DIR / "_data" / name, _PACKAGE_DIR.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"PTE data directory {name!r} not found (broken installation?)")


@cache
def load_schema(filename: str) -> dict[str, Any]:
    """Load a JSON Schema shipped in ``schemas/`` (cached; treat the result as read-only)."""
    with open(data_dir("schemas") / filename, encoding="utf-8") as fh:
        schema: dict[str, Any] = json.load(fh)
    return schema
