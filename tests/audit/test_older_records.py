"""The one reader of older records (#35): what it adds, that it adds nothing else, and that it is
the only place that reads a record's missing field as an earlier pte's meaning.

`current_run_started` turns a ``run_started`` as any earlier pte wrote it into today's shape. It
must be idempotent, keep every field a record has as it is, add only the fields its table
(`ADDED`) names with the meaning they name, and never add authority: no approval, endorsement,
signature, key or deployment binding a record did not carry. And the engine's config must read
a record the way its writer meant it: what `EngineConfig.to_dict` leaves out, the reader puts
back (a config round-trips).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

# private: the reader's table and functions, white-box (the area's own test)
from pte._audit._older_records import ADDED, FORMAT_2_ADDED, current_run_started, record_format

# private: the modules the recorded prompts hash covers (their notes cannot be edited)
from pte._catalogue import PROMPT_MODULES
from pte.engine import EngineConfig
from pte.plan import Limits

REPO = Path(__file__).resolve().parents[2]
SAMPLES = sorted(
    [
        *(REPO / "audit_samples").glob("*.jsonl"),
        *(REPO / "tests" / "data").glob("audit_v1_*.jsonl"),
        *(REPO / "tests" / "data" / "older_pte").glob("*.jsonl"),
    ]
)
#: The first record of every sample of every format: format 1, main 5aa60c6's, today's.
STARTED = [json.loads(p.read_text(encoding="utf-8").splitlines()[0]) for p in SAMPLES]

#: Names that carry authority wherever they sit in a record.
AUTHORITY = re.compile(r"approv|endorse|sign|key|deployment|trust", re.IGNORECASE)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=10,
)


@st.composite
def older_run_started(draw: st.DrawFn) -> dict[str, Any]:
    """A sample's run_started with some later fields taken out (as an earlier pte wrote it)
    and arbitrary fields added (as a log writer may), keeping whatever it says."""
    record: dict[str, Any] = json.loads(json.dumps(draw(st.sampled_from(STARTED))))
    config = record.setdefault("config", {})
    for added in ADDED:
        if draw(st.booleans()):
            continue
        if added.part == "run_started":
            record.pop(added.name, None)
        elif added.part == "run_started.config":
            config.pop(added.name, None)
        elif added.part == "run_started.config.limits" and isinstance(config.get("limits"), dict):
            config["limits"].pop(added.name, None)
        elif added.part == "run_started.config.policy" and isinstance(config.get("policy"), dict):
            config["policy"].pop(added.name, None)
    extra = draw(st.dictionaries(st.text(min_size=1, max_size=12), json_values, max_size=3))
    for name, value in extra.items():
        record.setdefault(name, value)
        config.setdefault(name, value)
    return record


def _leaves(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    if isinstance(value, Mapping):
        for k, v in value.items():
            yield from _leaves(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _leaves(v, (*path, i))
    else:
        yield path, value


def _part(path: tuple[Any, ...]) -> str:
    """The table's name for where a field at `path` (in a run_started) sits."""
    if len(path) == 1:
        return "run_started"
    if path[0] == "tools" and len(path) == 3:
        return "run_started.tools[]"
    if path[0] == "config":
        return ".".join(["run_started", *map(str, path[:-1])])
    return "?"


