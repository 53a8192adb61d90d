"""The tools' idempotency keys on disk, so memory does not grow with the mail ever handled.

Keys live in a SQLite file beside the call log (`calls.keys.sqlite`, WAL): one transaction
per group commit, opened by the first call of a batch and committed by CallLog.sync after
the log's fsync, so the index never holds a key whose record is not durable. A bounded LRU
of recent keys answers a replay without a query; a new key costs one INSERT OR IGNORE.

The index also records which file it indexed (device, inode) and how many of its bytes, so
a restarted actor can tell a log that grew (index it from there), one that is new or was
deleted, cut or replaced (index it whole and say so: the keys already here are kept, so a
deleted calls.jsonl does not make any call run again), and a lost index (rebuilt from the
log, which stays the ground truth the scorers read).
"""

from __future__ import annotations

import collections
import sqlite3
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from airlock import files

CACHE_KEYS = 4096  # recent keys kept in memory: a redelivery comes soon after its first run


class Indexed(NamedTuple):
    """Which log the index covers, and up to which byte."""
    device: int
    inode: int
    size: int


class KeyIndex:
    def __init__(self, path: Path, cache_keys: int = CACHE_KEYS) -> None:
        self.path, self.cache_keys = path, cache_keys
        if not path.exists():
            files.open_append(path).close()  # 0600 before SQLite opens it; its -wal and -shm copy the mode
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        # NORMAL: a commit is not fsynced; a power cut can lose the last commits, which the
        # restart re-indexes from the log (fsynced before each commit): the index is never ahead.
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS keys (key TEXT PRIMARY KEY) WITHOUT ROWID")
        self._db.execute("CREATE TABLE IF NOT EXISTS indexed (one INTEGER PRIMARY KEY CHECK (one = 1), "
                         "device INTEGER, inode INTEGER, size INTEGER)")
        self._cache: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._uncommitted: list[str] = []
        self._in_transaction = False

    def indexed(self) -> Indexed | None:
        row = self._db.execute("SELECT device, inode, size FROM indexed").fetchone()
        return Indexed(*row) if row else None

    def claim(self, key: str) -> bool:
        """True, and the key is taken (until commit or rollback), if no call holds it yet."""
        if key in self._cache:
            self._cache.move_to_end(key)
            return False
        self._begin()
        added = self._db.execute("INSERT OR IGNORE INTO keys (key) VALUES (?)", (key,)).rowcount == 1
        if added:
            self._uncommitted.append(key)
        self._remember(key)
        return added

    def release(self, key: str) -> None:
        """Give back a key just claimed whose record could not be written."""
        self._db.execute("DELETE FROM keys WHERE key = ?", (key,))
        self._cache.pop(key, None)
        if key in self._uncommitted:
            self._uncommitted.remove(key)

    def __contains__(self, key: str) -> bool:
        if key in self._cache:
            return True
        return self._db.execute("SELECT 1 FROM keys WHERE key = ?", (key,)).fetchone() is not None

    def add_all(self, keys: Iterable[str]) -> None:
        """Index keys read back from the log (a rebuild or a catch-up), in the open transaction."""
        self._begin()
        self._db.executemany("INSERT OR IGNORE INTO keys (key) VALUES (?)", ((key,) for key in keys))

    def commit(self, covers: Indexed) -> None:
        """End the batch: its keys, and which bytes of which log they come from. Raises
        sqlite3.Error if the disk refuses; the transaction is then rolled back."""
        self._begin()
        self._db.execute("INSERT OR REPLACE INTO indexed (one, device, inode, size) VALUES (1, ?, ?, ?)", covers)
        try:
            self._db.execute("COMMIT")
        except sqlite3.Error:
            self.rollback()
            raise
        self._in_transaction = False
        self._uncommitted.clear()

    def rollback(self) -> list[str]:
        """Forget the open batch; returns the keys it had claimed."""
        if self._in_transaction:
            try:
                self._db.execute("ROLLBACK")
            except sqlite3.Error:  # SQLite already rolled it back itself (a full disk does that)
                pass
            self._in_transaction = False
        lost, self._uncommitted = self._uncommitted, []
        for key in lost:
            self._cache.pop(key, None)
        return lost

    def cached(self) -> int:
        return len(self._cache)

    def close(self) -> None:
        self.rollback()
        self._db.close()

    def _begin(self) -> None:
        if not self._in_transaction:
            self._db.execute("BEGIN")
            self._in_transaction = True

    def _remember(self, key: str) -> None:
        self._cache[key] = None
        if len(self._cache) > self.cache_keys:
            self._cache.popitem(last=False)
