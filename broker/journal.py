"""The intake journal: every accepted email, on disk before `airlock inject` hears "accepted".

Append-only. The broker writes a turn's worth of entries, fsyncs once (group commit, as
databases do), and only then sends the Accepted replies and writes the turn's trace lines,
so an email's `received` line never reaches the trace before its record is on disk. After a
restart, every journalled email that has no final outcome in the trace is dispatched again.

The file is an append-only log (airlock.appendlog: whole records or none, group commit,
torn-tail repair, failures as values). Format (version 2): MAGIC, then records framed by
appendlog.Checked, each payload one msgpack QueuedEmail:

    MARK (4 bytes) | payload length (u32, big-endian) | crc32 of the payload | crc32 of the
    12 bytes before it | payload

A reader that meets a bad record skips forward to the next MARK whose header and payload
both check, and reports every skipped byte range (`Damage`): a cut, zeros or a flipped byte
costs the records it touches, never the ones after it. Damage that runs to the end of the
file is a torn tail (a crash mid-write, or a cut): it is truncated at open, and reported
too. A file without MAGIC is a version 1 journal (length + msgpack, no checksum): it is read
the old way, once, and rewritten in this format (as a compaction is: a copy, fsync, rename).

Compaction: an email with a final outcome needs its record no more, yet every raw email
stayed in the file forever. Once the file reaches `compact_bytes` and at least half of it
is final, `compact(live)` copies the live records, one at a time, to a new file, fsyncs
it, renames it over the journal and fsyncs the folder. A crash before the rename leaves
the old journal whole (the half-written copy is deleted at the next start); after it, the
new one is complete. Either way recovery finds every unfinished email exactly once: the
records are copied, never rewritten, and an email final in the trace is not dispatched.
Damaged ranges are not copied: a compaction is also the repair.

Write failures (a full disk, an I/O error) are values, not crashes: `sync()` returns a
WriteFailed (the OSError, and the entries it held as lost: `message_ids`) after cutting the
file back to its last durable length, so no half record and no stale buffer is ever written
later; the broker refuses those entries (Refused code disk_full). `probe()` tells when
writing works again.
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import msgspec

from airlock import appendlog, files
from airlock.appendlog import Damage, Record
from airlock.wire import EmailFormat

__all__ = ["Damage", "Journal", "Position", "QueuedEmail", "WriteFailed", "damage", "entries", "positions"]

MAGIC = b"\xffairlock journal 2\n"  # 0xff.. as a version 1 length would be 4 GiB: never a v1 file
MARK = b"\xf0AJR"  # starts every record: what a reader resynchronises on after damage
_V1_LENGTH = struct.Struct(">I")
COMPACTING_SUFFIX = ".compacting"  # the copy being written; never read, deleted at start
CHECK_EVERY_S = 1.0  # how often a journal judged mostly live is looked at again


class QueuedEmail(msgspec.Struct, frozen=True):
    """One journal record: an accepted `wire.Email`, under the id the broker gave it.

    The same fields as the Email (flat, so the bytes on disk stay a plain msgpack map);
    `sender_proof` is the one the broker kept (only the SMTP intake's key may vouch)."""

    message_id: str
    raw: bytes
    format: EmailFormat
    origin: str = ""
    sender: str = ""
    sender_proof: str = "none"  # wire.Submit.sender_proof, kept so a replay stays unverified or proven


class _Id(msgspec.Struct):
    """A QueuedEmail's id alone: decoding it skips the raw email instead of copying it."""

    message_id: str


_decode_id = msgspec.msgpack.Decoder(_Id).decode


def _message_id(payload: bytes) -> str:
    """A record's id: a payload that is no QueuedEmail does not count as a record (DecodeError)."""
    return _decode_id(payload).message_id


RECORDS = appendlog.Checked(MAGIC, MARK, _message_id)


@dataclass(frozen=True)
class Position:
    """Where one record is: enough to read it later without holding its email now."""

    offset: int
    size: int  # the record's bytes, header included
    message_id: str


@dataclass(frozen=True)
class WriteFailed:
    """A sync that did not reach the disk: why, and the entries it held, none of them kept."""

    error: OSError
    message_ids: tuple[str, ...]


class Journal:
    def __init__(self, path: Path, compact_bytes: int = 16 * 1024 * 1024) -> None:
        files.make_folder(path.parent)  # 0700: the journal holds every raw email
        self.path = path
        self.compact_bytes = compact_bytes
        with contextlib.suppress(FileNotFoundError):  # a compaction a crash interrupted (a probe: appendlog's own)
            _compacting(path).unlink()
        self.damage: list[Damage] = _upgrade_v1(path)  # what a version 1 file lost at its tail
        self.sizes: dict[str, int] = {}  # every record's id -> bytes
        whole_end = len(MAGIC)  # where the whole records end: a torn tail starts there
        for item in _scan(path):
            if isinstance(item, Damage):
                self.damage.append(item)
                whole_end = item.start if item.torn_tail else item.end
            else:
                self.sizes[item[0].message_id] = item[0].size
                whole_end = item[0].offset + item[0].size
        # 0600 in a 0700 folder: it holds every raw email. Told where the scan above found the
        # whole records end, the log cuts a torn tail off without reading the file again.
        self._log = appendlog.Log(path, RECORDS, whole_end=whole_end)
        self._next_check, self._next_check_at = compact_bytes, 0.0
        self._encode = msgspec.msgpack.Encoder().encode
        self._pending_ids: list[str] = []

    @property
    def size(self) -> int:
        """The journal's bytes, the records appended and not yet synced included."""
        return self._log.size + self._log.queued_bytes

    def append(self, entry: QueuedEmail) -> None:
        """Queue a record for the next sync(): nothing reaches the file before it."""
        record = RECORDS.frame(self._encode(entry))
        self._log.add(record)
        self._pending_ids.append(entry.message_id)
        self.sizes[entry.message_id] = len(record)

    def sync(self) -> WriteFailed | None:
        """Write and fsync what was appended since the last sync, in one write (group commit).
        On a full disk or an I/O error the file is cut back to its last durable length and
        the entries are dropped, not kept for a later write: their emails were never accepted."""
        ids, self._pending_ids = tuple(self._pending_ids), []
        failed = self._log.sync()
        if failed is None:
            return None
        self._log.rollback()  # if the cut fails too, the next write cuts first (appendlog)
        for message_id in ids:
            self.sizes.pop(message_id, None)
        return WriteFailed(failed.error, ids)

    def probe(self) -> OSError | None:
        """Whether writing works again: appendlog.PROBE_BYTES written, fsynced and deleted
        beside the journal (same file system), never in it, so a crash meanwhile leaves it whole."""
        return self._log.probe()

    def worth_compacting(self, live: Collection[str], now: float) -> bool:
        """At least compact_bytes, at least half final. Summing the live records costs a pass
        over them, so after a "no" the next look waits CHECK_EVERY_S (emails finish) or a
        quarter of compact_bytes more (emails arrive), whichever comes first."""
        if self.size < self.compact_bytes or (self.size < self._next_check and now < self._next_check_at):
            return False
        live_bytes = sum(self.sizes.get(message_id, 0) for message_id in live)
        if self.size >= 2 * live_bytes:
            return True
        self._next_check = self.size + max(1, self.compact_bytes // 4)
        self._next_check_at = now + CHECK_EVERY_S
        return False

    def compact(self, live: Collection[str]) -> int:
        """Keep only the records of `live` emails (see the module docstring); returns the bytes
        freed. Needs what was appended synced first (the loop syncs every turn)."""
        failed = self.sync()
        if failed is not None:
            raise failed.error
        kept: dict[str, int] = {}

        def live_records() -> Iterator[bytes]:
            for position, data in _records_at(self.path):
                if position.message_id in live and position.message_id not in kept:
                    kept[position.message_id] = position.size
                    yield data

        try:
            _replace(self.path, live_records())
        except BaseException:
            self._next_check = self.size + max(1, self.compact_bytes // 4)  # not again at once...
            self._next_check_at = float("inf")  # ...nor a second later: only as the journal grows
            raise
        # Renamed: the journal is the copy now, whatever fails next. The old descriptor writes
        # to the replaced file, so it is never used again (the log opens the new one).
        freed = self.size - (len(MAGIC) + sum(kept.values()))
        self.sizes = kept
        self._log.reopen()  # its size is the copy's
        self._next_check, self._next_check_at = self.size + self.compact_bytes // 4, 0.0
        files.fsync_folder(self.path.parent)
        return freed

    def positions(self) -> Iterator[Position]:
        """Each checked record's place and id, in file order, read now; damage met on the way
        that the open did not see is added to `damage`."""
        for item in _scan(self.path):
            if not isinstance(item, Damage):
                yield item[0]
            elif item not in self.damage:
                self.damage.append(item)

    def read(self, position: Position) -> QueuedEmail | Damage:
        """The entry at `position` (a record this journal holds: see positions), checked
        again: bytes damaged since the scan, or unreadable (EIO), are the Damage they are."""
        try:
            payload = appendlog.read_at(self.path, RECORDS, position.offset, position.size)
            if payload is not None:
                return msgspec.msgpack.decode(payload, type=QueuedEmail)
        except (OSError, msgspec.DecodeError):
            pass
        return Damage(position.offset, position.offset + position.size)

    def close(self) -> None:
        self.sync()  # a failure was already cut back: nothing half-written stays
        self._log.close()


def entries(path: Path) -> Iterator[QueuedEmail]:
    decoder = msgspec.msgpack.Decoder(QueuedEmail)
    for _, data in _records_at(path):
        yield decoder.decode(data)


def positions(path: Path) -> Iterator[Position]:
    """Each whole record's place and id, without keeping any email in memory."""
    for position, _ in _records_at(path):
        yield position


def damage(path: Path) -> list[Damage]:
    """Every byte range of the file that held no whole, checked record."""
    return [item for item in _scan(path) if isinstance(item, Damage)]


def _records_at(path: Path) -> Iterator[tuple[Position, bytes]]:
    for item in _scan(path):
        if not isinstance(item, Damage):
            yield item


def _scan(path: Path) -> Iterator[tuple[Position, bytes] | Damage]:
    """Every checked record in file order, and every damaged range between them
    (airlock.appendlog.scan); a version 1 file is read as it was."""
    if not path.exists():
        return
    with open(path, "rb") as handle:
        head = handle.read(len(MAGIC))
    if head != MAGIC:  # version 1 (a Journal upgrades it at open): read as it was
        yield from _v1_scan(path)
        return
    for item in appendlog.scan(path, RECORDS):
        if isinstance(item, Record):
            yield Position(item.offset, item.size, str(item.key)), item.payload
        else:
            yield item


def _upgrade_v1(path: Path) -> list[Damage]:
    """Rewrite a version 1 journal (length + msgpack) in this format, as a compaction does:
    a copy, fsync, rename, fsync the folder. Returns its torn tail, which is not copied."""
    if not path.exists():
        return []
    with open(path, "rb") as handle:
        head = handle.read(len(MAGIC))
    if head.startswith(MAGIC) or MAGIC.startswith(head):  # new format, or a header a crash cut
        return []
    length, valid = path.stat().st_size, 0

    def v1_records() -> Iterator[bytes]:
        nonlocal valid
        for size, data in _v1_records(path):
            valid += _V1_LENGTH.size + size
            yield data

    _replace(path, v1_records())  # on failure the old file stays whole and is upgraded at the next open
    files.fsync_folder(path.parent)
    return [Damage(valid, length, torn_tail=True)] if valid < length else []


def _v1_scan(path: Path) -> Iterator[tuple[Position, bytes] | Damage]:
    decoder, offset = msgspec.msgpack.Decoder(_Id), 0
    for size, data in _v1_records(path):
        yield Position(offset, _V1_LENGTH.size + size, decoder.decode(data).message_id), data
        offset += _V1_LENGTH.size + size
    if offset < path.stat().st_size:
        yield Damage(offset, path.stat().st_size, torn_tail=True)


def _v1_records(path: Path) -> Iterator[tuple[int, bytes]]:
    """A version 1 file's whole records; reading stops at a torn one (it had no checksum)."""
    decoder = msgspec.msgpack.Decoder(_Id)
    with open(path, "rb") as handle:
        while True:
            head = handle.read(_V1_LENGTH.size)
            if len(head) < _V1_LENGTH.size:
                return
            (size,) = _V1_LENGTH.unpack(head)
            data = handle.read(size)
            if len(data) < size:
                return
            try:
                decoder.decode(data)
            except msgspec.DecodeError:
                return
            yield size, data


def _replace(path: Path, payloads: Iterable[bytes]) -> None:
    """Replace the journal at `path` with MAGIC and `payloads` framed: written to a copy beside
    it, fsynced, renamed over it. On any failure the copy is deleted and `path` stays whole.
    The caller fsyncs the folder (once the rename counts, whatever fails next)."""
    tmp = _compacting(path)
    try:
        with open(files.create_scratch(tmp), "wb") as out:
            out.write(MAGIC)
            out.writelines(RECORDS.frame(payload) for payload in payloads)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def _compacting(path: Path) -> Path:
    return path.with_name(path.name + COMPACTING_SUFFIX)
