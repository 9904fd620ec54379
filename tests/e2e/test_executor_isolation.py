"""The executor never has an LLM client within reach: not at import time, not at run time, not in source.

Two independent checks. The dynamic one imports (and runs) the executor in a fresh
interpreter and looks at `sys.modules`. The static one parses pte/_execution/_executor.py and every
`pte` module it can import, directly or transitively, at any nesting level (function-level
imports included), and refuses any import of an LLM client or of the modules that use one.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "pte"

#: Must never be loaded in a process that only uses the executor.
FORBIDDEN_LOADED = ("openai", "pte._run._llm", "httpx", "httpx2", "anthropic")
#: Must never be imported, statically, by the executor or anything it imports.
FORBIDDEN_IMPORTS = ("openai", "anthropic", "pte._run._llm", "pte._run._engine", "pte._run._prompts")

PROBE = textwrap.dedent(
    """
    import json, sys
    FORBIDDEN = {forbidden!r}

    def loaded():
        return sorted(m for m in sys.modules if any(m == f or m.startswith(f + ".") for f in FORBIDDEN))

    import {target}
    after_import = loaded()
    after_run = None
    if {run!r}:
        # Run a plan too: a lazy import inside the executor would only show up now.
        from pte._audit._writer import AuditLog
        from pte._plan._compiler import compile_plan
        from pte._execution._executor import Executor
        from pte._catalogue._registry import Registry; from pte._catalogue._tool_decorator import tool

        @tool(timeout_s=5)
        def double(x: int) -> int:
            return 2 * x

        @tool(timeout_s=0.05)
        def boom() -> int:
            raise RuntimeError("no")

        registry = Registry([double, boom])
        plan = compile_plan(
            '{{"pte_plan": "1", "steps": [{{"id": "a", "tool": "double", "args": {{"x": 2}}}},'
            ' {{"id": "b", "tool": "double", "args": {{"x": {{"$ref": "a"}}}}}},'
            ' {{"id": "c", "tool": "boom", "args": {{}}}}], "result": {{"$ref": "b"}}}}',
            registry,
        )
        audit = AuditLog(keep=True)
        audit.append("run_started", request="probe")  # a run's first record (the engine's work)
        result = Executor(registry).run(plan, audit)
        assert result.outputs["b"] == 8 and result.result_value() == 8, result
        assert result.failure is not None and result.failure.step_id == "c"
        after_run = loaded()
    print(json.dumps({{"after_import": after_import, "after_run": after_run}}))
    """
)


def _probe(target: str, *, run: bool) -> dict[str, list[str] | None]:
    code = PROBE.format(forbidden=FORBIDDEN_LOADED, target=target, run=run)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    report: dict[str, list[str] | None] = json.loads(proc.stdout.strip().splitlines()[-1])
    return report


def test_importing_and_running_the_executor_loads_no_llm_client() -> None:
    report = _probe("pte._execution._executor", run=True)
    assert report["after_import"] == [], f"importing pte._execution._executor loaded {report['after_import']}"
    assert report["after_run"] == [], f"running a plan loaded {report['after_run']}"


def test_the_probe_would_notice_an_llm_client() -> None:
    # The engine does use the LLM client: if this saw nothing, the probe above would prove nothing.
    report = _probe("pte._run._engine", run=False)
    assert "pte._run._llm" in (report["after_import"] or [])


# --- the static check -----------------------------------------------------------------------------


def _module_file(name: str) -> Path | None:
    """The source file of a `pte` module (a package's __init__.py), or None if it is not one."""
    if name != "pte" and not name.startswith("pte."):
        return None
    parts = name.split(".")[1:]
    base = PACKAGE.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _module_name(path: Path) -> str:
    rel = path.relative_to(REPO).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """Every module the file at `path` may import (see `_imports_in`)."""
    return _imports_in(
        path.read_text(encoding="utf-8"), _module_name(path), is_package=path.name == "__init__.py"
    )


def _imports_in(source: str, module: str, *, is_package: bool = False) -> set[str]:
    """Every module `source` may import, anywhere in it (function bodies and `if` branches included).

    ``from pte import prompts`` yields both ``pte`` and ``pte._run._prompts``; relative imports are
    resolved against `module`; ``importlib.import_module("x")`` and ``__import__("x")`` with a
    literal count too.
    """
    tree = ast.parse(source)
    package = module if is_package else module.rpartition(".")[0]
    found: set[str] = set()
    type_only = _type_checking_imports(tree) if module == "pte" else set()
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, node.module] if node.module else anchor)
            else:
                base = node.module or ""
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            name = getattr(func, "attr", None) or getattr(func, "id", "")
            if name in {"import_module", "__import__"} and isinstance(node.args[0].value, str):
                found.add(node.args[0].value)
    return found


def _type_checking_imports(tree: ast.Module) -> set[int]:
    """The imports under ``if TYPE_CHECKING:`` at the top of `pte/__init__.py`: they type the names
    resolved on first use (`pte.Engine`, ...) and never run (the dynamic check above shows it)."""
    found: set[int] = set()
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            assert all(isinstance(n, ast.ImportFrom) for n in node.body), "only imports under TYPE_CHECKING"
            found.update(id(n) for n in node.body)
    return found


def _closure(root: str) -> dict[str, set[str]]:
    """Module -> its imports, for `root` and every `pte` module reachable from it.

    Importing ``pte.x.y`` runs ``pte/__init__.py`` and ``pte/x/__init__.py`` first, so the
    parent packages of every module are part of the closure too.
    """
    graph: dict[str, set[str]] = {}
    pending = [root]
    while pending:
        name = pending.pop()
        if name in graph:
            continue
        path = _module_file(name)
        if path is None:
            continue
        graph[name] = _imports(path)
        parents = [".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)]
        pending.extend(m for m in (*graph[name], *parents) if _module_file(m) is not None)
    return graph


def _forbidden(name: str) -> bool:
    return any(name == f or name.startswith(f + ".") for f in FORBIDDEN_IMPORTS)


def test_no_module_the_executor_imports_imports_an_llm_client() -> None:
    graph = _closure("pte._execution._executor")
    expected = {"pte", "pte._execution._executor", "pte._audit._writer", "pte._plan._model"}
    assert expected | {"pte._catalogue._tool_decorator"} <= set(graph), sorted(graph)
    offences = [
        f"{module} imports {name}" for module, names in sorted(graph.items()) for name in sorted(names)
    ]
    offences = [o for o in offences if _forbidden(o.rsplit(" ", 1)[1])]
    assert not offences, f"the executor can reach an LLM client: {offences}"


@pytest.mark.parametrize("module", ["pte._run._engine", "pte._run._llm"])
def test_the_static_check_would_notice(module: str) -> None:
    # The same walk from a module that does use the LLM must find it.
    graph = _closure(module)
    assert any(_forbidden(i) for imports in graph.values() for i in imports)


def test_the_import_walk_sees_function_level_relative_and_dynamic_imports() -> None:
    source = textwrap.dedent(
        """
        def later():
            from ._llm import OpenAIClient
            import importlib
            importlib.import_module("openai")

        if False:
            from pte._run import _prompts as prompts
        """
    )
    found = _imports_in(source, "pte._run._stages")
    assert {"pte._run._llm", "pte._run._llm.OpenAIClient", "openai", "pte._run", "pte._run._prompts"} <= found
    assert all(_forbidden(name) for name in ("pte._run._llm", "openai", "pte._run._prompts"))
