"""Stock tool pack: deterministic text operations, so a plan can take values out of free text.

Matching, regular expressions (RE2: linear time, so untrusted text cannot stall a run),
splitting, ``Key: value`` blocks and listings, sections between headings, and small
transforms. Every tool is pure and ``provenance="derived"``: its output is as trusted as
its least trusted input, so text pulled out of an untrusted e-mail stays untrusted.

This module is loaded by file path (``pte.load_pack("text")``), so it must not
import anything from the ``tools`` directory.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import BaseModel, Field

from pte._catalogue import compile_regex, regex_group_names
from pte.catalogue import ExtendedBy, FieldName, RegexGroups, RegexPattern, tool

__all__ = [
    "extract_into",
    "join_text",
    "parse_fields",
    "regex_extract",
    "replace_text",
    "section",
    "slice_text",
    "split_text",
    "text_match",
    "transform_text",
]

#: Most matches `regex_extract` returns, and most parts `split_text` returns.
MAX_ITEMS = 10_000
#: Longest text any tool here produces, in characters.
MAX_TEXT_LENGTH = 1_000_000

# Bullets and numbering that start a listing line: "- a", "* a", "• a", "1. a", "2) a".
_BULLET_RE = re.compile(r"^\s*(?:[-*\u2022\u00b7\u2013]|\d{1,3}[.)])\s+")  # - * • · en dash, 1. 2)
_MARKDOWN_HEADING_RE = re.compile(r"^\s*(#{1,6})\s+(.*?)\s*#*\s*$")


def _fold(text: str, ignore_case: bool) -> str:
    return text.casefold() if ignore_case else text


def _check_length(length: int) -> None:
    """Refuse a result of `length` characters over the bound: called *before* it is built,
    so a short plan cannot make a tool allocate hundreds of megabytes first."""
    if length > MAX_TEXT_LENGTH:
        raise ValueError(f"the result would exceed {MAX_TEXT_LENGTH} characters")


class MatchResult(BaseModel):
    matched: bool


class MatchRecords(BaseModel):
    records: list[Annotated[dict[str, str], RegexGroups("pattern")]] = Field(
        description="'' for a group that did not take part."
    )
    count: int
    matched: bool


R = TypeVar("R", bound=dict[str, Any])


class ExtendedRecords(BaseModel, Generic[R]):
    records: list[Annotated[dict[str, Any], ExtendedBy(R, "pattern")]]
    count: int


class TextList(BaseModel):
    values: list[str]
    count: int


class TextOut(BaseModel):
    text: str


class Entry(BaseModel):
    key: str = Field(description="The text before the separator, stripped.")
    value: str = Field(description="The text after the separator on the same line, stripped.")
    lines: list[str] = Field(description="value (if not empty) and the lines below it up to the next key.")


class Fields(BaseModel):
    fields: dict[str, str] = Field(description="key -> value (the last one wins for a repeated key).")
    entries: list[Entry] = Field(description="Every key in order, with its continuation lines.")
    count: int


@tool(provenance="derived")
def text_match(
    text: str,
    value: str,
    mode: Literal["contains", "starts_with", "ends_with", "equals", "has_word"] = "contains",
    ignore_case: bool = True,
) -> MatchResult:
    """Whether `text` matches `value` by `mode` (has_word: a whole word)."""
    haystack, needle = _fold(text, ignore_case), _fold(value, ignore_case)
    if mode == "has_word":
        found = re.search(rf"(?<!\w){re.escape(needle)}(?!\w)", haystack) is not None
    else:
        tests = {
            "contains": needle in haystack,
            "starts_with": haystack.startswith(needle),
            "ends_with": haystack.endswith(needle),
            "equals": haystack == needle,
        }
        found = tests[mode]
    return MatchResult(matched=found)


@tool(provenance="derived")
def regex_extract(
    text: str,
    pattern: Annotated[str, RegexPattern()],
    ignore_case: bool = False,
    max_matches: Annotated[int, Field(ge=1, le=MAX_ITEMS)] = 100,
) -> MatchRecords:
    """The matches of `pattern`, a record each ("(?P<n>[0-9]+)" gives {"n": "42"}); no named group:
    field "match". No backreferences or lookaround.
    """
    # The same RE2 settings and group names compile used to type the records.
    regex = compile_regex(pattern, ignore_case)
    names = regex_group_names(pattern)
    records: list[dict[str, str]] = []
    for found in regex.finditer(text):
        if names == ["match"] and not regex.groupindex:
            records.append({"match": found.group(0)})
        else:
            records.append({name: found.group(name) or "" for name in names})
        if len(records) >= max_matches:
            break
    return MatchRecords(records=records, count=len(records), matched=bool(records))


@tool(provenance="derived")
def extract_into(
    records: list[R],
    field: Annotated[str, FieldName(R)],
    pattern: Annotated[str, RegexPattern()],
    ignore_case: bool = False,
    keep_unmatched: bool = False,
) -> ExtendedRecords[R]:
    """Add the named groups of an RE2 match in text `field` to each record; records without a match
    (or the field) are dropped (keep_unmatched: kept, groups "").
    """
    regex = compile_regex(pattern, ignore_case)
    names = regex_group_names(pattern)
    out: list[dict[str, Any]] = []
    for index, record in enumerate(records):
        value = record.get(field)
        if value is not None and not isinstance(value, str):
            raise ValueError(f"record {index} field {field!r} is not text: it cannot be searched")
        found = None if value is None else regex.search(value)
        if found is None and not keep_unmatched:
            continue
        if found is None:
            groups = dict.fromkeys(names, "")
        elif regex.groupindex:
            groups = {name: found.group(name) or "" for name in names}
        else:
            groups = {"match": found.group(0)}
        out.append({**record, **groups})
    return ExtendedRecords[Any](records=out, count=len(out))


@tool(provenance="derived")
def split_text(
    text: str,
    separator: str | None = None,
    strip: bool = True,
    skip_empty: bool = True,
    strip_bullets: bool = False,
) -> TextList:
    """Split `text` at `separator` (null: at line breaks); strip_bullets drops "- ", "* ", "• ",
    "1. ".
    """
    if separator == "":
        raise ValueError("separator is empty: give a separator, or null to split into lines")
    parts = text.splitlines() if separator is None else text.split(separator)
    out: list[str] = []
    for part in parts:
        if strip_bullets:
            part = _BULLET_RE.sub("", part, count=1)
        if strip:
            part = part.strip()
        if skip_empty and not part:
            continue
        out.append(part)
        if len(out) > MAX_ITEMS:
            raise ValueError(f"more than {MAX_ITEMS} parts")
    return TextList(values=out, count=len(out))


@tool(provenance="derived")
def parse_fields(text: str, separator: str = ":") -> Fields:
    """Parse "Key: value" lines: fields maps key to value; a line without the separator continues
    the entry above (entries[i].lines: its value and those lines, bullets stripped). Text before
    the first key is ignored.
    """
    if not separator:
        raise ValueError("separator is empty")
    entries: list[Entry] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        key, found, value = line.partition(separator)
        if found and key.strip() and not _BULLET_RE.match(raw):
            value = value.strip()
            entries.append(Entry(key=key.strip(), value=value, lines=[value] if value else []))
        elif entries:
            entries[-1].lines.append(_BULLET_RE.sub("", line, count=1).strip())
    return Fields(fields={e.key: e.value for e in entries}, entries=entries, count=len(entries))


def _heading(line: str) -> tuple[int, str] | None:
    """(level, title) of a heading line: markdown "## Title", or "Title:" alone on its line (level 7)."""
    markdown = _MARKDOWN_HEADING_RE.match(line)
    if markdown:
        return len(markdown[1]), markdown[2]
    stripped = line.strip()
    if stripped.endswith(":") and ":" not in stripped[:-1] and len(stripped) > 1:
        return 7, stripped[:-1].strip()
    return None


@tool(provenance="derived")
def section(text: str, heading: str, until: str | None = None) -> TextOut:
    """The lines under heading `heading` (case-insensitive: "## X" or "X:"), up to the next heading
    of its level or higher (or `until`); a missing heading is an error.
    """
    lines = text.splitlines()
    wanted = heading.strip().rstrip(":").strip().casefold()
    start = level = None
    for index, line in enumerate(lines):
        found = _heading(line)
        if found and found[1].casefold() == wanted:
            start, level = index + 1, found[0]
            break
    if start is None or level is None:
        titles = [h[1] for line in lines if (h := _heading(line))]
        raise ValueError(f"no heading {heading!r} in the text (headings: {', '.join(titles) or 'none'})")
    stop_at = until.strip().rstrip(":").strip().casefold() if until else None
    end = len(lines)
    for index in range(start, len(lines)):
        found = _heading(lines[index])
        if found is None:
            continue
        if (stop_at is not None and found[1].casefold() == stop_at) or (
            stop_at is None and found[0] <= level
        ):
            end = index
            break
    return TextOut(text="\n".join(lines[start:end]).strip("\n"))


@tool(provenance="derived")
def transform_text(text: str, op: Literal["lower", "upper", "strip", "title", "collapse_spaces"]) -> TextOut:
    """`text` with `op` applied (collapse_spaces: whitespace runs to one space, stripped)."""
    if op == "collapse_spaces":
        return TextOut(text=" ".join(text.split()))
    return TextOut(
        text={"lower": text.lower, "upper": text.upper, "strip": text.strip, "title": text.title}[op]()
    )


@tool(provenance="derived")
def replace_text(text: str, old: str, new: str, ignore_case: bool = False) -> TextOut:
    """Every occurrence of `old` (plain text) replaced by `new`."""
    if not old:
        raise ValueError("old is empty")
    if ignore_case:
        pattern = re.compile(re.escape(old), flags=re.IGNORECASE)
        # A literal matched ignoring case spans len(old) characters, like `old` itself.
        count = sum(1 for _ in pattern.finditer(text))
    else:
        pattern, count = None, text.count(old)
    _check_length(len(text) + count * (len(new) - len(old)))
    out = pattern.sub(lambda _: new, text) if pattern is not None else text.replace(old, new)
    return TextOut(text=out)


@tool(provenance="derived")
def slice_text(text: str, start: int = 0, end: int | None = None) -> TextOut:
    """text[start:end], Python slicing."""
    return TextOut(text=text[start:end])


@tool(provenance="derived")
def join_text(values: list[str], separator: str = ", ") -> TextOut:
    """`values` joined with `separator`."""
    _check_length(sum(map(len, values)) + len(separator) * max(len(values) - 1, 0))
    return TextOut(text=separator.join(values))
