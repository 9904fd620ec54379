"""Secret-detection rules: a maintained rule file, evaluated in linear time.

The rules are gitleaks' (``secret_rules/gitleaks.toml``, vendored verbatim from a tagged
release, MIT) plus PTE's own additions for free text (``secret_rules/pte.toml``), both in
gitleaks' TOML rule format, so a deployment can add its own file in the same format.

Every regex runs on RE2 (``google-re2``): no backtracking, so the time to scan a text is
linear in its length whatever the text is (Python's `re` takes quadratic or exponential
time on some inputs for patterns like these). Of the rule format PTE uses:

- ``regex`` (RE2 syntax) and ``secretGroup``: without a group number, the first non-empty
  capture group is the secret, and without groups the whole match is (as gitleaks does);
- ``keywords``: a rule runs only on texts containing one of them (case-insensitive), all
  keywords being found in one pass by an RE2 set;
- ``entropy``: a candidate whose Shannon entropy is at or below it is not a secret;
- ``allowlists`` (``regexes`` on the secret, the match or the line, ``stopwords``, ``condition``)
  and the global ``[allowlist]``'s ``regexes`` and ``stopwords``.

Path and commit criteria (meaningful only to a repository scanner) never match here, so an
allowlist entry that needs one under ``condition = "AND"`` never applies. Rules without a
``regex`` (path-only rules) are skipped.
"""

from __future__ import annotations

import math
import os
import tomllib
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import re2

from pte._core._bounded_files import FileRefused, read_bounded_text
from pte._core._canonical import json_plain

__all__ = ["SecretRule", "SecretRules", "default_rule_files"]

# How much of the line around a match an allowlist with regexTarget = "line" looks at:
# bounded, so that many matches on one huge line cost linear time, not quadratic.
_LINE_WINDOW = 512


def default_rule_files() -> tuple[Path, ...]:
    """The rule files PTE ships: gitleaks' release file, then PTE's additions."""
    from pte._core._resources import data_dir

    directory = data_dir("secret_rules")
    return (directory / "gitleaks.toml", directory / "pte.toml")


def _compile(pattern: str, where: str) -> Any:
    try:
        return _compiled(pattern)
    except re2.error as exc:
        raise ValueError(f"{where}: not an RE2 regex ({exc}): {pattern[:200]!r}") from None


@cache
def _compiled(pattern: str) -> Any:
    return re2.compile(pattern)


class _Lazy:
    """A regex compiled on first use: most rules never see their keyword, and compiling all
    of gitleaks' rules up front would cost every `pte` command a third of a second."""

    __slots__ = ("_regex", "pattern", "where")

    def __init__(self, pattern: str, where: str, *, eager: bool) -> None:
        self.pattern = pattern
        self.where = where
        self._regex: Any = _compile(pattern, where) if eager else None

    def get(self) -> Any:
        if self._regex is None:
            self._regex = _compile(self.pattern, self.where)
        return self._regex


@dataclass(frozen=True, slots=True)
class _Allow:
    """One allowlist entry: a candidate matching it is not a secret."""

    regexes: tuple[Any, ...]
    target: str  # "secret", "match" or "line"
    stopwords: tuple[str, ...]
    require_all: bool

    def allows(self, secret: str, match: str, line: str) -> bool:
        checks: list[bool] = []
        if self.regexes:
            text = match if self.target == "match" else line if self.target == "line" else secret
            checks.append(any(r.get().search(text) is not None for r in self.regexes))
        if self.stopwords:
            lowered = secret.lower()
            checks.append(any(word in lowered for word in self.stopwords))
        if not checks:
            return False
        return all(checks) if self.require_all else any(checks)


def _allow(entry: Mapping[str, Any], where: str, *, eager: bool = True) -> _Allow | None:
    require_all = str(entry.get("condition", "OR")).upper() == "AND"
    if require_all and (entry.get("paths") or entry.get("commits")):
        return None  # needs a file path or a commit: never satisfied on a text
    # One RE2 alternation instead of a search per regex (flags stay scoped to each group).
    sources = [str(r) for r in entry.get("regexes") or ()]
    regexes = (_Lazy("|".join(f"(?:{r})" for r in sources), where, eager=eager),) if sources else ()
    stopwords = tuple(str(w).lower() for w in entry.get("stopwords") or ())
    if not regexes and not stopwords:
        return None
    return _Allow(regexes, str(entry.get("regexTarget", "secret")), stopwords, require_all)


