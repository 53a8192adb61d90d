"""The one append-only log (airlock.appendlog), over both framings: whole records or none,
group commit, torn tails cut and reported at open, disk failures as values, no link
followed, and the files the writers before it left still open as they were."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import msgspec
import pytest

from actor.calllog import CallLog
from actor.pending import PendingStore
from airlock import appendlog, trace, tracefiles
from airlock.appendlog import Damage, Failed, ForeignFile, Log, Record
from airlock.files import LinkedDataFile
from broker.journal import RECORDS, Journal, QueuedEmail, entries
from tests.lines import json_object, raw_line

OLD = Path(__file__).parent / "old_logs"  # written by the code before appendlog (see old_logs/README.md)
FRAMINGS = [pytest.param(appendlog.LINES, id="lines"), pytest.param(RECORDS, id="checked")]


def _payload(n: int) -> bytes:
    return msgspec.msgpack.encode(QueuedEmail(f"m-{n}", b"x" * 50, "text"))


def _framed(framing: appendlog.Framing, n: int) -> bytes:
    """One framed record; for lines a JSON object, so a line is never mistaken for a record of the other."""
    if framing is appendlog.LINES:
        return framing.frame(msgspec.json.encode({"n": n, "pad": "x" * 50}))
    return framing.frame(_payload(n))


def _records(path: Path, framing: appendlog.Framing) -> list[bytes]:
    found = list(appendlog.scan(path, framing))
    assert all(isinstance(item, Record) for item in found), found
    return [framing.frame(item.payload) for item in found if isinstance(item, Record)]


class Disk:
    """os.write, fsync and ftruncate for one file, failing as asked: `room` bytes then the
    write is short and the next raises `error`; `fsync` and `truncate` raise it while set."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, path: Path, error: int = errno.ENOSPC) -> None:
        self.path, self.error = path, error
        self.room: int | None = None
        self.fsync = self.truncate = False
        self._write, self._fsync, self._ftruncate = os.write, os.fsync, os.ftruncate
        monkeypatch.setattr(os, "write", self.write)
        monkeypatch.setattr(os, "fsync", self.sync)
        monkeypatch.setattr(os, "ftruncate", self.cut)

    def _mine(self, fd: int) -> bool:
        return os.readlink(f"/proc/self/fd/{fd}") == str(self.path)

    def _refuse(self) -> None:
        raise OSError(self.error, os.strerror(self.error))

    def write(self, fd: int, data: bytes) -> int:
        if self.room is None or not self._mine(fd):
            return self._write(fd, data)
        if self.room == 0:
            self._refuse()
        written = self._write(fd, bytes(data[:self.room]))
        self.room -= written
        return written

    def sync(self, fd: int) -> None:
        if self.fsync and self._mine(fd):
            self._refuse()
        self._fsync(fd)

    def cut(self, fd: int, length: int) -> None:
        if self.truncate and self._mine(fd):
            self._refuse()
        self._ftruncate(fd, length)


@pytest.mark.parametrize("framing", FRAMINGS)
def test_queued_records_reach_the_file_at_write_and_are_durable_after_sync(tmp_path: Path, framing) -> None:
    """add() writes nothing; write() puts the queue in one write; sync() fsyncs; scan reads back in order."""
    path = tmp_path / "log"
    log = Log(path, framing)
    records = [_framed(framing, n) for n in range(5)]
    for record in records[:3]:
        log.add(record)
    assert path.stat().st_size == len(framing.header) and log.queued_bytes == sum(map(len, records[:3]))
    assert log.write() is None and log.synced < log.size == path.stat().st_size
    assert log.append(records[3]) is None
    log.add(records[4])
    assert log.sync() is None and log.synced == log.size == path.stat().st_size
    log.close()
    assert _records(path, framing) == records


@pytest.mark.parametrize("framing", FRAMINGS)
def test_a_torn_tail_is_cut_at_open_and_reported(tmp_path: Path, framing) -> None:
    """A partial last record (a crash mid-write) is cut off at open and reported as the Damage
    it was; the next record follows the whole ones and reads back."""
    path = tmp_path / "log"
    log = Log(path, framing)
    whole = [_framed(framing, n) for n in range(3)]
    log.append(b"".join(whole))
    log.close()
    with open(path, "ab") as handle:
        handle.write(_framed(framing, 3)[:-7])
    size = path.stat().st_size
    log = Log(path, framing)
    assert log.repaired == Damage(size - len(_framed(framing, 3)) + 7, size, torn_tail=True)
    assert log.size == log.synced == path.stat().st_size
    log.append(_framed(framing, 4))
    log.close()
    assert _records(path, framing) == [*whole, _framed(framing, 4)]
    assert Log(path, framing).repaired is None


