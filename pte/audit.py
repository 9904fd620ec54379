"""The tamper-evident audit log: append-only JSON Lines, one hash-chained record per line.

Every line is exactly ``canonical_json(record) + "\\n"``. Every record carries

- ``seq``: 0 for the first line of the *file*, +1 for each line after it;
- ``run_id``, ``ts`` (ISO-8601 UTC with microseconds) and ``type``;
- ``prev``: the previous line's ``hash`` (64 zeros for the first line);
- ``hash`` = ``sha256_hex(prev + canonical_json(record without "hash"))``;

plus the fields of its type (schemas/audit-record.schema.json is the contract). A file may
hold several runs one after another; the chain continues across them and ``run_finished``
seals a run. Because each line must be canonical and chained, any edited byte, deleted or
reordered record, or truncation inside a run is detected by `verify`.

Secrets are scrubbed by a `Redactor` before a record is hashed, so neither the log nor its
hashes ever depend on a secret. A failed write breaks the log for good and every later
`AuditLog.append` raises `AuditWriteError`: the run fails closed instead of running unlogged.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from functools import cache
from hashlib import sha256 as _sha256
from pathlib import Path
from types import TracebackType
from typing import Any, NamedTuple

import jsonschema_rs
from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

from pte.canonical import canonical_json, sha256_hex
from pte.errors import AuditWriteError, PTEError

__all__ = [
    "DEFAULT_REDACT_KEYS",
    "DEFAULT_REDACT_PATTERNS",
    "GENESIS_HASH",
    "REDACTED",
    "AuditFormatError",
    "AuditLog",
    "Durability",
    "Redactor",
    "VerifyIssue",
    "VerifyReport",
    "iter_records",
    "load_audit_schema",
    "read_records",
    "records_by_run",
    "render_timeline",
    "verify",
]

#: ``prev`` of the first record of a file.
GENESIS_HASH = "0" * 64

#: What a redacted value or substring is replaced with.
REDACTED = "[REDACTED]"

#: Fields every record has; `AuditLog.append` sets them itself.
_COMMON_FIELDS = frozenset({"seq", "run_id", "ts", "type", "prev", "hash"})

_SCHEMA_FILE = "audit-record.schema.json"
_HEX64 = re.compile(r"[0-9a-f]{64}")


class AuditFormatError(PTEError):
    """A line of an audit log is not a JSON object (or the log ends in a partial line)."""

    def __init__(self, path: str | os.PathLike[str], line: int, message: str) -> None:
        super().__init__(f"{os.fspath(path)}:{line}: {message}")
        self.path = os.fspath(path)
        self.line = line
        self.message = message


# ---------------------------------------------------------------------------------------------
# Redaction
# ---------------------------------------------------------------------------------------------

#: Keys whose values are always secret. Matching ignores case, '-' and '_', and also catches
#: keys that *end* in one of these names (``db_password``, ``openai_api_key``).
DEFAULT_REDACT_KEYS: frozenset[str] = frozenset(
    {
        "api_key",
        "apikey",
        "x_api_key",
        "password",
        "passwd",
        "secret",
        "client_secret",
        "token",
        "access_token",
        "refresh_token",
        "id_token",
        "auth_token",
        "session_token",
        "authorization",
        "private_key",
        "cookie",
    }
)

# The patterns are deliberately anchored on a vendor prefix or a credential word: a bare
# "long hex string" rule would also eat plan hashes and record hashes, which must stay
# verifiable. A named group `secret` limits the replacement to that part of the match.
DEFAULT_REDACT_PATTERNS: tuple[re.Pattern[str], ...] = (
    # PEM private keys, whole block.
    re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?-----END [A-Z0-9 ]*PRIVATE KEY-----", re.DOTALL),
    # OpenAI (sk-..., sk-proj-...), Anthropic (sk-ant-...) and similar keys.
    re.compile(r"\bsk-[A-Za-z0-9_-]{20,}"),
    # Stripe secret / restricted keys.
    re.compile(r"\b[sr]k_(?:live|test)_[A-Za-z0-9]{16,}"),
    # HTTP Authorization values.
    re.compile(r"\bBearer\s+(?P<secret>[A-Za-z0-9._~+/=-]{8,})", re.IGNORECASE),
    re.compile(r"\bBasic\s+(?P<secret>[A-Za-z0-9+/=]{12,})"),
    # AWS access key ids.
    re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    # GitHub tokens (classic and fine-grained).
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{36,}\b"),
    re.compile(r"\bgithub_pat_[A-Za-z0-9_]{22,}"),
    # Slack tokens.
    re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}"),
    # Google API keys.
    re.compile(r"\bAIza[0-9A-Za-z_-]{35}"),
    # JSON Web Tokens (header.payload.signature, header and payload start with '{"').
    re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
    # Credentials in URLs: scheme://user:password@host.
    re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:@]+:(?P<secret>[^/\s@]+)@"),
    # "password=...", "token: ...", '"api_key": "..."' in free text (query strings, headers, JSON
    # quoted inside a prompt). The word must end right before the separator, so `max_tokens: 5`
    # and `prompt_tokens=3` are left alone; an "Authorization: Bearer ..." value is left to the
    # Bearer rule.
    re.compile(
        r"(?i)(?<![A-Za-z0-9])(?:[A-Za-z0-9]+[_-])*"
        r"(?:api[_-]?key|password|passwd|secret|token|authorization)"
        r"[\"']?\s*[=:]\s*[\"']?(?!(?:Bearer|Basic)\s)(?P<secret>[^\s\"'&,;<>(){}\[\]]{4,})"
    ),
    # A long hex/base64 value after "key=" / "key:" (e.g. "?key=..." in URLs).
    re.compile(r"(?i)(?<![A-Za-z0-9])key[\"']?\s*[=:]\s*[\"']?(?P<secret>[A-Za-z0-9+/_-]{20,}={0,2})"),
)


_CACHE_ENTRIES = 4096
_CACHED_TEXT_CHARS = 200


def _normalise_key(key: str) -> str:
    return key.lower().replace("-", "").replace("_", "")


class Redactor:
    """Scrubs secrets out of JSON-like values before they are written to the audit log.

    Three rules, applied to a copy of the value (the input is never mutated):

    - the value under a *secret key* (see `DEFAULT_REDACT_KEYS`; case, '-' and '_' are
      ignored, and a key that ends in a secret name counts too) becomes `REDACTED`, unless it
      is null or a boolean, which hide nothing;
    - every substring of every string that matches a *pattern* becomes `REDACTED` (only the
      group named ``secret`` when the pattern has one, so ``Bearer abc...`` reads
      ``Bearer [REDACTED]``);
    - every occurrence of an exact secret registered with `add_secret` becomes `REDACTED`.

    Mappings become dicts, tuples become lists and str/int/float subclasses (enums) become
    the plain type, so the result is exactly what a JSON round trip gives back.
    """

    def __init__(
        self,
        keys: Iterable[str] = DEFAULT_REDACT_KEYS,
        patterns: Iterable[str | re.Pattern[str]] = DEFAULT_REDACT_PATTERNS,
        *,
        extra_keys: Iterable[str] = (),
        extra_patterns: Iterable[str | re.Pattern[str]] = (),
    ) -> None:
        names = {_normalise_key(k) for k in (*keys, *extra_keys)}
        names.discard("")
        # str.endswith takes a tuple: one C call per key instead of a Python loop.
        self._key_suffixes: tuple[str, ...] = tuple(sorted(names))
        self._patterns: tuple[re.Pattern[str], ...] = tuple(
            p if isinstance(p, re.Pattern) else re.compile(p) for p in (*patterns, *extra_patterns)
        )
        # No pattern can match a text shorter than this (most ids, names and statuses).
        self._min_match = min((_min_width(p) for p in self._patterns), default=0)
        self._secrets: list[str] = []
        # Short strings (tool names, step ids, statuses) and keys repeat in almost every
        # record; memoising them takes most of the regex work off the write path.
        self._text_cache: dict[str, str] = {}
        self._key_cache: dict[str, bool] = {}
        # text -> (redacted text, its JSON string literal), for `AuditLog.append`.
        self._json_cache: dict[str, tuple[str, str]] = {}

    def add_secret(self, value: str) -> None:
        """Scrub every occurrence of the exact string `value` (e.g. the configured API key).

        Empty strings are ignored (they would match everywhere).
        """
        if not isinstance(value, str):
            raise TypeError(f"a secret must be a string, not {type(value).__name__}")
        if value and value not in self._secrets:
            self._secrets.append(value)
            # Longest first, so a secret that contains another is replaced whole.
            self._secrets.sort(key=len, reverse=True)
            self._text_cache = {}
            self._json_cache = {}

    def is_secret_key(self, key: str) -> bool:
        """Whether values under `key` are redacted."""
        known = self._key_cache.get(key)
        if known is None:
            known = bool(self._key_suffixes) and _normalise_key(key).endswith(self._key_suffixes)
            if len(self._key_cache) < _CACHE_ENTRIES:
                self._key_cache[key] = known
        return known

    def redact_text(self, text: str) -> str:
        """`text` with registered secrets and pattern matches replaced by `REDACTED`."""
        cached = self._text_cache.get(text)
        if cached is not None:
            return cached
        out = text
        for secret in self._secrets:
            if secret in out:
                out = out.replace(secret, REDACTED)
        if len(out) >= self._min_match:
            for pattern in self._patterns:
                if pattern.search(out) is not None:
                    out = pattern.sub(_replace_match, out)
        if len(text) <= _CACHED_TEXT_CHARS and len(self._text_cache) < _CACHE_ENTRIES:
            self._text_cache[text] = out
        return out

    def _redact_json_text(self, text: str) -> tuple[str, str]:
        """``(redact_text(text), its JSON string literal)``, memoised like `redact_text`."""
        hit = self._json_cache.get(text)
        if hit is None:
            redacted = self.redact_text(text)
            hit = (redacted, _encode_str(redacted))
            if len(text) <= _CACHED_TEXT_CHARS and len(self._json_cache) < _CACHE_ENTRIES:
                self._json_cache[text] = hit
        return hit

    def redact(self, value: Any) -> Any:
        """A redacted copy of `value` (see the class docstring); `value` itself is untouched."""
        # Exact JSON types first (what every record is made of): a type() test is several
        # times cheaper than the isinstance chain, and memoised keys/texts make the rest cheap.
        kind = type(value)
        if kind is str:
            cached = self._text_cache.get(value)
            return cached if cached is not None else self.redact_text(value)
        if kind is dict:
            out: dict[Any, Any] = {}
            key_cache = self._key_cache
            text_cache = self._text_cache
            for key, item in value.items():
                if type(key) is str:
                    secret = key_cache.get(key)
                    if secret is None:
                        secret = self.is_secret_key(key)
                    if secret and item is not None and item is not True and item is not False:
                        out[key] = REDACTED
                        continue
                    # Inline the commonest cases: a known text and a number (no call each).
                    item_kind = type(item)
                    if item_kind is str:
                        cached = text_cache.get(item)
                        out[key] = cached if cached is not None else self.redact_text(item)
                    elif item_kind is int or item_kind is float:
                        out[key] = item
                    else:
                        out[key] = self.redact(item)
                else:
                    out[self._plain_key(key)] = self._redact_item(key, item)
            return out
        if kind is int or kind is float or kind is bool or value is None:
            return value
        if kind is list:
            return [self.redact(item) for item in value]
        return self._redact_other(value)

    def _redact_other(self, value: Any) -> Any:
        """`redact` for everything but exact str/dict/list/int/float/bool/None."""
        if isinstance(value, str):
            # str.__str__ gives the plain text of a str subclass (a str Enum's str() may not).
            return self.redact_text(str.__str__(value))
        if isinstance(value, bool):
            return bool(value)
        if isinstance(value, int):
            return int(value)
        if isinstance(value, float):
            return float(value)
        if isinstance(value, Mapping):
            return {self._plain_key(key): self._redact_item(key, item) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return [self.redact(item) for item in value]
        # Anything else is not JSON; the encoder will refuse it and the append fails closed.
        return value

    @staticmethod
    def _plain_key(key: Any) -> Any:
        return str(key) if isinstance(key, str) else key

    def _redact_item(self, key: Any, item: Any) -> Any:
        secret = isinstance(key, str) and self.is_secret_key(key)
        if secret and item is not None and not isinstance(item, bool):
            return REDACTED
        return self.redact(item)


def _min_width(pattern: re.Pattern[str]) -> int:
    """The length of the shortest text `pattern` can match (0 when it cannot be worked out)."""
    try:
        from re import _parser  # type: ignore[attr-defined]

        low = _parser.parse(pattern.pattern, pattern.flags).getwidth()[0]
    except Exception:  # a private module: if it changes, simply do without the shortcut
        return 0
    return low if isinstance(low, int) and low >= 0 else 0


def _replace_match(match: re.Match[str]) -> str:
    if "secret" in match.re.groupindex and match.group("secret") is not None:
        whole = match.group(0)
        start = match.start("secret") - match.start(0)
        end = match.end("secret") - match.start(0)
        return whole[:start] + REDACTED + whole[end:]
    return REDACTED


# ---------------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------------


class Durability(StrEnum):
    """When the audit log forces its records to stable storage."""

    #: write() and fsync after every record.
    ALWAYS = "always"
    #: write() every record to the OS at once (it survives SIGKILL of the process), fsync only
    #: at `AuditLog.sync` points: before a write tool is called, at run end and on close.
    BATCH = "batch"
    #: write() every record, never fsync (benchmarks, throwaway logs).
    NONE = "none"


def _utc_now() -> str:
    """ISO-8601 UTC with microseconds, e.g. ``2026-11-22T02:30:31.123456Z``.

    Same text as ``datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")`` (both floor the
    system clock to the microsecond) at a fraction of the cost: the date and time of day
    are formatted once per second.
    """
    global _ts_second
    second, micros = divmod(_time_ns() // 1000, 1_000_000)
    cached = _ts_second
    if cached[0] != second:
        cached = _ts_second = (second, datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%S."))
    return cached[1] + str(micros + 1_000_000)[1:] + "Z"


#: (epoch second, its "YYYY-MM-DDTHH:MM:SS." prefix); replaced as one tuple, so thread-safe.
_ts_second: tuple[int, str] = (-1, "")
_time_ns = time.time_ns


def _json_default(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _make_encoder() -> Callable[[Any], str]:
    """``canonical_json`` as one reusable C encoder: the very same bytes, less set-up per call.

    ``json.dumps(..., sort_keys=True, ...)`` builds a `JSONEncoder` and a C encoder object on
    every call; this builds the C encoder once. Without circular-reference markers a cyclic
    value raises RecursionError instead of ValueError: either way the append fails closed.
    """
    from json import encoder as json_encoder

    make = getattr(json_encoder, "c_make_encoder", None)
    encode_str = getattr(json_encoder, "c_encode_basestring", None)
    if make is None or encode_str is None:  # pragma: no cover - PyPy etc.
        return canonical_json
    encode = make(None, _json_default, encode_str, None, ":", ",", True, False, False)
    join = "".join

    def encode_canonical(value: Any) -> str:
        return join(encode(value, 0))

    return encode_canonical


_encode = _make_encoder()

#: The JSON string literal of a str, exactly as `_encode` writes it.
_encode_str: Callable[[str], str] = (
    getattr(json.encoder, "c_encode_basestring", None) or json.encoder.py_encode_basestring
)

_NOT_CACHED = object()
_INFINITY = float("inf")


class _Layout(NamedTuple):
    """How a record's line is assembled (see `AuditLog._layout`).

    `pieces` alternates the constant text before each entry (``{"args":``, ``,"effect":``,
    ...) with a slot for its value (None), and ends with ``}``: the keys in sorted order,
    "hash" left out. The line puts ``hash_before + digest + hash_after`` at `hash_at`
    instead (the "hash" entry and the separator of the entry that follows it).
    """

    pieces: list[str | None]
    hash_at: int
    hash_before: str
    hash_after: str
    prev: int
    run_id: int
    seq: int
    ts: int
    type: int
    slots: tuple[tuple[str, int], ...]  # (field name, its value's index in pieces), in call order


class AuditLog:
    """An append-only, hash-chained audit log for one run.

    `path` None keeps the records in memory only (in `records`). With a path the file is
    opened for appending (created if missing; its directory must exist) and, when it already
    holds records, the chain continues from its last record: `next_seq` and `last_hash` are
    taken from it after checking that this record is canonical and its hash is right.

    A file whose last line is partial (a crash in the middle of a write) is refused with
    `AuditWriteError`, since appending after it would bury the damage. `repair_partial_tail`
    True (used by resume after a crash) repairs it instead: a tail that is a complete,
    correctly chained record lacking only its newline is completed; anything else is
    dropped. Dropping loses nothing that mattered: a record is only relied on once it is
    complete, and a `write` tool is only called after `sync` made its `step_started` durable.

    `validate` True checks every record against the audit schema before writing it (a
    violation raises `AuditWriteError` like any other failed write).

    Thread-safe: appends from several threads are serialised.
    """

    path: Path | None
    run_id: str
    records: list[dict[str, Any]]
    last_hash: str
    next_seq: int

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        run_id: str | None = None,
        durability: Durability | str = Durability.BATCH,
        redactor: Redactor | None = None,
        clock: Callable[[], str] | None = None,
        keep: bool = False,
        repair_partial_tail: bool = False,
        validate: bool = False,
    ) -> None:
        self.path = Path(path) if path is not None else None
        self.run_id = run_id if run_id is not None else uuid.uuid4().hex
        if not isinstance(self.run_id, str) or not self.run_id:
            raise ValueError("run_id must be a non-empty string")
        self.durability = Durability(durability)
        self.redactor = redactor if redactor is not None else Redactor()
        self._clock = clock if clock is not None else _utc_now
        self._keep = keep or self.path is None
        self._validate = validate
        self.records = []
        self.last_hash = GENESIS_HASH
        self.next_seq = 0
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._size = 0
        self._created = False
        self._dir_synced = True
        self._closed = False
        self._broken: str | None = None
        # Stands in for the hash while a record is serialised (see `append`): random per log,
        # so no data can be made to contain it on purpose.
        self._placeholder = uuid.uuid4().hex + uuid.uuid4().hex
        self._placeholder_entry = f'"hash":"{self._placeholder}",'
        # Field names (in call order) -> where each goes in the sorted line (see `_layout`).
        self._layouts: dict[tuple[str, ...], _Layout | None] = {}
        self._layouts_redactor: Redactor | None = None
        self._run_id_entry = (self.run_id, _encode_str(self.run_id))
        # Set when this run's run_finished is written (or found at the end of the file).
        self._sealed = False
        if self.path is not None:
            self._open(self.path, repair_partial_tail)

    # -- opening ------------------------------------------------------------------------------

    def _open(self, path: Path, repair: bool) -> None:
        self._created = not path.exists()
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_BINARY", 0), 0o644)
        except OSError as exc:
            raise AuditWriteError(f"cannot open audit log {path}: {exc}") from exc
        try:
            self._size = os.fstat(fd).st_size
            if self._size:
                self._resume_chain(path, fd, repair)
        except AuditWriteError:
            os.close(fd)
            raise
        except OSError as exc:
            os.close(fd)
            raise AuditWriteError(f"cannot read audit log {path}: {exc}") from exc
        self._fd = fd
        # A new file's directory entry must be fsynced too, or a crash can lose the whole file.
        self._dir_synced = not self._created

    def _resume_chain(self, path: Path, fd: int, repair: bool) -> None:
        with open(path, "rb") as fh:
            last, tail = _read_tail(fh, self._size)
        if tail:
            if not repair:
                raise AuditWriteError(
                    f"audit log {path} ends in a partial record ({len(tail)} bytes); verify it "
                    "(or open it with repair_partial_tail=True to resume after a crash)"
                )
            prev, seq = GENESIS_HASH, 0
            if last is not None:
                prev, before = _checked_last(path, last)
                seq = before["seq"] + 1
            completed = _parse_complete_record(tail + b"\n", prev, seq)
            if completed is not None:
                # The crash hit between the record and its newline: finish the line, lose nothing.
                _write_all(fd, b"\n")
                self._size += 1
                last = tail + b"\n"
            else:
                os.truncate(path, self._size - len(tail))
                self._size -= len(tail)
        if last is None:
            return
        last_hash, record = _checked_last(path, last)
        self.last_hash = last_hash
        self.next_seq = record["seq"] + 1
        if record.get("run_id") == self.run_id and record.get("type") == "run_finished":
            self._sealed = True

    # -- state --------------------------------------------------------------------------------

    @property
    def broken(self) -> bool:
        """True once a write failed: every later append raises `AuditWriteError`."""
        return self._broken is not None

    @property
    def closed(self) -> bool:
        """True after `close`."""
        return self._closed

    def _fail(self, message: str, cause: BaseException | None = None) -> AuditWriteError:
        if self._broken is None:
            self._broken = message
        err = AuditWriteError(message)
        if cause is not None:
            err.__cause__ = cause
        return err

    # -- writing ------------------------------------------------------------------------------

    def append(self, type: str, /, **fields: Any) -> dict[str, Any]:
        """Redact `fields`, add the common fields, hash, write one line; return the record.

        Raises `AuditWriteError` when the record cannot be written (I/O error, a value that is
        not JSON such as NaN, a field that clashes with a common field, a closed or sealed
        log) and on every call after such a failure.
        """
        with self._lock:
            if (
                self._broken is not None
                or self._closed
                or self._sealed
                or not isinstance(type, str)
                or not type
                or not _COMMON_FIELDS.isdisjoint(fields)
            ):
                self._refuse(type, fields)
            try:
                ts = self._clock()
                layout = None
                if self.redactor.__class__ is Redactor and ts.__class__ is str and type.__class__ is str:
                    names = tuple(fields)
                    layout = self._layouts.get(names) if self._layouts_redactor is self.redactor else None
                    if layout is None:
                        layout = self._layout(names)
                if layout is not None:
                    record, digest, data = self._serialise(layout, type, ts, fields)
                else:
                    record, digest, data = self._serialise_slowly(type, ts, fields)
            except (TypeError, ValueError, RecursionError) as exc:
                raise self._fail(f"{type}: record is not JSON-serialisable: {exc}", exc) from exc
            if self._validate:
                problem = _schema_problem(record)
                if problem is not None:
                    raise self._fail(f"{type}: record violates the audit schema: {problem}")
            fd = self._fd
            if fd is not None:
                try:
                    # Another writer (or a truncation) would fork the chain: refuse rather than
                    # interleave. lseek(SEEK_END) gives the size for half the cost of fstat.
                    size = os.lseek(fd, 0, os.SEEK_END)
                    if size != self._size:
                        raise self._fail(
                            f"audit log {self.path} changed underneath this writer "
                            f"(size {size}, expected {self._size}): is another process appending?"
                        )
                    _write_all(fd, data)
                    self._size += len(data)
                    if self.durability is Durability.ALWAYS:
                        self._fsync()
                except OSError as exc:
                    raise self._fail(f"cannot write audit log {self.path}: {exc}", exc) from exc
            self.last_hash = digest
            self.next_seq += 1
            if self._keep:
                self.records.append(record)
            if type == "run_finished":
                self._sealed = True
                if self._fd is not None and self.durability is not Durability.NONE:
                    # The end of a run is a sync point even if the caller forgets to sync().
                    self._fsync()
            return record

    def _layout(self, names: tuple[str, ...]) -> _Layout | None:
        """Where the fields named `names` and the common fields go in the sorted line.

        None when a field name is a secret key (its value is then redacted whole): such
        records take the general path. Built once per set of names (per redactor).
        """
        if self._layouts_redactor is not self.redactor:
            self._layouts = {}
            self._layouts_redactor = self.redactor
        layout = self._layouts.get(names, _NOT_CACHED)
        if layout is _NOT_CACHED:
            layout = None
            if not any(self.redactor.is_secret_key(name) for name in names):
                order = sorted({*names, "hash", "prev", "run_id", "seq", "ts", "type"})
                if len(order) == len(names) + 6:
                    hash_at = order.index("hash")
                    del order[hash_at]
                    pieces: list[str | None] = []
                    for index, name in enumerate(order):
                        pieces += ["{" if index == 0 else ",", None]
                        pieces[-2] += _encode_str(name) + ":"  # type: ignore[operator]
                    pieces.append("}")
                    value_at = {name: 2 * index + 1 for index, name in enumerate(order)}
                    layout = _Layout(
                        pieces,
                        2 * hash_at,
                        "{" + '"hash":"' if hash_at == 0 else ',"hash":"',
                        '",' + pieces[2 * hash_at][1:],  # type: ignore[index]
                        value_at["prev"],
                        value_at["run_id"],
                        value_at["seq"],
                        value_at["ts"],
                        value_at["type"],
                        tuple((name, value_at[name]) for name in names),
                    )
            if len(self._layouts) < 256:
                self._layouts[names] = layout
        return layout  # type: ignore[return-value]

    def _serialise(
        self, layout: _Layout, type: str, ts: str, fields: Mapping[str, Any]
    ) -> tuple[dict[str, Any], str, bytes]:
        """The record, its hash and its line, for plain field values (the usual case).

        Each top-level value is redacted and encoded once, straight into its place in the
        sorted line (a text through the redactor's memo, a number as ``repr``, a container
        by the C encoder); the hashed body is the same parts without the "hash" entry.
        Byte for byte what ``canonical_json`` gives (tests/test_executor_timeouts.py checks).
        """
        prev = self.last_hash
        seq = self.next_seq
        run_id = self.run_id
        if run_id is not self._run_id_entry[0]:
            self._run_id_entry = (run_id, _encode_str(run_id))
        pieces = layout.pieces.copy()
        pieces[layout.prev] = '"' + prev + '"'  # a hash: nothing to escape
        pieces[layout.run_id] = self._run_id_entry[1]
        pieces[layout.seq] = str(seq)
        pieces[layout.ts] = _encode_str(ts)
        pieces[layout.type] = _encode_str(type)
        record: dict[str, Any] = {"seq": seq, "run_id": run_id, "ts": ts, "type": type, "prev": prev}
        redactor = self.redactor
        json_cache = redactor._json_cache
        for name, index in layout.slots:
            value = fields[name]
            kind = value.__class__
            if kind is str:
                hit = json_cache.get(value)
                value, text = hit if hit is not None else redactor._redact_json_text(value)
            elif kind is int:
                text = int.__repr__(value)
            elif kind is float and value == value and value != _INFINITY and value != -_INFINITY:
                text = float.__repr__(value)
            elif value is None:
                text = "null"
            elif value is True or value is False:
                text = "true" if value else "false"
            else:  # containers, subclasses, NaN: the general rules and the C encoder
                value = redactor.redact(value)
                text = _encode(value)
            record[name] = value
            pieces[index] = text
        body = "".join(pieces)  # type: ignore[arg-type]
        digest = _sha256((prev + body).encode("utf-8")).hexdigest()
        at = layout.hash_at
        pieces[at] = layout.hash_before + digest + layout.hash_after
        pieces.append("\n")
        record["hash"] = digest
        return record, digest, "".join(pieces).encode("utf-8")  # type: ignore[arg-type]

    def _serialise_slowly(
        self, type: str, ts: Any, fields: Mapping[str, Any]
    ) -> tuple[dict[str, Any], str, bytes]:
        """`_serialise` for any record: redact everything, then encode the whole record once."""
        prev = self.last_hash
        placeholder = self._placeholder
        record = {
            "seq": self.next_seq,
            "run_id": self.run_id,
            "ts": ts,
            "type": type,
            "prev": prev,
            **self.redactor.redact(fields),
            "hash": placeholder,
        }
        # One serialisation gives both texts: the line, with a placeholder for the hash,
        # and the hashed body, which is that line without its "hash" entry (keys are
        # sorted and "prev" follows "hash", so the entry is always followed by a comma).
        text = _encode(record)
        at = text.find(placeholder) - 8  # len('"hash":"')
        end = at + 74  # len('"hash":"') + 64 + len('",')
        if at >= 0 and text[at:end] == self._placeholder_entry and text.find(placeholder, end) < 0:
            digest = _sha256((prev + text[:at] + text[end:]).encode("utf-8")).hexdigest()
            record["hash"] = digest
            data = text.replace(placeholder, digest, 1).encode("utf-8") + b"\n"
        else:  # the data holds this log's placeholder too: serialise the plain way
            del record["hash"]
            digest = _sha256((prev + _encode(record)).encode("utf-8")).hexdigest()
            record["hash"] = digest
            data = (_encode(record) + "\n").encode("utf-8")
        return record, digest, data

    def _refuse(self, type: str, fields: Mapping[str, Any]) -> None:
        """Raise the reason `append` cannot write (the caller holds the lock)."""
        if self._broken is not None:
            raise AuditWriteError(f"audit log is broken by an earlier failure: {self._broken}")
        if self._closed:
            raise self._fail("audit log is closed")
        if self._sealed:
            raise self._fail(f"run {self.run_id} is sealed by run_finished; nothing may follow it")
        if not isinstance(type, str) or not type:
            raise self._fail(f"record type must be a non-empty string, not {type!r}")
        clash = sorted(_COMMON_FIELDS.intersection(fields))
        raise self._fail(f"{type}: fields {clash} are set by the audit log itself")

    def _fsync(self) -> None:
        """fsync the file (and once, for a new file, its directory); caller holds the lock."""
        assert self._fd is not None
        try:
            os.fsync(self._fd)
        except OSError as exc:
            raise self._fail(f"cannot fsync audit log {self.path}: {exc}", exc) from exc
        if not self._dir_synced:
            self._dir_synced = True
            _fsync_dir(self._fd_dir())

    def _fd_dir(self) -> Path:
        assert self.path is not None
        return self.path.resolve().parent

    def sync(self) -> None:
        """Make every record written so far durable (fsync, unless durability is NONE).

        The executor calls this before any `write` tool (the write-ahead rule). Raises
        `AuditWriteError` when the fsync fails or the log is already broken.
        """
        with self._lock:
            if self._broken is not None:
                raise AuditWriteError(f"audit log is broken by an earlier failure: {self._broken}")
            if self._fd is None or self.durability is Durability.NONE:
                return
            self._fsync()

    def close(self) -> None:
        """Sync (per durability) and close the file; idempotent. Later appends raise."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._fd is None:
                return
            try:
                if self._broken is None and self.durability is not Durability.NONE:
                    self._fsync()
            finally:
                os.close(self._fd)
                self._fd = None

    def __enter__(self) -> AuditLog:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self.close()
        except AuditWriteError:
            # Do not hide the exception that is already unwinding; the log is marked broken.
            if exc_type is None:
                raise

    def __repr__(self) -> str:
        where = str(self.path) if self.path is not None else "memory"
        state = "broken" if self.broken else "closed" if self._closed else "open"
        return f"AuditLog({where!r}, run_id={self.run_id!r}, next_seq={self.next_seq}, {state})"


