"""The warden: a subreaper between a service (or a grader) and a student's process.

A student's code may fork, double-fork, call setsid() and leave the process group: killing
the group then misses what it started. So the student's process is started by a warden,
a small process of the project's own that has not loaded the student's file and runs
behind no sandbox. It marks itself a child subreaper (prctl PR_SET_CHILD_SUBREAPER), so
whatever the student's processes orphan is re-parented to it, not to init; when the
student's process ends, or the lifeline from its parent closes (the parent stopped the
code, or died), the warden kills every descendant it has, reaps them, and exits with the
student's process's own ending: its exit code, or the same signal.

The student's processes cannot signal the warden: seccomp lets them signal only
themselves (studentcode.sandbox).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import select
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

PR_SET_CHILD_SUBREAPER = 36
POLL_S = 0.05  # how often the warden looks for its child's end between lifeline reads
LAST_WORD_S = 0.1
MAX_KILL_ROUNDS = 10_000  # every round kills a whole generation; a fork bomb ends in a few


def become_subreaper() -> bool:
    """Mark this process a child subreaper; False where the platform has no such thing."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def run(student: Callable[[], None], lifeline: int) -> NoReturn:
    """In the warden: fork the student's process running `student()`, watch it, clean up,
    and end as it ended. Standard input and output are the student's alone: the warden lets
    go of them, so the parent sees end-of-file as soon as the student's process is gone."""
    pid = os.fork()
    if pid == 0:
        os.close(lifeline)
        code = 0
        try:
            student()
        except BaseException:  # noqa: BLE001 (whatever escaped the serve loop ends only this process)
            code = 70
        os._exit(code)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # ending on SIGSEGV as the student did writes no core
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    status = _watch(pid, lifeline)
    kill_descendants()
    _end_as(status)


class _Stop(Exception):
    pass


def _stop(signum: int, frame: object) -> None:
    raise _Stop


def _watch(pid: int, lifeline: int) -> int | None:
    """The student's process's wait status, or None when the parent let go first."""
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C reaches the parent, which stops us
    try:
        while True:
            for child, status in _reaped():
                if child == pid:
                    return status
            if select.select([lifeline], [], [], POLL_S)[0]:
                return _last_word(pid)
    except _Stop:
        return None


def _last_word(pid: int) -> int | None:
    """The parent let go, often because it saw the student's process close its pipes while
    ending: give that ending a moment to be reaped, so it is reported as it was."""
    deadline = time.monotonic() + LAST_WORD_S
    while time.monotonic() < deadline:
        for child, status in _reaped():
            if child == pid:
                return status
        time.sleep(POLL_S / 5)
    return None


def _reaped() -> list[tuple[int, int]]:
    ended: list[tuple[int, int]] = []
    while True:
        try:
            child, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return ended
        if child == 0:
            return ended
        ended.append((child, status))


def children(pid: int) -> set[int]:
    """The live children of `pid`, from /proc (every thread's children list)."""
    found: set[int] = set()
    tasks = Path(f"/proc/{pid}/task")
    try:
        for task in tasks.iterdir():
            with contextlib.suppress(OSError):
                found.update(int(word) for word in (task / "children").read_text().split())
        return found
    except OSError:
        return found


def kill_descendants() -> None:
    """SIGKILL every child, reap it, and again, until none is left: each killed process's
    own children are re-parented here, so every generation is met in turn."""
    me = os.getpid()
    for _ in range(MAX_KILL_ROUNDS):
        alive = children(me)
        if not alive:
            _reaped()
            return
        for child in alive:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)
        for child in alive:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(child, 0)


def _end_as(status: int | None) -> NoReturn:
    """Exit as the student's process did: the same exit code, or the same signal."""
    if status is None:
        os._exit(0)
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        with contextlib.suppress(OSError, ValueError):
            signal.signal(number, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [number])
            os.kill(os.getpid(), number)
        os._exit(128 + number)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 70)


def describe_ending(code: int | None) -> str:
    """A process's return code as Popen gives it, in words: real-time signals included."""
    if code is None:
        return "it was stopped"
    if code >= 0:
        return f"exit code {code}"
    return f"signal {signal_name(-code)}"


def signal_name(number: int) -> str:
    """SIGKILL, SIGRTMIN+6, or "signal 99": never an exception for a number Signals lacks."""
    try:
        return signal.Signals(number).name
    except ValueError:
        pass
    low, high = getattr(signal, "SIGRTMIN", 0), getattr(signal, "SIGRTMAX", -1)
    if low <= number <= high:
        return f"SIGRTMIN+{number - low}"
    return str(number)
