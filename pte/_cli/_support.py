"""What keeps the `pte` command line safe on hostile input and on a bad day.

- `RedactingWriter`: everything PTE prints (results, errors, logs, argparse messages) goes
  through the same `Redactor` as the audit log; ``--json`` output is redacted as a value
  first, so it stays valid JSON.
- `read_bounded` / `require_regular_file`: input files must be regular files (a FIFO would
  hang the read, ``/dev/zero`` would never end) and are read up to a byte limit plus one.
- argparse ``type=`` validators: `positive_float`, `non_negative_int`, `non_empty_text`, and
  `bounded_float` / `bounded_int` for options with a documented maximum (``MAX_*``).
- `guarded`: runs a command so that a closed pipe, Ctrl-C (exit 130) or an unexpected error
  ends it with a one-line message and an exit code, never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import math
import os
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, NoReturn

from pte._core import FileRefused, PTEError, Redactor, check_file, well_formed

__all__ = [
    "EXIT_INTERRUPTED",
    "MAX_APPROVAL_TTL_S",
    "MAX_SUBMIT_COUNT",
    "MAX_VALID_FOR_HOURS",
    "MAX_VISIBILITY_TIMEOUT_S",
    "MAX_WORKER_PROCESSES",
    "RedactingWriter",
    "UsageError",
    "bounded_float",
    "bounded_int",
    "broker_problem",
    "check_broker_url",
    "guarded",
    "http_url",
    "input_file",
    "non_empty_text",
    "non_negative_int",
    "output_file",
    "positive_float",
    "positive_int",
    "read_bounded",
    "redacted_output",
    "require_regular_file",
    "run_command",
    "store_file",
]

#: Exit code of a usage error (as argparse's).
EXIT_USAGE = 2
#: Exit code after Ctrl-C (128 + SIGINT), as shells report it.
EXIT_INTERRUPTED = 128 + signal.SIGINT


class InputFileError(Exception):
    """An input file that cannot be used: missing, not a regular file, unreadable."""


class UsageError(Exception):
    """A problem with how the command was called (exit code 2)."""


# --- output --------------------------------------------------------------------------------


class RedactingWriter:
    """A text stream that redacts what is written to it before passing it on.

    Text is held until a write ends a line, then the whole pending text is redacted at
    once, so a secret printed in pieces (``print("key:", key)`` writes three times) or over
    several lines (a PEM block) is still seen whole. `flush` passes on a pending partial line.
    """

    def __init__(self, stream: IO[str], redactor: Redactor) -> None:
        self.stream = stream
        self.redactor = redactor
        self._pending: list[str] = []

    def write(self, text: str) -> int:
        self._pending.append(text)
        if text.endswith("\n"):
            self._emit()
        return len(text)

    def write_redacted(self, text: str) -> None:
        """Write text that is already redacted (``--json`` output, redacted as a value)."""
        self._emit()
        self.stream.write(well_formed(text))

    def _emit(self) -> None:
        if self._pending:
            text = "".join(self._pending)
            self._pending = []
            # A lone surrogate (a tampered log's "\ud800", an undecodable file name) is in no
            # encoding a terminal or pipe takes: shown as U+FFFD, not an internal error.
            self.stream.write(well_formed(self.redactor.redact_text(text)))

    def flush(self) -> None:
        self._emit()
        self.stream.flush()

    def isatty(self) -> bool:
        return bool(self.stream.isatty())

    def fileno(self) -> int:
        return self.stream.fileno()

    @property
    def encoding(self) -> str:
        return str(getattr(self.stream, "encoding", "utf-8"))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def print_json(value: Any, redactor: Redactor | None = None) -> None:
    """Print `value` as indented JSON, redacted as a value (so the text stays valid JSON)."""
    if redactor is not None:
        value = redactor.redact(value)
    text = well_formed(json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False, default=str) + "\n")
    out = sys.stdout
    if isinstance(out, RedactingWriter):
        out.write_redacted(text)
    else:
        out.write(text)


# --- input files ---------------------------------------------------------------------------


def require_regular_file(path: str, what: str) -> None:
    """Raise `InputFileError` unless `path` is an existing regular file (or a link to one)."""
    try:
        check_file(path, what)  # pte._core: the one check every named path goes through
    except FileRefused as exc:
        raise InputFileError(str(exc)) from None


def read_bounded(path: str, what: str, max_bytes: int) -> tuple[str, bool]:
    """``(text, over)``: at most ``max_bytes + 1`` bytes of a regular file, as text.

    `over` is True when the file holds more than `max_bytes` (the text is then the first
    ``max_bytes + 1`` bytes decoded leniently: enough for the caller's size check, which
    rejects it, without ever holding the whole file). Raises `InputFileError` for a
    missing, non-regular or unreadable file and for text that is not UTF-8.
    """
    from pte._core import FileRefused, read_at_most

    require_regular_file(path, what)  # the CLI's own messages for a missing or non-regular file
    try:
        data = read_at_most(path, what, max_bytes + 1)  # one byte more: over the bound, or not
    except FileRefused as exc:  # it changed since the check, or cannot be read
        raise InputFileError(str(exc)) from None
    if len(data) > max_bytes:
        # A cut multi-byte character becomes U+FFFD (3 bytes): the text stays over the limit.
        return data.decode("utf-8", errors="replace"), True
    try:
        return data.decode("utf-8"), False
    except UnicodeDecodeError as exc:
        raise InputFileError(f"{what} {path!r} is not UTF-8 text: {exc.reason} at byte {exc.start}") from None


def input_file(path: str | None, what: str) -> None:
    """Refuse a missing or non-regular input file before any library opens it."""
    if path is not None:
        try:
            require_regular_file(path, what)
        except InputFileError as exc:
            raise UsageError(str(exc)) from None


def output_file(path: str, what: str) -> Path:
    """A file PTE is about to create or replace: not a directory, in an existing directory."""
    target = Path(path)
    if target.is_dir():
        raise UsageError(f"{what} {path!r} is a directory; give a file name")
    if target.exists() and not target.is_file():
        raise UsageError(f"{what} {path!r} is not a regular file")
    if not target.resolve().parent.is_dir():
        raise UsageError(f"the directory of {what} {path!r} does not exist")
    return target


def store_file(url: str, *, existing: bool = False) -> None:
    """Refuse a file-backed store URL (a path, ``jsonl:``, ``sqlite:``) naming a directory, a
    FIFO or a device, or a directory that does not exist: opening a FIFO would hang the command.
    `existing`: the store is read as evidence, so its file must be there (opening one that is
    not would create an empty store and read nothing from it). Database URLs
    (``postgresql://``) are left to the store."""
    if url.startswith(("postgresql://", "postgres://")) or ("://" in url and not url.startswith("sqlite:")):
        return
    path = url.removeprefix("jsonl:")
    if url.startswith("sqlite:"):
        path = url.removeprefix("sqlite:")
        path = path[2:] if path.startswith("//") else path
        if path == ":memory:" or not path:
            return
    output_file(path, "run store")
    if existing and not os.path.lexists(path):
        raise UsageError(f"no run store at {path!r}: nothing to read (a store is made by the runs it keeps)")


# --- argument validators ------------------------------------------------------------------


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0 (seconds)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number greater than 0")
    return value


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be 0 or more")
    return value


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    value = non_negative_int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be 1 or more")
    return value


#: Most runs one ``pte submit`` may enqueue (``--count``).
MAX_SUBMIT_COUNT = 10_000
#: Longest a paused run may wait for a decision (``--approval-ttl``), in seconds: 365 days.
MAX_APPROVAL_TTL_S = 365 * 86_400.0
#: Longest an approval may count (``pte approve --valid-for``), in hours: 365 days.
MAX_VALID_FOR_HOURS = 365 * 24.0
#: Longest a broker may hold an unacknowledged run (``--visibility-timeout``), in seconds: 7 days.
MAX_VISIBILITY_TIMEOUT_S = 7 * 86_400.0
#: Most worker processes one ``pte worker`` starts (``--concurrency``).
MAX_WORKER_PROCESSES = 256


def bounded_float(maximum: float, unit: str) -> Callable[[str], float]:
    """argparse type: a finite number > 0 and at most `maximum` (NaN, infinities refused).

    Checked when the command line is read, before any work: an infinite or NaN duration would
    otherwise fail every task later (or overflow a `timedelta`) instead of the command itself.
    """

    def parse(text: str) -> float:
        value = positive_float(text)
        if value > maximum:
            raise argparse.ArgumentTypeError(f"{text!r} is over the maximum of {maximum:g} {unit}")
        return value

    parse.__name__ = "bounded_float"
    return parse


def bounded_int(minimum: int, maximum: int) -> Callable[[str], int]:
    """argparse type: a whole number from `minimum` to `maximum` (``1e11`` is not a whole number)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not minimum <= value <= maximum:
            raise argparse.ArgumentTypeError(f"{text!r} must be from {minimum} to {maximum}")
        return value

    parse.__name__ = "bounded_int"
    return parse


def add_execution_flags(parser: argparse.ArgumentParser) -> None:
    """``--max-concurrency N`` and ``--serial-writes``: how the deployment lets steps overlap."""
    parser.add_argument(
        "--max-concurrency",
        type=positive_int,
        metavar="N",
        help="most steps running at once (default 8; 1: one at a time, in plan order)",
    )
    parser.add_argument(
        "--serial-writes", action="store_true", help="a write step runs alone, with no other step beside it"
    )


def execution_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The `Engine` keyword arguments `add_execution_flags` gives (defaults when absent)."""
    from pte._execution import DEFAULT_CONCURRENCY

    return {
        "max_concurrency": getattr(args, "max_concurrency", None) or DEFAULT_CONCURRENCY,
        "serial_writes": bool(getattr(args, "serial_writes", False)),
    }


def resume_execution_settings(args: argparse.Namespace) -> dict[str, Any]:
    """`execution_settings` for a resume: what the flags give, None where they give nothing (the
    run's own, as its ``run_started`` recorded them); they may only narrow those (#33)."""
    return {
        "max_concurrency": getattr(args, "max_concurrency", None),
        "serial_writes": True if getattr(args, "serial_writes", False) else None,
    }


def http_url(text: str) -> str:
    """argparse type: an ``http://`` or ``https://`` URL with a host and no spaces or control
    characters (which the HTTP client would refuse only at the first request, mid-run)."""
    from urllib.parse import urlsplit

    if any(c.isspace() or ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in text):
        raise argparse.ArgumentTypeError("a URL must not contain spaces or control characters")
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text[:200]!r} is not a URL: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError(f"{text[:200]!r} is not an http:// or https:// URL with a host")
    return text