def _write_all(fd: int, data: bytes) -> None:
    written = os.write(fd, data)
    if written == len(data):  # the usual case: one call
        return
    if written <= 0:
        raise OSError("write returned 0 bytes")
    view = memoryview(data)[written:]
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise OSError("write returned 0 bytes")
        view = view[written:]


def _fsync_dir(directory: Path) -> None:
    # Best effort: some platforms and filesystems cannot open or fsync a directory; the
    # records themselves were fsynced already.
    try:
        dfd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)


def _read_tail(fh: Any, size: int, block: int = 65536) -> tuple[bytes | None, bytes]:
    """The last complete line (with its newline) and any partial bytes after it."""
    start = size
    buf = b""
    while True:
        step = min(block, start)
        start -= step
        fh.seek(start)
        buf = fh.read(step) + buf
        lines = buf.split(b"\n")
        # lines[-2] is whole once a newline precedes it or the file start was reached.
        if len(lines) >= 3 or start == 0:
            break
        block *= 2
    tail = lines[-1]
    last = lines[-2] + b"\n" if len(lines) >= 2 else None
    return last, tail


def _parse_complete_record(raw: bytes, prev: str, seq: int) -> dict[str, Any] | None:
    """`raw` parsed when it is a canonical, self-consistent record `seq` chained to `prev`."""
    try:
        record = json.loads(raw.decode("utf-8"))
    except ValueError:
        return None
    if not isinstance(record, dict) or (canonical_json(record) + "\n").encode("utf-8") != raw:
        return None
    if _common_fields_problem(record) is not None or record["prev"] != prev or record["seq"] != seq:
        return None
    if _record_hash_problem(record) is not None:
        return None
    return record


