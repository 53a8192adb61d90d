"""The call log: the actor's idempotency ledger, what ran, keyed by (message id, step).

Each call the actor makes is one JSON line in calls.jsonl, written as the outcome of the call:

    {"event": "call", "at", "message_id", "step", "server", "tool", "args"}  (+ "to": a mail
                                                tool's recipient, + "student": a lab's plug point)

each an airlock.records.Call, the type of the trace's call line too.

calls.jsonl is the ground truth of what airlock *did*; attack scoring reads it, never the
model's words. With its key index (actor/keyindex.py) it is also the idempotency ledger: a
call whose key was already logged is not logged again, the way a payment API honours an
idempotency key, so a redelivered step is a replay, never a second side effect. A record is
either whole or absent (AppendLog, actor/ledger.py): a failed write leaves nothing behind to
land later. What a tool does and returns is not this module's: see actor/mocks.py.
"""

from __future__ import annotations

import sqlite3
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from actor.keyindex import CACHE_KEYS, Indexed, KeyIndex, is_damage
from actor.ledger import AppendLog, LedgerUntrusted, LedgerWriteFailed, ledger_lock
from airlock import records
from airlock.records import Call, utc_now


def call_key(message_id: str, step: int) -> str:
    """The idempotency key of one step for one email: the executor reports it, the ledger
    honours it. One definition, so a replay can never miss its earlier call."""
    return f"{message_id}:{step}"


