"""The engine: a deployment's parts, and the entry points that hand each run to its `RunLoop`.

An `Engine` is built once (catalogue, model client, policy, gates, executor); every call of
`run`, `execute` or `plan` drives one `pte._run._loop.RunLoop`, which owns the run: its state,
its transitions (plan → compile → approve → execute → stage/replan/repair → finalize → seal)
and every run-level record. The executor never calls a model.

Replay drives this same code with a `ReplayClient` and recorded tool outputs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pte._audit import RecordSink, deployment_binding
from pte._catalogue import Registry
from pte._execution import DEFAULT_CONCURRENCY, CallHook, Executor, ToolInvoker
from pte._plan import CompileCheck, Plan, check_specialists, coordinator_view
from pte._policy import ConsumingApproval, NoApprovals, PlanApproval, Policy
from pte._run._ending import render_result
from pte._run._llm import LLMClient
from pte._run._loop import RunLoop, RunMode
from pte._run._setup import RunSetup
from pte._run._state import EngineConfig, Planning, RunResult

__all__ = ["Engine", "render_result"]


class Engine:
    """Runs requests (with an LLM planner) and ready-made plans (without one).

    - `registry`: the allow-list; `llm`: any `LLMClient` (None: only `execute` works).
    - `invoker`: how tools are called (live by default; replay passes recorded outputs).
    - `policy`: the data-flow policy every plan must satisfy (`pte._policy._document`); by default the
      tools' own declarations (`provenance`, `sinks`), so declared sinks are always
      enforced. Recorded in `run_started`, so that replay checks against the same policy.
    - `approval`: the gate for plans that call a tool with `requires_approval`
      (`pte._policy._gate.ApprovalGate`). Without one, such a plan fails closed
      (`approval_missing`): nothing that needs a person's approval runs by default. A
      `ConsumingApproval` (the gate has ``before_call``, a `CallHook`) is asked before each
      call's side effect, through the run's call gate (`Executor.run(gate=...)`), so that
      approvals are consumed by the non-idempotent writes they let run, whatever the invoker.
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
        approval: PlanApproval | None = None,
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
        #: The approval gate's point before a call's side effect (`ApprovalGate.before_call`):
        #: the run loop hands it to the executor in the run's one call gate (pte._run._call_gate),
        #: whatever the invoker, so a non-idempotent write consumes its approval exactly once.
        self.consume_approval: CallHook | None = (
            approval.before_call if isinstance(approval, ConsumingApproval) else None
        )
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
        return self._loop(audit, "run", request=request).run_to_end()

    def execute(self, plan_text: str, audit: RecordSink) -> RunResult:
        """Compile and execute a ready-made plan (a person's, or one from `pte plan`): no LLM at all."""
        return self._loop(audit, "execute", plan_text=plan_text).run_to_end()

    def plan(self, request: str, audit: RecordSink) -> RunResult:
        """Compile a request into a plan without executing it (for review, then `execute`)."""
        return self._loop(audit, "plan", request=request).run_to_end()

    def _loop(
        self, audit: RecordSink, mode: RunMode, *, request: str | None = None, plan_text: str | None = None
    ) -> RunLoop:
        """The loop of one run, given this engine's parts as they are now."""
        setup = RunSetup(
            planning=Planning(self.config, self.registry, self.planner_registry, self.policy),
            llm=self.llm,
            executor=self.executor,
            approval=self.approval,
            consume_approval=self.consume_approval,
            before_execute=self.before_execute,
            checks=self.checks,
            endorsement=self.endorsement,
            tracer_provider=self.tracer_provider,
            deployment=self.deployment,
        )
        return RunLoop(setup, audit, mode, request=request, plan_text=plan_text)
