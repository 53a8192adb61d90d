"""One append-only log: records appended whole or not at all, read back whole or reported.

Four files are append-only logs, and this module is the one writer behind them all: the
broker's journal (broker/journal.py), the trace (airlock/trace.py, TraceWriter), the actor's
call log and its pending escalations (actor/ledger.py). What it does for each:

    append        whole records or nothing: a write that stops part-way (a full disk, an
                  I/O error) is cut back out of the file at once, so no half record stays
                  and nothing of it lands later with another record
    group commit  add() queues records in memory, write() puts all that is queued in one
                  write, sync() writes and fsyncs; the caller decides when (a broker turn, an
                  actor batch), and rollback() takes back everything since the last sync
    repair        at open, a partial last record (a crash mid-write) is cut off and returned
                  in `repaired`, never silently: the caller reports it where it reports
    failures      ENOSPC, EIO, ... are values (Failed) from append, write and sync, never
                  exceptions: what a failure means is the caller's (the trace keeps its lines
                  for later, the journal refuses its emails, the actor fails the email)
    opening       0600, and a symbolic link in the file's place refused (airlock.files)
    reading       scan() gives every whole record and every damaged byte range, in order

Only the framing differs, a small strategy the log is given: Lines (JSON lines: a record is
one line) or Checked (the journal's binary records: a mark, a length and two checksums, so a
reader resynchronises after damage). A framing frames a payload, finds records in bytes,
says where the whole records end (for the repair) and what seals a fragment (below).

A cut-back that fails too leaves a fragment at the end of the file; `torn` says so (the
actor stops acting on such a ledger). The next write tries the cut again; if it still fails,
a framing with a seal (Lines: a newline, so the fragment is one unreadable line and the next
record is whole) writes after it, and one without (Checked) fails until the cut works.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import struct
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from airlock import files

PROBE_BYTES = 64 * 1024  # written then deleted by probe(): room for a typical email again
_TAIL_CHUNK = 64 * 1024  # Lines reads back from the end this much at a time to find the last newline
View = bytes | mmap.mmap


@dataclass(frozen=True)
class Record:
    """One whole record: where it is (offset, framed size) and what it holds."""

    offset: int
    size: int
    payload: bytes
    key: object = None  # what the framing's check found in it (the journal: the message id)


@dataclass(frozen=True)
class Damage:
    """Bytes [start, end) of the log that held no whole record."""

    start: int
    end: int
    torn_tail: bool = False  # it ran to the end of the file (cut off at open)


@dataclass(frozen=True)
class Failed:
    """A write, sync or cut-back the disk refused: the error, what was being done, where."""

    error: OSError
    doing: str  # "writing", "syncing"
    path: Path

    @property
    def reason(self) -> str:
        return disk_reason(self.error, self.path, self.doing)


def disk_reason(exc: OSError, what: Path, doing: str) -> str:
    """One line that names the disk's error: `No space left on device (ENOSPC) writing calls.jsonl`."""
    code = errno.errorcode.get(exc.errno or 0, "error")
    return f"{exc.strerror or exc} ({code}) {doing} {what.name}"


class ForeignFile(ValueError):
    """The file does not start with the framing's header: it is no log of this kind."""


class Framing(Protocol):
    header: bytes  # what a new file starts with (b"" for none)
    seal: bytes | None  # written after a fragment that could not be cut out; None: never write after one

    def frame(self, payload: bytes) -> bytes: ...

    def records(self, view: View, start: int, end: int) -> Iterator[Record | Damage]: ...

    def whole_end(self, fd: int, start: int, end: int) -> int: ...


