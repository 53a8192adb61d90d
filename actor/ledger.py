"""The actor's files on disk, written so that what they say is what happened.

    LedgerError                  the actor's ledger cannot be used as it stands
     +-- LedgerWriteFailed       a write or fsync failed (ENOSPC, EIO, ...): nothing of it stays
     +-- LedgerUntrusted         calls.jsonl is not the file the actor opened (deleted, replaced)
     +-- LedgerBusy              another live actor holds the ledger's lock

AppendLog is one JSON-lines file (calls.jsonl, pending.jsonl) written with one unbuffered
os.write per record. A buffered file would keep a failed record in its buffer and write it
later, after the email it belonged to had already ended `failed`: the file would then say a
call ran that the outcome says did not. Here a record is either whole in the file or not
there at all: on any failure the file is cut back to its length before the record.

ledger_lock is an exclusive flock on `calls.lock` (airlock.locks), taken without waiting at start and dropped
by the kernel when the process dies: two actors can never both act on one ledger.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from airlock import locks, trace
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


def disk_reason(exc: OSError, what: Path, doing: str) -> str:
    """One line that names the disk's error: `No space left on device (ENOSPC) writing calls.jsonl`."""
    code = errno.errorcode.get(exc.errno or 0, "error")
    return f"{exc.strerror or exc} ({code}) {doing} {what.name}"


class AppendLog:
    """A JSON-lines file appended to by whole records, each either fully there or not at all."""

    def __init__(self, path: Path) -> None:
        self.path, self._path_text = path, os.fspath(path)
        try:
            handle = trace.open_lines(path)  # 0600, and a torn last line from a crash is ended first
            self._fd = os.dup(handle.fileno())
            try:
                handle.close()  # flushes the newline that ends a torn line
            except OSError:
                os.close(self._fd)
                raise
        except PermissionError:
            raise  # a data folder this user cannot write: a configuration error (service.main says so)
        except OSError as exc:
            raise LedgerWriteFailed(disk_reason(exc, path, "opening")) from exc
        stat = os.fstat(self._fd)
        self.identity = (stat.st_dev, stat.st_ino)
        self.size = stat.st_size  # where the next record starts
        self.synced = stat.st_size  # what an fsync has made durable (at open: whatever is there)
        self.damaged = ""  # why the file may now end in a partial record ("" while it cannot)

    def append(self, line: bytes) -> None:
        """Write one record (ending in a newline) with a single os.write; on failure, cut the
        file back to its length before it and raise LedgerWriteFailed."""
        try:
            written = os.write(self._fd, line)
            if written != len(line):  # a short write: the disk filled up mid-record
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        except OSError as exc:
            self._cut(self.size)
            raise LedgerWriteFailed(disk_reason(exc, self.path, "writing")) from exc
        self.size += len(line)

    def sync(self) -> None:
        """fsync what was appended since the last sync. On failure every record since that
        sync is taken back out (its data may be lost anyway: Linux forgets a failed page) and
        LedgerWriteFailed is raised; the caller must not acknowledge any of them."""
        if self.synced == self.size:
            return
        try:
            os.fsync(self._fd)
        except OSError as exc:
            self._cut(self.synced)
            raise LedgerWriteFailed(disk_reason(exc, self.path, "syncing")) from exc
        self.synced = self.size

    def rollback(self) -> None:
        """Take back every record since the last sync (their answers will never be sent)."""
        self._cut(self.synced)

    def unlinked(self) -> str:
        """The per-call check, one fstat: "" unless the file was deleted or renamed over
        (either leaves it with no name) or could not be cut back, else what happened to it."""
        if self.damaged:
            return self.damaged
        try:
            if os.fstat(self._fd).st_nlink > 0:
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
        return self._fd < 0

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _cut(self, length: int) -> None:
        try:
            os.ftruncate(self._fd, length)
        except OSError as exc:
            # The file may end in a partial record, and it is O_APPEND: the next record would
            # share that line and every reader would skip it (a call that ran, missing). So no
            # more records here: the log says it is damaged, and the actor stops acting on it
            # (LedgerUntrusted); a restart's open_lines ends the torn line first.
            self.damaged = (f"{self.path.name} could not be cut back after a failed write ({exc.strerror}): "
                            "it may end in a partial record")
            return
        self.size = min(self.size, length)
        self.synced = min(self.synced, length)


def ledger_lock(path: Path) -> locks.Held:
    """The exclusive lock on `path` (airlock.locks), or LedgerBusy: only one actor may act on a
    ledger. `lost()` on the result says whether the lock file is still the one locked."""
    try:
        return locks.hold(path, "actor", "stop it first, or give this one its own data dir")
    except LockHeld as exc:
        raise LedgerBusy(str(exc)) from None
