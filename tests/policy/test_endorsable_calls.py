"""Endorsable calls (#38): a person who vouches for a write's values vouches that it runs.

Cookbook tasks written the way a careful model writes them -- read the bill, `require` that an
IBAN was found, pay by reference; book the hotel `when` its rating is above 4; invite the
address found on a page; create the event at the date found in e-mails -- compile as needing
endorsement under a deployment that makes the write endorsable, pause once showing the values
*and* the decisions that led to the call in words, and run once after one endorsement; without
an endorsement gate they are refused. Then the attacker's side: it can make such a call not
run, and make it run only through a person endorsing exactly what was shown; an endorsement of
one element, value or decision never covers another; decisions that cannot be shown at the call
stay refused. Last, a property test over generated plans and endorsing policies.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs
from pydantic import BaseModel

import pte
from pte import (
    AuditLog,
    Deployment,
    Engine,
    EngineConfig,
    Policy,
    ReasonCode,
    Registry,
    SigningKey,
    TrustedKeys,
    tool,
)

# private: endorsements built by hand (tamper tests); the executor's endorsement check itself
from pte._policy import EndorsementPoint, make_endorsement
from pte.audit import canonical_json, read_records
from pte.errors import RunPaused
from pte.policy import (
    EndorsementGate,
    EndorsementRequest,
    EndorsementStore,
    endorse,
    pending_endorsement,
)
from pte.runs import resume_file
from pte.testing import ScriptedModel

ATTACKER_IBAN = "GB33BUKB20201555555555"
BILL_IBAN = "DE44500105175407324931"
WORLD: dict[str, Any] = {}
DONE: list[tuple[str, dict[str, Any]]] = []


def _reset() -> None:
    WORLD.clear()
    WORLD.update(
        bill={"ibans": [BILL_IBAN], "totals": ["98.70"]},
        hotels=[{"name": "Sea View", "rating": 4.6}, {"name": "Dune", "rating": 3.1}],
        page=["carol@corp.example"],
        mails=[{"subject": "Retro", "date": "2026-12-03T10:00"}],
    )
    DONE.clear()


class Bill(BaseModel):
    ibans: list[str]
    totals: list[str]


class Hotel(BaseModel):
    name: str
    rating: float


class Hotels(BaseModel):
    hotels: list[Hotel]


class Page(BaseModel):
    emails: list[str]


class Mail(BaseModel):
    subject: str
    date: str


class Mails(BaseModel):
    emails: list[Mail]


class Ok(BaseModel):
    ok: bool


@tool(provenance="untrusted")
def read_bill(file: str) -> Bill:
    """The IBANs and totals found in a bill file (third-party text)."""
    return Bill(**WORLD["bill"])


@tool(provenance="untrusted")
def search_hotels(city: str) -> Hotels:
    """Hotels in a city with their ratings (third-party reviews)."""
    return Hotels(hotels=WORLD["hotels"])


@tool(provenance="untrusted")
def read_page(url: str) -> Page:
    """The e-mail addresses on a web page."""
    return Page(emails=WORLD["page"])


@tool(provenance="untrusted")
def search_emails(query: str) -> Mails:
    """E-mails matching a query."""
    return Mails(emails=WORLD["mails"])


def _write(name: str, **args: Any) -> Ok:
    DONE.append((name, args))
    return Ok(ok=True)


@tool(effect="write")
def send_money(recipient: str, amount: str) -> Ok:
    """Pay an IBAN."""
    return _write("send_money", recipient=recipient, amount=amount)


@tool(effect="write")
def reserve_hotel(hotel: str) -> Ok:
    """Reserve a hotel."""
    return _write("reserve_hotel", hotel=hotel)


@tool(effect="write")
def invite_user(email: str) -> Ok:
    """Invite a user to the workspace."""
    return _write("invite_user", email=email)


@tool(effect="write")
def create_calendar_event(title: str, start: str) -> Ok:
    """Create a calendar event."""
    return _write("create_calendar_event", title=title, start=start)


REGISTRY = Registry(
    [
        read_bill,
        search_hotels,
        read_page,
        search_emails,
        send_money,
        reserve_hotel,
        invite_user,
        create_calendar_event,
    ]
)
WRITES = ("send_money", "reserve_hotel", "invite_user", "create_calendar_event")
CALL_ENDORSABLE = {"pte_policy": "1", "tools": {name: {"on_violation": "endorse"} for name in WRITES}}
PARAM_ENDORSABLE = {
    "pte_policy": "1",
    "tools": {
        "send_money": {"on_violation": {"recipient": "endorse", "amount": "endorse"}},
        "reserve_hotel": {"on_violation": {"hotel": "endorse"}},
        "invite_user": {"on_violation": {"email": "endorse"}},
        "create_calendar_event": {"on_violation": {"start": "endorse"}},
    },
}


def ref(text: str) -> dict[str, str]:
    return {"$ref": text}


# The plans a careful model writes (descriptive ids, its own guards).
PAY_BILL: dict[str, Any] = {
    "pte_plan": "1",
    "steps": [
        {"id": "bill", "tool": "read_bill", "args": {"file": "bill-december.txt"}},
        {"id": "has_iban", "require": {"nonempty": ref("bill/ibans")}, "message": "no IBAN in the bill"},
        {"id": "has_total", "require": {"nonempty": ref("bill/totals")}, "message": "no total in the bill"},
        {
            "id": "pay_bill",
            "tool": "send_money",
            "args": {"recipient": ref("bill/ibans/0"), "amount": ref("bill/totals/0")},
        },
    ],
    "result": ref("pay_bill/ok"),
}
BOOK_HOTEL: dict[str, Any] = {
    "pte_plan": "1",
    "steps": [
        {"id": "candidates", "tool": "search_hotels", "args": {"city": "Paris"}},
        {"id": "has_hotel", "require": {"nonempty": ref("candidates/hotels")}, "message": "no hotel found"},
        {
            "id": "book_best",
            "tool": "reserve_hotel",
            "args": {"hotel": ref("candidates/hotels/0/name")},
            "when": {"gt": [ref("candidates/hotels/0/rating"), 4]},
            "default": None,
        },
    ],
    "result": ref("book_best"),
}
INVITE: dict[str, Any] = {
    "pte_plan": "1",
    "steps": [
        {"id": "team_page", "tool": "read_page", "args": {"url": "https://corp.example/team"}},
        {
            "id": "found",
            "require": {"nonempty": ref("team_page/emails")},
            "message": "no address on the page",
        },
        {"id": "invite_dora", "tool": "invite_user", "args": {"email": ref("team_page/emails/0")}},
    ],
    "result": ref("invite_dora/ok"),
}
EVENT: dict[str, Any] = {
    "pte_plan": "1",
    "steps": [
        {"id": "retro_mails", "tool": "search_emails", "args": {"query": "retro date"}},
        {"id": "has_date", "require": {"nonempty": ref("retro_mails/emails")}, "message": "no date found"},
        {
            "id": "create_retro",
            "tool": "create_calendar_event",
            "args": {"title": "Retro", "start": ref("retro_mails/emails/0/date")},
        },
    ],
    "result": ref("create_retro/ok"),
}
INVITE_EACH: dict[str, Any] = {
    "pte_plan": "1",
    "steps": [
        {"id": "team_page", "tool": "read_page", "args": {"url": "https://corp.example/team"}},
        {
            "id": "invite_each",
            "tool": "invite_user",
            "args": {"email": ref("team_page/emails/*")},
            "for_each": ref("team_page/emails"),
            "max_items": 10,
        },
    ],
    "result": None,
}
TASKS: dict[str, tuple[dict[str, Any], tuple[str, dict[str, Any]]]] = {
    "pay the bill": (PAY_BILL, ("send_money", {"recipient": BILL_IBAN, "amount": "98.70"})),
    "book the hotel": (BOOK_HOTEL, ("reserve_hotel", {"hotel": "Sea View"})),
    "invite the address": (INVITE, ("invite_user", {"email": "carol@corp.example"})),
    "create the event": (EVENT, ("create_calendar_event", {"title": "Retro", "start": "2026-12-03T10:00"})),
}


@pytest.fixture(autouse=True)
def _world() -> None:
    _reset()


@pytest.fixture
def signer() -> SigningKey:
    return SigningKey.generate()


@pytest.fixture
def gate(tmp_path: Path, signer: SigningKey) -> EndorsementGate:
    return EndorsementGate(EndorsementStore(tmp_path / "e.jsonl"), keys=TrustedKeys([signer.public_key]))


def start(
    log: Path,
    plan: dict[str, Any],
    gate: EndorsementGate | None,
    policy: dict[str, Any] = CALL_ENDORSABLE,
    **config: Any,
) -> pte.RunResult | None:
    engine = Engine(
        REGISTRY,
        ScriptedModel(planner=[plan]),
        config=EngineConfig(max_replans=0, llm_answer=False, **config),
        policy=Policy.from_registry(REGISTRY).with_document(policy),
        endorsement=gate,
    )
    with AuditLog(log) as audit:
        try:
            return engine.run("Do the task.", audit)
        except RunPaused:
            return None


def resume(
    log: Path, gate: EndorsementGate, policy: dict[str, Any] = CALL_ENDORSABLE
) -> pte.RunResult | None:
    deployment = Deployment.of(policy=Policy.from_registry(REGISTRY).with_document(policy), endorsements=gate)
    try:
        return resume_file(log, REGISTRY, deployment=deployment)
    except RunPaused:
        return None


def waiting(log: Path) -> EndorsementRequest:
    request = pending_endorsement(read_records(log))
    assert request is not None
    return request


# --- the cookbook tasks ------------------------------------------------------------------------


@pytest.mark.parametrize("policy", [CALL_ENDORSABLE, PARAM_ENDORSABLE], ids=["call", "parameters"])
@pytest.mark.parametrize("task", sorted(TASKS))
def test_a_guarded_task_pauses_once_and_runs_once_after_one_endorsement(
    tmp_path: Path, gate: EndorsementGate, signer: SigningKey, task: str, policy: dict[str, Any]
) -> None:
    plan, done = TASKS[task]
    log = tmp_path / "run.jsonl"
    assert start(log, plan, gate, policy) is None
    assert DONE == []
    request = waiting(log)
    assert request.decisions, request.describe()  # the guard that decided the call is shown
    shown = request.describe()
    assert "runs because" in shown and "(untrusted)" in shown
    endorse(gate.store, request, "alice", signing_key=signer)
    result = resume(log, gate, policy)
    assert result is not None and result.status == "succeeded", result and result.message
    assert [done] == DONE
    assert [r["type"] for r in read_records(log)].count("endorsement") == 1
    assert pte.verify(log).ok


@pytest.mark.parametrize("task", sorted(TASKS))
def test_without_an_endorsement_gate_the_guarded_task_is_refused(tmp_path: Path, task: str) -> None:
    result = start(tmp_path / "run.jsonl", TASKS[task][0], None)
    assert result is not None and result.reason is ReasonCode.POLICY_VIOLATION, result and result.message
    assert DONE == []
    # The values alone endorsable: the guard that decides the call is still refused without a gate.
    result = start(tmp_path / "params.jsonl", TASKS[task][0], None, PARAM_ENDORSABLE)
    assert result is not None and result.reason is ReasonCode.POLICY_VIOLATION


def test_the_person_sees_the_decisions_in_words_with_their_values(
    tmp_path: Path, gate: EndorsementGate
) -> None:
    start(tmp_path / "bill.jsonl", PAY_BILL, gate)
    request = waiting(tmp_path / "bill.jsonl")
    assert dict(request.values) == {"recipient": BILL_IBAN, "amount": "98.70"}
    assert request.decisions[0].startswith("runs because the require 'has_iban' held: bill/ibans is nonempty")
    assert "1 element(s); from bill/ibans ← read_bill (untrusted)" in request.decisions[0]
    start(tmp_path / "hotel.jsonl", BOOK_HOTEL, gate)
    request = waiting(tmp_path / "hotel.jsonl")
    words = request.decisions
    assert any("candidates/hotels/0/rating = 4.6" in w and "> 4" in w for w in words), words
    # `pte endorse` shows the request as recorded (its describe()); the report shows it too.
    assert all(w in request.describe() for w in words)
    report = pte.runs.render_report(tmp_path / "hotel.jsonl")
    assert "runs because its condition held: candidates/hotels/0/rating = 4.6" in report


# --- what the attacker can and cannot do -----------------------------------------------------------


def test_the_attacker_can_make_the_call_not_run(tmp_path: Path, gate: EndorsementGate) -> None:
    WORLD["hotels"] = [{"name": "Sea View", "rating": 2.0}]
    result = start(tmp_path / "hotel.jsonl", BOOK_HOTEL, gate)
    assert result is not None and result.ok and DONE == []  # skipped: nobody was asked
    WORLD["bill"] = {"ibans": [], "totals": []}
    result = start(tmp_path / "bill.jsonl", PAY_BILL, gate)
    assert result is not None and result.status == "condition_not_met" and DONE == []


def test_an_endorsement_of_the_values_alone_does_not_cover_the_decisions(
    tmp_path: Path, gate: EndorsementGate, signer: SigningKey
) -> None:
    log = tmp_path / "run.jsonl"
    start(log, PAY_BILL, gate)
    request = waiting(log)
    # A person shown only the values (the hash of the values, as before #38) vouched for less.
    values_only = hashlib.sha256(canonical_json(dict(request.values)).encode()).hexdigest()
    gate.store.add(
        make_endorsement(request.run_id, request.step_id, None, values_only, "mallory", signing_key=signer)
    )
    assert resume(log, gate) is None and DONE == []
    assert "it is about another value" in read_records(log)[-1]["message"]


def test_an_endorsement_of_another_run_or_decision_never_counts(
    tmp_path: Path, gate: EndorsementGate, signer: SigningKey
) -> None:
    first, second = tmp_path / "one.jsonl", tmp_path / "two.jsonl"
    start(first, BOOK_HOTEL, gate)
    endorse(gate.store, waiting(first), "alice", signing_key=signer)
    # The same plan, another run where the attacker's rating reads otherwise: another decision.
    WORLD["hotels"] = [{"name": "Sea View", "rating": 4.9}]
    start(second, BOOK_HOTEL, gate)
    assert waiting(second).value_hash != waiting(first).value_hash
    assert resume(second, gate) is None and DONE == []


def test_a_for_each_over_an_untrusted_list_needs_one_endorsement_per_element(
    tmp_path: Path, gate: EndorsementGate, signer: SigningKey
) -> None:
    WORLD["page"] = ["a@corp.example", "b@corp.example", "c@corp.example"]
    log = tmp_path / "run.jsonl"
    assert start(log, INVITE_EACH, gate) is None
    seen = []
    for index in range(3):
        request = waiting(log)
        assert request.element == index
        assert f"element {index + 1} of 3 of team_page/emails (untrusted list" in request.decisions[-1]
        seen.append(request.value_hash)
        # The endorsement of the previous element is in the store: it does not cover this one.
        assert len(DONE) == index
        endorse(gate.store, request, "alice", signing_key=signer)
        result = resume(log, gate)
    assert result is not None and result.ok, result and result.message
    assert [args["email"] for _, args in DONE] == WORLD["page"]
    assert len(set(seen)) == 3
    assert [r["type"] for r in read_records(log)].count("endorsement") == 3


def test_decisions_that_cannot_be_shown_at_the_call_stay_refused(
    tmp_path: Path, gate: EndorsementGate
) -> None:
    # A later stage decided by an earlier stage's untrusted data.
    stage1 = {
        "pte_plan": "1",
        "steps": [
            {"id": "team_page", "tool": "read_page", "args": {"url": "https://corp.example/team"}},
            {"id": "found", "require": {"nonempty": ref("team_page/emails")}, "message": "none"},
        ],
        "continue": {"n": 1},
    }
    stage2 = {
        "pte_plan": "1",
        "steps": [{"id": "inv", "tool": "invite_user", "args": {"email": "ops@corp.example"}}],
    }
    engine = Engine(
        REGISTRY,
        ScriptedModel(planner=[stage1], stage=[stage2]),
        config=EngineConfig(max_replans=0, llm_answer=False),
        policy=Policy.from_registry(REGISTRY).with_document(CALL_ENDORSABLE),
        endorsement=gate,
    )
    with AuditLog(tmp_path / "stages.jsonl") as audit:
        result = engine.run("Invite ops if the page lists anyone.", audit)
    assert result.reason is ReasonCode.POLICY_VIOLATION, result.message
    assert "an earlier stage or plan of the run" in (result.message or "")
    # A replan triggered by an untrusted failure (the page breaks its reader as its author likes),
    # handles mode or shown: refused, though the replanner's invite is a literal.
    for planner_data in ("handles", "shown"):
        WORLD["page"] = "not a list"
        first = {"pte_plan": "1", "steps": [INVITE["steps"][0]], "result": ref("team_page/emails")}
        again = {"pte_plan": "1", "steps": [stage2["steps"][0]], "result": ref("inv/ok")}
        engine = Engine(
            REGISTRY,
            ScriptedModel(planner=[first], replanner=[again]),
            config=EngineConfig(max_replans=1, repair=False, llm_answer=False, planner_data=planner_data),
            policy=Policy.from_registry(REGISTRY).with_document(CALL_ENDORSABLE),
            endorsement=gate,
        )
        with AuditLog(tmp_path / f"replan-{planner_data}.jsonl") as audit:
            result = engine.run("Invite the team.", audit)
        assert result.reason is ReasonCode.POLICY_VIOLATION, result.message
    assert DONE == []


# --- the property ------------------------------------------------------------------------------------


@hs.composite
def guarded_plans(draw: hs.DrawFn) -> tuple[dict[str, Any], dict[str, Any]]:
    """A model's plan over the page (untrusted): maybe a require, then an invite with maybe a
    `when` and a `for_each` on it, its address from the page or a literal; and a policy that
    makes the call, its parameter or nothing endorsable."""
    steps: list[dict[str, Any]] = [{"id": "team_page", "tool": "read_page", "args": {"url": "u"}}]
    if draw(hs.booleans()):
        steps.append({"id": "found", "require": {"nonempty": ref("team_page/emails")}, "message": "none"})
    write: dict[str, Any] = {"id": "inv", "tool": "invite_user"}
    each = draw(hs.booleans())
    if each:
        write["for_each"] = ref("team_page/emails")
        write["max_items"] = 10
    source = draw(hs.sampled_from(["literal", "page", "each"] if each else ["literal", "page"]))
    write["args"] = {
        "email": {
            "literal": "ops@corp.example",
            "page": ref("team_page/emails/0"),
            "each": ref("team_page/emails/*"),
        }[source]
    }
    if draw(hs.booleans()):
        write["when"] = {"eq": [ref("team_page/emails/0"), "x@corp.example"]}
        write["default"] = None
    steps.append(write)
    policy = draw(hs.sampled_from([CALL_ENDORSABLE, PARAM_ENDORSABLE, {"pte_policy": "1", "tools": {}}]))
    return {"pte_plan": "1", "steps": steps, "result": None}, policy


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    case=guarded_plans(), emails=hs.lists(hs.sampled_from(["x@corp.example", "y@corp.example"]), max_size=3)
)
def test_a_call_runs_only_with_its_labels_allowed_or_bound_by_a_consumed_endorsement(
    tmp_path_factory: pytest.TempPathFactory, case: tuple[dict[str, Any], dict[str, Any]], emails: list[str]
) -> None:
    plan, policy = case
    _reset()
    WORLD["page"] = emails
    base = tmp_path_factory.mktemp("prop")
    signer = SigningKey.generate()
    gate = EndorsementGate(EndorsementStore(base / "e.jsonl"), keys=TrustedKeys([signer.public_key]))
    log = base / "run.jsonl"
    check = Policy.from_registry(REGISTRY).with_document(policy).check(endorsable=True)
    try:
        pte.compile_plan(json.dumps(plan), REGISTRY, checks=[check])
        refused = False
    except pte.PlanRejected:
        refused = True
    result = start(log, plan, gate, policy)
    shown: list[EndorsementRequest] = []
    for _ in range(5):  # a person endorses whatever is shown, one call at a time
        if result is not None:
            break
        request = waiting(log)
        shown.append(request)
        endorse(gate.store, request, "alice", signing_key=signer)
        result = resume(log, gate, policy)
    records = read_records(log)
    consumed = [r for r in records if r["type"] == "endorsement"]
    if refused:
        assert DONE == []  # refused plans run nothing
        return
    decided = check.decisions["inv"]
    value_labels = check.input_labels["inv"]
    clean = (decided | value_labels) <= {"request", "trusted"}
    if clean:
        assert consumed == [] and shown == []
        return
    # Every call that ran consumed an endorsement binding exactly the values and decisions shown.
    assert len(consumed) == len(DONE)
    for record, request, (_, args) in zip(consumed, shown, DONE, strict=False):
        assert record["value_hash"] == request.value_hash
        assert (record["step_id"], record["element"]) == (request.step_id, request.element)
        assert dict(request.values) == args  # what ran is what the person saw
        assert bool(request.decisions) == ("untrusted" in decided)
        words = {"values": args, "decisions": list(request.decisions)} if request.decisions else args
        assert request.value_hash == hashlib.sha256(canonical_json(words).encode()).hexdigest()


def test_the_planner_is_told_an_endorsable_write_may_keep_its_guards() -> None:
    # private: the prompts' text, white-box
    from pte._run import planner_messages

    policy = Policy.from_registry(REGISTRY).with_document(CALL_ENDORSABLE)
    prompt = planner_messages("Pay the bill.", REGISTRY, policy)[0]["content"]
    # The label rules' line on endorsable parameters says they may sit under conditions over
    # untrusted data (which a guarded one may not), and that the person is shown those too.
    line = next(line for line in prompt.split("\n") if '"endorsable p"' in line)
    endorsable = line[line.index('"endorsable p"') :]
    for word in ('"when"', '"require"', '"for_each"', "over untrusted data", "shown", "conditions"):
        assert word in endorsable, word
    assert "endorsable amount, recipient" in prompt  # the whole call: every parameter


# --- endorsing from Python with public names only (#38) --------------------------------------------


def test_endorse_and_resume_from_python_with_the_pem_files_pte_keys_writes(tmp_path: Path) -> None:
    from pte.cli import main

    private, public = tmp_path / "alice.key", tmp_path / "approvers.pub"
    assert main(["keys", "generate", "--private", str(private), "--public", str(public)]) == 0
    gate = pte.policy.EndorsementGate(
        pte.policy.EndorsementStore(tmp_path / "e.jsonl"), keys=pte.TrustedKeys.load(public)
    )
    registry = REGISTRY
    policy = Policy.from_registry(registry).with_document(CALL_ENDORSABLE)
    engine = Engine(
        registry,
        ScriptedModel(planner=[PAY_BILL]),
        config=EngineConfig(llm_answer=False),
        policy=policy,
        endorsement=gate,
    )
    store = pte.stores.SQLiteStore(tmp_path / "runs.db")
    paused = pte.deployment.run_in_store(engine, store, run_id="bill-1", request="Pay the bill.")
    assert isinstance(paused, pte.deployment.PausedRun) and paused.status == "awaiting_endorsement"
    request = pte.policy.pending_endorsement(store.records("bill-1"))
    assert request is not None
    pte.policy.endorse(gate.store, request, "alice", signing_key=pte.SigningKey.load(private))
    result = pte.deployment.resume_run(store, "bill-1", registry, policy=policy, endorsements=gate)
    assert isinstance(result, pte.RunResult)
    assert result.ok, result.message
    assert len(DONE) == 1
    # A key file that is not what `pte keys generate` writes is a clear error, not a traceback.
    with pytest.raises(pte.errors.KeyFileError):
        pte.TrustedKeys.load(private)


class _RecordingGate:
    """The gate of an endorsement point, reduced to noting the calls `check_call` hands it."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def at_call(self, request: Any, audit: Any) -> None:
        self.calls.append(
            request.step_id if request.element is None else f"{request.step_id}[{request.element}]"
        )


_step_ids = hs.sampled_from(["pay", "pay[0]", "pay[12]", "notify", "notify[1]", "pay[x]", "pay]", "[0]"])


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(
    needs=hs.dictionaries(
        hs.sampled_from(["pay", "notify", "other"]), hs.sampled_from([{}, {"amount": "why"}])
    ),
    step_ids=hs.lists(_step_ids, max_size=6),
)
def test_the_executor_skips_the_endorsement_check_exactly_where_it_has_nothing_to_do(
    needs: dict[str, dict[str, str]], step_ids: list[str]
) -> None:
    """`calls_to_check` (the steps the executor checks) holds exactly the steps `check_call`
    does something for (a run without endorsable calls has no gate: nothing is checked)."""
    gate = _RecordingGate()
    point = EndorsementPoint(gate, pte.AuditLog(), "a" * 64, needs)
    checked = point.calls_to_check(step_ids)
    for step_id in step_ids:
        point.check_call(step_id, "pay_bill", {"amount": 1}, {}, (None,))
    assert set(gate.calls) == checked
