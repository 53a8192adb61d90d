"""Run a tool call under the timeout_s its catalog entry declares, and stop waiting at its deadline.

Every tool call runs here, whatever the tool is and however it blocks (a slow store, a hung
socket, a mock told to be slow): the actor never waits on a tool longer than its timeout.
Two ways, one contract (the value, what the call raised, or Overran):

- On the main thread (the actor's own loop): the call runs inline under a one-shot interval
  timer (SIGALRM). At the deadline the handler raises out of the call, so it stops there:
  Python code is cut off between bytecodes and a blocking wait (sleep, a lock, a socket)
  is interrupted (PEP 475). Two setitimer calls cost about 2 µs; the thread hop that the
  other way needs cost 100-280 µs of wall time per call on the loaded 2-core machine, twice
  an email (measured with the in-process bench). Not cut off: C code that never returns to
  Python; a tool with such a call belongs behind a process boundary, as real tools are.
- Anywhere else (a test or a lab that runs the actor on a thread, or a process whose SIGALRM
  is already someone else's): the call runs on a reused thread and the caller stops waiting
  at the deadline. A call that overruns keeps its thread, which is given up on: the call is
  told so through the event it was handed (a mock that waits on it stops at once), it ends
  when the call returns, and its answer is dropped. At most MAX_OVERRUNNING such threads may
  be alive at once; past that, a call is not started (Overran) rather than a thread more
  made, so a tool that hangs forever costs a bounded number of threads.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # CPython's C module under `signal`; no stub
import _thread
import queue
import signal
import threading
from collections.abc import Callable
from typing import Any

# The C functions under `signal`: its wrappers turn every handler into an enum and back,
# which was 5% of the actor's CPU at four calls an email (py-spy, bench load).
_ALARM, _TIMER, _DEFAULT = int(signal.SIGALRM), signal.ITIMER_REAL, int(signal.SIG_DFL)
MAX_OVERRUNNING = 4  # threads still running a call whose caller stopped waiting (the old pool's size)


class Overran(Exception):
    """The call gave no answer within its deadline, or was not started because too many
    earlier calls still run past theirs. Either way the caller has no result."""


class _Expired(BaseException):
    """Raised into an inline call by the timer. A BaseException, as KeyboardInterrupt is, so
    a tool's own `except Exception` cannot swallow its deadline; the caller gets Overran."""


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
    """Runs callables each under its own timeout: inline under a timer where it can, else
    on reused threads. `inline`: None chooses per call (above); False always uses threads."""

    def __init__(self, max_overrunning: int = MAX_OVERRUNNING, inline: bool | None = None) -> None:
        self.max_overrunning, self.inline = max_overrunning, inline
        self._armed = False  # a timer is set for the inline call running now
        self._inline_cancelled = threading.Event()  # set only if an inline call overran
        self._idle: list[_Worker] = []  # list.pop/append are atomic: callers on several threads get one each
        self._overrunning: list[threading.Thread] = []

    def call(self, job: Job, timeout_s: float) -> Any:
        """job(cancelled)'s value, or what it raised; Overran if it has not answered within
        timeout_s (and `cancelled` is then set, for a job that can stop early)."""
        if self._alarm_is_ours():
            return self._call_inline(job, timeout_s)
        return self._call_on_thread(job, timeout_s)

    def _alarm_is_ours(self) -> bool:
        """On the main thread, with SIGALRM unclaimed and no timer of another armed."""
        if self.inline is False or threading.current_thread() is not threading.main_thread():
            return False
        return _signal.getsignal(_ALARM) == _DEFAULT and not _signal.getitimer(_TIMER)[0]

    def _call_inline(self, job: Job, timeout_s: float) -> Any:
        cancelled = self._inline_cancelled
        try:
            _signal.signal(_ALARM, self._on_alarm)  # given back below: SIGALRM is ours per call only
            self._armed = True
            _signal.setitimer(_TIMER, timeout_s)
            try:
                return job(cancelled)
            finally:  # the timer may fire in here too, before it is disarmed: still Overran
                self._armed = False
                _signal.setitimer(_TIMER, 0)
                _signal.signal(_ALARM, _DEFAULT)
        except _Expired:
            _signal.setitimer(_TIMER, 0)
            _signal.signal(_ALARM, _DEFAULT)
            self._armed = False
            self._inline_cancelled = threading.Event()  # the next call's, not yet set
            raise Overran(f"no result within {timeout_s} s") from None

    def _on_alarm(self, signum: int, frame: object) -> None:
        if self._armed:  # a timer that fires after its call returned changes nothing
            self._armed = False
            self._inline_cancelled.set()
            raise _Expired

    def _call_on_thread(self, job: Job, timeout_s: float) -> Any:
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
