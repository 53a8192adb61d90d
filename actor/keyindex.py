"""The tools' idempotency keys on disk, so memory does not grow with the mail ever handled.

Keys live in a SQLite file beside the call log (`calls.keys.sqlite`, WAL). A key is taken
in an open transaction by its call, and the transaction commits right after the log's fsync
at each group commit: the index never holds a key whose record is not durable, and it holds
every key whose Done has left. A crash between the two leaves it behind the log, and the
restart indexes the rest from the log. A bounded LRU
of recent keys answers a replay without a query; a new key costs one INSERT OR IGNORE.

The index also records which file it indexed (device, inode) and how many of its bytes, so
a restarted actor can tell a log that grew (index it from there), one that is new or was
deleted, cut or replaced (index it whole and say so: the keys already here are kept, so a
deleted calls.jsonl does not make any call run again), and a lost index (rebuilt from the
log, which stays the ground truth the scorers read).

A damaged index is moved aside (`calls.keys.sqlite.damaged-<time>`) and rebuilt from the
log: at open when SQLite cannot read it or its integrity check (every page) fails, and
when SQLite finds damage while in use (the actor then stops acting, and its restart
rebuilds). The check reads structure, not content: SQLite keeps no page checksums, so a
changed byte inside a key that leaves its page well-formed and in order is not found.
"""

from __future__ import annotations

import collections
import os
import sqlite3
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from airlock import files

DAMAGED = {sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB}  # moved aside and rebuilt; other errors are raised
CACHE_KEYS = 4096  # recent keys kept in memory: a redelivery comes soon after its first run


class Indexed(NamedTuple):
    """Which log the index covers, and up to which byte."""
    device: int
    inode: int
    size: int


class KeyIndex:
    def __init__(self, path: Path, cache_keys: int = CACHE_KEYS) -> None:
        self.path, self.cache_keys = path, cache_keys
        self.damaged = ""  # why this index was set aside while in use ("" while it is whole)
        self.rebuilt: dict[str, str] = {}  # a damaged index found at open: why, and where it went
        try:
            self._db = _open(path)
        except sqlite3.DatabaseError as exc:
            if not is_damage(exc):
                raise  # a full disk, a folder it cannot write: the caller's typed failure
            self.rebuilt = {"path": str(path), "reason": str(exc), "moved_to": move_aside(path, str(exc))}
            self._db = _open(path)
        self._cache: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._batch: list[str] = []  # claimed since the log's last sync
        self._durable: list[str] = []  # durable in the log, not yet committed here (one batch)
        self._covers: Indexed | None = None  # what the next commit records
        # Whether a transaction is open is asked of SQLite (db.in_transaction), never kept in a
        # flag here: on a full disk SQLite rolls the transaction back by itself, and a stale flag
        # would let the next key be written at once (autocommit), before its record is durable.

    def indexed(self) -> Indexed | None:
        row = self._db.execute("SELECT device, inode, size FROM indexed").fetchone()
        return Indexed(*row) if row else None

    def claim(self, key: str) -> bool:
        """True, and the key is taken, if no call holds it yet. It stays taken unless the
        batch it belongs to is forgotten (its records never became durable)."""
        if key in self._cache:
            self._cache.move_to_end(key)
            return False
        self._begin()
        added = self._db.execute("INSERT OR IGNORE INTO keys (key) VALUES (?)", (key,)).rowcount == 1
        if added:
            self._batch.append(key)
        self._remember(key)
        return added

    def release(self, key: str) -> None:
        """Give back a key just claimed whose record could not be written."""
        self._db.execute("DELETE FROM keys WHERE key = ?", (key,))
        self._cache.pop(key, None)
        if key in self._batch:
            self._batch.remove(key)

    def unsynced(self) -> list[str]:
        """The keys claimed since the log's last sync (their records are in the log, not yet durable)."""
        return list(self._batch)

    def forget_batch(self) -> None:
        """Give back every key claimed since the log's last sync (the sync failed)."""
        lost, self._batch = self._batch, []
        for key in lost:
            if self._db.in_transaction:  # else SQLite's own rollback already took it away
                self._db.execute("DELETE FROM keys WHERE key = ?", (key,))
            self._cache.pop(key, None)

    def synced(self, covers: Indexed) -> None:
        """The log is durable up to `covers`: commit the batch's keys with it (one transaction
        per group commit, so a key is on disk before its Done leaves, and deleting the log
        alone forgets no key). Raises sqlite3.Error as commit() does."""
        self._durable += self._batch
        self._batch = []
        self.commit(covers)

    def __contains__(self, key: str) -> bool:
        if key in self._cache:
            return True
        return self._db.execute("SELECT 1 FROM keys WHERE key = ?", (key,)).fetchone() is not None

    def add_all(self, keys: Iterable[str]) -> None:
        """Index keys read back from the log (a rebuild or a catch-up), in the open transaction."""
        self._begin()
        self._db.executemany("INSERT OR IGNORE INTO keys (key) VALUES (?)", ((key,) for key in keys))

    def unfinished(self) -> set[str]:
        """The keys claimed by an intent whose call the log does not record (few: one per call
        an actor was stopped in, or that failed or overran)."""
        return {key for (key,) in self._db.execute("SELECT key FROM unfinished")}

    def keep_unfinished(self, unfinished: Iterable[str]) -> None:
        """In the open transaction: the unfinished keys as they are now, all of them."""
        self._begin()
        self._db.execute("DELETE FROM unfinished")
        self._db.executemany("INSERT OR IGNORE INTO unfinished (key) VALUES (?)", ((key,) for key in unfinished))

    def add_offsets(self, offsets: Iterable[tuple[str, int]]) -> None:
        """In the open transaction: where in the log each key's call line starts (a replay
        is answered from the result that line kept)."""
        self._begin()
        self._db.executemany("INSERT OR REPLACE INTO calls (key, offset) VALUES (?, ?)", offsets)

    def forget_offsets(self) -> None:
        """The log is another file now: its offsets name nothing (the keys stay)."""
        self._begin()
        self._db.execute("DELETE FROM calls")

    def offset(self, key: str) -> int | None:
        """Where the call line of `key` starts in the log (None: not known)."""
        row = self._db.execute("SELECT offset FROM calls WHERE key = ?", (key,)).fetchone()
        return None if row is None else int(row[0])

    def set_aside(self, reason: str) -> None:
        """The index was found damaged while in use: move its files aside, so that the next start
        rebuilds it whole from the log, and go on in memory, where nothing is committed (a commit
        here would claim log bytes whose keys this index no longer holds)."""
        if self.damaged:
            return
        self.damaged = reason
        self._db.close()
        move_aside(self.path, reason)
        self._db = _schema(sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False))
        self._cache.clear()

    def commit(self, covers: Indexed | None = None) -> None:
        """Commit what the log holds durably: its keys, and which bytes of which log they come
        from. Raises sqlite3.Error if the disk refuses; the caller then calls rollback()."""
        covers = covers or self._covers
        if self.damaged:
            return
        if covers is None or not self._db.in_transaction:
            return  # never the `indexed` row alone: it would claim keys this index does not hold
        self._db.execute("INSERT OR REPLACE INTO indexed (one, device, inode, size) VALUES (1, ?, ?, ?)", covers)
        self._db.execute("COMMIT")
        self._covers = None
        self._durable = []

    def rollback(self) -> list[str]:
        """Drop the open transaction; returns the keys in it that the log holds durably (the
        caller must go on honouring them), having forgotten the unsynced batch."""
        if self._db.in_transaction:
            try:
                self._db.execute("ROLLBACK")
            except sqlite3.Error:  # SQLite already rolled it back itself (a full disk does that)
                pass
        self.forget_batch()  # after the rollback: it took the keys away, nothing to write
        self._cache.clear()  # it may name keys the rollback took away
        lost, self._durable, self._covers = self._durable, [], None
        return lost

    def cached(self) -> int:
        return len(self._cache)

    def close(self) -> None:
        try:
            self.commit()
        finally:
            self.rollback()
            self._db.close()

    def _begin(self) -> None:
        if not self._db.in_transaction:
            self._db.execute("BEGIN")

    def _remember(self, key: str) -> None:
        self._cache[key] = None
        if len(self._cache) > self.cache_keys:
            self._cache.popitem(last=False)


