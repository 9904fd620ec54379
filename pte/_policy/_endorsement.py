"""Endorsements: a person vouches for one exact value at one call of one run, once.

A deployment may mark a guarded sink ``on_violation: "endorse"`` in its policy file
(`pte._policy._document`). A plan whose only violations are values reaching such sinks of ``write``
tools compiles with those steps listed as needing endorsement (``plan_accepted.needs_endorsement``).
The run executes up to the first such call and pauses *there*: ``run_paused`` (reason
``awaiting_endorsement``) carries the request, i.e. the exact argument values the call
would receive, the hash of those values and, per parameter, the policy's provenance chain
in words. A person then

- endorses: an `Endorsement` signed with the approver's Ed25519 key (`pte._core._signing`, the
  same keys as approvals), bound to the run id, the plan step id, the element index (a
  ``for_each`` element; None otherwise) and the SHA-256 of the canonical JSON of the values;
- or rejects: the run ends ``failed_closed(endorsement_rejected)``.

Resuming the run re-drives its verified records and reaches the same call with the same
values: the endorsement that binds exactly them counts, is *consumed* (an ``endorsement``
record in the run's own chain, anchored like every record, and a consumption line in the
endorsement store, under an exclusive lock, before the call starts) and the write runs. An
endorsement binds one value at one call of one run: another value, another step, another
element or another run never matches it, and a second run cannot consume it again. A
resume of the same run re-driving the same call finds its own consumption (the call is
recorded, so it is not made again). Replay re-checks every recorded endorsement's
signature (under the trusted approval keys when given) and its binding to the replayed
values.

The store is a JSON Lines file: endorsements and rejections (``{"pte_endorsement": "1",
...}``) and consumptions (``{"consumed_endorsement": ID, ...}``). The signed message is
``pte-endorsement-v1`` followed by ``\\n`` and the canonical JSON of every field but the
public key and the signature.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal, cast

from pte._audit import RecordSink
from pte._audit import records as rec
from pte._core import (
    EndorsementStoreError,
    FailedClosed,
    ReasonCode,
    RunPaused,
    SignedDecision,
    SigningKey,
    TrustedKeys,
    append_line,
    array_index,
    canonical_json,
    check_signature_fields,
    read_shared,
    sign_decision,
)
from pte._core import strict_json as strict_json
from pte._policy._call_decisions import call_hash, render_decisions

__all__ = [
    "ENDORSEMENT_FORMAT",
    "Endorsement",
    "EndorsementGate",
    "EndorsementRejected",
    "EndorsementRequest",
    "EndorsementStore",
    "endorse",
    "make_endorsement",
    "pending_endorsement",
    "value_hash",
]

ENDORSEMENT_FORMAT = "1"
#: Why a call may not consume its own endorsement again (the run then ends needs_review).
CONSUMED_BY_THIS_CALL = (
    "was already consumed by this call, and the log no longer records that use: the write may "
    "have run; check its effect before going on"
)
_DOMAIN = b"pte-endorsement-v1\n"
#: How long a paused run waits for an endorsement by default.
DEFAULT_TTL = timedelta(hours=24)

_HASH_RE = re.compile(r"[0-9a-f]{64}")
_RUN_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")
_STEP_RE = re.compile(r"[a-z][a-z0-9_]{0,63}")
_TIME_RE = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?Z", re.ASCII)  # as fromisoformat reads
_FIELDS = frozenset(
    {
        "pte_endorsement",
        "run",
        "step_id",
        "element",
        "value_hash",
        "decision",
        "by",
        "at",
        "note",
        "key_id",
        "public_key",
        "signature",
    }
)
_CONSUMED = frozenset({"consumed_endorsement", "run_id", "step_id", "element", "at"})

Decision = Literal["endorsed", "rejected"]


class EndorsementRejected(FailedClosed):
    """A person rejected the value a paused run waited with at a call."""

    def __init__(self, message: str, path: str = "$") -> None:
        super().__init__(ReasonCode.ENDORSEMENT_REJECTED, message, path)


def _now() -> datetime:
    return datetime.now(UTC)


def _format_time(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse_time(text: Any) -> datetime:
    """An ISO-8601 UTC time of a record or decision (ValueError when it is none)."""
    if not isinstance(text, str):
        raise ValueError("not a time")
    parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def value_hash(values: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of the canonical JSON of the endorsed values (parameter -> value)."""
    return hashlib.sha256(canonical_json(dict(values)).encode("utf-8")).hexdigest()


