"""The actor's ledger under faults: a full disk, a failed
fsync, a deleted or replaced calls.jsonl, a second actor, and a million keys."""

from __future__ import annotations

import errno
import os
import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import msgspec
import pytest

from actor import app
from actor.app import Actor
from actor.calllog import CallLog
from actor.catalog import Tool
from actor.ledger import AppendLog, LedgerBusy, LedgerUntrusted, LedgerWriteFailed
from actor.mocks import Answer, MockTools, Orders
from actor.pending import Escalation, PendingStore
from actor.preconditions import Approval
from airlock import task as task_module, trace
from airlock.errors import EX_TEMPFAIL
from airlock.wire import Decision, Done, Event, Passed
from tests.conftest import CATALOG, TASKS
from tests.tmpfs import own_tmpfs


def _calls(path: Path) -> list[tuple[str, int]]:
    return [(call.message_id, call.step) for call in trace.read_calls(path)]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 512 KiB tmpfs of this test's own, unmounted after it (a real full disk: ENOSPC
    comes from the kernel, through whatever buffering the code under test does)."""
    with own_tmpfs(tmp_path, "size=512k,mode=0700", must_be_idle=True) as disk:
        yield disk


def _fill(folder: Path) -> Path:
    """Fill the disk `folder` is on to its last byte; returns the filler, to delete."""
    filler = folder / "filler"
    descriptor = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for size in (65536, 4096, 1):
            try:
                while True:
                    os.write(descriptor, b"\0" * size)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
    finally:
        os.close(descriptor)
    return filler


@pytest.fixture
def actor_on(settings, tmp_path: Path) -> Iterator[Callable[[Path], Actor]]:
    """Build an actor whose data dir is `folder` (each closed after the test)."""
    made: list[Actor] = []

    def build(folder: Path) -> Actor:
        for earlier in made:  # a new actor on the folder is a restart
            earlier.close()
        catalog = tmp_path / "catalog.toml"
        catalog.write_text(CATALOG)
        made.append(app.build(msgspec.structs.replace(settings, data_dir=folder, catalog=catalog),
                              task_module.load(TASKS / "order_status.toml")))
        return made[-1]
    yield build
    for actor in made:
        actor.close()


def test_a_call_that_hit_a_full_disk_never_lands_later(small_disk: Path, actor_on) -> None:
    """With the call log's disk full the email ends failed naming the disk,
    and once space returns the failed call's record does not land in calls.jsonl after all
    (the old buffered file wrote it with the next call)."""
    actor = actor_on(small_disk)
    filler = _fill(small_disk)
    failed = actor.run("m1", "4411")
    assert failed.outcome == "failed" and "No space left on device" in failed.reason
    actor.sync()  # the loop's group commit: nothing of m1 is there to make durable
    filler.unlink()
    assert actor.run("m2", "4411").outcome == "completed"
    actor.sync()
    actor.close()
    assert _calls(small_disk / "calls.jsonl") == [("m2", 1), ("m2", 2)]
    # and m1, having made no call, runs in full when it comes again
    again = actor_on(small_disk)
    assert [call.status for call in again.run("m1", "4411").calls] == ["ok", "ok"]


def test_a_failed_write_is_a_typed_failure_and_leaves_nothing(tmp_path: Path, monkeypatch) -> None:
    """ENOSPC on the record's write: LedgerWriteFailed, the file as it was, the key free."""
    log = CallLog(tmp_path / "calls.jsonl")
    assert log.call("m0", 1, "shop", "lookup_order", {"order_id": "1"})
    real_write = os.write

    def full(descriptor: int, data: bytes) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(os, "write", full)
    with pytest.raises(LedgerWriteFailed, match=r"No space left on device \(ENOSPC\) writing calls.jsonl"):
        log.call("m1", 1, "shop", "lookup_order", {"order_id": "1"})
    monkeypatch.setattr(os, "write", real_write)
    assert log.call("m1", 1, "shop", "lookup_order", {"order_id": "1"})  # the key was given back
    log.close()
    assert _calls(tmp_path / "calls.jsonl") == [("m0", 1), ("m1", 1)]


