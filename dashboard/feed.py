"""The trace feed: the broker's PUB stream, merged with a tail of trace.jsonl.

The broker writes every trace line to trace.jsonl and publishes the same bytes on its
trace endpoint. The SUB socket is the fast path, but it only sees lines published after
it connected, and none while the broker is down. Where the data folder is readable, the
file is read at start (so a page opened late shows recent emails) and then tailed every
FILE_POLL_S, which fills any gap. A line is delivered once, whichever path brings it
first: both carry the same record (the stream as airlock.published shows it, the file
whole), so each line is made public first and deduplicated by a digest of those bytes.

When the stack uses CURVE keys, the SUB authenticates with the dashboard's own key
(airlock/keys.py allows only that key on the trace endpoint).

The feed runs in its own thread, because zmq and file reads block; it hands decoded
records to `deliver`, which the app schedules onto its event loop.
"""

from __future__ import annotations

import collections
import hashlib
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import zmq

from airlock import published, records, trace, tracefiles
from airlock.transport import keep_alive, use_curve

POLL_S = 0.2
FILE_POLL_S = 1.0
SEEN_LIMIT = 50_000  # line digests remembered for deduplication
INITIAL_BYTES = 32 * 1024 * 1024  # at start, only this much of the file's end is read
CHUNK = 1000  # lines (frames, from the stream) per delivery, so a long file does not hold the event loop at once
RECONNECT_IVL_MS, RECONNECT_IVL_MAX_MS = 100, 2000

Deliver = Callable[[list[dict[str, Any]]], object]  # what it returns is not read


def decode(line: bytes) -> list[dict[str, Any]]:
    """A line through the trace's one decoder (airlock.records), as the page takes it: the
    fields of each record it stands for (a step line's three: records.expand). Nothing for a
    line that is no record (torn, damaged): the page shows records only; `airlock trace`
    shows the rest."""
    record = records.decode(line)
    return [] if isinstance(record, records.Damaged) else [trace.as_line(part) for part in records.expand(record)]


class Dedup:
    """Remembers the last SEEN_LIMIT line digests; `fresh(line)` is True once per line."""

    def __init__(self, limit: int = SEEN_LIMIT) -> None:
        self._seen: collections.OrderedDict[bytes, None] = collections.OrderedDict()
        self._limit = limit

    def fresh(self, line: bytes) -> bool:
        key = hashlib.blake2b(line.rstrip(b"\n"), digest_size=16).digest()
        if key in self._seen:
            return False
        self._seen[key] = None
        if len(self._seen) > self._limit:
            self._seen.popitem(last=False)
        return True


class FileTail:
    """Complete lines appended to the trace since the last call, across the broker closing
    the live file into a segment (airlock.tracefiles); starts again if it shrinks. The first
    call reads at most the last `initial_bytes` of the live file, from a line start."""

    def __init__(self, path: Path | None, initial_bytes: int = INITIAL_BYTES) -> None:
        self.path, self.initial_bytes = path, initial_bytes
        self.since: tracefiles.Mark | None = None

    def new_lines(self) -> list[bytes]:
        if self.path is None:
            return []
        try:
            if self.since is None:
                return self._first()
            lines, self.since = tracefiles.read_since(self.path, self.since)
        except OSError:
            return []
        return [line.rstrip(b"\n") for line in lines]

    def _first(self) -> list[bytes]:
        """The last initial_bytes of the trace, from a line start: of the live file, and of
        the newest closed segment too when the live file is shorter (just after a rotation)."""
        assert self.path is not None
        with open(self.path, "rb") as handle:
            size = handle.seek(0, 2)
            start = max(0, size - self.initial_bytes)
            handle.seek(start)
            data = handle.read()
            live = tracefiles.identity(handle)
            newest = tracefiles.older_than(self.path, handle)[-1:]  # not this file, renamed meanwhile
        end = data.rfind(b"\n") + 1  # a line still being written waits for its newline
        data, self.since, cut = data[:end], (live, start + end), start > 0
        if size < self.initial_bytes and newest:
            with open(newest[0], "rb") as older:
                begin = max(0, older.seek(0, 2) - (self.initial_bytes - size))
                older.seek(begin)
                data, cut = older.read() + data, begin > 0
        if cut:  # we started mid-line: drop up to the first newline
            data = data[data.find(b"\n") + 1:]
        return data.splitlines()


class TraceFeed:
    def __init__(self, endpoint: str, trace_path: Path | None, deliver: Deliver, max_frame_bytes: int,
                 curve: tuple[Any, bytes | None] = (None, None)) -> None:
        self.endpoint, self.deliver, self.max_frame_bytes = endpoint, deliver, max_frame_bytes
        self.client_keys, self.server_key = curve
        self.tail = FileTail(trace_path)
        self.dedup = Dedup()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="trace-feed", daemon=True)

    def start(self) -> TraceFeed:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        ctx = zmq.Context()
        sub = ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.LINGER, 0)
        sub.setsockopt(zmq.MAXMSGSIZE, self.max_frame_bytes)
        sub.setsockopt(zmq.RCVHWM, 100_000)
        sub.setsockopt(zmq.RECONNECT_IVL, RECONNECT_IVL_MS)
        sub.setsockopt(zmq.RECONNECT_IVL_MAX, RECONNECT_IVL_MAX_MS)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        keep_alive(sub)
        use_curve(sub, self.client_keys, self.server_key)
        sub.connect(self.endpoint)
        try:
            self._take(self.tail.new_lines())
            next_file_poll = 0.0
            while not self._stop.is_set():
                if sub.poll(int(POLL_S * 1000)):
                    lines = []
                    for _ in range(CHUNK):
                        try:
                            lines += sub.recv(zmq.NOBLOCK).splitlines()  # a frame holds whole lines
                        except zmq.Again:
                            break
                    self._take(lines)
                now = time.monotonic()
                if now >= next_file_poll:
                    self._take(self.tail.new_lines())
                    next_file_poll = now + FILE_POLL_S
        finally:
            sub.close(linger=0)
            ctx.term()

    def _take(self, lines: list[bytes]) -> None:
        # Each line as airlock.published shows it, before the digest: the broker publishes
        # lines that way and the file holds them whole, and both must dedup to one. A chunk
        # of lines at a time, so the records of a long first read are never all held at once.
        for start in range(0, len(lines), CHUNK):
            shown = (published.line(line) for line in lines[start:start + CHUNK])
            taken = [record for line in shown if self.dedup.fresh(line) for record in decode(line)]
            if taken:
                self.deliver(taken)
