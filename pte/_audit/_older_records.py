"""The one reader of records as an earlier pte wrote them: a record in, today's shape out.

A log is kept for years; the code that reads it changes. Each time pte added a field to a
record, a record written before has no such field, and what its absence means is fixed: the
behaviour of the pte that wrote it (a run recorded before repair existed never repaired). That
meaning lives here, once, as a table per record part (`ADDED`): the field, what a record
without it meant, and the commit and feature that added it. Readers of a run's meaning
(replay's and resume's engine config, policy, binding and catalogue) read
`current_run_started` and never test for a missing field themselves;
tests/audit/test_older_records.py fails if a note about older logs, or a test for a field a
later pte added, appears outside this module.

Upgrading only adds what a record lacks, with the meaning it had: it never changes a field
that is there, and never adds authority (an approval, an endorsement, a signature, a key or a
deployment binding a record did not carry). Replay still compares the records as recorded
(the upgraded copy is for reading, never for comparing), and verification reads the bytes.

Format versions (docs/audit-format.md, "Reading older records"):

- format 1 (before 285f59f, #14): no ``format`` member; the catalogue and policy inline, its
  canonical JSON is Python's (`pte._core.canonical_json_v1`), which its chain and its
  approvals' catalogue fingerprints were hashed with.
- format 2 (``"format": "pte-audit/2"``, 285f59f): RFC 8785, and ``run_started`` adds
  `FORMAT_2_ADDED`. Within format 2, fields were added by feature (`ADDED`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

__all__ = [
    "ADDED",
    "FORMAT_2_ADDED",
    "AddedField",
    "current_config",
    "current_policy",
    "current_run_started",
    "current_tool_entry",
    "record_format",
    "stock_selection_undeclared",
]


@dataclass(frozen=True)
class AddedField:
    """A field a later pte added to a record: what a record without it meant, and who added it."""

    #: Where it sits: ``run_started``, ``run_started.config``, ``run_started.config.limits``,
    #: ``run_started.config.policy`` or ``run_started.tools[]``.
    part: str
    name: str
    #: The value that states what a record without the field meant.
    meant: Any
    #: The commit (on main) and the feature that added the field.
    added_by: str


ADDED: tuple[AddedField, ...] = (
    AddedField("run_started.tools[]", "code_sha256", "", "8d226da: tools' code hashes (trust boundary)"),
    # A tool's describe() writes these only where they differ from what their absence means.
    AddedField("run_started.tools[]", "retries", 0, "960eca4: retries (the executor redesign)"),
    AddedField("run_started.tools[]", "backoff_s", 0.1, "960eca4: retries (the executor redesign)"),
    AddedField("run_started.tools[]", "isolation", "thread", "960eca4: isolation (the executor redesign)"),
    AddedField("run_started.tools[]", "is_async", False, "960eca4: async tools (the executor redesign)"),
    AddedField("run_started.tools[]", "idempotency_key", None, "bebd8a4: idempotency keys (#12)"),
    AddedField("run_started.tools[]", "read_effects", False, "0c1f134: sinks on reads"),
    AddedField("run_started.tools[]", "third_party_text", (), "0c1f134: labels survive storage"),
    AddedField("run_started.config.policy", "default", "open", "8d226da: policy modes (the guarded default)"),
    AddedField("run_started.config.limits", "max_values", None, "6ec5301: the value cap (#10)"),
    AddedField("run_started.config", "endorsement", False, "f16eab0: endorsements (a run that may pause)"),
    AddedField(
        "run_started.config",
        "planner_data",
        "shown",
        "b41399c: planners see handles (earlier planners were shown the data)",
    ),
    AddedField(
        "run_started.config",
        "data_budget",
        None,
        "b41399c: the data budget (earlier blocks were clipped at 4,000 characters)",
    ),
    AddedField("run_started.config", "repair", False, "519be35: repair (earlier runs never repaired)"),
    AddedField("run_started.config", "specialists", (), "4e9742c: specialists (earlier: none)"),
    AddedField("run_started", "deployment", None, "8b84225: runs bound to their deployment (#33)"),
    # How a run's steps overlapped (#33); a run that records neither ran with pte.Engine's
    # defaults of the time, which a resume given nothing used (8 at once, writes beside others).
    AddedField("run_started.config", "max_concurrency", 8, "#33: a resume runs as its run ran"),
    AddedField("run_started.config", "serial_writes", False, "#33: a resume runs as its run ran"),
)

#: What a format 2 ``run_started`` adds to format 1 (285f59f, #14).
FORMAT_2_ADDED: tuple[str, ...] = ("format", "pte_version", "catalogue", "policy", "prompts", "stored")

#: Code hashes of the stock shaping operations as recorded before they declared a selection
#: (65ff103): such a recorded tool is labelled by the selection the operation declares today,
#: as the run was checked (`pte._policy._shaping_labels`). A recorded tool cannot be given the
#: declaration itself: it would change the catalogue fingerprint its approvals bound.
_SHAPING_BEFORE_SELECTIONS: Mapping[str, str] = MappingProxyType(
    {
        "pluck": "8dd7c17d156c5b23dde5a2fc3e95064353ab6b73008bc113baae33da72d533c6",
        "pluck_numbers": "d59427d6a656b7aacf267ff3b6060cf8d946ab84a34cf90f2e02792bfe592df9",
        "pluck_text": "3d5cee273f7ef2c72a4cc263947d0d3eb73b94b0d20a23e847462f273ef7dbf4",
        "pick": "777926c1b5a9300957219c8a0cb885f83f6b59ffe70a66435ede7945bbc9dd99",
        "filter_records": "2a33e6930e05c304e9cf2ddba719cb45ff3b60e065e0403badfb5665c7983208",
        "sort_records": "66146481c3d3c360e9833ed7ee1966fb83352be26eca631458f11cb084dda50f",
        "take": "4e93dbd504fa79224c8526a9e59b67306477ac7cf3631f2b5cb4278259c8524a",
        "first": "224094607319afe375fe76aec3619bcfdbc919cbc3e99c00cf9eb170df0c1090",
        "count": "296c71425bdfc52be02c1c04f9a6b0dc0f5cd27081436f437c219b99b3dfeb23",
        "sum_field": "d069efa8c4c0b44bf2b3a456e2dc438369cb3f85c49e07882f6d1c4230941a47",
        "group_sum": "c4981636cfbd15192cf7b2cc06edf6ceef1d4fc77f0793cd13d1bc19d6b3796d",
    }
)


def record_format(first: Mapping[str, Any]) -> int:
    """The format a log's first record says it is in: 1 when it names none, else 2."""
    return 2 if "format" in first else 1


