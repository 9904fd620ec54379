"""How a tool call runs: where, under which timeout, and how often (retries).

One call (`_Call`) is one or more *attempts*. Each attempt runs in the place its tool's
kind gives it, under the tool's ``timeout_s``:

- a plain tool, ``isolation="thread"`` (default): on a daemon worker thread. On timeout the
  attempt is *abandoned*: Python cannot stop a thread, so the call may still finish and
  have its effect later; its result is discarded, and it never blocks the run or exit.
- a plain tool, ``isolation="process"``: in a worker process of that tool (`pte._execution._process`).
  On timeout the process (and its process group) is killed with SIGKILL: nothing of the
  call happens after the deadline.
- an ``async def`` tool: as a task on the invoker's event-loop thread. On timeout the task
  is *cancelled* (its ``finally`` blocks and ``async with`` exits run). A coroutine that
  blocks the loop or ignores the cancellation is abandoned one grace second later, and the
  loop is replaced so that later async calls are not stuck behind it.

A failed attempt is retried when the tool declares ``retries`` and the failure is transient
(`TransientError`, a timeout, or an exception of a ``retry_on`` type), after ``backoff_s``
(doubled each time). The call ends with the first success or the last failure.

This module must never import an LLM client (tests/e2e/test_executor_isolation.py).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

import msgspec

from pte._catalogue import ToolSpec
from pte._core import ToolError
from pte._execution._attempt import Attempt, attempt_sync, classify
from pte._execution._process import call_in_process
from pte._plan import copy_json

__all__ = ["CallOutcome", "settled", "start_call"]

#: How long a cancelled async attempt gets to stop before it is abandoned.
CANCEL_GRACE_S = 1.0


class CallOutcome(msgspec.Struct, frozen=True):
    """How a call ended: its output or its (last) error, and the failed attempts before it.

    A frozen msgspec `Struct` (one per call: a frozen dataclass's Python ``__init__`` cost
    five times as much, #37)."""

    output: Any = None
    error: ToolError | None = None
    attempts: int = 1
    retry_errors: tuple[ToolError, ...] = ()


def settled(error: ToolError) -> ToolError:
    """`error` as a step's recorded failure: its kind and message, without the frames it was raised through.

    A raised exception keeps its traceback (and its ``__context__``/``__cause__``, with
    theirs), whose frames hold the run that caught it; kept in the run's `StepResult`, it
    closes a reference cycle (run -> result -> error -> frame -> run) that keeps the whole
    run, its plan and its outputs, alive until a garbage-collector pass instead of freeing
    them when the run ends. Nothing reads those frames: a failure is recorded as `to_dict`.
    """
    error.__traceback__ = None
    error.__context__ = None
    error.__cause__ = None
    return error


async def _attempt_async(spec: ToolSpec, args: dict[str, Any]) -> Attempt:
    timer = asyncio.timeout(spec.timeout_s)
    try:
        async with timer:
            output = await spec.ainvoke(args)
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():  # the call was cancelled: not a result
            raise
        return classify(spec, asyncio.CancelledError("raised by the tool"))
    except BaseException as exc:
        if not timer.expired():
            return classify(spec, exc)
    if timer.expired():  # also when the tool swallowed the cancellation and returned
        return (
            None,
            ToolError("timeout", f"{spec.name} did not finish within {spec.timeout_s:g}s and was cancelled"),
            True,
        )
    return output, None, False


# --- the places attempts run ----------------------------------------------------------------------


class _Workers:
    """Daemon worker threads: an idle one takes the next job, a new one starts when none is idle.

    A thread stuck in an abandoned call simply stays busy; it never holds up other calls
    (they get another thread) nor interpreter exit (daemon).
    """

    MAX_IDLE = 32

    def __init__(self) -> None:
        self._idle: list[_Worker] = []
        self._lock = threading.Lock()

    def submit(self, job: Callable[[], None]) -> None:
        with self._lock:
            worker = self._idle.pop() if self._idle else None
        if worker is None:
            worker = _Worker(self)
        worker.jobs.put(job)

    def idle(self, worker: _Worker) -> bool:
        """Take `worker` back; False tells it to end (enough idle threads already)."""
        with self._lock:
            if len(self._idle) >= self.MAX_IDLE:
                return False
            self._idle.append(worker)
            return True


class _Worker:
    def __init__(self, pool: _Workers) -> None:
        import queue

        self.jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._pool = pool
        threading.Thread(target=self._loop, name="pte-tool-worker", daemon=True).start()

    def _loop(self) -> None:
        while True:
            job = self.jobs.get()
            job()
            del job  # drop the call's references before waiting for the next one
            if not self._pool.idle(self):
                return


class _Timers:
    """One daemon thread that runs callbacks at given `time.monotonic()` times.

    Deadlines of calls that finished in time stay queued until they pass; they hold only
    a weak reference to their call and do nothing then.
    """

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._cond = threading.Condition()
        self._order = itertools.count()
        self._thread: threading.Thread | None = None

    def call_at(self, when: float, callback: Callable[[], None]) -> None:
        with self._cond:
            heapq.heappush(self._heap, (when, next(self._order), callback))
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="pte-timers", daemon=True)
                self._thread.start()
            elif self._heap[0][2] is callback:  # a new earliest time: wake the thread early
                self._cond.notify()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._heap or self._heap[0][0] > time.monotonic():
                    self._cond.wait(self._heap[0][0] - time.monotonic() if self._heap else None)
                callback = heapq.heappop(self._heap)[2]
            callback()


