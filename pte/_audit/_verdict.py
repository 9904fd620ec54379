"""One verdict on a log or a stored run, and which checks it rests on.

`pte audit verify`, the HTML report, replay and the runs of a store all judge evidence with
`judge` (and a log file with `verdict`), so they cannot tell two stories: a log that verify
calls FAILED is never shown as intact elsewhere. A verdict names each check and what it
found, because a green "ok" made without the deployment's public key promises less than
one made with it:

- ``chain``: every line canonical, chained and hashed right, runs well formed, stored
  content and signed decisions as recorded (docs/audit-format.md sections 1-7);
- ``schema``: every record valid against the record schema;
- ``sealed``: every run sealed (or resumed by a later run, or paused for a person);
- ``anchors``: every run as the deployment signed it (section "Anchors"), with its public key;
- ``checkpoint``: when one is given, the signed checkpoints hold.

A check is ``checked`` (made, and it holds), ``failed``, or ``not available`` (not made: no
key, or an earlier check failed first), always with the reason in words.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pte._audit._checkpoint import CheckpointReport
from pte._audit._scan import VerifyReport
from pte._core import AnchorError

__all__ = [
    "CHECKED",
    "FAILED",
    "NOT_AVAILABLE",
    "Check",
    "Verdict",
    "judge",
    "log_runs",
    "stored_verdict",
    "verdict",
]

CHECKED = "checked"
FAILED = "failed"
NOT_AVAILABLE = "not available"

#: What a verdict says when no deployment public key was at hand (so anchors were not checked).
NO_KEY = "no deployment public key given: a cut at the end or a consistent rewrite cannot be ruled out"

Runs = Callable[[], Iterable[Sequence[Mapping[str, Any]]]]


@dataclass(frozen=True)
class Check:
    """One check of a verdict: its name, its state (checked, failed, not available), why."""

    name: str
    state: str
    detail: str

    def to_dict(self) -> dict[str, str]:
        return {"state": self.state, "detail": self.detail}


@dataclass(frozen=True)
class Verdict:
    """What a log (or a stored run) is: ``ok``, ``incomplete`` or ``tampered``, and on which checks.

    `status` is ``tampered`` when any check failed but ``sealed``, ``incomplete`` when only
    ``sealed`` failed, else ``ok``.
    """

    status: str
    checks: tuple[Check, ...]
    report: VerifyReport
    checkpoint: CheckpointReport | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def problem(self) -> str | None:
        """The first failed check's detail; a tampering before a run merely not sealed."""
        failed = [c for c in self.checks if c.state == FAILED]
        failed.sort(key=lambda c: c.name == "sealed")
        return failed[0].detail if failed else None

    @property
    def issue(self) -> str | None:
        """The problem, as `LogNotIntact` and the CLI name it."""
        return self.problem

    def check(self, name: str) -> Check | None:
        return next((c for c in self.checks if c.name == name), None)

    def states(self) -> dict[str, str]:
        """Check name -> state (what the Node verifier's ``checks`` must equal)."""
        return {c.name: c.state for c in self.checks}

    def summary(self) -> str:
        """``chain checked, schema checked, sealed checked, anchors not available``."""
        return ", ".join(f"{c.name} {c.state}" for c in self.checks)

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "ok": self.ok,
            "problem": self.problem,
            "checks": {c.name: c.to_dict() for c in self.checks},
        }


def _chain_checks(report: VerifyReport, *, schema: bool) -> list[Check]:
    records = f"{report.records} record(s), {report.runs} run(s)"
    issue = report.issue
    if report.intact or issue is None:
        chain = Check("chain", CHECKED, f"{records}: canonical, chained and hashed right")
        if not schema:
            return [chain, Check("schema", NOT_AVAILABLE, "the record schema was not checked")]
        return [chain, Check("schema", CHECKED, "every record valid against the audit record schema")]
    if issue.message.startswith("schema"):
        return [
            Check("chain", NOT_AVAILABLE, f"checked up to {issue}, not past it"),
            Check("schema", FAILED, str(issue)),
        ]
    return [
        Check("chain", FAILED, str(issue)),
        Check("schema", NOT_AVAILABLE, f"not checked past {issue}"),
    ]


def _sealed_check(report: VerifyReport, waiting: bool) -> Check:
    if not report.intact:
        return Check("sealed", NOT_AVAILABLE, "not checked: the records do not verify")
    if report.complete:
        return Check("sealed", CHECKED, "every run sealed (or resumed by a later run)")
    if waiting:
        return Check("sealed", CHECKED, "paused: waiting for a person's decision, not sealed yet")
    return Check("sealed", FAILED, str(report.issue) if report.issue else "a run is not sealed")


