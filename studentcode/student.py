"""A student's functions, run in a confined child process under a deadline.

A lab replaces one piece of one service with a student's code (the validator's check, the
actor's tool selection, its checks before a side effect, its precondition decision), and a
lab's grader calls a student's functions on cases. That code is the student's, not the
project's: it may hang, crash, print, exit, eat memory, or be written to attack whoever runs
it. So it never runs in the service's or the grader's own process. A warden process starts
the student's process (studentcode.student_child), which confines itself (studentcode.sandbox:
Landlock, seccomp, rlimits) before it reads the file, and kills every descendant when it
ends (studentcode.warden). The caller waits at most `timeout_s` per call, then stops the child
and starts a new one for the next call. Whatever went wrong is a StudentFailed value,
never an exception.

Arguments go to the child pickled (they are the caller's own values); a callable among them
stays here and runs here when the student's code calls it (its stub in the child sends the
call back). Results come back as msgpack, so only plain data crosses back and the caller
never unpickles anything the student made: in "plain" mode (the services) dataclasses and
Structs arrive as maps; in "shapes" mode (the graders) tuples, sets and objects keep their
shape (studentcode.shapes). The child gets none of the caller's environment (no keys folder, no
data dir), a private workspace as its only writable folder, and its own session.

None of the caller's descriptors either: the child's stderr (where its print goes) is a pipe
of its own, read here by a thread that writes at most PRINTED_LIMIT_BYTES of it to the
caller's stderr, each line marked as the student's and escaped (airlock.terminal), or as
printed where the caller's stderr is itself read and escaped by another process (a grader's,
by the lab runner). So a student's code never writes into a file or terminal its grader
writes to, and cannot flood or recolour it.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import pickle
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import msgspec

from airlock import terminal
from studentcode import sandbox, shapes, warden

START_TIMEOUT_S = 20.0  # interpreter start and the file's import; not counted per call
MAX_REPLY_BYTES = 1024 * 1024  # one answer of the student's; larger is a typed failure
MEMORY_LIMIT_BYTES = 1024 * 1024 * 1024  # the child's address space: a runaway list dies, not the host
MAX_CALLBACKS_RUNNING = 32  # the caller's threads a student's code can keep busy at once
STOP_GRACE_S = 2.0  # the warden's time to kill the student's processes before its session is killed
PRINTED_LIMIT_BYTES = 256 * 1024  # a child's printed output passed on; the rest is read and dropped
PRINTED_LINE_CHARS = 4000  # a longer line is passed on in pieces
DETAIL_LIMIT_CHARS = 300
MESSAGE_LIMIT_CHARS = 2000  # a raised exception's message, as the child cuts it: a forged frame is cut here
_HEADER = struct.Struct(">I")
# A function of these packages (a grader's helper) passed to the student's code runs here, in the caller.
CALLER_PACKAGES = ("lab.", "course.", "harness.", "redteam.", "bench.", "ops.", "cli.")

Mode = Literal["plain", "shapes"]
Kind = Literal["todo", "raised", "timeout", "crashed", "not_plain_data", "too_large", "unloadable", "missing",
               "sandbox"]


class StudentFailed(msgspec.Struct, frozen=True):
    """The student's function gave no usable answer: why, in the student's terms."""

    function: str
    kind: Kind
    detail: str
    exception: str = ""  # "raised" in shapes mode: the exception's class name and its message
    message: str = ""

    def describe(self) -> str:
        return f"your {self.function}() {_KIND_WORDS[self.kind]}: {self.detail}" if self.detail else \
            f"your {self.function}() {_KIND_WORDS[self.kind]}"


_KIND_WORDS: dict[str, str] = {
    "todo": "is still a TODO (raises NotImplementedError)",
    "raised": "raised an exception",
    "timeout": "did not return in time",
    "crashed": "ended its process",
    "not_plain_data": "returned something that is not plain data",
    "too_large": "returned too much",
    "unloadable": "could not be loaded",
    "missing": "is not defined in your file",
    "sandbox": "tried to reach outside its sandbox, so its answer does not count",
}


class StudentCode:
    """One student's file behind a process boundary. Thread-safe; one call at a time."""

    def __init__(self, path: Path, timeout_s: float = 2.0, *, mode: Mode = "plain",
                 limits: sandbox.Limits | None = None, printed_as_is: bool = False) -> None:
        self.path, self.timeout_s, self.mode = Path(path), timeout_s, mode
        self.printed_as_is = printed_as_is  # the reader of this process's stderr escapes it
        self.limits = limits or sandbox.Limits(memory_bytes=MEMORY_LIMIT_BYTES)
        self.confinement = ""  # what the last child said was in force (studentcode.sandbox)
        self.functions: tuple[str, ...] = ()  # the names the student's file defines as functions
        self._child: _Child | None = None
        self._lock = threading.Lock()
        self._references: list[tuple[list[str], Path]] = []
        self._callables: list[Callable[..., Any]] = []
        self._callbacks_running = threading.BoundedSemaphore(MAX_CALLBACKS_RUNNING)
        self._decode: Callable[[bytes], Any] = shapes.decode if mode == "shapes" else msgspec.msgpack.Decoder().decode

    def load(self) -> list[str] | StudentFailed:
        """Start the child now (if it is not running): the names of the file's functions,
        or why it cannot be loaded."""
        with self._lock:
            child = self._child or self._start("the file")
            return child if isinstance(child, StudentFailed) else list(self.functions)

    def use_reference(self, names: list[str], reference: Path) -> None:
        """From the next start on, the child puts these functions of `reference` (the
        project's own solution) in place of the student's."""
        with self._lock:
            self._references.append((list(names), Path(reference).resolve()))
            self._stop()

    def call(self, function: str, *args: Any) -> Any | StudentFailed:
        with self._lock:
            child = self._child or self._start(function)
            if isinstance(child, StudentFailed):
                return child
            try:
                deadline = time.monotonic() + self.timeout_s
                child.send(self._pickled(("call", function, args)), deadline)
                while True:
                    kind, value = self._message(_receive(child.process, deadline))
                    if kind != "callback":
                        break
                    self._call_back(child, value)
            except _Timeout:
                self._stop()
                return StudentFailed(function, "timeout", f"no answer within {self.timeout_s:g} s; it was stopped")
            except _TooLarge as exc:
                self._stop()
                return StudentFailed(function, "too_large", str(exc))
            except (_Ended, OSError):
                code = self._stop()
                return StudentFailed(function, "crashed", warden.describe_ending(code))
            except _Garbled:
                self._stop()
                return StudentFailed(function, "crashed", "its process sent a reply that is not an answer; "
                                                          "it was stopped")
            return self._answer(function, kind, value)

    def _message(self, reply: bytes) -> tuple[str, Any]:
        """One frame from the child, checked: the student's code shares the child with the
        reply pipe and can write anything into it."""
        try:
            message = self._decode(reply)
        except (msgspec.DecodeError, TypeError, ValueError, RecursionError):
            raise _Garbled from None
        if not isinstance(message, list | tuple) or len(message) != 2 or not isinstance(message[0], str):
            raise _Garbled
        return message[0], message[1]

    def _answer(self, function: str, kind: str, value: Any) -> Any | StudentFailed:
        if kind == "ok":
            if self.mode == "plain":
                try:
                    msgspec.json.encode(value)  # plain data: no msgpack extensions, no odd keys
                except (TypeError, ValueError) as exc:
                    return StudentFailed(function, "not_plain_data", _cut(str(exc)))
            return value
        if kind == "raised" and self.mode == "shapes" and isinstance(value, list) and len(value) == 2 \
                and all(isinstance(part, str) for part in value):
            return StudentFailed(function, "raised", _cut(f"{value[0]}: {value[1]}"), exception=value[0][:100],
                                 message=value[1][:MESSAGE_LIMIT_CHARS])
        if kind in _KIND_WORDS and isinstance(value, str):
            return StudentFailed(function, kind, value)  # type: ignore[arg-type]  # kind checked against the words
        self._stop()
        return StudentFailed(function, "crashed", "its process sent a reply that is not an answer; it was stopped")

    def _pickled(self, message: tuple[Any, ...]) -> bytes:
        buffer = io.BytesIO()
        _StubbingPickler(buffer, self._callables).dump(message)
        return buffer.getvalue()

    def _call_back(self, child: _Child, value: Any) -> None:
        """The student's code called one of our callables: run it here, in a thread (the
        student's code may give up waiting, and its answer must still be read), and send
        the result or the exception back."""
        if not (isinstance(value, list) and len(value) == 4 and type(value[0]) is int and type(value[1]) is int
                and isinstance(value[2], list) and isinstance(value[3], dict)
                and 0 <= value[1] < len(self._callables)):
            raise _Garbled
        number, target, args, kwargs = value[0], self._callables[value[1]], value[2], value[3]
        if not self._callbacks_running.acquire(blocking=False):
            raise _Garbled  # a flood of calls back: the child is stopped, not this process

        def run() -> None:
            try:
                self._answer_call_back(child, number, target, args, kwargs)
            finally:
                self._callbacks_running.release()

        threading.Thread(target=run, daemon=True, name=f"student-callback-{number}").start()

    def _answer_call_back(self, child: _Child, number: int, target: Callable[..., Any], args: list[Any],
                          kwargs: dict[str, Any]) -> None:
        try:
            result: tuple[Any, ...] = ("result", number, True, target(*args, **kwargs))
        except Exception as exc:  # noqa: BLE001  the callable's own failure goes to the student's code
            result = ("result", number, False, exc)
        try:
            payload = self._pickled(result)
        except (pickle.PicklingError, TypeError, AttributeError) as exc:
            payload = self._pickled(("result", number, False, RuntimeError(f"{type(exc).__name__}: {exc}")))
        with contextlib.suppress(_Timeout, OSError, ValueError):  # ValueError: the child was stopped meanwhile
            child.send(payload, time.monotonic() + self.timeout_s)

    def _start(self, function: str) -> _Child | StudentFailed:
        # PYTHONPATH is this process's path, so the child imports the same airlock and the
        # service's own modules (a student's file may import the actor's types).
        # Nothing else of the caller's environment: its AIRLOCK_* settings (the keys folder,
        # the data dir) are not the student's business.
        try:
            workspace = Path(tempfile.mkdtemp(prefix="airlock-student-"))
        except OSError as exc:  # no writable temporary folder: the code cannot run, and the caller says why
            return StudentFailed(function, "unloadable", f"no private workspace could be made ({exc.strerror or exc})")
        paths = [entry for entry in sys.path if entry and Path(entry).is_dir()]
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": os.pathsep.join(paths),
               "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0", "HOME": str(workspace),
               "TMPDIR": str(workspace), "LANG": "C.UTF-8",
               # each thread's own 64 MiB arena, or a BLAS thread pool's, would eat the address-space cap
               "MALLOC_ARENA_MAX": "2", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
        lifeline, keep = os.pipe()
        try:
            process = subprocess.Popen(
                [sys.executable, "-P", "-c", "from studentcode.student_child import main; main()", str(self.path),
                 self.mode, str(workspace), str(lifeline), str(self.limits.cpu_s), str(self.limits.memory_bytes),
                 str(self.limits.file_bytes), *[str(reference) for _, reference in self._references]],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=workspace,
                pass_fds=(lifeline,), start_new_session=True)
        finally:
            os.close(lifeline)
        assert process.stderr is not None  # opened with PIPE
        marked = None if self.printed_as_is else self.path.name
        threading.Thread(target=_pass_on_printed, args=(process.stderr, marked), daemon=True,
                         name=f"student-printed-{process.pid}").start()
        child = self._child = _Child(process, keep, workspace)
        started = self._loaded(child, function, time.monotonic() + START_TIMEOUT_S)
        if isinstance(started, StudentFailed):
            return started
        self.confinement, self.functions = started
        for names, reference in self._references:
            child.send(self._pickled(("use_reference", names, str(reference))), time.monotonic() + START_TIMEOUT_S)
            swapped = self._swapped(child, function, time.monotonic() + START_TIMEOUT_S)
            if swapped is not None:
                return swapped
        return child

    def _loaded(self, child: _Child, function: str, deadline: float) -> tuple[str, tuple[str, ...]] | StudentFailed:
        try:
            kind, detail = self._message(_receive(child.process, deadline))
        except (_Timeout, _TooLarge, _Ended, _Garbled, OSError):
            code = self._stop()
            return StudentFailed(function, "unloadable",
                                 f"loading {self.path.name} did not finish ({warden.describe_ending(code)})")
        if kind != "ok":
            self._stop()
            if kind not in _KIND_WORDS or not isinstance(detail, str):
                return StudentFailed(function, "unloadable", f"loading {self.path.name} sent no proper answer")
            return StudentFailed(function, kind, detail)  # type: ignore[arg-type]  # kind checked against the words
        if isinstance(detail, list) and len(detail) == 2 and isinstance(detail[0], str) \
                and isinstance(detail[1], list) and all(isinstance(name, str) for name in detail[1]):
            return detail[0], tuple(detail[1])
        return "", ()

    def _swapped(self, child: _Child, function: str, deadline: float) -> StudentFailed | None:
        try:
            kind, detail = self._message(_receive(child.process, deadline))
        except (_Timeout, _TooLarge, _Ended, _Garbled, OSError):
            code = self._stop()
            return StudentFailed(function, "unloadable", f"the reference did not load ({warden.describe_ending(code)})")
        if kind != "ok":
            self._stop()
            return StudentFailed(function, "unloadable", f"the reference did not load: {detail!r}")
        return None

    def _stop(self) -> int | None:
        child, self._child = self._child, None
        return child.stop() if child is not None else None

    def close(self) -> None:
        with self._lock:
            self._stop()


