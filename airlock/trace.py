"""The trace: one JSON object a line in <data-dir>/trace.jsonl, written only by the broker.

Every line has `at` (UTC, ISO 8601), `message_id` (null for facts about no one email),
`stage` (who said it, stamped by the broker from the endpoint, never trusted from the
sender) and `event`; the rest are the event's details. Each email ends with exactly one
line whose event is "outcome".
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import msgspec

from airlock import files
from airlock.terminal import json_line, shown

_json = msgspec.json.Encoder()
BASE_KEYS = ("at", "message_id", "stage", "event")


_second: tuple[int, str] = (-1, "")  # the last whole second stamped, and its text


def utc_now() -> str:
    """Now as 2026-11-30T04:48:01.123456Z. The date and time of day are formatted once a
    second: the broker stamps ten lines an email, and datetime's isoformat each time was a
    tenth of its work."""
    global _second
    seconds, nanos = divmod(time.time_ns(), 1_000_000_000)
    stamp = _second  # one read: another thread may replace it, never half of it
    if stamp[0] != seconds:
        stamp = _second = (seconds, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)))
    return f"{stamp[1]}.{nanos // 1000:06d}Z"


def line(stage: str, event: str, message_id: str | None, detail: dict[str, Any]) -> bytes:
    """One trace line; base keys win over any detail key of the same name."""
    base = {"at": utc_now(), "message_id": message_id, "stage": stage, "event": event}
    # Base keys first, then the details in their order; the second **base wins any clash.
    return _json.encode({**base, **detail, **base}) + b"\n"


def open_lines(path: Path) -> BinaryIO:
    """A JSON-lines file (trace, call log, pending escalations) opened for appending. If a
    writer died mid-line, that line is ended first: the torn record stays unreadable (the
    readers skip it) and the next one stays whole instead of merging with it. Made 0600 in a
    0700 folder (airlock.files): the lines hold what came from emails and customers' data."""
    torn = path.exists() and path.stat().st_size > 0 and _last_byte(path) != b"\n"
    handle = files.open_append(path)
    if torn:
        handle.write(b"\n")
    return handle


class TraceWriter:
    """Appends lines; flush() is called once per broker loop turn, not per line.

    A full disk or an I/O error is a state, not a crash (issue 15): write() never raises,
    flush() and sync() return the OSError (None when all is on disk) and set `failing`.
    Lines that could not be written wait in memory, in order, and go out with the next
    flush that works; a partial write is cut back, so the file never holds half a line.
    While failing, a flush tries the disk at most once every RETRY_S, and what waits is
    bounded by UNWRITTEN_MAX_BYTES: past it lines are dropped and counted in `dropped`
    (the broker then keeps every journal record, so a restart redoes those emails)."""

    RETRY_S = 1.0  # a full disk is tried again once a second, not on every loop turn
    UNWRITTEN_MAX_BYTES = 64 * 1024 * 1024  # lines kept in memory while the disk refuses them

    def __init__(self, path: Path) -> None:
        self._file = open_lines(path)
        self._unwritten: list[bytes] = []
        self._unwritten_bytes = 0
        self._retry_at = 0.0
        self._torn = False  # a partial write could not be cut back: start the next on a new line
        self.failing: OSError | None = None
        self.dropped = 0  # lines dropped while failing, past UNWRITTEN_MAX_BYTES

    def write(self, data: bytes) -> None:
        """Queue whole lines for the next flush; never raises."""
        if self.failing is not None and self._unwritten_bytes + len(data) > self.UNWRITTEN_MAX_BYTES:
            self.dropped += data.count(b"\n")
            return
        self._unwritten.append(data)
        self._unwritten_bytes += len(data)

    def flush(self) -> OSError | None:
        """Write what waits, in one write; the error if the disk refused it (kept for later)."""
        if not self._unwritten:
            return None
        if self.failing is not None and time.monotonic() < self._retry_at:
            return self.failing
        lines = b"".join(self._unwritten)
        data = b"\n" + lines if self._torn else lines
        fd, start = self._file.fileno(), None
        try:
            self._file.flush()  # open_lines' newline after a torn line, if it wrote one
            start = os.fstat(fd).st_size
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        except OSError as exc:
            if start is not None:
                try:
                    os.ftruncate(fd, start)  # a short write left part of a line: take it back
                except OSError:  # refused too: the next write starts on a new line instead
                    self._torn = True
            self._unwritten = [lines]
            self.failing, self._retry_at = exc, time.monotonic() + self.RETRY_S
            return exc
        self._unwritten, self._unwritten_bytes, self._torn, self.failing = [], 0, False, None
        return None

    def sync(self) -> OSError | None:
        """On disk, not just in the page cache: before the journal forgets an email whose
        outcome these lines hold (broker.journal compaction). The error, if any."""
        error = self.flush()
        if error is not None:
            return error
        try:
            os.fsync(self._file.fileno())
        except OSError as exc:
            return exc
        return None

    def close(self) -> OSError | None:
        """Flush what waits and close; the error if some lines could not be written."""
        self._retry_at = 0.0  # a last try, however recent the one before
        error = self.flush()
        self._file.close()
        return error


