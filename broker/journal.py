"""The intake journal: every accepted email, on disk before `airlock inject` hears "accepted".

Append-only records, each a 4-byte big-endian length then a msgpack Entry. The broker
writes a turn's worth of entries, fsyncs once (group commit, as databases do), and only
then sends the Accepted replies. After a restart, every journalled email that has no final
outcome in the trace is dispatched again. A torn record at the end (a crash mid-write) was
never acknowledged, so reading stops there.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from pathlib import Path

import msgspec

_LENGTH = struct.Struct(">I")


class Entry(msgspec.Struct, frozen=True):
    message_id: str
    raw: bytes
    format: str
    origin: str = ""
    sender: str = ""
    sender_proof: str = "none"  # wire.Submit.sender_proof, kept so a replay stays unverified or proven


class Journal:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        valid = sum(_LENGTH.size + size for size, _ in _records(path))
        self._file = open(path, "ab")
        if self._file.tell() != valid:  # drop a torn tail so new records follow whole ones
            self._file.truncate(valid)
            self._file.seek(valid)
        self._encode = msgspec.msgpack.Encoder().encode
        self._dirty = False

    def append(self, entry: Entry) -> None:
        data = self._encode(entry)
        self._file.write(_LENGTH.pack(len(data)) + data)
        self._dirty = True

    def sync(self) -> bool:
        """Flush and fsync what was appended since the last sync; True if anything was."""
        if not self._dirty:
            return False
        self._file.flush()
        os.fsync(self._file.fileno())
        self._dirty = False
        return True

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
