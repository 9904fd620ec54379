"""Resume: finish an interrupted run, acting only on a verified log and the deployment's authority."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pte._audit import AuditLog, RecordSink, deployment_problem
from pte._catalogue import Registry, stored_contents
from pte._core import ApprovalMissing, FailedClosed, ReasonCode
from pte._execution import LiveInvoker
from pte._plan import Plan
from pte._policy import requires_approval
from pte._replay._authority import authority_of, engine_for, llm_for
from pte._replay._replayer import CheckingAuditLog, ResumingInvoker, _verified, drive_run, iter_runs
from pte._replay._run_view import RunView
from pte._run import LLMClient, RunResult

__all__ = ["check_anchors", "check_deployment", "recheck_unsigned_tail", "resume_file"]


def resume_file(
    path: str | Path,
    registry: Registry,
    *,
    llm: LLMClient | None = None,
    checks_factory: Callable[[Registry, Mapping[str, Any]], Sequence[Any]] | None = None,
    deployment: Any = None,
    max_concurrency: int | None = None,
    serial_writes: bool | None = None,
) -> RunResult:
    """Finish the last run of a log that has no `run_finished`, appending to the same log.

    The log is verified first (`LogNotIntact`). Catalogue, policy, config and approvals are
    the deployment's (`deployment`, a `pte.Deployment`: from its folder, `pte.Deployment.of`
    its parts; by default `registry` with its own guarded policy, the
    recorded engine config and no approval store, so a plan needing approval fails closed):
    the recorded prefix must be what this deployment decides, else `ReplayDivergence` and
    nothing is appended. Completed steps are not re-run; an in-flight `write` step of a
    non-idempotent tool ends the run `failed_closed(needs_review)`. Raises `FailedClosed`
    when the log holds no run or its last run is already sealed.

    `max_concurrency`, `serial_writes`: how the steps that run live run: the run's own, as its
    ``run_started`` recorded them (None); a value given may only narrow them (a smaller limit,
    serial writes turned on), a wider one is refused (`DeploymentError`). A run recorded before
    they were recorded runs as given, else with `pte.Engine`'s defaults, as it always did.
    """
    _verified(path)
    run: list[tuple[int, dict[str, Any]]] = []
    stored: dict[str, Any] = {}  # contents earlier runs stored (format 2 stores each once per log)
    for each in iter_runs(path):
        run = each  # the last run: only it can be unfinished
        stored.update(stored_contents(record for _, record in each))
    if not run:
        raise FailedClosed(ReasonCode.NEEDS_REVIEW, f"{path} holds no run to resume")
    records = [r for _, r in run]
    if RunView.fold(str(records[0].get("run_id")), records).finished is not None:
        raise FailedClosed(
            ReasonCode.NEEDS_REVIEW, f"the last run in {path} is already finished; nothing to resume"
        )
    parts = {**authority_of(deployment), "registry": registry}
    gate = parts.get("approvals")
    run_id = str(records[0]["run_id"])
    check_deployment(records, parts.get("fingerprint"), str(path))
    anchored, unsigned_after = check_anchors(parts.get("anchors"), run_id, records, str(path))
    live_invoker = LiveInvoker()  # the approval gate is the run's call gate's (pte._run._call_gate)
    if unsigned_after is not None:
        recheck_unsigned_tail(records, registry, unsigned_after, str(path))
    invoker = ResumingInvoker(records, live_invoker)
    engine = engine_for(
        records,
        deployment,
        llm_for(records, llm, parts, stored=stored),
        invoker,
        checks_factory,
        registry=registry,
        gate=gate or _no_gate(registry),
        stored=stored,
        max_concurrency=max_concurrency,
        serial_writes=serial_writes,
    )
    with AuditLog(path, run_id=run_id, repair_partial_tail=True, anchors=parts.get("anchors")) as forward:
        forward.anchored = anchored
        audit = CheckingAuditLog(run, run_id=run_id, forward=forward)
        return drive_run(engine, records[0], audit)


def check_anchors(
    anchors: Any, run_id: str, records: list[dict[str, Any]], where: str
) -> tuple[int, int | None]:
    """(anchor count, seq after which records are unsigned) for resuming `run_id`; (0, None)
    without a deployment key. `FailedClosed(needs_review)` when the run falls short of its
    anchors or its anchored records were rewritten (`pte._audit._anchors`), when the
    deployment never anchored its start, or when a plan (or a model's answer a plan is
    made from) is recorded after its last anchor: a run signs its start and each plan before
    any tool runs, so an unsigned plan never ran anything, and may have been swapped."""
    from pte._core import AnchorError

    if anchors is None:
        return 0, None
    try:
        count, last = anchors.check(run_id, records)
    except AnchorError as exc:
        raise FailedClosed(ReasonCode.NEEDS_REVIEW, f"{where}: {exc}; not resumed") from None
    if count == 0:
        raise FailedClosed(
            ReasonCode.NEEDS_REVIEW,
            f"{where}: the deployment never anchored run {run_id}'s start (a run signs its start "
            "and plan before any tool runs): it was made up or rewritten by a writer of the log or "
            "store, started without the deployment key, or crashed before its first record was "
            "signed; not resumed (start it again)",
        )
    assert last is not None
    for record in records:
        seq = record.get("seq")
        if not isinstance(seq, int) or seq <= last or record.get("run_id") != run_id:
            continue
        kind = record.get("type")
        if kind == "plan_accepted" or (kind == "llm_call" and record.get("role") != "finalizer"):
            what = "plan" if kind == "plan_accepted" else f"{record.get('role')} model answer"
            raise FailedClosed(
                ReasonCode.NEEDS_REVIEW,
                f"{where}: run {run_id}'s {what} (record {seq}) is recorded after the run's last "
                "signed anchor: the deployment signs every plan before a tool runs, so this one "
                "never ran anything and may have been swapped by a writer of the log or store; "
                "not resumed (start it again)",
            )
    return count, last


def check_deployment(records: Sequence[Mapping[str, Any]], deployment: Any, where: str) -> None:
    """`FailedClosed(needs_review)` when the run of `records` started under another deployment
    than `deployment` (its fingerprint, or binding: `pte._audit.deployment_binding`), naming
    what differs; nothing when they agree, or either names none (`pte._audit.deployment_problem`).

    Every command that continues a run (resume of a log or a store, a worker) calls this
    before anything runs."""
    started = next((r for r in records if r.get("type") == "run_started"), None)
    if started is None:
        return
    try:
        problem = deployment_problem(started, deployment)
    except ValueError as exc:
        raise FailedClosed(ReasonCode.NEEDS_REVIEW, f"{where}: the deployment in hand: {exc}") from None
    if problem is not None:
        raise FailedClosed(ReasonCode.NEEDS_REVIEW, f"{where}: {problem}; not resumed")


def recheck_unsigned_tail(
    records: list[dict[str, Any]], registry: Registry, unsigned_after: int, where: str
) -> None:
    """Call again every read recorded after seq `unsigned_after` (no anchor vouches for it) and
    refuse (`FailedClosed(needs_review)`) when one returns something else than the log says.

    A log writer without the deployment key can edit and re-hash what follows the last anchor
    (a crash leaves such a tail: the reads since the last write). Resume does not trust it:
    before anything runs, the recorded reads are made again with their recorded arguments.
    A read whose world has changed since is refused too (fail closed: a person decides).
    """
    from pte._core import ToolError

    started: dict[str, Any] = {}
    live = LiveInvoker()
    for record in records:
        kind = record.get("type")
        if kind == "step_started":
            started[str(record.get("step_id"))] = record.get("args")
            continue
        seq = record.get("seq")
        if kind != "step_finished" or not isinstance(seq, int) or seq <= unsigned_after:
            continue
        name = record.get("tool")
        if not isinstance(name, str) or name not in registry or registry[name].effect != "read":
            continue
        spec = registry[name]
        step_id = str(record.get("step_id"))
        if spec.read_effects:  # calling it again would repeat its effects (pte._run._exposure docs)
            raise FailedClosed(
                ReasonCode.NEEDS_REVIEW,
                f"{where}: step {step_id!r} ({name}) is recorded after the run's last signed anchor and "
                "has effects, so it is not called again to check it; not resumed",
            )
        args = started.get(step_id)
        try:
            output: Any = live(spec, dict(args) if isinstance(args, dict) else {}, None)  # type: ignore[arg-type]
            spec.validate_output(output)
            now: Any = {"status": "ok", "output": output}
        except ToolError as exc:
            now = {"status": "failed", "error": exc.to_dict()}
        then = (
            {"status": "ok", "output": record.get("output")}
            if record.get("status") == "ok"
            else {"status": "failed", "error": record.get("error")}
        )
        if now != then:
            raise FailedClosed(
                ReasonCode.NEEDS_REVIEW,
                f"{where}: step {step_id!r} ({name}) is recorded after the run's last signed anchor, and "
                "calling it again returns something else than the log says: the log may have been edited "
                "and re-hashed after the deployment last signed it; not resumed",
            )


def _no_gate(registry: Registry) -> Callable[[Plan, RecordSink], None]:
    """No approval store: a plan that needs approval fails closed, whatever the log says."""

    def hook(plan: Plan, audit: RecordSink) -> None:
        needing = requires_approval(plan, registry)
        if needing:
            raise ApprovalMissing(
                f"plan {plan.hash} calls {needing}, which require an approved plan, and no approval "
                "store is configured"
            )

    return hook
