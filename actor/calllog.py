"""The call log: the actor's idempotency ledger, what ran, keyed by (message id, step).

Each call the actor makes is two JSON lines in calls.jsonl. First the claim, appended and
fsynced (with the key index committed) before the tool is called (claim()):

    {"event": "intent", "at", "message_id", "step", "server", "tool", "args"}  (+ "student")

then, once the tool answered, the call (record()), durable at the next group commit:

    {"event": "call", "at", "message_id", "step", "server", "tool", "args"}  (+ "to": a mail
        tool's recipient, + "student": a lab's plug point, + "result": what the tool returned)

an airlock.records.Intent and an airlock.records.Call, the type of the trace's call line too.

calls.jsonl is the ground truth of what airlock *did*; attack scoring reads its call lines,
never the model's words. With its key index (actor/keyindex.py) it is also the idempotency
ledger, the way a payment API honours an idempotency key: a step whose key was claimed is
never called again. With its call line, a replay is answered from the result that line kept
(DONE); with none (the actor died after calling the tool, or the tool failed or overran),
nobody knows whether the call took effect, so the step is UNKNOWN from then on: reported,
for a person, never run again. A record is either whole or absent (AppendLog,
actor/ledger.py): a failed write leaves nothing behind to land later. What a tool does and
returns is not this module's: see actor/mocks.py.
"""
from __future__ import annotations

import itertools
import os
import sqlite3
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import msgspec

from actor.keyindex import CACHE_KEYS, Indexed, KeyIndex, is_damage
from actor.ledger import AppendLog, LedgerUntrusted, LedgerWriteFailed, ledger_lock
from airlock import records
from airlock.records import Call, Intent, utc_now

NEW, DONE, UNKNOWN = "new", "done", "unknown"  # what claim() found (Claimed.state)
REINDEX_CHUNK = 10_000  # log records indexed per batch at start (their keys and offsets in memory)
LINE_READ_BYTES = 65536  # read at a time when a replay reads its call line back


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
            self._reader = open(path, "rb")  # noqa: SIM115  a replay reads its call line back here; closed in close()
            opened.append(self._reader)
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
        # Calls recorded whose offsets the index has not committed yet (where each call line
        # starts in the log), and those of them whose records the log has not made durable yet.
        self._finished: dict[str, int] = {}
        self._recorded_unsynced: set[str] = set()

    def claim(self, message_id: str, step: int, server: str, tool: str, args: dict[str, Any],
              student: str = "") -> Claimed:
        """Claim a step's key before its tool runs. NEW: its Intent is durable (fsynced, with the
        key index committed) and the caller may call the tool, then must record() what it
        returned. DONE: the log records the call (its kept result comes with it). UNKNOWN: an
        Intent claimed it and no Call followed (the actor stopped in between, or the tool
        failed): it may have taken effect. Neither of the last two may run. Raises
        LedgerUntrusted (the ledger is not the file this actor opened) or LedgerWriteFailed
        (the intent could not be made durable: nothing of it stays, nothing may run)."""
        key = call_key(message_id, step)
        with self._lock:
            self._check_trusted()
            if key in self._pinned or key in self._unsynced_pins or not self._claim(key):
                return self._claimed(key)
            intent = Intent(at=utc_now(), message_id=message_id, step=step, server=server, tool=tool, args=args,
                            student=student)
            try:
                self._log.append(records.encode(intent))
            except LedgerWriteFailed:
                try:
                    self.keys.release(key)
                except sqlite3.Error as exc:
                    self._index_lost(exc)
                    self._unsynced_pins.discard(key)  # its record was cut back out: it did not run
                self._latch_untrusted()  # the record could not be cut back out: no more records here
                raise
            self._unfinished.add(key)
            self._sync()  # durable before the call, or LedgerWriteFailed and taken back
            return Claimed(NEW)

    def record(self, message_id: str, step: int, server: str, tool: str, args: dict[str, Any],
               student: str = "", to: str = "", result: dict[str, Any] | None = None) -> None:
        """Record the call a claim() let run, once its tool answered: `to` is a mail tool's
        recipient, `result` what it returned (kept to answer a replay; None: not kept), each
        written only when set. Durable at the next sync(). Raises LedgerWriteFailed if it
        cannot be written: the step stays claimed and unfinished (`unknown` from then on)."""
        key = call_key(message_id, step)
        with self._lock:
            call = Call(at=utc_now(), message_id=message_id, step=step, server=server, tool=tool, args=args,
                        to=to, student=student, result=result)
            offset = self._log.size
            try:
                self._log.append(records.encode(call))
            except LedgerWriteFailed:
                self._latch_untrusted()
                raise
            self._unfinished.discard(key)
            self._finished[key] = offset
            self._recorded_unsynced.add(key)

    def call(self, message_id: str, step: int, server: str, tool: str, args: dict[str, Any],
             student: str = "", to: str = "", result: dict[str, Any] | None = None) -> bool:
        """claim() and record() in one, for a call whose record is its only effect (a mock, a
        grader's replay): True if it was made now, False (nothing written) if its key was
        already claimed. Raises as claim() and record() do."""
        if self.claim(message_id, step, server, tool, args, student).state != NEW:
            return False
        self.record(message_id, step, server, tool, args, student, to, result)
        return True

    def _claimed(self, key: str) -> Claimed:
        """An earlier claim of `key`: unknown, or done with the result its call line kept."""
        if key in self._unfinished:
            return Claimed(UNKNOWN)
        offset = self._finished.get(key)
        if offset is None:
            try:
                offset = self.keys.offset(key)
            except sqlite3.Error as exc:
                if self._damaged(exc):
                    raise LedgerUntrusted(f"ledger_untrusted: {self.untrusted}; nothing ran") from exc
                offset = None  # the index cannot say: the step replays with no result (its facts unknown)
        found = None if offset is None else self._call_at(offset, key)
        return Claimed(DONE, None if found is None else found.result, found)

    def _call_at(self, offset: int, key: str) -> Call | None:
        """The call line of `key` at `offset` in the log; None if there is none there (a line
        of an older version, a log replaced since, damage)."""
        line = b""
        try:
            while not line.endswith(b"\n"):
                chunk = os.pread(self._reader.fileno(), LINE_READ_BYTES, offset + len(line))
                if not chunk:
                    break
                line += chunk[:chunk.index(b"\n") + 1] if b"\n" in chunk else chunk
        except OSError:
            return None
        found = records.decode_call(line)
        if not isinstance(found, Call) or call_key(found.message_id, found.step) != key:
            return None
        return found

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
            self._sync()

    def _sync(self) -> None:
        """sync(), with the lock held."""
        try:
            self._log.sync()
        except LedgerWriteFailed:
            self._taken_back()
            self._latch_untrusted()
            raise
        self._pinned |= self._unsynced_pins  # durable now: committed with this batch, or held
        self._unsynced_pins.clear()
        self._recorded_unsynced.clear()  # their calls are durable in the log now
        self._index_synced()  # even if the log turns out replaced: those calls did run
        try:
            self._check_trusted(full=True)
        except LedgerUntrusted:
            pass  # latched: the next call is refused; this batch's answers may go

    def _taken_back(self) -> None:
        """The records since the last sync were cut out of the log: an intent among them never
        claimed its key (its tool never ran), and a call among them is unfinished again (its
        tool ran, but the log no longer says it answered)."""
        for key in self.keys.unsynced():
            self._unfinished.discard(key)
        self.keys.forget_batch()
        for key in self._unsynced_pins:
            self._unfinished.discard(key)
        self._unsynced_pins.clear()  # their records were cut back out: those calls did not run
        for key in self._recorded_unsynced:
            self._unfinished.add(key)
            self._finished.pop(key, None)
        self._recorded_unsynced.clear()

    def rollback(self) -> None:
        """Forget every call since the last sync (their answers will never be sent)."""
        with self._lock:
            self._log.rollback()
            self._taken_back()

    def _index_synced(self) -> None:
        covers = Indexed(*self._log.identity, self._log.synced)
        try:
            if self._pinned:
                self.keys.add_all(self._pinned)
            self.keys.keep_unfinished(self._unfinished)
            self.keys.add_offsets(self._finished.items())
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
            self._finished.clear()  # their offsets are in the index now

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
        if start == 0:
            keys.forget_offsets()  # offsets into another file (or none): this log's are indexed below
        self._unfinished = keys.unfinished()
        unfinished = self._unfinished
        for chunk in _chunks(_entries_in(log.path, start), REINDEX_CHUNK):
            claimed: dict[str, None] = {}  # each key once: an intent and its call name the same
            offsets: list[tuple[str, int]] = []
            for offset, (message_id, step, intent) in chunk:
                key = f"{message_id}:{step}"  # call_key, inline: this loop runs once per record
                claimed[key] = None
                if intent:
                    unfinished.add(key)
                else:  # a call after its intent, or one logged before intents were
                    unfinished.discard(key)
                    offsets.append((key, offset))
            keys.add_all(claimed)
            keys.add_offsets(offsets)
        keys.keep_unfinished(self._unfinished)
        keys.commit(Indexed(*log.identity, log.size))
        return notices

    def close(self) -> None:
        if self._log.closed:
            return
        try:
            self.sync()
        finally:
            self._log.close()
            self._reader.close()
            self.keys.close()
            self.lock.close()