def _anchor_check(report: VerifyReport, anchors: Any, runs: Runs) -> Check:
    from pte._audit._anchors import run_problem

    if anchors is None:
        return Check("anchors", NOT_AVAILABLE, NO_KEY)
    if not report.intact:
        return Check("anchors", NOT_AVAILABLE, "not checked: the records do not verify")
    counted = signed = 0
    try:
        for records in runs():
            if not records:
                continue
            run_id = str(records[0].get("run_id"))
            problem = run_problem(anchors, run_id, records)
            count = anchors.check(run_id, records)[0] if problem is None else 0
            if problem is None and count == 0 and records[0].get("deployment") is not None:
                # A bound run is anchored as it starts (docs/audit-format.md, "Anchors").
                problem = (
                    f"run {run_id} names a deployment but was never anchored: its start was never "
                    "signed (made up, or rewritten, without the deployment key)"
                )
            if problem is not None:
                return Check("anchors", FAILED, problem)
            counted += 1
            signed += count
    except AnchorError as exc:  # a damaged anchors file vouches for nothing
        return Check("anchors", FAILED, str(exc))
    return Check(
        "anchors",
        CHECKED,
        f"{counted} run(s) as the deployment signed them ({signed} anchor(s)); "
        "records after a run's last anchor are covered by the chain only",
    )


def _checkpoint_check(checkpoint: CheckpointReport) -> Check:
    if checkpoint.ok:
        return Check(
            "checkpoint",
            CHECKED,
            f"{checkpoint.checked} signed checkpoint(s) hold, covering {checkpoint.covered} record(s)",
        )
    return Check("checkpoint", FAILED, checkpoint.problem or "a checkpoint does not hold")


def judge(
    report: VerifyReport,
    runs: Runs,
    *,
    anchors: Any = None,
    checkpoint: CheckpointReport | None = None,
    waiting: bool = False,
    schema: bool = True,
) -> Verdict:
    """The verdict on verified records: `report` (from `verify`, or a store's), the runs they
    hold (`runs()`: each run's records as stored, read only when anchors are checked), the
    deployment's `anchors` (`pte._audit._anchors.Anchors`, or None: no public key at hand) and
    a `checkpoint` report. `waiting`: the run is paused for a person (a store run), which
    counts as sealed so far."""
    checks = _chain_checks(report, schema=schema)
    checks.append(_sealed_check(report, waiting))
    checks.append(_anchor_check(report, anchors, runs))
    if checkpoint is not None:
        checks.append(_checkpoint_check(checkpoint))
    failed = {c.name for c in checks if c.state == FAILED}
    status = "tampered" if failed - {"sealed"} else "incomplete" if failed else "ok"
    return Verdict(status, tuple(checks), report, checkpoint)


def log_runs(path: str | os.PathLike[str]) -> Iterator[list[dict[str, Any]]]:
    """The runs of a log file, one at a time, each as its contiguous records."""
    from pte._audit._verify import iter_records

    current: list[dict[str, Any]] = []
    for _, record in iter_records(path, skip_partial_tail=True):
        if current and record.get("run_id") != current[0].get("run_id"):
            yield current
            current = []
        current.append(record)
    if current:
        yield current


def verdict(
    path: str | os.PathLike[str],
    *,
    anchors: Any = None,
    checkpoint: str | os.PathLike[str] | None = None,
    public_key: Any = None,
    jobs: int = 1,
) -> Verdict:
    """The verdict on a log file: `verify` (with the signed `checkpoint` file and its
    `public_key`, an Ed25519 public key, when given) and the deployment's `anchors`."""
    from pte._audit._checkpoint import verify_checkpoints
    from pte._audit._verify import verify

    cp_report = None
    if checkpoint is not None:
        if public_key is None:
            raise ValueError("a checkpoint needs the public key to check it")
        cp_report = verify_checkpoints(path, checkpoint, public_key, jobs=jobs)
        report = cp_report.log
    else:
        report = verify(path, jobs=jobs)
    return judge(report, lambda: log_runs(path), anchors=anchors, checkpoint=cp_report)


def stored_verdict(store: Any, run_id: str, *, anchors: Any = None) -> Verdict:
    """The verdict on one run of a run store (`pte.stores`): its chain as stored, the database's
    own check of it when the store has one, a pause for a person counted as sealed so far,
    and the deployment's `anchors`."""
    report: VerifyReport = store.verify(run_id)
    in_database = getattr(store, "verify_in_database", None)
    server = in_database(run_id) if in_database is not None and report.intact else None
    info = store.run(run_id)
    # A run paused for a person (``awaiting_approval``, ``awaiting_endorsement``) is not sealed yet.
    waiting = info is not None and str(info.status).startswith("awaiting_")
    found = judge(report, lambda: [store.records(run_id)], anchors=anchors, waiting=waiting)
    if server is None:
        return found
    # The rows as the database holds them break the chain their records claim.
    checks = tuple(
        Check("chain", FAILED, f"in the database: {server}") if c.name == "chain" else c for c in found.checks
    )
    return Verdict("tampered", checks, report)
