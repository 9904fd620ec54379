"""The public API: everything a user needs is reachable from `pte`; tool packs from entry points."""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

import pytest

import pte
from pte import ToolPackError, load_pack, load_registry
from pte._catalogue import installed_packs


def test_all_names_exist_and_are_documented() -> None:
    assert len(pte.__all__) == len(set(pte.__all__))
    for name in pte.__all__:
        value = getattr(pte, name)
        if inspect.isclass(value) or inspect.isfunction(value):
            assert inspect.getdoc(value), f"pte.{name} has no docstring"


def test_every_public_exception_is_reachable_from_pte() -> None:
    import importlib
    import pkgutil

    exported = {getattr(pte, name) for name in pte.__all__}
    missing = set()
    for module_info in pkgutil.walk_packages(pte.__path__, "pte."):
        if module_info.name.startswith("pte.testing"):
            continue
        try:
            module = importlib.import_module(module_info.name)
        except ImportError:  # a module of an optional extra that is not installed
            continue
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, pte.PTEError)
                and not name.startswith("_")
                and value.__module__.startswith("pte")
                and value not in exported
            ):
                missing.add(f"{value.__module__}.{value.__qualname__}")
    assert sorted(missing) == []


@pytest.mark.parametrize(
    "name",
    [
        "Engine",
        "EngineConfig",
        "RunResult",
        "AuditLog",
        "verify",
        "replay_file",
        "Policy",
        "OpenAIClient",
        "ReplayClient",
        "LLMClient",
        "tool_from_schema",
        "ImportRefused",
    ],
)
def test_core_names(name: str) -> None:
    assert name in pte.__all__


PACK_MODULE = """
from pte import tool

@tool
def acme_ping(n: int) -> int:
    \"\"\"Ping.\"\"\"
    return n
"""
REGISTRY_MODULE = """
from pte import Registry
from acme_pte_tools import acme_ping

registry = Registry([acme_ping])
"""


def _install_fake_distribution(root: Path, entry_points: str, modules: dict[str, str]) -> None:
    info = root / "acme_tools-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: acme-tools\nVersion: 1.0\n", encoding="utf-8"
    )
    (info / "entry_points.txt").write_text(entry_points, encoding="utf-8")
    for name, source in modules.items():
        (root / f"{name}.py").write_text(source, encoding="utf-8")