def test_a_short_write_is_cut_back(tmp_path: Path, monkeypatch) -> None:
    """A write that stops mid-record (the disk filled during it) leaves no half line."""
    log = CallLog(tmp_path / "calls.jsonl")
    real_write = os.write
    monkeypatch.setattr(os, "write", lambda descriptor, data: real_write(descriptor, data[:10]))
    with pytest.raises(LedgerWriteFailed):
        log.call("m1", 1, "shop", "lookup_order", {"order_id": "1"})
    monkeypatch.setattr(os, "write", real_write)
    log.close()
    assert (tmp_path / "calls.jsonl").read_bytes() == b""


def test_a_failed_fsync_takes_the_batch_back(make_actor, settings, monkeypatch) -> None:
    """EIO on the group commit's fsync: the batch's call records are cut out of calls.jsonl and
    the sync raises, so no Done acknowledges a call that is not on disk. The intents were
    durable before each tool ran, so the successor never runs those tools again: `unknown`."""
    actor = make_actor()
    assert actor.run("m1", "4411").outcome == "completed"
    actor.sync()
    assert actor.run("m2", "4411").outcome == "completed"  # each intent fsynced before its call

    def broken(descriptor: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))
    monkeypatch.setattr(os, "fsync", broken)
    with pytest.raises(LedgerWriteFailed, match=r"Input/output error \(EIO\) syncing calls.jsonl"):
        actor.sync()
    monkeypatch.undo()
    # step 2's intent made step 1's record durable; step 2's record was cut back out
    assert _calls(settings.calls_path) == [("m1", 1), ("m1", 2), ("m2", 1)]
    # the successor the broker redelivers m2 to: step 2 may have acted, so it stops there
    done = make_actor().run("m2", "4411")
    assert [call.status for call in done.calls] == ["replayed", "unknown"] and done.outcome == "failed"
    assert _calls(settings.calls_path) == [("m1", 1), ("m1", 2), ("m2", 1)]


def test_an_intent_that_cannot_be_made_durable_runs_nothing(make_actor, settings, monkeypatch) -> None:
    """EIO on the fsync of a step's intent: the tool is not called, the email fails saying
    nothing ran, and the successor runs the step (its key was given back)."""
    actor = make_actor()
    assert actor.run("m1", "4411").outcome == "completed"
    actor.sync()
    ran = _counting(actor)

    def broken(descriptor: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))
    monkeypatch.setattr(os, "fsync", broken)
    done = actor.run("m2", "4411")
    monkeypatch.undo()
    assert done.outcome == "failed" and "nothing ran" in done.reason and ran == []
    assert [call.status for call in make_actor().run("m2", "4411").calls] == ["ok", "ok"]


def test_an_escalation_that_cannot_be_stored_fails_the_email(make_actor, monkeypatch) -> None:
    """ENOSPC on pending.jsonl: the email ends failed with the disk's reason, nothing waits."""
    actor = make_actor("refund_with_approval.toml")

    def full(descriptor: int, data: bytes) -> int:
        if b'"role"' in data:  # the escalation's line only: step 1's call goes through
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(descriptor, data)
    real_write = os.write
    monkeypatch.setattr(os, "write", full)
    done = actor.run("r1", "damaged", "lena@example.de", "dkim")
    assert done.outcome == "failed" and "No space left on device" in done.reason
    assert "r1" not in actor.executor.pending.open


def test_pending_store_writes_whole_lines_or_none(tmp_path: Path, monkeypatch) -> None:
    """A pending line that fails to write is not open after a restart either."""
    path = tmp_path / "pending.jsonl"
    store = PendingStore(path)
    monkeypatch.setattr(os, "write", lambda descriptor, data: 3)  # three bytes, then the disk is full
    with pytest.raises(LedgerWriteFailed):
        store.add(Escalation("r1", "damaged", "a@b", 2, "lead"))
    monkeypatch.undo()
    store.close()
    assert not store.open and PendingStore(path).open == {} and path.read_bytes() == b""