class _Child:
    """A running warden with the student's process under it."""

    def __init__(self, process: subprocess.Popen[bytes], lifeline: int, workspace: Path) -> None:
        self.process, self.lifeline, self.workspace = process, lifeline, workspace
        self._send_lock = threading.Lock()

    def send(self, payload: bytes, deadline: float) -> None:
        with self._send_lock:
            _send(self.process, payload, deadline)

    def stop(self) -> int | None:
        """Let go of the lifeline (the warden kills the student's processes and exits),
        then make sure: the whole session, by SIGKILL, if the warden is slow."""
        with contextlib.suppress(OSError):
            os.close(self.lifeline)
        try:
            code = self.process.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)
            code = self.process.wait()
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe:
                with contextlib.suppress(OSError):
                    pipe.close()
        shutil.rmtree(self.workspace, ignore_errors=True)
        return code


def _pass_on_printed(pipe: io.BufferedReader, name: str | None) -> None:
    """Copy a child's printed lines to this process's stderr, escaped and marked with the
    file's name (or as printed, for a `name` of None), up to
    PRINTED_LIMIT_BYTES; read to the end all the same, so a child that prints without pause
    never blocks on a full pipe. The pipe ends when the warden's whole session has ended."""
    passed, dropped, pending = 0, 0, b""
    try:
        while chunk := pipe.read1(65536):
            if passed >= PRINTED_LIMIT_BYTES:
                dropped += len(chunk)
                continue
            passed += len(chunk)
            pending += chunk
            *lines, pending = pending.split(b"\n")
            if len(pending) > PRINTED_LINE_CHARS:
                lines.append(pending)
                pending = b""
            _write_printed(name, lines)
        if pending:
            _write_printed(name, [pending])
        if dropped:
            _write_printed(name, [f"[{dropped} more bytes printed, not shown]".encode()])
    except (OSError, ValueError):  # this process's own stderr is gone: nothing to show the lines on
        pass
    finally:
        with contextlib.suppress(OSError):
            pipe.close()


