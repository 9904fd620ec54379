"""Secret redaction for everything PTE records or prints: keys and free-text rules.

Two kinds of rule:

- the value under a *secret key* (`DEFAULT_REDACT_KEYS`, plus any configured) is replaced
  whole, except inside recorded structure (`STRUCTURE_FIELDS`: tool schemas, the policy),
  where a key is a parameter's *name*, not a secret;
- every string is scanned by a maintained rule set (`pte._core._secret_rules`: gitleaks' release
  rules plus PTE's additions, evaluated on RE2 in time linear in the text) and the secret
  part of each finding becomes `REDACTED`. Object keys are strings too: a credential used
  as a key (a token mapped to its scopes) is scrubbed the same way (two keys that redact
  alike are kept apart as ``[REDACTED]``, ``[REDACTED]#2``, ...).

`Redactor.from_env` adds a deployment's own keys (``PTE_REDACT_KEYS``, comma-separated) and
rule files (``PTE_SECRET_RULES``, gitleaks-format TOML paths separated by ``os.pathsep``).
"""

from __future__ import annotations

import contextlib
import os
import re
import weakref
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson
import re2

from pte._core._canonical import checked_jcs, hash_json, json_plain, numbers_as_jcs
from pte._core._secret_rules import SecretRules

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
        "pwd",
        "passphrase",
        "secret",
        "client_secret",
        "secret_key",
        "access_key",
        "secret_access_key",
        "account_key",
        "master_key",
        "encryption_key",
        "signing_key",
        "private_key",
        "private_key_id",
        "token",
        "access_token",
        "refresh_token",
        "id_token",
        "auth_token",
        "session_token",
        "sessionid",
        "session_id",
        "credential",
        "credentials",
        "connection_string",
        "authorization",
        "cookie",
        "set_cookie",
    }
)

#: Structure that is recorded, not data: (record type, dotted path of a field). The key rule
#: does not apply inside it (a tool's input schema has a `password` *property*, a policy an
#: entry for a `set_password` tool: rewriting those would make the log unreplayable); the
#: text rules and registered secrets still do.
STRUCTURE_FIELDS: Mapping[str, tuple[str, ...]] = {"run_started": ("tools", "config.policy", "stored")}

_CACHE_ENTRIES = 4096
# A surrogate code point: alone, in no encoding (paired, two code points UTF-8 refuses too).
_SURROGATE = re.compile("[\ud800-\udfff]")
_CACHED_TEXT_CHARS = 200

_MIN_ENV_SECRET = 8
_ENV_SECRETS = frozenset({"PTE_APPROVAL_KEY"})
# Names the key rule would call secret that are not: the shell's working directories ("pwd"
# is a password elsewhere). Scrubbing their values would erase every path under the working
# directory from every record the CLI writes, irrecoverably, since the chain is hashed.
_ENV_NOT_SECRETS = frozenset({"PWD", "OLDPWD"})

#: Environment variables read by `Redactor.from_env`.
ENV_KEYS = "PTE_REDACT_KEYS"
ENV_RULE_FILES = "PTE_SECRET_RULES"


def _normalise_key(key: str) -> str:
    return key.lower().replace("-", "").replace("_", "")


def _free_key(out: Mapping[Any, Any], name: Any) -> Any:
    """`name`, or ``name#2``, ``name#3``...: the first that is not yet a key of `out`.

    Two keys can redact to the same text (two tokens -> ``[REDACTED]``); each keeps its entry,
    in order, instead of the later one silently replacing the earlier.
    """
    if name not in out:
        return name
    n = 2
    while f"{name}#{n}" in out:
        n += 1
    return f"{name}#{n}"


def _re2_source(pattern: str | re.Pattern[str]) -> str:
    """RE2 source for a pattern given as text or as a compiled `re` pattern (flags kept)."""
    if isinstance(pattern, str):
        return pattern
    flags = "".join(
        letter
        for flag, letter in ((re.IGNORECASE, "i"), (re.MULTILINE, "m"), (re.DOTALL, "s"))
        if pattern.flags & flag
    )
    return f"(?{flags}){pattern.pattern}" if flags else pattern.pattern