@dataclass(frozen=True, slots=True)
class SecretRule:
    """One detection rule (see the module docstring for its fields' meaning)."""

    id: str
    description: str
    lazy_regex: _Lazy
    secret_group: int
    entropy: float
    keywords: tuple[str, ...]
    allowlists: tuple[_Allow, ...]

    @property
    def regex(self) -> Any:
        """The compiled RE2 regex."""
        return self.lazy_regex.get()

    @classmethod
    def from_toml(
        cls, entry: Mapping[str, Any], source: str, *, shared: Sequence[_Allow] = (), eager: bool = True
    ) -> SecretRule | None:
        """The rule of one ``[[rules]]`` table (plus its file's global allowlists `shared`);
        None for a rule without a regex. `eager` compiles (and so checks) its regexes now."""
        rule_id = str(entry.get("id", "?"))
        if not entry.get("regex"):
            return None
        where = f"{source}: rule {rule_id}"
        own = (_allow(e, where, eager=eager) for e in entry.get("allowlists") or ())
        allowlists = (*shared, *(a for a in own if a is not None))
        return cls(
            id=rule_id,
            description=str(entry.get("description", "")),
            lazy_regex=_Lazy(str(entry["regex"]), where, eager=eager),
            secret_group=int(entry.get("secretGroup", 0)),
            entropy=float(entry.get("entropy", 0.0)),
            keywords=tuple(str(k).lower() for k in entry.get("keywords") or ()),
            allowlists=allowlists,
        )

    def secret_span(self, match: Any) -> tuple[int, int]:
        """Where the secret is in a match: the secret group, the first non-empty group, or all."""
        groups = match.re.groups
        if groups:
            if 0 < self.secret_group <= groups:
                return match.span(self.secret_group)  # type: ignore[no-any-return]
            for index in range(1, groups + 1):
                start, end = match.span(index)
                if end > start:
                    return start, end
        return match.span()  # type: ignore[no-any-return]


def shannon_entropy(text: str) -> float:
    """Shannon entropy of `text` in bits per character (gitleaks' measure)."""
    if not text:
        return 0.0
    size = len(text)
    return -sum(count / size * math.log2(count / size) for count in Counter(text).values())


