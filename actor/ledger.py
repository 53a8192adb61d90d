"""The actor's files on disk, written so that what they say is what happened.

    LedgerError                  the actor's ledger cannot be used as it stands
     +-- LedgerWriteFailed       a write or fsync failed (ENOSPC, EIO, ...): nothing of it stays
     +-- LedgerUntrusted         calls.jsonl is not the file the actor opened (deleted, replaced)
     +-- LedgerBusy              another live actor holds the ledger's lock

AppendLog is one JSON-lines file (calls.jsonl, pending.jsonl) on airlock.appendlog, each
record written at once with an unbuffered write. A buffered file would keep a failed record
in its buffer and write it later, after the email it belonged to had already ended `failed`:
the file would then say a call ran that the outcome says did not. Here a record is either
whole in the file or not there at all: on any failure the file is cut back to its length
before the record.

ledger_lock is an exclusive flock on `calls.lock` (airlock.locks), taken without waiting at start and dropped
by the kernel when the process dies: two actors can never both act on one ledger.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from airlock import appendlog, locks
from airlock.errors import LockHeld


class LedgerError(Exception):
    """The actor cannot act on its ledger as it stands; the message says why, for the trace."""


class LedgerWriteFailed(LedgerError):
    """A record could not be made durable; it was taken back out of the file."""


class LedgerUntrusted(LedgerError):
    """The ledger on disk is not the one this actor has been writing: acting on it could repeat
    a side effect, so no call runs until the actor restarts and reconciles it."""


class LedgerBusy(LedgerError):
    """Another process holds the ledger; this actor must not start."""


class AppendLog:
    """A JSON-lines file appended to by whole records, each either fully there or not at all:
    airlock.appendlog's log, its failures raised as LedgerWriteFailed, plus the checks that
    the file is still the one the actor opened."""

    def __init__(self, path: Path) -> None:
        self.path, self._path_text = path, os.fspath(path)
        try:
            self._log = appendlog.Log(path, appendlog.LINES)  # 0600; a torn last line from a crash is cut off
        except PermissionError:
            raise  # a data folder this user cannot write: a configuration error (service.main says so)
        except OSError as exc:
            raise LedgerWriteFailed(appendlog.disk_reason(exc, path, "opening")) from exc
        self.identity = self._log.identity
        # The half record a crash left at the end, cut off at open (or None), said here once
        # for the actor's files (the call log also tells the trace: a ledger_repaired notice).
        self.repaired = self._log.repaired
        if self.repaired is not None:
            print(f"actor: {path} ended in a partial record (a crash mid-write): its last "
                  f"{self.repaired.end - self.repaired.start} bytes were cut off at open", file=sys.stderr)

    @property
    def size(self) -> int:
        """Where the next record starts."""
        return self._log.size

    @property
    def synced(self) -> int:
        """What an fsync has made durable (at open: whatever is there)."""
        return self._log.synced

    def append(self, line: bytes) -> None:
        """Write one record (ending in a newline) now; on failure nothing of it stays in the
        file (airlock.appendlog) and LedgerWriteFailed is raised."""
        failed = self._log.append(line)
        if failed is not None:
            raise LedgerWriteFailed(failed.reason) from failed.error

    def sync(self) -> None:
        """fsync what was appended since the last sync. On failure every record since that
        sync is taken back out (its data may be lost anyway: Linux forgets a failed page) and
        LedgerWriteFailed is raised; the caller must not acknowledge any of them."""
        failed = self._log.sync()
        if failed is not None:
            self._log.rollback()
            raise LedgerWriteFailed(failed.reason) from failed.error

    def rollback(self) -> None:
        """Take back every record since the last sync (their answers will never be sent)."""
        self._log.rollback()

    def unlinked(self) -> str:
        """The per-call check, one fstat: "" unless the file was deleted or renamed over
        (either leaves it with no name) or could not be cut back, else what happened to it.
        A file that could not be cut back may end in a partial record: the actor stops
        acting on it (LedgerUntrusted) until a restart cuts the fragment off."""
        if self._log.torn:  # why the file may end in a partial record
            return self._log.torn
        try:
            if os.fstat(self._log.fileno()).st_nlink > 0:
                return ""
        except OSError as exc:
            return f"{self.path.name} cannot be checked: {exc.strerror}"
        return f"{self.path.name} was deleted or replaced while the actor was writing it"

    def replaced(self) -> str:
        """The full check (once per group commit): "" if the path still names the file this
        log writes to, else what happened to it (it may also have been moved away)."""
        try:
            stat = os.stat(self._path_text)
        except FileNotFoundError:
            return f"{self.path.name} was deleted while the actor was writing it"
        except OSError as exc:
            return f"{self.path.name} cannot be checked: {exc.strerror}"
        if (stat.st_dev, stat.st_ino) != self.identity:
            return f"{self.path.name} was replaced by another file while the actor was writing it"
        return ""

    @property
    def closed(self) -> bool:
        return self._log.closed

    def close(self) -> None:
        self._log.close()


def ledger_lock(path: Path) -> locks.Held:
    """The exclusive lock on `path` (airlock.locks), or LedgerBusy: only one actor may act on a
    ledger. `lost()` on the result says whether the lock file is still the one locked."""
    try:
        return locks.hold(path, "actor", "stop it first, or give this one its own data dir")
    except LockHeld as exc:
        raise LedgerBusy(str(exc)) from None