def test_a_single_torn_line_with_no_newline_at_all_is_cut_to_nothing(tmp_path: Path, monkeypatch) -> None:
    """Lines reads back from the end a chunk at a time, never past the file's start."""
    monkeypatch.setattr(appendlog, "_TAIL_CHUNK", 7)
    path = tmp_path / "calls.jsonl"
    path.write_bytes(b'{"message_id": "m-1", "st')
    log = Log(path, appendlog.LINES)
    assert log.repaired == Damage(0, 25, torn_tail=True) and path.read_bytes() == b""
    log.close()
    path.write_bytes(b'{"n": 1}\n' + b"y" * 30)
    assert Log(path, appendlog.LINES).repaired == Damage(9, 39, torn_tail=True)
    assert path.read_bytes() == b'{"n": 1}\n'


@pytest.mark.parametrize("framing", FRAMINGS)
@pytest.mark.parametrize("error", [errno.ENOSPC, errno.EIO], ids=["ENOSPC", "EIO"])
def test_a_failed_append_is_a_value_and_leaves_nothing(tmp_path: Path, monkeypatch, framing, error) -> None:
    """A write that stops part-way returns Failed naming the disk's error (the second write
    says why the first was short); the file is cut back and the record is not kept."""
    path = tmp_path / "calls.jsonl"
    log = Log(path, framing)
    log.append(_framed(framing, 0))
    before = path.read_bytes()
    disk = Disk(monkeypatch, path, error)
    disk.room = 10
    failed = log.append(_framed(framing, 1))
    assert isinstance(failed, Failed) and failed.error.errno == error and failed.doing == "writing"
    assert failed.reason.endswith(f"({errno.errorcode[error]}) writing calls.jsonl")
    assert path.read_bytes() == before and log.size == len(before) and not log.torn
    disk.room = None
    assert log.append(_framed(framing, 2)) is None
    assert log.sync() is None
    log.close()
    assert _records(path, framing) == [_framed(framing, 0), _framed(framing, 2)]


def test_two_short_writes_count_as_a_full_disk(tmp_path: Path, monkeypatch) -> None:
    """A disk that keeps taking a few bytes is not written to a few bytes at a time: the
    record fails as ENOSPC and is cut back."""
    path = tmp_path / "log"
    log = Log(path, appendlog.LINES)
    real = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: real(fd, bytes(data[:4])))
    failed = log.append(b'{"n": 1}\n')
    assert failed is not None and failed.error.errno == errno.ENOSPC and path.read_bytes() == b""


def test_a_failed_write_keeps_the_queue_for_the_next_try(tmp_path: Path, monkeypatch) -> None:
    """What write() could not write stays queued, in order, with what is added after it
    (the trace's lines wait for the disk); rollback() drops it instead (the journal's)."""
    path = tmp_path / "log"
    log = Log(path, appendlog.LINES)
    disk = Disk(monkeypatch, path)
    disk.room = 0
    log.add(b'{"n": 1}\n')
    assert log.write() is not None
    log.add(b'{"n": 2}\n')
    assert log.queued_bytes == 18 and path.read_bytes() == b""
    disk.room = None
    assert log.write() is None and path.read_bytes() == b'{"n": 1}\n{"n": 2}\n' and log.queued_bytes == 0
    assert log.sync() is None
    disk.room = 0
    log.add(b'{"n": 3}\n')
    assert log.sync() is not None
    log.rollback()
    disk.room = None
    assert log.sync() is None and path.read_bytes() == b'{"n": 1}\n{"n": 2}\n'


@pytest.mark.parametrize("framing", FRAMINGS)
def test_a_failed_fsync_is_a_value_and_rollback_takes_the_batch_back(tmp_path: Path, monkeypatch, framing) -> None:
    """EIO on the group commit: sync() returns it; rollback() cuts the file back to the last
    sync, so nothing unacknowledged stays for a later reader to believe."""
    path = tmp_path / "log"
    log = Log(path, framing)
    log.append(_framed(framing, 0))
    assert log.sync() is None
    disk = Disk(monkeypatch, path, errno.EIO)
    disk.fsync = True
    log.append(_framed(framing, 1))
    failed = log.sync()
    assert failed is not None and failed.doing == "syncing" and failed.error.errno == errno.EIO
    log.rollback()
    disk.fsync = False
    assert log.sync() is None  # nothing left to sync
    log.close()
    assert _records(path, framing) == [_framed(framing, 0)]