def is_damage(exc: sqlite3.Error) -> bool:
    """Whether SQLite says the file is damaged (moved aside and rebuilt), not that the disk refused."""
    return getattr(exc, "sqlite_errorcode", None) in DAMAGED


def move_aside(path: Path, reason: str) -> str:
    """Keep a damaged index (and its -wal, -shm) beside, named, for a person to look at."""
    aside = path.with_name(f"{path.name}.damaged-{time.strftime('%Y%m%dT%H%M%S')}")
    for number in range(1, 1000):  # a second one within the same second keeps the first
        if not aside.exists():
            break
        aside = path.with_name(f"{path.name}.damaged-{time.strftime('%Y%m%dT%H%M%S')}-{number}")
    for suffix in ("", "-wal", "-shm"):
        if Path(f"{path}{suffix}").exists():
            os.replace(f"{path}{suffix}", f"{aside}{suffix}")
    print(f"actor: WARNING: the key index {path} is damaged ({reason}); moved to {aside.name}, to be "
          "rebuilt from the call log", file=sys.stderr)
    return aside.name


def _open(path: Path) -> sqlite3.Connection:
    """The index, checked page by page (PRAGMA integrity_check: every page of every b-tree, their
    order and the free list; 0.1 s for 1,000,000 keys). A file whose first page reads but whose
    other pages are damaged would otherwise open, lose keys silently (a lookup that strays in a
    damaged page finds nothing: the call would run again) or fail later, mid-email."""
    if not path.exists():
        files.open_append(path).close()  # 0600 before SQLite opens it; its -wal file copies the mode
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        db.execute("PRAGMA locking_mode=EXCLUSIVE")  # no lock round trips per transaction; no second writer
        db.execute("PRAGMA journal_mode=WAL")
        # NORMAL: a commit is not fsynced; a power cut can lose the last commits, which the
        # restart re-indexes from the log (fsynced before each commit): the index is never ahead.
        db.execute("PRAGMA synchronous=NORMAL")
        problem = db.execute("PRAGMA integrity_check(1)").fetchone()[0]
        if problem != "ok":
            error = sqlite3.DatabaseError("integrity check: " + " ".join(str(problem).split()))
            error.sqlite_errorcode = sqlite3.SQLITE_CORRUPT  # as SQLite's own
            raise error
        _schema(db)
    except BaseException:
        db.close()
        raise
    return db


def _schema(db: sqlite3.Connection) -> sqlite3.Connection:
    db.execute("CREATE TABLE IF NOT EXISTS keys (key TEXT PRIMARY KEY) WITHOUT ROWID")
    db.execute("CREATE TABLE IF NOT EXISTS unfinished (key TEXT PRIMARY KEY) WITHOUT ROWID")
    db.execute("CREATE TABLE IF NOT EXISTS calls (key TEXT PRIMARY KEY, offset INTEGER) WITHOUT ROWID")
    db.execute("CREATE TABLE IF NOT EXISTS indexed (one INTEGER PRIMARY KEY CHECK (one = 1), "
               "device INTEGER, inode INTEGER, size INTEGER)")
    return db
