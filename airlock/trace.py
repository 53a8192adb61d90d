"""The trace: one JSON object a line in <data-dir>/trace.jsonl, written only by the broker.

Segments: the broker's writer closes the live file by size into trace.000001.jsonl, ...
(airlock.tracefiles); every reader here reads them all, in order, then the live file.

What a line holds is airlock.records (the second contract: every event a typed record, one
encoder, one decoder); this module writes the lines and reads them back as those records,
a `step` line as the Authorization, Call and Observation it holds (records.expand), so
every reader here, and `airlock trace`, reads a trace alike whichever version wrote it.
A line that is no record (torn, damaged, a newer writer's event) reads as a typed value
too, which `render` shows escaped; the other readers act on records only.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import msgspec

from airlock import appendlog, files, records, tracefiles
from airlock.records import Call, Damaged, TraceRecord
from airlock.terminal import json_line, shown

__all__ = ["Damage", "TraceWriter", "about", "as_line", "event_of", "fields_of", "follow", "open_lines", "read",
           "read_calls", "render", "settled", "states", "unfinished"]

_decode_object = msgspec.json.Decoder(dict[str, Any]).decode


def open_lines(path: Path) -> appendlog.Log:
    """The trace's live file opened as an append-only log of lines (airlock.appendlog): a line
    a writer left half-written when it died is cut off first and returned in the log's
    `repaired`, so the next line starts whole. Made 0600 in a 0700 folder (airlock.files):
    the lines hold what came from emails and customers' data."""
    return appendlog.Log(path, appendlog.LINES)