def split_element(step_id: str) -> tuple[str, int | None]:
    """``pay[2]`` -> (``pay``, 2): a for_each element; ``pay`` -> (``pay``, None)."""
    if step_id.endswith("]") and "[" in step_id:
        base, token = step_id[:-1].split("[", 1)
        index = array_index(token)  # the executor writes `pay[2]`, never `pay[02]`
        if index is not None:
            return base, index
    return step_id, None


@dataclass(frozen=True)
class Endorsement(SignedDecision):
    """One person's decision on one value at one call (`run`, `step_id`, `element`) of one run."""

    run: str
    step_id: str
    element: int | None
    value_hash: str
    decision: Decision
    by: str
    at: str
    note: str | None = None
    key_id: str | None = None
    public_key: str | None = None
    signature: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.run, str) or not _RUN_RE.fullmatch(self.run):
            raise ValueError(f"run must be a run id, not {self.run!r}")
        if not isinstance(self.step_id, str) or not _STEP_RE.fullmatch(self.step_id):
            raise ValueError(f"step_id must be a plan step id, not {self.step_id!r}")
        if self.element is not None and (type(self.element) is not int or self.element < 0):
            raise ValueError(f"element must be a non-negative integer or null, not {self.element!r}")
        if not isinstance(self.value_hash, str) or not _HASH_RE.fullmatch(self.value_hash):
            raise ValueError("value_hash must be 64 lowercase hex digits")
        if self.decision not in ("endorsed", "rejected"):
            raise ValueError(f"decision must be 'endorsed' or 'rejected', not {self.decision!r}")
        if not isinstance(self.by, str) or not self.by.strip() or any(ord(c) < 0x20 for c in self.by):
            raise ValueError("by must name the person (a non-empty string without control characters)")
        if not isinstance(self.at, str) or not _TIME_RE.fullmatch(self.at):
            raise ValueError("at must be an ISO-8601 UTC time such as 2026-11-01T09:30:00Z")
        if self.note is not None and not isinstance(self.note, str):
            raise ValueError("note must be a string or null")
        check_signature_fields(self.key_id, self.public_key, self.signature)

    @property
    def id(self) -> str:
        """SHA-256 of its canonical JSON: what consumption lines and records name."""
        return hashlib.sha256(canonical_json(self.to_dict()).encode()).hexdigest()

    def message(self) -> bytes:
        """The exact bytes that are signed."""
        fields = {k: v for k, v in self.to_dict().items() if k not in ("public_key", "signature")}
        return _DOMAIN + canonical_json(fields).encode("utf-8")

    def binds(self, run: str, step_id: str, element: int | None, hashed: str) -> bool:
        """Whether it is about exactly this call of this run with exactly these values."""
        return (
            self.run == run
            and self.step_id == step_id
            and self.element == element
            and self.value_hash == hashed
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "pte_endorsement": ENDORSEMENT_FORMAT,
            "run": self.run,
            "step_id": self.step_id,
            "element": self.element,
            "value_hash": self.value_hash,
            "decision": self.decision,
            "by": self.by,
            "at": self.at,
            "note": self.note,
            "key_id": self.key_id,
            "public_key": self.public_key,
            "signature": self.signature,
        }

    @classmethod
    def from_dict(cls, data: Any) -> Endorsement:
        """Parse the store's JSON form (ValueError when malformed)."""
        if not isinstance(data, dict) or set(data) != _FIELDS:
            raise ValueError(f"an endorsement has exactly the keys {sorted(_FIELDS)}")
        if data["pte_endorsement"] != ENDORSEMENT_FORMAT:
            raise ValueError(f"unknown endorsement format {data['pte_endorsement']!r}")
        return cls(**{k: v for k, v in data.items() if k != "pte_endorsement"})

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Endorsement:
        """Rebuild one from an ``endorsement`` audit record (ValueError when malformed)."""
        fields: dict[str, Any] = {k: record.get(k) for k in _FIELDS - {"pte_endorsement"}}
        return cls(**fields)


