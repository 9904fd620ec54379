"""Worker processes for tools declared ``isolation="process"``: killed, not abandoned, on timeout.

Each such tool gets worker processes of its own (started with ``spawn``, so nothing of the
executor's threads or locks is inherited), reused from call to call. A worker imports the
tool by module and qualified name (or from its tool pack file), puts itself in a process
group of its own, and runs one call at a time. When a call overruns ``timeout_s`` the whole
group is killed with SIGKILL and reaped before the step fails, so no effect of that call
can happen after the deadline; effects made before it stay (use a transaction for
all-or-nothing). Starting a worker (interpreter start-up and imports) is not counted in the
tool's timeout; it is bounded separately by `SPAWN_TIMEOUT_S`.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import multiprocessing
import os
import signal
import sys
import threading
from typing import Any

from pte._catalogue import ToolSpec, spec_of
from pte._core import ToolError
from pte._execution._attempt import attempt_sync

__all__ = ["SPAWN_TIMEOUT_S", "call_in_process"]

#: How long a new worker process may take to start and import its tool.
SPAWN_TIMEOUT_S = 60.0
#: Idle workers kept per tool.
_MAX_IDLE = 4

#: (module, file of the module or None, qualified name): how a worker finds its tool.
_ToolRef = tuple[str, str | None, str]


def _tool_ref(spec: ToolSpec) -> _ToolRef:
    module = spec.func.__module__
    file = getattr(sys.modules.get(module), "__file__", None)
    return module, file, spec.func.__qualname__


def _load_tool(ref: _ToolRef) -> ToolSpec:
    module_name, file, qualname = ref
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        # A tool pack loaded from a file (pte._catalogue._registry.load_pack) has no importable name.
        if file is None:
            raise
        loader_spec = importlib.util.spec_from_file_location(module_name, file)
        if loader_spec is None or loader_spec.loader is None:
            raise
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[module_name] = module
        loader_spec.loader.exec_module(module)
    obj: Any = module
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return spec_of(obj)


def _worker_main(conn: Any, ref: _ToolRef) -> None:
    """The worker process: load the tool, then answer calls until the pipe closes."""
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)  # its own group: a kill on timeout reaches anything it started
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the operator's Ctrl-C is the parent's to handle
    try:
        spec = _load_tool(ref)
    except BaseException as exc:
        conn.send(("failed", f"{type(exc).__name__}: {exc}"))
        return
    conn.send(("ready", None))
    while True:
        try:
            args = conn.recv()
        except (EOFError, OSError):
            return
        output, error, transient = attempt_sync(spec, args)
        if error is None:
            conn.send((output, None, False, False, False))
        else:
            conn.send((None, error.kind, error.message, error.fatal, transient))


class _Worker:
    """One worker process of one tool."""

    def __init__(self, spec: ToolSpec, ref: _ToolRef) -> None:
        context = multiprocessing.get_context("spawn")
        self.conn, child = context.Pipe()
        self.process = context.Process(
            target=_worker_main, args=(child, ref), name=f"pte-tool-{spec.name}", daemon=True
        )
        self.process.start()
        child.close()
        self._killed = False
        if not self.conn.poll(SPAWN_TIMEOUT_S):
            self.kill()
            raise ToolError("isolation_error", f"{spec.name}: its worker process did not start in time")
        try:
            state, detail = self.conn.recv()
        except (EOFError, OSError):
            state, detail = "failed", f"exit code {self.process.exitcode}"
        if state != "ready":
            self.kill()
            raise ToolError("isolation_error", f"{spec.name}: its worker process cannot load it: {detail}")

    def call(self, spec: ToolSpec, args: dict[str, Any]) -> tuple[Any, ToolError | None, bool]:
        """One attempt; on timeout the worker is killed before this returns."""
        try:
            self.conn.send(args)
            if not self.conn.poll(spec.timeout_s):
                self.kill()
                message = (
                    f"{spec.name} did not finish within {spec.timeout_s:g}s and its worker process was killed"
                )
                return None, ToolError("timeout", message), True
            output, kind, message, fatal, transient = self.conn.recv()
        except (EOFError, OSError):
            self.kill()
            if self._killed and self.process.exitcode == -signal.SIGKILL:
                return None, ToolError("tool_error", f"{spec.name}: its worker process was killed"), False
            code = self.process.exitcode
            return (
                None,
                ToolError("tool_error", f"{spec.name}: its worker process died (exit code {code})"),
                False,
            )
        if kind is None:
            return output, None, False
        return None, ToolError(kind, message, fatal=fatal), transient

    @property
    def alive(self) -> bool:
        return not self._killed and self.process.is_alive()

    def kill(self) -> None:
        """SIGKILL the worker's process group and reap it."""
        self._killed = True
        pid = self.process.pid
        if pid is not None:
            try:
                if os.getpgid(pid) == pid:
                    os.killpg(pid, signal.SIGKILL)
                else:
                    self.process.kill()
            except (ProcessLookupError, PermissionError):
                pass
        self.process.join(5)
        self.conn.close()


class _Pool:
    """Idle workers per tool."""

    def __init__(self) -> None:
        self._idle: dict[_ToolRef, list[_Worker]] = {}
        self._lock = threading.Lock()

    def acquire(self, spec: ToolSpec) -> tuple[_ToolRef, _Worker]:
        ref = _tool_ref(spec)
        with self._lock:
            idle = self._idle.get(ref, [])
            while idle:
                worker = idle.pop()
                if worker.alive:
                    return ref, worker
        return ref, _Worker(spec, ref)

    def release(self, ref: _ToolRef, worker: _Worker) -> None:
        with self._lock:
            idle = self._idle.setdefault(ref, [])
            if worker.alive and len(idle) < _MAX_IDLE:
                idle.append(worker)
                return
        worker.kill()


_POOL = _Pool()


def call_in_process(spec: ToolSpec, args: dict[str, Any], call: Any) -> tuple[Any, ToolError | None, bool]:
    """One attempt of `spec` in a worker process; `call._worker` is set while it runs (cancel kills it)."""
    try:
        ref, worker = _POOL.acquire(spec)
    except ToolError as exc:
        return None, exc, False
    call._worker = worker
    try:
        result = worker.call(spec, args)
    finally:
        call._worker = None
    _POOL.release(ref, worker)
    return result
