"""A run after the fact: replay it from its log, resume a paused or broken one, read it back
(`RunView`) and render its report.
"""

from __future__ import annotations

from pte._deploy import replay_file, resume_file  # they give replay its deployment (an engine's one maker)
from pte._replay import (
    ReplayReport,
    RunView,
    render_report,
    render_store_report,
    write_report,
)

#: `replay(path, ...)`: the same function as `replay_file`.
replay = replay_file

__all__ = [
    "ReplayReport",
    "RunView",
    "render_report",
    "render_store_report",
    "replay",
    "replay_file",
    "resume_file",
    "write_report",
]
