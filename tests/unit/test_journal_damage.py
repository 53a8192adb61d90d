"""A damaged journal: each record checked, damage skipped and reported, every undamaged
email recovered exactly once, and no false reason for the ones damage cost."""

from __future__ import annotations

import struct
from pathlib import Path

import msgspec
import pytest

from airlock.wire import Hello, Read, Reading
from broker import recovery
from broker.journal import MAGIC, Journal, QueuedEmail, damage, entries, positions
from broker.router import Router, Send
from tests.lines import raw_line

IDS = [f"b-{n}" for n in range(1, 11)]
NEVER_ACCEPTED = "the broker stopped before accepting this email"


def _raw(message_id: str) -> bytes:
    return b"Subject: order\n\n" + message_id.encode() * 300


def _accepted(settings) -> Path:
    """Ten journalled emails, each `received` in the trace and none final: what a broker
    leaves when it stops with all ten waiting."""
    path = settings.data_dir / "journal.bin"
    journal = Journal(path)
    for message_id in IDS:
        journal.append(QueuedEmail(message_id, _raw(message_id), "text"))
    journal.close()
    settings.trace_path.write_bytes(b"".join(raw_line("broker", "received", i, {}) for i in IDS))
    return path


def _cut(path: Path, at: dict[str, tuple[int, int]]) -> set[str]:
    """Cut the file inside b-6's record: b-6 to b-10 are gone."""
    offset, size = at["b-6"]
    with open(path, "r+b") as handle:
        handle.truncate(offset + size // 2)
    return set(IDS[5:])


def _zeros(path: Path, at: dict[str, tuple[int, int]]) -> set[str]:
    """64 zero bytes over the start of b-4's record (its length, in either format)."""
    with open(path, "r+b") as handle:
        handle.seek(at["b-4"][0])
        handle.write(bytes(64))
    return {"b-4"}


def _flip(path: Path, at: dict[str, tuple[int, int]]) -> set[str]:
    """One bit flipped in the middle of b-7's email."""
    offset, size = at["b-7"]
    with open(path, "r+b") as handle:
        handle.seek(offset + size // 2)
        byte = handle.read(1)[0]
        handle.seek(offset + size // 2)
        handle.write(bytes([byte ^ 0x01]))
    return {"b-7"}


@pytest.mark.parametrize("harm", [pytest.param(_cut, id="cut-inside-a-record"),
                                  pytest.param(_zeros, id="64-zero-bytes-in-the-middle"),
                                  pytest.param(_flip, id="one-flipped-bit")])
def test_recovery_skips_damage_recovers_the_rest_once_and_names_the_loss(settings, harm, capsys) -> None:
    """Each undamaged email is dispatched exactly once with its own bytes; each one the damage
    cost ends `failed` with a reason naming the damage (never "stopped before accepting"),
    and the skipped byte ranges are in a journal_damaged line."""
    path = _accepted(settings)
    at = {p.message_id: (p.offset, p.size) for p in positions(path)}
    lost = harm(path, at)
    journal = Journal(path)
    router = Router(settings, boot=0xABC)
    effects, backlog = recovery.recover(router, settings, journal, 0.0)
    effects += router.handle("reader", b"r", Hello(credit=100), 0.0)
    emails = [e.message for e in effects if isinstance(e, Send) and isinstance(e.message, Read)]
    lines = [msgspec.json.decode(e) for e in effects if isinstance(e, bytes)]
    failed = {line["message_id"]: line["reason"] for line in lines
              if line["event"] == "outcome" and line["outcome"] == "failed"}
    assert not backlog
    assert sorted(e.message_id for e in emails) == sorted(set(IDS) - lost)
    assert all(e.raw == _raw(e.message_id) for e in emails)
    assert set(failed) == lost
    assert all("damage" in reason and NEVER_ACCEPTED not in reason for reason in failed.values()), failed
    [report] = [line for line in lines if line["event"] == "journal_damaged"]
    assert report["ranges_skipped"] >= 1 and report["bytes_skipped"] > 0 and report["emails_lost"] == len(lost)
    assert all(start < end for start, end in report["ranges"])
    journal.close()


def test_a_cut_tail_is_truncated_and_new_records_follow_whole_ones(settings) -> None:
    """A record cut short at the end is reported as a torn tail and cut off at open, so what
    is appended next reads back (it does not hide behind the torn bytes)."""
    path = _accepted(settings)
    at = {p.message_id: (p.offset, p.size) for p in positions(path)}
    _cut(path, at)
    journal = Journal(path)
    assert [d.torn_tail for d in journal.damage] == [True]
    journal.append(QueuedEmail("c-1", b"new", "text"))
    assert journal.sync() is None
    journal.close()
    assert [e.message_id for e in entries(path)] == [*IDS[:5], "c-1"]
    assert damage(path) == []


def test_the_damaged_ranges_are_exact(tmp_path: Path) -> None:
    """The reported range is exactly the damaged record's bytes: resynchronisation starts
    at the next record, not later."""
    path = tmp_path / "journal.bin"
    journal = Journal(path)
    for message_id in IDS:
        journal.append(QueuedEmail(message_id, _raw(message_id), "text"))
    journal.close()
    at = {p.message_id: (p.offset, p.size) for p in positions(path)}
    _zeros(path, at)
    offset, size = at["b-4"]
    assert [(d.start, d.end, d.torn_tail) for d in damage(path)] == [(offset, offset + size, False)]


def test_a_version_1_journal_is_read_and_rewritten_in_the_checked_format(tmp_path: Path) -> None:
    """A journal written before checksums (length + msgpack) still recovers every whole
    record; it is rewritten with MAGIC first, and its torn tail is reported."""
    path = tmp_path / "journal.bin"
    encode = msgspec.msgpack.Encoder().encode
    records = [encode(QueuedEmail(message_id, _raw(message_id), "text")) for message_id in IDS[:3]]
    path.write_bytes(b"".join(struct.pack(">I", len(r)) + r for r in records) + struct.pack(">I", 500) + b"torn")
    journal = Journal(path)
    assert [d.torn_tail for d in journal.damage] == [True]
    journal.close()
    assert path.read_bytes().startswith(MAGIC)
    assert [(e.message_id, e.raw) for e in entries(path)] == [(i, _raw(i)) for i in IDS[:3]]


def test_an_intact_journal_keeps_the_genuine_reason(settings) -> None:
    """With no damage, an email received in the trace but never journalled keeps the true
    reason: the broker stopped before accepting it."""
    path = _accepted(settings)
    with open(settings.trace_path, "ab") as handle:
        handle.write(raw_line("broker", "received", "b-11", {}))
    journal = Journal(path)
    effects, _ = recovery.recover(Router(settings, boot=0xABC), settings, journal, 0.0)
    lines = [msgspec.json.decode(e) for e in effects if isinstance(e, bytes)]
    assert [(line["message_id"], line["reason"]) for line in lines if line["event"] == "outcome"] == [
        ("b-11", NEVER_ACCEPTED)]
    assert not any(line["event"] == "journal_damaged" for line in lines)
    journal.close()


@pytest.mark.parametrize("queue_max_bytes", [10_000_000, 5_000], ids=["read-at-recovery", "read-by-refill"])
def test_a_record_damaged_after_the_scan_ends_failed_saying_so(settings, queue_max_bytes: int) -> None:
    """A record checked at open and damaged before it is read back (recovery, or refill
    from the backlog) is checked again: its email ends `failed` naming the damage or "could
    not be read back", never "stopped before accepting", and every other email is still
    dispatched once."""
    settings = msgspec.structs.replace(settings, queue_max_bytes=queue_max_bytes)
    path = _accepted(settings)
    journal = Journal(path)
    at = {p.message_id: (p.offset, p.size) for p in positions(path)}
    router = Router(settings, boot=0xABC)
    if queue_max_bytes > 10_000:
        _flip(path, at)
    effects, backlog = recovery.recover(router, settings, journal, 0.0)
    if queue_max_bytes <= 10_000:
        assert "b-7" in [p.message_id for p in backlog]
        _flip(path, at)
    sent: list[str] = []
    for turn in range(40):
        effects += router.handle("reader", b"r", Hello(credit=1), float(turn)) if turn == 0 else []
        emails = [e.message for e in effects if isinstance(e, Send) and isinstance(e.message, Read)]
        lines = [msgspec.json.decode(e) for e in effects if isinstance(e, bytes)]
        failed = [line for line in lines if line["event"] == "outcome"]
        if failed:
            assert [f["message_id"] for f in failed] == ["b-7"], failed
            named = "read back" if queue_max_bytes <= 10_000 else "damage"  # seen by refill, or by the scan
            assert named in failed[0]["reason"] and NEVER_ACCEPTED not in failed[0]["reason"]
        effects = []
        for email in emails:
            sent.append(email.message_id)
            effects += router.handle("reader", b"r", Reading(message_id=email.message_id, answer="1",
                                                             source="model"), float(turn))
        effects += recovery.refill(router, journal, backlog, float(turn)) + router.tick(float(turn))
    assert sorted(sent) == sorted(set(IDS) - {"b-7"}) and "b-7" not in router.flights
    journal.close()


def test_the_readers_read_a_version_1_file_as_it_is(tmp_path: Path) -> None:
    """positions() and entries() on a version 1 file not yet opened by a Journal read its
    whole records, not "damage": only the torn tail is reported."""
    path = tmp_path / "journal.bin"
    encode = msgspec.msgpack.Encoder().encode
    records = [encode(QueuedEmail(message_id, _raw(message_id), "text")) for message_id in IDS[:3]]
    whole = b"".join(struct.pack(">I", len(r)) + r for r in records)
    path.write_bytes(whole + b"\x00\x00")
    assert [e.message_id for e in entries(path)] == IDS[:3]
    assert [(d.start, d.end, d.torn_tail) for d in damage(path)] == [(len(whole), len(whole) + 2, True)]


@pytest.mark.parametrize("flip", [pytest.param(0, id="its-first-byte"), pytest.param(-30, id="inside-its-outcome")])
def test_a_damaged_trace_line_the_recovery_reads_past_is_reported(settings, capsys, flip: int) -> None:
    """A broker line that says where an email stands (`received`, `outcome`) and no longer
    reads (a flipped byte) is named at start, as the journal's damage is: a trace_damaged
    line and stderr, with the file and how many; the email it named is treated as open."""
    path = _accepted(settings)
    with open(settings.trace_path, "ab") as handle:
        handle.writelines(raw_line("broker", "outcome", message_id, {"outcome": "completed", "reason": ""})
                          for message_id in IDS)
    lines = settings.trace_path.read_bytes().splitlines(keepends=True)
    damaged = bytearray(lines[12])  # b-3's outcome
    damaged[flip] ^= 0x01 if flip == 0 else 0x20
    lines[12] = bytes(damaged)
    settings.trace_path.write_bytes(b"".join(lines))
    journal = Journal(path)
    effects, _ = recovery.recover(Router(settings, boot=0xABC), settings, journal, 0.0)
    journal.close()
    said = [msgspec.json.decode(e) for e in effects if isinstance(e, bytes)]
    (report,) = [line for line in said if line["event"] == "trace_damaged"]
    assert report["lines"] == 1 and report["files"] == {str(settings.trace_path): 1}
    assert "trace damaged" in capsys.readouterr().err