def _write_printed(name: str | None, lines: list[bytes]) -> None:
    if not lines:
        return
    decoded = [line.decode("utf-8", "backslashreplace") for line in lines]
    text = "".join(f"{line}\n" if name is None else f"{name}: {terminal.shown(line)}\n" for line in decoded)
    sys.stderr.write(text)
    sys.stderr.flush()


class _StubbingPickler(pickle.Pickler):
    """Pickles the caller's arguments; a callable of the caller's own (a lambda, a closure,
    a bound method, a callable object, a function of the lab's graders) is sent as a
    numbered stub instead, so that it runs here when the student's code calls it. A
    function of a library goes by reference, as pickle always sends it."""

    def __init__(self, file: io.BytesIO, callables: list[Callable[..., Any]]) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self._callables = callables

    def persistent_id(self, obj: Any) -> Any:
        if not _runs_here(obj):
            return None
        for index, known in enumerate(self._callables):
            if known is obj:
                return ("callable", index)
        self._callables.append(obj)
        return ("callable", len(self._callables) - 1)


def _runs_here(obj: Any) -> bool:
    if isinstance(obj, type) or not callable(obj):
        return False
    if isinstance(obj, types.MethodType | functools.partial):
        return True
    if isinstance(obj, types.FunctionType):
        return ("<locals>" in obj.__qualname__ or obj.__name__ == "<lambda>"
                or obj.__module__.startswith(CALLER_PACKAGES))
    if isinstance(obj, types.BuiltinFunctionType | types.BuiltinMethodType):
        return False
    return type(obj).__module__ != "builtins"  # an object of a class with __call__