class Lines:
    """JSON lines (the trace, the call log, pending escalations): a record is one line.
    Lines carry no checksum: a line that is whole but not JSON is the reader's to skip."""

    header = b""
    seal: bytes | None = b"\n"

    def frame(self, payload: bytes) -> bytes:
        """The payload as one line (the newline added unless it ends in one)."""
        return payload if payload.endswith(b"\n") else payload + b"\n"

    def records(self, view: View, start: int, end: int) -> Iterator[Record | Damage]:
        offset = start
        while offset < end:
            newline = view.find(b"\n", offset, end)
            if newline < 0:
                yield Damage(offset, end, torn_tail=True)
                return
            yield Record(offset, newline + 1 - offset, bytes(view[offset:newline]))
            offset = newline + 1

    def whole_end(self, fd: int, start: int, end: int) -> int:
        """Just past the last newline: read back from the end, never the whole file."""
        if end > start and os.pread(fd, 1, end - 1) == b"\n":  # the usual case: one byte read
            return end
        position = end
        while position > start:
            chunk_start = max(start, position - _TAIL_CHUNK)
            newline = os.pread(fd, position - chunk_start, chunk_start).rfind(b"\n")
            if newline >= 0:
                return chunk_start + newline + 1
            position = chunk_start
        return start


class Checked:
    """Binary records, each checked (the journal's format, version 2):

        mark (4 bytes) | payload length (u32, big-endian) | crc32 of the payload |
        crc32 of the 12 bytes before it | payload

    The header's own checksum catches a damaged length before it is believed (no read of
    gigabytes on one flipped bit); the payload's catches damage inside. A reader that meets
    a bad record skips forward to the next mark whose record checks, and reports the bytes
    it skipped. `check` may refuse a payload too (ValueError): the journal's must decode."""

    HEAD = struct.Struct(">4sIII")
    seal: bytes | None = None  # a clean file is kept clean: a write waits for the cut to work

    def __init__(self, header: bytes, mark: bytes, check: Callable[[bytes], object] | None = None) -> None:
        self.header, self.mark, self._check = header, mark, check

    def frame(self, payload: bytes) -> bytes:
        head = self.HEAD.pack(self.mark, len(payload), zlib.crc32(payload), 0)[:self.HEAD.size - 4]
        return head + zlib.crc32(head).to_bytes(4, "big") + payload

    def records(self, view: View, start: int, end: int) -> Iterator[Record | Damage]:
        offset, bad = start, None
        while offset < end:
            record = self._record_at(view, offset, end)
            if record is None:  # resynchronise: the next mark whose checks pass
                bad = offset if bad is None else bad
                found = view.find(self.mark, offset + 1, end)
                offset = end if found < 0 else found
                continue
            if bad is not None:
                yield Damage(bad, offset)
                bad = None
            yield record
            offset += record.size
        if bad is not None:
            yield Damage(bad, end, torn_tail=True)

    def _record_at(self, view: View, offset: int, end: int) -> Record | None:
        start = offset + self.HEAD.size
        if start > end:
            return None
        mark, length, payload_crc, header_crc = self.HEAD.unpack_from(view, offset)
        if mark != self.mark or zlib.crc32(view[offset:start - 4]) != header_crc or start + length > end:
            return None
        payload = view[start:start + length]
        if zlib.crc32(payload) != payload_crc:
            return None
        try:
            key = self._check(payload) if self._check is not None else None
        except ValueError:
            return None
        return Record(offset, self.HEAD.size + length, payload, key)

    def unframe(self, record: bytes) -> bytes | None:
        try:
            mark, length, payload_crc, header_crc = self.HEAD.unpack_from(record)
        except struct.error:
            return None
        start = self.HEAD.size
        if (mark != self.mark or zlib.crc32(record[:start - 4]) != header_crc or length != len(record) - start
                or zlib.crc32(record[start:]) != payload_crc):
            return None
        return record[start:]

    def whole_end(self, fd: int, start: int, end: int) -> int:
        """The end of the last record a scan from the start finds: a record's bytes can hold
        another record (an email may quote one), so only a forward walk knows where they are."""
        if end <= start:
            return start
        last = start
        with mmap.mmap(fd, 0, access=mmap.ACCESS_READ) as view:
            for item in self.records(view, start, end):
                if isinstance(item, Record):
                    last = item.offset + item.size
        return last


LINES = Lines()


