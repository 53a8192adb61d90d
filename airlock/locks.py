"""Locks that keep one process of a kind per data dir, and children that die with their parent.

A lock here is the kernel's flock on a file, taken without waiting, never a pid file: the
kernel drops it when its holder dies, however it dies (kill -9 included), so a stale file
never blocks a start, and a live holder always does. The file holds the holder's pid, a
hint for the message only: the lock, not the text, decides. The file is never deleted,
because deleting it would let a third process lock a new file while a second still holds
the old one.

    <data-dir>/run/up.lock     `airlock up` (the supervisor), for its whole life
    <data-dir>/broker.lock     the broker, before it binds a port, whoever started it

The data dir may be writable by others (the compose lab's ./airlock-data is the services'
too): a lock file is opened without following a link, inside a folder opened without
following one either, and made 0600. The pid is written only into a regular file of this
user's with no other name (a hard link planted to one of this user's files is locked, not
written). A failure to write the hint (a full disk) is no reason to refuse: the lock is held.

`die_with_parent` is the other half of "one stack per data dir": children of `airlock up`
call it first (ops.lifeline), so a supervisor killed with -9 leaves no orphan serving
beside the next stack.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import signal
import stat
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from airlock import files
from airlock.errors import ConfigError, LockHeld

UP_LOCK = Path("run") / "up.lock"
BROKER_LOCK = Path("broker.lock")
HINT_BYTES = 32
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
# A lock found held is tried again a few times before it is refused: holder() probes with a
# shared lock for a moment, and a broker starting at that instant must not exit 78 (LockHeld),
# which the supervisor takes as a configuration refusal and stops the whole stack for.
HOLD_TRIES = 5
HOLD_RETRY_S = 0.05  # between tries: a probe is far shorter, a real holder far longer
ORPHAN_POLL_S = 1.0  # where the kernel cannot signal a parent's death, how often a child looks


class Held:
    """A held lock; `release()` (or leaving the `with` block, or dying) gives it up."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path, self._fd = path, fd
        info = os.fstat(fd)
        self._identity = (info.st_dev, info.st_ino)

    def lost(self) -> str:
        """"" while `path` still names the locked file; else why the lock no longer guards: a
        lock file deleted or replaced lets another process lock a new file of that name."""
        try:
            now = os.stat(self.path)
        except FileNotFoundError:
            now = None
        if now is None or (now.st_dev, now.st_ino) != self._identity:
            return f"{self.path.name} (a lock) was deleted or replaced: another process could take it"
        return ""

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # the only descriptor: closing it drops the lock
            self._fd = -1

    close = release  # a Held is closed like the files opened beside it

    def __enter__(self) -> Held:
        return self

    def __exit__(self, *_: object) -> None:
        self.release()


def hold(path: Path, what: str, advice: str = "stop it first", own_folder: bool = False) -> Held:
    """Lock `path` for `what` (e.g. "airlock up"), or raise LockHeld naming the holder and
    the `advice`. `own_folder`: the folder must be this user's and not a link (run/, which
    `airlock up` makes; the data dir itself may be a link, and the compose lab's services'
    user may own it).

    ConfigError if the lock file or its folder is a link or another user's (someone else
    writes this data dir); an OSError of the disk (ENOSPC, EIO) propagates as itself: the
    caller may retry later, when a ConfigError would stop it for good."""
    files.make_folder(path.parent)
    while True:
        fd = _open(path, own_folder)
        try:
            _flock_after_probes(fd)
        except BlockingIOError:
            holder = _hint(fd)
            os.close(fd)
            raise LockHeld(path, what, holder, advice) from None
        except BaseException:
            os.close(fd)
            raise
        held = Held(path, fd)
        if not held.lost():
            break
        held.release()  # locked a file deleted meanwhile: lock the one the path names now
    _write_hint(fd)
    return held


def _flock_after_probes(fd: int) -> None:
    """The exclusive lock without blocking, tried HOLD_TRIES times HOLD_RETRY_S apart so a
    momentary probe (holder()) is waited out; BlockingIOError if it stays held."""
    for attempt in range(HOLD_TRIES):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if attempt == HOLD_TRIES - 1:
                raise
            time.sleep(HOLD_RETRY_S)


