"""The intake journal: compacted once emails are final, crash-safe at every step, and replayed
after a restart within the queue's byte bound."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from airlock.wire import Hello, Read, Reading
from broker import recovery
from broker.journal import COMPACTING_SUFFIX, Journal, QueuedEmail, entries, positions
from broker.router import Router
from tests.conftest import ROOT
from tests.lines import raw_line

RAW = b"x" * 10_000


def _fill(path: Path, count: int) -> list[str]:
    journal = Journal(path)
    ids = [f"m-{n}" for n in range(count)]
    for message_id in ids:
        journal.append(QueuedEmail(message_id, RAW + message_id.encode(), "text", origin=message_id))
    journal.close()
    return ids


def test_compaction_keeps_exactly_the_live_emails(tmp_path: Path) -> None:
    """compact(live) leaves one record per live email, byte for byte, frees the rest, and the
    journal takes appends after it."""
    path = tmp_path / "journal.bin"
    ids = _fill(path, 20)
    live = set(ids[15:])
    journal = Journal(path)
    before = path.stat().st_size
    freed = journal.compact(live)
    journal.append(QueuedEmail("m-new", b"new", "text"))
    journal.close()
    got = list(entries(path))
    assert [e.message_id for e in got] == [*ids[15:], "m-new"]
    assert all(e.raw == RAW + e.message_id.encode() for e in got[:-1])
    assert freed > 0 and path.stat().st_size < before / 3
    assert not (tmp_path / ("journal.bin" + COMPACTING_SUFFIX)).exists()


def test_journal_is_created_owner_only(tmp_path: Path) -> None:
    """It holds raw emails: 0600 from creation (the compacted copy too)."""
    path = tmp_path / "journal.bin"
    ids = _fill(path, 3)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    journal = Journal(path)
    journal.compact({ids[0]})
    journal.close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_compaction_waits_until_the_journal_is_big_and_mostly_final(tmp_path: Path) -> None:
    """Below compact_bytes, or with more than half still live, the journal is left alone."""
    path = tmp_path / "journal.bin"
    ids = _fill(path, 20)  # about 200 KB
    for compact_bytes, live, worth in ((10**9, set(), False), (50_000, set(ids[:15]), False),
                                       (50_000, set(ids[:5]), True)):
        journal = Journal(path, compact_bytes=compact_bytes)
        assert journal.worth_compacting(live, 0.0) is worth, (compact_bytes, len(live))
        journal.close()


_CRASH = """
import os, signal, sys
from pathlib import Path
import broker.journal as j

path, point, live = Path(sys.argv[1]), sys.argv[2], set(sys.argv[3].split(","))
die = lambda: os.kill(os.getpid(), signal.SIGKILL)
real_records, real_replace, real_fsync = j._records_at, os.replace, os.fsync
if point == "copying":  # killed after three live records reached the copy
    def records(p):
        copied = 0
        for position, data in real_records(p):
            yield position, data
            copied += position.message_id in live
            if copied == 3:
                die()
    j._records_at = records
elif point == "before_rename":
    os.replace = lambda *a: die()
elif point == "after_rename":  # before the folder is fsynced
    def replace(*a):
        real_replace(*a)
        die()
    os.replace = replace
journal = j.Journal(path)
journal.compact(live)
die() if point == "after_folder_sync" else None
"""


@pytest.mark.parametrize("point", ["copying", "before_rename", "after_rename", "after_folder_sync"])
def test_broker_killed_mid_compaction_loses_and_repeats_nothing(tmp_path: Path, settings, point: str) -> None:
    """SIGKILL at each step of a compaction: the next broker's recovery dispatches every
    unfinished email exactly once, with its bytes, and no final one; no copy is left over."""
    path = settings.data_dir / "journal.bin"
    ids = _fill(path, 12)
    final, live = ids[:8], ids[8:]
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    settings.trace_path.write_bytes(b"".join(
        [raw_line("broker", "received", i, {}) for i in ids]
        + [raw_line("broker", "outcome", i, {"outcome": "rejected", "final": True}) for i in final]))
    done = subprocess.run([sys.executable, "-c", _CRASH, str(path), point, ",".join(live)], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=60)
    assert done.returncode == -signal.SIGKILL, done.stderr
    journal = Journal(path)  # what the restarted broker does first
    assert not (path.parent / ("journal.bin" + COMPACTING_SUFFIX)).exists()
    kept = [p.message_id for p in positions(path)]
    assert len(kept) == len(set(kept)) and set(live) <= set(kept)
    router = Router(settings, boot=0xABC)
    effects, backlog = recovery.recover(router, settings, journal, 0.0)
    assert not backlog
    effects += router.handle("reader", b"r", Hello(credit=100), 0.0)
    emails = [e.message for e in effects if hasattr(e, "message") and isinstance(e.message, Read)]
    assert sorted(e.message_id for e in emails) == sorted(live)
    assert all(e.raw == RAW + e.message_id.encode() for e in emails)
    journal.close()


def test_a_restart_replays_the_journal_within_the_byte_bound(tmp_path: Path, settings) -> None:
    """A journal holding more unfinished bytes than AIRLOCK_QUEUE_MAX_BYTES: recovery reads in
    only what fits, the rest as readers make room, and every email is dispatched once."""
    settings = msgspec.structs.replace(settings, queue_max_bytes=35_000)
    path = settings.data_dir / "journal.bin"
    ids = _fill(path, 10)  # 10 x 10 KB, none final
    journal = Journal(path)
    router = Router(settings, boot=0xABC)
    effects, backlog = recovery.recover(router, settings, journal, 0.0)
    assert router.queued_bytes <= 35_000 and len(backlog) == 7 and set(router.flights) == set(ids)
    effects += router.handle("reader", b"r", Hello(credit=1), 0.0)
    sent: list[str] = []
    for turn in range(30):
        for effect in effects:
            if hasattr(effect, "message") and isinstance(effect.message, Read):
                sent.append(effect.message.message_id)
                effects = router.handle("reader", b"r", Reading(message_id=effect.message.message_id, answer="1",
                                                                source="model"), float(turn))
                break
        else:
            effects = []
        recovery.refill(router, journal, backlog, float(turn))
        effects += router.tick(float(turn))
        assert router.queued_bytes <= 35_000
        if len(sent) == len(ids):
            break
    assert sorted(sent) == sorted(ids) and not backlog
    journal.close()