class Log:
    """One append-only file of framed records (see the module docstring). Not thread-safe:
    each log has one writer, which holds its own lock where it needs one (the call log).

    `size` is where the next record starts, `synced` how much of it an fsync made durable,
    `identity` the (device, inode) opened. `whole_end`: a caller that has just scanned the
    file (the journal, at open) says where its whole records end, and it is not read twice."""

    def __init__(self, path: Path, framing: Framing, whole_end: int | None = None) -> None:
        self.path, self.framing = path, framing
        with contextlib.suppress(FileNotFoundError):  # a probe a crash interrupted: only this log writes it
            _probe_path(path).unlink()
        self._fd = files.append_descriptor(path, readable=True)  # readable: the repair reads the tail
        try:
            self.repaired = self._repair(whole_end)
        except BaseException:
            os.close(self._fd)
            raise
        self._opened()
        self._queued: list[bytes] = []
        self.queued_bytes = 0
        self._cut_to: int | None = None  # a failed cut-back still owed: the length to cut to
        self.torn = ""  # why the file may end in a fragment ("" while it cannot)
        self._stale = False  # the path names another file now (reopen): open it before the next write

    def _opened(self) -> None:
        info = os.fstat(self._fd)
        self.identity = (info.st_dev, info.st_ino)
        self.size = self.synced = info.st_size  # what was there at open counts as durable

    def _repair(self, whole_end: int | None) -> Damage | None:
        size, header = os.fstat(self._fd).st_size, self.framing.header
        if size < len(header):  # a new file, or a crash while its header was written
            os.ftruncate(self._fd, 0)
            _write_all(self._fd, header)
            os.fsync(self._fd)
            files.fsync_folder(self.path.parent)
            return Damage(0, size, torn_tail=True) if size else None
        if header and os.pread(self._fd, len(header), 0) != header:
            raise ForeignFile(f"{self.path} does not start with {header!r}: not a file this log writes")
        end = self.framing.whole_end(self._fd, len(header), size) if whole_end is None else max(whole_end, len(header))
        if end >= size:
            return None
        os.ftruncate(self._fd, end)  # a partial last record: new records follow whole ones
        os.fsync(self._fd)
        return Damage(end, size, torn_tail=True)

    def add(self, records: bytes) -> None:
        """Queue framed records for the next write() or sync(): nothing reaches the file before."""
        self._queued.append(records)
        self.queued_bytes += len(records)

    def append(self, records: bytes) -> Failed | None:
        """Write framed records now, whole or not at all: on failure nothing of them stays in
        the file and nothing of them is kept to be written later."""
        return self._write(records)

    def write(self) -> Failed | None:
        """Write what is queued, in one write. On failure the file is cut back to where it was
        and the records stay queued, in order, for the next try (rollback() drops them)."""
        if not self._queued:
            return None
        data = self._queued[0] if len(self._queued) == 1 else b"".join(self._queued)
        self._queued = [data]
        failed = self._write(data)
        if failed is None:
            self._queued, self.queued_bytes = [], 0
        return failed

    def sync(self) -> Failed | None:
        """Write what is queued and fsync what was written since the last sync (group commit).
        On failure the records since the last sync may or may not be on disk (Linux forgets
        a page it failed to write): a caller that promised nothing yet calls rollback()."""
        failed = self.write()
        if failed is not None or self.synced == self.size:
            return failed
        try:
            os.fsync(self._fd)
        except OSError as exc:
            return Failed(exc, "syncing", self.path)
        self.synced = self.size
        return None

    def rollback(self) -> None:
        """Take back every record since the last sync, queued or written."""
        self._queued, self.queued_bytes = [], 0
        self._cut(self.synced)

    def probe(self, room: int = PROBE_BYTES) -> OSError | None:
        """Whether writing works again: `room` bytes written, fsynced and deleted in a file
        beside the log (the same file system), never in it, so a crash meanwhile leaves the
        log whole. A cut-back still owed is tried first."""
        scratch = _probe_path(self.path)
        try:
            self._prepare()
            fd = files.create_scratch(scratch)
            try:
                _write_all(fd, bytes(room))
                os.fsync(fd)
            finally:
                os.close(fd)
                with contextlib.suppress(OSError):
                    scratch.unlink()
        except OSError as exc:
            return exc
        return None

    def reopen(self) -> None:
        """The path names another file now (the journal renamed a compacted copy over it):
        write there from now on. If it cannot be opened, the OSError is raised, and the open
        is tried again before the next write."""
        self._stale = True
        self._prepare()

    def fileno(self) -> int:
        return self._fd

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _write(self, data: bytes) -> Failed | None:
        try:
            seal = self._prepare() if self._stale or self._cut_to is not None else b""
            # Where the file ends, whatever this log believed (a cheaper call than fstat):
            # a failed write is cut back to exactly there.
            start = os.lseek(self._fd, 0, os.SEEK_END)
        except OSError as exc:
            return Failed(exc, "writing", self.path)
        if seal:
            data = seal + data
        try:
            written = os.write(self._fd, data)
            if written < len(data):  # the disk filled meanwhile: the next write says why (ENOSPC, EIO)
                written += os.write(self._fd, memoryview(data)[written:])
                if written < len(data):
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        except OSError as exc:
            self._cut(start)
            return Failed(exc, "writing", self.path)
        self._cut_to, self.torn = None, ""  # cut, or sealed: the file ends in a whole record
        self.size = start + len(data)
        return None

    def _prepare(self) -> bytes:
        """Before a write: open the file the path names now, if asked; then the cut-back still
        owed, or else (the cut failing again) the framing's seal to write first. Raises
        OSError when neither works: nothing may be written after the fragment."""
        if self._stale:
            fresh = files.append_descriptor(self.path, readable=True)
            os.close(self._fd)
            self._fd, self._stale, self._cut_to, self.torn = fresh, False, None, ""
            self._opened()
        if self._cut_to is None:
            return b""
        try:
            os.ftruncate(self._fd, self._cut_to)
        except OSError:
            if self.framing.seal is None:
                raise
            return self.framing.seal
        self._cut_to, self.torn = None, ""
        return b""

    def _cut(self, length: int) -> None:
        """Cut the file back to `length`; if the disk refuses even that, the cut is owed and
        `torn` says the file may end in a fragment."""
        self.size, self.synced = min(self.size, length), min(self.synced, length)
        try:
            if os.lseek(self._fd, 0, os.SEEK_END) > length:  # only ever shorter: never grown with zeros
                os.ftruncate(self._fd, length)
        except OSError as exc:
            self._cut_to = length if self._cut_to is None else min(self._cut_to, length)
            self.torn = (f"{self.path.name} could not be cut back after a failed write ({exc.strerror}): "
                         "it may end in a partial record")


