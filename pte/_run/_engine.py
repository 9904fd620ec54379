"""The run state machine: Planner → compile → Executor → (Replanner → compile → Executor)* → Finalizer.

The ErrorHandler is the only other exit: any `FailedClosed` raised along the way ends the
run `failed_closed(reason)` and nothing is executed after it. Every transition is written
to the audit log. The LLM is called by the planner (once), the replanner (once per
failure) and the finalizer (once, or never); the executor never calls it.

Replay drives this same code with a `ReplayClient` and recorded tool outputs.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import pte._run._prompts as prompts
from pte._audit import RecordSink, deployment_binding
from pte._audit import records as rec
from pte._catalogue import Registry, run_started_fields
from pte._core import (
    AuditWriteError,
    ConditionNotMet,
    FailedClosed,
    LLMError,
    PlanRejected,
    ReasonCode,
    call_role,
    get_logger,
    is_terminal,
)
from pte._execution import (
    DEFAULT_CONCURRENCY,
    Executor,
    LiveInvoker,
    StepResult,
    ToolInvoker,
    is_element,
    note_completed,
    resolve_result,
    stop_if_partial,
)
from pte._plan import CompileCheck, Plan, check_specialists, compile_plan, coordinator_view, plan_schema
from pte._policy import (
    EndorsementPoint,
    NoApprovals,
    Policy,
    PolicyCheck,
    plan_literals,
    reset_point,
    set_point,
)
from pte._run._delegation import compile_delegating
from pte._run._exposure import (
    catalogue_exposed,
    completed_for_planner,
    error_for_planner,
    exposure_of,
    literal_of,
)
from pte._run._llm import LLMClient, LLMResponse, _usage
from pte._run._otel import RunTracer, TracedAudit
from pte._run._repair import may_repair, repair
from pte._run._stages import continue_literals, decided_for, next_stage, replan_trigger
from pte._run._state import EngineConfig, PlanOrigin, RunResult, RunStatus, _Run

__all__ = ["Engine", "render_result"]


def _checked_response(response: Any) -> LLMResponse:
    """A client's answer as the log records it (and replay re-reads it): token counts complete."""
    if not isinstance(response, LLMResponse):
        raise LLMError(f"the model client returned {type(response).__name__}, not an LLMResponse")
    usage = _usage(response.usage)
    return response if usage == response.usage else replace(response, usage=usage)


