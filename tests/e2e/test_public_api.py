"""The public API: everything a user needs is reachable from `pte`; tool packs from entry points."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import pte
from pte import load_pack, load_registry
from pte.catalogue import installed_packs
from pte.errors import ToolPackError

#: The public modules of the areas a user touches (docs/api.md), each with one `__all__`.
AREA_MODULES = (
    "errors",
    "catalogue",
    "plan",
    "policy",
    "audit",
    "execution",
    "engine",
    "runs",
    "deployment",
    "cli",
)
#: Every public module besides `pte` itself.
PUBLIC_MODULES = (*(f"pte.{name}" for name in AREA_MODULES), "pte.stores", "pte.importers", "pte.testing")
#: Names listed by two public modules, and why: `pte.errors` gathers every exception.
REEXPORTED = {
    "ImportRefused": {"pte.errors", "pte.importers"},
    "StoreError": {"pte.errors", "pte.stores"},
    "ReplayClient": {"pte.engine", "pte.testing"},  # a test double as much as a model client
}


def _homes() -> dict[str, set[str]]:
    """Every public name and the public modules whose `__all__` list it."""
    homes: dict[str, set[str]] = {}
    for module_name in PUBLIC_MODULES:
        for name in importlib.import_module(module_name).__all__:
            homes.setdefault(name, set()).add(module_name)
    return homes


@pytest.mark.parametrize("module_name", ["pte", *PUBLIC_MODULES])
def test_all_names_exist_and_are_documented(module_name: str) -> None:
    module = importlib.import_module(module_name)
    assert module.__doc__, f"{module_name} has no docstring"
    assert len(module.__all__) == len(set(module.__all__))
    for name in module.__all__:
        value = getattr(module, name)
        if inspect.isclass(value) or inspect.isfunction(value):
            assert inspect.getdoc(value), f"{module_name}.{name} has no docstring"


def test_pte_keeps_the_quickstart_names_and_each_has_one_home() -> None:
    """`pte` is short (what a first program needs); each of its names is also in the public module
    of its area, the same object, and every public name is listed by one module (REEXPORTED aside)."""
    assert 20 <= len(pte.__all__) <= 30, len(pte.__all__)
    homes = _homes()
    for name in pte.__all__:
        if name == "__version__":
            continue
        assert len(homes.get(name, ())) == 1, f"pte.{name} has no single home: {homes.get(name)}"
        (home,) = homes[name]
        assert getattr(pte, name) is getattr(importlib.import_module(home), name)
    doubles = {name: where for name, where in homes.items() if len(where) > 1}
    assert doubles == REEXPORTED


def test_dir_shows_only_the_public_names_and_modules() -> None:
    assert dir(pte) == sorted({*pte.__all__, *(m.removeprefix("pte.") for m in PUBLIC_MODULES)})
    assert not [name for name in dir(pte) if name.startswith("_") and name != "__version__"]


def test_no_type_stub_copies_the_package() -> None:
    """The names are declared once, in `__init__.py`; type checkers read its imports (the lazy
    ones under TYPE_CHECKING), so there is no `.pyi` to keep in step."""
    package = Path(pte.__file__).parent
    assert not (package / "__init__.pyi").exists()
    tree = ast.parse((package / "__init__.py").read_text(encoding="utf-8"))
    imported = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pte")
        for alias in node.names
    }
    assert set(pte.__all__) <= imported


def test_a_moved_name_still_works_with_a_warning_naming_its_new_home() -> None:
    moved = pte._MOVED  # the deprecation table is what this test checks
    homes = _homes()
    assert moved and not set(moved) & set(pte.__all__)
    for name, home in moved.items():
        assert home in homes[name], (name, home)
        with pytest.warns(DeprecationWarning, match=rf"pte\.{name} moved to {home}\.{name}"):
            value = getattr(pte, name)
        assert value is getattr(importlib.import_module(home), name)


def test_import_pte_stays_light() -> None:
    """`import pte` loads no LLM client, engine, replay or deployment code, and no SDK."""
    code = (
        "import sys, pte\n"
        "heavy = ('pte._run', 'pte._replay', 'pte._deploy', 'pte.engine', 'openai', 'httpx')\n"
        "print([m for m in sys.modules if m.startswith(heavy)])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_every_public_exception_is_in_pte_errors() -> None:
    exported = {getattr(pte.errors, name) for name in pte.errors.__all__}
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
    ("home", "name"),
    [
        ("pte", "Engine"),
        ("pte", "EngineConfig"),
        ("pte", "RunResult"),
        ("pte", "AuditLog"),
        ("pte", "verify"),
        ("pte", "replay"),
        ("pte", "Policy"),
        ("pte", "OpenAIClient"),
        ("pte.engine", "ReplayClient"),
        ("pte.engine", "LLMClient"),
        ("pte.runs", "replay_file"),
        ("pte.catalogue", "tool_from_schema"),
        ("pte.policy", "catalogue_fingerprint"),  # `approve` needs it
        ("pte.errors", "ImportRefused"),
    ],
)
def test_core_names(home: str, name: str) -> None:
    assert name in importlib.import_module(home).__all__


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


def test_lazy_names_resolve_and_unknown_names_raise() -> None:
    assert pte.Engine.__name__ == "Engine"
    assert pte.runs.replay_file.__module__ == "pte._deploy._replaying"  # gives replay its deployment
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        pte.nope  # type: ignore[attr-defined]  # noqa: B018 - a name pte does not have: the test
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
    subject: Annotated[str, pte.policy.provenance("untrusted")]


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
    records: list[R], field: Annotated[str, pte.catalogue.FieldName(R)]
) -> Values[Annotated[Any, pte.catalogue.FieldOf(R, "field")]]:
    """The value of `field` of every record."""
    return Values(values=[r[field] for r in records])
'''


def test_a_tool_pack_needs_only_public_modules(tmp_path: Path) -> None:
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
    schema = compiled.output_schema("who")
    assert schema is not None and schema["properties"]["values"]["items"]["type"] == "string"
    with pytest.raises(pte.PlanRejected, match="no field 'sendr'"):
        pte.compile(plan("sendr"), registry)
    audit = pte.AuditLog(keep=True)
    audit.append("run_started", mode="run", request=None, tools=[], config={})  # the engine's part
    result = pte.Executor(registry).run(compiled, audit)
    assert result.result_value() == ["a@example.com"]
    public = {
        "ExtendedBy": pte.catalogue,
        "PickOf": pte.catalogue,
        "RegexGroups": pte.catalogue,
        "RegexPattern": pte.catalogue,
        "LabelTree": pte.policy,
        "run_in_store": pte.deployment,
        "decide": pte.deployment,
    }
    for name, module in public.items():
        assert name in module.__all__ and getattr(module, name).__doc__


PUBLIC_STORE_MODULES = {"pte.stores.postgres"}  # needs psycopg, so not imported by pte.stores


def test_implementation_modules_are_private() -> None:
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
    moved = {n for block in blocks for n in re.findall(r"(?<![\w.])pte\.(\w+)", block) if n in pte._MOVED}
    assert not moved, f"documented examples use names that moved out of pte: {sorted(moved)}"


def test_replay_is_a_function() -> None:
    assert callable(pte.replay) and not inspect.ismodule(pte.replay)
    assert pte.replay is pte.runs.replay_file
    assert "replay" in pte.__all__