class Claimed(NamedTuple):
    """What claim() found: NEW (the tool may run now), DONE (with the result the log kept,
    None if it kept none, and the call line itself when it could be read) or UNKNOWN
    (claimed, never recorded: it may have taken effect)."""
    state: str
    result: dict[str, Any] | None = None
    recorded: Call | None = None

    def same_call(self, server: str, tool: str, args: dict[str, Any]) -> bool:
        """Whether the recorded call is this one: the same tool with the same arguments. True
        when no line could be read to say otherwise (the replay then has no result)."""
        if self.recorded is None:
            return True
        return (self.recorded.server, self.recorded.tool) == (server, tool) \
            and _canonical(self.recorded.args) == _canonical(args)




_canonical = msgspec.json.Encoder(order="sorted").encode


def _close_quietly(resource: Any) -> None:
    """Close what a failed start opened; its own failure must not hide the first one."""
    try:
        resource.close()
    except Exception:  # noqa: BLE001  (the start's error is the one to report)
        pass


Entries = Iterator[tuple[int, records.CallEntry]]  # where each log record starts, and what it says


def _chunks(entries: Entries, size: int) -> Iterator[list[tuple[int, records.CallEntry]]]:
    while chunk := list(itertools.islice(entries, size)):
        yield chunk


def _entries_in(path: Path, start: int) -> Entries:
    """Where each of the log's records from byte `start` begins, and what it says of its call
    (a torn line is skipped)."""
    with open(path, "rb") as handle:
        handle.seek(start)
        offset = start
        for raw in handle:
            entry = records.call_entry_of(raw)  # lenient: a damaged record still says its call was claimed
            if entry is not None:
                yield offset, entry
            offset += len(raw)
