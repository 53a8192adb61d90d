"""The boundaries a student's code runs behind, applied by the process that will run it.

Every place a student's function runs (a lab's grader, `airlock lab run`, the in-stack plug
points of the validator and the actor) goes through airlock.student, whose child calls
`confine` on itself after Python has started and before the student's file is read. What
it can apply depends on the kernel, so it returns what is in force, in words, and the check's
output prints them:

    landlock   reads: Python's own files, the project's packages and the student's files;
               writes: its private workspace and /dev/null. No keys, no data folders, no
               other student's files, nothing under /proc (another process's environment).
               Landlock also keeps it from ptrace-ing anything outside its own domain.
    seccomp    no socket of any kind (no network, no local services); no signal to any
               process but itself; no ptrace, no reading another process's memory, no new
               namespaces, mounts, keyrings, BPF or io_uring; no keystrokes pushed into the
               terminal its standard error may be.
    rlimits    CPU seconds, address space, largest file written, no core file.

The fourth boundary, every descendant killed when the student's process ends, is the
warden's (airlock.warden): a subreaper the student's processes cannot signal.

The kernel refuses quietly: an open() that Landlock denies is a PermissionError the student's
code may catch and go on from, and nobody would know it tried. So `Watch` also listens to
Python's audit events for the same rules and remembers the first attempt to reach past
them (a file outside what it may read or write, a socket, a signal to another process, a
program to run); the child reports it with the call's answer, and the answer does not count.
The kernel's boundaries are the wall; the watch is how an attempt gets a name.

Data: the workspace and readable paths the caller names, and sys.path.
Rationale: each boundary is the kernel's, reached through kept libraries (`landlock`,
`pyseccomp`); where the kernel or the platform lacks one, confine says so rather than
pretending, and the others still hold.
"""

from __future__ import annotations

import errno
import importlib.util
import os
import resource
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Packages whose code a student's file may import (the lesson's types live there). Listed,
# so that the folder holding them (a clone, with its keys folder and the students' runs)
# is not readable as a whole.
PROJECT_PACKAGES = ("airlock", "actor", "validator", "reader", "broker", "intake", "lab")
DEVICES_READ = ("/dev/urandom", "/dev/random", "/dev/zero")
TIOCSTI, TIOCLINUX = 0x5412, 0x541C  # ioctl requests that put keystrokes into a terminal
DEVICES_WRITE = ("/dev/null",)


@dataclass(frozen=True)
class Limits:
    """The student's process's resource caps (rlimits)."""

    cpu_s: int = 60
    memory_bytes: int = 1024**3
    file_bytes: int = 64 * 1024**2
    open_files: int = 256


@dataclass(frozen=True)
class Confinement:
    """What confine applied: one line per boundary in force, one per boundary missing."""

    applied: tuple[str, ...]
    missing: tuple[str, ...]

    def describe(self) -> str:
        text = "; ".join(self.applied) or "none"
        return f"{text}; not in force: {'; '.join(self.missing)}" if self.missing else text


def confine(workspace: Path, readable: Iterable[Path], limits: Limits = Limits()) -> Confinement:
    """Apply every boundary this platform offers to the calling process, for good."""
    applied, missing = [], []
    seccomp = _seccomp_library()  # before Landlock: finding libseccomp reads the loader's cache
    _rlimits(limits)
    applied.append(f"rlimits (cpu {limits.cpu_s} s, memory {limits.memory_bytes // 1024**2} MiB, "
                   f"files {limits.file_bytes // 1024**2} MiB)")
    for name, apply in (("landlock", lambda: _landlock(workspace, readable)), ("seccomp", lambda: _seccomp(seccomp))):
        try:
            applied.append(apply())
        except _Unavailable as exc:
            missing.append(f"{name}: {exc}")
    return Confinement(tuple(applied), tuple(missing))


class _Unavailable(Exception):
    """A boundary this kernel or platform cannot give (the reason, in words)."""


