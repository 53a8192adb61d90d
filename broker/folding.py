"""Folding closed trace segments into the checkpoint, on a thread of its own.

Data: the closed segments the checkpoint does not cover yet (airlock.tracefiles), and a copy
of the ids the journal holds, taken when the fold is asked for.
Readers: the loop (broker.app) asks for a fold when the trace writer closed a segment, and
writes the line each fold returns into the trace (the loop is the trace's only writer).
Rationale: a fold reads a whole segment (64 MiB, some 22,000 emails), fsyncs it and writes
the checkpoint; on the loop that stalled the broker for seconds, and a long stall drops
every worker and makes clients report the broker down. Here the loop's part is a rename and
an open (airlock.trace) and a copy of the journal's ids (bounded by its compaction); the
thread makes the segments durable before it folds them (broker.housekeeping.fold), so a
checkpoint never says more than they hold. A crash meanwhile leaves a segment uncovered,
which the next start folds (airlock.tracefiles), as it would after a crash between a
rotation and its fold. Asks that come while a fold runs are taken together after it: one
fold covers every segment then closed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection

from airlock import records
from airlock.records import TraceCheckpointFailed, utc_now
from airlock.settings import Settings
from broker import housekeeping

STOP_WAIT_S = 60.0  # how long a stopping broker waits for a fold under way (one segment's)


class Folder:
    def __init__(self, settings: Settings,
                 fold: Callable[[Settings, Collection[str]], list[bytes]] = housekeeping.fold) -> None:
        self._settings, self._fold = settings, fold
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._asked: frozenset[str] | None = None  # the latest ask not taken yet
        self._running = False
        self._done: list[bytes] = []  # trace lines of finished folds, for the loop to write
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="trace-fold", daemon=True)
        self._thread.start()

    def ask(self, journalled: Collection[str]) -> None:
        """Fold what is closed now; `journalled` is copied here, on the caller's thread."""
        asked = frozenset(journalled)
        with self._lock:
            self._asked = asked
        self._wake.set()

    def take(self) -> list[bytes]:
        """The trace lines of the folds finished since the last call, in order."""
        with self._lock:
            done, self._done = self._done, []
        return done

    @property
    def busy(self) -> bool:
        """A fold asked for and not finished."""
        with self._lock:
            return self._asked is not None or self._running

    def stop(self, wait_s: float = STOP_WAIT_S) -> list[bytes]:
        """Wait for a fold under way (one asked for and not begun is left: the next start
        folds it); the lines still to write."""
        self._stopping = True
        self._wake.set()
        self._thread.join(wait_s)
        return self.take()

    def _run(self) -> None:
        while True:
            self._wake.wait()
            with self._lock:
                self._wake.clear()
                if self._stopping:
                    return
                journalled, self._asked = self._asked, None
                self._running = journalled is not None
            if journalled is None:
                continue
            try:
                lines = self._fold(self._settings, journalled)
            except Exception as exc:  # noqa: BLE001  a fold that fails is said, and folding goes on at the next ask
                lines = [records.encode(TraceCheckpointFailed(utc_now(), None, "broker",
                                                              error=f"{type(exc).__name__}: {exc}"))]
            with self._lock:
                self._done += lines
                self._running = False