#: `_whole_record_check` per rule set and key names: compiling the set took ~4 ms, on every
#: `Redactor` (every `AuditLog` made without one). A rule set is immutable and the set a pure
#: function of it and the names, so a redactor with the same rules and names shares it, as
#: every `re` pattern of a process is shared; a rule set no redactor uses any more drops out.
_WHOLE_CHECKS: weakref.WeakKeyDictionary[SecretRules, dict[tuple[str, ...], Any]] = (
    weakref.WeakKeyDictionary()
)


def _shared_whole_record_check(rules: SecretRules, names: tuple[str, ...]) -> Any:
    """`_whole_record_check(rules, names)`, compiled once per rule set and names."""
    known = _WHOLE_CHECKS.setdefault(rules, {})
    if names not in known:
        known[names] = _whole_record_check(rules, names)
    return known[names]


def _whole_record_check(rules: SecretRules, names: tuple[str, ...]) -> Any:
    """An RE2 set that finds, in a record's canonical encoding, every place where the walk
    might change something (`Redactor.canonical_if_clean`): each keyword of `rules`, and each
    key whose name ends in one of `names` (normalised: `is_secret_key`), which JSON writes as
    the name's letters with any '-' and '_' among and after them, then ``":`` (a quote inside
    a string is escaped, so ``":`` ends a key). The keywords and names are lower case and the
    set ignores case, so an ASCII encoding is searched as it is, with no lower-cased copy
    (for ASCII text, matching case-insensitively is matching its lower case). None when a
    search of the encoding cannot answer for every string and key: a rule runs on every
    text, or a name is not ASCII (a key's lower case alone may differ from its lower case in
    the encoding) or is written escaped.
    """
    if not rules.keyword_gated or not all(name.isascii() and json_plain(name) for name in names):
        return None
    ignore_case = re2.Options()
    ignore_case.case_sensitive = False
    found = re2.Set.SearchSet(ignore_case)
    for keyword in rules.keywords:
        found.Add(re2.escape(keyword))
    spelled = ("[-_]*".join(re2.escape(letter) for letter in name) for name in names)
    # A set needs a pattern: with no keys, one that matches nothing (JSON escapes a NUL).
    found.Add("(?:" + "|".join(spelled) + ')[-_]*":' if names else '\\x00":')
    found.Compile()
    return found


