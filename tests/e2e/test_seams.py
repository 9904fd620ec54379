"""The seams of issue 27 hold: one owner of the record vocabulary, sinks by protocol, a typed context.

- Only `pte._audit._records` spells a record type when a record is written: an AST scan of every
  pte module finds no ``x.append("step_started", ...)``, ``x.write("...")`` or
  ``Record("...")`` elsewhere (and the scan is shown to catch one), and no module but the
  log itself writes through the untyped ``append(type, **fields)``.
- The vocabulary is the format's: one builder per record type of the audit schema.
- No sink subclasses `AuditLog` or forwards by ``__getattr__`` (pte._audit._record_sink).
- `CompileContext` hands on what checks found in typed fields, not an ``extras`` dict.
- Only `pte._run._run_records` builds a run-level record (`RUN_RECORDS`: the run's start, model
  calls, plans accepted and rejected, replans, stages, repairs, resumption and end), and only
  the run loop (`pte._run._loop`) holds a run's `RunRecords`, so the order of the writes lives
  in one module; the decision functions the loop calls (stages, repair, delegation, exposure,
  acceptance, ending) receive no engine and call nothing back (#35).
- `RunView`, which the report, `pte runs` (a paused run's plan) and resume (is the run
  finished?) fold a run's records with, reads any record a verified log may hold.
"""

from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

# private: the record builders, to write records by hand
from pte._audit import records as rec

# private: the run loop's record vocabulary, to check that no other module writes one
from pte._run import RUN_RECORDS
from pte.plan import CompileContext
from pte.runs import RunView

ROOT = Path(__file__).resolve().parents[2]
PTE = ROOT / "pte"
#: The one module that spells record types for writing.
OWNER = PTE / "_audit" / "_records.py"
#: Calls that write a record (a sink's `write`, the log's `append`) or build one.
WRITING_CALLS = frozenset({"append", "write", "Record"})


def _callee(node: ast.Call) -> str | None:
    if isinstance(node.func, ast.Attribute):
        return node.func.attr
    if isinstance(node.func, ast.Name):
        return node.func.id
    return None


