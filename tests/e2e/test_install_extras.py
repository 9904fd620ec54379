"""A name of its own, extras named where they are missing, nothing written when refused (#36).

The docs said ``pip install 'pte[postgres,workers]'``: on a fresh machine that installs the
package index's ``pte``, an unrelated library. The distribution is ``plan-then-execute``; every
install line says so, and every optional feature's message for a missing dependency names the
extra that holds it (checked with the module made unimportable, in a process of its own). The
README's specialists YAML runs on the base install (PyYAML is a base dependency), and a
refused ``pte run --specialists ... --audit X`` leaves no ``X`` behind.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
DIST = "plan-then-execute"


def _env(**extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PTE_", "OPENAI_"))}
    base["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), base.get("PYTHONPATH", "")) if p)
    return {**base, **extra}


def without(modules: list[str], code: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """Run `code` in a fresh interpreter where `modules` cannot be imported."""
    blocked = "import sys\n" + "".join(f"sys.modules[{m!r}] = None\n" for m in modules)
    return subprocess.run(
        [sys.executable, "-c", blocked + textwrap.dedent(code)],
        cwd=cwd,
        env=_env(**env),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_distribution_has_a_name_of_its_own_and_every_install_line_uses_it() -> None:
    assert PROJECT["name"] == DIST
    assert PROJECT["scripts"]["pte"] == "pte._cli._main:main"  # the command and import name stay pte
    wrong = re.compile(r"""pip install ['"]?pte(?:\[|['"\s]|$)|['"]pte\[""")
    pages = [REPO / "README.md", *(REPO / "docs").glob("*.md"), *(REPO / "pte").rglob("*.py")]
    found = [
        f"{p.relative_to(REPO)}: {m.group(0)}" for p in pages for m in wrong.finditer(p.read_text("utf-8"))
    ]
    assert found == []


def _extra_holds(extra: str, distribution: str) -> bool:
    return any(req.lower().startswith(distribution) for req in PROJECT["optional-dependencies"][extra])


#: feature -> (modules made missing, code that uses it, the extra, a distribution in that extra)
FEATURES = {
    "postgres": (
        ["psycopg"],
        "from pte.stores import open_store\ntry:\n    open_store('postgresql://u@127.0.0.1:9/db')\n"
        "except Exception as exc:\n    print(exc)",
        "postgres",
        "psycopg",
    ),
    "mcp": (
        ["mcp"],
        "from pte.importers.mcp import MCPConnection\ntry:\n    MCPConnection.stdio('true')\n"
        "except Exception as exc:\n    print(exc)",
        "mcp",
        "mcp",
    ),
    "openapi": (
        ["httpx"],
        "from pte.importers.openapi import load_openapi\ntry:\n    load_openapi('http://127.0.0.1:9/o.json')\n"
        "except Exception as exc:\n    print(exc)",
        "openapi",
        "httpx",
    ),
    "langchain": (
        ["langchain_core", "langchain_core.tools"],
        "from pte.importers.langchain import import_langchain_tools\ntry:\n    import_langchain_tools([])\n"
        "except Exception as exc:\n    print(exc)",
        "langchain",
        "langchain-core",
    ),
    "workers": (
        ["kombu", "kombu.transport", "kombu.connection", "celery"],
        # A worker starts only under a deployment (#33), so the extra is the next thing it needs.
        "from pte._cli._main import main\nassert main(['init', '--tools', 'calculator']) == 0\n"
        "sys.exit(main(['worker', '--broker', 'redis://127.0.0.1:9/0']))",
        "workers",
        "celery",
    ),
}


@pytest.mark.parametrize("feature", sorted(FEATURES))
def test_a_missing_optional_dependency_names_its_extra(feature: str, tmp_path: Path) -> None:
    modules, code, extra, distribution = FEATURES[feature]
    done = without(modules, code, tmp_path)
    said = done.stdout + done.stderr
    assert f"pip install '{DIST}[{extra}]'" in said, said
    assert "Traceback" not in said, said
    assert _extra_holds(extra, distribution), (extra, PROJECT["optional-dependencies"][extra])


def test_the_readme_specialists_yaml_runs_on_the_base_install(tmp_path: Path) -> None:
    # PyYAML is a base dependency, and the README's file is one the base install loads.
    assert any(req.lower().startswith("pyyaml") for req in PROJECT["dependencies"])
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    yaml_text = re.search(r"cat > specialists\.yaml <<'YAML'\n(.*?)\nYAML\n", readme, re.S)
    assert yaml_text is not None
    (tmp_path / "specialists.yaml").write_text(yaml_text.group(1) + "\n", encoding="utf-8")
    from pte import Engine, EngineConfig, load_registry
    from pte.plan import load_specialists

    specialists = load_specialists(tmp_path / "specialists.yaml")
    # An engine checks its specialists' catalogues against its registry (SpecialistError if not).
    Engine(load_registry(["backoffice"]), None, config=EngineConfig(specialists=tuple(specialists)))
    assert [s.name for s in specialists] == ["collections", "payments"]


@pytest.mark.parametrize(
    ("name", "text", "blocked"),
    [
        ("bad.json", json.dumps({"specialists": [{"name": "x"}]}), []),
        ("s.yaml", "- {name: billing, description: d, catalogue: [no_such_tool]}\n", []),
        ("s.yaml", "- {name: billing, description: d, catalogue: [customer_balance]}\n", ["yaml"]),
    ],
)
@pytest.mark.parametrize("command", ["run-audit", "run-store", "plan"])
def test_a_refused_specialists_file_writes_nothing(
    tmp_path: Path, name: str, text: str, blocked: list[str], command: str
) -> None:
    (tmp_path / name).write_text(text, encoding="utf-8")
    tail = {
        "run-audit": ["run", "Remind C002", "--audit", "X.jsonl"],
        "run-store": ["run", "Remind C002", "--store", "sqlite:///X.db"],
        "plan": ["plan", "Remind C002", "--audit", "X.jsonl", "-o", "X.json"],
    }[command]
    args = [*tail, "--tools", "backoffice", "--specialists", name]
    done = without(
        blocked,
        f"from pte._cli._main import main\nsys.exit(main({args!r}))",
        tmp_path,
        OPENAI_BASE_URL="http://127.0.0.1:9/v1",  # never reached: refused before any model call
        OPENAI_API_KEY="unused",
    )
    assert done.returncode == 2, done.stderr
    assert "--specialists" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [name], "a refused command wrote a file"


@pytest.mark.parametrize(
    ("name", "text", "why"),
    [
        # Two entries for one key: a reviewer reads the first catalogue, PyYAML kept the last.
        (
            "dup.yaml",
            "- name: payments\n  description: d\n  catalogue: [fx_rate]\n  catalogue: [send_payment]\n",
            "duplicate key 'catalogue'",
        ),
        (
            "dup.json",
            '[{"name": "payments", "description": "d", "catalogue": ["fx_rate"], '
            '"catalogue": ["send_payment"]}]',
            "duplicate key 'catalogue'",
        ),
        # An alias shares one node: a few lines can stand for a billion items.
        ("alias.yaml", "- &s {name: a, description: d, catalogue: [fx_rate]}\n- *s\n", "aliases"),
        ("date.yaml", "- {name: a, description: 2026-01-01, catalogue: [fx_rate]}\n", None),
    ],
)
def test_a_specialists_file_is_read_strictly(tmp_path: Path, name: str, text: str, why: str | None) -> None:
    from pte.errors import SpecialistError
    from pte.plan import load_specialists

    (tmp_path / name).write_text(text, encoding="utf-8")
    if why is None:  # a date stays the text it was written as
        (specialist,) = load_specialists(tmp_path / name)
        assert specialist.description == "2026-01-01"
        return
    with pytest.raises(SpecialistError, match=why):
        load_specialists(tmp_path / name)