def make_endorsement(
    run: str,
    step_id: str,
    element: int | None,
    values_hash: str,
    by: str,
    *,
    reject: bool = False,
    note: str | None = None,
    signing_key: SigningKey | None = None,
    at: datetime | None = None,
) -> Endorsement:
    """A decision on the value hashed `values_hash` at call (`step_id`, `element`) of run `run`."""
    fields: dict[str, Any] = {
        "run": run,
        "step_id": step_id,
        "element": element,
        "value_hash": values_hash,
        "decision": "rejected" if reject else "endorsed",
        "by": by,
        "at": _format_time(at if at is not None else _now()),
        "note": note,
    }
    return sign_decision(Endorsement, fields, signing_key)


# --- the store ----------------------------------------------------------------------------------


@dataclass
class _Contents:
    endorsements: list[Endorsement] = field(default_factory=list)
    #: endorsement id -> (run id, step id, element) that consumed it.
    consumed: dict[str, tuple[str, str, int | None]] = field(default_factory=dict)


class EndorsementStore:
    """A JSON Lines file of endorsements, rejections and consumptions. A missing file holds none.

    Reads take a shared lock, writes an exclusive one (``flock``), so a consumption is checked
    and recorded atomically across processes. A malformed line makes every read fail
    (`EndorsementStoreError`), and the run then waits rather than trusting anything.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()

    def _parse(self, text: str) -> _Contents:
        contents = _Contents()
        for number, line in enumerate(text.split("\n"), start=1):
            if not line.strip():
                continue
            try:
                data = strict_json.loads(line)
                if isinstance(data, dict) and "consumed_endorsement" in data:
                    if set(data) != _CONSUMED:
                        raise ValueError(f"a consumption has exactly the keys {sorted(_CONSUMED)}")
                    contents.consumed.setdefault(
                        str(data["consumed_endorsement"]),
                        (str(data["run_id"]), str(data["step_id"]), data["element"]),
                    )
                else:
                    contents.endorsements.append(Endorsement.from_dict(data))
            except (ValueError, TypeError) as exc:
                raise EndorsementStoreError(
                    f"endorsement store {str(self.path)!r} line {number}: {exc}"
                ) from None
        return contents

    def contents(self) -> _Contents:
        try:
            text = read_shared(self.path)
        except (OSError, UnicodeDecodeError) as exc:
            raise EndorsementStoreError(f"cannot read endorsement store {str(self.path)!r}: {exc}") from None
        return _Contents() if text is None else self._parse(text)

    def __iter__(self) -> Iterator[Endorsement]:
        return iter(self.contents().endorsements)

    def _append(self, line: str, check: Callable[[_Contents], bool] | None = None) -> None:
        with self._lock:
            try:
                append_line(self.path, line, None if check is None else lambda text: check(self._parse(text)))
            except UnicodeDecodeError as exc:
                raise EndorsementStoreError(
                    f"cannot read endorsement store {str(self.path)!r}: {exc}"
                ) from None
            except OSError as exc:
                raise EndorsementStoreError(
                    f"cannot write endorsement store {str(self.path)!r}: {exc}"
                ) from None

    def add(self, endorsement: Endorsement) -> None:
        """Append one decision (fsynced)."""
        self._append(canonical_json(endorsement.to_dict()) + "\n")

    def consume(
        self,
        endorsement: Endorsement,
        run_id: str,
        step_id: str,
        element: int | None,
        *,
        again: bool = False,
    ) -> str | None:
        """Record that `endorsement` lets this call run now. None when it may: its first use, or
        `again` (the same call re-driven from its recorded records by resume, or a tool whose
        idempotency key makes a repeated call harmless) by the call that used it. Else why not:
        used by another call, or by this one while its use is no longer recorded
        (`CONSUMED_BY_THIS_CALL`: a cut log; like an approval, never a second live call)."""
        refused: list[str] = []
        call = (run_id, step_id, element)

        def check(contents: _Contents) -> bool:
            earlier = contents.consumed.get(endorsement.id)
            if earlier is None:
                return True
            if tuple(earlier) != call:
                refused.append(
                    f"endorsement by {endorsement.by} was already used "
                    f"(run {earlier[0]}, step {earlier[1]!r})"
                )
            elif not again:
                refused.append(f"endorsement by {endorsement.by} {CONSUMED_BY_THIS_CALL}")
            return False

        line = {
            "consumed_endorsement": endorsement.id,
            "run_id": run_id,
            "step_id": step_id,
            "element": element,
            "at": _format_time(_now()),
        }
        self._append(canonical_json(line) + "\n", check)
        return refused[0] if refused else None


# --- what the person sees -----------------------------------------------------------------------


@dataclass(frozen=True)
class EndorsementRequest:
    """What a paused run asks a person to endorse: exact values, their provenance, the call."""

    run_id: str
    plan_hash: str
    step_id: str
    element: int | None
    tool: str
    #: parameter -> the exact value the call would receive.
    values: Mapping[str, Any]
    value_hash: str
    #: parameter -> the policy's violation trace, in words (where the value comes from).
    provenance: Mapping[str, str]
    #: What decided that (and how often) the call runs, in words with its values, where that
    #: needs a person too (pte._policy._call_decisions); `value_hash` then covers them as well.
    decisions: tuple[str, ...] = ()
    #: The tool has an idempotency key (a repeated call is harmless): not shown, not recorded.
    recall: bool = field(default=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "plan_hash": self.plan_hash,
            "step_id": self.step_id,
            "element": self.element,
            "tool": self.tool,
            "values": dict(self.values),
            "value_hash": self.value_hash,
            "provenance": dict(self.provenance),
        }
        if self.decisions:
            out["decisions"] = list(self.decisions)
        return out

    @classmethod
    def from_record(cls, run_id: str, data: Mapping[str, Any]) -> EndorsementRequest:
        values = data.get("values")
        decisions = data.get("decisions") or []
        if not isinstance(decisions, list) or not all(isinstance(d, str) for d in decisions):
            raise ValueError("the request's decisions are not a list of sentences")
        if not isinstance(values, dict) or call_hash(values, decisions) != data.get("value_hash"):
            raise ValueError("the request's values (and decisions) do not hash to its value_hash")
        return cls(
            run_id,
            str(data.get("plan_hash")),
            str(data.get("step_id")),
            data.get("element"),
            str(data.get("tool")),
            values,
            str(data.get("value_hash")),
            dict(data.get("provenance") or {}),
            tuple(decisions),
        )

    def describe(self) -> str:
        """The request in words, for a person."""
        where = self.step_id + (f"[{self.element}]" if self.element is not None else "")
        lines = [f"run {self.run_id} waits at step {where} ({self.tool}) for an endorsement of:"]
        for param, value in self.values.items():
            lines.append(f"  {self.tool}.{param} = {canonical_json(value)}")
            why = self.provenance.get(param)
            if why:
                lines.append(f"    source: {why}")
        if self.decisions:
            lines.append(f"  and that {self.tool} runs here at all, decided by data only you can vouch for:")
            lines.extend(f"    {decision}" for decision in self.decisions)
        lines.append(f"  value hash {self.value_hash}")
        return "\n".join(lines)


def pending_endorsement(records: Sequence[Mapping[str, Any]]) -> EndorsementRequest | None:
    """The endorsement a run's (verified) records say it waits for; None when it waits for none."""
    if not records or records[-1].get("type") != "run_paused":
        return None
    last = records[-1]
    if last.get("reason") != "awaiting_endorsement" or not isinstance(last.get("endorsement"), dict):
        return None
    return EndorsementRequest.from_record(str(last.get("run_id")), last["endorsement"])


