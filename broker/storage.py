"""Whether the broker can write its journal and its trace now, and what it does when not.

Data: the OSError of a failed journal sync (broker.journal.WriteFailed) or trace flush
(airlock.trace.TraceWriter), and the result of each later try.
Readers: the loop, which refuses intake while anything fails (broker.carry sets
Router.disk_full: Refused code disk_full), skips compaction (broker.housekeeping), and
retries at most once every RETRY_S (broker.carry); the trace and stderr (the supervisor's
log), where each change of state is written.
Rationale: a full disk or an I/O error used to crash the broker with a traceback, and
clients heard "did not answer". Now it is a state: nothing accepted without its journal
record on disk, nothing crashes, and the broker resumes by itself when writes work again.
"""

from __future__ import annotations

import errno
import sys
import time
from collections import Counter

from airlock import records
from airlock.records import StorageFailed, StorageRecovered, utc_now
from airlock.wire import Refused

RETRY_S = 1.0  # how often a failing journal is probed again (the trace writer keeps its own)


def refusal(ref: int, why: str) -> Refused:
    """The answer to a Submit the broker could not keep (`why`: Storage.reason()): code
    disk_full, whether it was refused on arrival or its journal record failed to sync."""
    return Refused(ref=ref, code="disk_full",
                   reason=f"not accepted: disk full ({why}); nothing was kept, send it again later")


class Storage:
    def __init__(self, counters: Counter[str]) -> None:
        self.failing: dict[str, tuple[OSError, float]] = {}  # "journal" / "trace" -> (error, since)
        self._counters = counters  # the Router's: how many Submits were refused meanwhile
        self._refused_before = 0
        self._next_try = 0.0

    def reason(self) -> str:
        """What fails, for a refusal's text ("" when nothing does)."""
        return "; ".join(f"cannot write the {what}: {error!s}" for what, (error, _) in self.failing.items())

    def failed(self, what: str, error: OSError, now: float) -> list[bytes]:
        """A write to `what` failed: a storage_failed line (once per outage) and stderr."""
        if what in self.failing:
            return []
        if not self.failing:
            self._refused_before = self._counters["refused.disk_full"]
        self.failing[what] = (error, now)
        self._next_try = now + RETRY_S
        print(f"broker: cannot write the {what} ({error!s}); new email is refused (disk_full) "
              "until it can, and the broker resumes by itself", file=sys.stderr, flush=True)
        return [records.encode(StorageFailed(utc_now(), None, "broker", file=what, error=str(error),
                                             errno=errno.errorcode.get(error.errno or 0, "")))]

    def recovered(self, what: str, now: float, lines_dropped: int | None = None) -> list[bytes]:
        """Writes to `what` work again: a storage_recovered line and stderr (`lines_dropped`:
        the trace's lines dropped meanwhile)."""
        failed = self.failing.pop(what, None)
        if failed is None:
            return []
        refused = self._counters["refused.disk_full"] - self._refused_before
        print(f"broker: the {what} can be written again after {now - failed[1]:.1f} s "
              f"({refused} emails refused meanwhile)", file=sys.stderr, flush=True)
        return [records.encode(StorageRecovered(utc_now(), None, "broker", file=what,
                                                failed_for_s=round(now - failed[1], 3), refused=refused,
                                                lines_dropped=lines_dropped))]

    def due(self, what: str, now: float | None = None) -> bool:
        """Whether `what` fails and a retry is due (at most once every RETRY_S)."""
        now = time.monotonic() if now is None else now
        if what not in self.failing or now < self._next_try:
            return False
        self._next_try = now + RETRY_S
        return True