def _rlimits(limits: Limits) -> None:
    for which, wanted in ((resource.RLIMIT_CPU, limits.cpu_s), (resource.RLIMIT_AS, limits.memory_bytes),
                          (resource.RLIMIT_FSIZE, limits.file_bytes), (resource.RLIMIT_CORE, 0),
                          (resource.RLIMIT_NOFILE, limits.open_files)):
        _, hard = resource.getrlimit(which)
        soft = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        # the hard limit too, so the student's code cannot raise its own caps again; for
        # CPU one second above, so SIGXCPU (catchable) comes before SIGKILL
        ceiling = soft + 1 if which == resource.RLIMIT_CPU and (hard == resource.RLIM_INFINITY or soft < hard) else soft
        resource.setrlimit(which, (soft, ceiling))


def python_paths() -> list[Path]:
    """What the interpreter reads to import a module: the standard library and the
    installed packages, and of this project only its packages' own folders."""
    paths = {Path(sys.base_prefix), Path(sys.prefix), Path(sys.executable).resolve().parent}
    project = {str(Path(p).resolve()) for p in _project_roots()}
    for entry in sys.path:
        if entry and Path(entry).is_dir() and str(Path(entry).resolve()) not in project:
            paths.add(Path(entry))
    for package in PROJECT_PACKAGES:
        spec = importlib.util.find_spec(package)
        for location in (spec.submodule_search_locations or []) if spec else []:
            paths.add(Path(location))
    return sorted(paths)


def narrow_import_path() -> None:
    """Keep on sys.path only the folders Landlock will let the interpreter read: the
    project's packages are imported by then and find their modules through their own
    __path__, and a folder it may not list (the project's root) would only be refused."""
    allowed = [str(p.resolve()) for p in python_paths()]
    sys.path[:] = [entry for entry in sys.path if entry and _inside(str(Path(entry).resolve()), allowed)]