def test_lines_seal_a_fragment_that_could_not_be_cut_out(tmp_path: Path, monkeypatch) -> None:
    """A short write whose cut-back fails leaves a fragment: `torn` says so. The next write
    tries the cut again; failing, it ends the fragment with a newline, so the next line is
    whole (the fragment is one unreadable line) and `torn` clears."""
    path = tmp_path / "trace.jsonl"
    log = Log(path, appendlog.LINES)
    disk = Disk(monkeypatch, path)
    disk.room, disk.truncate = 5, True
    assert log.append(b'{"n": 1}\n') is not None
    assert "could not be cut back" in log.torn and path.read_bytes() == b'{"n":'
    disk.room = None
    assert log.append(b'{"n": 2}\n') is None and not log.torn
    assert path.read_bytes() == b'{"n":\n{"n": 2}\n'


def test_checked_records_wait_for_the_cut_instead(tmp_path: Path, monkeypatch) -> None:
    """The journal's framing has no seal: while the cut fails, writes fail (a clean file stays
    clean); once it works, the fragment is gone and the next record follows whole ones."""
    path = tmp_path / "journal.bin"
    log = Log(path, RECORDS)
    log.append(_framed(RECORDS, 0))
    disk = Disk(monkeypatch, path)
    disk.room, disk.truncate = 5, True
    assert log.append(_framed(RECORDS, 1)) is not None and log.torn
    disk.room = None
    assert log.append(_framed(RECORDS, 2)) is not None
    assert log.probe() is not None  # the cut still owed is part of "writing works again"
    disk.truncate = False
    assert log.probe() is None and not log.torn
    assert log.append(_framed(RECORDS, 3)) is None
    log.close()
    assert list(appendlog.scan(path, RECORDS))[-1] == Record(
        len(RECORDS.header) + len(_framed(RECORDS, 0)), len(_framed(RECORDS, 3)), _payload(3), "m-3")
    assert _records(path, RECORDS) == [_framed(RECORDS, 0), _framed(RECORDS, 3)]


def test_a_symbolic_link_in_the_logs_place_is_refused(tmp_path: Path) -> None:
    """O_NOFOLLOW: a planted link is a typed refusal, and its target is not touched."""
    target = tmp_path / "elsewhere"
    target.write_bytes(b"someone else's")
    (tmp_path / "calls.jsonl").symlink_to(target)
    with pytest.raises(LinkedDataFile, match="symbolic link"):
        Log(tmp_path / "calls.jsonl", appendlog.LINES)
    assert target.read_bytes() == b"someone else's"


def test_a_header_is_written_once_and_a_foreign_file_refused(tmp_path: Path) -> None:
    """A new file (or one whose header a crash cut) gets the header; a file that starts with
    something else is not one to append to."""
    path = tmp_path / "journal.bin"
    path.write_bytes(RECORDS.header[:5])
    log = Log(path, RECORDS)
    assert log.repaired == Damage(0, 5, torn_tail=True) and path.read_bytes() == RECORDS.header
    log.close()
    (tmp_path / "other.bin").write_bytes(b"x" * 100)
    with pytest.raises(ForeignFile):
        Log(tmp_path / "other.bin", RECORDS)
    assert list(appendlog.scan(tmp_path / "other.bin", RECORDS)) == [Damage(0, 100, torn_tail=True)]


def test_checked_scan_resynchronises_after_damage_and_skips_a_record_inside_a_record(tmp_path: Path) -> None:
    """A flipped byte costs its record only; a whole record quoted inside another's payload
    is not taken for one (the forward walk jumps over the outer record)."""
    path = tmp_path / "log"
    inner = _framed(RECORDS, 9)
    quoting = RECORDS.frame(msgspec.msgpack.encode(QueuedEmail("m-1", inner, "text")))
    log = Log(path, RECORDS)
    log.append(_framed(RECORDS, 0) + quoting + _framed(RECORDS, 2))
    log.close()
    assert [item.key if isinstance(item, appendlog.Record) else item for item in appendlog.scan(path, RECORDS)] \
        == ["m-0", "m-1", "m-2"]
    data = bytearray(path.read_bytes())
    flip = len(RECORDS.header) + len(_framed(RECORDS, 0)) + 30
    data[flip] ^= 1
    path.write_bytes(bytes(data))
    found = list(appendlog.scan(path, RECORDS))
    assert [getattr(item, "key", None) for item in found] == ["m-0", None, "m-9", None, "m-2"]
    assert isinstance(found[1], Damage) and not found[1].torn_tail


def test_reopen_follows_a_file_renamed_over_the_path(tmp_path: Path) -> None:
    """After a compaction's rename, writes go to the new file and size is the new file's."""
    path = tmp_path / "journal.bin"
    log = Log(path, RECORDS)
    log.append(_framed(RECORDS, 0) + _framed(RECORDS, 1))
    (tmp_path / "copy").write_bytes(RECORDS.header + _framed(RECORDS, 1))
    os.replace(tmp_path / "copy", path)
    log.reopen()
    assert log.size == log.synced == path.stat().st_size
    log.append(_framed(RECORDS, 2))
    log.close()
    assert _records(path, RECORDS) == [_framed(RECORDS, 1), _framed(RECORDS, 2)]


