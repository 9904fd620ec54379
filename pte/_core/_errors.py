"""Reason codes and every exception PTE raises, in one module.

Reason codes are a closed enum and part of the public API and of the audit schema:
every way a run can fail closed has exactly one name here.

The exceptions (control signals included; `pte` exposes the public ones)::

    PTEError
      FailedClosed                  a run ends failed_closed(reason)
        PlanRejected                  compile refused the plan
        ApprovalMissing, ApprovalConsumed, ApprovalRejected
        AuditWriteError               the log cannot be written
      RunPaused                     control signal: the run waits for a person
      ConditionNotMet               control signal: a `require` step's condition is false
      ToolError                     a tool call failed (a step failure, not a crash)
        TransientError                ... and may be retried
      ToolRegistrationError (also TypeError)
        ImportRefused
      ToolPackError
      ImportSourceError
        MCPError, OpenAPIError
      LLMError
      PolicyError, ProcedureError
      ApprovalStoreError, EndorsementStoreError
      StoreError
        RequeueRefused
      KeyFileError, CheckpointError, AnchorError
      AuditFormatError
      ReplayDataError (also ValueError)
      ReplayDivergence, LogNotIntact
      ReportError
      LogEnded                     private: replay reached the end of a crashed run's log
    StrictJSONError (a ValueError)  a strict JSON input is refused (duplicate keys, NaN, ...)

Deliberately elsewhere: internal signals that never leave their module
(`pte._execution._owner.Superseded`, the CLI's usage errors, parsers' private markers) and the test
doubles' own assertion (`pte.testing`).
"""

from __future__ import annotations

import os
from enum import StrEnum
from pathlib import Path
from typing import Any

from pte._core._canonical import well_formed


class ReasonCode(StrEnum):
    """Why a plan was rejected or a run failed closed."""

    INVALID_JSON = "invalid_json"
    SCHEMA_VIOLATION = "schema_violation"
    DUPLICATE_STEP_ID = "duplicate_step_id"
    TOOL_NOT_ALLOWED = "tool_not_allowed"
    INVALID_ARGS = "invalid_args"
    BAD_REFERENCE = "bad_reference"
    PLAN_CYCLE = "plan_cycle"
    PLAN_TOO_LARGE = "plan_too_large"
    POLICY_VIOLATION = "policy_violation"
    STEP_FAILED = "step_failed"
    REPLANS_EXHAUSTED = "replans_exhausted"
    LLM_ERROR = "llm_error"
    AUDIT_WRITE_FAILED = "audit_write_failed"
    APPROVAL_MISSING = "approval_missing"
    APPROVAL_CONSUMED = "approval_consumed"
    NEEDS_REVIEW = "needs_review"
    APPROVAL_REJECTED = "approval_rejected"
    #: A plan handed values to more planning stages than `max_stages` allows (pte._run._stages).
    STAGES_EXHAUSTED = "stages_exhausted"
    INTERRUPTED = "interrupted"
    #: A person rejected the value a paused run waited with at a call (pte._policy._endorsement).
    ENDORSEMENT_REJECTED = "endorsement_rejected"
    #: A worker's job is not signed by the deployment key for this run (pte._deploy._jobs).
    JOB_SIGNATURE_INVALID = "job_signature_invalid"
    #: A run or job cannot continue under the deployment in hand: its catalogue, policy or
    #: procedures differ from those it was submitted or started under.
    DEPLOYMENT_MISMATCH = "deployment_mismatch"


#: Reason codes that `compile` can produce (a plan rejection), as opposed to run-time ends.
PLAN_REASONS: frozenset[ReasonCode] = frozenset(
    {
        ReasonCode.INVALID_JSON,
        ReasonCode.SCHEMA_VIOLATION,
        ReasonCode.DUPLICATE_STEP_ID,
        ReasonCode.TOOL_NOT_ALLOWED,
        ReasonCode.INVALID_ARGS,
        ReasonCode.BAD_REFERENCE,
        ReasonCode.PLAN_CYCLE,
        ReasonCode.PLAN_TOO_LARGE,
        ReasonCode.POLICY_VIOLATION,
    }
)


#: Plan rejections a planner can fix from the compiler's reason, path and message: the engine
#: sends such a plan back once, as a replan (`pte._run._repair`). The others (invalid JSON, a
#: schema violation, a tool outside the allow-list, a plan over the limits) end the run at once.
REPAIRABLE_REASONS: frozenset[ReasonCode] = frozenset(
    {
        ReasonCode.BAD_REFERENCE,
        ReasonCode.INVALID_ARGS,
        ReasonCode.PLAN_CYCLE,
        ReasonCode.DUPLICATE_STEP_ID,
        ReasonCode.POLICY_VIOLATION,
    }
)


