"""Reading and verifying audit logs: streaming parse, record schema, chain verification."""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable, Iterator, Mapping
from contextlib import nullcontext
from typing import Any

from pte._audit._parallel import verify_in_parts
from pte._audit._scan import WHOLE_LOG, VerifyReport, runs_left_open, scan_lines
from pte._core import AuditFormatError, canonical_loads

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
                record = canonical_loads(raw.decode("utf-8"))
            except ValueError as exc:
                raise AuditFormatError(path, number, f"not JSON: {exc}") from None
            except RecursionError:  # nesting no writer produces: refuse it, do not crash
                raise AuditFormatError(path, number, "nested too deeply to read") from None
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
# Verification
# ---------------------------------------------------------------------------------------------


def verify(
    path: str | os.PathLike[str] | Iterable[bytes],
    *,
    check_schema: bool = True,
    anchors: Collection[int] = (),
    jobs: int = 1,
) -> VerifyReport:
    """Check a whole audit log, streaming (constant memory in the number of records).

    The first record says the format: ``"format": "pte-audit/2"`` (docs/audit-format.md),
    or none for a format 1 log, which is verified by format 1's rules. For each line, in
    order: it ends with a newline (else: partial last line), it is UTF-8 JSON, it is the
    canonical form of the record it holds byte for byte (RFC 8785 in format 2; so any edited
    byte is caught even where it would not change the parsed value), the common fields are
    present and well typed, ``seq`` counts up from 0, ``prev`` is the previous line's hash,
    ``hash`` is right, the record is valid against the audit schema (unless `check_schema`
    is False) and runs are well formed: a run begins with ``run_started`` (which carries the
    log's format) and no other record starts one, a run's records are contiguous, and
    nothing of a run follows its ``run_finished``.

    Stops at the first problem. An empty file is intact but not complete. A run that never
    finished counts as complete when a later run in the file resumes it (its ``run_started``
    names it in ``resumes``); resuming under the same run_id simply continues the run. Memory
    grows with the number of runs, not of records. A missing or unreadable file raises
    OSError. `anchors`: record indexes whose hashes to report (`VerifyReport.anchors`), for
    checking checkpoints.

    `jobs`: processes to verify a large format 2 file with, each taking a contiguous part
    (pte._audit._parallel; docs/audit-format.md, "Verifying in parallel"). The report is the
    one a single process gives: the parts are joined by the same rules, and a log in which
    any part finds a problem is verified again from its start in this process, to name the
    first problem.
    """
    wanted = frozenset(anchors)
    if jobs > 1 and isinstance(path, str | os.PathLike):
        report = verify_in_parts(path, check_schema=check_schema, anchors=wanted, jobs=jobs)
        if report is not None:
            return report
    # A store (pte.stores) passes a run's lines instead of a file path.
    source = open(path, "rb") if isinstance(path, str | os.PathLike) else nullcontext(path)  # noqa: SIM115
    with source as fh:
        scan = scan_lines(fh, WHOLE_LOG, check_schema=check_schema, anchors=wanted)
    return scan.report(runs_left_open(scan.segments))
