"""Precise selection labels (issue #26, class 1): a selection's output carries the labels of the
fields it returns and of the fields its decision read, nothing else.

- a property test over generated chains of selections (filter, sort, extreme, first, take,
  pick, pluck, zip, join, concat, rank, count_by) on records whose fields carry mixed
  labels: the labels of what a reference reads are exactly the read field's labels, the
  decision fields' labels, the source's own (trusted) and the plan's literals (request);
- injection tests: an attacker who controls only an untrusted field cannot change which record
  a trusted-field selection picks (run with the attacker's values varied by hypothesis), and
  can when the selection reads that field, where the guarded sink then refuses the plan;
- a user's own tool declares the same with `pte.catalogue.Selection`.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

import pte
from pte import PlanRejected, Policy, ReasonCode, Registry, compile_plan, load_registry
from pte.errors import ToolRegistrationError

FIELDS = ("f0", "f1", "f2", "f3")


class Row(BaseModel):
    id: str
    f0: str
    f1: str
    f2: str
    f3: str


class Rows(BaseModel):
    rows: list[Row]


ROWS = [
    Row(id=f"r{i}", f0=f"a{i}", f1=f"b{3 - i}", f2=f"2024-0{i + 1}-01", f3=str(i * 7 % 5)) for i in range(4)
]


@pte.tool
def rows() -> Rows:
    """Rows with fields f0..f3 (labels per field come from the test's policy)."""
    return Rows(rows=ROWS)


@pte.tool(effect="write")
def sink(value: str) -> dict[str, str]:
    """A guarded write: under the default guarded policy it accepts request or trusted data only."""
    return {"got": value}


def _registry() -> Registry:
    registry = load_registry(["shaping", "containers"])
    registry.register(rows)
    registry.register(sink)
    return registry


REGISTRY = _registry()


def _policy(untrusted: frozenset[str]) -> Policy:
    fields = {f"/rows/*/{name}": "untrusted" for name in sorted(untrusted)}
    doc = {"pte_policy": "1", "tools": {"rows": {"output": "trusted", "fields": fields}}}
    return Policy.from_registry(REGISTRY).with_document(doc)


def _labels(policy: Policy, steps: list[dict[str, Any]], pointer: str) -> set[str]:
    check = policy.check()
    compile_plan(json.dumps({"pte_plan": "1", "steps": steps}), REGISTRY, checks=[check])
    step_id, _, rest = pointer.partition("/")
    return set(check.trees[step_id].select(tuple(rest.split("/")) if rest else ()))


def _label(name: str, untrusted: frozenset[str]) -> set[str]:
    return {"untrusted"} if name in untrusted else {"trusted"}


# --- the property ---------------------------------------------------------------------------------

#: One selection in a chain: (tool, the argument naming the decision field or None, extra args).
_LIST_OPS: dict[str, tuple[str | None, dict[str, Any]]] = {
    "filter_records": ("field", {"op": "ne", "value": "zzz"}),
    "sort_records": ("by", {"descending": True}),
    "take": (None, {"n": 3}),
}
_ONE_OPS: dict[str, tuple[str | None, dict[str, Any]]] = {
    "extreme_by": ("field", {"which": "max"}),
    "first": (None, {}),
}


@st.composite
def chains(draw: st.DrawFn) -> tuple[list[dict[str, Any]], str, set[str], frozenset[str]]:
    """(steps, the reference read at the end, the decision fields, the untrusted fields)."""
    untrusted = frozenset(draw(st.sets(st.sampled_from(FIELDS))))
    steps: list[dict[str, Any]] = [{"id": "source_rows", "tool": "rows", "args": {}}]
    current = "source_rows/rows"
    decided: set[str] = set()
    for i in range(draw(st.integers(0, 3))):
        tool = draw(st.sampled_from(sorted(_LIST_OPS)))
        param, extra = _LIST_OPS[tool]
        args: dict[str, Any] = {"records": {"$ref": current}, **extra}
        if param is not None:
            args[param] = draw(st.sampled_from(FIELDS))
            decided.add(args[param])
        steps.append({"id": f"selection_{i}", "tool": tool, "args": args})
        current = f"selection_{i}/records"
    returned = draw(st.sampled_from(FIELDS))
    ending = draw(st.sampled_from(["one", "pick", "pluck", "zip", "join", "concat", "rank", "count_by"]))
    rows_ref = {"$ref": current}
    if ending == "one":
        tool = draw(st.sampled_from(sorted(_ONE_OPS)))
        param, extra = _ONE_OPS[tool]
        args = {"records": {"$ref": current}, **extra}
        if param is not None:
            args[param] = draw(st.sampled_from(FIELDS))
            decided.add(args[param])
        steps.append({"id": "chosen_row", "tool": tool, "args": args})
        pointer = f"chosen_row/record/{returned}"
    elif ending == "pick":
        kept = draw(st.lists(st.sampled_from(FIELDS), min_size=1, unique=True))
        returned = kept[0]
        steps.append({"id": "picked", "tool": "pick", "args": {"records": {"$ref": current}, "fields": kept}})
        pointer = f"picked/records/0/{returned}"
    elif ending == "zip":
        steps.append({"id": "paired", "tool": "zip_lists", "args": {"left": rows_ref, "right": rows_ref}})
        pointer = f"paired/records/0/{draw(st.sampled_from(['left', 'right']))}/{returned}"
    elif ending == "join":
        on = draw(st.sampled_from(FIELDS))
        decided.add(on)
        joined = {
            "left": rows_ref,
            "right": {"$ref": "source_rows/rows"},
            "left_field": on,
            "right_field": on,
        }
        steps.append({"id": "joined", "tool": "join_records", "args": joined})
        pointer = f"joined/records/0/{draw(st.sampled_from(['left', 'right']))}/{returned}"
    elif ending == "concat":
        both = [rows_ref, {"$ref": "source_rows/rows"}]
        steps.append({"id": "merged", "tool": "concat", "args": {"lists": both}})
        pointer = f"merged/values/0/{returned}"
    elif ending == "rank":
        steps.append({"id": "ranked", "tool": "rank", "args": {"items": rows_ref}})
        pointer = f"ranked/records/0/item/{returned}"
    elif ending == "count_by":
        steps.append({"id": "counted", "tool": "count_by", "args": {"items": rows_ref, "field": returned}})
        pointer = "counted/groups/0/key"
    else:
        steps.append(
            {"id": "column", "tool": "pluck", "args": {"records": {"$ref": current}, "field": returned}}
        )
        pointer = "column/values/0"
    decided.add(returned)
    return steps, pointer, decided, untrusted


DECIDED_BY_UNTRUSTED: tuple[list[dict[str, Any]], str, set[str], frozenset[str]] = (
    [
        {"id": "source_rows", "tool": "rows", "args": {}},
        {
            "id": "latest",
            "tool": "extreme_by",
            "args": {"records": {"$ref": "source_rows/rows"}, "field": "f1", "which": "max"},
        },
    ],
    "latest/record/f0",
    {"f1", "f0"},
    frozenset({"f1"}),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chains())
@example(DECIDED_BY_UNTRUSTED)  # a mutation that drops the decision fields fails here
def test_a_selection_carries_exactly_its_returned_and_decision_fields_labels(
    case: tuple[list[dict[str, Any]], str, set[str], frozenset[str]],
) -> None:
    steps, pointer, fields, untrusted = case
    # The literals (field names, operators, n) are the request's; the source rows are trusted.
    literals = any(set(step["args"]) - {"records", "items", "left", "right", "lists"} for step in steps)
    expected = {"trusted", "request"} if literals else {"trusted"}
    for name in fields:
        expected |= _label(name, untrusted)
    assert _labels(_policy(untrusted), steps, pointer) == expected


def test_the_decision_field_is_what_taints_a_trusted_value() -> None:
    steps, pointer, _, untrusted = DECIDED_BY_UNTRUSTED
    assert "untrusted" in _labels(_policy(untrusted), steps, pointer)
    # The same choice on a trusted field leaves the trusted value trusted.
    steps[1]["args"]["field"] = "f2"
    assert _labels(_policy(untrusted), steps, pointer) == {"trusted", "request"}


def test_other_stock_selections_keep_fields_apart() -> None:
    untrusted = frozenset({"f3"})
    policy = _policy(untrusted)
    src = {"id": "source_rows", "tool": "rows", "args": {}}
    recs = {"$ref": "source_rows/rows"}
    ranked = {"id": "ranked", "tool": "rank", "args": {"items": recs}}
    assert _labels(policy, [src, ranked], "ranked/records/0/item/f0") == {"trusted"}
    assert _labels(policy, [src, ranked], "ranked/records/0/item/f3") == {"trusted", "untrusted"}
    counted: dict[str, Any] = {"id": "counted", "tool": "count_by", "args": {"items": recs, "field": "f0"}}
    assert _labels(policy, [src, counted], "counted/groups/0/key") == {"trusted", "request"}
    counted["args"]["field"] = "f3"
    assert "untrusted" in _labels(policy, [src, counted], "counted/groups/0/key")
    summed = {"id": "summed", "tool": "sum_field", "args": {"records": recs, "field": "f3"}}
    assert "untrusted" in _labels(policy, [src, summed], "summed/total")
    total = {"id": "total", "tool": "count", "args": {"records": recs}}
    assert _labels(policy, [src, total], "total/count") == {"trusted"}


# --- injection: the attacker controls only an untrusted field -------------------------------------


def _run(tool: str, **args: Any) -> Any:
    return REGISTRY[tool].invoke(args)


def _sent_by_me(subjects: list[Any], dates: list[str]) -> list[dict[str, Any]]:
    """Transactions: sender and date trusted (the bank's), subject untrusted (the payer's)."""
    me = "DE89370400440532013000"
    return [
        {
            "id": i,
            "sender": me if i % 2 == 0 else "GB29NWBK60161331926819",
            "date": d,
            "subject": s,
            "amount": i,
        }
        for i, (s, d) in enumerate(zip(subjects, dates, strict=True))
    ]


#: Any value a tool could return for the attacker's field (what JSON and the audit log can hold).
_TEXT = st.text(st.characters(blacklist_categories=["Cs"]), max_size=20)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | _TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=6,
)
DATES = st.lists(st.dates().map(lambda d: d.isoformat()), min_size=4, max_size=4, unique=True)