class _Timeout(Exception):
    pass


class _Ended(Exception):
    pass


class _TooLarge(Exception):
    pass


class _Garbled(Exception):
    pass


def _send(child: subprocess.Popen[bytes], payload: bytes, deadline: float) -> None:
    """Write the request within the call's deadline: a child that stopped reading must not
    hold the service once the pipe's buffer is full."""
    assert child.stdin is not None  # opened with PIPE
    fd, data = child.stdin.fileno(), memoryview(_HEADER.pack(len(payload)) + payload)
    os.set_blocking(fd, False)
    while data:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([], [fd], [], left)[1]:
            raise _Timeout
        try:
            data = data[os.write(fd, data):]
        except BlockingIOError:
            continue


def _receive(child: subprocess.Popen[bytes], deadline: float) -> bytes:
    assert child.stdout is not None  # opened with PIPE
    header = _read_exactly(child.stdout.fileno(), _HEADER.size, deadline)
    (size,) = _HEADER.unpack(header)
    if size > MAX_REPLY_BYTES:
        raise _TooLarge(f"{size} bytes, the limit is {MAX_REPLY_BYTES}")
    return _read_exactly(child.stdout.fileno(), size, deadline)


def _read_exactly(fd: int, size: int, deadline: float) -> bytes:
    chunks, got = [], 0
    while got < size:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise _Timeout
        chunk = os.read(fd, size - got)
        if not chunk:
            raise _Ended
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _cut(text: str) -> str:
    return text if len(text) <= DETAIL_LIMIT_CHARS else text[:DETAIL_LIMIT_CHARS] + "…"
