"""The areas of docs/architecture.md hold: import-linter's contracts pass, and every face imports.

The contracts (.importlinter) are import-linter's, run here as CI runs them (`lint-imports` in
.ci/run), so a change that imports upward, closes a cycle or lets the executor reach an LLM
client fails the tests too. The faces are imported each in a fresh interpreter, through their
public names only, so none of them works just because another face ran first.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: Every public face: the package, and the public subpackages and modules a user imports.
FACES = [
    "pte",
    "pte.errors",
    "pte.catalogue",
    "pte.plan",
    "pte.policy",
    "pte.audit",
    "pte.execution",
    "pte.engine",
    "pte.runs",
    "pte.deployment",
    "pte.cli",
    "pte.stores",
    "pte.stores.postgres",
    "pte.importers",
    "pte.importers.mcp",
    "pte.importers.openapi",
    "pte.importers.langchain",
    "pte.testing",
    "pte.testing.cookbook",
]


def test_import_linter_contracts_are_kept() -> None:
    done = subprocess.run(
        [sys.executable, "-c", "from importlinter.cli import lint_imports_command; lint_imports_command()"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


@pytest.mark.parametrize("face", FACES)
def test_every_face_imports_alone_with_every_public_name(face: str) -> None:
    code = (
        "import importlib\n"
        f"m = importlib.import_module({face!r})\n"
        "names = getattr(m, '__all__', None)\n"
        "assert names, 'a face declares its public names in __all__'\n"
        "missing = [n for n in names if getattr(m, n, None) is None and n != '__version__']\n"
        "assert not missing, missing\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr


def _import_graph() -> dict[str, set[str]]:
    """pte's modules and the pte modules each imports: every import, in a function or under
    TYPE_CHECKING too (an import moved into a function to dodge a cycle is still the cycle)."""
    mods = {}
    for path in (ROOT / "pte").rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = path
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        here = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(here[: len(here) - node.level + 1] + ([base] if base else []))
                names = [base] + [f"{base}.{alias.name}" for alias in node.names]
            else:
                continue
            for name in names:
                while name and name not in mods:
                    name = name.rpartition(".")[0]
                if name and name not in (mod, "pte"):
                    graph[mod].add(name)
    return graph


def test_no_import_cycles_between_pte_modules() -> None:
    graph = _import_graph()
    # Tarjan's strongly connected components, iteratively; a component of two or more is a cycle.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    assert cycles == []


# --- areas as packages: each with a face --------------------------------------------------------

#: The areas, lowest first (docs/architecture.md); each is a private package whose __init__ is its face.
AREAS = [
    "_core",
    "_audit",
    "_catalogue",
    "_plan",
    "_policy",
    "_execution",
    "_run",
    "_replay",
    "_deploy",
    "_cli",
]
#: White-box tests of an area live in tests/<area>/ and may import that area's private modules.
WHITE_BOX = {area: area.lstrip("_") for area in AREAS}


def test_the_area_list_is_the_package_list() -> None:
    on_disk = sorted(p.parent.name for p in (ROOT / "pte").glob("_*/__init__.py"))
    assert on_disk == sorted(AREAS)
    assert not sorted(p.name for p in (ROOT / "pte").glob("_*.py") if p.name != "__init__.py"), (
        "every private module belongs to an area package"
    )


@pytest.mark.parametrize("area", AREAS)
def test_every_area_face_imports_alone_with_every_name_it_exports(area: str) -> None:
    """The face is the only door into an area: it imports in a fresh interpreter, on its own,
    and everything it lists in __all__ is there."""
    face = f"pte.{area}"
    code = (
        "import importlib, sys\n"
        f"m = importlib.import_module({face!r})\n"
        "names = m.__all__\n"
        "missing = [n for n in names if not hasattr(m, n)]\n"
        "assert not missing, missing\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr


def _private_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) for every import of an area's private module (``pte._area._module``),
    or of a private module through a face (``from pte._area import _module``)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = (
                [node.module] if _is_private(node.module) else [f"{node.module}.{a.name}" for a in node.names]
            )
        else:
            continue
        found += [(node.lineno, ".".join(name.split(".")[:3])) for name in names if _is_private(name)]
    return found


def _is_private(name: str) -> bool:
    parts = name.split(".")
    return (
        len(parts) >= 3
        and parts[0] == "pte"
        and parts[1] in AREAS
        and parts[2].startswith("_")
        and not parts[2].startswith("__")
    )


def _offences(paths: list[Path], allowed_area: str | None) -> list[str]:
    return [
        f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name}:{line}: {name}"
        for path in paths
        for line, name in _private_imports(path)
        if name.split(".")[1] != allowed_area
    ]


def test_tests_import_pte_or_an_area_face_and_white_box_tests_only_their_own_area() -> None:
    top = sorted((ROOT / "tests").glob("*.py"))
    offences = _offences(top, None) + _offences(sorted((ROOT / "tests" / "e2e").rglob("*.py")), None)
    for area, folder in WHITE_BOX.items():
        offences += _offences(sorted((ROOT / "tests" / folder).rglob("*.py")), area)
    assert offences == []


def test_every_test_file_lives_with_its_area_or_in_e2e() -> None:
    """tests/<area>/ holds an area's tests (white-box ones may import its private modules),
    tests/e2e/ the tests of the whole (the public API, the docs, the CLI end to end); tests/
    itself keeps the shared helpers (services, conftest, packs) only."""
    assert sorted(p.name for p in (ROOT / "tests").glob("test_*.py")) == []
    folders = {p.parent.relative_to(ROOT / "tests").parts[0] for p in (ROOT / "tests").rglob("test_*.py")}
    assert folders <= {*WHITE_BOX.values(), "e2e"}, folders


def _unexplained_private_imports(path: Path) -> list[str]:
    """Every import of a private area (``pte._area`` or below) in `path` without its reason: a
    ``# private: why`` comment on the line above it or on its first line."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found = []
    for node in ast.walk(ast.parse("\n".join(lines))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        if not any(name.split(".")[:2][-1] in AREAS and name.startswith("pte.") for name in names):
            continue
        here, above = lines[node.lineno - 1], lines[node.lineno - 2] if node.lineno > 1 else ""
        if "# private: " not in here and not above.strip().startswith("# private: "):
            found.append(f"{path.name}:{node.lineno}: {names[0]}")
    return found


def test_tests_import_public_names_and_say_why_when_they_do_not() -> None:
    """Tests import `pte` and its public modules; an import of a private area says why in one
    line (``# private: ...``), so what reaches past the public line is visible and counted."""
    paths = sorted((ROOT / "tests").rglob("*.py"))
    offences = [offence for path in paths for offence in _unexplained_private_imports(path)]
    assert offences == []


def test_the_reason_check_would_notice(tmp_path: Path) -> None:
    probe = tmp_path / "test_probe.py"
    probe.write_text(
        "from pte import AuditLog\n"
        "from pte._core import sha256_hex\n"
        "# private: hashes, to check records by hand\n"
        "from pte._core import canonical_bytes\n"
        "import pte._audit._scan as scan  # private: the scanner's parts\n"
        "def f():\n"
        "    from pte._run import DATA_OPEN\n",
        encoding="utf-8",
    )
    assert _unexplained_private_imports(probe) == ["test_probe.py:2: pte._core", "test_probe.py:7: pte._run"]


def test_the_test_import_check_would_notice(tmp_path: Path) -> None:
    probe = tmp_path / "test_probe.py"
    probe.write_text(
        "from pte._audit._writer import AuditLog\nimport pte._run._engine\nfrom pte._plan import _model\n"
        "from pte._audit import AuditLog as Face\n",
        encoding="utf-8",
    )
    assert [name for _, name in _private_imports(probe)] == [
        "pte._audit._writer",
        "pte._run._engine",
        "pte._plan._model",
    ]
    assert _offences([probe], "_audit") == [
        "test_probe.py:2: pte._run._engine",
        "test_probe.py:3: pte._plan._model",
    ]


# --- one place builds an engine (#33) ----------------------------------------------------------

#: The one module of `pte` that calls ``Engine(``: the deployment's, with the parts
#: `pte.Deployment.engine` decided (the CLI, the demo, workers, replay and resume all get their
#: engine there, so its authority is the deployment's).
ENGINE_MAKER = Path("pte/_deploy/_deployment_engine.py")
#: Left out, and why: `pte.testing` is the public test doubles and cookbook, whose examples show
#: a program making its own `pte.Engine` from its own registry (public API: a program may), not
#: a way one of pte's commands gets authority. Docstrings are text, not calls (the AST is read).
ENGINE_EXEMPT = ("pte/testing/",)


def _engine_calls(path: Path) -> list[int]:
    """The lines of `path` that call ``Engine(...)`` (by name or as ``something.Engine``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            func = node.func
            name = (
                func.id
                if isinstance(func, ast.Name)
                else func.attr
                if isinstance(func, ast.Attribute)
                else None
            )
            if name == "Engine":
                found.append(node.lineno)
    return found


def test_only_the_deployment_module_makes_an_engine() -> None:
    offences = []
    for path in sorted((ROOT / "pte").rglob("*.py")):
        relative = path.relative_to(ROOT)
        if relative == ENGINE_MAKER or str(relative).startswith(ENGINE_EXEMPT):
            continue
        offences += [f"{relative}:{line}" for line in _engine_calls(path)]
    assert offences == [], "make the engine with pte.Deployment.engine (extend it if a caller needs more)"
    assert _engine_calls(ROOT / ENGINE_MAKER), "the deployment module makes the engine"


def test_the_engine_check_would_notice(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        '"""pte.Engine(registry, llm) in a docstring is text."""\n'
        "from pte._run import Engine\n"
        "import pte\n"
        "a = Engine(registry)\n"
        "b = pte.Engine(registry, llm, config=None)\n"
        "c = EngineConfig()\n",
        encoding="utf-8",
    )
    assert _engine_calls(probe) == [4, 5]
