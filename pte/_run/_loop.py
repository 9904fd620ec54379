"""The run loop: the one owner of a run, its transitions, and the order of its run-level records.

A `RunLoop` holds one run's state (`RunState`) and an explicit phase, and `tick` takes one
named transition at a time (as LangGraph's ``PregelLoop.tick()`` does)::

    start ─► plan ─────────────┐          (mode run: the planner; mode plan: then seal)
    start ─► compile ──────────┤          (mode execute: a person's plan, no model)
                               ▼
                ┌──────────► execute ──► finalize ──► seal
                │               │
                │               ├─ the plan hands values on ─► stage ──┐
                │               └─ a step failed ─────────────► replan ─┤
                └───────────────────────────────────────────────────────┘

Every plan is had the same way inside ``plan``, ``stage`` and ``replan``: ask the model,
compile (a coordinator's plan asks its specialists first, pte._run._delegation), repair once if
the rejection is fixable (pte._run._repair), accept, and approve (the approval gate and the
``before_execute`` hooks) before anything runs; endorsements are asked for at the calls that
need them, during ``execute``. Any `FailedClosed` on the way seals the run
``failed_closed(reason)`` and nothing runs after it.

The loop is the one holder of a run's `RunRecords` (pte._run._run_records, the one module that
builds run-level records): the transitions here decide *when* each is written, and since
replay re-runs this code and compares record by record, the order of those calls *is* the log
format. The executor writes the step records, the approval and endorsement gates their own;
stages, repair, delegation, exposure and acceptance are functions that return decisions (what
a record says) and never call back.
"""

from __future__ import annotations

from typing import Any, Literal

import pte._run._prompts as prompts
from pte._audit import RecordSink
from pte._catalogue import run_started_fields
from pte._core import (
    AuditWriteError,
    ConditionNotMet,
    FailedClosed,
    PlanRejected,
    ReasonCode,
    get_logger,
    is_terminal,
)
from pte._execution import StepResult, is_element, note_completed
from pte._plan import Plan, plan_schema
from pte._policy import PolicyCheck
from pte._run._acceptance import accept, compile_checked
from pte._run._call_gate import RunCallGate
from pte._run._delegation import AskSpecialist, CompileText, RepairSpecialist, compile_delegating
from pte._run._ending import (
    count_autonomy,
    render_result,
    result_value,
    stop_if_effect_unknown,
)
from pte._run._exposure import Shown, catalogue_exposed, literal_of
from pte._run._finalizer_view import finalizer_view
from pte._run._llm import LLMResponse
from pte._run._model_call import call_model
from pte._run._otel import RunTracer, TracedAudit
from pte._run._repair import may_repair, repair_failed, repair_prompt
from pte._run._run_records import RunRecords
from pte._run._setup import RunSetup, started_config
from pte._run._stages import replan_handoff, stage_handoff
from pte._run._state import PlanOrigin, RunResult, RunState, RunStatus

__all__ = ["Phase", "RunLoop", "RunMode"]

#: run: plan with the model, execute, stage/replan, finalize; execute: a given plan, no model;
#: plan: compile only (approval is checked when the plan is executed).
RunMode = Literal["run", "execute", "plan"]
#: Where a run is: the next transition `RunLoop.tick` takes; ``sealed`` once ``run_finished``.
Phase = Literal["plan", "compile", "execute", "stage", "replan", "finalize", "seal", "sealed"]


