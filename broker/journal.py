"""The intake journal: every accepted email, on disk before `airlock inject` hears "accepted".

Append-only records, each a 4-byte big-endian length then a msgpack Entry. The broker
writes a turn's worth of entries, fsyncs once (group commit, as databases do), and only
then sends the Accepted replies. After a restart, every journalled email that has no final
outcome in the trace is dispatched again. A torn record at the end (a crash mid-write) was
never acknowledged, so reading stops there.

Compaction: an email with a final outcome needs its record no more, yet every raw email
stayed in the file forever. Once the file reaches `compact_bytes` and at least half of it
is final, `compact(live)` copies the live records, one at a time, to a new file, fsyncs
it, renames it over the journal and fsyncs the folder. A crash before the rename leaves
the old journal whole (the half-written copy is deleted at the next start); after it, the
new one is complete. Either way recovery finds every unfinished email exactly once: the
records are copied, never rewritten, and an email final in the trace is not dispatched.
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path

import msgspec

from airlock import files

_LENGTH = struct.Struct(">I")
COMPACTING_SUFFIX = ".compacting"  # the copy being written; never read, deleted at start
CHECK_EVERY_S = 1.0  # how often a journal judged mostly live is looked at again


class Entry(msgspec.Struct, frozen=True):
    message_id: str
    raw: bytes
    format: str
    origin: str = ""
    sender: str = ""
    sender_proof: str = "none"  # wire.Submit.sender_proof, kept so a replay stays unverified or proven


class _Id(msgspec.Struct):
    """An Entry's id alone: decoding it skips the raw email instead of copying it."""

    message_id: str


@dataclass(frozen=True)
class Position:
    """Where one record is: enough to read it later without holding its email now."""

    offset: int
    size: int  # the record's bytes, length prefix included
    message_id: str


class Journal:
    def __init__(self, path: Path, compact_bytes: int = 64 * 1024 * 1024) -> None:
        files.make_folder(path.parent)  # 0700: the journal holds every raw email
        self.path = path
        self.compact_bytes = compact_bytes
        with contextlib.suppress(FileNotFoundError):  # a compaction a crash interrupted
            _compacting(path).unlink()
        self.sizes = {p.message_id: p.size for p in positions(path)}  # every record's id -> bytes
        valid = _valid_length(path)
        self._file = files.open_append(path)  # 0600 in a 0700 folder: it holds every raw email
        if self._file.tell() != valid:  # drop a torn tail so new records follow whole ones
            self._file.truncate(valid)
            self._file.seek(valid)
        self.size = valid
        self._next_check, self._next_check_at = compact_bytes, 0.0
        self._encode = msgspec.msgpack.Encoder().encode
        self._dirty = False

    def append(self, entry: Entry) -> None:
        data = self._encode(entry)
        self._file.write(_LENGTH.pack(len(data)) + data)
        self.sizes[entry.message_id] = _LENGTH.size + len(data)
        self.size += _LENGTH.size + len(data)
        self._dirty = True

    def sync(self) -> bool:
        """Flush and fsync what was appended since the last sync; True if anything was."""
        if not self._dirty:
            return False
        self._file.flush()
        os.fsync(self._file.fileno())
        self._dirty = False
        return True

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
        self.sync()
        tmp = _compacting(self.path)
        kept: dict[str, int] = {}
        try:
            with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as out:
                for position, data in _records_at(self.path):
                    if position.message_id in live and position.message_id not in kept:
                        out.write(_LENGTH.pack(len(data)) + data)
                        kept[position.message_id] = position.size
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink()
            self._next_check = self.size + max(1, self.compact_bytes // 4)  # not again at once...
            self._next_check_at = float("inf")  # ...nor a second later: only as the journal grows
            raise
        _fsync_folder(self.path.parent)
        self._file.close()
        self._file = files.open_append(self.path)
        freed = self.size - sum(kept.values())
        self.sizes, self.size = kept, sum(kept.values())
        self._next_check, self._next_check_at = self.size + self.compact_bytes // 4, 0.0
        return freed

    def read(self, position: Position) -> Entry:
        """The entry at `position` (a record this journal holds: see positions)."""
        with open(self.path, "rb") as handle:
            handle.seek(position.offset + _LENGTH.size)
            return msgspec.msgpack.decode(handle.read(position.size - _LENGTH.size), type=Entry)

    def close(self) -> None:
        self.sync()
        self._file.close()


def entries(path: Path) -> Iterator[Entry]:
    decoder = msgspec.msgpack.Decoder(Entry)
    for _, data in _records(path):
        try:
            yield decoder.decode(data)
        except msgspec.DecodeError:
            return


def positions(path: Path) -> Iterator[Position]:
    """Each whole record's place and id, without keeping any email in memory."""
    for position, _ in _records_at(path):
        yield position


def _records_at(path: Path) -> Iterator[tuple[Position, bytes]]:
    decoder = msgspec.msgpack.Decoder(_Id)
    offset = 0
    for size, data in _records(path):
        try:
            message_id = decoder.decode(data).message_id
        except msgspec.DecodeError:
            return
        yield Position(offset, _LENGTH.size + size, message_id), data
        offset += _LENGTH.size + size


def _valid_length(path: Path) -> int:
    return sum(_LENGTH.size + size for size, _ in _records(path))


def _records(path: Path) -> Iterator[tuple[int, bytes]]:
    if not path.exists():
        return
    with open(path, "rb") as handle:
        while True:
            head = handle.read(_LENGTH.size)
            if len(head) < _LENGTH.size:
                return
            (size,) = _LENGTH.unpack(head)
            data = handle.read(size)
            if len(data) < size:
                return
            yield size, data


def _compacting(path: Path) -> Path:
    return path.with_name(path.name + COMPACTING_SUFFIX)


def _fsync_folder(folder: Path) -> None:
    """Make a rename in `folder` durable: without this, a power cut may undo it."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
