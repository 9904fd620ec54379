"""What a careless tool does to what it is handed: change every container in it, in place.
The tests that show a tool's changes never reach the plan, the log or another attempt use it."""

from __future__ import annotations

from typing import Any


def vandalise(value: Any) -> None:
    """Change every container reachable from `value` in place (a dict cleared and marked, a
    list appended to)."""
    if isinstance(value, dict):
        for item in list(value.values()):
            vandalise(item)
        value.clear()
        value["vandalised"] = True
    elif isinstance(value, list):
        for item in value:
            vandalise(item)
        value.append("vandalised")
