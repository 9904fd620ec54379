"""The documentation works as written: every Python example runs, the site lists every page.

The README and docs/*.md are what a newcomer copies from. Each page's Python examples run
in order, as one script, in a fresh directory (a later example may use an earlier one's
names, as a reader would); an example marked ``<!-- fragment: why -->`` (it needs the
reader's own server) is only compiled. The README's Python quickstart runs on its own and
must print what the README says it prints.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
BLOCK = re.compile(r"(<!-- fragment: (?P<why>[^>]*)-->\n)?```python\n(?P<code>.*?)```", re.S)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PTE_", "OPENAI_"))}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    return env


def _run(code: str, where: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=where, env=_env(), capture_output=True, text=True, timeout=600
    )


def _examples(page: Path) -> list[re.Match[str]]:
    return list(BLOCK.finditer(page.read_text(encoding="utf-8")))


@pytest.mark.parametrize("page", [p for p in PAGES if _examples(p)], ids=lambda p: str(p.relative_to(REPO)))
def test_every_python_example_of_a_page_runs(page: Path, tmp_path: Path) -> None:
    examples = _examples(page)
    for example in examples:
        compile(example["code"], f"{page.name} example", "exec")  # fragments too: valid Python
    runnable = [e["code"] for e in examples if e["why"] is None]
    if not runnable:
        return
    done = _run("\n".join(runnable), tmp_path)
    assert done.returncode == 0, f"{page.name}: {done.stderr[-3000:]}"


def test_the_readme_python_quickstart_prints_what_it_says(tmp_path: Path) -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Python quickstart", 1)[1]
    code = BLOCK.search(section)
    assert code is not None and len(code["code"].strip().splitlines()) <= 25
    promised = re.search(r"# (succeeded .*)$", code["code"], re.M)
    assert promised is not None, "the quickstart says what it prints"
    done = _run(code["code"], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == promised[1].strip()
    assert (tmp_path / "run.jsonl").exists()


def test_the_site_lists_every_page_and_the_readme_links_them() -> None:
    config = (REPO / "mkdocs.yml").read_text(encoding="utf-8")
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    for page in (REPO / "docs").glob("*.md"):
        assert f": {page.name}" in config, f"mkdocs.yml's nav lacks docs/{page.name}"
        if page.name != "index.md":
            assert f"(docs/{page.name})" in readme, f"the README does not link docs/{page.name}"
    assert len(readme.splitlines()) < 200, "the README is an entry point; the reference is in docs/"


def test_the_first_hour_page_runs_the_readmes_commands_as_written() -> None:
    """docs/index.md (the site's first page) repeats the README's install, Python and CLI
    quickstarts; a change to one that misses the other would send a reader down two paths."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    first_hour = (REPO / "docs" / "index.md").read_text(encoding="utf-8")
    fenced = re.compile(r"```(?:sh|python)\n.*?```", re.S)
    for section in ("## Install and run", "## Python quickstart", "## CLI quickstart"):
        block = fenced.search(readme.split(section, 1)[1])
        assert block is not None, section
        assert block[0] in first_hour, f"docs/index.md lacks the README's {section[3:]} as written"


def test_no_two_pages_share_a_topic() -> None:
    """One page per job: two pages titled "Hardening: limits …" and "Hardening: secrets …"
    split one job in two, and a reader cannot tell which to open. A title's topic is what
    comes before its colon."""
    topics: dict[str, str] = {}
    for page in sorted((REPO / "docs").glob("*.md")):
        title = re.search(r"^# +(.+?) *$", page.read_text(encoding="utf-8"), re.M)
        assert title is not None, f"docs/{page.name} has no title"
        topic = re.sub(r"^the ", "", title[1].split(":", 1)[0].strip().lower())
        assert topic not in topics, f"docs/{page.name} and docs/{topics[topic]} share the topic {topic!r}"
        topics[topic] = page.name


LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")
SECTION_REF = re.compile(r'README,? "(?P<section>[^"]+)"')


def _slugs(page: Path) -> set[str]:
    """The heading anchors of a page, as MkDocs' toc extension makes them."""
    from markdown.extensions.toc import slugify

    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return {slugify(m.group(1).strip(), "-") for m in re.finditer(r"^#+ +(.+?) *$", text, re.M)}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_and_anchor_resolves(page: Path) -> None:
    """mkdocs build --strict checks docs/ against docs/; this checks the README too, and the
    prose references to README sections ('README, "Approvals"') that no link checker sees."""
    broken = []
    text = page.read_text(encoding="utf-8")
    for match in LINK.finditer(re.sub(r"```.*?```", "", text, flags=re.S)):
        target = match.group("target")
        if re.match(r"[a-z]+:", target):
            continue  # an absolute URL: no network in tests
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in _slugs(file):
            broken.append(f"{target}: no heading #{anchor} in {file.name}")
    readme_sections = {
        m.group(1).strip() for m in re.finditer(r"^#+ +(.+?) *$", (REPO / "README.md").read_text(), re.M)
    }
    for match in SECTION_REF.finditer(text):
        if match.group("section") not in readme_sections:
            broken.append(f'README, "{match.group("section")}": the README has no such section')
    assert not broken, broken
