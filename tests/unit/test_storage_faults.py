"""A full disk or an I/O error on the broker's writes is a typed state, never a crash: the
journal keeps no half record and no stale buffer, the trace no half line and no lost one,
and intake hears Refused code disk_full."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import msgspec
import pytest

from airlock import trace
from airlock.wire import Accepted, Refused, Submit
from broker.journal import Journal, QueuedEmail, WriteFailed, damage, entries
from broker.router import Router, Send
from tests.lines import raw_line


class Disk:
    """os.write for files whose path holds `name`, on a disk with `room` bytes left: a
    write past it is short, the next raises `error` (ENOSPC by default), as a real one does."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, name: str, room: int,
                 error: int = errno.ENOSPC) -> None:
        self.room: int | None = room  # None: space returned, every write goes through
        self.name, self.error, self._write = name, error, os.write
        monkeypatch.setattr(os, "write", self.write)

    def write(self, fd: int, data: bytes) -> int:
        if self.room is None or self.name not in os.readlink(f"/proc/self/fd/{fd}"):
            return self._write(fd, data)
        if self.room == 0:
            raise OSError(self.error, os.strerror(self.error))
        written = self._write(fd, bytes(data[:self.room]))
        self.room -= written
        return written


def _lines(count: int, start: int = 0) -> list[bytes]:
    return [raw_line("broker", "received", f"m-{n}", {"pad": "x" * 100}) for n in range(start, start + count)]


@pytest.mark.parametrize("error", [errno.ENOSPC, errno.EIO], ids=["ENOSPC", "EIO"])
def test_the_trace_writer_keeps_refused_lines_whole_and_writes_them_when_space_returns(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: int) -> None:
    """write() never raises; flush() returns the error with no half line on disk; the lines
    wait, in order, and reach the file with the first flush that works."""
    path = tmp_path / "trace.jsonl"
    first, later = _lines(2), _lines(5, start=2)
    path.write_bytes(b"".join(first))
    disk = Disk(monkeypatch, "trace.jsonl", room=150, error=error)
    monkeypatch.setattr(trace.TraceWriter, "RETRY_S", 0.0)
    writer = trace.TraceWriter(path)
    for line in later:
        writer.write(line)
    failure = writer.flush()
    assert isinstance(failure, OSError) and failure.errno == error and writer.failing is failure
    assert path.read_bytes() == b"".join(first)  # the short write was cut back
    assert writer.sync() is not None
    disk.room = None  # space returns
    assert writer.flush() is None and writer.failing is None
    writer.close()
    assert path.read_bytes() == b"".join(first + later)


def test_the_trace_writer_bounds_what_waits_and_counts_what_it_drops(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """While the disk refuses, lines wait up to UNWRITTEN_MAX_BYTES; past it they are counted
    in `dropped`, and the kept ones are still written whole and in order."""
    path = tmp_path / "trace.jsonl"
    disk = Disk(monkeypatch, "trace.jsonl", room=0)
    monkeypatch.setattr(trace.TraceWriter, "RETRY_S", 0.0)
    lines = _lines(20)
    monkeypatch.setattr(trace.TraceWriter, "UNWRITTEN_MAX_BYTES", 5 * len(lines[0]))
    writer = trace.TraceWriter(path)
    writer.write(lines[0])
    assert writer.flush() is not None
    for line in lines[1:]:
        writer.write(line)
    assert writer.dropped == 15
    disk.room = None
    assert writer.close() is None
    assert path.read_bytes() == b"".join(lines[:5])


@pytest.mark.parametrize("error", [errno.ENOSPC, errno.EIO], ids=["ENOSPC", "EIO"])
def test_a_journal_sync_that_fails_keeps_nothing_half_written_nor_writes_it_later(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: int) -> None:
    """A sync on a full disk returns WriteFailed naming every entry it held; the file is cut
    back to its last durable length, and those entries never reach it later (they were
    refused), while what is appended after space returns is kept."""
    path = tmp_path / "journal.bin"
    journal = Journal(path)
    journal.append(QueuedEmail("kept-1", b"a" * 1000, "text"))
    assert journal.sync() is None
    durable = path.stat().st_size
    disk = Disk(monkeypatch, "journal.bin", room=1500, error=error)
    for n in range(3):
        journal.append(QueuedEmail(f"lost-{n}", b"b" * 1000, "text"))
    failed = journal.sync()
    assert isinstance(failed, WriteFailed) and failed.error.errno == error
    assert failed.message_ids == ("lost-0", "lost-1", "lost-2")
    assert path.stat().st_size == durable and journal.size == durable
    assert journal.probe() is not None  # journal.bin.probe: the same disk, still refusing
    disk.room = None
    assert journal.probe() is None
    journal.append(QueuedEmail("kept-2", b"c" * 1000, "text"))
    assert journal.sync() is None
    journal.close()
    assert [e.message_id for e in entries(path)] == ["kept-1", "kept-2"]
    assert damage(path) == [] and not path.with_name("journal.bin.probe").exists()


def test_while_the_disk_is_full_intake_is_refused_with_code_disk_full(settings) -> None:
    """With Router.disk_full set, a Submit gets no id and no received line: Refused, code
    disk_full, a reason saying so; once cleared, Submits are accepted again."""
    router = Router(settings, boot=0xABC)
    router.disk_full = "cannot write the journal: [Errno 28] No space left on device"
    effects = router.handle("intake", b"c", Submit(ref=1, raw=b"Subject: x\n\nhi", format="text"), 0.0)
    replies = [e.message for e in effects if isinstance(e, Send)]
    assert len(replies) == 1 and isinstance(replies[0], Refused) and replies[0].code == "disk_full"
    assert "disk full" in replies[0].reason and not router.flights
    assert not [e for e in effects if isinstance(e, (bytes, QueuedEmail))]
    router.disk_full = ""
    effects = router.handle("intake", b"c", Submit(ref=2, raw=b"Subject: x\n\nhi", format="text"), 0.0)
    assert [type(e.message) for e in effects if isinstance(e, Send)] == [Accepted]


def test_an_email_whose_record_was_not_kept_ends_failed_once(settings) -> None:
    """Router.end_failed: the email received this turn whose journal write failed ends
    `failed` with one outcome line saying it was not accepted, and holds no bytes."""
    router = Router(settings, boot=0xABC)
    effects = router.handle("intake", b"c", Submit(ref=1, raw=b"Subject: x\n\nhi", format="text"), 0.0)
    [entry] = [e for e in effects if isinstance(e, QueuedEmail)]
    lines = [msgspec.json.decode(line) for line in router.end_failed([entry.message_id], "not accepted: disk full", 0.0)
             if isinstance(line, bytes)]
    assert [(line["event"], line["outcome"]) for line in lines] == [("outcome", "failed")]
    assert "not accepted" in lines[0]["reason"] and not router.flights and router.queued_bytes == 0