def test_a_torn_pending_line_that_decodes_is_not_open(tmp_path: Path) -> None:
    """A crash that cut a pending line just before its newline: the line is cut off at open
    and its escalation is not open, in memory as on disk."""
    path = tmp_path / "pending.jsonl"
    store = PendingStore(path)
    store.add(Escalation("r1", "damaged", "a@b", 2, "lead"))
    store.close()
    path.write_bytes(path.read_bytes()[:-1])  # whole JSON, no newline: never synced, never answered
    again = PendingStore(path)
    assert again.open == {} and path.read_bytes() == b""
    again.close()


def test_restart_after_calls_jsonl_was_deleted_replays(make_actor, settings, logged_calls) -> None:
    """`calls.jsonl` deleted while an email waited for approval; after the
    restart the approved email's step 1 is `replayed` (the key index kept its key), not run
    again as `ok`, and the actor says in the trace what it found."""
    actor = make_actor("refund_with_approval.toml")
    assert actor.run("r1", "damaged", "lena@example.de", "dkim").outcome == "escalated"
    actor.sync()
    actor.close()
    settings.calls_path.unlink()
    restarted = make_actor("refund_with_approval.toml")
    answers = restarted.handle(_decision("r1"))
    done = answers[-1]
    assert isinstance(done, Done) and done.outcome == "completed"
    assert [call.status for call in done.calls] == ["replayed", "ok"]  # the old actor: ["ok", "ok"]
    notices = [answer for answer in answers if isinstance(answer, Event)]
    assert [notice.event for notice in notices] == ["ledger_replaced"]
    indexed = notices[0].detail["indexed_bytes"]
    assert isinstance(indexed, int) and indexed > 0 and notices[0].detail["found_bytes"] == 0
    assert [c.step for c in logged_calls()] == [2]  # step 1's record went with the deleted file


def test_calls_jsonl_deleted_while_running_stops_the_actor_acting(make_actor, settings, logged_calls, capsys) -> None:
    """Deleted under a running actor: the next call is not made (nor any after it), the
    email gets no answer (the broker redelivers it to the restarted actor), a warning goes to
    stderr; the restarted actor replays step 1 and runs step 2 into the new calls.jsonl."""
    actor = make_actor("refund_with_approval.toml")
    assert actor.run("r1", "damaged", "lena@example.de", "dkim").outcome == "escalated"
    actor.sync()
    settings.calls_path.unlink()
    assert actor.handle(_decision("r1")) == []  # the old actor: step 1 replayed, step 2 written to the deleted file
    done = actor.decide("r1", Approval(True, "support-lead", "dana", ""))  # what the executor made of it
    assert done.outcome == "failed" and "ledger_untrusted" in done.reason and "deleted" in done.reason
    assert actor.untrusted and "WARNING" in capsys.readouterr().err
    assert actor.handle(_passed("m9")) == []  # latched until the restart
    actor.sync()
    actor.close()
    assert not settings.calls_path.exists()
    restarted = make_actor("refund_with_approval.toml")
    *notices, done = restarted.handle(_decision("r1"))
    assert [notice.event for notice in notices] == ["ledger_replaced"]
    assert done.outcome == "completed" and [call.status for call in done.calls] == ["replayed", "ok"]
    assert [(c.message_id, c.step) for c in logged_calls()] == [("r1", 2)]


def test_calls_jsonl_replaced_while_running_is_not_trusted(make_actor, settings) -> None:
    """Replaced (another file renamed over it): the next call is refused the same way."""
    actor = make_actor()
    assert actor.run("m1", "4411").outcome == "completed"
    actor.sync()
    other = settings.calls_path.with_name("other.jsonl")
    other.write_bytes(b"")
    os.replace(other, settings.calls_path)
    done = actor.run("m2", "4411")
    assert done.outcome == "failed" and "ledger_untrusted" in done.reason and "replaced" in done.reason


def test_calls_jsonl_moved_away_is_found_at_the_group_commit(make_actor, settings) -> None:
    """Moved away and a new file made at its name: the calls already written went to the
    moved file (still there); the group commit finds it out and the next call is refused."""
    actor = make_actor()
    assert actor.run("m1", "4411").outcome == "completed"
    settings.calls_path.rename(settings.calls_path.with_suffix(".1"))
    settings.calls_path.write_bytes(b"")
    actor.sync()
    assert "replaced" in actor.untrusted
    assert actor.handle(_passed("m2")) == [] and actor.run("m3", "4411").outcome == "failed"
    assert _calls(settings.calls_path.with_suffix(".1")) == [("m1", 1), ("m1", 2)]


