"""What the loop does between turns so files and memory stay bounded: fold closed trace
segments into the checkpoint (off the loop while it serves: broker.folding), compact the
journal, hand freed memory back.

Data: the trace writer's `rotated` flag (a segment closed), the journal's size and which
of its emails are final, the heap's free pages.
Readers: the loop (broker.app), after each turn; recovery reads what the checkpoint keeps.
Rationale: a restart must read the checkpoint and the live segment, never all of history;
the journal must not keep every raw email forever; and the broker's churn must not leave
freed memory with glibc for good. Each step that fails (a full disk) leaves the old file
whole, says so in the trace, and is tried again later.
"""

from __future__ import annotations

import collections
import ctypes
import time
from collections.abc import Callable, Collection

from airlock import records, trace, tracefiles
from airlock.records import (
    JournalCompacted,
    JournalCompactionFailed,
    TraceCheckpoint,
    TraceCheckpointFailed,
    utc_now,
)
from airlock.settings import Settings
from broker.journal import Journal, Position
from broker.outbox import Effect
from broker.router import Router
from broker.storage import Storage

_malloc_trim: Callable[[int], int] | None
try:  # glibc's: hand the heap's free pages back to the kernel (absent on musl or macOS)
    _malloc_trim = ctypes.CDLL("libc.so.6").malloc_trim
except (OSError, AttributeError):
    _malloc_trim = None


def give_back_memory() -> None:
    """After a fold or a compaction, which free many objects at once (a segment's states, a
    journal index): hand glibc's free pages back rather than keep them. A walk of the heap,
    a few ms, every ~20,000 emails. Measured with `airlock bench --soak 10 --rate 400` it
    lowers the broker's late growth by about a quarter; the rest of that growth was the
    memory of finished outcomes stepping up once, which broker.recent's generations remove,
    not the allocator."""
    if _malloc_trim is not None:
        _malloc_trim(0)


def checkpoint(settings: Settings, writer: trace.TraceWriter, journal: Journal) -> list[Effect]:
    """Fold what the trace closed (a segment a crash left unfolded, an old single-file trace)
    now, on this thread: at start, before recovery reads the states. A running broker folds
    off its loop instead (broker.folding)."""
    writer.rotated = False
    return list(fold(settings, journal.sizes.keys()))


def fold(settings: Settings, journalled: Collection[str]) -> list[bytes]:
    """Fold the closed segments the checkpoint does not cover into it, so the next restart
    reads the checkpoint and the live segment only; `journalled` (the ids the journal holds)
    says which final emails must stay in it (airlock.tracefiles). The segments are made
    durable first. Returns the trace line that says what was done (none if nothing was due).
    Touches no state of the loop's: it may run on any thread."""
    try:
        tracefiles.make_durable(settings.trace_path)
        taken = tracefiles.write_checkpoint(settings.trace_path, journalled, settings.trace_keep_segments)
    except OSError as exc:  # a full disk: the old checkpoint stands; the next restart reads more
        return [records.encode(TraceCheckpointFailed(utc_now(), None, "broker", error=str(exc)))]
    give_back_memory()
    if taken is None:
        return []
    return [records.encode(TraceCheckpoint(utc_now(), None, "broker", through_segment=taken.through,
                                           emails=len(taken.states)))]


def compact(core: Router, journal: Journal, writer: trace.TraceWriter) -> list[Effect]:
    """Drop final emails from the journal once it is big and mostly final (broker.journal).
    The trace goes to disk first: it is what says those emails are final."""
    error = writer.sync()
    if error is not None or writer.dropped:  # the outcomes that free those records are not on disk
        why = error or f"{writer.dropped} lines were dropped"
        return [records.encode(JournalCompactionFailed(utc_now(), None, "broker",
                                                       error=f"the trace is not on disk: {why}", bytes=journal.size))]
    size = journal.size
    try:
        freed = journal.compact(core.flights.keys())
    except OSError as exc:  # a full disk: the old journal is whole; say so and carry on
        return [records.encode(JournalCompactionFailed(utc_now(), None, "broker", error=str(exc), bytes=size))]
    give_back_memory()
    return [records.encode(JournalCompacted(utc_now(), None, "broker", bytes_before=size, bytes_after=journal.size,
                                            freed=freed, live=len(journal.sizes)))]


def compaction_due(core: Router, journal: Journal, storage: Storage, backlog: collections.deque[Position]) -> bool:
    """Offsets in the backlog point into this file: no rewrite until it is read. Nor while
    a write fails: a copy of the journal needs space the disk has not got."""
    return not backlog and not storage.failing and journal.worth_compacting(core.flights.keys(), time.monotonic())
