"""A tool pack for the worker tests: one slow read, so a worker can be killed while it runs."""

from __future__ import annotations

import time

import pte


@pte.tool
def hold(ms: int) -> dict[str, int]:
    """Wait `ms` milliseconds, then return {waited_ms}. A read with no effect."""
    time.sleep(ms / 1000)
    return {"waited_ms": ms}