def test_resume_with_both_ledger_files_gone_runs_nothing(make_actor, settings, logged_calls) -> None:
    """calls.jsonl and its key index both deleted: the approved email's step 1 is known to
    have run (it was escalated at step 2), so the resume refuses rather than run it again."""
    actor = make_actor("refund_with_approval.toml")
    assert actor.run("r1", "damaged", "lena@example.de", "dkim").outcome == "escalated"
    actor.sync()
    actor.close()
    for leftover in settings.data_dir.glob("calls.*"):
        if leftover.name != "calls.lock":
            leftover.unlink()
    done = make_actor("refund_with_approval.toml").decide("r1", Approval(True, "support-lead", "dana", ""))
    assert done.outcome == "failed" and done.reason.startswith("ledger_untrusted: step 1")
    assert logged_calls() == []


def test_a_second_call_log_on_one_ledger_refuses(tmp_path: Path) -> None:
    """At the ledger: two writers on one calls.jsonl each made the same
    call (each with its own keys); the second now cannot open the ledger at all."""
    first = CallLog(tmp_path / "calls.jsonl")
    assert first.call("m1", 1, "shop", "lookup_order", {"order_id": "1"})
    with pytest.raises(LedgerBusy, match=r"another actor \(pid \d+\) holds .*calls\.lock"):
        second = CallLog(tmp_path / "calls.jsonl")
        second.call("m1", 1, "shop", "lookup_order", {"order_id": "1"})  # the old code made it twice
    first.close()
    assert _calls(tmp_path / "calls.jsonl") == [("m1", 1)]
    CallLog(tmp_path / "calls.jsonl").close()  # the lock goes with its holder


def test_the_lock_follows_a_deleted_lock_file(tmp_path: Path) -> None:
    """Deleting calls.lock under a running actor makes its ledger untrusted (another actor
    could lock a new one), so the first stops acting instead of both acting."""
    log = CallLog(tmp_path / "calls.jsonl")
    (tmp_path / "calls.lock").unlink()
    log.sync()  # checked at each group commit
    with pytest.raises(LedgerUntrusted, match="calls.lock"):
        log.call("m1", 1, "shop", "lookup_order", {"order_id": "1"})
    log.close()


def test_memory_holds_a_bounded_number_of_keys(tmp_path: Path, monkeypatch) -> None:
    """Keys live on disk; memory keeps at most `cache_keys` of them, and a
    key long out of the cache still replays."""
    monkeypatch.setattr(os, "fsync", lambda descriptor: None)  # memory is measured here, not durability
    log = CallLog(tmp_path / "calls.jsonl", cache_keys=100)
    for number in range(5000):
        assert log.call(f"m{number}", 1, "shop", "lookup_order", {"order_id": "1"})
        if number % 250 == 0:
            log.sync()
    assert log.keys.cached() == 100
    assert not log.call("m0", 1, "shop", "lookup_order", {"order_id": "1"})
    log.close()
    assert len(_calls(tmp_path / "calls.jsonl")) == 5000


@pytest.mark.parametrize("damage", [
    pytest.param(lambda index: index.unlink(), id="index-deleted"),
    pytest.param(lambda index: index.write_bytes(b""), id="index-emptied"),
    pytest.param(lambda index: index.write_bytes(b"not a database at all " * 300), id="index-garbage"),
])
def test_a_lost_key_index_is_rebuilt_from_the_log(tmp_path: Path, damage) -> None:
    """The log is the ground truth: without its index every key in it still replays."""
    log = CallLog(tmp_path / "calls.jsonl")
    assert log.call("m1", 1, "shop", "lookup_order", {"order_id": "1"})
    log.close()
    damage(tmp_path / "calls.keys.sqlite")
    again = CallLog(tmp_path / "calls.jsonl")
    assert not again.call("m1", 1, "shop", "lookup_order", {"order_id": "1"})
    assert "ledger_replaced" not in [notice["event"] for notice in again.notices]  # a new index is not a replaced log
    again.close()