def _describe(exc: Exception) -> str:
    """A raised exception as a one-line message: its type and text."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def render_result(result: Any) -> str:
    """The deterministic answer: the result value as text (JSON for structured values)."""
    if result is None:
        return "The plan completed. It declares no result."
    if isinstance(result, str):
        return result
    # As the log holds it (a whole-number float as an integer): replay renders it from the log.
    return json.dumps(prompts._as_logged(result), indent=2, sort_keys=True, ensure_ascii=False)


class Engine:
    """Runs requests (with an LLM planner) and ready-made plans (without one).

    - `registry`: the allow-list; `llm`: any `LLMClient` (None: only `execute` works).
    - `invoker`: how tools are called (live by default; replay passes recorded outputs).
    - `policy`: the data-flow policy every plan must satisfy (`pte._policy._document`); by default the
      tools' own declarations (`provenance`, `sinks`), so declared sinks are always
      enforced. Recorded in `run_started`, so that replay checks against the same policy.
    - `approval`: the gate for plans that call a tool with `requires_approval`
      (`pte._policy._gate.ApprovalGate`). Without one, such a plan fails closed
      (`approval_missing`): nothing that needs a person's approval runs by default. A gate
      with a ``before_call`` method (a `CallHook`) is registered on the default live invoker,
      so that approvals are consumed by the non-idempotent writes they let run.
    - `checks`: further compile checks, run on every plan.
    - `before_execute`: called with each accepted plan before any of its steps runs; it
      may raise `FailedClosed` (approval checks use it).
    - `tracer_provider`: the OpenTelemetry tracer provider for run, LLM-call and step spans
      (`pte._run._otel`); None uses the global one. Without opentelemetry installed, no spans.
    - `max_concurrency`, `serial_writes`: how many steps may run at once, and whether a
      write runs alone (`Executor`). The records do not depend on either.
    - `endorsement`: the endorsement gate (`pte.EndorsementGate`, docs/endorsement.md): a
      call whose value only a person can vouch for pauses the run (`pte.RunPaused`) instead
      of the plan being refused.
    - `deployment`: the deployment the run is bound to: its fingerprint (``pte.Deployment.
      fingerprint``), or a mapping ``{"fingerprint": ..., "parts": {name: fingerprint}}`` whose
      parts let a refusal name what differs (`pte._audit._binding`). Recorded in ``run_started``
      (and anchored with it, before any tool runs); resume refuses the run under another one.
    """

    def __init__(
        self,
        registry: Registry,
        llm: LLMClient | None = None,
        *,
        config: EngineConfig | None = None,
        invoker: ToolInvoker | None = None,
        checks: Sequence[CompileCheck] = (),
        before_execute: Sequence[Callable[[Plan, RecordSink], None]] = (),
        policy: Policy | None = None,
        approval: Callable[[Plan, RecordSink], None] | None = None,
        tracer_provider: Any = None,
        max_concurrency: int = DEFAULT_CONCURRENCY,
        serial_writes: bool = False,
        endorsement: Any = None,
        deployment: Any = None,
    ) -> None:
        self.registry = registry
        #: ``run_started.deployment`` of every run (`pte._audit._binding`); None: not bound.
        self.deployment = deployment_binding(deployment)
        #: The endorsement gate (`pte._policy._endorsement.EndorsementGate`): with one, a plan whose
        #: only violations are values reaching ``on_violation: "endorse"`` sinks compiles, and
        #: the run pauses at each such call for a person. None: such plans are refused.
        self.endorsement = endorsement
        self.llm = llm
        self.config = config or EngineConfig()
        call_hook = getattr(approval, "before_call", None)
        if invoker is None and callable(call_hook):
            # The live tool calls consume approvals (an `ApprovalGate`): a non-idempotent write
            # runs at most once per approval. Replay passes its own invoker and registers the
            # gate on the live part of it itself.
            invoker = LiveInvoker(hooks=(call_hook,))
        self.executor = Executor(
            registry, invoker=invoker, max_concurrency=max_concurrency, serial_writes=serial_writes
        )
        self.checks = tuple(checks)
        self.before_execute = tuple(before_execute)
        self.policy = policy if policy is not None else Policy.from_registry(registry)
        self.approval = approval if approval is not None else NoApprovals(registry)
        self.tracer_provider = tracer_provider
        # Specialists (pte._plan._specialists): their catalogues are checked against the deployment's,
        # and planners are shown the coordinator's view (the specialists instead of their tools).
        check_specialists(self.config.specialists, registry)
        self._planner_registry: Registry = (
            coordinator_view(registry, self.config.specialists) if self.config.specialists else registry
        )

    @property
    def planner_registry(self) -> Registry:
        """The catalogue planners are shown: the coordinator's view when there are specialists."""
        return self._planner_registry

    # -- public entry points ------------------------------------------------------------------

    def run(self, request: str, audit: RecordSink) -> RunResult:
        """Plan `request` with the LLM, execute, replan on failure (bounded), and finish."""
        run = _Run(audit, RunResult(run_id=audit.run_id, status="failed_closed"))
        log = get_logger(run_id=audit.run_id)
        try:
            self._start(run, mode="run", request=request)
            messages = prompts.planner_messages(request, self.planner_registry, self.policy)
            plan = self._plan(run, "planner", messages)
            stage = 1
            while True:
                failure = self._execute(run, plan, log)
                if failure is None:
                    if not plan.continues:
                        break
                    stage += 1  # pte._run._stages: the plan hands values to a next planning stage
                    plan = next_stage(self, run, request, plan, stage)
                    continue
                self._stop_if_effect_unknown(failure)
                if run.replans >= self.config.max_replans:
                    raise FailedClosed(
                        ReasonCode.REPLANS_EXHAUSTED,
                        f"step {failure.step_id!r} ({failure.tool}) failed: {failure.error}; "
                        f"{self.config.max_replans} replan(s) allowed, all used",
                    )
                run.replans += 1
                assert failure.error is not None
                audit.write(
                    rec.replan(
                        attempt=run.replans,
                        failed_step=failure.step_id,
                        error=failure.error.to_dict(),
                        completed=run.result.outputs,
                    )
                )
                log.info("replan", attempt=run.replans, failed_step=failure.step_id)
                error_labels = self._error_labels(run, failure)
                run.trigger = replan_trigger(run, failure.step_id, error_labels)  # decides the replan
                error, error_provenance = error_for_planner(self, run, failure.error.to_dict(), error_labels)
                messages = prompts.replanner_messages(
                    request,
                    self.planner_registry,
                    plan.to_dict(),
                    completed_for_planner(self, run),
                    failure.step_id,
                    failure.tool,
                    error,
                    error_provenance=error_provenance,
                    policy=self.policy,
                    budget=self.config.data_budget,
                    handles=self.config.planner_data == "handles",
                )
                plan = self._plan(run, "replanner", messages)
            run.result.result = self._result_value(plan, run)
            run.result.answer = self._finalize(run, request)
            return self._finish(run, "succeeded")
        except ConditionNotMet as stop:  # pte._plan._control: a require step's condition was false
            return self._finish(run, "condition_not_met", message=stop.message)
        except FailedClosed as stop:
            return self._finish(run, "failed_closed", stop)
        except KeyboardInterrupt:
            self._interrupted(run)
            raise

    def execute(self, plan_text: str, audit: RecordSink) -> RunResult:
        """Compile and execute a ready-made plan (a person's, or one from `pte plan`): no LLM at all."""
        run = _Run(audit, RunResult(run_id=audit.run_id, status="failed_closed"))
        log = get_logger(run_id=audit.run_id)
        try:
            self._start(run, mode="execute", request=None, extra={"plan_text": plan_text})
            plan = self._accept(run, "file", plan_text)
            if plan.continues:  # pte._run._stages: a next stage needs a planner; execute has none
                raise FailedClosed(
                    ReasonCode.LLM_ERROR,
                    "the plan hands values to a next planning stage ('continue'), which needs a planner: "
                    "use pte run",
                )
            failure = self._execute(run, plan, log)
            if failure is not None:
                # The same decision as `run` makes before a replan: a write whose effect is
                # unknown ends needs_review whichever command ran it.
                self._stop_if_effect_unknown(failure)
                raise FailedClosed(
                    ReasonCode.STEP_FAILED,
                    f"step {failure.step_id!r} ({failure.tool}) failed: {failure.error}",
                )
            run.result.result = self._result_value(plan, run)
            run.result.answer = render_result(run.result.result)
            return self._finish(run, "succeeded")
        except ConditionNotMet as stop:  # pte._plan._control: a require step's condition was false
            return self._finish(run, "condition_not_met", message=stop.message)
        except FailedClosed as stop:
            return self._finish(run, "failed_closed", stop)
        except KeyboardInterrupt:
            self._interrupted(run)
            raise

    def plan(self, request: str, audit: RecordSink) -> RunResult:
        """Compile a request into a plan without executing it (for review, then `execute`)."""
        run = _Run(audit, RunResult(run_id=audit.run_id, status="failed_closed"))
        try:
            self._start(run, mode="plan", request=request)
            # Compile only: approval is checked when the plan is executed (after `pte approve`).
            messages = prompts.planner_messages(request, self.planner_registry, self.policy)
            self._plan(run, "planner", messages, gate=False)
            return self._finish(run, "succeeded")
        except FailedClosed as stop:
            return self._finish(run, "failed_closed", stop)
        except KeyboardInterrupt:
            self._interrupted(run)
            raise

    # -- the nodes ------------------------------------------------------------------------------

    def _start(
        self, run: _Run, *, mode: str, request: str | None, extra: Mapping[str, Any] | None = None
    ) -> None:
        config: dict[str, Any] = self.config.to_dict()
        if self.llm is not None:
            config["model"] = self.llm.model
            describe = getattr(self.llm, "describe", None)
            if isinstance(describe, dict):  # endpoint, timeout, retries: never the key
                config["llm"] = describe
        config.update(extra or {})
        if self.registry.procedures:  # what plans may call and replay recompiles with (pte._plan._procedures)
            from pte._plan import procedures_record

            config["procedures"] = procedures_record(self.registry.procedures)
        if self.endorsement is not None:  # replay compiles as the run did (pte._policy._endorsement)
            config["endorsement"] = True
        run.tracer = RunTracer(
            run.audit.run_id,
            mode,
            self.tracer_provider,
            run.audit.redactor,
            link=run.audit.origin_trace,  # resume: the crashed run's span
        )
        # Nested steps (procedure calls, delegations) carry their path on their spans.
        run.tracer.procedures = bool(self.registry.procedures or self.config.specialists)
        # Untouched third-party text in the catalogue (pte.importers): every planner reads it.
        run.shown_untrusted = mode != "execute" and catalogue_exposed(self.registry)
        # Format 2: fingerprints per tool; the catalogue and policy by hash, stored once per log.
        fields = run_started_fields(
            self.registry, self.policy.to_document(), run.audit.redactor.redact_structure
        )
        run.audit.write(
            rec.run_started(
                mode=mode,
                request=request,
                config=config,
                content=fields,
                trace=run.tracer.run_ids(),
                deployment=self.deployment,
            )
        )

    def _call_llm(self, run: _Run, role: str, messages: list[dict[str, str]], schema: Any) -> LLMResponse:
        if self.llm is None:
            raise FailedClosed(ReasonCode.LLM_ERROR, f"no LLM client is configured for the {role}")
        started = time.perf_counter()
        run.result.llm_calls += 1
        span = run.tracer.llm_start(role, self.llm.model)
        try:
            with call_role(role):
                response = _checked_response(self.llm.complete(messages, schema=schema))
        except Exception as raised:  # any client failure ends the run, sealed
            # A custom client may raise anything (a bug, its SDK's own errors): the run still
            # ends failed_closed(llm_error) with the failure recorded, never with a traceback
            # and an unsealed log. KeyboardInterrupt and SystemExit are not Exceptions.
            exc = raised if isinstance(raised, LLMError) else LLMError(_describe(raised))
            trace_ids = run.tracer.llm_end(span, attempts=exc.attempts, error=exc.message)
            run.audit.write(
                rec.llm_call(
                    role=role,
                    model=self.llm.model,
                    messages=messages,
                    response_format=None,
                    response=None,
                    finish_reason=None,
                    usage={},
                    error=exc.message,
                    attempts=exc.attempts,
                    duration_ms=(time.perf_counter() - started) * 1000,
                    trace=trace_ids,
                )
            )
            raise FailedClosed(exc.reason, f"{role} LLM call failed: {exc.message}") from None
        trace_ids = run.tracer.llm_end(
            span,
            model=response.model,
            usage=response.usage,
            finish_reason=response.finish_reason,
            attempts=response.attempts,
        )
        run.audit.write(
            rec.llm_call(
                role=role,
                model=response.model,
                messages=messages,
                response_format=response.response_format,
                response=response.text,
                finish_reason=response.finish_reason,
                usage=response.usage,
                error=None,
                attempts=response.attempts,
                duration_ms=response.duration_ms,
                trace=trace_ids,
            )
        )
        for key, value in response.usage.items():
            run.result.usage[key] = run.result.usage.get(key, 0) + int(value)
        return response

    def _plan(
        self, run: _Run, role: PlanOrigin, messages: list[dict[str, str]], *, gate: bool = True
    ) -> Plan:
        text = self._ask_plan(run, role, messages)
        try:
            return self._accept(run, role, text, gate=gate)
        except PlanRejected as rejection:
            if not may_repair(self.config, run.replans, role, rejection):
                raise
            return repair(self, run, role, messages, text, rejection, gate=gate)

    def _ask_plan(self, run: _Run, role: PlanOrigin, messages: list[dict[str, str]]) -> str:
        """The planner's answer text; a cut-off answer is a rejection (invalid_json), recorded."""
        response = self._call_llm(run, role, messages, plan_schema())
        if response.finish_reason == "length":
            # A cut-off answer is never completed or repaired into a plan.
            rejection = PlanRejected(
                ReasonCode.INVALID_JSON, "the answer was cut off at the token limit (finish_reason=length)"
            )
            self._record_rejection(run, role, response.text, rejection)
            raise rejection
        return response.text

    def _policy_check(self, run: _Run, origin: PlanOrigin) -> PolicyCheck:
        if origin != "repair":  # a repair answers the same request for a plan as the one it repairs
            run.deciding = decided_for(run, origin)
        prior = {sid: run.labels[sid] for sid in run.prior if sid in run.labels}
        # A planner copies what it was shown into literals, and decides with it which
        # references flow and which tools run (pte._run._exposure). A person's plan ("file") is theirs.
        literal = "request" if origin == "file" else literal_of(run)
        return self.policy.check(
            literal=literal,
            prior=prior,
            request_literals=run.request_literals if literal != "request" else (),
            prior_trees={sid: run.label_trees[sid] for sid in run.prior if sid in run.label_trees},
            exposure=() if origin == "file" else exposure_of(run),
            decided=run.deciding,
            endorsable=self.endorsement is not None,
        )

    def _compile(self, run: _Run, origin: PlanOrigin, text: str) -> tuple[Plan, PolicyCheck]:
        """Compile `text` with every check a plan from `origin` gets (no record written)."""
        policy_check = self._policy_check(run, origin)
        plan = compile_plan(
            text,
            self.registry,
            self.config.limits,
            checks=(policy_check, *self.checks),
            prior=run.prior,
            prior_lists=run.prior_lists,
            prior_types={sid: run.output_types[sid] for sid in run.prior if sid in run.output_types},
        )
        return plan, policy_check

    def _accept(self, run: _Run, origin: PlanOrigin, text: str, *, gate: bool = True) -> Plan:
        try:
            if self.config.specialists and origin != "file":  # a coordinator's plan (pte._run._delegation)
                plan, policy_check = compile_delegating(self, run, origin, text)
            else:
                plan, policy_check = self._compile(run, origin, text)
        except PlanRejected as rejection:
            self._record_rejection(run, origin, text, rejection)
            raise
        run.labels.update(policy_check.labels)
        run.input_labels.update(policy_check.input_labels)
        run.triggers.update(policy_check.triggers)
        run.label_trees.update(policy_check.trees)
        for step in plan.steps:  # a reused id (a failed step's) takes its new plan's type
            inferred = plan.output_schema(step.id)
            if inferred is None:
                run.output_types.pop(step.id, None)
            else:
                run.output_types[step.id] = inferred
        run.decided, run.completion = policy_check.decided, policy_check.completion
        if policy_check.literal == "request":  # written from the request and catalogue alone
            run.request_literals |= plan_literals(plan) | continue_literals(plan)
        endorsing = {sid: sorted(params) for sid, params in policy_check.endorsements.items()}
        run.audit.write(
            rec.plan_accepted(
                origin=origin,
                plan_hash=plan.hash,
                plan=plan.to_dict(),
                order=plan.order,
                needs_endorsement=endorsing,
            )
        )
        if endorsing:
            run.endorse[plan.hash] = policy_check.endorsements
            run.endorse_decisions[plan.hash] = policy_check.endorse_decisions
        run.result.plans.append(plan)
        if gate:
            self.approval(plan, run.audit)
            for hook in self.before_execute:
                hook(plan, run.audit)
        return plan

    def _record_rejection(self, run: _Run, origin: str, text: str, rejection: FailedClosed) -> None:
        run.audit.write(
            rec.plan_rejected(
                origin=origin,
                reason=rejection.reason.value,
                message=rejection.message,
                path=rejection.path,
                plan_text=text,
            )
        )

    def _execute(self, run: _Run, plan: Plan, log: Any) -> StepResult | None:
        progress = is_terminal()
        # Progress counts this plan's steps: after a replan the run's earlier steps are not
        # steps of the plan being executed, and a for_each is one step however many elements.
        plan_steps = {step.id for step in plan}
        done: set[str] = set()

        def on_step(step: StepResult) -> None:
            run.result.steps.append(step)
            # A for_each's elements (``each[0]``, ...) count as their one step of the plan.
            own = step.step_id.split("[", 1)[0] if is_element(step.step_id) else step.step_id
            if own in plan_steps:
                done.add(own)
            if step.ok and not is_element(step.step_id):  # pte._plan._control: elements are not plan steps
                run.prior[step.step_id] = step.tool
            log.info(
                "step_finished",
                step=step.step_id,
                tool=step.tool,
                status=step.status,
                duration_ms=round(step.duration_ms, 2),
                **({"progress": f"{len(done)}/{len(plan_steps)}"} if progress else {}),
            )

        # Step spans start and end where the step records are written (ids go into them).
        audit: RecordSink = TracedAudit(run.audit, run.tracer) if run.tracer.active else run.audit
        needs = run.endorse.get(plan.hash)
        point: EndorsementPoint | None = None
        if needs and self.endorsement:
            decisions = run.endorse_decisions.get(plan.hash, {})
            point = EndorsementPoint(self.endorsement, audit, plan.hash, needs, decisions=decisions)
        token = set_point(point)
        try:
            execution = self.executor.run(plan, audit, completed=run.result.outputs, on_step=on_step)
        finally:
            reset_point(token)
            if point is not None:
                run.endorsed.update(point.endorsed)
            note_completed(plan, run.result.outputs, run.prior, run.prior_lists)
        run.result.outputs = execution.outputs
        note_completed(plan, run.result.outputs, run.prior, run.prior_lists)
        return execution.failure

    def _label(self, run: _Run, labels: frozenset[str] | None) -> str:
        """How data is labelled in an LLM prompt: untrusted if any of it is."""
        if labels is None or "untrusted" in labels:
            return "untrusted"
        return "trusted"

    def _error_labels(self, run: _Run, failure: StepResult) -> frozenset[str]:
        """The labels of a failed step's error message, for the replanner (pte._run._exposure).

        An error message is tool output like any other: it may quote third-party text the
        tool read, or the arguments it was given. So it carries the labels of the tool's
        output provenance joined with those of the step's arguments; shown to a planner,
        untrusted error text exposes every later plan exactly as an untrusted output does.
        """
        output = run.labels.get(failure.step_id)
        inputs = run.input_labels.get(failure.step_id)
        if output is None or inputs is None:
            return frozenset({"untrusted"})  # unknown: assume the worst
        return output | inputs

    def _stop_if_effect_unknown(self, failure: StepResult) -> None:
        """How a failed step ends the run when nothing may be tried after it: the one place
        `run` (before a replan) and `execute` decide it.

        A non-idempotent write that timed out may or may not have taken effect (and a write
        for_each failed after earlier elements took effect): a replan could repeat it, so the
        run ends needs_review and a person must look first. A tool that raised SystemExit,
        KeyboardInterrupt or another BaseException (`ToolError.fatal`) ends the run: it is not
        replanned around."""
        if failure.error is not None and failure.error.fatal:
            raise FailedClosed(
                ReasonCode.STEP_FAILED,
                f"step {failure.step_id!r} ({failure.tool}) failed: {failure.error.message}; "
                "the run is stopped",
            )
        stop_if_partial(failure, self.registry)  # pte._plan._control: a write for_each half applied
        spec = self.registry.get(failure.tool)
        if (
            spec is not None  # a require step's condition names no tool (pte._plan._control)
            and spec.effect == "write"
            and not spec.idempotent
            and failure.error
            and failure.error.kind == "timeout"
        ):
            raise FailedClosed(
                ReasonCode.NEEDS_REVIEW,
                f"step {failure.step_id!r} ({failure.tool}) timed out; it is not idempotent and may or may "
                "not have taken effect, so the run is not replanned. Check its effect before going on.",
            )

    def _completed_view(self, run: _Run) -> list[tuple[str, str, Any, str]]:
        """Every completed step's output with its label, for the finalizer (it decides nothing)."""
        return [
            (sid, tool, run.result.outputs[sid], self._label(run, run.labels.get(sid)))
            for sid, tool in run.prior.items()
        ]

    def _result_value(self, plan: Plan, run: _Run) -> Any:
        try:
            return resolve_result(plan, run.result.outputs)
        except (KeyError, IndexError, TypeError) as exc:
            raise FailedClosed(
                ReasonCode.STEP_FAILED, f"the plan's result selects nothing at run time: {exc}"
            ) from None

    def _finalize(self, run: _Run, request: str) -> str:
        if not self.config.llm_answer or self.llm is None:
            return render_result(run.result.result)
        plan = run.result.plans[-1]
        sources = {ref.step for ref in plan.result_references()}
        result_labels = frozenset().union(*(run.labels.get(sid, frozenset({"untrusted"})) for sid in sources))
        # The finalizer phrases the result: it is shown the steps the result depends on (through
        # references, across the run's plans) and the writes (what the run did), not steps the
        # result does not depend on (#37).
        uses: dict[str, set[str]] = {}
        for each in run.result.plans:
            for item in each.steps:
                refs = {ref.step for _, ref in item.references}
                if item.for_each is not None:
                    refs.add(item.for_each.step)
                uses.setdefault(item.id, set()).update(refs)
        needed, todo = set(), list(sources)
        while todo:
            sid = todo.pop()
            if sid not in needed:
                needed.add(sid)
                todo.extend(uses.get(sid, ()))
        shown = [
            view
            for view in self._completed_view(run)
            if view[0] in needed or (view[1] in self.registry and self.registry[view[1]].effect == "write")
        ]
        messages = prompts.finalizer_messages(
            request,
            run.result.result,
            shown,
            result_provenance=self._label(run, result_labels),
            budget=self.config.data_budget,
        )
        response = self._call_llm(run, "finalizer", messages, None)
        if response.finish_reason == "length":
            # A cut-off answer could state a truncated figure; the results stay available.
            raise FailedClosed(ReasonCode.LLM_ERROR, "the finalizer's answer was cut off at the token limit")
        return response.text

    def _interrupted(self, run: _Run) -> None:
        """Seal the run as failed_closed(interrupted): the operator's Ctrl-C, on its way out."""
        stop = FailedClosed(ReasonCode.INTERRUPTED, "interrupted by the operator (SIGINT)")
        self._finish(run, "failed_closed", stop)

    def _count_autonomy(self, run: _Run) -> None:
        """Write calls made without a person, and those an approval or endorsement allowed."""
        result = run.result
        writes = [
            s for s in result.steps if s.tool in self.registry and self.registry[s.tool].effect == "write"
        ]
        person = sum(1 for s in writes if _person_allowed(self, run, s.step_id, s.tool))
        result.writes_with_person, result.writes_without_person = person, len(writes) - person

    def _finish(
        self, run: _Run, status: RunStatus, stop: FailedClosed | None = None, *, message: str | None = None
    ) -> RunResult:
        result = run.result
        result.status = status
        self._count_autonomy(run)
        if stop is not None:
            result.reason = stop.reason
            result.message = stop.message
        if message is not None:
            result.message = message
        if not run.audit.broken and not isinstance(stop, AuditWriteError):
            try:
                run.audit.write(
                    rec.run_finished(
                        status=status,
                        reason=result.reason.value if result.reason else None,
                        message=result.message,
                        answer=result.answer,
                        result=result.result,
                        steps_run=len(result.steps),
                        llm_calls=result.llm_calls,
                    )
                )
                run.audit.sync()
            except AuditWriteError as exc:
                result.status, result.reason, result.message = "failed_closed", exc.reason, exc.message
        run.tracer.finish(result.status, result.reason.value if result.reason else None)
        get_logger(run_id=result.run_id).info(
            "run_finished", status=result.status, reason=result.reason.value if result.reason else None
        )
        return result


def _person_allowed(engine: Engine, run: _Run, step_id: str, tool: str) -> bool:
    spec = engine.registry.get(tool)
    return (spec is not None and spec.requires_approval) or step_id in run.endorsed