def stock_selection_undeclared(name: Any, code_sha256: Any) -> bool:
    """Whether a recorded tool is a stock shaping operation recorded before selections were
    declared (its name and that time's code hash), whose selection is the one declared today."""
    return isinstance(name, str) and _SHAPING_BEFORE_SELECTIONS.get(name) == code_sha256


def _with_meant(part: str, record: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(record)
    for added in ADDED:
        if added.part == part and added.name not in out:
            meant = added.meant
            out[added.name] = list(meant) if isinstance(meant, tuple) else meant
    return out


def current_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """``run_started.config`` in today's shape: every field added since, with what it meant.

    A config that recorded no limits is left without (today's defaults apply, as before); a
    recorded policy document gets its mode."""
    out = _with_meant("run_started.config", config)
    limits = out.get("limits")
    if isinstance(limits, Mapping) and limits:
        out["limits"] = _with_meant("run_started.config.limits", limits)
    if "policy" in out:
        out["policy"] = current_policy(out["policy"])
    return out


def current_policy(document: Any) -> Any:
    """A recorded policy document with its mode stated; anything else as it is (None: the run
    recorded no document; a malformed one is the policy reader's to refuse)."""
    return _with_meant("run_started.config.policy", document) if isinstance(document, Mapping) else document


def current_tool_entry(entry: Mapping[str, Any]) -> dict[str, Any]:
    """A recorded catalogue entry (a tool's ``describe()``) with every field added since."""
    return _with_meant("run_started.tools[]", entry)


def current_run_started(record: Mapping[str, Any]) -> dict[str, Any]:
    """A ``run_started`` record (as `pte._catalogue.expand_run_started` gives it: its catalogue
    as ``tools``) in today's shape, for reading: what it meant, never what it did not say.

    Idempotent; a field that is there is kept as it is (a malformed one is the reader's to
    refuse, as before); nothing is added that grants anything."""
    out = _with_meant("run_started", record)
    config = out.get("config")
    out["config"] = current_config(config if isinstance(config, Mapping) else {})
    tools = out.get("tools")
    if isinstance(tools, list):
        out["tools"] = [current_tool_entry(tool) if isinstance(tool, Mapping) else tool for tool in tools]
    return out