class CallLog:
    """The call log and its guards: one actor at a time (ledger_lock), each record whole or
    absent (AppendLog), keys on disk with a bounded cache (KeyIndex), and a check before each
    call that calls.jsonl is still the file being written (LedgerUntrusted otherwise)."""

    def __init__(self, path: Path, cache_keys: int = CACHE_KEYS) -> None:
        self.lock = ledger_lock(path.with_name(f"{path.stem}.lock"))  # first: LedgerBusy before any file is touched
        opened: list[Any] = [self.lock]
        try:
            self._log = AppendLog(path)
            opened.append(self._log)
            self.keys = self._indexed(path.with_name(f"{path.stem}.keys.sqlite"), cache_keys)
            opened.append(self.keys)
        except BaseException as exc:
            for resource in reversed(opened):
                _close_quietly(resource)
            if isinstance(exc, sqlite3.Error):
                raise LedgerWriteFailed(f"the key index beside {path} cannot be used: {exc}") from exc
            if isinstance(exc, OSError) and not isinstance(exc, PermissionError):  # PermissionError: 78
                raise LedgerWriteFailed(f"the ledger beside {path} cannot be opened: {exc}") from exc
            raise
        self._lock = threading.Lock()
        self.untrusted = ""  # why this actor stopped acting on its ledger ("" while it trusts it)
        self._pinned: set[str] = set()  # keys durable in the log that the index could not commit yet
        # Keys whose records are in the log but not yet durable, which the index lost when it
        # rolled back (a full disk): honoured until the sync, then pinned, or dropped with the batch.
        self._unsynced_pins: set[str] = set()

    def call(self, message_id: str, step: int, server: str, tool: str, args: dict[str, Any],
             student: str = "", to: str = "") -> bool:
        """Log one call; False (and nothing written) if its key was already logged. `student`
        names the lab plug point whose code took part in deciding it, `to` a mail tool's
        recipient (each kept only when set). Raises LedgerUntrusted (the ledger is not the file
        this actor opened: nothing runs) or LedgerWriteFailed (nothing of the record stays)."""
        key = call_key(message_id, step)
        with self._lock:
            self._check_trusted()
            if key in self._pinned or key in self._unsynced_pins or not self._claim(key):
                return False
            record = Call(at=utc_now(), message_id=message_id, step=step, server=server, tool=tool, args=args,
                          to=to, student=student)
            try:
                self._log.append(records.encode(record))
            except LedgerWriteFailed:
                try:
                    self.keys.release(key)
                except sqlite3.Error as exc:
                    self._index_lost(exc)
                    self._unsynced_pins.discard(key)  # its record was cut back out: it did not run
                self._latch_untrusted()  # the record could not be cut back out: no more records here
                raise
            return True

    def _indexed(self, index: Path, cache_keys: int) -> KeyIndex:
        """The key index, brought up to the log. Damage SQLite finds only while indexing (past
        the start check) sets it aside once and rebuilds it from the log: a start never fails
        for ever on an index the log can replace."""
        keys = KeyIndex(index, cache_keys)
        try:
            # What a restart found, for stderr and (through the actor's first answer) the trace.
            self.notices: list[dict[str, Any]] = self._reconcile(keys)
        except sqlite3.DatabaseError as exc:
            if not is_damage(exc):
                _close_quietly(keys)
                raise
            keys.set_aside(str(exc))
            keys.close()
            keys = KeyIndex(index, cache_keys)
            self.notices = self._reconcile(keys)
        return keys

    def _damaged(self, exc: sqlite3.Error) -> bool:
        """If SQLite says the index is damaged: set it aside (the restart rebuilds it from the log)
        and stop acting on this ledger, whose keys can no longer be told (LedgerUntrusted). The
        emails it holds get no answer: their successor runs them on the rebuilt index."""
        if not is_damage(exc):
            return False
        self.keys.set_aside(str(exc))
        if not self.untrusted:
            self.untrusted = (f"the key index {self.keys.path.name} is damaged ({exc}); it was moved aside, "
                              "to be rebuilt from the call log when the actor restarts")
            print(f"actor: WARNING: {self.untrusted}. No tool runs until then", file=sys.stderr)
        return True

    def _claim(self, key: str) -> bool:
        """KeyIndex.claim, or LedgerWriteFailed naming the disk if SQLite refuses the key."""
        try:
            return self.keys.claim(key)
        except sqlite3.Error as exc:
            if self._damaged(exc):
                raise LedgerUntrusted(f"ledger_untrusted: {self.untrusted}; nothing ran") from exc
            self._index_lost(exc)
            raise LedgerWriteFailed(f"the key index {self.keys.path.name} cannot take a key: {exc}; "
                                    "nothing ran") from exc

    def _index_lost(self, exc: sqlite3.Error) -> None:
        """The index's transaction is gone (SQLite rolls it back itself on a full disk): hold every
        key it had taken since its last commit here, so none of those calls runs again."""
        self._unsynced_pins.update(self.keys.unsynced())
        self._pinned.update(self.keys.rollback())
        print(f"actor: the key index failed ({exc}); {len(self._pinned) + len(self._unsynced_pins)} key(s) "
              "held in memory until it can commit", file=sys.stderr)

    def made(self, message_id: str, step: int) -> bool:
        """Whether the ledger holds this step's call (an escalated email's earlier steps must)."""
        key = call_key(message_id, step)
        with self._lock:
            try:
                return key in self._pinned or key in self._unsynced_pins or key in self.keys
            except sqlite3.Error as exc:
                if not self._damaged(exc):
                    raise
                return True  # unknown: said to be there, and the untrusted ledger runs nothing

    def sync(self) -> None:
        """fsync what was logged since the last sync, then commit its keys to the index. The
        worker loop calls this before it sends any Done, so a step is on disk before it is
        acknowledged (group commit). Raises LedgerWriteFailed if the fsync failed: the batch's
        records are cut out of the log and its keys given back, and none of its answers may be
        sent."""
        with self._lock:
            try:
                self._log.sync()
            except LedgerWriteFailed:
                self.keys.forget_batch()
                self._unsynced_pins.clear()  # their records were cut back out: those calls did not run
                self._latch_untrusted()
                raise
            self._pinned |= self._unsynced_pins  # durable now: committed with this batch, or held
            self._unsynced_pins.clear()
            self._index_synced()  # even if the log turns out replaced: those calls did run
            try:
                self._check_trusted(full=True)
            except LedgerUntrusted:
                pass  # latched: the next call is refused; this batch's answers may go

    def rollback(self) -> None:
        """Forget every call since the last sync (their answers will never be sent)."""
        with self._lock:
            self._log.rollback()
            self.keys.forget_batch()
            self._unsynced_pins.clear()

    def _index_synced(self) -> None:
        covers = Indexed(*self._log.identity, self._log.synced)
        try:
            if self._pinned:
                self.keys.add_all(self._pinned)
            self.keys.synced(covers)
        except sqlite3.Error as exc:
            self._damaged(exc)
            # The records are durable in the log (the ground truth; a restart re-indexes it),
            # so their answers may go; until the index takes them, they are held here (the
            # batch's too, if the index failed before synced() moved it to the durable keys).
            self._pinned.update(self.keys.unsynced())
            self._pinned.update(self.keys.rollback())
            print(f"actor: the key index could not commit ({exc}); {len(self._pinned)} key(s) held in "
                  "memory until it can", file=sys.stderr)
        else:
            self._pinned.clear()

    def _check_trusted(self, full: bool = False) -> None:
        """Latch `untrusted` if calls.jsonl is no longer the file being written: per call the
        cheap check (deleted, or renamed over), per group commit also a move and the lock."""
        self._latch_untrusted(full)
        if self.untrusted:
            raise LedgerUntrusted(f"ledger_untrusted: {self.untrusted}; nothing ran")

    def _latch_untrusted(self, full: bool = False) -> None:
        """Set `untrusted` (once, and say so) if the log is no longer one to act on."""
        if not self.untrusted:
            self.untrusted = self._log.unlinked() or (full and (self._log.replaced() or self.lock.lost())) or ""
            if self.untrusted:
                print(f"actor: WARNING: {self.untrusted}. No tool runs until the actor restarts and "
                      "reconciles the ledger with its key index", file=sys.stderr)

    def _reconcile(self, keys: KeyIndex) -> list[dict[str, Any]]:
        """Bring the key index up to the log as found at start; report a log that is not the
        one the index last saw (the keys it holds stay: no call they name runs again)."""
        indexed, log = keys.indexed(), self._log
        notices: list[dict[str, Any]] = []
        if keys.rebuilt:  # its keys come back from the log, below
            notices.append({"event": "key_index_damaged", "detail": dict(keys.rebuilt)})
        if log.repaired is not None:  # a crash mid-record: never acknowledged (a record is synced before its Done)
            cut = log.repaired
            notices.append({"event": "ledger_repaired", "detail": {
                "path": str(log.path), "cut_from": cut.start, "bytes_cut": cut.end - cut.start}})
        if indexed is not None and (indexed.device, indexed.inode) == log.identity and indexed.size <= log.size:
            start = indexed.size  # the same log, grown: index what was added
        else:
            start = 0
            if indexed is not None and indexed.size > 0:
                detail = {"path": str(log.path), "indexed_bytes": indexed.size, "found_bytes": log.size,
                          "same_file": (indexed.device, indexed.inode) == log.identity}
                notices.append({"event": "ledger_replaced", "detail": detail})
                print(f"actor: WARNING: {log.path} is not the call log the key index last saw (it was "
                      f"deleted, cut or replaced: {indexed.size} bytes indexed, {log.size} found). Every "
                      "key already indexed is kept, so none of those calls runs again; the calls they "
                      "record are no longer in the log", file=sys.stderr)
        keys.add_all(_keys_in(log.path, start))
        keys.commit(Indexed(*log.identity, log.size))
        return notices

    def close(self) -> None:
        if self._log.closed:
            return
        try:
            self.sync()
        finally:
            self._log.close()
            self.keys.close()
            self.lock.close()


def _close_quietly(resource: Any) -> None:
    """Close what a failed start opened; its own failure must not hide the first one."""
    try:
        resource.close()
    except Exception:  # noqa: BLE001  (the start's error is the one to report)
        pass


def _keys_in(path: Path, start: int) -> Iterator[str]:
    """The call keys of the log's records from byte `start` (a torn line is skipped)."""
    with open(path, "rb") as handle:
        handle.seek(start)
        for raw in handle:
            key = records.call_key_of(raw)  # lenient: a damaged record still says its call ran
            if key is not None:
                yield call_key(*key)