class Redactor:
    """Scrubs secrets out of JSON-like values before they are written or printed.

    Three rules, applied to a copy of the value (the input is never mutated):

    - the value under a *secret key* (see `DEFAULT_REDACT_KEYS`; case, '-' and '_' are
      ignored, and a key that ends in a secret name counts too) becomes `REDACTED`, unless it
      is null or a boolean, which hide nothing;
    - every finding of the *secret rules* in every string becomes `REDACTED` (only the
      secret part: ``Bearer abc...`` reads ``Bearer [REDACTED]``);
    - every occurrence of an exact secret registered with `add_secret` becomes `REDACTED`.

    `rules` replaces the default rule set (`SecretRules.default`); `patterns` (RE2 regexes)
    replaces it with just those patterns (``patterns=()``: no text rules at all);
    `extra_patterns` and `rule_files` add to whichever set is in use. Every pattern must be
    RE2 syntax (no lookaround or backreferences): that is what keeps redaction linear.

    Mappings become dicts, tuples become lists and str/int/float subclasses (enums) become
    the plain type, so the result is exactly what a JSON round trip gives back.
    """

    def __init__(
        self,
        keys: Iterable[str] = DEFAULT_REDACT_KEYS,
        patterns: Iterable[str | re.Pattern[str]] | None = None,
        *,
        extra_keys: Iterable[str] = (),
        extra_patterns: Iterable[str | re.Pattern[str]] = (),
        rules: SecretRules | None = None,
        rule_files: Iterable[str | os.PathLike[str]] = (),
    ) -> None:
        names = {_normalise_key(k) for k in (*keys, *extra_keys)}
        names.discard("")
        # str.endswith takes a tuple: one C call per key instead of a Python loop.
        self._key_suffixes: tuple[str, ...] = tuple(sorted(names))
        if patterns is not None:
            chosen = SecretRules.from_patterns([_re2_source(p) for p in patterns])
        else:
            chosen = rules if rules is not None else SecretRules.default()
        extra = [_re2_source(p) for p in extra_patterns]
        if extra:
            chosen = chosen + SecretRules.from_patterns(extra, prefix="extra-pattern")
        files = list(rule_files)
        if files:
            chosen = chosen + SecretRules.from_files(files)
        self.rules = chosen
        self._whole_check = _shared_whole_record_check(chosen, self._key_suffixes)
        self._secrets: list[str] = []
        # Short strings (tool names, step ids, statuses) and keys repeat in almost every
        # record; memoising them takes most of the rule work off the write path.
        self._text_cache: dict[str, str] = {}
        self._key_cache: dict[str, bool] = {}
        #: The registered secrets as JSON writes them inside a string (`add_secret`).
        self._encoded_secrets: list[bytes] = []
        #: Hashes of the content this redactor gave out (`redact_content`), since the last
        #: `add_secret`: a run_started's stored content is redacted once (`redact_fields`).
        self._own_content: set[str] = set()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Redactor:
        """The default redactor plus ``$PTE_REDACT_KEYS`` and ``$PTE_SECRET_RULES`` (see module doc).

        Raises ValueError when a rule file cannot be loaded or holds a regex RE2 refuses.
        """
        env = os.environ if environ is None else environ
        keys = [k.strip() for k in env.get(ENV_KEYS, "").split(",") if k.strip()]
        files = [f for f in env.get(ENV_RULE_FILES, "").split(os.pathsep) if f.strip()]
        redactor = cls(extra_keys=keys, rule_files=files)
        # A secret the process was given (OPENAI_API_KEY, PTE_APPROVAL_KEY, DB_PASSWORD...)
        # is scrubbed verbatim wherever it turns up, whatever its format. Short values are
        # skipped: they would also match ordinary words.
        for name, value in env.items():
            if name in _ENV_NOT_SECRETS:
                continue
            if len(value) >= _MIN_ENV_SECRET and (redactor.is_secret_key(name) or name in _ENV_SECRETS):
                redactor.add_secret(value)
        return redactor

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
            # A lone surrogate (an environment variable's undecodable bytes) is in no encoding.
            with contextlib.suppress(TypeError):
                self._encoded_secrets.append(orjson.dumps(value)[1:-1])
            self._text_cache = {}
            self._own_content = set()  # redacted before this secret was known

    def is_secret_key(self, key: str) -> bool:
        """Whether values under `key` are redacted."""
        known = self._key_cache.get(key)
        if known is None:
            known = bool(self._key_suffixes) and _normalise_key(key).endswith(self._key_suffixes)
            if len(self._key_cache) < _CACHE_ENTRIES:
                self._key_cache[key] = known
        return known

    def redact_text(self, text: str) -> str:
        """`text` with registered secrets and rule findings replaced by `REDACTED`.

        Time linear in ``len(text)``: the rules run on RE2 and each finding is handled once.
        """
        cached = self._text_cache.get(text)
        if cached is not None:
            return cached
        out = text
        for secret in self._secrets:
            if secret in out:
                out = out.replace(secret, REDACTED)
        if out:
            # The rules run on RE2, which takes UTF-8 only: a lone surrogate (a tampered log's
            # ``"\ud800"``, an undecodable file name) is searched as U+FFFD, one code point for
            # one, so the spans found are the text's own. The text keeps it: what shows it
            # decides (`well_formed`), and the audit writer refuses it by name.
            spans = self.rules.spans(out if out.isascii() or _utf8(out) else _SURROGATE.sub("\ufffd", out))
            if spans:
                pieces: list[str] = []
                at = 0
                for start, end in spans:
                    pieces += [out[at:start], REDACTED]
                    at = end
                pieces.append(out[at:])
                out = "".join(pieces)
        if len(text) <= _CACHED_TEXT_CHARS and len(self._text_cache) < _CACHE_ENTRIES:
            self._text_cache[text] = out
        return out

    def redact(self, value: Any) -> Any:
        """A redacted copy of `value` (see the class docstring); `value` itself is untouched."""
        # Exact JSON types first (what every record is made of); the rest in `_redact_other`.
        kind = type(value)
        if kind is str:
            return self.redact_text(value)
        if kind is dict:
            out: dict[Any, Any] = {}
            for key, item in value.items():
                # A key is text too: a credential used as a key (a token -> its scopes) is
                # scrubbed like one in a value.
                out[_free_key(out, self._plain_key(key))] = self._redact_item(key, item)
            return out
        if kind is int or kind is float or kind is bool or value is None:
            return value
        if kind is list:
            return [self.redact(item) for item in value]
        return self._redact_other(value)

    def redact_structure(self, value: Any) -> Any:
        """`redact` without the key rule: for recorded structure (schemas, policies).

        Keys there name parameters and tools; only the text rules and registered secrets
        apply, to the strings in it.
        """
        if isinstance(value, str):
            return self.redact_text(str.__str__(value))
        if isinstance(value, Mapping):
            out: dict[Any, Any] = {}
            for key, item in value.items():
                out[_free_key(out, self._plain_key(key))] = self.redact_structure(item)
            return out
        if isinstance(value, list | tuple):
            return [self.redact_structure(item) for item in value]
        return self._redact_other(value)

    def redact_content(self, value: Any) -> tuple[Any, str]:
        """Content a ``run_started`` stores (a catalogue, a policy): `redact_structure(value)`
        and the hash of that (`hash_json`), its key in ``stored``.

        The redactor notes the hash, so that redacting the record's fields (`redact_fields`)
        does not walk the content a second time: a ``stored`` entry whose content still hashes
        to its key, a hash this redactor gave out, is exactly what it redacted (a changed byte
        would change the hash).
        """
        redacted = self.redact_structure(value)
        digest = hash_json(redacted)
        if len(self._own_content) < _CACHE_ENTRIES:
            self._own_content.add(digest)
        return redacted, digest

    def redact_fields(self, record_type: str, fields: Mapping[str, Any]) -> dict[str, Any]:
        """The fields of an audit record of `record_type`, redacted, structure kept.

        Fields named in `STRUCTURE_FIELDS` for this record type get `redact_structure`
        (content this redactor gave out in ``stored``, unchanged, is taken as it is:
        `redact_content`); every other field gets `redact` (its own name counting as a key).
        """
        paths = STRUCTURE_FIELDS.get(record_type)
        if not paths:
            # `redact` copies as it goes: a plain dict needs no copy of its own first.
            return self.redact(fields if type(fields) is dict else dict(fields))  # type: ignore[no-any-return]
        stored = fields.get("stored") if record_type == "run_started" else None
        if not isinstance(stored, Mapping):
            return self._redact_around(fields, [tuple(p.split(".")) for p in paths])
        rest = {key: item for key, item in fields.items() if key != "stored"}
        out = self._redact_around(rest, [tuple(p.split(".")) for p in paths])
        out["stored"] = self._redact_stored(stored)
        return out

    def _redact_stored(self, stored: Mapping[Any, Any]) -> dict[Any, Any]:
        """`redact_structure(stored)`, but for the entries this redactor already gave out."""
        out: dict[Any, Any] = {}
        for key, content in stored.items():
            own = self._is_own_content(key, content)
            out[_free_key(out, self._plain_key(key))] = content if own else self.redact_structure(content)
        return out

    def _is_own_content(self, key: Any, content: Any) -> bool:
        if not isinstance(key, str) or key not in self._own_content:
            return False
        try:
            return hash_json(content) == key
        except (ValueError, TypeError, RecursionError):
            return False

    def canonical_if_clean(self, record: dict[str, Any]) -> bytes | None:
        """The canonical form (`canonical_bytes`) of `record` when no rule can change anything
        in it; None when it may need `redact_fields` (or is not exact JSON data).

        The audit writer's fast path: one walk checks the types and the numbers; the keys,
        the text rules and the registered secrets are then checked once on the whole
        encoding instead of on each string: a registered secret, a rule keyword (the rules
        run only where one of their keywords occurs: `SecretRules.keyword_gated`) or a key
        ending in a secret name inside the record occurs in the encoding too, since JSON
        writes each of them as it is (`_whole_record_check`). Finding one there does not mean
        a string holds it (it may span two strings), only that the walk must decide. Stricter
        than `redact_fields`, which spares keys in recorded structure.
        """
        encoded = self.canonical_if_checkable(record)
        return encoded if encoded is not None and self.clean((encoded,)) else None

    def canonical_if_checkable(self, record: dict[str, Any], *, walk: Any = None) -> bytes | None:
        """The canonical form of `record` when `clean` can answer for it (exact JSON data
        whose numbers orjson writes as JCS does, and rules a search of the encoding answers
        for); None when only the walk (`redact_fields`) can decide. `canonical_if_clean` is
        this and `clean`; the audit writer checks a batch's records with one `clean`.

        `walk`: the part of `record` to check for types and numbers (`numbers_as_jcs`), when
        the caller knows the rest to be exact strings and safe integers (the audit writer's
        common fields); by default the whole record."""
        if self._whole_check is None or not numbers_as_jcs(record if walk is None else walk):
            return None
        return checked_jcs(record)

    def clean(self, encodings: Sequence[bytes]) -> bool:
        """Whether no rule can change anything in the records `encodings` are of (each from
        `canonical_if_checkable`, whole or in parts cut around whole members the walk leaves
        alone: the audit writer leaves out its hash member), searched as one text: one RE2
        search for a batch of records instead of one each (a search costs about as much for
        one short record as for two). What occurs in a string or key of one part occurs in
        the joined text (a keyword holds no quote, so it never spans a member's edge); what
        only occurs across a join is a false alarm: the walk then decides, as for any finding."""
        check = self._whole_check
        if check is None:
            return False
        encoded = encodings[0] if len(encodings) == 1 else b"\n".join(encodings)
        for secret in self._encoded_secrets:
            if secret in encoded:
                return False
        # The set ignores case, which answers for ASCII; other text may lower-case to ASCII
        # (the Kelvin sign to "k"), so it is searched lower-cased as Python does it.
        text = encoded if encoded.isascii() else encoded.decode().lower().encode()
        return not check.Match(text)

    def clean_values(self, values: Sequence[Any]) -> bool:
        """`clean` for `values` (dicts of exact JSON data, each whole: the audit writer's
        records' own fields, without the common ones), searched in their JSON encoding: False
        where they cannot be encoded."""
        try:
            encodings = [orjson.dumps(value) for value in values]
        except TypeError:  # not JSON (a lone surrogate, a key that is not text...): the walk decides
            return False
        return bool(encodings) and self.clean(encodings)

    def _redact_around(self, mapping: Mapping[str, Any], paths: list[tuple[str, ...]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, item in mapping.items():
            below = [p[1:] for p in paths if p[0] == key]
            if any(not rest for rest in below):
                out[key] = self.redact_structure(item)
            elif below and isinstance(item, Mapping) and not self.is_secret_key(key):
                out[key] = self._redact_around(item, below)
            else:
                out.update(self.redact({key: item}))
        return out

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
            out: dict[Any, Any] = {}
            for key, item in value.items():
                out[_free_key(out, self._plain_key(key))] = self._redact_item(key, item)
            return out
        if isinstance(value, list | tuple):
            return [self.redact(item) for item in value]
        # Anything else is not JSON; the encoder will refuse it and the append fails closed.
        return value

    def _plain_key(self, key: Any) -> Any:
        """A key as recorded: plain text, redacted like any text (non-text keys as they are)."""
        return self.redact_text(str.__str__(key)) if isinstance(key, str) else key

    def _redact_item(self, key: Any, item: Any) -> Any:
        secret = isinstance(key, str) and self.is_secret_key(key)
        if secret and item is not None and not isinstance(item, bool):
            return REDACTED
        return self.redact(item)


def _utf8(text: str) -> bool:
    """Whether UTF-8 can encode `text` (it holds no surrogate code point)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