def endorse(
    store: EndorsementStore,
    request: EndorsementRequest,
    by: str,
    *,
    reject: bool = False,
    note: str | None = None,
    signing_key: SigningKey | None = None,
) -> Endorsement:
    """Record `by`'s decision on exactly what `request` shows (signed with `signing_key`)."""
    made = make_endorsement(
        request.run_id,
        request.step_id,
        request.element,
        request.value_hash,
        by,
        reject=reject,
        note=note,
        signing_key=signing_key,
    )
    store.add(made)
    return made


# --- the gate the executor calls ------------------------------------------------------------------


@dataclass(frozen=True)
class EndorsementPoint:
    """The run being executed: which calls need an endorsement, and where to record decisions."""

    gate: Any
    audit: RecordSink
    plan_hash: str
    #: step id -> {parameter: violation explanation}.
    needs: Mapping[str, Mapping[str, str]]
    #: The calls that consumed an endorsement (autonomy counts, `pte.RunResult`).
    endorsed: list[str] = field(default_factory=list)
    #: step id -> the decisions the person is shown with the call (`PolicyCheck.endorse_decisions`).
    decisions: Mapping[str, Sequence[Mapping[str, Any]]] = field(default_factory=dict)

    def calls_to_check(self, step_ids: Iterable[str]) -> frozenset[str]:
        """The ids among `step_ids` that `check_call` has work for: the steps (and the for_each
        elements of steps) this point names. The executor asks once per run and calls
        `check_call` for these steps only, so every other step pays nothing for it; a run
        without endorsable calls has no gate at all."""
        point = self
        named = {step for step, needs in point.needs.items() if needs}
        named.update(step for step, specs in point.decisions.items() if specs)
        return frozenset(step_id for step_id in step_ids if split_element(step_id)[0] in named)

    def check_call(
        self,
        step_id: str,
        tool: str,
        args: Mapping[str, Any],
        outputs: Mapping[str, Any] | None = None,
        hidden: Sequence[str | None] = (),
    ) -> None:
        """The executor's call gate (`pte._execution.CallGate`), asked before a call of the run is
        recorded and started: pause, refuse or let it run.
        `outputs`: the run's outputs so far (the decisions are shown with their values); `hidden`:
        arguments that are the engine's, not the plan's (an idempotency key)."""
        point = self
        base, element = split_element(step_id)
        needs = point.needs.get(base)
        specs = point.decisions.get(base)
        if not needs and not specs:
            return
        needs = needs or {}
        decisions = tuple(render_decisions(specs or (), element, outputs or {}))
        # Vouching that the call runs at all is vouching for all of it: every argument is shown.
        shown = [p for p in sorted(args) if p not in hidden] if decisions else sorted(needs)
        values = {param: args[param] for param in shown if param in args}
        request = EndorsementRequest(
            point.audit.run_id,
            point.plan_hash,
            base,
            element,
            tool,
            values,
            call_hash(values, decisions),
            {param: needs[param] for param in sorted(needs) if param in args},
            decisions,
            recall=any(key is not None for key in hidden),
        )
        point.gate.at_call(request, point.audit)
        point.endorsed.append(step_id)