def test_an_index_behind_the_log_catches_up(tmp_path: Path) -> None:
    """Records the index never committed (a crash between the log's fsync and the commit)
    are indexed from where it stopped."""
    log = CallLog(tmp_path / "calls.jsonl")
    assert log.call("m1", 1, "shop", "lookup_order", {"order_id": "1"})
    log.close()
    with open(tmp_path / "calls.jsonl", "ab") as handle:  # as if the commit had been lost
        handle.write(b'{"message_id": "m2", "step": 1, "server": "shop", "tool": "lookup_order", "args": {}}\n')
    again = CallLog(tmp_path / "calls.jsonl")
    assert not again.call("m2", 1, "shop", "lookup_order", {"order_id": "1"}) and not again.notices
    again.close()


def _passed(message_id: str) -> Passed:
    return Passed(message_id=message_id, value="damaged", sender="lena@example.de", sender_proof="dkim")


def _decision(message_id: str) -> Decision:
    return Decision(message_id=message_id, approve=True, role="support-lead", by="dana")


def test_a_key_index_on_a_full_disk_still_honours_its_keys(small_disk: Path, monkeypatch, capsys) -> None:
    """The log's records fit in its last page but the index cannot commit (SQLITE_FULL): the
    calls stand (they are durable in the log), their keys are held in memory, a replay is
    still refused, and once space returns the index takes them."""
    path = small_disk / "calls.jsonl"
    log = CallLog(path)
    assert log.call("m0", 1, "shop", "lookup_order", {"order_id": "1"})
    log.sync()
    filler = _fill(small_disk)
    made = [log.call(f"m{n}", 1, "shop", "lookup_order", {"order_id": "1"}) for n in range(1, 4)]
    log.sync()
    assert made == [True] * 3 and "could not commit" in capsys.readouterr().err
    assert not any(log.call(f"m{n}", 1, "shop", "lookup_order", {"order_id": "1"}) for n in range(4))
    filler.unlink()
    log.close()
    again = CallLog(path)
    assert not again.notices and not any(again.call(f"m{n}", 1, "shop", "lookup_order", {}) for n in range(4))
    again.close()
    assert _calls(path) == [(f"m{n}", 1) for n in range(4)]


def test_the_naive_agent_refuses_a_ledger_an_actor_holds(tmp_path: Path, capsys) -> None:
    """`airlock naive` on a data dir whose actor runs: one line and exit 75 (busy for now, as
    the actor itself exits: airlock.errors), no traceback."""
    from redteam.naive.run import run
    from tests.conftest import ROOT

    held = CallLog(tmp_path / "calls.jsonl")
    try:
        assert run([str(ROOT / "samples" / "refund_damaged.eml")], "http://127.0.0.1:9", str(tmp_path)) == EX_TEMPFAIL
    finally:
        held.close()
    assert re.search(r"another actor \(pid \d+\) holds", capsys.readouterr().err)


def test_an_actor_starting_on_a_full_disk_is_a_typed_failure(small_disk: Path) -> None:
    """No room for the key index at start: LedgerWriteFailed (the actor exits 75 and the
    supervisor retries it), not a traceback; once space returns it starts."""
    filler = _fill(small_disk)
    with pytest.raises(LedgerWriteFailed):
        CallLog(small_disk / "calls.jsonl")
    filler.unlink()
    CallLog(small_disk / "calls.jsonl").close()


def test_a_damaged_key_index_is_moved_aside_and_rebuilt(tmp_path: Path, capsys) -> None:
    """A key index that is not a database (a disk error, a stray copy) does not stop the
    actor for good: it is kept beside, named, and the keys come back from the log."""
    log = CallLog(tmp_path / "calls.jsonl")
    assert log.call("m1", 1, "shop", "lookup_order", {"order_id": "1"})
    log.close()
    (tmp_path / "calls.keys.sqlite").write_bytes(b"\x00garbage" * 1000)
    again = CallLog(tmp_path / "calls.jsonl")
    assert not again.call("m1", 1, "shop", "lookup_order", {"order_id": "1"})
    again.close()
    assert len(list(tmp_path.glob("calls.keys.sqlite.damaged-*"))) == 1
    assert "is damaged" in capsys.readouterr().err


