"""The shared JSON Lines file under the approval and endorsement stores (pte._core)."""

from __future__ import annotations

import threading
from pathlib import Path

# private: shared-file lines, white-box
from pte._core import append_line, read_shared


def test_read_append_and_a_check_that_refuses(tmp_path: Path) -> None:
    path = tmp_path / "store.jsonl"
    assert read_shared(path) is None  # no file yet: nothing recorded
    assert append_line(path, "a\n") and read_shared(path) == "a\n"
    assert not append_line(path, "b\n", lambda text: False)
    assert read_shared(path) == "a\n"
    assert append_line(path, "b\n", lambda text: text == "a\n") and read_shared(path) == "a\nb\n"


def test_a_checked_append_is_exactly_once_across_threads(tmp_path: Path) -> None:
    """The check reads under the lock it writes under: 8 racing 'use once' appends write one line."""
    path = tmp_path / "store.jsonl"
    path.write_text("", encoding="utf-8")
    barrier = threading.Barrier(8)

    def use() -> None:
        barrier.wait()
        append_line(path, "used\n", lambda text: "used" not in text)

    threads = [threading.Thread(target=use) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert read_shared(path) == "used\n"
