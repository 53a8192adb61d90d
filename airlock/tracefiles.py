"""The trace's files: the live trace.jsonl, the closed segments beside it, and a checkpoint.

A trace that only grew made every restart read all of history (2.8 s at 350 MB, 25 s at
5.6 GB; at 8.4 GB the supervisor killed the recovering broker). So the broker's writer
closes the live file once it reaches AIRLOCK_TRACE_SEGMENT_BYTES, at the end of a turn, by
renaming it (one rename, no copy):

    trace.jsonl                the live segment: always the newest lines (`tail -f` works)
    trace.000001.jsonl, ...    closed segments, oldest first; never written again
    trace.checkpoint           each email's state as of the last closed segment folded in

Closed segments never change, so what recovery needs from them is folded once into the
checkpoint: every email not final (`open` or `escalated`), and those final ones the journal
still holds (a journalled email with no final state would be dispatched again). Final
emails the journal has forgotten are dropped: the checkpoint grows with what is live, not
with history. A restart reads the checkpoint, any closed segment it does not cover yet (a
crash between a rotation and its checkpoint) and the live segment; nothing older.

Readers (`airlock trace`, trace.read, the lab's tools) read every segment then the live
file, in order; the dashboard only the trace's last INITIAL_BYTES, then what follows
(dashboard.feed). Old single-file traces are just a live file with no segments.
Retention: closed segments are kept unless AIRLOCK_TRACE_KEEP_SEGMENTS > 0, which deletes
the oldest beyond that many once the checkpoint covers them (no restart needs them then;
`airlock trace ID` no longer finds their lines).
"""

from __future__ import annotations

import contextlib
import os
import re
import typing
from collections.abc import Collection, Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

import msgspec

from airlock import files, records, wire

DIGITS = 6  # trace.000001.jsonl: names sort as numbers up to a million segments, and beyond still parse
CHECKPOINT_SUFFIX = ".checkpoint"
OPEN, ESCALATED, FINAL = "open", "escalated", "final"
# Only lines holding one of these can change an email's state (see fold): a cheap bytes test
# before decoding skips the other lines (four of a two-step email's six).
_STATE_WORDS = (b'"received"', b'"outcome"')
_STAGES = frozenset({"broker", "supervisor", *records.WORKER_STAGES})
_BROKER_EVENTS = frozenset(records.EVENT_NAMES)
_OUTCOMES = frozenset(typing.get_args(wire.Outcome))
# A fold longer than this (an old single-file trace of GBs, at its first start) saves its
# progress as it goes: a broker killed meanwhile (by a supervisor's stuck rule) goes on
# from there instead of starting over, and so never loops.
SAVE_EVERY_BYTES = 512 * 1024 * 1024


class Checkpoint(msgspec.Struct, frozen=True, forbid_unknown_fields=False):
    """The states recovery needs, as of closed segment `through` (0: before any), and of the
    first `folded` bytes of segment through + 1 when a long fold was cut short (a broker
    killed while it folded a trace of GBs goes on from there). A field added later gets a
    default, so an older checkpoint still reads."""

    through: int = 0
    states: dict[str, str] = {}
    folded: int = 0


_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(Checkpoint).decode


class _Through(msgspec.Struct, forbid_unknown_fields=False):
    """A checkpoint's `through` alone: decoding it skips building the states."""

    through: int = 0


_decode_through = msgspec.json.Decoder(_Through).decode


def checkpoint_path(path: Path) -> Path:
    return path.with_name(path.stem + CHECKPOINT_SUFFIX)


def _pattern(path: Path) -> re.Pattern[str]:
    return re.compile(re.escape(path.stem) + rf"\.(\d{{{DIGITS},}})" + re.escape(path.suffix))


def closed(path: Path) -> list[tuple[int, Path]]:
    """The closed segments of live file `path`, oldest first, with their numbers."""
    pattern, found = _pattern(path), []
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(path.parent):
            match = pattern.fullmatch(entry.name)
            if match and entry.is_file(follow_symlinks=False):
                found.append((int(match.group(1)), Path(entry.path)))
    return sorted(found)


def segment_path(path: Path, number: int) -> Path:
    return path.with_name(f"{path.stem}.{number:0{DIGITS}d}{path.suffix}")