def _inside(path: str, roots: Iterable[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def _project_roots() -> list[Path]:
    roots = []
    for package in PROJECT_PACKAGES:
        spec = importlib.util.find_spec(package)
        for location in (spec.submodule_search_locations or []) if spec else []:
            roots.append(Path(location).resolve().parent)
    return roots


def _landlock(workspace: Path, readable: Iterable[Path]) -> str:
    if not sys.platform.startswith("linux"):
        raise _Unavailable(f"Linux only (this is {sys.platform})")
    try:
        import landlock  # type: ignore[import-untyped]  # the package ships no type information
        from landlock.plumbing import FSAccess, landlock_abi_version  # type: ignore[import-untyped]  # as above
    except ImportError as exc:
        raise _Unavailable(f"the landlock package is not installed ({exc})") from None
    try:
        abi = landlock_abi_version()
        ruleset = landlock.Ruleset()
        read_dir = FSAccess.READ_FILE | FSAccess.READ_DIR
        for path in python_paths():
            ruleset.allow(path, rules=read_dir)
        for path in readable:
            ruleset.allow(path, rules=read_dir if path.is_dir() else FSAccess.READ_FILE)
        for device in DEVICES_READ:
            if os.path.exists(device):
                ruleset.allow(device, rules=FSAccess.READ_FILE)
        for device in DEVICES_WRITE:
            if os.path.exists(device):
                ruleset.allow(device, rules=FSAccess.READ_FILE | FSAccess.WRITE_FILE)
        ruleset.allow(workspace, rules=FSAccess.all())
        ruleset.apply()
    except OSError as exc:  # landlock.SyscallError: a kernel without it, or a seccomp profile refusing it
        raise _Unavailable(f"the kernel refused it ({os.strerror(exc.errno) if exc.errno else exc})") from None
    except landlock.LandlockError as exc:
        raise _Unavailable(str(exc)) from None
    return f"landlock ABI {abi} (reads: Python and the student's files; writes: its workspace)"


# Each of these reaches outside the process: another process's memory or signals, the
# kernel's namespaces, mounts and keyrings, or an interface that bypasses the rest.
_DENIED_SYSCALLS = (
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_open", "pidfd_getfd", "pidfd_send_signal",
    "mount", "umount2", "pivot_root", "chroot", "unshare", "setns", "bpf", "perf_event_open", "keyctl", "add_key",
    "request_key", "kexec_load", "init_module", "finit_module", "delete_module", "io_uring_setup",
    "userfaultfd", "open_by_handle_at", "name_to_handle_at", "swapon", "swapoff", "reboot",
)


def _seccomp_library() -> Any:
    """pyseccomp, or the reason it cannot be had, as text."""
    if not sys.platform.startswith("linux"):
        return f"Linux only (this is {sys.platform})"
    try:
        import pyseccomp  # type: ignore[import-untyped]  # the package ships no type information
    except (ImportError, OSError, RuntimeError) as exc:  # RuntimeError: libseccomp itself is missing
        return f"pyseccomp or libseccomp is not installed ({exc})"
    return pyseccomp


def _seccomp(seccomp: Any) -> str:
    if isinstance(seccomp, str):
        raise _Unavailable(seccomp)
    me = os.getpid()
    try:
        rules = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
        rules.add_rule(seccomp.ERRNO(errno.EACCES), "socket")
        for name in _DENIED_SYSCALLS:
            try:
                rules.add_rule(seccomp.ERRNO(errno.EPERM), name)
            except (RuntimeError, ValueError, OSError):  # a syscall this architecture does not have
                continue
        # a signal only to itself: never to the warden, the grader, a service or another user's process
        for name in ("kill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo"):
            rules.add_rule(seccomp.ERRNO(errno.EPERM), name, seccomp.Arg(0, seccomp.NE, me))
        rules.add_rule(seccomp.ERRNO(errno.EPERM), "tkill")
        # typing into the terminal the service or the grader inherited (its stderr)
        for request in (TIOCSTI, TIOCLINUX):
            rules.add_rule(seccomp.ERRNO(errno.EPERM), "ioctl", seccomp.Arg(1, seccomp.EQ, request))
        rules.load()
    except (RuntimeError, ValueError, OSError) as exc:
        raise _Unavailable(f"the filter could not be loaded ({exc})") from None
    return "seccomp (no sockets, no signals but to itself, no ptrace, namespaces or mounts)"


class Watch:
    """The first attempt of the student's code to reach past its boundaries, by Python's
    audit events (sys.addaudithook: it cannot be removed once added)."""

    def __init__(self, workspace: Path, readable: Iterable[Path]) -> None:
        self._write = (str(workspace.resolve()),)
        files = list(readable)
        # the loader looks for a cached .pyc beside each file it reads, and may be refused
        caches = [Path(importlib.util.cache_from_source(str(p))) for p in files if p.suffix == ".py"]
        reads = [str(p.resolve()) for p in (*python_paths(), *files, *caches)]
        self._read = (*self._write, *reads, *DEVICES_READ, *DEVICES_WRITE)
        self._me = os.getpid()
        self.attempt: str | None = None

    def install(self) -> None:
        sys.addaudithook(self._event)

    def take(self) -> str | None:
        attempt, self.attempt = self.attempt, None
        return attempt

    def _event(self, event: str, args: tuple[object, ...]) -> None:
        if event == "open":
            self._opening(args)
        elif event in ("os.listdir", "os.scandir") and args and isinstance(args[0], str | bytes | os.PathLike):
            self._check(os.fsdecode(args[0]) or ".", write=False, what="list")
        elif event in ("socket.__new__", "socket.socket"):
            self._refuse("open a socket")
        elif event == "os.kill" and args and args[0] != self._me:
            self._refuse(f"send a signal to process {args[0]}")
        elif event in ("os.exec", "os.posix_spawn", "os.spawn", "subprocess.Popen", "os.system"):
            self._refuse(f"run a program ({_short(args[0] if args else '?')})")

    def _opening(self, args: tuple[object, ...]) -> None:
        path, mode, flags = (list(args) + [None, None, None])[:3]
        if not isinstance(path, str | bytes | os.PathLike):
            return  # an open file descriptor: already the student's
        writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or \
            (isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND) != 0)
        self._check(os.fsdecode(path), write=writing, what="write" if writing else "read")

    def _check(self, path: str, *, write: bool, what: str) -> None:
        if _inside(os.path.realpath(path), self._write if write else self._read):
            return
        self._refuse(f"{what} {_short(path)}")

    def _refuse(self, what: str) -> None:
        if self.attempt is None:
            self.attempt = what
        raise PermissionError(f"the sandbox refuses to {what}")


def _short(value: object, limit: int = 120) -> str:
    text = repr(os.fsdecode(value) if isinstance(value, str | bytes | os.PathLike) else value)
    return text if len(text) <= limit else text[:limit] + "…"
