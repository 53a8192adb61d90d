"""Whether this whole process was just stopped: SIGSTOP, a paused container, a frozen VM.

Data: the wake-ups of one thread that sleeps TICK_S at a time.
Readers: the broker's handshake monitor (broker.handshakes).
Rationale: while the broker is stopped, every peer mid-handshake gives up (the stack's own
workers reconnect after 3 s of silence), and when it runs again libzmq reports each of
those handshakes as failed with no detail, exactly as it reports a peer without CURVE that
hung up on the broker's greeting. The two differ only in what the broker itself went
through, and a stop is seen from inside by a thread that wakes up late: a Python turn
however long still lets a sleeping thread run (the GIL is handed over every few ms), a
stopped process does not. So a failure seen while a wake-up is overdue, or within
GRACE_S after one came late, is the stop's doing, not a refusal.
"""

from __future__ import annotations

import threading
import time

TICK_S = 0.25
STALLED_S = 2.0  # a wake-up this late (or a beat this old) means the process was stopped
GRACE_S = 5.0  # after a stop, handshakes abandoned during it keep failing for a moment


class StallWatch:
    def __init__(self, tick_s: float = TICK_S, stalled_s: float = STALLED_S, grace_s: float = GRACE_S) -> None:
        self.tick_s, self.stalled_s, self.grace_s = tick_s, stalled_s, grace_s
        self._beat = time.monotonic()
        self._stall_ended, self._stall_s = float("-inf"), 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="broker-stall-watch", daemon=True)

    def start(self) -> StallWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(2 * self.tick_s)

    def _run(self) -> None:
        while not self._stop.wait(self.tick_s):
            self.beat(time.monotonic())

    def beat(self, now: float) -> None:
        """One wake-up at `now`: a gap past stalled_s since the last is a stop, remembered."""
        gap = now - self._beat
        if gap > self.stalled_s:
            self._stall_ended, self._stall_s = now, gap
        self._beat = now

    def stalled(self, now: float) -> float:
        """Seconds of the stop this process is coming out of, or 0.0 if there was none
        lately: a beat overdue now (the watcher has not run since the stop), or a stop
        that ended within grace_s."""
        overdue = now - self._beat
        if overdue > self.stalled_s:
            return overdue
        return self._stall_s if now - self._stall_ended <= self.grace_s else 0.0
