"""The README's `pte.testing` examples pass under Hypothesis's *default* settings.

A user copies them into their own suite, where nothing relaxes Hypothesis's 200 ms
deadline: compiling (or rejecting) whatever the strategies draw must stay well inside it,
deeply nested planner text included. These tests therefore use the default profile, not
this repository's (which has no deadline).
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from hypothesis import given, settings

import pte
from pte.testing import example_registry, planner_text, valid_plans

registry = example_registry()
DEFAULTS = settings.get_profile("default")


@settings(DEFAULTS)
@given(valid_plans(registry))
def test_my_catalogue_admits_valid_plans(doc: dict[str, Any]) -> None:
    pte.compile(json.dumps(doc), registry)


@settings(DEFAULTS)
@given(planner_text())
def test_any_planner_text_compiles_or_is_rejected(text: str) -> None:
    with contextlib.suppress(pte.PlanRejected):  # a rejection is a fine answer; nothing else is
        pte.compile(text, registry)
