"""The boundaries a student's code runs behind, applied by the process that will run it.

Every place a student's function runs (a lab's grader, `airlock lab run`, the in-stack plug
points of the validator and the actor) goes through studentcode.student, whose child calls
`confine` on itself after Python has started and before the student's file is read. What
it can apply depends on the kernel, so it returns what is in force, in words, and the check's
output prints them:

    landlock   reads: Python's own files, the project's packages, the system's shared
               libraries and the student's files;
               writes: its private workspace and /dev/null. No keys, no data folders, no
               other student's files, nothing under /proc (another process's environment).
               Landlock also keeps it from ptrace-ing anything outside its own domain.
    seccomp    no socket of any kind (no network, no local services); no signal to any
               process but itself, by kill or by a file's owner (F_SETOWN); no other process's
               limits, priority or CPUs; no program run (execve); no ptrace, no reading
               another process's memory, no new namespaces, mounts, keyrings, BPF or
               io_uring; no keystrokes pushed into the terminal its standard error may be.
    rlimits    CPU seconds, address space, largest file written, no core file.

The fourth boundary, every descendant killed when the student's process ends, is the
warden's (studentcode.warden): a subreaper the student's processes cannot signal.

The kernel refuses quietly: an open() that Landlock denies is a PermissionError the student's
code may catch and go on from, and nobody would know it tried. So `watch` also listens to
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

import contextlib
import errno
import importlib.util
import os
import resource
import site
import sys
import sysconfig
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Packages whose code a student's file may import (the lesson's types live there). Listed,
# so that the folder holding them (a clone, with its keys folder and the students' runs)
# is not readable as a whole.
PROJECT_PACKAGES = ("airlock", "studentcode", "actor", "validator", "reader", "broker", "intake", "lab", "course",
                    "harness", "redteam", "bench", "ops", "cli")
DEVICES_READ = ("/dev/urandom", "/dev/random", "/dev/zero")
# Shared libraries a C extension loads (numpy's libstdc++) and the loader's cache: code, no secrets.
SYSTEM_LIBRARIES = ("/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local/lib", "/etc/ld.so.cache")
TIOCSTI, TIOCLINUX = 0x5412, 0x541C  # ioctl requests that put keystrokes into a terminal
F_SETOWN, F_SETSIG, F_SETOWN_EX = 8, 10, 15  # fcntl commands that aim signals at a process
_WRITING_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
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
    """What the interpreter reads to import a module: the standard library, the installed
    packages, and of this project only its packages' own folders. Never another entry of
    sys.path (a caller's PYTHONPATH, a script's folder), which may hold anything."""
    paths = set()
    for name in ("stdlib", "platstdlib", "purelib", "platlib"):
        with contextlib.suppress(KeyError):
            paths.add(Path(sysconfig.get_paths()[name]))
    paths.update(Path(p) for p in site.getsitepackages())
    for package in PROJECT_PACKAGES:
        spec = importlib.util.find_spec(package)
        for location in (spec.submodule_search_locations or []) if spec else []:
            paths.add(Path(location))
    return sorted(p for p in paths if p.is_dir())


def narrow_import_path() -> None:
    """Keep on sys.path only the folders Landlock will let the interpreter read: the
    project's packages are imported by then and find their modules through their own
    __path__, and a folder it may not list (the project's root) would only be refused."""
    allowed = [str(p.resolve()) for p in python_paths()]
    sys.path[:] = [entry for entry in sys.path if entry and _inside(str(Path(entry).resolve()), allowed)]


def _inside(path: str, roots: Iterable[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


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
        for system in (*DEVICES_READ, *SYSTEM_LIBRARIES):
            if os.path.exists(system):
                ruleset.allow(system, rules=read_dir if os.path.isdir(system) else FSAccess.READ_FILE)
        for device in DEVICES_WRITE:
            if os.path.exists(device):
                ruleset.allow(device, rules=FSAccess.READ_FILE | FSAccess.WRITE_FILE)
        # no program of its own to run, no device node to make: a raw disk is one mknod away for root
        ruleset.allow(workspace, rules=FSAccess.all() & ~(FSAccess.EXECUTE | FSAccess.MAKE_BLOCK | FSAccess.MAKE_CHAR))
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
        # a signal by other means: a file's owner gets SIGIO (or any signal, F_SETSIG) on I/O
        for command in (F_SETOWN, F_SETSIG, F_SETOWN_EX):
            rules.add_rule(seccomp.ERRNO(errno.EPERM), "fcntl", seccomp.Arg(1, seccomp.EQ, command))
        # another process's limits, priority or CPUs: only its own (pid 0)
        for name, argument in (("prlimit64", 0), ("sched_setaffinity", 0), ("sched_setscheduler", 0),
                               ("sched_setparam", 0), ("sched_setattr", 0), ("setpriority", 1), ("ioprio_set", 1)):
            rules.add_rule(seccomp.ERRNO(errno.EPERM), name, seccomp.Arg(argument, seccomp.NE, 0))
        for name in ("execve", "execveat"):  # no program at all, its own or the system's
            rules.add_rule(seccomp.ERRNO(errno.EPERM), name)
        # typing into the terminal the service or the grader inherited (its stderr)
        for request in (TIOCSTI, TIOCLINUX):
            rules.add_rule(seccomp.ERRNO(errno.EPERM), "ioctl", seccomp.Arg(1, seccomp.EQ, request))
        rules.load()
    except (RuntimeError, ValueError, OSError) as exc:
        raise _Unavailable(f"the filter could not be loaded ({exc})") from None
    return "seccomp (no sockets, no programs, no signals or limits but its own, no ptrace, namespaces or mounts)"


def watch(workspace: Path, readable: Iterable[Path]) -> Callable[[], str | None]:
    """Add the audit hook (it cannot be removed once added) and return `take`: the first
    attempt since the last take, or None. The hook's state lives in this closure, not on an
    object a student's code could patch; a deliberate attack on the interpreter can still
    silence it, never the kernel's walls behind it."""
    files = list(readable)
    # the loader looks for a cached .pyc beside each file it reads, and may be refused
    caches = [Path(importlib.util.cache_from_source(str(p))) for p in files if p.suffix == ".py"]
    write_roots = (str(workspace.resolve()),)
    read_roots = (*write_roots, *(str(p.resolve()) for p in (*python_paths(), *files, *caches)),
                  *DEVICES_READ, *DEVICES_WRITE, *(os.path.realpath(p) for p in SYSTEM_LIBRARIES))
    me, attempts = os.getpid(), list[str]()
    # bound now: the student's code may replace the module's names, not these cells
    inside, short, realpath, fsdecode, path_like = _inside, _short, os.path.realpath, os.fsdecode, os.PathLike

    def refuse(what: str) -> None:
        if not attempts:
            attempts.append(what)
        raise PermissionError(f"the sandbox refuses to {what}")

    def check(path: str, *, write: bool, what: str) -> None:
        if not inside(realpath(path), write_roots if write else read_roots):
            refuse(f"{what} {short(path)}")

    def event(name: str, args: tuple[object, ...]) -> None:
        if name == "open" and args and isinstance(args[0], str | bytes | path_like):
            mode, flags = (list(args[1:]) + [None, None])[:2]
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or \
                (isinstance(flags, int) and flags & _WRITING_FLAGS != 0)
            check(fsdecode(args[0]), write=writing, what="write" if writing else "read")
        elif name in ("os.listdir", "os.scandir") and args and isinstance(args[0], str | bytes | path_like):
            check(fsdecode(args[0]) or ".", write=False, what="list")
        elif name in ("socket.__new__", "socket.socket"):
            refuse("open a socket")
        elif name == "os.kill" and args and args[0] != me:
            refuse(f"send a signal to process {args[0]}")
        elif name in ("os.exec", "os.posix_spawn", "os.spawn", "subprocess.Popen", "os.system"):
            refuse(f"run a program ({short(args[0] if args else '?')})")
        elif name in ("gc.get_objects", "gc.get_referrers", "gc.get_referents"):
            refuse("search the interpreter's objects")

    def take() -> str | None:
        attempt = attempts[0] if attempts else None
        attempts.clear()
        return attempt

    sys.addaudithook(event)
    return take


def _short(value: object, limit: int = 120) -> str:
    text = repr(os.fsdecode(value) if isinstance(value, str | bytes | os.PathLike) else value)
    return text if len(text) <= limit else text[:limit] + "…"
