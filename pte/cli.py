"""The `pte` command line, callable in-process: ``main(["verify", "run.jsonl"])`` returns the
exit code the `pte` command would (0 ok, 1 rejected or failed closed, 2 usage)."""

from __future__ import annotations

from pte._cli import main

__all__ = ["main"]