def _at(value: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        value = value[part]
    return value


@given(older_run_started())
def test_upgrading_is_idempotent_and_keeps_every_field_a_record_has(record: dict[str, Any]) -> None:
    upgraded = current_run_started(record)
    assert current_run_started(upgraded) == upgraded
    for path, value in _leaves(record):
        assert _at(upgraded, path) == value, path


@given(older_run_started())
def test_upgrading_adds_only_the_tables_fields_and_never_authority(record: dict[str, Any]) -> None:
    upgraded = current_run_started(record)
    had = dict(_leaves(record))
    table = {(a.part, a.name): a.meant for a in ADDED}
    for path, value in _leaves(upgraded):
        if path in had:
            continue
        if path == ("config",):  # a record without a config reads as an empty one
            assert value == {}
            continue
        part = _part(path)
        meant = table.get((part, path[-1]))
        assert (part, path[-1]) in table, f"{path} is not a field the reader adds"
        assert value == (list(meant) if isinstance(meant, tuple) else meant), path
        if AUTHORITY.search(str(path[-1])):
            # The only authority-named fields it adds say there is none: no binding, no pause, no key.
            assert value in (None, False), path


def test_every_sample_of_every_format_reads_to_todays_shape() -> None:
    formats = {record_format(r) for r in STARTED}
    assert formats == {1, 2}
    for record in STARTED:
        upgraded = current_run_started(record)
        config = upgraded["config"]
        assert {a.name for a in ADDED if a.part == "run_started.config"} <= config.keys()
        assert "deployment" in upgraded
        if record_format(record) == 1:
            assert FORMAT_2_ADDED[0] not in upgraded  # the reader never makes format 1 look like 2
        EngineConfig.from_dict(config)  # reads without a missing-field branch of its own


def test_a_config_from_before_b41399c_means_what_that_pte_did() -> None:
    older = json.loads((REPO / "tests" / "data" / "audit_v1_success.jsonl").read_text().splitlines()[0])
    config = EngineConfig.from_dict(older["config"])
    assert (config.repair, config.planner_data, config.data_budget, config.specialists) == (
        False,
        "shown",
        None,
        (),
    )
    assert config.limits.max_values is None  # no value cap then
    policy = current_run_started(older)["config"]["policy"]
    assert policy["default"] == older["config"]["policy"]["default"] == "guarded"  # kept as recorded


@given(
    repair=st.booleans(),
    planner_data=st.sampled_from(["handles", "shown"]),
    data_budget=st.none() | st.integers(200, 1_000_000),
    max_values=st.none() | st.integers(1, 100_000),
)
def test_what_the_config_writer_leaves_out_the_reader_puts_back(
    repair: bool, planner_data: Any, data_budget: int | None, max_values: int | None
) -> None:
    config = EngineConfig(
        repair=repair,
        planner_data=planner_data,
        data_budget=data_budget,
        limits=Limits(max_values=max_values),
    )
    assert EngineConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config


# -- the reader is the only one ------------------------------------------------------------------

#: A note that a record written by an earlier pte lacks something, or a branch on that.
NOTE = re.compile(
    r"(recorded|written|logs?) (from )?before [^.;]{0,60}(existed|were (bound|declared|recorded))"
    r"|older (pte|logs?)\b|earlier pte",
    re.IGNORECASE,
)
#: A membership test of a field some pte added to run_started, on something other than a JSON
#: Schema (names as generic as ``default``, ``catalogue`` or ``policy`` mean other things too).
ADDED_NAMES = sorted(({a.name for a in ADDED} | set(FORMAT_2_ADDED)) - {"default", "catalogue", "policy"})
MEMBERSHIP = re.compile('"(' + "|".join(ADDED_NAMES) + r')" (not )?in (?!schema\b|node\b)')
#: Where older records may be spoken of, and why.
ALLOWED = {
    "pte/_audit/_older_records.py": "the reader itself",
    "pte/_replay/_prior_prompts.py": "replay's half: which earlier prompts it cannot compare (a table)",
    # Every edit to a prompt module changes the prompts hash every log records (house rules), so
    # their notes stay: they describe the 4,000-character rendering a config without a budget
    # selects (data_budget None), not a branch on a record.
    **{
        name.replace(".", "/") + ".py": "prompt text: editing it changes the recorded prompts hash"
        for name in PROMPT_MODULES
    },
}


def _sources() -> Iterator[tuple[str, str]]:
    for path in sorted((REPO / "pte").rglob("*.py")):
        name = path.relative_to(REPO).as_posix()
        if name.startswith("pte/testing/") or name in ALLOWED:
            continue
        yield name, path.read_text(encoding="utf-8")


def test_no_module_outside_the_reader_notes_or_branches_on_what_older_records_lack() -> None:
    found = [
        f"{name}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)!r}"
        for name, text in _sources()
        for pattern in (NOTE, MEMBERSHIP)
        for m in pattern.finditer(text)
    ]
    assert not found, "read older records through pte._audit._older_records:\n" + "\n".join(found)


def test_the_check_finds_the_notes_it_is_for() -> None:
    for note in (
        "# A run recorded before repair existed never repaired: its replay must not either.",
        "A log written before policy modes existed recorded an open policy.",
        "Tools from audit logs written before selections were declared keep their labelling",
        "(a run recorded before runs were bound, or a caller",
        "what logs recorded before the budget existed show",
        "a log recorded by an earlier pte names that version's hash",
    ):
        assert NOTE.search(note), note
    assert MEMBERSHIP.search('specialists=f(data["specialists"]) if "specialists" in data else ()')
    assert MEMBERSHIP.search('canonical_json if "format" in first else canonical_json_v1')
    assert not MEMBERSHIP.search('if "format" in schema:')
