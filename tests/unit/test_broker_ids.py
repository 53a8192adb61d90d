"""broker.ids and the intake's numbering: a boot number no start on the data dir took before."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from airlock.wire import Accepted, Submit
from broker import ids
from broker.journal import QueuedEmail
from broker.outbox import Send
from broker.router import Router


def test_the_same_millisecond_twice_gives_two_boot_numbers(tmp_path: Path) -> None:
    """Two starts at one millisecond: the second takes the first plus one, saved 0600."""
    assert ids.take_boot(tmp_path, now_ms=5_000) == 5_000
    assert ids.take_boot(tmp_path, now_ms=5_000) == 5_001
    assert ids.take_boot(tmp_path, now_ms=4_000) == 5_002  # a clock stepped back
    assert ids.take_boot(tmp_path, now_ms=9_000) == 9_000  # a clock ahead of the mark is used as it is
    assert ids.last_boot(tmp_path) == 9_000
    assert stat.S_IMODE(ids.boot_path(tmp_path).stat().st_mode) == 0o600


@pytest.mark.parametrize("saved", [None, b"not a number\n"], ids=["missing", "unreadable"])
def test_without_a_saved_number_the_ids_the_data_dir_holds_are_the_floor(tmp_path: Path, saved: bytes | None) -> None:
    """A data dir an older broker made: above every boot number among its ids, whatever the clock."""
    if saved is not None:
        ids.boot_path(tmp_path).write_bytes(saved)
    held = [f"{0x18bcfe56800:x}-7", f"{0x18bcfe56900:x}-1", "not-ours", "abc-x"]
    assert ids.take_boot(tmp_path, held, now_ms=0x18bcfe56800) == 0x18bcfe56901


def test_an_id_held_above_the_saved_number_still_counts(tmp_path: Path) -> None:
    """The journal's ids count even beside a saved number (a file restored from an older copy)."""
    ids.boot_path(tmp_path).write_bytes(b"10\n")
    assert ids.take_boot(tmp_path, ["14-3"], now_ms=0) == 0x15


def test_a_boot_number_that_cannot_be_saved_is_refused(tmp_path: Path) -> None:
    """No id without its boot number on disk: a folder that cannot be written is BootUnsaved."""
    blocked = tmp_path / "file"
    blocked.write_bytes(b"")
    with pytest.raises(ids.BootUnsaved):
        ids.take_boot(blocked / "data", now_ms=1)


def test_the_intake_skips_an_id_the_broker_still_holds(settings) -> None:
    """An id already in flight (recovered) is never given to a new email."""
    router = Router(settings, boot=0xABC)
    router.recover(QueuedEmail("abc-1", b"Order 4411", "text"), 0.0)
    effects = router.handle("intake", b"c", Submit(ref=1, raw=b"Order 4412", format="text"), 0.0)
    (accepted,) = [e.message for e in effects if isinstance(e, Send) and e.role == "intake"]
    assert isinstance(accepted, Accepted) and accepted.message_id == "abc-2"


def test_an_older_brokers_ids_are_read_from_the_ends_of_the_trace_and_the_call_log(tmp_path: Path) -> None:
    """The checkpoint's ids, and those at the end of the live trace, its newest segment and calls.jsonl."""
    trace_path, calls = tmp_path / "trace.jsonl", tmp_path / "calls.jsonl"
    (tmp_path / "trace.checkpoint").write_bytes(b'{"through":1,"states":{"a0-1":"open"}}')
    (tmp_path / "trace.000001.jsonl").write_bytes(b'{"event":"received","message_id":"b0-2","stage":"broker"}\n')
    trace_path.write_bytes(b"x" * (ids.TAIL_BYTES + 10) + b'{"message_id":"c0-3","event":"outcome"}\n')
    calls.write_bytes(b'{"event":"call","message_id":"d0-4","step":1}\n{"message_id":"not-an-id"}\n')
    assert sorted(ids.held_in_history(trace_path, calls)) == ["a0-1", "b0-2", "c0-3", "d0-4"]
    assert ids.take_boot(tmp_path, ids.held_in_history(trace_path, calls), now_ms=1) == 0xD1


def test_only_the_end_of_a_big_trace_is_read(tmp_path: Path) -> None:
    """An id deeper than TAIL_BYTES into a file is not read: the read is bounded, whatever the trace's size."""
    trace_path = tmp_path / "trace.jsonl"
    trace_path.write_bytes(b'{"message_id":"ff-1"}\n' + b"x" * (ids.TAIL_BYTES + 10) + b"\n")
    assert list(ids.held_in_history(trace_path, tmp_path / "calls.jsonl")) == []
