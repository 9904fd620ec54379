"""The README's `pte.testing` examples pass under Hypothesis's *default* settings.

A user copies them (docs/testing.md) into their own suite, which runs Hypothesis's default
profile: its example count and health checks (a strategy that filters too much or draws too
much data fails there). These tests therefore use the default profile, not this repository's,
except for its 200 ms deadline: a deadline times each example on whatever machine runs it, and
under load (CI's two cores, the suite on every one) compiling an example drawn in ~20 ms idle
went past it, a failure that says nothing about PTE. Like every property test here they run
without one (speed is measured by bench/, as ratios, never by a timed test).
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from hypothesis import given, settings

import pte
from pte.testing import example_registry, planner_text, valid_plans

registry = example_registry()
#: Hypothesis's default profile (examples, health checks) without its deadline (see above).
DEFAULTS = settings(settings.get_profile("default"), deadline=None)


@settings(DEFAULTS)
@given(valid_plans(registry))
def test_my_catalogue_admits_valid_plans(doc: dict[str, Any]) -> None:
    pte.compile(json.dumps(doc), registry)


@settings(DEFAULTS)
@given(planner_text())
def test_any_planner_text_compiles_or_is_rejected(text: str) -> None:
    with contextlib.suppress(pte.PlanRejected):  # a rejection is a fine answer; nothing else is
        pte.compile(text, registry)
