"""The engine's own logs, through structlog: JSON lines when not on a terminal, readable otherwise.

Logging is off until `configure_logging` is called (the CLI does), so the library never
prints on its own. Logs go to stderr: stdout belongs to command output such as ``--json``.
"""

from __future__ import annotations

import logging
import sys
from typing import IO, Any

import structlog

__all__ = ["configure_logging", "get_logger"]

_state: dict[str, Any] = {"level": None, "processors": None, "file": None}


class _Silent:
    """The logger handed out while logging is off: every call does nothing."""

    def bind(self, **_: Any) -> _Silent:
        return self

    def _nothing(self, *_: Any, **__: Any) -> None:
        return None

    debug = info = warning = error = exception = _nothing


def configure_logging(
    *, json_lines: bool | None = None, level: int = logging.INFO, file: IO[str] | None = None
) -> None:
    """Turn the engine's logs on. `json_lines` None picks JSON unless `file` is a terminal."""
    stream = file if file is not None else sys.stderr
    if json_lines is None:
        json_lines = not stream.isatty()
    renderer: Any = (
        structlog.processors.JSONRenderer() if json_lines else structlog.dev.ConsoleRenderer(colors=False)
    )
    _state["processors"] = [
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        renderer,
    ]
    _state["file"] = stream
    _state["level"] = level


def is_terminal() -> bool:
    """Whether logs go to a terminal (progress lines are shown only then)."""
    stream = _state["file"]
    return bool(stream is not None and stream.isatty())


def get_logger(**context: Any) -> Any:
    """A structlog bound logger; a no-op until `configure_logging` ran."""
    if _state["level"] is None:
        return _Silent()
    return structlog.wrap_logger(
        structlog.PrintLogger(file=_state["file"] or sys.stderr),
        processors=_state["processors"] or [structlog.processors.JSONRenderer()],
        wrapper_class=structlog.make_filtering_bound_logger(_state["level"]),
        context_class=dict,
    ).bind(**context)
