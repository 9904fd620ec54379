"""Secret redaction for everything PTE records or prints: keys and free-text patterns."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from pte.canonical import canonical_json

#: What a redacted value or substring is replaced with.
REDACTED = "[REDACTED]"

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
            hit = (redacted, canonical_json(redacted))
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
