"""The command line: each command module registers its subcommands; the demo.

This module is the area's face: other areas import only what it re-exports.
"""

from __future__ import annotations

from pte._cli._demo import (
    BILL_PAYMENT,
    ENDORSE_POLICY,
    SCENARIOS,
    Scenario,
    answer_problem,
    demo_registry,
    run_demo,
    run_scenario,
)
from pte._cli._main import (
    build_parser,
    main,
)
from pte._cli._support import (
    MAX_APPROVAL_TTL_S,
    MAX_SUBMIT_COUNT,
    MAX_VALID_FOR_HOURS,
)

__all__ = [
    "BILL_PAYMENT",
    "ENDORSE_POLICY",
    "MAX_APPROVAL_TTL_S",
    "MAX_SUBMIT_COUNT",
    "MAX_VALID_FOR_HOURS",
    "SCENARIOS",
    "Scenario",
    "answer_problem",
    "build_parser",
    "demo_registry",
    "main",
    "run_demo",
    "run_scenario",
]
