"""The engine's own logs, through structlog, as a library should log.

PTE never configures structlog on import or when used as a library: its events go to
``structlog.get_logger("pte")`` and so through whatever the application configured
(``structlog.testing.capture_logs()`` sees them too). While structlog is not configured at
all, they go to the standard library logger ``pte`` instead of structlog's default of
printing to stdout, so an application that configures neither hears nothing from PTE
(and one that configures `logging` gets PTE's events there).

Only the CLI calls `configure_logging`: JSON lines when stderr is not a terminal, readable
lines otherwise, always on stderr (stdout belongs to command output such as ``--json``).
"""

from __future__ import annotations

import logging
import sys
from typing import IO, Any, TextIO, cast

import structlog

__all__ = ["configure_logging", "get_logger", "quiet_logging"]

#: Whether the CLI sent logs to a terminal (progress lines are shown only then). Set only by
#: `configure_logging`, which only the CLI calls.
_to_terminal = False
#: Whether structlog's configuration is the CLI's own (`configure_logging`), which
#: `quiet_logging` may then undo; an application's configuration is never touched.
_configured_here = False


def configure_logging(
    *, json_lines: bool | None = None, level: int = logging.INFO, file: IO[str] | None = None
) -> None:
    """Configure structlog for the `pte` command line. Applications configure structlog themselves.

    `json_lines` None picks JSON unless the stream is a terminal. Without `file`, each
    logger writes to the ``sys.stderr`` of the moment it is made (so a replaced stderr is used).
    """
    global _to_terminal, _configured_here
    stream = file if file is not None else sys.stderr
    if json_lines is None:
        json_lines = not stream.isatty()
    renderer: Any = (
        structlog.processors.JSONRenderer() if json_lines else structlog.dev.ConsoleRenderer(colors=False)
    )

    def factory(*_: Any) -> structlog.PrintLogger:
        return structlog.PrintLogger(file=cast(TextIO, file) if file is not None else sys.stderr)

    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        context_class=dict,
        logger_factory=factory,
        cache_logger_on_first_use=False,
    )
    _to_terminal = stream.isatty()
    _configured_here = True


def quiet_logging() -> None:
    """``pte --quiet``: undo an earlier `configure_logging` of this process (``main`` called
    twice in one process), so that no engine log reaches stderr; leave any other configuration."""
    global _to_terminal, _configured_here
    if _configured_here:
        structlog.reset_defaults()
        _configured_here = False
        _to_terminal = False


def is_terminal() -> bool:
    """Whether the CLI's logs go to a terminal (progress lines are shown only then)."""
    return _to_terminal and structlog.is_configured()


def get_logger(**context: Any) -> Any:
    """PTE's logger, bound to `context`: structlog's configuration if there is one, else stdlib ``pte``."""
    if structlog.is_configured():
        return structlog.get_logger("pte").bind(**context)
    return structlog.wrap_logger(
        logging.getLogger("pte"),
        # filter_by_level first: nothing is rendered for a level the `pte` logger would drop.
        processors=[
            structlog.stdlib.filter_by_level,
            structlog.processors.KeyValueRenderer(key_order=["event"]),
        ],
        wrapper_class=structlog.stdlib.BoundLogger,
        context_class=dict,
    ).bind(**context)