def _objects(path: Path) -> list[dict]:
    """The JSON objects among a trace file's lines (a torn line is none)."""
    return [r for r in map(json_object, tracefiles.lines(path)) if r is not None]


def test_the_old_writers_files_open_and_read_as_before(tmp_path: Path) -> None:
    """Files the code before appendlog wrote (tests/unit/old_logs): each opens; whole ones are
    left byte for byte; a torn tail is cut and reported; every old record reads back."""
    for name in os.listdir(OLD):
        if not name.endswith(".md"):
            shutil.copy(OLD / name, tmp_path / name)
    kept = {name: (tmp_path / name).read_bytes()
            for name in ("trace.jsonl", "calls.jsonl", "pending.jsonl", "journal.bin")}
    # the trace: an old torn line that the old writer ended with a newline is one skipped line
    writer = trace.TraceWriter(tmp_path / "trace.jsonl")
    assert writer.repaired is None
    writer.close()
    assert (tmp_path / "trace.jsonl").read_bytes() == kept["trace.jsonl"]
    # The lines as JSON (this is the file layer; these hand-made lines hold too few fields to
    # be whole records: airlock.records reads them as Damaged, tests/unit/test_records.py).
    assert [(r["message_id"], r["event"]) for r in _objects(tmp_path / "trace.jsonl")] == [
        ("m-1", "received"), ("m-1", "outcome"), ("m-3", "received")]
    writer = trace.TraceWriter(tmp_path / "trace-torn.jsonl")
    assert writer.repaired is not None and writer.repaired.torn_tail
    writer.write(raw_line("broker", "outcome", "m-3", {"outcome": "completed"}))
    writer.close()
    repaired = (tmp_path / "trace-torn.jsonl").read_bytes()
    assert repaired.startswith(kept["trace.jsonl"]) and repaired[len(kept["trace.jsonl"]):].count(b"\n") == 1
    assert [r["message_id"] for r in _objects(tmp_path / "trace-torn.jsonl")] == ["m-1", "m-1", "m-3", "m-3"]
    # the call log: its keys are honoured; a torn record is cut and said in a notice
    for name in ("calls.jsonl", "calls-torn.jsonl"):
        log = CallLog(tmp_path / name)
        assert log.made("m-1", 1) and log.made("m-1", 2) and not log.made("m-2", 1)
        assert [n["event"] for n in log.notices] == (["ledger_repaired"] if "torn" in name else [])
        log.close()
    assert (tmp_path / "calls.jsonl").read_bytes() == kept["calls.jsonl"]
    assert (tmp_path / "calls-torn.jsonl").read_bytes() == kept["calls.jsonl"]
    # pending escalations: r-1 resolved, r-2 open
    store = PendingStore(tmp_path / "pending.jsonl")
    assert list(store.open) == ["r-2"] and store.open["r-2"].value == 4411
    store.close()
    assert (tmp_path / "pending.jsonl").read_bytes() == kept["pending.jsonl"]
    # the journal: its records; a record cut short is a torn tail, cut at open and reported
    for name in ("journal.bin", "journal-torn.bin"):
        journal = Journal(tmp_path / name)
        assert [d.torn_tail for d in journal.damage] == ([True] if "torn" in name else [])
        journal.close()
        assert [e.message_id for e in entries(tmp_path / name)] == ["j-1", "j-2", "j-3"]
        assert (tmp_path / name).read_bytes() == kept["journal.bin"]


def test_the_journal_reads_its_file_once_at_open(tmp_path: Path, monkeypatch) -> None:
    """The journal scans its records at open anyway: the log is told where they end and does
    not walk the file a second time (a journal of GBs would cost a start twice as long)."""
    path = tmp_path / "journal.bin"
    journal = Journal(path)
    for n in range(3):
        journal.append(QueuedEmail(f"m-{n}", b"x" * 100, "text"))
    journal.close()
    with open(path, "ab") as handle:
        handle.write(_framed(RECORDS, 3)[:-9])

    def walked(*args: object) -> int:
        raise AssertionError("the log walked the journal again")
    monkeypatch.setattr(type(RECORDS), "whole_end", walked)
    journal = Journal(path)
    assert [d.torn_tail for d in journal.damage] == [True] and journal.size == path.stat().st_size
    journal.close()
    assert [e.message_id for e in entries(path)] == ["m-0", "m-1", "m-2"] and Journal(path).damage == []