#: Workers and a broker need Celery (and its kombu), the ``workers`` extra.
WORKERS_MISSING = "workers and --broker need Celery: pip install 'plan-then-execute[workers]'"


def check_broker_url(url: str) -> str:
    """`url` if it names a broker transport Celery can load (``redis://``, ``amqp://``...);
    else `UsageError` (Celery would raise KeyError or ImportError deep inside the worker)."""
    scheme = url.split("://", 1)[0] if "://" in url else ""
    if not scheme or any(c.isspace() or ord(c) < 0x20 for c in url):
        raise UsageError(f"--broker {url[:200]!r} is not a broker URL (e.g. redis://127.0.0.1:6379/0)")
    try:
        from kombu.transport import resolve_transport
    except ImportError:
        raise UsageError(WORKERS_MISSING) from None

    try:
        resolve_transport(scheme.split("+", 1)[0])
    except (KeyError, ImportError) as exc:
        raise UsageError(f"--broker {url[:200]!r}: no such broker transport ({exc})") from None
    return url


def broker_problem(url: str, timeout_s: float = 5.0) -> str | None:
    """Why the broker at `url` cannot be reached now (one try, bounded), or None."""
    try:
        from kombu.connection import Connection
    except ImportError:
        return WORKERS_MISSING

    try:
        with Connection(url, connect_timeout=timeout_s) as connection:  # type: ignore[no-untyped-call]
            connection.ensure_connection(max_retries=1, interval_start=0, interval_step=0, timeout=timeout_s)
    except Exception as exc:  # kombu's OperationalError, a socket error, a bad URL
        return f"cannot reach the broker {url!r}: {exc}"
    return None


