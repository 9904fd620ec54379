"""The JSON Lines store: today's audit log file, the zero-setup default for one-off runs.

``jsonl:path/to/log.jsonl`` or a bare file path. The file holds runs one after another on
one hash chain (see `pte._audit._writer`), so a run is verified as part of its file. It keeps no
approval decisions and no submitted jobs: pausing runs and workers need a SQL store.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pte._audit import AuditLog, Durability, RecordWriter, VerifyReport, iter_records, verify
from pte._core import StoreError
from pte.stores._base import RunInfo, Store, check_run_id, paused_status

__all__ = ["JsonlStore"]


class JsonlStore(Store):
    """One JSON Lines audit log file (created on the first append)."""

    def __init__(self, path: str | Path, *, url: str | None = None) -> None:
        self.path = Path(path)
        self.url = url if url is not None else f"jsonl:{path}"

    def audit_log(self, run_id: str | None = None, **kwargs: Any) -> AuditLog:

        if run_id is not None:
            check_run_id(run_id)
        return AuditLog(self.path, run_id=run_id, **kwargs)

    def writer(self, run_id: str, *, durability: Durability | str = "batch") -> RecordWriter:
        raise StoreError("a JSON Lines store is written by AuditLog itself: use JsonlStore.audit_log")

    def _numbered(self) -> Iterator[tuple[int, bytes, dict[str, Any]]]:

        if not self.path.is_file():
            raise StoreError(f"audit log {str(self.path)!r} does not exist")
        with open(self.path, "rb") as fh:
            raw_lines = fh.read().split(b"\n")
        for (number, record), raw in zip(
            iter_records(self.path, skip_partial_tail=True), raw_lines, strict=False
        ):
            yield number, raw + b"\n", record

    def lines(self, run_id: str) -> Iterator[bytes]:
        check_run_id(run_id)
        for _, raw, record in self._numbered():
            if record.get("run_id") == run_id:
                yield raw

    def verify(self, run_id: str, *, check_schema: bool = True) -> VerifyReport:
        """The whole file is verified: its runs share one chain."""

        check_run_id(run_id)
        if not self.path.is_file():
            raise StoreError(f"audit log {str(self.path)!r} does not exist")
        return verify(self.path, check_schema=check_schema)

    def runs(self, status: str | None = None) -> list[RunInfo]:
        found: dict[str, RunInfo] = {}
        for _, _, record in self._numbered():
            run_id = str(record.get("run_id"))
            info = found.setdefault(run_id, RunInfo(run_id, "running", created_at=record.get("ts")))
            info.records += 1
            info.updated_at = record.get("ts")
            rtype = record.get("type")
            if rtype == "run_finished":
                info.status, info.reason = str(record.get("status")), record.get("reason")
            elif rtype == "run_paused":
                info.status, info.plan_hash = paused_status(record), record.get("plan_hash")
                info.tools, info.expires_at = list(record.get("tools") or []), record.get("expires_at")
            elif rtype == "run_resumed":
                info.status = "running"
        return [info for info in found.values() if status is None or info.status == status]

    def __repr__(self) -> str:
        return f"JsonlStore({str(self.path)!r})"
