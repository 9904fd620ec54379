"""One read loop for every bounded read (duplicates D7): `read_at_most` in the core, used by the
core's `read_bounded_bytes` and the CLI's `read_bounded` (plan files, which used to repeat the loop
with different results). Each keeps its own answer: the core refuses a file over its bound, the
CLI hands the first ``max + 1`` bytes to its caller's size check (tests/cli/test_cli_hardening.py)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

# private: the core's bounded reads, white-box (the one loop and the refusal built on it)
from pte._core import FileRefused, read_at_most, read_bounded_bytes


@given(data=st.binary(max_size=300), bound=st.integers(min_value=0, max_value=320))
def test_the_loop_reads_the_prefix_and_the_bounded_read_refuses_exactly_what_is_over(
    data: bytes, bound: int
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "f"
        path.write_bytes(data)
        assert read_at_most(path, "file", bound) == data[:bound]
        assert read_at_most(path, "file", bound + 1) == data[: bound + 1]  # what the CLI reads
        if len(data) > bound:
            with pytest.raises(FileRefused, match=f"over {bound} bytes"):
                read_bounded_bytes(path, "file", bound)
        else:
            assert read_bounded_bytes(path, "file", bound) == data


def test_a_fifo_a_directory_and_a_missing_file_are_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path, said in ((fifo, "FIFO"), (tmp_path, "directory"), (tmp_path / "missing", "does not exist")):
        with pytest.raises(FileRefused, match=said):
            read_at_most(path, "file", 10)
