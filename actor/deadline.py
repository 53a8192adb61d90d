"""Run a tool call off the actor's loop thread, and stop waiting for it at its deadline.

Every tool call runs here, under the timeout_s its catalog entry declares: the loop thread
never waits on a tool longer than that, whatever the tool is and however it blocks (a slow
store, a hung socket, a mock told to be slow).

A call's thread is reused for the next call: the hop costs about 10 µs of CPU, half of what a
concurrent.futures pool's Future costs (measured on the 2-core machine), and an email makes
one hop per step. A call that overruns keeps its thread, which is given up on: the call is
told so through the event it was handed (a mock that waits on it stops at once), it ends
when the call returns, and its answer is dropped. At most MAX_OVERRUNNING such threads may
be alive at once; past that, a call is not started (Overran) rather than a thread more made,
so a tool that hangs forever costs a bounded number of threads, never unbounded ones.
"""

from __future__ import annotations

import _thread
import queue
import threading
from collections.abc import Callable
from typing import Any

MAX_OVERRUNNING = 4  # threads still running a call whose caller stopped waiting (the old pool's size)


class Overran(Exception):
    """The call gave no answer within its deadline, or was not started because too many
    earlier calls still run past theirs. Either way the caller has no result."""


Job = Callable[[threading.Event], Any]  # called with the event set once its caller stopped waiting


class _Worker:
    """One thread that runs the calls handed to it, one at a time, until handed None."""

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self.answered = _thread.allocate_lock()  # released once per call, when it returned or raised
        self.answered.acquire()
        # One per thread, not per call (an Event costs a third of a hop): set only when a call
        # overran, and a thread whose call overran takes no other call.
        self.cancelled = threading.Event()
        self.outcome: tuple[bool, Any] = (False, None)
        self.thread = threading.Thread(target=self._loop, name="tool", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while (job := self.jobs.get()) is not None:
            try:
                self.outcome = (True, job(self.cancelled))
            except BaseException as exc:  # noqa: BLE001  (handed to the caller, who types it)
                self.outcome = (False, exc)
            self.answered.release()


class Deadlines:
    """Runs callables on reused threads, each under its own timeout."""

    def __init__(self, max_overrunning: int = MAX_OVERRUNNING) -> None:
        self.max_overrunning = max_overrunning
        self._idle: list[_Worker] = []  # list.pop/append are atomic: callers on several threads get one each
        self._overrunning: list[threading.Thread] = []

    def call(self, job: Job, timeout_s: float) -> Any:
        """job(cancelled)'s value, or what it raised; Overran if it has not answered within
        timeout_s (and `cancelled` is then set, for a job that can stop early)."""
        try:
            worker = self._idle.pop()
        except IndexError:
            worker = self._new_worker()
        worker.jobs.put(job)
        if not worker.answered.acquire(timeout=timeout_s):
            worker.cancelled.set()
            worker.jobs.put(None)  # it ends once the call returns; its answer goes nowhere
            self._overrunning.append(worker.thread)
            raise Overran(f"no result within {timeout_s} s")
        ok, value = worker.outcome
        worker.outcome = (False, None)  # the result is the caller's now: do not keep it alive here
        self._idle.append(worker)
        if ok:
            return value
        raise value

    def overrunning(self) -> int:
        """How many threads still run a call nobody waits for."""
        self._overrunning = [thread for thread in self._overrunning if thread.is_alive()]
        return len(self._overrunning)

    def _new_worker(self) -> _Worker:
        if self.overrunning() >= self.max_overrunning:
            raise Overran(f"not started: {self.max_overrunning} earlier calls still run past their timeout")
        return _Worker()

    def close(self) -> None:
        """End the idle threads; one still running a call ends when it returns."""
        while self._idle:
            self._idle.pop().jobs.put(None)