class _EventLoop:
    """The event loop async tools run on, in a daemon thread; replaced when a tool wedges it.

    A replaced (retired) loop runs until the calls still on it are done (the wedge cleared, or
    they were cancelled), then stops and is closed, and its thread ends: it used to run idle
    for the rest of the process, a thread and its descriptors per wedge.
    """

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()

    def get(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(target=_serve, args=(loop,), name="pte-async-tools", daemon=True).start()
                self._loop = loop
            return self._loop

    def retire(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            if self._loop is not loop:
                return  # retired already
            self._loop = None
        loop.call_soon_threadsafe(lambda: loop.create_task(_stop_when_idle()))


def _serve(loop: asyncio.AbstractEventLoop) -> None:
    try:
        loop.run_forever()
    finally:
        loop.close()


async def _stop_when_idle() -> None:
    """Stop the running loop once no task but this one is left on it."""
    this = asyncio.current_task()
    while any(task is not this for task in asyncio.all_tasks()):
        await asyncio.sleep(0.05)
    asyncio.get_running_loop().stop()


_WORKERS = _Workers()
_TIMERS = _Timers()
_LOOP = _EventLoop()


# --- one call -------------------------------------------------------------------------------------


class _Call:
    """One tool call: its attempts, deadline, retries and the callback told how it ended."""

    def __init__(self, spec: ToolSpec, args: dict[str, Any], done: Callable[[CallOutcome], None]) -> None:
        self.spec = spec
        self.args = args
        self._done = done
        self._lock = threading.Lock()
        self._attempt = 0  # the current attempt's number: results of earlier ones are stale
        self._settled = False
        self._errors: list[ToolError] = []
        self._future: Any = None  # the async attempt's future
        self._loop: asyncio.AbstractEventLoop | None = None
        self._worker: Any = None  # the process attempt's worker (pte._execution._process)

    def start(self) -> None:
        spec = self.spec
        with self._lock:
            if self._settled:
                return
            self._attempt += 1
            attempt = self._attempt
        ref = weakref.ref(self)
        # A call that may be attempted again keeps its arguments as the executor handed them:
        # each attempt gets its own copy, since a tool may change what it was given (a
        # parameter typed `Any` is passed through by pydantic) before it fails.
        args = copy_json(self.args) if spec.retries else self.args
        if spec.is_async:
            loop = self._loop = _LOOP.get()
            future = asyncio.run_coroutine_threadsafe(_attempt_async(spec, args), loop)
            self._future = future
            future.add_done_callback(lambda f: _async_done(ref, attempt, f))
            deadline = spec.timeout_s + CANCEL_GRACE_S
        elif spec.isolation == "process":
            _WORKERS.submit(lambda: self._finished(attempt, call_in_process(spec, args, self)))
            deadline = None  # the worker thread waits with the timeout and kills on expiry
        else:
            _WORKERS.submit(lambda: self._finished(attempt, attempt_sync(spec, args)))
            deadline = spec.timeout_s
        if deadline is not None:
            _TIMERS.call_at(time.monotonic() + deadline, lambda: _deadline(ref, attempt))

    def _finished(self, attempt: int, result: Attempt) -> None:
        output, error, transient = result
        with self._lock:
            if self._settled or attempt != self._attempt:
                return  # an abandoned or cancelled attempt: its result does not count
            if error is not None and transient and attempt <= self.spec.retries:
                self._errors.append(error)
                self._attempt += 1  # nothing of this attempt may count any more
                retry = True
            else:
                self._settled = True
                retry = False
        if retry:
            delay = self.spec.backoff_s * 2 ** (attempt - 1)
            ref = weakref.ref(self)
            _TIMERS.call_at(time.monotonic() + delay, lambda: _retry(ref))
            return
        self._done(CallOutcome(output, error, attempt, tuple(self._errors)))

    def _retry(self) -> None:
        with self._lock:
            self._attempt -= 1  # start() counts it again
        self.start()

    def timed_out(self, attempt: int) -> None:
        """The attempt's deadline passed (for a thread: its timeout; async: timeout + grace)."""
        with self._lock:
            if self._settled or attempt != self._attempt:
                return
        spec = self.spec
        if spec.is_async:
            if self._loop is not None:
                _LOOP.retire(self._loop)
            self._future.cancel()
            message = (
                f"{spec.name} did not stop within {spec.timeout_s:g}s (it blocked the event loop or "
                "ignored cancellation) and was abandoned"
            )
        else:
            message = (
                f"{spec.name} did not finish within {spec.timeout_s:g}s and was abandoned "
                "(a thread cannot be stopped: it may still finish)"
            )
        self._finished(attempt, (None, ToolError("timeout", message), True))

    def cancel(self) -> bool:
        """Stop the call if it can be stopped (async: cancelled, process: killed): then True,
        and `done` is never called. A thread cannot be stopped: False, and the call goes on
        to its end (or its deadline) and reports as usual."""
        if not (self.spec.is_async or self.spec.isolation == "process"):
            return False
        with self._lock:
            if self._settled:
                return True
            self._settled = True
        if self._future is not None:
            self._future.cancel()
        worker = self._worker
        if worker is not None:
            worker.kill()
        return True


def _async_done(ref: weakref.ref[_Call], attempt: int, future: Any) -> None:
    call = ref()
    if call is None or future.cancelled():
        return
    call._finished(attempt, future.result())


def _deadline(ref: weakref.ref[_Call], attempt: int) -> None:
    call = ref()
    if call is not None:
        call.timed_out(attempt)


def _retry(ref: weakref.ref[_Call]) -> None:
    call = ref()
    if call is not None:
        call._retry()


def start_call(spec: ToolSpec, args: dict[str, Any], done: Callable[[CallOutcome], None]) -> _Call:
    """Start calling `spec` with `args`; `done` is called once, from some thread, with the outcome.

    Not called at all if the call is cancelled first.
    """
    call = _Call(spec, args, done)
    call.start()
    return call