def spelled_record_types(source: str, filename: str = "<source>") -> list[str]:
    """Where `source` writes a record by naming its type: ``file:line type`` for each call."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if not isinstance(node, ast.Call) or _callee(node) not in WRITING_CALLS:
            continue
        values = [*node.args, *(kw.value for kw in node.keywords if kw.arg == "type")]
        for value in values:
            if isinstance(value, ast.Constant) and value.value in rec.RECORD_TYPES:
                found.append(f"{filename}:{node.lineno} {value.value}")
    return found


def untyped_appends(source: str, filename: str = "<source>") -> list[str]:
    """Where `source` writes through the log's untyped ``append(type, **fields)``: an ``append``
    call with keyword arguments (a list's ``append`` takes none)."""
    return [
        f"{filename}:{node.lineno}"
        for node in ast.walk(ast.parse(source, filename))
        if isinstance(node, ast.Call) and _callee(node) == "append" and node.keywords
    ]


def test_records_are_written_as_built_records_not_through_the_untyped_append() -> None:
    found = []
    for path in sorted(PTE.rglob("*.py")):
        if path != PTE / "_audit" / "_writer.py":  # AuditLog.write is append of a built record
            found += untyped_appends(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    assert found == [], "write a record built by pte._audit with sink.write(...): " + ", ".join(found)
    assert untyped_appends("audit.append(kind, **fields)\nitems.append(x)\n") == ["<source>:1"]


def test_no_module_but_the_vocabulary_spells_a_record_type_when_writing() -> None:
    found = []
    for path in sorted(PTE.rglob("*.py")):
        if path != OWNER:
            found += spelled_record_types(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    assert found == [], "build records with pte._audit._records (one builder per type): " + ", ".join(found)


def test_the_scan_catches_a_record_written_by_name() -> None:
    written = """
audit.append("step_started", step_id="a")
sink.write("run_finished")
Record(type="condition", fields={})
log.info("step_finished", step="a")   # a log event, not a record
items.append("other")
"""
    assert spelled_record_types(written) == [
        "<source>:2 step_started",
        "<source>:3 run_finished",
        "<source>:4 condition",
    ]


#: The one module that builds run-level records, and the one that decides their order (#35).
RUN_RECORDS_MODULE = PTE / "_run" / "_run_records.py"
RUN_LOOP = PTE / "_run" / "_loop.py"


def run_record_builds(source: str, filename: str = "<source>") -> list[str]:
    """Where `source` builds a run-level record: ``file:line type`` for each call of a
    `pte._audit` builder of one (``rec.run_started(...)``, ``records.stage(...)``, a builder
    imported by name), whatever the module is called where it is imported."""
    tree = ast.parse(source, filename)
    modules: set[str] = set()  # names the record builders' module goes by here
    builders: dict[str, str] = {}  # local name -> run-level record type, imported by name
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("pte._audit"):
            for alias in node.names:
                if alias.name in ("records", "_records"):
                    modules.add(alias.asname or alias.name)
                elif alias.name in RUN_RECORDS and node.module.endswith("records"):
                    builders[alias.asname or alias.name] = alias.name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.endswith("records") and alias.name.startswith("pte._audit"):
                    modules.add(alias.asname or alias.name)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if (
            isinstance(func, ast.Attribute)
            and func.attr in RUN_RECORDS
            and ast.unparse(func.value) in modules
        ):
            found.append(f"{filename}:{node.lineno} {func.attr}")
        elif isinstance(func, ast.Name) and func.id in builders:
            found.append(f"{filename}:{node.lineno} {builders[func.id]}")
    return found


def test_only_the_run_records_module_builds_run_level_records() -> None:
    found = []
    for path in sorted(PTE.rglob("*.py")):
        if path not in (RUN_RECORDS_MODULE, OWNER):
            found += run_record_builds(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    assert found == [], "write run-level records through pte._run._run_records: " + ", ".join(found)
    # ... and that module does build every one of them.
    source = RUN_RECORDS_MODULE.read_text(encoding="utf-8")
    written = {entry.split()[-1] for entry in run_record_builds(source)}
    assert written == RUN_RECORDS
    assert RUN_RECORDS <= rec.RECORD_TYPES


def run_records_held(source: str, filename: str = "<source>") -> list[str]:
    """Where `source` makes a `RunRecords` (the writer of a run's run-level records)."""
    return [
        f"{filename}:{node.lineno}"
        for node in ast.walk(ast.parse(source, filename))
        if isinstance(node, ast.Call) and _callee(node) == "RunRecords"
    ]


def test_only_the_run_loop_holds_a_runs_records() -> None:
    """The order of a run's run-level records is the log format: one module decides it."""
    held = {}
    for path in sorted(PTE.rglob("*.py")):
        found = run_records_held(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
        if found:
            held[path] = found
    assert list(held) == [RUN_LOOP], held
    assert len(held[RUN_LOOP]) == 1
    assert run_records_held("x = RunRecords(audit)\ny = records.RunRecords(a)\nRunRecord(a)\n") == [
        "<source>:1",
        "<source>:2",
    ]


def test_the_run_record_scan_catches_every_way_of_building_one() -> None:
    written = """
from pte._audit import records as rec
from pte._audit import records
import pte._audit._records as built
from pte._audit._records import stage as next_stage, step_started
rec.run_finished(status="succeeded")
records.replan(attempt=1)
built.llm_call(role="planner")
next_stage(stage=2)
step_started(step_id="a")          # a step record: the executor's
rec.step_finished(step_id="a")     # the same
other.run_started(mode="run")      # not the record builders
"""
    assert run_record_builds(written) == [
        "<source>:6 run_finished",
        "<source>:7 replan",
        "<source>:8 llm_call",
        "<source>:9 stage",
    ]


def test_the_decision_functions_take_no_engine_and_call_nothing_back() -> None:
    """Stages, repair, delegation, exposure, acceptance and a run's ending are functions of their
    inputs: no `EngineView`, no engine or loop parameter, no call of a private method of another
    object (#35)."""
    for name in ("_stages", "_repair", "_delegation", "_exposure", "_ending", "_acceptance", "_model_call"):
        path = PTE / "_run" / f"{name}.py"
        source = path.read_text(encoding="utf-8")
        assert "EngineView" not in source, name
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom):
                assert node.module not in ("pte._run._loop", "pte._run._engine"), (
                    f"{name} imports {node.module}"
                )
            if isinstance(node, ast.arg):
                assert node.arg not in ("engine", "loop"), f"{name}: parameter {node.arg}"
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                owner = node.func.value
                private = node.func.attr.startswith("_") and not node.func.attr.startswith("__")
                assert not (private and isinstance(owner, ast.Name) and owner.id != "self"), (
                    f"{name}: calls {ast.unparse(node.func)}"
                )


#: `getattr(x, "name", default)` in the run and execution areas, each on an object whose type is
#: not ours to declare (#35): our own optional features are declared interfaces instead
#: (`ConsumingApproval`, `DescribedClient`, `GoesLive`, `Registry.procedures`).
FOREIGN_GETATTRS = {
    "pte/_run/_otel.py": 1,  # an OpenTelemetry span's start_time (SDK spans have one, no-op spans do not)
    "pte/_run/_llm.py": 2,  # the OpenAI SDK's choice and message objects (finish_reason, refusal)
    "pte/_execution/_process.py": 1,  # a module's __file__ (builtins have none)
    # Prompt modules (their bytes are the prompts hash a run records, pte._catalogue.PROMPT_MODULES):
    # the catalogue's procedures and a coordinator view's specialists, left for a prompts change.
    "pte/_run/_prompts.py": 3,
    "pte/_run/_label_reach.py": 1,
}


def optional_getattrs(source: str) -> int:
    """How many ``getattr(x, "name", default)`` calls `source` makes (a feature looked up by name)."""
    return sum(
        1
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and _callee(node) == "getattr"
        and len(node.args) == 3
        and isinstance(node.args[1], ast.Constant)
        and isinstance(node.args[1].value, str)
    )


def test_the_run_and_the_executor_declare_their_optional_features() -> None:
    found = {}
    for area in ("_run", "_execution"):
        for path in sorted((PTE / area).glob("*.py")):
            count = optional_getattrs(path.read_text(encoding="utf-8"))
            if count:
                found[str(path.relative_to(ROOT))] = count
    assert found == FOREIGN_GETATTRS
    assert optional_getattrs('getattr(gate, "before_call", None)\ngetattr(x, name)\n') == 1


def test_one_builder_per_record_type_of_the_audit_schema() -> None:
    schema = json.loads((ROOT / "schemas" / "audit-record.schema.json").read_text(encoding="utf-8"))
    assert set(schema["properties"]["type"]["enum"]) == rec.RECORD_TYPES
    for name in rec.RECORD_TYPES:
        built = getattr(rec, name)
        assert callable(built), name
    assert (
        rec.step_started(step_id="a", tool="t", effect="read", args={}, plan_hash="h").type == "step_started"
    )


def _classes() -> list[tuple[Path, ast.ClassDef]]:
    out = []
    for path in sorted(PTE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                out.append((path, node))
    return out


def test_no_sink_subclasses_the_log_or_forwards_by_getattr() -> None:
    for path, cls in _classes():
        bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", None) for b in cls.bases}
        assert "AuditLog" not in bases, f"{path.name}: {cls.name} subclasses AuditLog; implement RecordSink"
        methods = {n.name for n in cls.body if isinstance(n, ast.FunctionDef)}
        # A record sink (`write` + `sync`), or one of the log's `append` shape; a text stream's
        # `write` alone is not one.
        if {"write", "sync"} <= methods or "append" in methods:
            assert "__getattr__" not in methods, f"{path.name}: {cls.name} forwards by __getattr__"


def test_the_compile_context_has_typed_fields_and_no_extras() -> None:
    names = {f.name for f in dataclasses.fields(CompileContext)}
    assert "extras" not in names
    assert {"control_deps", "condition_modes", "provenance", "needs_endorsement"} <= names


# -- readers fold through RunView, which reads any record a log can hold ----------------------

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
_KEYS = st.sampled_from(
    [
        "plan",
        "plan_hash",
        "steps",
        "tools",
        "after",
        "step_id",
        "status",
        "items",
        "args",
        "tool",
        "kind",
        "outcome",
        "values",
        "error",
        "config",
        "effect",
        "duration_ms",
        "id",
        "for_each",
        "require",
        "when",
    ]
)
_PLAN_STEP = st.dictionaries(_KEYS, _JSON, max_size=5)
_RECORD = st.builds(
    lambda kind, fields, steps: {
        **fields,
        "type": kind,
        **({"plan": {"steps": steps}} if kind == "plan_accepted" and steps is not None else {}),
    },
    st.sampled_from(sorted(rec.RECORD_TYPES)),
    st.dictionaries(_KEYS, _JSON, max_size=5),
    st.none() | st.lists(_PLAN_STEP, max_size=3) | _JSON,
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_RECORD, max_size=8))
def test_run_view_folds_any_records_without_raising(records: list[dict[str, object]]) -> None:
    """A log that verifies may still hold odd values (a free-form plan, a re-chained tamper):
    `pte runs`, resume and the report fold it, so the fold must never raise."""
    view = RunView.fold("r", records)
    view.summary()
    assert (view.finished is not None) == any(r["type"] == "run_finished" for r in records)
    assert (view.paused is not None) == (bool(records) and records[-1]["type"] == "run_paused")


@settings(max_examples=200, deadline=None)
@given(st.none() | st.integers(0, 50), st.lists(st.integers(0, 10**12), max_size=10))
def test_run_view_elements_stay_within_the_list(items: int | None, indices: list[int]) -> None:
    """Whatever element indices records name (``e[i]``), a for_each step's view holds at most
    its recorded item count (or the largest list any plan may iterate), never one per index."""
    plan = {"steps": [{"id": "e", "tool": "t", "for_each": {"$ref": "x"}, "args": {}}]}
    records: list[dict[str, object]] = [
        {"type": "run_started"},
        {"type": "plan_accepted", "plan": plan, "plan_hash": "h"},
    ]
    if items is not None:
        records.append({"type": "for_each", "step_id": "e", "items": items})
    records += [{"type": "step_finished", "step_id": f"e[{i}]", "status": "ok"} for i in indices]
    step = RunView.fold("r", records).plans[0].steps[0]
    bound = items if items is not None else 1000
    inside = [i for i in indices if i < bound]
    assert len(step.elements) == (max(inside) + 1 if inside else 0)