@settings(max_examples=60, deadline=None)
@given(DATES, st.lists(JSON, min_size=4, max_size=4), st.lists(JSON, min_size=4, max_size=4))
def test_an_untrusted_field_never_changes_which_record_a_trusted_selection_picks(
    dates: list[str], subjects: list[Any], other_subjects: list[Any]
) -> None:
    picked = []
    for chosen_subjects in (subjects, other_subjects):
        records = _sent_by_me(chosen_subjects, dates)
        mine = _run(
            "filter_records", records=records, field="sender", op="eq", value="DE89370400440532013000"
        )
        ordered = _run("sort_records", records=mine["records"], by="date", descending=True)
        latest = _run("extreme_by", records=mine["records"], field="date", which="max")
        top = _run("take", records=ordered["records"], n=1)
        picked.append((latest["record"]["id"], [r["id"] for r in top["records"]], mine["count"]))
    assert picked[0] == picked[1]


def test_the_attacker_changes_the_pick_when_the_selection_reads_their_field_and_the_sink_refuses() -> None:
    dates = ["2024-01-01", "2024-02-01", "2024-03-01", "2024-04-01"]
    records = _sent_by_me(["rent", "x", "y", "z"], dates)
    honest = _run("filter_records", records=records, field="subject", op="eq", value="rent")
    records = _sent_by_me(["x", "y", "rent", "z"], dates)  # the attacker moves the word
    steered = _run("filter_records", records=records, field="subject", op="eq", value="rent")
    assert honest["records"][0]["id"] != steered["records"][0]["id"]
    # So a plan whose sink value was chosen by that field is refused before anything runs.
    untrusted = frozenset({"f1"})
    src = {"id": "source_rows", "tool": "rows", "args": {}}
    chosen: dict[str, Any] = {
        "id": "chosen_by_untrusted",
        "tool": "filter_records",
        "args": {"records": {"$ref": "source_rows/rows"}, "field": "f1", "op": "eq", "value": "b3"},
    }
    top = {"id": "top", "tool": "first", "args": {"records": {"$ref": "chosen_by_untrusted/records"}}}
    pay = {"id": "pay", "tool": "sink", "args": {"value": {"$ref": "top/record/f0"}}}
    doc = {"pte_plan": "1", "steps": [src, chosen, top, pay]}
    with pytest.raises(PlanRejected) as caught:
        compile_plan(json.dumps(doc), REGISTRY, checks=[_policy(untrusted).check()])
    assert caught.value.reason is ReasonCode.POLICY_VIOLATION
    assert "sink.value" in caught.value.message and "untrusted" in caught.value.message
    # Chosen by a trusted field instead, the same plan compiles under the guarded default.
    chosen["args"]["field"], chosen["args"]["value"] = "f0", "a0"
    compile_plan(json.dumps(doc), REGISTRY, checks=[_policy(untrusted).check()])


