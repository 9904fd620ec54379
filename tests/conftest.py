"""Shared test configuration.

Hypothesis profiles: `ci` (selected when CI=true) runs at least 1,000 examples per property,
as the issues require; `dev` is the quicker default for local runs.

The README's test command runs the files on two or more pytest-xdist workers, each file whole
on one worker (``--dist loadfile`` in pyproject.toml: a module's fixtures are made once; each
worker starts its own PostgreSQL, Redis and fork server, tests/_services.py), the files with a
test marked ``slow`` first.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    max_examples=1000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "dev",
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The files with a test marked `slow` first (each file's tests stay together, in order).

    Under xdist a worker takes a whole file at a time: a long file started last would leave
    the other worker idle until it ends; started first, the short files fill in around it.
    """
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow)