def _crash(log: CallLog) -> None:
    """Stop a call log as a killed actor would: no commit, no sync, its lock dropped."""
    log.keys._db.close()  # an open transaction is lost, as at a kill
    log._log.close()
    log._reader.close()
    log.lock.close()


def _fill_index_then_call(log: CallLog, keys_before: int) -> tuple[list[tuple[str, int]], Exception]:
    """Shrink the key index's disk to what it holds now, then log calls (long ids fill pages
    fast) until the index refuses one: the calls logged in that batch, and the error."""
    log.keys._db.execute(f"PRAGMA max_page_count={log.keys._db.execute('PRAGMA page_count').fetchone()[0]}")
    logged: list[tuple[str, int]] = []
    for number in range(keys_before, keys_before + 2000):
        message_id = f"m{number:04d}" + "x" * 400
        try:
            log.call(message_id, 1, "orders", "lookup", {"order_id": "A1"})
        except Exception as exc:  # noqa: BLE001  (the type is what the tests check)
            return logged, exc
        logged.append((message_id, 1))
    raise AssertionError("the key index never filled up")


def test_a_full_key_index_is_a_typed_ledger_failure(tmp_path: Path) -> None:
    """SQLite's own "database or disk is full" names the disk, as LedgerWriteFailed; it is
    not left to the executor's catch-all (tool_error: OperationalError)."""
    log = CallLog(tmp_path / "calls.jsonl")
    _, error = _fill_index_then_call(log, 0)
    assert isinstance(error, LedgerWriteFailed), repr(error)
    assert "full" in str(error)
    _crash(log)


def test_a_full_key_index_mid_batch_never_lets_a_call_run_twice(tmp_path: Path) -> None:
    """SQLite rolls its transaction back by itself on a full disk. Every key claimed earlier in
    that batch must still be honoured: now, after the batch's sync, and after a restart."""
    path = tmp_path / "calls.jsonl"
    log = CallLog(path)
    log.call("first", 1, "orders", "lookup", {"order_id": "A1"})
    log.sync()
    logged, _ = _fill_index_then_call(log, 0)
    assert logged, "the index refused the batch's first key: nothing to check"
    for message_id, step in logged:  # still in this batch, the index rolled back
        assert not log.call(message_id, step, "orders", "lookup", {"order_id": "A1"})
    log.sync()  # the log is durable; the index still full (its commit fails, or keys stay pinned)
    for message_id, step in logged:
        assert not log.call(message_id, step, "orders", "lookup", {"order_id": "A1"})
    _crash(log)
    restarted = CallLog(path)  # space is back (a fresh connection has no page limit)
    for message_id, step in [("first", 1), *logged]:
        assert not restarted.call(message_id, step, "orders", "lookup", {"order_id": "A1"}), message_id
    assert _calls(path).count(logged[0]) == 1
    restarted.close()


def test_a_claim_after_the_index_rolled_back_is_not_written_before_its_record_is_durable(tmp_path: Path) -> None:
    """After SQLite's own rollback, the next claim must open a transaction again, not write
    its key at once (autocommit): a crash before the log's fsync would then answer `replayed`
    for a call that never ran."""
    path = tmp_path / "calls.jsonl"
    log = CallLog(path)
    _logged, _ = _fill_index_then_call(log, 0)
    log.keys._db.execute("PRAGMA max_page_count=1073741823")  # space is back

    class Killed(BaseException):
        """The actor killed between the claim of the key and the fsync of its intent."""

    def crash_before_the_fsync() -> None:
        log._log.rollback()  # what was not fsynced is lost with the process
        raise Killed
    log._log.sync = crash_before_the_fsync  # type: ignore[method-assign]  # the kill, at that point
    with pytest.raises(Killed):
        log.claim("after", 1, "orders", "lookup", {"order_id": "A1"})
    _crash(log)
    restarted = CallLog(path)
    assert restarted.call("after", 1, "orders", "lookup", {"order_id": "A1"}), "a call that never ran was refused"
    restarted.close()