# --- a user's own generic tool declares the same ---------------------------------------------------


class Kept(BaseModel):
    kept: list[dict[str, Any]]


@pte.tool(
    provenance="derived",
    selection=pte.catalogue.Selection({"/kept/*": "items/*"}, decides=("items/*/{key}",)),
)
def keep_truthy(items: list[dict[str, Any]], key: str) -> Kept:
    """Keep the items whose `key` is truthy."""
    return Kept(kept=[item for item in items if item.get(key)])


@pte.tool(provenance="derived")
def keep_truthy_undeclared(items: list[dict[str, Any]], key: str) -> Kept:
    """The same tool without a declaration: its output is the union of its inputs' labels."""
    return Kept(kept=[item for item in items if item.get(key)])


def test_a_user_tool_declares_its_selection() -> None:
    registry = _registry()
    registry.register(keep_truthy)
    registry.register(keep_truthy_undeclared)
    policy = Policy.from_registry(registry).with_document(
        {"pte_policy": "1", "tools": {"rows": {"output": "trusted", "fields": {"/rows/*/f3": "untrusted"}}}}
    )
    for tool, expected in (("keep_truthy", {"trusted", "request"}), ("keep_truthy_undeclared", None)):
        steps = [
            {"id": "source_rows", "tool": "rows", "args": {}},
            {"id": "kept", "tool": tool, "args": {"items": {"$ref": "source_rows/rows"}, "key": "f0"}},
        ]
        check = policy.check()
        compile_plan(json.dumps({"pte_plan": "1", "steps": steps}), registry, checks=[check])
        labels = set(check.trees["kept"].select(("kept", "0", "f0")))
        assert labels == (expected or {"trusted", "untrusted", "request"})
    assert keep_truthy.__pte_tool__.selection.decision_fields() == {"key": "items"}  # type: ignore[attr-defined]