def _checked_last(path: Path, raw: bytes) -> tuple[str, dict[str, Any]]:
    """Hash and record of the file's last line, refusing to chain onto a damaged record."""
    try:
        record = json.loads(raw.decode("utf-8"))
    except ValueError as exc:
        raise AuditWriteError(f"last record of audit log {path} is not JSON: {exc}") from None
    problem: str | None
    if not isinstance(record, dict):
        problem = "not a JSON object"
    elif (canonical_json(record) + "\n").encode("utf-8") != raw:
        problem = "not in canonical form"
    else:
        problem = _common_fields_problem(record) or _record_hash_problem(record)
    if problem is not None:
        raise AuditWriteError(f"last record of audit log {path} does not verify ({problem}); run verify")
    return record["hash"], record


# ---------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------


def iter_records(
    path: str | os.PathLike[str], *, skip_partial_tail: bool = False
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Stream ``(line_number, record)`` pairs (line numbers start at 1).

    Only parses; use `verify` to check the chain. Raises `AuditFormatError` on a line that is
    not a JSON object, and on a partial last line unless `skip_partial_tail` is True.
    """
    with open(path, "rb") as fh:
        for number, raw in enumerate(fh, start=1):
            if not raw.endswith(b"\n"):
                if skip_partial_tail:
                    return
                raise AuditFormatError(path, number, "partial last line (the log ends mid-record)")
            try:
                record = json.loads(raw.decode("utf-8"))
            except ValueError as exc:
                raise AuditFormatError(path, number, f"not JSON: {exc}") from None
            if not isinstance(record, dict):
                raise AuditFormatError(path, number, "not a JSON object")
            yield number, record


def read_records(path: str | os.PathLike[str], *, skip_partial_tail: bool = False) -> list[dict[str, Any]]:
    """Every record of the log, in order (see `iter_records`)."""
    return [record for _, record in iter_records(path, skip_partial_tail=skip_partial_tail)]


def records_by_run(records: Iterable[Mapping[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Records grouped by ``run_id``, runs in order of first appearance, records in log order."""
    runs: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        runs.setdefault(str(record.get("run_id")), []).append(dict(record))
    return runs


# ---------------------------------------------------------------------------------------------
# Schema
# ---------------------------------------------------------------------------------------------


def _schema_path() -> Path:
    here = Path(__file__).resolve()
    for candidate in (
        here.parent / "_data" / "schemas" / _SCHEMA_FILE,
        here.parents[1] / "schemas" / _SCHEMA_FILE,
    ):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"{_SCHEMA_FILE} not found (broken installation?)")


