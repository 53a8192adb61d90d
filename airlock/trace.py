"""The trace: one JSON object a line in <data-dir>/trace.jsonl, written only by the broker.

Segments: the broker's writer closes the live file by size into trace.000001.jsonl, ...
(airlock.tracefiles); every reader here reads them all, in order, then the live file.

Every line has `at` (UTC, ISO 8601), `message_id` (null for facts about no one email),
`stage` (who said it, stamped by the broker from the endpoint, never trusted from the
sender) and `event`; the rest are the event's details. Each email ends with exactly one
line whose event is "outcome".
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import msgspec

from airlock import appendlog, tracefiles
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


def open_lines(path: Path) -> appendlog.Log:
    """The trace's live file opened as an append-only log of lines (airlock.appendlog): a line
    a writer left half-written when it died is cut off first and returned in the log's
    `repaired`, so the next line starts whole. Made 0600 in a 0700 folder (airlock.files):
    the lines hold what came from emails and customers' data."""
    return appendlog.Log(path, appendlog.LINES)


class TraceWriter:
    """Appends lines; flush() is called once per broker loop turn, not per line.

    A full disk or an I/O error is a state, not a crash (issue 15): write() never raises,
    flush() and sync() return the OSError (None when all is on disk) and set `failing`.
    Lines that could not be written wait in memory, in order, and go out with the next
    flush that works; a partial write is cut back, so the file never holds half a line
    (airlock.appendlog). While failing, a flush tries the disk at most once every RETRY_S,
    and what waits is bounded by UNWRITTEN_MAX_BYTES: past it lines are dropped and counted
    in `dropped` (the broker then keeps every journal record, so a restart redoes those emails).
    `repaired`: the half line a crash left at the end of the file, cut off at open (or None).

    With `segment_bytes`, the live file is closed into a segment (airlock.tracefiles) once it
    holds that many bytes, at a flush that wrote (a turn's end: a turn's lines stay in one
    file); `rotated` then says a checkpoint is due (broker.app takes it and clears it)."""

    RETRY_S = 1.0  # a full disk is tried again once a second, not on every loop turn
    UNWRITTEN_MAX_BYTES = 64 * 1024 * 1024  # lines kept in memory while the disk refuses them

    def __init__(self, path: Path, segment_bytes: int = 0) -> None:
        self._path, self._segment_bytes = path, segment_bytes
        self.rotated = False
        if segment_bytes and path.exists() and path.stat().st_size >= segment_bytes:
            # Before any line of this broker: its `started` line is the new live file's first.
            with contextlib.suppress(OSError):  # not renamed: it stays live, closed at a flush
                tracefiles.close_segment(path)
                self.rotated = True
        self._log = open_lines(path)
        self.repaired = self._log.repaired
        self._retry_at = 0.0
        self.failing: OSError | None = None
        self.dropped = 0  # lines dropped while failing, past UNWRITTEN_MAX_BYTES

    def write(self, data: bytes) -> None:
        """Queue whole lines for the next flush; never raises."""
        if self.failing is not None and self._log.queued_bytes + len(data) > self.UNWRITTEN_MAX_BYTES:
            self.dropped += data.count(b"\n")
            return
        self._log.add(data)

    def flush(self) -> OSError | None:
        """Write what waits, in one write; the error if the disk refused it (kept for later)."""
        if not self._log.queued_bytes:
            return None
        if self.failing is not None and time.monotonic() < self._retry_at:
            return self.failing
        failed = self._log.write()
        if failed is not None:
            self.failing, self._retry_at = failed.error, time.monotonic() + self.RETRY_S
            return failed.error
        self.failing = None
        self._rotate_if_full()
        return None

    def sync(self) -> OSError | None:
        """On disk, not just in the page cache: before the journal forgets an email whose
        outcome these lines hold (broker.journal compaction). The error, if any."""
        error = self.flush()
        if error is not None:
            return error
        failed = self._log.sync()
        return None if failed is None else failed.error

    def close(self) -> OSError | None:
        """Flush what waits and close; the error if some lines could not be written."""
        self._retry_at = 0.0  # a last try, however recent the one before
        error = self.flush()
        self._log.close()
        return error

    def _rotate_if_full(self) -> None:
        if self._segment_bytes and self._log.size >= self._segment_bytes:
            self._rotate()

    def _rotate(self) -> None:
        """Close the live file into a segment and open a new one. The segment is synced
        first: the checkpoint folded from it must never say more than it holds. Never
        raises: on a failing disk the file stays live and the next flush tries again."""
        if self.sync() is not None:
            return
        try:
            old = os.fstat(self._log.fileno())
            segment = tracefiles.close_segment(self._path)  # renamed under the open handle
        except OSError:
            return
        try:
            new = open_lines(self._path)
        except OSError:  # no new file (a full disk): back to the old name, still appending there
            with contextlib.suppress(OSError):
                os.rename(segment, self._path)
            return
        self._log.close()
        self._log, self.rotated = new, True
        # The old file's group and group bits: the compose lab's host user reads the trace
        # through its group (airlock.lab_init). Without the right (a service not in that
        # group) the new file stays 0600, as airlock.files made it, until the next `up`.
        with contextlib.suppress(OSError):
            os.fchown(new.fileno(), -1, old.st_gid)
            os.fchmod(new.fileno(), (old.st_mode & 0o660) | 0o600)


