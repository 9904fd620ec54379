"""Plain tool calls on the run's own thread (its *owner*), with no hand-off to a worker thread.

A live run's loop runs on a worker thread of its own, the owner (`pte._execution._executor`). Handing a
call to another thread costs a queue, two thread wake-ups and a contended GIL each way:
tens of µs, more than a quick plain tool itself. So the rule, which depends only on the
tool's declaration and never on measured time:

- every call of a plain tool with ``isolation="thread"`` and no ``retries`` starts on the
  owner thread (async tools go to the event loop, process-isolated ones to their worker
  process, retried ones to worker threads: `pte._execution._invoke`);
- if such a call is still running `HAND_OVER_S` after it started while another step is
  running or ready, it is *handed over*: the watchdog starts a new owner thread, which
  continues the run, and the call goes on where it is, as an ordinary worker-thread call
  would (its result is reported when it ends; its timeout still applies). A *lone* call
  (nothing else running or ready: nothing could run beside it) is not handed over.

So a quick call costs no hand-off at all, and a call that waits on I/O holds up the start
of the other ready steps by `HAND_OVER_S` at most, after which they run concurrently with
it up to ``max_concurrency`` as before. Python code of two threads does not run at the same
time (the GIL), so a quick call on the owner costs the other ready steps no more than it
costs itself. Which thread ran a call shows neither in the log nor in the results.

Timeouts: an owner call that overruns its ``timeout_s`` fails its step with ``timeout`` at
the deadline and, if it still held the run, a new owner continues it; the call is
abandoned, exactly like a timed-out worker-thread call (a thread cannot be stopped: it may
still finish; only ``isolation="process"`` gives a call that is really stopped).

One watchdog timer serves every owner call of a run: it is armed again only when a call's
next event (hand-over time or deadline) comes before the one it is armed for, so a run of
many quick calls wakes the timer thread about once per `HAND_OVER_S`, not once per call.
"""

from __future__ import annotations

import math
import queue
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from pte._catalogue import ToolSpec
from pte._core import ToolError
from pte._execution._attempt import attempt_sync
from pte._execution._invoke import _TIMERS, CallOutcome

__all__ = ["HAND_OVER_S", "OwnerCalls", "Superseded", "may_run_on_owner"]

#: An owner call still running after this long, while other steps could run, is handed
#: over (the run gets a new owner). Long enough that an OS time slice lost to another
#: process rarely triggers it, short against the I/O calls it lets others overlap with.
HAND_OVER_S = 0.01

# The states of an owner call.
_RUNNING, _ENDED, _HANDED_OVER, _TIMED_OUT = range(4)


class Superseded(BaseException):
    """Ends an owner thread that no longer owns its run (never reaches a caller)."""


def may_run_on_owner(spec: ToolSpec) -> bool:
    """Whether calls of `spec` may run on the owner thread: plain, thread mode, no retries."""
    return not spec.is_async and spec.isolation == "thread" and not spec.retries


class _Call:
    __slots__ = ("deadline", "hand_over_at", "spec", "state", "step")

    def __init__(self, step: int, spec: ToolSpec, deadline: float, hand_over_at: float) -> None:
        self.step = step
        self.spec = spec
        self.deadline = deadline
        self.hand_over_at = hand_over_at
        self.state = _RUNNING

    def due(self) -> float:
        """When the watchdog must look at this call next."""
        return self.hand_over_at if self.hand_over_at < self.deadline else self.deadline


class OwnerCalls:
    """The owner calls of one run: at most one runs on the owner thread at a time.

    `completions` gets ``(step, CallOutcome)`` for each call, as from a worker thread;
    `new_owner`, a method of the run, starts a new owner thread for it (after a hand-over
    or a timeout). It is held weakly: the run holds this object, and a cycle between the
    two would keep a finished run (its audit log, its invoker) alive until a collector
    pass; replay and resume rely on each run being freed when it ends.
    """

    def __init__(
        self, completions: queue.SimpleQueue[tuple[int, CallOutcome]], new_owner: Callable[[], None]
    ) -> None:
        self._completions = completions
        self._new_owner = weakref.WeakMethod(new_owner)
        self._lock = threading.Lock()
        #: The call on the owner thread now (None between calls).
        self._current: _Call | None = None
        #: When the watchdog timer fires next (None: not armed).
        self._armed_at: float | None = None

    def call(self, i: int, spec: ToolSpec, args: dict[str, Any], *, hand_over: bool) -> None:
        """Run step `i`'s call here and report it; raises `Superseded` if the run moved on
        without this thread meanwhile (the call was handed over or timed out)."""
        now = time.monotonic()
        call = _Call(i, spec, now + spec.timeout_s, now + HAND_OVER_S if hand_over else math.inf)
        due = call.due()
        with self._lock:
            self._current = call
            arm = self._armed_at is None or due < self._armed_at
            if arm:
                self._armed_at = due
        if arm:
            self._arm(due)
        output, error, _ = attempt_sync(spec, args)
        with self._lock:
            state, call.state = call.state, _ENDED
            if self._current is call:
                self._current = None
        if state == _TIMED_OUT:
            raise Superseded  # its step already failed with a timeout: the result is discarded
        self._completions.put((i, CallOutcome(output, error)))
        if state == _HANDED_OVER:
            raise Superseded  # another thread owns the run now

    def _arm(self, when: float) -> None:
        ref = weakref.ref(self)
        _TIMERS.call_at(when, lambda: _watch(ref, when))

    def _watch(self, armed_for: float) -> None:
        """The watchdog fired: hand over or time out the current call if it is due."""
        with self._lock:
            if self._armed_at != armed_for:
                return  # superseded by a timer armed for an earlier time
            self._armed_at = None
            call = self._current
            if call is None:
                return  # the next call arms the timer again
            now = time.monotonic()
            due = call.due()
            if now < due:
                self._armed_at = due
                action = _RUNNING
            else:
                action = call.state = _TIMED_OUT if now >= call.deadline else _HANDED_OVER
                self._current = None
        if action == _RUNNING:
            self._arm(due)
            return
        if action == _TIMED_OUT:
            self._completions.put((call.step, CallOutcome(error=_timeout(call.spec))))
        else:  # handed over: its deadline is watched on its own from now on
            ref = weakref.ref(self)
            _TIMERS.call_at(call.deadline, lambda: _expire(ref, call))
        new_owner = self._new_owner()
        if new_owner is not None:  # else the run has ended: no one needs a new owner
            new_owner()

    def _expire(self, call: _Call) -> None:
        """A handed-over call's deadline passed: fail its step unless it ended in time."""
        with self._lock:
            if call.state != _HANDED_OVER:
                return
            call.state = _TIMED_OUT
        self._completions.put((call.step, CallOutcome(error=_timeout(call.spec))))


def _timeout(spec: ToolSpec) -> ToolError:
    return ToolError(
        "timeout",
        f"{spec.name} did not finish within {spec.timeout_s:g}s and was abandoned "
        "(a thread cannot be stopped: it may still finish)",
    )


def _watch(ref: weakref.ref[OwnerCalls], armed_for: float) -> None:
    calls = ref()
    if calls is not None:
        calls._watch(armed_for)


def _expire(ref: weakref.ref[OwnerCalls], call: _Call) -> None:
    calls = ref()
    if calls is not None:
        calls._expire(call)