@cache
def _schema_text() -> str:
    return _schema_path().read_text(encoding="utf-8")


def load_audit_schema() -> dict[str, Any]:
    """The audit record JSON Schema (a fresh copy: the packaged one first, else the repo's)."""
    schema: dict[str, Any] = json.loads(_schema_text())
    return schema


@dataclass(frozen=True)
class _TypeChecker:
    """The schema of one record type: a compiled (jsonschema-rs) check, and jsonschema to explain.

    `fast` decides; the pure-Python `validator` only runs on a record `fast` rejects, to word
    the message (its best match names the real problem), and decides alone for the rare
    record jsonschema-rs cannot take in (a dict with non-string keys cannot come from JSON).
    jsonschema-rs follows ECMA-262 regex semantics as JSON Schema requires: ``$`` does not
    match before a trailing newline, as Python's `re` would.
    """

    validator: Draft202012Validator
    fast: Any

    def problem(self, record: Mapping[str, Any]) -> str | None:
        """None when `record` is valid, else the best error message."""
        try:
            if self.fast.is_valid(record):
                return None
            first = next(iter(self.fast.iter_errors(record)), None)
        except (ValueError, TypeError, OverflowError):
            if self.validator.is_valid(record):
                return None
            first = None
        error = best_match(self.validator.iter_errors(record))
        if error is None:  # jsonschema-rs is stricter here: report its finding
            if first is None:
                return "invalid"
            where = "$" + "".join(
                f"[{part}]" if isinstance(part, int) else f".{part}" for part in first.instance_path
            )
            return str(first.message) + (f" (at {where})" if where != "$" else "")
        where = error.json_path
        return f"{error.message}" + (f" (at {where})" if where != "$" else "")