def _rebuilt_as_it_is(error: BaseException) -> tuple[Any, ...]:
    """`__reduce__` of an exception whose `__init__` takes other arguments than its `args`
    (`ToolError(kind, message)`, `FailedClosed(reason, message, path)`): pickle's default
    rebuilds it as ``cls(*args)``, which fails; this rebuilds it without `__init__`, its `args`
    and attributes as they are, so a worker process can hand it back (multiprocessing, celery)."""
    return (_rebuild, (type(error), error.args, error.__dict__))


def _rebuild(cls: type[BaseException], args: tuple[Any, ...], attributes: dict[str, Any]) -> BaseException:
    error = cls.__new__(cls, *args)  # BaseException.__new__ sets `args`
    error.__dict__.update(attributes)
    return error


class PTEError(Exception):
    """Base class of every error PTE raises on purpose."""

    def __reduce__(self) -> tuple[Any, ...]:
        return _rebuilt_as_it_is(self)


class FailedClosed(PTEError):
    """An error that ends a run with a named reason."""

    def __init__(self, reason: ReasonCode, message: str, path: str = "$") -> None:
        super().__init__(f"{reason.value}: {message}" + (f" (at {path})" if path != "$" else ""))
        self.reason = reason
        self.message = message
        self.path = path

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form: reason, message and JSON path of the offending element."""
        return {"reason": self.reason.value, "message": self.message, "path": self.path}


class PlanRejected(FailedClosed):
    """`compile` refused a plan; nothing was executed."""


class ApprovalMissing(FailedClosed):
    """A tool requires an approved plan and this plan's hash was not approved."""

    def __init__(self, message: str, path: str = "$") -> None:
        super().__init__(ReasonCode.APPROVAL_MISSING, message, path)


class ApprovalConsumed(FailedClosed):
    """The only approvals of this plan were already used for its non-idempotent writes."""

    def __init__(self, message: str, path: str = "$") -> None:
        super().__init__(ReasonCode.APPROVAL_CONSUMED, message, path)


class ApprovalRejected(FailedClosed):
    """A person rejected the plan a paused run waited with."""

    def __init__(self, message: str, path: str = "$") -> None:
        super().__init__(ReasonCode.APPROVAL_REJECTED, message, path)


class ToolRegistrationError(PTEError, TypeError):
    """A function cannot be registered as a tool (missing or unusable type hints, bad options)."""


class ToolPackError(PTEError):
    """A tool pack could not be loaded (missing file, import error, no tools)."""


class ToolError(PTEError):
    """A tool call failed: bad arguments, an exception in the tool, a timeout or bad output.

    `fatal` marks a tool that raised a `BaseException` that is not an `Exception`
    (`SystemExit`, `KeyboardInterrupt`, ...): its step fails and the run ends there instead
    of being replanned. It is recorded (``"fatal": true``), so replay reaches the same end.
    """

    def __init__(self, kind: str, message: str, *, fatal: bool = False) -> None:
        # A tool's text goes into the run's records: a lone surrogate in it would make them
        # unwritable (`well_formed`).
        kind, message = well_formed(kind), well_formed(message)
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message
        self.fatal = fatal

    def to_dict(self) -> dict[str, Any]:
        error: dict[str, Any] = {"kind": self.kind, "message": self.message}
        if self.fatal:
            error["fatal"] = True
        return error

    @classmethod
    def from_dict(cls, error: Any) -> ToolError:
        """The error recorded by `to_dict` (replay and resume rebuild failures from the log)."""
        error = error if isinstance(error, dict) else {}
        return cls(
            str(error.get("kind", "tool_error")),
            str(error.get("message", "")),
            fatal=error.get("fatal") is True,
        )


class TransientError(ToolError):
    """Raised by a tool for a failure worth retrying (a 503, a dropped connection).

    Retried when the tool declares ``retries`` (idempotent tools only); once the retries
    are used up, the step fails with kind ``transient``.
    """

    def __init__(self, message: str) -> None:
        super().__init__("transient", message)


class AuditWriteError(FailedClosed):
    """A record could not be written to the audit log; the run fails closed."""

    def __init__(self, message: str) -> None:
        super().__init__(ReasonCode.AUDIT_WRITE_FAILED, message)


class LLMError(PTEError):
    """The LLM endpoint failed: transport error, timeout, refusal or an unusable answer."""

    def __init__(self, message: str, *, reason: ReasonCode = ReasonCode.LLM_ERROR, attempts: int = 1) -> None:
        message = well_formed(message)  # it may quote a server's or client's text (`well_formed`)
        super().__init__(message)
        self.reason = reason
        self.message = message
        #: HTTP requests made before giving up (transport retries included): what the audit log records.
        self.attempts = attempts