def _last_byte(path: Path) -> bytes:
    with open(path, "rb") as handle:
        handle.seek(-1, 2)
        return handle.read(1)


def read(path: Path, message_id: str | None = None) -> Iterator[dict[str, Any]]:
    """Yield trace records, optionally for one email; a torn last line is skipped."""
    if not path.exists():
        return
    with open(path, "rb") as handle:
        for raw in handle:
            record = decode_line(raw)
            if record is not None and (message_id is None or record.get("message_id") == message_id):
                yield record


def settled(path: Path, ids: list[str], finished: int, timeout_s: float = 10.0,
            poll_s: float = 0.1) -> dict[str, list[dict[str, Any]]]:
    """Each id's records, read once `finished` of the ids have an outcome line, or at the
    deadline. The broker answers a client before it writes that turn's trace lines, so
    whoever reads the trace right after its results must wait for them here."""
    deadline = time.monotonic() + timeout_s
    while True:
        found: dict[str, list[dict[str, Any]]] = {message_id: [] for message_id in ids}
        for record in read(path):
            records = found.get(record.get("message_id"))  # type: ignore[arg-type]
            if records is not None:
                records.append(record)
        ended = sum(any(r.get("event") == "outcome" for r in records) for records in found.values())
        if ended >= finished or time.monotonic() > deadline:
            return found
        time.sleep(poll_s)


def states(path: Path) -> dict[str, str]:
    """Each email's state in one pass over the trace: `open` (received, no outcome yet),
    `escalated` (its last outcome waits for a person) or `final`."""
    state: dict[str, str] = {}
    for record in read(path):
        message_id, event = record.get("message_id"), record.get("event")
        if not isinstance(message_id, str) or record.get("stage") != "broker":
            continue  # only the broker's own lines say where an email stands
        if event == "received":
            state[message_id] = "open"
        elif event == "outcome":
            state[message_id] = "escalated" if record.get("outcome") == "escalated" else "final"
    return state


def unfinished(path: Path) -> tuple[list[str], list[str]]:
    """(ids received with no outcome line, ids whose last outcome is `escalated`): what an
    earlier broker left open when it stopped or died."""
    state = states(path)
    return ([i for i, s in state.items() if s == "open"], [i for i, s in state.items() if s == "escalated"])


def follow(path: Path, message_id: str | None = None, poll_s: float = 0.2) -> Iterator[dict[str, Any]]:
    """Yield records as they are appended, like `tail -f`; never returns on its own."""
    while not path.exists():
        time.sleep(poll_s)
    with open(path, "rb") as handle:
        pending = b""
        while True:
            chunk = handle.readline()
            if not chunk:
                time.sleep(poll_s)
                continue
            pending += chunk
            if not pending.endswith(b"\n"):
                continue  # a line still being written
            record, pending = decode_line(pending), b""
            if record is not None and (message_id is None or record.get("message_id") == message_id):
                yield record


def decode_line(raw: bytes) -> dict[str, Any] | None:
    """One trace line as a dict, or None for a torn or foreign line."""
    try:
        record = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return None
    return record if isinstance(record, dict) else None


def render(record: dict[str, Any]) -> str:
    """A readable one-line form: time, id, stage, event, then key=value details. Every
    part is escaped: a peer chose the details, their keys, even an event's name (a Notice)."""
    at = shown(str(record.get("at", ""))[11:23])
    details = " ".join(f"{shown(str(key))}={_short(value)}" for key, value in record.items()
                       if key not in BASE_KEYS and key != "student")
    message_id, stage, event = (shown(str(record.get(key) or "")) for key in ("message_id", "stage", "event"))
    # A lab's step that ran the student's code says so first, where a student looks.
    student = f"[student code: {_short(record['student'])}] " if record.get("student") else ""
    return f"{at}  {message_id or '-':<16} {stage:<9} {event:<14} {student}{details}"


def _short(value: Any, limit: int = 120) -> str:
    """A detail as a terminal may show it: a string escaped, anything else as JSON."""
    text = shown(value) if isinstance(value, str) else json_line(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"