def _probe_path(path: Path) -> Path:
    """Where probe() writes its scratch file: beside the log, on the same file system."""
    return path.with_name(path.name + ".probe")


def scan(path: Path, framing: Framing) -> Iterator[Record | Damage]:
    """Every whole record and every damaged range between them, in file order. The file
    is mapped, not read: a scan over gigabytes holds one record at a time.
    A file that does not start with the framing's header is all damage."""
    try:
        handle = open(path, "rb")  # noqa: SIM115  opened apart from `with` so a missing file is no scan at all
    except FileNotFoundError:
        return
    with handle:
        size = os.fstat(handle.fileno()).st_size
        header = framing.header
        if header and handle.read(len(header)) != header:
            if size:
                yield Damage(0, size, torn_tail=True)
            return
        start = len(header)
        if size <= start:
            return
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as view:
            yield from framing.records(view, start, size)


def read_at(path: Path, framing: Checked, offset: int, size: int) -> bytes | None:
    """The payload of the record at `offset` (a scan found it there), checked again by the
    framing: None if it is damaged now. OSError if the file cannot be read."""
    with open(path, "rb") as handle:
        handle.seek(offset)
        return framing.unframe(handle.read(size))


def _write_all(fd: int, data: bytes) -> None:
    """os.write until every byte is written; a short write on a nearly full disk is retried,
    so the error, if any, is the one the next write raises."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