class ImportRefused(ToolRegistrationError):
    """An importer cannot make typed PTE tools of what a source offers; the message says what to declare."""


class ImportSourceError(PTEError):
    """An outside tool catalogue could not be reached or read."""


class MCPError(ImportSourceError):
    """An MCP server could not be started, reached or listed."""


class OpenAPIError(ImportSourceError):
    """An OpenAPI document could not be fetched or read."""


class LogEnded(PTEError):
    """The engine wants to go on where the recorded log ends (a crashed, unsealed run)."""


class StrictJSONError(ValueError):
    """A document is not strict JSON. `kind` says why: syntax, duplicate_key, constant or too_deep."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message

    def __reduce__(self) -> tuple[Any, ...]:
        return _rebuilt_as_it_is(self)


class KeyFileError(PTEError):
    """A key file or key text cannot be used (missing, unreadable, not an Ed25519 key)."""


class StoreError(PTEError):
    """A store cannot be opened, read or written, or was given a malformed URL or run id."""


class RequeueRefused(StoreError):
    """The run cannot be requeued (it ended, waits for a person, or is unknown); says why."""


class AuditFormatError(PTEError):
    """A line of an audit log is not a JSON object (or the log ends in a partial line)."""

    def __init__(self, path: str | os.PathLike[str], line: int, message: str) -> None:
        super().__init__(f"{os.fspath(path)}:{line}: {message}")
        self.path = os.fspath(path)
        self.line = line
        self.message = message


class CheckpointError(PTEError):
    """A key or checkpoint file that cannot be used (unreadable, malformed, wrong kind of key)."""


class AnchorError(PTEError):
    """The anchors file is unreadable or damaged, or a run does not match its anchors."""


class DeploymentError(PTEError):
    """A deployment (`pte.Deployment`) cannot be used: no deployment found, a document that does
    not parse, a path it names that is missing, a flag that would widen it, or a run that was
    started under another deployment."""


class PolicyError(PTEError):
    """A policy file (or document) cannot be used: unreadable, invalid, or naming unknown tools."""


class ProcedureError(PTEError):
    """A procedure file is refused at load (the message names the procedure and why)."""


class SpecialistError(PTEError):
    """A specialist declaration is refused (the message names the specialist and why)."""


class ApprovalStoreError(PTEError):
    """The approval store cannot be read or written, or holds a malformed line."""


class EndorsementStoreError(PTEError):
    """The endorsement store cannot be read or written, or holds a malformed line."""


class ConditionNotMet(PTEError):
    """A `require` step's condition was false: the run ends condition_not_met (not a failure)."""

    def __init__(self, step_id: str, message: str) -> None:
        super().__init__(f"condition not met: {message}")
        self.step_id = step_id
        self.message = f"condition not met: {message}"


class ReplayDataError(PTEError, ValueError):
    """A replay file or audit record cannot be turned into recorded LLM answers."""


class ReplayDivergence(PTEError):
    """The engine made a different decision than the one recorded."""

    def __init__(self, line: int, record_type: str, field_name: str, recorded: Any, replayed: Any) -> None:
        super().__init__(
            f"line {line}: {record_type}.{field_name} differs: recorded {recorded!r}, replayed {replayed!r}"
        )
        self.line = line
        self.record_type = record_type
        self.field = field_name
        self.recorded = recorded
        self.replayed = replayed

    def to_dict(self) -> dict[str, Any]:
        return {
            "line": self.line,
            "record_type": self.record_type,
            "field": self.field,
            "recorded": self.recorded,
            "replayed": self.replayed,
        }


class LogNotIntact(PTEError):
    """The log fails verification (chain, canonical bytes, schema or structure): nothing is re-driven."""

    def __init__(self, path: str | Path, report: Any) -> None:
        super().__init__(f"{path} is not intact, so it is not acted on: {report.issue}")
        self.report = report


class ReportError(PTEError):
    """The log cannot be reported on (unreadable, no such run)."""


class RunPaused(PTEError):
    """Raised after ``run_paused`` is recorded (and made durable): the run waits for a person.

    The approval gate of store runs (`pte._deploy._runs.pausing_gate`) raises it before a plan runs;
    the endorsement gate (`pte._policy._endorsement`) at the call whose value needs a person.
    """

    def __init__(
        self, run_id: str, plan: Any, tools: list[str], expires_at: str, reason: str = "awaiting_approval"
    ) -> None:
        super().__init__(f"run {run_id} awaits a person's decision on plan {plan.hash} ({', '.join(tools)})")
        self.run_id = run_id
        self.plan = plan
        self.tools = tools
        self.expires_at = expires_at
        #: ``awaiting_approval`` or ``awaiting_endorsement`` (the ``run_paused`` record's reason).
        self.reason = reason