def next_segment(path: Path) -> int:
    """The number the live file's next closed segment takes: past every closed segment
    there is and every one the checkpoint covers (retention may have deleted those)."""
    return max([number for number, _ in closed(path)] + [load_through(path)]) + 1


def close_segment(path: Path, number: int | None = None, durable: bool = True) -> Path:
    """Rename the live file to closed segment `number` (default: next_segment); the caller
    opens a new one. `durable`: fsync the folder now; without, whoever folds the segment
    does it first (make_durable), so the rename costs a broker's turn no wait for the disk."""
    segment = segment_path(path, next_segment(path) if number is None else number)
    os.rename(path, segment)
    if durable:
        with contextlib.suppress(OSError):  # renamed either way; lost in a crash, the next start renames it
            files.fsync_folder(path.parent)
    return segment


def uncovered(path: Path) -> list[Path]:
    """The closed segments the checkpoint does not cover yet, oldest first."""
    through = load_through(path)
    return [segment for number, segment in closed(path) if number > through]


def make_durable(path: Path) -> None:
    """Every closed segment the checkpoint does not cover yet on disk, and the folder (the
    renames that made them): before a fold, so a checkpoint never says more than they hold.
    An OSError if the disk refuses."""
    for segment in uncovered(path):
        fsync_file(segment)
    files.fsync_folder(path.parent)