@contextlib.contextmanager
def one_stack(data_dir: Path) -> Iterator[Held]:
    """`airlock up`'s lock on `data_dir` while the block runs: LockHeld if another stack's
    supervisor holds it, ConfigError (one line, exit 78) if it cannot be taken at all."""
    path = data_dir / UP_LOCK
    try:
        held = hold(path, "airlock up", f"stop it first, or pass another --data-dir than {data_dir.resolve()}",
                    own_folder=True)
    except OSError as exc:
        raise ConfigError(f"cannot lock {path}: {exc.strerror} "
                          f"(is the data dir writable by uid {os.getuid()}?)") from None
    with held:
        yield held


def holder(path: Path) -> int | None:
    """Whether `path` is held now: the holder's pid, 0 if held by a pid it does not name,
    None if free. A probe (`airlock up` asking whether a broker an earlier stack left still
    runs): it holds a shared lock for a moment, which hold() waits out (HOLD_TRIES)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None  # no file (or a link): no holder of ours
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _hint(fd) or 0
    finally:
        os.close(fd)
    return None


def _open(path: Path, own_folder: bool) -> int:
    """A descriptor on the regular file `path`, made 0600 if missing, not through a link."""
    nofollow = os.O_NOFOLLOW if own_folder else 0
    try:
        folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | nofollow | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise ConfigError(f"cannot lock {path}: {path.parent} is not a folder of uid {os.getuid()}: "
                              "a link, or not a folder") from None
        raise
    try:
        if own_folder:
            _check(folder, path.parent, stat.S_ISDIR, "folder")
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
        try:
            fd = os.open(path.name, flags, files.PRIVATE_FILE, dir_fd=folder)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise ConfigError(f"cannot lock {path}: a link (remove it if you did not make it)") from None
            if exc.errno != errno.EACCES:
                raise
            # Another user's file we may read (a lab's group): flock needs no write access.
            fd = os.open(path.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder)
    finally:
        os.close(folder)
    try:
        _check(fd, path, stat.S_ISREG, "file")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _check(fd: int, path: Path, is_kind: Callable[[int], bool], kind: str) -> None:
    info = os.fstat(fd)
    if not is_kind(info.st_mode):
        raise ConfigError(f"cannot lock {path}: not a regular {kind} (remove it if you did not make it)")
    if kind == "folder" and info.st_uid != os.getuid():
        raise ConfigError(f"cannot lock {path}: {path} is not a folder of uid {os.getuid()}: owned by uid "
                          f"{info.st_uid} (remove it if you did not make it)")


def _hint(fd: int) -> int | None:
    try:
        text = os.pread(fd, HINT_BYTES, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _write_hint(fd: int) -> None:
    """This pid into the lock file, only if it is this user's with no second name."""
    info = os.fstat(fd)
    if info.st_uid != os.getuid() or info.st_nlink != 1:
        return
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except OSError:  # read-only (another's file) or a full disk: the lock is held all the same
        pass


# --- children that die with their parent ---------------------------------------------------

def die_with_parent(parent: int) -> str:
    """Arrange for this process to be killed when `parent` (the supervisor) dies; how, in
    words. Linux: the kernel's parent-death signal (SIGKILL: every service survives a kill
    -9 by design, and a parent that died cannot stop its children in order anyway). If the
    parent died before this ran, exit now: the signal would never come. Elsewhere: a thread
    that looks for a new parent every ORPHAN_POLL_S and kills this process when it sees one.
    The kernel's signal comes when the *thread* that started this process ends: the
    supervisor starts every child from the one thread that runs it, which ends only after
    it has stopped them."""
    if os.getppid() != parent:
        os._exit(1)  # the parent died before we were told to die with it
    if _parent_death_signal(signal.SIGKILL):
        if os.getppid() != parent:  # it died between the check and the prctl: no signal will come
            os._exit(1)
        return "the kernel's parent-death signal"
    threading.Thread(target=_watch_parent, args=(parent,), name="orphan-watch", daemon=True).start()
    return f"a check for a new parent every {ORPHAN_POLL_S:g} s"


def _parent_death_signal(number: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):  # not Linux (no prctl): the caller falls back
        return False
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    return prctl(PR_SET_PDEATHSIG, number, 0, 0, 0) == 0


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(ORPHAN_POLL_S)
    os.kill(os.getpid(), signal.SIGKILL)