def non_empty_text(text: str) -> str:
    """argparse type: text with at least one visible character, no control characters."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    if any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in text):
        raise argparse.ArgumentTypeError("must not contain control characters")
    return text


# --- running a command --------------------------------------------------------------------


@contextlib.contextmanager
def redacted_output(redactor: Redactor) -> Iterator[None]:
    """Route sys.stdout and sys.stderr through `RedactingWriter` for the block."""
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = RedactingWriter(out, redactor), RedactingWriter(err, redactor)
    try:
        yield
    finally:
        wrapped = (sys.stdout, sys.stderr)
        sys.stdout, sys.stderr = out, err
        for stream in wrapped:
            with contextlib.suppress(OSError, ValueError):
                stream.flush()


def run_command(
    func: Callable[[argparse.Namespace], int], args: argparse.Namespace, usage: Callable[[str], NoReturn]
) -> int:
    """``func(args)``, with `UsageError` handed to `usage` (exit 2) and a `SystemExit` raised
    by code the command ran (a tool calling sys.exit) turned into exit 1: never a success."""
    try:
        return func(args)
    except UsageError as exc:
        usage(str(exc))
    except SystemExit as exc:
        print(f"pte: error: ended by SystemExit({exc.code!r}) raised inside the command", file=sys.stderr)
        return 1


def guarded(run: Callable[[], int], *, debug: bool = False) -> int:
    """Run `run` and turn every way it can end into an exit code with at most one message.

    - a closed stdout (``pte replay LOG | head -1``): exit 1, quietly;
    - Ctrl-C: exit 130 (the engine has sealed the run as ``interrupted`` on its way out);
    - a file name too long for the system (from the command line): exit 2;
    - another `OSError`, or a `PTEError` (a failure PTE named: a store, a log, a key file):
      one line naming it, exit 1;
    - any other exception: a one-line "internal error" on stderr, exit 1 (the traceback
      only with ``PTE_DEBUG=1``).

    `SystemExit` (argparse's exit 2, usage errors) passes through untouched.
    """
    try:
        return run()
    except BrokenPipeError:
        _silence_stdout()
        return 1
    except KeyboardInterrupt:
        _print_err("pte: interrupted")
        return EXIT_INTERRUPTED
    except RecursionError:
        _print_err("pte: error: input nested too deeply to process")
        return 1
    except MemoryError:
        _print_err("pte: error: out of memory")
        return 1
    except (SystemExit, GeneratorExit):
        raise
    except OSError as exc:
        if debug:
            raise
        if exc.errno == errno.ENAMETOOLONG:  # a path given on the command line: a usage error
            _print_err(f"pte: error: file name too long: {str(exc.filename)[:80]!r}…")
            return EXIT_USAGE
        _print_err(f"pte: error: {exc.strerror or exc}" + (f": {exc.filename!r}" if exc.filename else ""))
        return 1
    except PTEError as exc:
        # A failure PTE itself named (a store, a log, a key file): say which, not "internal".
        if debug:
            raise
        reason = getattr(exc, "reason", None)
        name = getattr(reason, "value", None) or type(exc).__name__
        _print_err(f"pte: error ({name}): {str(exc)[:500]}")
        return 1
    except BaseException as exc:  # Exception, or a BaseException some tool or library raised
        if debug:
            raise
        _print_err(f"pte: internal error ({type(exc).__name__}): {str(exc)[:500]} (PTE_DEBUG=1 shows where)")
        return 1


def _print_err(message: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        print(message, file=sys.stderr, flush=True)


def _silence_stdout() -> None:
    """After EPIPE, point stdout at /dev/null so the interpreter's final flush is quiet."""
    out = sys.stdout.stream if isinstance(sys.stdout, RedactingWriter) else sys.stdout
    if out is not sys.__stdout__ or out is None:
        return  # not the process's own stdout (an embedding or a test): leave its fds alone
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, out.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