def fsync_file(path: Path) -> None:
    """What was written to `path`, on disk; a file deleted meanwhile (retention) has nothing to say."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def lines(path: Path) -> Iterator[bytes]:
    """Every whole line of every segment, then of the live file, in order."""
    return iter(History(path))


class History:
    """Iterating gives every line there is, in order; afterwards `since` marks the end of
    the whole lines read, for read_since (a follower, a poller). The live file's last line
    may be unterminated: given too unless `whole_only` (then read_since gives it, whole)."""

    def __init__(self, path: Path, whole_only: bool = False) -> None:
        self.path, self.whole_only = path, whole_only
        self.since: Mark = (None, 0)
        # Where the line last given is: its file and line number (1 = the first), for a
        # reader that reports a damaged line where a person can find it.
        self.file, self.line = path, 0

    def __iter__(self) -> Iterator[bytes]:
        live = _open_or_none(self.path)
        if live is None:  # no live file (none yet, or between a rename and the new file)
            for segment in older_than(self.path, None):
                yield from self._numbered(segment, lines_of(segment))
                self.since = (_identity_of(segment), segment.stat().st_size)
            return
        with live:
            for segment in older_than(self.path, live):
                yield from self._numbered(segment, lines_of(segment))
            offset = 0
            for raw in self._numbered(self.path, live):
                if not raw.endswith(b"\n"):
                    if not self.whole_only:
                        yield raw  # torn (a crash mid-write) or being written: decoders judge it
                    break
                offset += len(raw)
                yield raw
            self.since = (identity(live), offset)

    def _numbered(self, file: Path, raw_lines: Iterable[bytes]) -> Iterator[bytes]:
        self.file, self.line = file, 0
        for raw in raw_lines:
            self.line += 1
            yield raw


def older_than(path: Path, live: BinaryIO | None) -> list[Path]:
    """The closed segments to read before the open live file `live`. It is opened first: if
    the writer renames it to a segment meanwhile, that segment is the same file (same inode)
    and is left out here, to be read once, last, through the handle already open."""
    live_id = identity(live) if live is not None else None
    return [segment for _, segment in closed(path) if _identity_of(segment) != live_id]


class StateFacts(msgspec.Struct):
    """What recovery reads of a line (fold, below): who said which event about
    which email, and an outcome's kind. A view of Received and OutcomeLine that skips the
    rest unbuilt (recovery folds GBs) and is lenient on purpose: an outcome line whose other
    fields were damaged still ends its email, rather than have a restart do it again."""

    message_id: object = None
    stage: object = None
    event: object = None
    outcome: object = None


_decode_state_facts = msgspec.json.Decoder(StateFacts).decode


def _decode_state(raw: bytes) -> StateFacts | None:
    """StateFacts of one line; None for a line that is not a JSON object."""
    try:
        return _decode_state_facts(raw)
    except msgspec.DecodeError:
        return None


class Unread:
    """The lines a fold had to read past, by file: each a whole line that names a state
    (`"received"`, `"outcome"`) and does not read as what it must be: not a JSON object, a
    stage or a broker event no version writes, or a broker state line whose id or outcome
    does not fit (a flipped byte, a cut, an edit). The broker reports them at start, as it
    reports the journal's damage. A line damaged where no state word is does not reach the
    fold (it reads only those lines): `airlock trace` names every damaged line."""

    def __init__(self) -> None:
        self.files: dict[str, int] = {}

    @property
    def count(self) -> int:
        return sum(self.files.values())

    def add(self, path: Path | None) -> None:
        name = str(path) if path is not None else "trace"
        self.files[name] = self.files.get(name, 0) + 1


def fold(state: dict[str, str], raw_lines: Iterable[bytes], unread: Unread | None = None,
         path: Path | None = None) -> dict[str, str]:
    """Update `state` with what the broker's own lines say: `received` opens an email, its
    `outcome` ends it (`escalated` keeps it waiting for a person). Other stages' lines are
    not trusted to say where an email stands. A line that does not read as what it must be
    (see Unread) is not taken, and is noted in `unread` (as read from `path`)."""
    for raw in raw_lines:
        if _STATE_WORDS[0] not in raw and _STATE_WORDS[1] not in raw:
            continue
        record = _decode_state(raw)  # None for a torn line (a crash mid-write), or no object
        if not _fits(record):  # what it says is not taken: the email stays as it stood
            if unread is not None and raw.endswith(b"\n"):
                unread.add(path)
            continue
        if record is None or record.stage != "broker" or not isinstance(record.message_id, str):
            continue
        if record.event == "received":
            state[record.message_id] = OPEN
        elif record.event == "outcome":
            state[record.message_id] = ESCALATED if record.outcome == "escalated" else FINAL
    return state


def _fits(record: StateFacts | None) -> bool:
    """Whether a line naming a state reads as a line some stage writes (see Unread)."""
    if record is None or record.stage not in _STAGES:
        return False
    if record.stage != "broker":
        return True
    if record.event not in _BROKER_EVENTS:
        return False
    if record.event in ("received", "outcome") and not isinstance(record.message_id, str):
        return False
    return record.event != "outcome" or record.outcome in _OUTCOMES


def load(path: Path) -> Checkpoint:
    """The checkpoint beside live file `path`; an empty one if there is none or it does not
    decode (a hand-edited file): then every segment there is read again, as before checkpoints."""
    try:
        return _decode(checkpoint_path(path).read_bytes())
    except (FileNotFoundError, msgspec.DecodeError):
        return Checkpoint()


def load_through(path: Path) -> int:
    """The last closed segment the checkpoint covers (0: none, or no checkpoint that decodes)."""
    try:
        return _decode_through(checkpoint_path(path).read_bytes()).through
    except (FileNotFoundError, msgspec.DecodeError):
        return 0


def states(path: Path, unread: Unread | None = None) -> tuple[dict[str, str], list[Path]]:
    """Each email's state as recovery needs it, and which files were read for it: the
    checkpoint, the closed segments it does not cover (normally none), the live file. The
    lines it read past are noted in `unread`."""
    checkpoint = load(path)
    state, read = dict(checkpoint.states), []
    for number, segment in closed(path):
        if number > checkpoint.through:
            start = checkpoint.folded if number == checkpoint.through + 1 else 0
            for _ in _fold_from(state, segment, start, unread=unread):
                pass
            read.append(segment)
    fold(state, lines_of(path), unread, path)
    return state, [*read, path]


def write_checkpoint(path: Path, journalled: Collection[str], keep_segments: int = 0,
                     save_every: int = SAVE_EVERY_BYTES) -> Checkpoint | None:
    """Fold the closed segments the checkpoint does not cover yet into it, keeping final
    emails only while the journal holds them (`journalled`); None if it covers them all.
    Then, with keep_segments > 0, delete the oldest covered segments beyond that many.
    A segment bigger than `save_every` (an old single-file trace) is saved as it goes."""
    checkpoint, segments = load(path), closed(path)
    new = [(number, segment) for number, segment in segments if number > checkpoint.through]
    if not new:
        return None
    state = dict(checkpoint.states)

    def save(through: int, folded: int = 0) -> Checkpoint:
        for message_id in [i for i, what in state.items() if what == FINAL and i not in journalled]:
            del state[message_id]
        taken = Checkpoint(through=through, states=dict(state), folded=folded)
        files.write_private(checkpoint_path(path), _encode(taken))
        return taken

    for number, segment in new:
        start = checkpoint.folded if number == checkpoint.through + 1 else 0
        for offset in _fold_from(state, segment, start, save_every):
            save(number - 1, offset)
    taken = save(new[-1][0])
    if keep_segments > 0:
        for _, segment in segments[:-keep_segments]:
            segment.unlink(missing_ok=True)
    return taken


def _fold_from(state: dict[str, str], segment: Path, start: int, every: int = 0,
               unread: Unread | None = None) -> Iterator[int]:
    """Fold `segment` from byte `start` into `state`, yielding the offset reached (at a line
    boundary) each `every` bytes, where the caller may save its progress."""
    handle = _open_or_none(segment)
    if handle is None:
        return
    with handle:
        handle.seek(start)
        if not every:
            fold(state, handle, unread, segment)
            return
        offset, next_save = start, start + every
        for raw in handle:
            fold(state, (raw,))
            offset += len(raw)
            if every and offset >= next_save and raw.endswith(b"\n"):
                next_save = offset + every
                yield offset


Mark = tuple[tuple[int, int] | None, int]  # the live file's identity and size at some moment


def mark(path: Path) -> Mark:
    """Where the live file ends now, for lines_since."""
    try:
        info = path.stat()
    except FileNotFoundError:
        return None, 0
    return (info.st_dev, info.st_ino), info.st_size


def lines_since(path: Path, since: Mark) -> list[bytes]:
    """Whole lines appended after `since`, even if the live file was closed into a segment
    meanwhile: the rest of the file `since` names, then every later segment and the live file."""
    return read_since(path, since)[0]


def read_since(path: Path, since: Mark) -> tuple[list[bytes], Mark]:
    """lines_since, and the mark just past the last whole line read (for the next call). A
    file that shrank under the mark (truncated) is read again from its start. Only the files
    from the marked one on are opened: the live file alone, unless it was rotated since."""
    marked, offset = since
    files_after = [path]
    if marked is None:
        files_after = [segment for _, segment in closed(path)] + [path]
    elif _identity_of(path) != marked:
        segments = [segment for _, segment in closed(path)]
        at = next((i for i in reversed(range(len(segments))) if _identity_of(segments[i]) == marked), None)
        if at is None:  # the marked file is gone (deleted by retention, or replaced): the live one is all new
            live = _identity_of(path)
            return read_since(path, (live, 0)) if live is not None else ([], since)
        files_after = [*segments[at:], path]
    chunks, last = [], since
    for number, segment in enumerate(files_after):
        handle = _open_or_none(segment)
        if handle is None:
            continue
        with handle:
            here = identity(handle)
            if number == 0 and here == marked:
                handle.seek(0 if handle.seek(0, 2) < offset else offset)
            start = handle.tell()
            data = handle.read()
            whole = data[:data.rfind(b"\n") + 1]  # a line still being written waits for its newline
            chunks.append(whole)
            last = (here, start + len(whole))
    return [line for chunk in chunks for line in chunk.splitlines(keepends=True)], last


def lines_of(path: Path) -> Iterator[bytes]:
    handle = _open_or_none(path)
    if handle is not None:
        with handle:
            yield from handle


def _open_or_none(path: Path) -> BinaryIO | None:
    try:
        return open(path, "rb")
    except FileNotFoundError:
        return None


def identity(handle: BinaryIO) -> tuple[int, int]:
    info = os.fstat(handle.fileno())
    return info.st_dev, info.st_ino


def _identity_of(path: Path) -> tuple[int, int] | None:
    try:
        info = path.stat()
    except FileNotFoundError:
        return None
    return info.st_dev, info.st_ino
