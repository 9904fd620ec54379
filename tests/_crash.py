"""The SIGKILL child of the crash-and-resume tests, in one place.

A child process kills itself right before (mode "before") or right after ("after") the audit
record with sequence number KILL_AT reaches its log: every record boundary, with and without
the tool call that happens between a write step's two records (a read step's two go in one
write, so the kill lands before or after both). `KILL_PATCH` is that patch alone
(any `AuditLog`, a file's or a run store's); a test appends what its child runs, and formats
the whole with ``repo=`` (and its own fields). `ENGINE_CHILD` is the common case: run the plan
in the file ``sys.argv[2]`` with the packs named by ``packs`` into the log ``sys.argv[1]``.
The child imports only PTE's public API.
"""

from __future__ import annotations

import textwrap

__all__ = ["ENGINE_CHILD", "KILL_PATCH"]

KILL_PATCH = textwrap.dedent(
    """
    import os, signal, sys
    sys.path.insert(0, {repo!r})
    from pte import AuditLog

    kill_at, mode = int(os.environ["KILL_AT"]), os.environ["KILL_MODE"]
    original = AuditLog.append

    def append(self, type, /, **fields):
        if mode == "before" and self.next_seq == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        record = original(self, type, **fields)
        if mode == "after" and record["seq"] == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        return record

    original_together = AuditLog.write_records

    def write_records(self, records):
        # A read step's two records go in one write: "before" either of them is before both.
        if mode == "before" and self.next_seq <= kill_at < self.next_seq + len(records):
            os.kill(os.getpid(), signal.SIGKILL)
        written = original_together(self, records)
        if mode == "after" and any(record["seq"] == kill_at for record in written):
            os.kill(os.getpid(), signal.SIGKILL)
        return written

    AuditLog.append = append
    AuditLog.write_records = write_records
    """
)

ENGINE_CHILD = KILL_PATCH + textwrap.dedent(
    """
    from pte import Engine, load_registry

    registry = load_registry({packs})
    with AuditLog(sys.argv[1]) as audit:
        Engine(registry).execute(open(sys.argv[2]).read(), audit)
    """
)