@cache
def _checkers() -> dict[str, _TypeChecker]:
    """One checker per record type, built once.

    Dispatching on ``type`` is equivalent to the schema's ``oneOf`` (each branch pins ``type``
    with ``const``) but validates one branch instead of all, and names the real problem
    instead of "not valid under any of the given schemas". Each branch is used in
    dereferenced form (resolving ``$ref`` through the registry for every record cost 7x).

    jsonschema needs ~20-100 µs per record, i.e. minutes for a million-record log, so each
    branch is also compiled by jsonschema-rs (~2 µs per record), which decides.
    """
    schema = load_audit_schema()
    defs = schema["$defs"]
    out: dict[str, _TypeChecker] = {}
    for branch in schema["oneOf"]:
        name = branch["$ref"].rsplit("/", 1)[-1]
        type_name = defs[name]["properties"]["type"]["const"]
        inlined = {"$schema": schema["$schema"], **_inline_refs(defs[name], defs, frozenset())}
        out[type_name] = _TypeChecker(Draft202012Validator(inlined), jsonschema_rs.validator_for(inlined))
    return out


def _inline_refs(node: Any, defs: Mapping[str, Any], seen: frozenset[str]) -> Any:
    """`node` with every local ``{"$ref": "#/$defs/<name>"}`` replaced by that definition."""
    if isinstance(node, list):
        return [_inline_refs(item, defs, seen) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str):
        name = ref.removeprefix("#/$defs/")
        if name == ref or name not in defs or len(node) != 1:
            raise ValueError(f"audit schema: unsupported $ref {ref!r} (only bare #/$defs/<name> refs)")
        if name in seen:
            raise ValueError(f"audit schema: recursive $ref {ref!r}")
        return _inline_refs(defs[name], defs, seen | {name})
    return {key: _inline_refs(value, defs, seen) for key, value in node.items()}