class EndorsementGate:
    """The deployment's endorsement check, for `Engine(endorsement=...)`.

    At each call that needs endorsement it looks in `store` for a decision that binds this
    run, step, element and value hash, signed under one of `keys` (when configured; else
    unsigned decisions count too, a development setting). A rejection ends the run
    `endorsement_rejected`; an endorsement is consumed and recorded and the call runs;
    otherwise the run pauses (``run_paused``, `pte._deploy._runs.RunPaused`) and says why the
    decisions it found do not count.
    """

    def __init__(
        self,
        store: EndorsementStore,
        *,
        keys: TrustedKeys | None = None,
        ttl: timedelta = DEFAULT_TTL,
        clock: Callable[[], datetime] = _now,
    ) -> None:
        self.store = store
        self.keys = keys if keys else None
        self.ttl = ttl
        self.clock = clock
        #: (step id, element) -> until when each pause of the run being resumed waited there,
        #: in record order (`resuming`); empty for a new run.
        self.pauses: dict[tuple[str, int | None], list[datetime]] = {}

    def resuming(self, records: Sequence[Mapping[str, Any]]) -> EndorsementGate:
        """This gate for resuming a run with these (verified) records: a request expires when its
        pause says (``expires_at``), and a decision made for an expired request does not count."""
        gate = EndorsementGate(self.store, keys=self.keys, ttl=self.ttl, clock=self.clock)
        for record in records:
            asked = record.get("endorsement")
            if record.get("type") != "run_paused" or not isinstance(asked, Mapping):
                continue
            try:
                expires = _parse_time(record.get("expires_at"))
            except ValueError:
                continue  # a record the verified chain holds but that names no time: nothing to enforce
            gate.pauses.setdefault((str(asked.get("step_id")), asked.get("element")), []).append(expires)
        return gate

    def _late(self, made: Endorsement, request: EndorsementRequest) -> str | None:
        """Why `made` answers no request of this call that is still waiting (None: it may)."""
        waits = self.pauses.get((request.step_id, request.element), [])
        for earlier, later in itertools.pairwise(waits):
            asked_again = later - self.ttl  # when the later pause asked (its expiry is asked + ttl)
            if asked_again > earlier and _parse_time(made.at) < asked_again:
                return f"made for a request that expired at {_format_time(earlier)}"
        return None

    def _why_not(self, made: Endorsement) -> str | None:
        if self.keys is not None:
            if not made.signed:
                return "unsigned, while approval public keys are configured"
            if made.key_id not in self.keys:
                return f"signed by key {str(made.key_id)[:16]}…, which is not a trusted approval key"
            if not made.verify(self.keys):
                return "bad signature"
        elif made.signed and not made.self_consistent():
            return "bad signature"
        return None

    def at_call(self, request: EndorsementRequest, audit: RecordSink) -> None:
        try:
            contents = self.store.contents()
        except EndorsementStoreError as exc:
            contents, reasons = _Contents(), [str(exc)]
        else:
            reasons = []
        waits = self.pauses.get((request.step_id, request.element))
        if waits and not audit.replaying and self.clock() > waits[-1]:
            # The request expired when its pause said: nothing made for it counts; ask anew.
            expired = f"the request expired at {_format_time(waits[-1])}: endorse it again"
            self.pause(request, audit, [expired])
        for made in contents.endorsements:
            if (
                made.run != request.run_id
                or made.step_id != request.step_id
                or made.element != request.element
            ):
                continue
            if made.value_hash != request.value_hash:
                reasons.append(f"{made.by} ({made.at}): it is about another value ({made.value_hash[:12]}…)")
                continue
            why = self._why_not(made) or (None if audit.replaying else self._late(made, request))
            if why is not None:
                reasons.append(f"{made.by} ({made.at}): {why}")
                continue
            if made.decision == "rejected":
                audit.write(
                    rec.endorsement_rejected(
                        made.to_dict(), endorsement_id=made.id, signed=self.keys is not None
                    )
                )
                raise EndorsementRejected(
                    f"{made.by} rejected the value of {request.tool} at step {request.step_id!r}"
                    + (f": {made.note}" if made.note else "")
                )
            # Re-driven from its recorded records (resume), or harmless to repeat (an idempotency
            # key): the call that consumed it may pass again; run live once more, never.
            again = audit.replaying or request.recall
            used = self.store.consume(made, request.run_id, request.step_id, request.element, again=again)
            if used is not None and used.endswith(CONSUMED_BY_THIS_CALL):
                raise FailedClosed(
                    ReasonCode.NEEDS_REVIEW, f"step {request.step_id!r} ({request.tool}): {used}"
                )
            if used is not None:
                reasons.append(f"{made.by} ({made.at}): {used}")
                continue
            audit.write(rec.endorsement(made.to_dict(), endorsement_id=made.id, signed=self.keys is not None))
            return
        self.pause(request, audit, reasons)

    def pause(self, request: EndorsementRequest, audit: RecordSink, reasons: Sequence[str] = ()) -> None:
        expires_at = _format_time(self.clock() + self.ttl)
        where = request.step_id + (f"[{request.element}]" if request.element is not None else "")
        message = (
            f"{request.tool} at step {where} needs a person's endorsement of "
            f"{', '.join(request.values)}; waiting for a person (pte endorse, with the run's log or id) "
            f"until {expires_at}"
        )
        if reasons:
            message += "; not counted: " + "; ".join(reasons)
        audit.write(
            rec.run_paused(
                reason="awaiting_endorsement",
                plan_hash=request.plan_hash,
                tools=[request.tool],
                expires_at=expires_at,
                message=message,
                endorsement=request.to_dict(),
            )
        )
        audit.sync()
        raise RunPaused(
            request.run_id,
            cast(Any, _PlanRef(request.plan_hash)),
            [request.tool],
            expires_at,
            reason="awaiting_endorsement",
        )


@dataclass(frozen=True)
class _PlanRef:
    """What `RunPaused` reads of a plan: its hash."""

    hash: str
