"""Which files of an ``mcp:`` command the deployment's fingerprint hashes (its ``mcp_servers``):
those the command names by a relative path inside the deployment's folder, by the path as
written, whatever the folder's own path. A property over commands mixing such paths with
options, programs, missing files, absolute paths and paths leading out of the folder (``..``).
"""

from __future__ import annotations

import hashlib
import shlex
import shutil
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

# private: the helper the fingerprint and the import table's re-import check share
from pte._deploy._pack_imports import server_files

#: Words naming a file inside the folder (server.py, lib/tool.py), however they get there.
INSIDE = ("server.py", "./server.py", "lib/tool.py", "lib/../server.py", "../deployment/server.py")
#: Words that do not: programs, options, missing files, folders, paths out of the folder, home.
NOT_INSIDE = (
    "python",
    "-u",
    "-m",
    "--server.py",
    "missing.py",
    "lib",
    "../outside.py",
    "lib/../../outside.py",
    "~/server.py",
)


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(a deployment folder holding server.py and lib/tool.py, beside an outside.py; a copy of
    it, as deep again elsewhere, beside another outside.py)."""
    root = tmp_path_factory.mktemp("servers")
    folder = root / "a" / "deployment"
    (folder / "lib").mkdir(parents=True)
    (folder / "server.py").write_text("print('server')\n", encoding="utf-8")
    (folder / "lib" / "tool.py").write_text("print('tool')\n", encoding="utf-8")
    (root / "a" / "outside.py").write_text("print('outside')\n", encoding="utf-8")
    copy = root / "b" / "c" / "deployment"
    shutil.copytree(folder, copy)
    (copy.parent / "outside.py").write_text("print('another outside')\n", encoding="utf-8")
    return folder, copy


words = st.one_of(
    st.sampled_from(INSIDE + NOT_INSIDE),
    st.text(alphabet="ab./-", min_size=1, max_size=6),  # names nothing that exists
)


@given(command=st.lists(words, max_size=6), absolute=st.booleans())
def test_the_files_named_inside_the_folder_are_hashed_wherever_it_lies(
    folders: tuple[Path, Path], command: list[str], absolute: bool
) -> None:
    folder, copy = folders
    if absolute:  # an absolute path is the operator's file outside the deployment: never hashed
        command = [*command, str(folder / "server.py")]
    spec = f"mcp:{shlex.join(command)}#lookup_invoice"
    hashed = server_files(spec, folder)
    assert set(hashed) == {w for w in command if w in INSIDE}
    for word, digest in hashed.items():
        named = (folder / word).resolve()
        assert named.is_relative_to(folder) and digest == hashlib.sha256(named.read_bytes()).hexdigest()
    # The folder's own path is no part of it: the copy elsewhere hashes the same.
    assert server_files(spec, copy) == hashed


def test_an_edited_file_changes_its_digest(folders: tuple[Path, Path], tmp_path: Path) -> None:
    _, copy = folders
    folder = tmp_path / "deployment"
    shutil.copytree(copy, folder)
    spec = "mcp:python server.py lib/tool.py"
    before = server_files(spec, folder)
    (folder / "lib" / "tool.py").write_text("print('changed')\n", encoding="utf-8")
    after = server_files(spec, folder)
    assert after["server.py"] == before["server.py"] and after["lib/tool.py"] != before["lib/tool.py"]
    assert server_files("openapi:spec.yaml", folder) == {}