def test_tool_packs_are_discovered_through_entry_points(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _install_fake_distribution(
        tmp_path,
        "[pte.tool_packs]\n"
        "acme = acme_pte_tools\n"
        "acme_registry = acme_pte_registry:registry\n"
        "broken = acme_missing_module\n",
        {
            "acme_pte_tools": PACK_MODULE,
            "acme_pte_registry": REGISTRY_MODULE,
        },
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert {"acme", "acme_registry", "broken"} <= set(installed_packs())
    assert load_pack("acme").names == ["acme_ping"]
    assert load_registry(["acme_registry"]).names == ["acme_ping"]
    with pytest.raises(ToolPackError, match=r"'broken'.*failed to load"):
        load_pack("broken")
    for name in ("acme_pte_tools", "acme_pte_registry"):
        sys.modules.pop(name, None)


def test_the_type_stub_lists_the_same_names() -> None:
    import ast

    stub = ast.parse((Path(pte.__file__).parent / "__init__.pyi").read_text(encoding="utf-8"))
    declared = next(
        node.value
        for node in stub.body
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in node.targets)
    )
    assert isinstance(declared, ast.List)
    assert [ast.literal_eval(e) for e in declared.elts] == pte.__all__
    imported = {
        alias.asname or alias.name
        for node in stub.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    assert set(pte.__all__) - {"__version__", "compile"} <= imported


def test_lazy_names_resolve_and_unknown_names_raise() -> None:
    assert pte.Engine.__name__ == "Engine"
    assert pte.replay_file.__module__ == "pte._replay._replayer"
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        pte.nope  # noqa: B018
    assert "Engine" in dir(pte)


# A tool pack written against `pte` alone: the generic-tool markers and field provenance are public.
AUTHOR_PACK = '''
from typing import Annotated, Any, Generic, TypeVar

from pydantic import BaseModel

import pte

T = TypeVar("T")
R = TypeVar("R", bound=dict[str, Any])


class Mail(BaseModel):
    sender: str
    subject: Annotated[str, pte.provenance("untrusted")]


class Mails(BaseModel):
    mails: list[Mail]


class Values(BaseModel, Generic[T]):
    values: list[T]


@pte.tool
def inbox() -> Mails:
    """The inbox."""
    return Mails(mails=[Mail(sender="a@example.com", subject="hi")])


@pte.tool(provenance="derived")
def pluck(
    records: list[R], field: Annotated[str, pte.FieldName(R)]
) -> Values[Annotated[Any, pte.FieldOf(R, "field")]]:
    """The value of `field` of every record."""
    return Values(values=[r[field] for r in records])
'''


def test_a_tool_pack_needs_only_the_pte_namespace(tmp_path: Path) -> None:
    import json

    pack = tmp_path / "author_pack.py"
    pack.write_text(AUTHOR_PACK, encoding="utf-8")
    registry = load_pack(str(pack))
    assert registry["inbox"].output_schema["$defs"]["Mail"]["properties"]["subject"]["x-pte-provenance"] == (
        "untrusted"
    )

    def plan(field: str) -> str:
        steps = [
            {"id": "box", "tool": "inbox", "args": {}},
            {"id": "who", "tool": "pluck", "args": {"records": {"$ref": "box/mails"}, "field": field}},
        ]
        return json.dumps({"pte_plan": "1", "steps": steps, "result": {"$ref": "who/values"}})

    compiled = pte.compile(plan("sender"), registry)
    assert compiled.output_schema("who")["properties"]["values"]["items"]["type"] == "string"
    with pytest.raises(pte.PlanRejected, match="no field 'sendr'"):
        pte.compile(plan("sendr"), registry)
    audit = pte.AuditLog(keep=True)
    audit.append("run_started", mode="run", request=None, tools=[], config={})  # the engine's part
    result = pte.Executor(registry).run(compiled, audit)
    assert result.result_value() == ["a@example.com"]
    public = ("ExtendedBy", "PickOf", "RegexGroups", "RegexPattern", "LabelTree", "run_in_store", "decide")
    for name in public:
        assert name in pte.__all__ and getattr(pte, name).__doc__


#: Public modules besides `pte`: documented packages and the optional-dependency modules in them.
PUBLIC_MODULES = ("pte.testing", "pte.importers", "pte.stores")
PUBLIC_STORE_MODULES = {"pte.stores.postgres"}  # needs psycopg, so not imported by pte.stores


def test_implementation_modules_are_private() -> None:
    import pkgutil

    public = []
    for module_info in pkgutil.walk_packages(pte.__path__, "pte."):
        name = module_info.name
        if any(part.startswith("_") for part in name.split(".")[1:]):
            continue
        public.append(name)
        documented = (
            name in PUBLIC_MODULES
            or name in PUBLIC_STORE_MODULES
            or name.startswith(("pte.testing.", "pte.importers."))
        )
        assert documented, f"{name} is neither documented public API nor named with a leading underscore"
    assert "pte.testing" in public and "pte.importers.mcp" in public  # the walk did see public modules


def test_the_documented_examples_import_only_public_modules() -> None:
    import re

    repo = Path(pte.__file__).resolve().parents[1]
    pages = [repo / "README.md", *sorted((repo / "docs").glob("*.md"))]
    blocks = [b for page in pages for b in re.findall(r"```python\n(.*?)```", page.read_text("utf-8"), re.S)]
    modules = {m for block in blocks for m in re.findall(r"^\s*(?:from|import) (pte[\w.]*)", block, re.M)}
    assert "pte" in modules, "the documented Python examples were not found"
    private = sorted(m for m in modules if any(part.startswith("_") for part in m.split(".")))
    assert not private, f"documented examples import implementation modules: {private}"


def test_replay_is_a_function() -> None:
    assert callable(pte.replay) and not inspect.ismodule(pte.replay)
    assert pte.replay is pte.replay_file
    assert "replay" in pte.__all__
