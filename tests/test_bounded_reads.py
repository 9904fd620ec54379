"""One read loop for every bounded read (duplicates D7): `read_at_most` in the core, used by the
core's `read_bounded_bytes` and the CLI's `read_bounded`, which used to repeat it with different
results. Both keep their own answers: the core refuses a file over its bound, the CLI hands the
first ``max + 1`` bytes to its caller's size check; both agree on where the bound is."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

# private: the CLI's reader of plan files and the core's bounded reads, white-box
from pte._cli._support import InputFileError, read_bounded
from pte._core import FileRefused, read_at_most, read_bounded_bytes


@given(data=st.binary(max_size=300), bound=st.integers(min_value=0, max_value=320))
def test_both_readers_agree_on_the_bound_and_read_the_same_prefix(data: bytes, bound: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "f"
        path.write_bytes(data)
        assert read_at_most(path, "file", bound) == data[:bound]
        over = len(data) > bound
        if over:
            with pytest.raises(FileRefused, match=f"over {bound} bytes"):
                read_bounded_bytes(path, "file", bound)
        else:
            assert read_bounded_bytes(path, "file", bound) == data
        try:
            text, cli_over = read_bounded(str(path), "file", bound)
        except InputFileError as exc:  # not UTF-8 (the CLI decodes only a file within its bound)
            assert not over and "not UTF-8" in str(exc)
            return
        assert cli_over == over
        if not over:
            assert text == data.decode("utf-8")


def test_a_fifo_and_a_directory_are_refused_by_both_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path, said in ((fifo, "FIFO"), (tmp_path, "directory")):
        with pytest.raises(FileRefused, match=said):
            read_at_most(path, "file", 10)
        with pytest.raises(InputFileError):
            read_bounded(str(path), "file", 10)
    with pytest.raises(FileRefused, match="does not exist"):
        read_at_most(tmp_path / "missing", "file", 10)
