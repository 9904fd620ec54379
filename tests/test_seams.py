"""The seams of issue 27 hold: one owner of the record vocabulary, sinks by protocol, a typed context.

- Only `pte._records` spells a record type when a record is written: an AST scan of every
  pte module finds no ``x.append("step_started", ...)``, ``x.write("...")`` or
  ``Record("...")`` elsewhere (and the scan is shown to catch one).
- The vocabulary is the format's: one builder per record type of the audit schema.
- No sink subclasses `AuditLog` or forwards by ``__getattr__`` (pte._record_sink).
- `CompileContext` hands on what checks found in typed fields, not an ``extras`` dict.
"""

from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path

from pte import _records as rec
from pte._compile_context import CompileContext

ROOT = Path(__file__).resolve().parents[1]
PTE = ROOT / "pte"
#: The one module that spells record types for writing.
OWNER = PTE / "_records.py"
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


def test_no_module_but_the_vocabulary_spells_a_record_type_when_writing() -> None:
    found = []
    for path in sorted(PTE.rglob("*.py")):
        if path != OWNER:
            found += spelled_record_types(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    assert found == [], "build records with pte._records (one builder per type): " + ", ".join(found)


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