class SecretRules:
    """A set of `SecretRule`; finds the secret spans in a text."""

    def __init__(self, rules: Iterable[SecretRule] = ()) -> None:
        self.rules: tuple[SecretRule, ...] = tuple(rules)
        self._always: list[int] = []  # rules without keywords run on every text
        keyword_rules: dict[str, list[int]] = {}
        for index, rule in enumerate(self.rules):
            if not rule.keywords:
                self._always.append(index)
            for keyword in rule.keywords:
                keyword_rules.setdefault(keyword, []).append(index)
        #: Every rule's keywords (lower case), each once.
        self.keywords: tuple[str, ...] = tuple(keyword_rules)
        self._keyword_rules = [tuple(keyword_rules[k]) for k in self.keywords]
        self._keyword_set: Any = None
        if self.keywords:
            self._keyword_set = re2.Set.SearchSet()
            for keyword in self.keywords:
                self._keyword_set.Add(re2.escape(keyword))
            self._keyword_set.Compile()
        #: Every rule has keywords (none runs on every text) and JSON writes each keyword as
        #: it is: then a text in which no keyword occurs has no finding, and a search for the
        #: keywords in a record's encoding answers for every string in it at once
        #: (`pte._core._redaction.Redactor.canonical_if_clean`).
        self.keyword_gated = not self._always and all(json_plain(k) for k in self.keywords)

    @classmethod
    def from_files(cls, paths: Sequence[str | os.PathLike[str]], *, eager: bool = True) -> SecretRules:
        """Rules from gitleaks-format TOML files, in order. A file's global ``[allowlist]``
        applies to that file's rules. Raises ValueError on a file that cannot be loaded or
        (with `eager`, the default) holds a regex RE2 refuses."""
        rules: list[SecretRule] = []
        for path in paths:
            source = os.fspath(path)
            try:
                # A FIFO or device named by $PTE_SECRET_RULES would hang or exhaust every command.
                document = tomllib.loads(read_bounded_text(source, "secret rules file"))
            except FileRefused as exc:
                raise ValueError(f"cannot load secret rules: {exc}") from None
            except tomllib.TOMLDecodeError as exc:
                raise ValueError(f"cannot load secret rules {source!r}: {exc}") from None
            shared: list[_Allow] = []
            for key in ("allowlist", "allowlists"):
                entries = document.get(key) or ()
                for entry in [entries] if isinstance(entries, Mapping) else entries:
                    found = _allow(entry, f"{source}: {key}", eager=eager)
                    if found is not None:
                        shared.append(found)
            for entry in document.get("rules") or ():
                rule = SecretRule.from_toml(entry, source, shared=shared, eager=eager)
                if rule is not None:
                    rules.append(rule)
        return cls(rules)

    @classmethod
    def from_patterns(cls, patterns: Iterable[str], *, prefix: str = "pattern") -> SecretRules:
        """One rule per RE2 regex (no keywords: each runs on every text)."""
        return cls(
            SecretRule(f"{prefix}-{i}", "", _Lazy(p, f"{prefix} {i}", eager=True), 0, 0.0, (), ())
            for i, p in enumerate(patterns)
        )

    @staticmethod
    @cache
    def default() -> SecretRules:
        """The rule files PTE ships (`default_rule_files`), loaded once per process.

        Their regexes compile on first use (tests/core/test_secrets_corpus.py compiles them all).
        """
        return SecretRules.from_files(default_rule_files(), eager=False)

    def __add__(self, other: SecretRules) -> SecretRules:
        return SecretRules((*self.rules, *other.rules))

    def __len__(self) -> int:
        return len(self.rules)

    def candidates(self, text: str) -> list[SecretRule]:
        """The rules whose keywords occur in `text` (and the rules without keywords)."""
        chosen = set(self._always)
        if self._keyword_set is not None:
            hits = self._keyword_set.Match(text.lower())
            for hit in hits or ():
                chosen.update(self._keyword_rules[hit])
        return [self.rules[i] for i in sorted(chosen)]

    def spans(self, text: str) -> list[tuple[int, int]]:
        """Sorted, merged ``(start, end)`` spans of `text` that hold secrets."""
        found: list[tuple[int, int]] = []
        seen: set[tuple[int, int]] = set()
        # ASCII text is searched as bytes: the same offsets, without the per-match work of
        # mapping UTF-8 offsets back to characters.
        subject: str | bytes = text.encode("ascii") if text.isascii() else text
        for rule in self.candidates(text):
            for match in rule.regex.finditer(subject):
                start, end = rule.secret_span(match)
                if end <= start or (start, end) in seen:
                    continue  # nothing, or already found by another rule
                secret = text[start:end]
                if rule.entropy and shannon_entropy(secret) <= rule.entropy:
                    continue
                if self._allowed(rule, text, secret, match):
                    continue
                found.append((start, end))
                seen.add((start, end))
        if not found:
            return found
        found.sort()
        merged = [found[0]]
        for start, end in found[1:]:
            last_start, last_end = merged[-1]
            if start <= last_end:
                merged[-1] = (last_start, max(last_end, end))
            else:
                merged.append((start, end))
        return merged

    def _allowed(self, rule: SecretRule, text: str, secret: str, match: Any) -> bool:
        allowlists = rule.allowlists
        if not allowlists:
            return False
        m_start, m_end = match.span()
        whole = text[m_start:m_end]
        line = ""
        if any(a.target == "line" for a in allowlists):
            low = max(0, m_start - _LINE_WINDOW)
            high = min(len(text), m_end + _LINE_WINDOW)
            cut = text.rfind("\n", low, m_start)
            begin = cut + 1 if cut >= 0 else low
            cut = text.find("\n", m_end, high)
            line = text[begin : cut if cut >= 0 else high]
        return any(a.allows(secret, whole, line) for a in allowlists)