def _schema_problem(record: Mapping[str, Any]) -> str | None:
    rtype = record.get("type")
    checker = _checkers().get(rtype) if isinstance(rtype, str) else None
    if checker is None:
        return f"unknown record type {rtype!r}"
    return checker.problem(record)


# ---------------------------------------------------------------------------------------------
# Verification
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class VerifyIssue:
    """The first problem `verify` found: 1-based line, the record's seq when known, what."""

    line: int
    seq: int | None
    message: str

    def __str__(self) -> str:
        seq = f" (seq {self.seq})" if self.seq is not None else ""
        return f"line {self.line}{seq}: {self.message}"


@dataclass(frozen=True)
class VerifyReport:
    """The outcome of `verify`.

    `intact`: every line is canonical JSON, chained and hashed right, schema-valid, and the
    runs are well formed. `complete`: intact, and every run is sealed by ``run_finished`` (or
    was resumed by a later run in the file). `records` counts the records that verified
    before the first issue; `last_hash` is the hash of the last of them, which can be kept
    elsewhere as an anchor (the chain alone cannot reveal that whole sealed runs were cut off
    the end of the file).
    """

    records: int
    runs: int
    intact: bool
    complete: bool
    issue: VerifyIssue | None
    last_hash: str | None = None

    @property
    def ok(self) -> bool:
        """Intact and complete."""
        return self.intact and self.complete

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (``pte audit verify --json``)."""
        return {
            "ok": self.ok,
            "intact": self.intact,
            "complete": self.complete,
            "records": self.records,
            "runs": self.runs,
            "last_hash": self.last_hash,
            "issue": (
                None
                if self.issue is None
                else {"line": self.issue.line, "seq": self.issue.seq, "message": self.issue.message}
            ),
        }


def _common_fields_problem(record: Mapping[str, Any]) -> str | None:
    seq = record.get("seq")
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
        return f"bad or missing seq: {seq!r}"
    for name in ("run_id", "ts", "type"):
        if not isinstance(record.get(name), str) or not record[name]:
            return f"bad or missing {name}: {record.get(name)!r}"
    for name in ("prev", "hash"):
        value = record.get(name)
        if not isinstance(value, str) or _HEX64.fullmatch(value) is None:
            return f"bad or missing {name}: {value!r}"
    return None


def _record_hash_problem(record: Mapping[str, Any]) -> str | None:
    body = {k: v for k, v in record.items() if k != "hash"}
    expected = sha256_hex(record["prev"] + canonical_json(body))
    if expected != record["hash"]:
        return f"hash mismatch: recorded {record['hash'][:12]}…, content hashes to {expected[:12]}…"
    return None


def _body_text(line: str, digest: str) -> str | None:
    """canonical_json(record without hash), cut out of the canonical line itself.

    Saves a second serialisation per record. The text ``"hash":"<digest>"`` can only occur
    as a key/value pair (inside a JSON string every quote is escaped), and a nested one would
    need a record containing its own hash; if the cut is ever wrong the hash check fails and
    the caller falls back to serialising.
    """
    entry = '"hash":"' + digest + '"'
    at = line.find(entry)
    if at < 0:
        return None
    end = at + len(entry)
    if line[end] == ",":  # first key (or not last): drop the following comma
        return line[:at] + line[end + 1 :]
    return line[: at - 1] + line[end:]  # last key: drop the preceding comma


def verify(path: str | os.PathLike[str], *, check_schema: bool = True) -> VerifyReport:
    """Check a whole audit log, streaming (constant memory in the number of records).

    For each line, in order: it ends with a newline (else: partial last line), it is UTF-8
    JSON, it equals ``canonical_json(record) + "\\n"`` byte for byte (so any edited byte is
    caught even where it would not change the parsed value), the common fields are present
    and well typed, ``seq`` counts up from 0, ``prev`` is the previous line's hash, ``hash``
    is right, the record is valid against the audit schema (unless `check_schema` is False)
    and runs are well formed: a run begins with ``run_started`` and no other record starts
    one, a run's records are contiguous, and nothing of a run follows its ``run_finished``.

    Stops at the first problem. An empty file is intact but not complete. A run that never
    finished counts as complete when a later run in the file resumes it (its ``run_started``
    names it in ``resumes``); resuming under the same run_id simply continues the run. Memory
    grows with the number of runs, not of records. A missing or unreadable file raises
    OSError.
    """
    checkers = _checkers() if check_schema else None
    expected_prev = GENESIS_HASH
    count = 0
    current_run: str | None = None
    seen_runs: set[str] = set()
    # Runs not sealed yet, in order of appearance (dict as an ordered set) -> (line, seq) of
    # their latest record, for the "incomplete" issue.
    open_runs: dict[str, tuple[int, int]] = {}
    sealed: set[str] = set()

    def broken(line: int, seq: int | None, message: str) -> VerifyReport:
        return VerifyReport(
            records=count,
            runs=len(seen_runs),
            intact=False,
            complete=False,
            issue=VerifyIssue(line, seq, message),
            last_hash=expected_prev if count else None,
        )

    # The C scanner behind json.loads, without its wrappers: a canonical line is one object
    # from its first character to its newline. Anything else goes through json.loads.
    scan: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
    with open(path, "rb") as fh:
        for number, raw in enumerate(fh, start=1):
            if not raw.endswith(b"\n"):
                return broken(number, None, f"partial last line ({len(raw)} bytes): the log ends mid-record")
            try:
                line = raw.decode("utf-8")
            except ValueError as exc:
                return broken(number, None, f"not valid JSON: {exc}")
            try:
                record, end = scan(line, 0)
                if end != len(line) - 1:
                    raise ValueError
            except (ValueError, StopIteration):
                try:
                    record = json.loads(line)
                except ValueError as exc:
                    return broken(number, None, f"not valid JSON: {exc}")
            if not isinstance(record, dict):
                return broken(number, None, "not a JSON object")
            try:
                text = _encode(record)
            except ValueError:  # NaN or Infinity, which canonical JSON cannot hold
                text = ""
            seq = record.get("seq")
            # Any: once the checks below pass, each holds a non-empty str.
            digest: Any = record.get("hash")
            run_id: Any = record.get("run_id")
            rtype: Any = record.get("type")
            ts = record.get("ts")
            # The usual case first, in a few comparisons: a well-formed record that links up
            # (prev equal to a verified hash and a hash equal to a computed one are both hex).
            if not (
                len(text) + 1 == len(line)
                and line.startswith(text)
                and seq == count
                and type(seq) is int
                and record.get("prev") == expected_prev
                and type(digest) is str
                and type(run_id) is str
                and run_id
                and type(rtype) is str
                and rtype
                and type(ts) is str
                and ts
                and (body := _body_text(text, digest)) is not None
                and _sha256((expected_prev + body).encode("utf-8")).hexdigest() == digest
            ):
                # Otherwise every check in turn, so that the first problem is the one named.
                seq = seq if isinstance(seq, int) and not isinstance(seq, bool) else None
                if len(text) + 1 != len(line) or not line.startswith(text):
                    return broken(number, seq, "not in canonical form (the line was edited)")
                problem = _common_fields_problem(record)
                if problem is not None:
                    return broken(number, seq, problem)
                body = _body_text(text, digest)
                if body is None or _sha256((record["prev"] + body).encode("utf-8")).hexdigest() != digest:
                    problem = _record_hash_problem(record)
                    if problem is not None:
                        return broken(number, seq, problem)
                if seq != count:
                    hint = " (a record is missing)" if seq is not None and seq > count else ""
                    return broken(number, seq, f"seq {seq} where {count} was expected{hint}")
                if record["prev"] != expected_prev:
                    return broken(
                        number, seq, "prev is not the previous record's hash (records removed or reordered)"
                    )
            if checkers is not None:
                checker = checkers.get(rtype)
                if checker is None:
                    return broken(number, seq, f"schema: unknown record type {rtype!r}")
                problem = checker.problem(record)
                if problem is not None:
                    return broken(number, seq, f"schema: {problem}")
            if run_id != current_run:
                if run_id in seen_runs:
                    return broken(number, seq, f"record of run {run_id} after run {current_run} began")
                if rtype != "run_started":
                    return broken(number, seq, f"run {run_id} does not begin with run_started")
                seen_runs.add(run_id)
                current_run = run_id
                resumed = record.get("resumes")
                if isinstance(resumed, str) and resumed in open_runs:
                    # A resumed run is carried on (and sealed) by the run that resumes it.
                    del open_runs[resumed]
            elif run_id in sealed:
                return broken(number, seq, f"{rtype} after run_finished of run {run_id}")
            elif rtype == "run_started":
                return broken(number, seq, f"second run_started in run {run_id}")
            if rtype == "run_finished":
                sealed.add(run_id)
                open_runs.pop(run_id, None)
            else:
                open_runs[run_id] = (number, count)
            expected_prev = digest
            count += 1

    last_hash = expected_prev if count else None
    if count == 0:
        return VerifyReport(0, 0, True, False, VerifyIssue(0, None, "incomplete: the log holds no records"))
    if open_runs:
        run_id, (line_no, seq_no) = next(iter(open_runs.items()))
        more = f" (and {len(open_runs) - 1} more)" if len(open_runs) > 1 else ""
        return VerifyReport(
            count,
            len(seen_runs),
            True,
            False,
            VerifyIssue(line_no, seq_no, f"incomplete: run {run_id} has no run_finished{more}"),
            last_hash,
        )
    return VerifyReport(count, len(seen_runs), True, True, None, last_hash)


# ---------------------------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------------------------

_ELIDE = 60


def _short(value: Any, limit: int = _ELIDE) -> str:
    """One-line, length-limited text of a value (strings unquoted)."""
    text = value if isinstance(value, str) else _json_text(value)
    text = text.replace("\r", "\\r").replace("\n", "\\n").replace("\t", " ")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _json_text(value: Any) -> str:
    try:
        return canonical_json(value)
    except (TypeError, ValueError):
        return repr(value)


def _ms(value: Any) -> str:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return "? ms"
    return f"{value / 1000:.2f} s" if value >= 1000 else f"{value:.1f} ms"


def _hash_prefix(value: Any) -> str:
    return value[:12] + "…" if isinstance(value, str) and len(value) > 12 else str(value)


def _ids(value: Any) -> str:
    if not isinstance(value, list):
        return "-"
    return _short(",".join(str(v) for v in value), 40) if value else "-"


def _error_text(error: Any) -> str:
    if isinstance(error, Mapping):
        return _short(f"{error.get('kind', '?')}: {error.get('message', '')}")
    return _short(error)


def _summary(record: Mapping[str, Any]) -> str:
    kind = record.get("type")
    get = record.get
    if kind == "run_started":
        tools = get("tools")
        count = len(tools) if isinstance(tools, list) else "?"
        parts = [f"run {get('run_id')}", f"mode={get('mode')}", f"tools={count}"]
        if get("resumes"):
            parts.append(f"resumes={get('resumes')}")
        if get("request") is not None:
            parts.append(f"request={_short(get('request'))}")
        return " ".join(parts)
    if kind == "run_resumed":
        return f"resumed after {get('after_records')} re-driven record(s)"
    if kind == "llm_call":
        head = f"{get('role')} {get('model')} attempts={get('attempts')} {_ms(get('duration_ms'))}"
        if get("error") is not None:
            return f"{head} error: {_short(get('error'))}"
        usage = get("usage")
        tokens = usage.get("total_tokens") if isinstance(usage, Mapping) else None
        return f"{head} {get('finish_reason')}" + (f" tokens={tokens}" if tokens is not None else "")
    if kind == "plan_accepted":
        order = get("order")
        steps = len(order) if isinstance(order, list) else "?"
        return f"{get('origin')} plan {_hash_prefix(get('plan_hash'))} steps={steps} order={_ids(order)}"
    if kind == "plan_rejected":
        return f"{get('reason')} at {get('path')}: {_short(get('message'))}"
    if kind == "approval":
        signed = "signed" if get("signed") else "unsigned"
        return f"plan {_hash_prefix(get('plan_hash'))} by {get('by')} at {get('at')} {signed}"
    if kind == "step_started":
        return f"{get('step_id')} {get('tool')} {get('effect')} {_short(get('args'))}"
    if kind == "step_finished":
        head = f"{get('step_id')} {get('tool')} {get('status')} {_ms(get('duration_ms'))}"
        if get("status") == "ok":
            return f"{head} -> {_short(get('output'), 40)}"
        return f"{head} {_error_text(get('error'))}"
    if kind == "replan":
        return (
            f"attempt {get('attempt')} after {get('failed_step')} failed ({_error_text(get('error'))}) "
            f"completed={_ids(get('completed'))}"
        )
    if kind == "run_finished":
        status = get("status")
        head = f"{status}({get('reason')})" if status != "succeeded" else str(status)
        tail = f" steps={get('steps_run')} llm_calls={get('llm_calls')}"
        if status == "succeeded":
            return head + tail + (f" answer={_short(get('answer'))}" if get("answer") is not None else "")
        return head + tail + (f": {_short(get('message'))}" if get("message") else "")
    extra = {k: v for k, v in record.items() if k not in _COMMON_FIELDS}
    return _short(extra)


def render_timeline(records: Iterable[Mapping[str, Any]]) -> str:
    """A human-readable timeline (``pte audit show``): one line per record.

    ``seq  time  type  summary``, e.g. ``3  02:30:31.123  step_finished  inv
    list_overdue_invoices ok 3.2 ms -> {...}``; long values are elided with "…". Never
    fails on malformed records: missing fields show as None.
    """
    lines = []
    for record in records:
        ts = record.get("ts")
        when = ts[11:23] if isinstance(ts, str) and len(ts) >= 23 and ts[10] == "T" else str(ts)
        seq = record.get("seq")
        lines.append(f"{seq!s:>6}  {when:<12}  {record.get('type')!s:<14} {_summary(record)}")
    return "\n".join(lines)
