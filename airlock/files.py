"""Files and folders airlock makes: private from their first moment, whatever the umask.

What airlock writes holds secrets (CURVE keys) or customers' mail and data (the journal,
the trace, the call log, pending escalations), so:

    folders it makes           0700, every level it makes (Path.mkdir gives parents the umask's)
    a secret                   0600, written to a new name opened O_EXCL with that mode, then
                               renamed over the old one: there is no moment at which another
                               user can open it, and a reader sees the old file or the new one
    a data file it appends to  made 0600 by the open itself; an existing one (an older
                               version's, 0644) loses every bit for others on open. The group's
                               bits are kept: the compose lab's host user reads the services'
                               files through the group (ops.lab_init makes them 0660)

A mode set after the file exists (copy, then chmod) leaves a window in which another user
who opened the file keeps reading it: that is the race this module exists to close.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import BinaryIO

from airlock.errors import ConfigError

PRIVATE_FOLDER = 0o700
PRIVATE_FILE = 0o600
FOR_OTHERS = 0o007  # the bits an existing data file loses


def make_folder(path: Path) -> None:
    """`path` and every missing folder above it, each made 0700; existing ones are left as they are."""
    missing = []
    for folder in (path, *path.parents):
        if folder.exists():
            break
        missing.append(folder)
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=PRIVATE_FOLDER)
        except FileExistsError:  # made meanwhile by another process: fine if it is a folder
            if not folder.is_dir():
                raise
        else:
            folder.chmod(PRIVATE_FOLDER)  # mkdir's mode passes through the umask; 0700 is asked for


def write_private(path: Path, data: bytes) -> None:
    """Replace `path` with `data`, 0600 from the first byte (see the module's docstring)."""
    make_folder(path.parent)
    scratch = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    scratch.unlink(missing_ok=True)  # a crashed earlier write of this process id
    descriptor = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, PRIVATE_FILE)
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(scratch, path)
    except BaseException:
        scratch.unlink(missing_ok=True)
        raise


class LinkedDataFile(ConfigError):
    """A data file airlock appends to is a symbolic link: refused, never followed."""


def fsync_folder(folder: Path) -> None:
    """Make a rename in `folder` durable: without this, a power cut may undo it."""
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def create_scratch(path: Path) -> int:
    """A new, empty 0600 file at `path` for a copy about to be renamed into place (a journal
    compaction, a probe): whatever stood there is removed first (a link, not its target), and
    the file is opened O_EXCL | O_NOFOLLOW, so a name planted in the data dir cannot make
    airlock truncate or write some other file. Returns the descriptor, open for writing."""
    path.unlink(missing_ok=True)
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, PRIVATE_FILE)


def open_append(path: Path) -> BinaryIO:
    """`path` opened for appending (see append_descriptor), as a file object."""
    return os.fdopen(append_descriptor(path), "ab")


def append_descriptor(path: Path, readable: bool = False) -> int:
    """`path` opened for appending: made 0600 if missing, and closed to others if it was not.
    With `readable`, open for reading too (airlock.appendlog reads its own tail through it).

    A symbolic link in its place is refused (O_NOFOLLOW), not followed: whoever can write the
    data dir could otherwise point the journal or the call log at any file this user may
    write, and airlock would append customers' mail to it, or chmod it."""
    make_folder(path.parent)
    access = os.O_RDWR if readable else os.O_WRONLY
    try:
        descriptor = os.open(path, access | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, PRIVATE_FILE)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise LinkedDataFile(f"{path} is a symbolic link; airlock does not follow links for the files it "
                                 "appends to: remove the link (and see who made it)") from None
        raise
    try:
        mode = os.fstat(descriptor).st_mode & 0o7777
        if mode & FOR_OTHERS:
            try:
                os.fchmod(descriptor, mode & ~FOR_OTHERS)
            except PermissionError:  # another user's file that the group may write: theirs to close
                pass
        return descriptor
    except BaseException:
        os.close(descriptor)
        raise