def test_a_record_that_cannot_be_cut_back_stops_the_actor_acting(tmp_path: Path, monkeypatch) -> None:
    """A short write whose cut-back fails (EIO on ftruncate) leaves a fragment in calls.jsonl.
    The file is O_APPEND: a next record would share the fragment's line and be skipped by every
    reader (a call that ran, missing from the log). So the ledger is no longer trusted: no call
    runs until a restart, which ends the torn line first."""
    path = tmp_path / "calls.jsonl"
    log = CallLog(path)
    real_write = os.write
    monkeypatch.setattr(os, "write", lambda descriptor, data: real_write(descriptor, data[:10]))

    def broken(descriptor: int, length: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))
    monkeypatch.setattr(os, "ftruncate", broken)
    with pytest.raises(LedgerWriteFailed):
        log.call("m1", 1, "shop", "lookup_order", {"order_id": "1"})
    monkeypatch.undo()
    with pytest.raises(LedgerUntrusted, match="could not be cut back"):
        log.call("m2", 1, "shop", "lookup_order", {"order_id": "1"})
    log.close()
    restarted = CallLog(path)  # open_lines ends the fragment's line
    assert not restarted.untrusted
    assert restarted.call("m2", 1, "shop", "lookup_order", {"order_id": "1"})
    restarted.close()
    assert _calls(path) == [("m2", 1)]


def _flip_pages(index: Path, first_page: int = 2) -> None:
    """Flip bytes inside every page of the index from `first_page` on, leaving its header
    and first pages whole: SQLite opens it and reads its first page without a complaint."""
    data = bytearray(index.read_bytes())
    for page_start in range(first_page * 4096, len(data), 4096):
        for offset in range(page_start + 100, min(page_start + 400, len(data))):
            data[offset] ^= 0xFF
    index.write_bytes(bytes(data))


def _many_calls(path: Path, count: int) -> None:
    """`count` calls logged, fast: durability is not what the tests using this look at."""
    with mock.patch.object(os, "fsync", return_value=None):
        _logged_calls(path, count)


def _logged_calls(path: Path, count: int) -> None:
    log = CallLog(path)
    for number in range(count):
        assert log.call(f"m{number}", 1, "shop", "lookup_order", {"order_id": "1"})
        if number % 100 == 0:
            log.sync()
    log.close()


def test_a_key_index_damaged_inside_its_pages_is_rebuilt_at_start(tmp_path: Path, capsys) -> None:
    """Bytes flipped inside the index's pages (its header whole) are found at start by a check
    that reads every page: the index is moved aside and rebuilt, and no logged call runs again."""
    path = tmp_path / "calls.jsonl"
    _many_calls(path, 3000)
    _flip_pages(tmp_path / "calls.keys.sqlite")
    again = CallLog(path)
    assert [notice["event"] for notice in again.notices] == ["key_index_damaged"]  # for the trace
    assert [n for n in range(3000) if again.call(f"m{n}", 1, "shop", "lookup_order", {"order_id": "1"})] == []
    assert again.call("new", 1, "shop", "lookup_order", {"order_id": "1"})
    again.close()
    assert len(list(tmp_path.glob("calls.keys.sqlite.damaged-*"))) == 1
    assert "is damaged" in capsys.readouterr().err
    restarted = CallLog(path)  # and the rebuilt index is whole: the next start uses it
    assert not restarted.call("new", 1, "shop", "lookup_order", {"order_id": "1"})
    restarted.close()
    assert len(list(tmp_path.glob("calls.keys.sqlite.damaged-*"))) == 1