def read(path: Path, message_id: str | None = None) -> Iterator[dict[str, Any]]:
    """Yield trace records, optionally for one email, from every segment then the live
    file (airlock.tracefiles); a torn line is skipped. Also reads the call log and the
    pending escalations, which have no segments."""
    yield from _matching(tracefiles.lines(path), message_id)


def settled(path: Path, ids: list[str], finished: int, timeout_s: float = 10.0,
            poll_s: float = 0.1) -> dict[str, list[dict[str, Any]]]:
    """Each id's records, read once `finished` of the ids have an outcome line, or at the
    deadline. The broker answers a client before it writes that turn's trace lines, so
    whoever reads the trace right after its results must wait for them here."""
    deadline = time.monotonic() + timeout_s
    found: dict[str, list[dict[str, Any]]] = {message_id: [] for message_id in ids}
    history = tracefiles.History(path, whole_only=True)
    raw_lines: Iterable[bytes] = history
    while True:
        # The first pass reads all there is; later ones only what was appended since.
        for record in _matching(raw_lines, None):
            records = found.get(record.get("message_id"))  # type: ignore[arg-type]
            if records is not None:
                records.append(record)
        ended = sum(any(r.get("event") == "outcome" for r in records) for records in found.values())
        if ended >= finished or time.monotonic() > deadline:
            return found
        time.sleep(poll_s)
        raw_lines, history.since = tracefiles.read_since(path, history.since)


def states(path: Path) -> dict[str, str]:
    """Each email's state: `open` (received, no outcome yet), `escalated` (its last outcome
    waits for a person) or `final`. Read from the checkpoint and the live segment only
    (airlock.tracefiles), so a final email the journal no longer holds may be missing."""
    return tracefiles.states(path)[0]


def unfinished(path: Path) -> tuple[list[str], list[str]]:
    """(ids received with no outcome line, ids whose last outcome is `escalated`): what an
    earlier broker left open when it stopped or died."""
    state = states(path)
    return ([i for i, s in state.items() if s == "open"], [i for i, s in state.items() if s == "escalated"])


def follow(path: Path, message_id: str | None = None, poll_s: float = 0.2) -> Iterator[dict[str, Any]]:
    """Yield every record, then records as they are appended, like `tail -F`: when the
    live file is closed into a segment, its rest is read, then any later segment, then the
    new live file. Never returns on its own."""
    while not path.exists():
        time.sleep(poll_s)
    history = tracefiles.History(path, whole_only=True)
    yield from _matching(history, message_id)
    since = history.since
    while True:
        new, since = tracefiles.read_since(path, since)
        if not new:
            time.sleep(poll_s)
        yield from _matching(new, message_id)


def _matching(raw_lines: Iterable[bytes], message_id: str | None) -> Iterator[dict[str, Any]]:
    for raw in raw_lines:
        record = decode_line(raw)
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
