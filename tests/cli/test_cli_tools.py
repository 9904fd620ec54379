"""`pte tools`: what each pack provides, from the same ToolSpecs the engine compiles against."""

from __future__ import annotations

import json

import pytest

from pte import load_pack

# private: the stock packs' list
from pte._catalogue import STOCK_PACKS
from pte.cli import main


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(["--quiet", *argv])
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_every_stock_pack_is_listed_with_every_tool(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "tools", "--json")
    assert code == 0
    listed = json.loads(out)["tools"]
    for pack in STOCK_PACKS:
        expected = {spec.name for spec in load_pack(pack)}
        assert {t["name"] for t in listed if t["pack"] == pack} == expected, pack


def test_a_tool_shows_effect_provenance_guards_and_parameters(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "tools", "--json", "backoffice")
    assert code == 0
    tools = {t["name"]: t for t in json.loads(out)["tools"]}
    for spec in load_pack("backoffice"):
        shown = tools[spec.name]
        assert shown["effect"] == spec.effect
        assert shown["provenance"] == spec.provenance
        assert shown["requires_approval"] == spec.requires_approval
        assert shown["sinks"] == {p: sorted(a) for p, a in spec.sinks.items()}
        schema = spec.planner_input_schema
        assert [p["name"] for p in shown["parameters"]] == list(schema.get("properties") or {})
        assert {p["name"] for p in shown["parameters"] if p["required"]} == set(schema.get("required") or ())
    assert any(t["sinks"] for t in tools.values()), "the back-office pack guards its payments"
    # The text form names the flag that uses the pack and each guarded parameter.
    code, text, _ = _run(capsys, "tools", "backoffice")
    assert code == 0 and "--tools backoffice" in text
    guarded = next(t for t in tools.values() if t["sinks"])
    param = next(iter(guarded["sinks"]))
    assert f"guarded: {param} accepts" in text


def test_an_unknown_pack_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "tools", "no_such_pack")
    assert code == 2
    assert "no_such_pack" in err and "Traceback" not in err


def test_the_tools_flag_names_every_stock_pack(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "execute", "--help")
    assert code == 0
    flat = " ".join(out.split())
    assert all(pack in flat for pack in STOCK_PACKS)