class TraceWriter:
    """Appends lines; flush() is called once per broker loop turn, not per line.

    A full disk or an I/O error is a state, not a crash: write() never raises,
    flush() and sync() return the OSError (None when all is on disk); a refused write sets
    `failing` (a refused fsync does not: the lines are written, the next sync tries again).
    Lines that could not be written wait in memory, in order, and go out with the next
    flush that works; a partial write is cut back, so the file never holds half a line
    (airlock.appendlog). While failing, a flush tries the disk at most once every RETRY_S,
    and what waits is bounded by UNWRITTEN_MAX_BYTES: past it lines are dropped and counted
    in `dropped` (the broker then keeps every journal record, so a restart redoes those emails).
    `repaired`: the half line a crash left at the end of the file, cut off at open (or None).

    With `segment_bytes`, the live file is closed into a segment (airlock.tracefiles) once it
    holds that many bytes, at a flush that wrote (a turn's end: a turn's lines stay in one
    file), by a rename and an open; `rotated` then says a fold into the checkpoint is due
    (the broker takes it and clears it, and folds off its loop: broker.folding)."""

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
        self._next_segment = tracefiles.next_segment(path) if segment_bytes else 0  # counted on from here
        self._closed_unsynced: list[Path] = []  # closed by a rotation, not fsynced by this writer yet
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
        outcome these lines hold (broker.journal compaction). The segments this writer
        closed since the last sync too (a rotation does not wait for the disk). The error, if any."""
        error = self.flush()
        if error is not None:
            return error
        failed = self._log.sync()
        if failed is not None:
            return failed.error
        try:
            for segment in self._closed_unsynced:
                tracefiles.fsync_file(segment)
            if self._closed_unsynced:
                files.fsync_folder(self._path.parent)
        except OSError as exc:
            return exc
        self._closed_unsynced.clear()
        return None

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
        """Close the live file into a segment and open a new one: a rename and an open, no
        wait for the disk, as this runs at the end of a broker turn. The segment is made
        durable (fsynced, and the folder) by whoever folds it, before its checkpoint is
        written (tracefiles.make_durable): a checkpoint never says more than the segment
        holds. Never raises: on a failing disk the file stays live and the next flush tries again."""
        try:
            old = os.fstat(self._log.fileno())
            segment = tracefiles.close_segment(self._path, self._next_segment, durable=False)  # under the open handle
        except OSError:
            return
        try:
            new = open_lines(self._path)
        except OSError:  # no new file (a full disk): back to the old name, still appending there
            with contextlib.suppress(OSError):
                os.rename(segment, self._path)
            return
        self._next_segment += 1
        self._closed_unsynced.append(segment)
        self._log.close()
        self._log, self.rotated = new, True
        # The old file's group and group bits: the compose lab's host user reads the trace
        # through its group (ops.lab_init). Without the right (a service not in that
        # group) the new file stays 0600, as airlock.files made it, until the next `up`.
        with contextlib.suppress(OSError):
            os.fchown(new.fileno(), -1, old.st_gid)
            os.fchmod(new.fileno(), (old.st_mode & 0o660) | 0o600)


class Damage:
    """The damaged lines a reading met (records.Damaged: not a record this version reads: a
    flipped byte, a cut, an edit), for the reader to report once, on stderr, as the broker
    reports the journal's damage. A damaged line names no email, so a reading of one email's
    lines would otherwise pass it without a word; one of all lines shows it, and says so too.
    A flipped byte that leaves a line a valid record (a letter inside a text) is not found:
    trace lines carry no checksum (the journal's records do)."""

    SHOWN = 10  # line numbers named per file; the rest are counted

    def __init__(self) -> None:
        self.count = 0
        self.lines: dict[Path, list[int]] = {}

    def note(self, history: tracefiles.History | None) -> None:
        self.count += 1
        if history is not None:
            self.lines.setdefault(history.file, []).append(history.line)

    def report(self) -> str:
        """One line naming the damage ("" if none)."""
        if not self.count:
            return ""
        where = " and ".join(f"{shown(str(file))} ({_numbers(numbers, self.SHOWN)})"
                             for file, numbers in self.lines.items())
        noun = "line" if self.count == 1 else "lines"
        return (f"{self.count} damaged {noun} in {where or 'the trace'}: not a record this version reads "
                "(a flipped byte, a cut or an edit); nothing acts on it, `airlock trace` shows it as (damaged line)")


def _numbers(numbers: list[int], shown_at_most: int) -> str:
    more = ", ..." if len(numbers) > shown_at_most else ""
    return f"{'line' if len(numbers) == 1 else 'lines'} {', '.join(map(str, numbers[:shown_at_most]))}{more}"


def read(path: Path, message_id: str | None = None, damage: Damage | None = None) -> Iterator[TraceRecord]:
    """Yield trace records, optionally for one email's, from every segment then the live
    file (airlock.tracefiles). A damaged line is a Damaged record (about no email), noted in
    `damage` whether or not it is yielded. Whole lines only: the live file's last may still
    be being written (one a writer left torn when it died is cut off by the next writer:
    airlock.appendlog)."""
    history = tracefiles.History(path, whole_only=True)
    yield from _matching(history, message_id, damage, history)


def read_calls(path: Path) -> Iterator[Call]:
    """calls.jsonl's call records (what ran, each once its tool answered), in order. An
    intent line (the claim the actor fsyncs before each call) is not a call and is not
    given; nor is a torn line (an actor killed mid-write): one cut short was never synced,
    so its step was never acknowledged, and its intent says the step is `unknown` from then
    on (actor/calllog.py)."""
    for raw in tracefiles.lines_of(path):
        call = records.decode_call(raw)
        if isinstance(call, Call):
            yield call


def settled(path: Path, ids: list[str], finished: int, timeout_s: float = 10.0,
            poll_s: float = 0.1) -> dict[str, list[TraceRecord]]:
    """Each id's records, read once `finished` of the ids have an outcome line, or at the
    deadline. The broker answers a client before it writes that turn's trace lines, so
    whoever reads the trace right after its results must wait for them here."""
    deadline = time.monotonic() + timeout_s
    found: dict[str, list[TraceRecord]] = {message_id: [] for message_id in ids}
    history = tracefiles.History(path, whole_only=True)
    raw_lines: Iterable[bytes] = history
    while True:
        # The first pass reads all there is; later ones only what was appended since.
        for record in _matching(raw_lines, None):
            kept = found.get(about(record) or "")  # about no email: "", never an id
            if kept is not None:
                kept.append(record)
        ended = sum(any(isinstance(r, records.OutcomeLine) for r in kept) for kept in found.values())
        if ended >= finished or time.monotonic() > deadline:
            return found
        time.sleep(poll_s)
        raw_lines, history.since = tracefiles.read_since(path, history.since)


def states(path: Path, unread: tracefiles.Unread | None = None) -> dict[str, str]:
    """Each email's state: `open` (received, no outcome yet), `escalated` (its last outcome
    waits for a person) or `final`. Read from the checkpoint and the live segment only
    (airlock.tracefiles), so a final email the journal no longer holds may be missing.
    The lines read past are noted in `unread`."""
    return tracefiles.states(path, unread)[0]


def unfinished(path: Path) -> tuple[list[str], list[str]]:
    """(ids received with no outcome line, ids whose last outcome is `escalated`): what an
    earlier broker left open when it stopped or died."""
    state = states(path)
    return ([i for i, s in state.items() if s == "open"], [i for i, s in state.items() if s == "escalated"])


def follow(path: Path, message_id: str | None = None, poll_s: float = 0.2,
           damage: Damage | None = None) -> Iterator[TraceRecord]:
    """Yield every record, then records as they are appended, like `tail -F`: when the
    live file is closed into a segment, its rest is read, then any later segment, then the
    new live file. Never returns on its own. Damaged lines are noted in `damage` as read()
    notes them (those appended later without a line number)."""
    while not path.exists():
        time.sleep(poll_s)
    history = tracefiles.History(path, whole_only=True)
    yield from _matching(history, message_id, damage, history)
    since = history.since
    while True:
        new, since = tracefiles.read_since(path, since)
        if not new:
            time.sleep(poll_s)
        yield from _matching(new, message_id, damage)


def _matching(raw_lines: Iterable[bytes], message_id: str | None, damage: Damage | None = None,
              history: tracefiles.History | None = None) -> Iterator[TraceRecord]:
    for raw in raw_lines:
        if raw != b"\n":  # a blank line says nothing
            record = records.decode(raw)
            if damage is not None and isinstance(record, Damaged):
                damage.note(history)
            if message_id is None or about(record) == message_id:
                yield from records.expand(record)  # a step line as the records it holds


def render(record: TraceRecord) -> str:
    """A readable one-line form: time, id, stage, event, then key=value details. Every
    part is escaped: a peer chose the details, their keys, even an event's name (a Notice);
    a line that is no record says so, escaped like the rest."""
    if isinstance(record, Damaged):
        return (f"{'-':<12}  {'-':<16} {'-':<9} {'(damaged line)':<14} "
                f"reason={_short(record.reason)} line={_short(record.text)}")
    fields = fields_of(record)
    at = shown(str(record.at or "")[11:23])
    details = " ".join(f"{shown(str(key))}={_short(value)}" for key, value in fields.items() if key != "student")
    message_id, stage = (shown(str(value or "")) for value in (record.message_id, record.stage))
    event = shown(event_of(record) or str(getattr(record, "event", "")))
    if isinstance(record, records.Unrecognized):
        event = f"{event} (unknown)"
    # A lab's step that ran the student's code says so first, where a student looks.
    student = fields.get("student")
    marked = f"[student code: {_short(student)}] " if student else ""
    return f"{at}  {message_id or '-':<16} {stage:<9} {event:<14} {marked}{details}"


def _short(value: Any, limit: int = 120) -> str:
    """A detail as a terminal may show it: a string escaped, anything else as JSON."""
    text = shown(value) if isinstance(value, str) else json_line(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --- a record as a reader shows it --------------------------------------------------------


def fields_of(record: TraceRecord) -> dict[str, Any]:
    """A record's details (everything but the base fields), in order, for display."""
    if isinstance(record, records.PeerFact):
        return dict(record.detail)
    if isinstance(record, records.Unrecognized):
        return dict(record.fields)
    if isinstance(record, Damaged):
        return {"reason": record.reason, "line": record.text}
    # As the line holds them, JSON values (a tuple is a list there): a field at its default
    # is absent there, so it is here.
    line = _decode_object(records.encode(record))
    return {name: value for name, value in line.items() if name not in records.BASE_FIELDS}


def as_line(record: TraceRecord) -> dict[str, Any]:
    """The record as its line holds it (a Damaged one as {"damaged": reason, "line": text}),
    for `airlock trace --json`."""
    if isinstance(record, Damaged):
        return {"damaged": record.reason, "line": record.text}
    base = {"at": record.at, "message_id": record.message_id, "stage": record.stage, "event": event_of(record)}
    if isinstance(record, records.Unrecognized):
        base["event"] = record.event
    return {**base, **fields_of(record)}


def event_of(record: TraceRecord) -> str:
    """The record's event name ("" for a Damaged line, or an unrecognized non-text one)."""
    if isinstance(record, records.Record):
        return str(record.__struct_config__.tag)
    if isinstance(record, Damaged):
        return ""
    return record.event if isinstance(record.event, str) else ""


def about(record: TraceRecord) -> str | None:
    """The email a record is about (None: none, or a line that names none as text)."""
    message_id = None if isinstance(record, Damaged) else record.message_id
    return message_id if isinstance(message_id, str) else None