def test_a_key_index_damaged_while_running_stops_acting_and_is_rebuilt_on_restart(tmp_path: Path) -> None:
    """Damage SQLite finds at use (`database disk image is malformed`) is not a failed email:
    the ledger is no longer trusted (nothing runs, the actor exits 75), the index is moved aside,
    and the restart rebuilds it from the log and comes up."""
    path = tmp_path / "calls.jsonl"
    _many_calls(path, 3000)
    log = CallLog(path, cache_keys=1)
    log.keys._db.execute("PRAGMA cache_size=0")  # read pages from the file, as a long run would
    _flip_pages(tmp_path / "calls.keys.sqlite")
    with pytest.raises(LedgerUntrusted, match="key index"):
        for number in range(3000):
            log.call(f"m{number}", 1, "shop", "lookup_order", {"order_id": "1"})
    assert log.untrusted
    log.close()
    assert len(list(tmp_path.glob("calls.keys.sqlite.damaged-*"))) == 1
    restarted = CallLog(path)
    assert [n for n in range(3000) if restarted.call(f"m{n}", 1, "shop", "lookup_order", {"order_id": "1"})] == []
    restarted.close()
    assert len(_calls(path)) == 3000


class _Watched(MockTools):
    """The mock tools, calling `before` with each tool's name first."""

    def __init__(self, orders: Orders, before: Callable[[str], None]) -> None:
        super().__init__(orders)
        self.before = before

    def run(self, tool: Tool, args: dict[str, Any], cancelled: threading.Event) -> Answer:
        self.before(tool.tool)
        return super().run(tool, args, cancelled)


def _counting(actor: Actor) -> list[str]:
    """Every call the actor's tools get from now on, by tool name."""
    ran: list[str] = []
    actor.executor.tools = _Watched(actor.executor.tools.orders, ran.append)
    return ran


@pytest.mark.parametrize("replayed_by", ["the-same-actor", "a-restarted-actor", "an-actor-on-a-rebuilt-index"])
def test_a_replayed_step_is_answered_from_the_ledger_never_by_its_tool(make_actor, settings, replayed_by) -> None:
    """A step the ledger records is never called again: its replay carries the result the log
    kept, and the facts it provides still feed later checks (the email completes again)."""
    actor = make_actor()
    first = actor.run("m1", "4411")
    assert first.outcome == "completed"
    actor.sync()
    if replayed_by != "the-same-actor":
        actor.close()
        if replayed_by == "an-actor-on-a-rebuilt-index":
            (settings.data_dir / "calls.keys.sqlite").unlink()
        actor = make_actor()
    ran = _counting(actor)
    again = actor.run("m1", "4411")
    assert ran == [] and again.outcome == "completed"
    assert [(call.status, call.result) for call in again.calls] == [("replayed", call.result) for call in first.calls]


def test_an_intent_is_durable_before_its_tool_runs(make_actor, settings) -> None:
    """When the tool is called, calls.jsonl already holds the step's intent, fsynced; the call
    line follows once the tool answered."""
    actor = make_actor()
    seen: list[bytes] = []
    actor.executor.tools = _Watched(actor.executor.tools.orders,
                                    lambda tool: seen.append(settings.calls_path.read_bytes()))
    assert actor.run("m1", "4411").outcome == "completed"
    events = [[msgspec.json.decode(line)["event"] for line in text.splitlines()] for text in seen]
    assert events == [["intent"], ["intent", "call", "intent"]]
    assert actor.ledger._log.synced >= len(seen[1])  # the second intent, and the call before it, were synced


def test_a_call_record_that_cannot_be_written_leaves_its_step_unknown(make_actor, settings, monkeypatch) -> None:
    """The tool answered but its call line could not be written (ENOSPC): the email fails
    saying the tool answered, and a second delivery does not call it again: `unknown`."""
    actor = make_actor()
    ran = _counting(actor)
    real_append = AppendLog.append

    def no_room_for_calls(log: AppendLog, line: bytes) -> None:
        if b'"event":"call"' in line:
            raise LedgerWriteFailed("No space left on device (ENOSPC) writing calls.jsonl")
        real_append(log, line)
    monkeypatch.setattr(AppendLog, "append", no_room_for_calls)
    done = actor.run("m1", "4411")
    monkeypatch.undo()
    assert done.outcome == "failed" and "the tool answered" in done.reason and ran == ["lookup_order"]
    again = make_actor()
    ran_again = _counting(again)
    done = again.run("m1", "4411")
    assert [call.status for call in done.calls] == ["unknown"] and ran_again == []