def test_a_selection_must_name_the_tools_parameters_and_be_derived() -> None:
    with pytest.raises(ToolRegistrationError, match="unknown parameter"):

        @pte.tool(provenance="derived", selection=pte.catalogue.Selection({"/kept/*": "records/*"}))
        def wrong(items: list[dict[str, Any]]) -> Kept:
            """Names a parameter it does not have."""
            return Kept(kept=items)

    with pytest.raises(ToolRegistrationError, match="derived"):

        @pte.tool(selection=pte.catalogue.Selection({"/kept/*": "items/*"}))
        def trusted(items: list[dict[str, Any]]) -> Kept:
            """A source tool has no inputs to select from."""
            return Kept(kept=items)

    with pytest.raises(ValueError, match="invalid selection"):
        pte.catalogue.Selection({"kept": "items/*"})


def test_a_malformed_recorded_selection_gives_no_precision() -> None:
    assert pte.catalogue.Selection.from_json({"output": {"/x": ["a/*"]}, "extra": 1}) is None
    assert pte.catalogue.Selection.from_json({"output": {"x": ["a/*"]}}) is None
    assert pte.catalogue.Selection.from_json({"output": {"/x": "a/*"}}) is None
    sel = pte.catalogue.Selection({"/x/*": "a/*"}, decides=("a/*/{f}",))
    assert pte.catalogue.Selection.from_json(sel.to_json()) == sel


class KeptRows(BaseModel):
    kept: list[Row]


@pte.tool(
    provenance="derived",
    selection=pte.catalogue.Selection({"/kept/*": "items/*"}, decides=("items/*/{key}",)),
)
def keep_rows(items: list[Row], key: str) -> KeptRows:
    """Keep the rows whose `key` field is not empty."""
    return KeptRows(kept=[row for row in items if getattr(row, key, "")])


def test_a_user_selection_is_recorded_and_replays_from_the_log_alone(tmp_path: Any) -> None:
    """The declaration travels in the recorded output schema: a run whose guarded write takes a
    trusted field out of a user tool's selection replays with the same decision from the log."""
    from pte import AuditLog, Engine, EngineConfig
    from pte.audit import read_records
    from pte.engine import ReplayClient
    from pte.runs import replay_file

    registry = _registry()
    registry.register(keep_rows)
    policy = Policy.from_registry(registry).with_document(
        {"pte_policy": "1", "tools": {"rows": {"output": "trusted", "fields": {"/rows/*/f3": "untrusted"}}}}
    )
    doc = {
        "pte_plan": "1",
        "steps": [
            {"id": "source_rows", "tool": "rows", "args": {}},
            {
                "id": "kept_rows",
                "tool": "keep_rows",
                "args": {"items": {"$ref": "source_rows/rows"}, "key": "f0"},
            },
            {"id": "write_it", "tool": "sink", "args": {"value": {"$ref": "kept_rows/kept/0/f1"}}},
        ],
    }
    log = tmp_path / "selection.jsonl"
    engine = Engine(
        registry, ReplayClient([json.dumps(doc)]), config=EngineConfig(llm_answer=False), policy=policy
    )
    with AuditLog(log) as audit:
        result = engine.run("Write the first kept row's f1.", audit)
    assert result.status == "succeeded", result.message
    started = next(r for r in read_records(log) if r["type"] == "run_started")
    catalogue = started["stored"][started["catalogue"]]
    recorded = next(t for t in catalogue if t["name"] == "keep_rows")
    assert recorded["output_schema"]["x-pte-selection"] == keep_rows.__pte_tool__.selection.to_json()  # type: ignore[attr-defined]
    assert replay_file(log).ok