class RunLoop:
    """One run, from ``run_started`` to ``run_finished`` (see the module docstring)."""

    def __init__(
        self,
        setup: RunSetup,
        audit: RecordSink,
        mode: RunMode,
        *,
        request: str | None = None,
        plan_text: str | None = None,
    ) -> None:
        self.setup = setup
        self.config = setup.planning.config
        self.mode = mode
        self.request = request
        self.plan_text = plan_text
        self.state = RunState(audit, RunResult(run_id=audit.run_id, status="failed_closed"))
        #: Every run-level record, written in the order this loop's transitions call it.
        self.records = RunRecords(audit)
        self.phase: Phase = "compile" if mode == "execute" else "plan"
        #: The plan being executed, and the failure a replan answers.
        self.plan: Plan | None = None
        self.failure: StepResult | None = None
        self.stage = 1
        self.log = get_logger(run_id=audit.run_id)

    # -- driving ----------------------------------------------------------------------------------

    def run_to_end(self) -> RunResult:
        """Start the run and take transitions until it is sealed; a `FailedClosed` seals it."""
        try:
            self._start()
            while self.tick():
                pass
            return self.state.result
        except ConditionNotMet as stop:  # pte._plan._control: a require step's condition was false
            if self.mode == "plan":  # nothing runs in plan mode: not a condition of this run
                raise
            return self._seal("condition_not_met", message=stop.message)
        except FailedClosed as stop:
            return self._seal("failed_closed", stop)
        except KeyboardInterrupt:
            # The operator's Ctrl-C: sealed failed_closed(interrupted) on its way out.
            self._seal(
                "failed_closed", FailedClosed(ReasonCode.INTERRUPTED, "interrupted by the operator (SIGINT)")
            )
            raise

    def tick(self) -> bool:
        """Take the transition `phase` names; False once the run is sealed."""
        phase, state = self.phase, self.state
        if phase == "plan":
            messages = prompts.planner_messages(
                self.request or "", self.setup.planning.planner_registry, self.setup.planning.policy
            )
            # Plan mode compiles only: approval is checked when the plan is executed (`pte approve`).
            self.plan = self._plan("planner", messages, gate=self.mode != "plan")
            self.phase = "seal" if self.mode == "plan" else "execute"
        elif phase == "compile":
            plan = self._accept("file", self.plan_text or "")
            if plan.continues:  # pte._run._stages: a next stage needs a planner; execute has none
                raise FailedClosed(
                    ReasonCode.LLM_ERROR,
                    "the plan hands values to a next planning stage ('continue'), which needs a planner: "
                    "use pte run",
                )
            self.plan, self.phase = plan, "execute"
        elif phase == "execute":
            assert self.plan is not None
            failure = self._execute(self.plan)
            if failure is None:
                self.phase = "stage" if self.plan.continues and self.mode == "run" else "finalize"
            elif self.mode == "execute":
                # The same decision as a run makes before a replan: a write whose effect is
                # unknown ends needs_review whichever command ran it.
                stop_if_effect_unknown(failure, self.setup.registry)
                raise FailedClosed(
                    ReasonCode.STEP_FAILED,
                    f"step {failure.step_id!r} ({failure.tool}) failed: {failure.error}",
                )
            else:
                self.failure, self.phase = failure, "replan"
        elif phase == "stage":
            assert self.plan is not None
            self.stage += 1
            self.plan, self.phase = self._next_stage(self.plan, self.stage), "execute"
        elif phase == "replan":
            assert self.plan is not None and self.failure is not None
            self.plan, self.phase = self._replan(self.plan, self.failure), "execute"
        elif phase == "finalize":
            assert self.plan is not None
            state.result.result = result_value(self.plan, state.result.outputs)
            state.result.answer = (
                render_result(state.result.result) if self.mode == "execute" else self._finalize()
            )
            self._seal("succeeded")
        elif phase == "seal":
            self._seal("succeeded")
        return self.phase != "sealed"

    # -- the transitions ----------------------------------------------------------------------

    def _start(self) -> None:
        setup, state, mode = self.setup, self.state, self.mode
        registry = setup.registry
        config = started_config(setup, mode, self.plan_text)
        audit = state.audit
        state.tracer = RunTracer(
            audit.run_id,
            mode,
            setup.tracer_provider,
            audit.redactor,
            link=audit.origin_trace,  # resume: the crashed run's span
        )
        # Nested steps (procedure calls, delegations) carry their path on their spans.
        state.tracer.procedures = bool(registry.procedures or self.config.specialists)
        # Untouched third-party text in the catalogue (pte.importers): every planner reads it.
        state.shown_untrusted = mode != "execute" and catalogue_exposed(registry)
        # Format 2: fingerprints per tool; the catalogue and policy by hash, stored once per log.
        fields = run_started_fields(
            registry, setup.planning.policy.to_document(), audit.redactor.redact_content
        )
        self.records.started(mode, self.request, config, fields, state.tracer.run_ids(), setup.deployment)

    def _next_stage(self, plan: Plan, stage: int) -> Plan:
        handoff = stage_handoff(self.setup.planning, self.state, self.request or "", plan, stage)
        self._show(handoff.shown)
        self.records.stage(handoff)
        return self._plan("stage", handoff.messages)

    def _replan(self, plan: Plan, failure: StepResult) -> Plan:
        state, config = self.state, self.config
        stop_if_effect_unknown(failure, self.setup.registry)
        if state.replans >= config.max_replans:
            raise FailedClosed(
                ReasonCode.REPLANS_EXHAUSTED,
                f"step {failure.step_id!r} ({failure.tool}) failed: {failure.error}; "
                f"{config.max_replans} replan(s) allowed, all used",
            )
        state.replans += 1
        self.records.replan(state.replans, failure, state.result.outputs)
        self.log.info("replan", attempt=state.replans, failed_step=failure.step_id)
        handoff = replan_handoff(self.setup.planning, state, self.request or "", plan, failure)
        state.trigger = handoff.trigger  # what decides the replan
        self._show(handoff.shown)
        return self._plan("replanner", handoff.messages)

    def _show(self, shown: Shown) -> None:
        """What a prompt showed a model, on the run for good (pte._run._exposure)."""
        self.state.shown_trusted |= shown.trusted
        self.state.shown_untrusted |= shown.untrusted

    # -- having a plan: ask, compile, repair, accept, approve -----------------------------------

    def _plan(self, role: PlanOrigin, messages: list[dict[str, str]], *, gate: bool = True) -> Plan:
        text = self._ask(role, messages)
        try:
            return self._accept(role, text, gate=gate)
        except PlanRejected as rejection:
            if not may_repair(self.config, self.state.replans, role, rejection):
                raise
            return self._repair(role, messages, text, rejection, gate=gate)

    def _repair(
        self,
        origin: PlanOrigin,
        messages: list[dict[str, str]],
        rejected_text: str,
        rejection: PlanRejected,
        *,
        gate: bool,
    ) -> Plan:
        """Ask for the rejected plan again, corrected (pte._run._repair)."""
        state = self.state
        self._record_repair(origin, rejection)
        self.log.info(
            "repair", attempt=state.replans, origin=origin, reason=rejection.reason.value, path=rejection.path
        )
        # The same rule as the policy check of the answer (`_policy_check`, pte._run._exposure).
        text = self._ask(
            "repair",
            repair_prompt(self.setup.planning, messages, rejected_text, rejection, literal_of(state)),
        )
        # Checked as the plan it corrects: what decided that one (a stage's requires and failures)
        # decides this one too (`_policy_check` keeps state.deciding for a repair).
        try:
            return self._accept("repair", text, gate=gate)
        except PlanRejected as again:
            failed = repair_failed(rejection, again)
            if failed is None:
                raise
            raise failed from None

    def _ask(self, role: PlanOrigin, messages: list[dict[str, str]]) -> str:
        """The planner's answer text; a cut-off answer is a rejection (invalid_json), recorded."""
        response = self._call_llm(role, messages, plan_schema())
        if response.finish_reason == "length":
            # A cut-off answer is never completed or repaired into a plan.
            rejection = PlanRejected(
                ReasonCode.INVALID_JSON, "the answer was cut off at the token limit (finish_reason=length)"
            )
            self.records.rejected(role, response.text, rejection)
            raise rejection
        return response.text

    def _call_llm(self, role: str, messages: list[dict[str, str]], schema: Any) -> LLMResponse:
        llm, state = self.setup.llm, self.state
        if llm is None:
            raise FailedClosed(ReasonCode.LLM_ERROR, f"no LLM client is configured for the {role}")
        state.result.llm_calls += 1
        call = call_model(llm, state.tracer, role, messages, schema)
        self.records.llm_call(call)
        if call.answer is None:
            assert call.failure is not None
            raise FailedClosed(call.failure.reason, f"{role} LLM call failed: {call.failure.message}")
        for key, value in call.answer.usage.items():
            state.result.usage[key] = state.result.usage.get(key, 0) + int(value)
        return call.answer

    def _compile(self, origin: PlanOrigin, text: str) -> tuple[Plan, PolicyCheck]:
        """Compile `text` with every check a plan from `origin` gets (no record written)."""
        endorsable = self.setup.endorsement is not None
        return compile_checked(
            self.setup.planning, self.state, origin, text, self.setup.checks, endorsable=endorsable
        )

    def _compile_delegating(self, origin: PlanOrigin, text: str) -> tuple[Plan, PolicyCheck]:
        """A coordinator's plan (pte._run._delegation): do what the delegation asks, in order."""
        steps = compile_delegating(self.setup.planning, self.state, origin, text)
        answer: Any = None
        rejected: PlanRejected | None = None
        while True:
            try:
                request = steps.send(answer) if rejected is None else steps.throw(rejected)
            except StopIteration as done:
                compiled: tuple[Plan, PolicyCheck] = done.value
                return compiled
            answer, rejected = None, None
            if isinstance(request, CompileText):
                try:
                    answer = self._compile(origin, request.text)
                except PlanRejected as rejection:
                    rejected = rejection
            elif isinstance(request, AskSpecialist):
                answer = self._ask("specialist", request.messages)
            elif isinstance(request, RepairSpecialist):
                self._record_repair("specialist", request.rejection)
                self.log.info(
                    "repair", attempt=self.state.replans, origin="specialist", specialist=request.specialist
                )

    def _record_repair(self, origin: PlanOrigin, rejection: PlanRejected) -> None:
        """A plan (or a specialist's sub-plan) goes back to its writer: one replan, recorded."""
        self.state.replans += 1
        self.records.repair(self.state.replans, origin, rejection)

    def _accept(self, origin: PlanOrigin, text: str, *, gate: bool = True) -> Plan:
        state = self.state
        try:
            if self.config.specialists and origin != "file":  # a coordinator's plan (pte._run._delegation)
                plan, policy_check = self._compile_delegating(origin, text)
            else:
                plan, policy_check = self._compile(origin, text)
        except PlanRejected as rejection:
            self.records.rejected(origin, text, rejection)
            raise
        self.records.accepted(accept(state, origin, plan, policy_check))
        state.result.plans.append(plan)
        if gate:
            self._approve(plan)
        return plan

    def _approve(self, plan: Plan) -> None:
        """Before any step of `plan` runs: the approval gate, then the `before_execute` hooks."""
        self.setup.approval(plan, self.state.audit)
        for hook in self.setup.before_execute:
            hook(plan, self.state.audit)

    # -- executing ----------------------------------------------------------------------------

    def _execute(self, plan: Plan) -> StepResult | None:
        state, log = self.state, self.log
        progress = is_terminal()
        # Progress counts this plan's steps: after a replan the run's earlier steps are not
        # steps of the plan being executed, and a for_each is one step however many elements.
        plan_steps = {step.id for step in plan}
        done: set[str] = set()

        def on_step(step: StepResult) -> None:
            state.result.steps.append(step)
            # A for_each's elements (``each[0]``, ...) count as their one step of the plan.
            own = step.step_id.split("[", 1)[0] if is_element(step.step_id) else step.step_id
            if own in plan_steps:
                done.add(own)
            if step.ok and not is_element(step.step_id):  # pte._plan._control: elements are not plan steps
                state.prior[step.step_id] = step.tool
            log.info(
                "step_finished",
                step=step.step_id,
                tool=step.tool,
                status=step.status,
                duration_ms=round(step.duration_ms, 2),
                **({"progress": f"{len(done)}/{len(plan_steps)}"} if progress else {}),
            )

        # Step spans start and end where the step records are written (ids go into them).
        audit: RecordSink = TracedAudit(state.audit, state.tracer) if state.tracer.active else state.audit
        needs, decisions = state.endorse.get(plan.hash), state.endorse_decisions.get(plan.hash, {})
        setup = self.setup
        gate = RunCallGate.for_plan(
            setup.endorsement, setup.consume_approval, audit, plan.hash, needs, decisions
        )
        point = gate.endorsement if gate is not None else None
        try:
            # Approvals and endorsements reach the executor through its one call gate, given explicitly.
            execution = self.setup.executor.run(
                plan, audit, completed=state.result.outputs, on_step=on_step, gate=gate
            )
        finally:
            if point is not None:
                state.endorsed.update(point.endorsed)
            note_completed(plan, state.result.outputs, state.prior, state.prior_lists)
        state.result.outputs = execution.outputs
        note_completed(plan, state.result.outputs, state.prior, state.prior_lists)
        return execution.failure

    # -- finishing ----------------------------------------------------------------------------

    def _finalize(self) -> str:
        state = self.state
        if not self.config.llm_answer or self.setup.llm is None:
            return render_result(state.result.result)
        view = finalizer_view(state, self.setup.registry)
        messages = prompts.finalizer_messages(
            self.request or "",
            state.result.result,
            view.steps,
            result_provenance=view.result_provenance,
            budget=self.config.data_budget,
            ranking=view.ranking,
        )
        response = self._call_llm("finalizer", messages, None)
        if response.finish_reason == "length":
            # A cut-off answer could state a truncated figure; the results stay available.
            raise FailedClosed(ReasonCode.LLM_ERROR, "the finalizer's answer was cut off at the token limit")
        return response.text

    def _seal(
        self, status: RunStatus, stop: FailedClosed | None = None, *, message: str | None = None
    ) -> RunResult:
        state = self.state
        result = state.result
        result.status = status
        self.phase = "sealed"
        count_autonomy(result, self.setup.registry, state.endorsed)
        if stop is not None:
            result.reason = stop.reason
            result.message = stop.message
        if message is not None:
            result.message = message
        if not state.audit.broken and not isinstance(stop, AuditWriteError):
            try:
                self.records.finished(result)
            except AuditWriteError as exc:
                result.status, result.reason, result.message = "failed_closed", exc.reason, exc.message
        state.tracer.finish(result.status, result.reason.value if result.reason else None)
        get_logger(run_id=result.run_id).info(
            "run_finished", status=result.status, reason=result.reason.value if result.reason else None
        )
        return result
