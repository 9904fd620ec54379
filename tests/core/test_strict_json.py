"""One strict JSON loader for every security-relevant input: plans, policies, manifests, approvals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pte import PlanRejected, ReasonCode, compile_plan, load_policy, load_registry

# private: the strict JSON reader under test
from pte._core import StrictJSONError, loads
from pte.errors import ApprovalStoreError, PolicyError, ToolPackError
from pte.policy import ApprovalStore

PACK = """
from pte import tool

@tool
def double(x: int) -> int:
    return 2 * x

@tool
def shout(s: str) -> str:
    return s.upper()
"""


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ('{"a": 1, "a": 2}', "duplicate_key"),
        ('{"x": {"b": [1, {"c": 1, "c": 1}]}}', "duplicate_key"),
        ('{"a": NaN}', "constant"),
        ("[Infinity]", "constant"),
        ("[-Infinity]", "constant"),
        ('{"a": 1} {"b": 2}', "syntax"),
        ("{'a': 1}", "syntax"),
        ("[" * 200 + "]" * 200, "too_deep"),
        ("[" * 100_000 + "]" * 100_000, "too_deep"),
        (b'"\xff"', "syntax"),
    ],
)
def test_refuses_ambiguous_documents(text: str | bytes, kind: str) -> None:
    with pytest.raises(StrictJSONError) as caught:
        loads(text)
    assert caught.value.kind == kind


def test_accepts_plain_json_and_respects_the_depth_bound() -> None:
    assert loads('{"a": [1, 2.5, "x", null, true]}') == {"a": [1, 2.5, "x", None, True]}
    assert loads("[" * 5 + "]" * 5, max_depth=5) == [[[[[]]]]]
    with pytest.raises(StrictJSONError, match="deeper than 4"):
        loads("[" * 5 + "]" * 5, max_depth=4)


def test_manifest_with_a_duplicate_deny_is_refused(tmp_path: Path) -> None:
    # The example: Python's json keeps the last "deny" ([]), and x would stay allowed.
    pack = tmp_path / "pack.py"
    pack.write_text(PACK, encoding="utf-8")
    manifest = tmp_path / "manifest.json"
    manifest.write_text('{"deny": ["double"], "deny": []}', encoding="utf-8")
    assert json.loads(manifest.read_text()) == {"deny": []}  # what a bare json.loads would have used
    with pytest.raises(ToolPackError, match="duplicate key 'deny'"):
        load_registry([pack], manifest=manifest)


def test_policy_with_a_duplicate_key_is_refused(tmp_path: Path) -> None:
    pack = tmp_path / "pack.py"
    pack.write_text(PACK, encoding="utf-8")
    registry = load_registry([pack])
    policy = tmp_path / "policy.json"
    policy.write_text(
        '{"pte_policy": "1", "tools": {"shout": {"output": "untrusted", "output": "trusted"}}}',
        encoding="utf-8",
    )
    with pytest.raises(PolicyError, match="duplicate key 'output'"):
        load_policy(registry, policy)


def test_plan_with_a_duplicate_key_or_nan_is_rejected(tmp_path: Path) -> None:
    pack = tmp_path / "pack.py"
    pack.write_text(PACK, encoding="utf-8")
    registry = load_registry([pack])
    ok = '{"pte_plan": "1", "steps": [{"id": "a", "tool": "double", "args": {"x": 1}}]}'
    assert len(compile_plan(ok, registry)) == 1
    duplicate = '{"pte_plan": "1", "steps": [{"id": "a", "tool": "double", "args": {"x": 1, "x": 2}}]}'
    for text in (duplicate, ok.replace('"x": 1', '"x": NaN')):
        with pytest.raises(PlanRejected) as caught:
            compile_plan(text, registry)
        assert caught.value.reason is ReasonCode.INVALID_JSON
    with pytest.raises(PlanRejected) as deep:
        compile_plan('{"pte_plan": "1", "steps": ' + "[" * 5000 + "]" * 5000 + "}", registry)
    assert deep.value.reason is ReasonCode.PLAN_TOO_LARGE


def test_approval_store_line_with_a_duplicate_key_is_refused(tmp_path: Path) -> None:
    store = tmp_path / "approvals.jsonl"
    digest = "a" * 64
    store.write_text(
        json.dumps({"plan_hash": digest, "by": "ann", "at": "2026-11-01T09:30:00Z", "signature": None})[:-1]
        + ', "by": "mallory"}\n',
        encoding="utf-8",
    )
    with pytest.raises(ApprovalStoreError, match="duplicate key 'by'"):
        list(ApprovalStore(store))
