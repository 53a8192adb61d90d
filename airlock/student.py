"""A student's functions, run in a child process under a deadline: the labs' plug points.

A lab replaces one piece of one service with a student's code: the validator's check, the
actor's tool selection, its checks before a side effect, its precondition decision. That
code is the student's, not the project's: it may hang, crash, print, exit or eat memory.
So it never runs in the service's own process. A child process loads the file and calls
the function; the service waits at most `timeout_s`, then kills the child and starts a new
one for the next call. Whatever went wrong is a StudentFailed value, never an exception.

Arguments go to the child pickled (they are the service's own values); results come back
as msgpack, so only plain data (dict, list, str, int, float, bool, None; dataclasses and
Structs as maps) crosses back, and the service never unpickles anything the student made.
The child's stdout is the service's stderr: a student's print() reaches the log, not the
reply pipe. The child gets none of the service's settings (no keys folder, no data dir in
its environment), runs in a session of its own (a stop kills whatever it started) and under
a memory cap. That contains a student's mistakes; it is not a sandbox for hostile code,
which runs as the service's user: the compose lab's container is that boundary.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Literal

import msgspec

from airlock.errors import SettingsError

# Each plug point: the service whose piece it replaces, and the functions the student's
# file must define for it. The service decides what it does with the answers.
PLUG_POINTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "validator.check": ("validator", ("check",)),
    "actor.select": ("actor", ("bound_tool_choice",)),
    "actor.checks": ("actor", ("allowlist_problem", "schema_problem", "range_problem")),
    "actor.decide": ("actor", ("decide",)),
}

START_TIMEOUT_S = 20.0  # interpreter start and the file's import; not counted per call
MAX_REPLY_BYTES = 1024 * 1024  # one answer of the student's; larger is a typed failure
MEMORY_LIMIT_BYTES = 1024 * 1024 * 1024  # the child's address space: a runaway list dies, not the host
DETAIL_LIMIT_CHARS = 300
_HEADER = struct.Struct(">I")

Kind = Literal["todo", "raised", "timeout", "crashed", "not_plain_data", "too_large", "unloadable", "missing"]


class Plug(msgspec.Struct, frozen=True):
    """AIRLOCK_STUDENT_CODE: `<point>=<file>`, e.g. `validator.check=/student/checker.py`."""

    point: str
    path: Path

    @property
    def service(self) -> str:
        return PLUG_POINTS[self.point][0]

    @property
    def functions(self) -> tuple[str, ...]:
        return PLUG_POINTS[self.point][1]

    def __str__(self) -> str:
        return f"{self.point}={self.path}"


def parse_plug(text: str) -> Plug | None:
    """The setting's value -> a Plug; empty -> None. Raises SettingsError on anything else."""
    if not text:
        return None
    point, sep, path = text.partition("=")
    if not sep or not path:
        raise SettingsError(f"AIRLOCK_STUDENT_CODE={text!r}: expected <point>=<file.py>, e.g. "
                            "validator.check=/student/checker.py")
    if point not in PLUG_POINTS:
        raise SettingsError(f"AIRLOCK_STUDENT_CODE: unknown plug point {point!r} (known: {sorted(PLUG_POINTS)})")
    if not path.endswith(".py"):
        raise SettingsError(f"AIRLOCK_STUDENT_CODE: {path!r} is not a Python file (.py)")
    return Plug(point, Path(path).absolute())


class StudentFailed(msgspec.Struct, frozen=True):
    """The student's function gave no usable answer: why, in the student's terms."""

    function: str
    kind: Kind
    detail: str

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
}


class StudentCode:
    """One student's file behind a process boundary. Thread-safe; one call at a time."""

    def __init__(self, path: Path, timeout_s: float = 2.0) -> None:
        self.path, self.timeout_s = Path(path), timeout_s
        self._child: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self._decoder = msgspec.msgpack.Decoder()

    def call(self, function: str, *args: Any) -> Any | StudentFailed:
        with self._lock:
            child = self._child or self._start(function)
            if isinstance(child, StudentFailed):
                return child
            try:
                deadline = time.monotonic() + self.timeout_s
                _send(child, pickle.dumps((function, args)), deadline)
                reply = _receive(child, deadline)
            except _Timeout:
                self._stop()
                return StudentFailed(function, "timeout", f"no answer within {self.timeout_s:g} s; it was stopped")
            except _TooLarge as exc:
                self._stop()
                return StudentFailed(function, "too_large", str(exc))
            except (_Ended, OSError):
                code = self._stop()
                return StudentFailed(function, "crashed", f"exit code {code}")
            return self._answer(function, reply)

    def _answer(self, function: str, reply: bytes) -> Any | StudentFailed:
        """The child's reply, checked: the student's code shares the child with the reply
        pipe and can write anything into it, so a reply that is not a well-formed answer of
        plain data is a crashed child, never an exception in the service."""
        try:
            kind, value = self._decoder.decode(reply)
            if kind == "ok":
                try:
                    msgspec.json.encode(value)  # plain data: no msgpack extensions, no odd keys
                except (TypeError, ValueError) as exc:
                    return StudentFailed(function, "not_plain_data", _cut(str(exc)))
                return value
            if kind in _KIND_WORDS and isinstance(value, str):
                return StudentFailed(function, kind, value)
        except (msgspec.DecodeError, TypeError, ValueError, RecursionError):
            pass
        self._stop()
        return StudentFailed(function, "crashed", "its process sent a reply that is not an answer; it was stopped")

    def _start(self, function: str) -> subprocess.Popen[bytes] | StudentFailed:
        # PYTHONPATH is this process's path, so the child imports the same airlock and the
        # service's own modules (a student's file may import the actor's types).
        # Nothing else of the service's environment: its AIRLOCK_* settings (the keys folder,
        # the data dir) are not the student's business. Its own session, so that a stop kills
        # whatever the student's code started too.
        paths = [entry for entry in sys.path if entry and Path(entry).is_dir()]
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": os.pathsep.join(paths),
               "PYTHONDONTWRITEBYTECODE": "1"}
        child = subprocess.Popen([sys.executable, "-c", "from airlock.student import child_main; child_main()",
                                  str(self.path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                                 cwd=self.path.parent if self.path.parent.is_dir() else None,
                                 start_new_session=True)
        self._child = child
        try:
            kind, detail = self._decoder.decode(_receive(child, time.monotonic() + START_TIMEOUT_S))
        except (_Timeout, _TooLarge, _Ended, OSError, msgspec.DecodeError, TypeError, ValueError):
            code = self._stop()
            return StudentFailed(function, "unloadable", f"loading {self.path.name} did not finish (exit code {code})")
        if kind != "ok":
            self._stop()
            if kind not in _KIND_WORDS or not isinstance(detail, str):
                return StudentFailed(function, "unloadable", f"loading {self.path.name} sent no proper answer")
            return StudentFailed(function, kind, detail)
        return child

    def _stop(self) -> int | None:
        child, self._child = self._child, None
        if child is None:
            return None
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, signal.SIGKILL)  # the child and anything it started
        code = child.wait()
        for pipe in (child.stdin, child.stdout):
            if pipe:
                pipe.close()
        return code

    def close(self) -> None:
        with self._lock:
            self._stop()


class _Timeout(Exception):
    pass


class _Ended(Exception):
    pass


class _TooLarge(Exception):
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


# --- the child's side ---------------------------------------------------------------------

def child_main() -> None:
    """Runs in the child: load the file, then answer calls until the pipe closes."""
    import importlib.util
    import resource

    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # the student's print() goes to stderr, never into the reply pipe
    sys.stdout = sys.stderr
    requests = sys.stdin.buffer
    try:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))
    except (ValueError, OSError):  # a lower hard limit is already stricter
        pass
    encode = msgspec.msgpack.Encoder().encode
    path = Path(sys.argv[1])

    def reply(kind: str, value: Any) -> None:
        try:
            payload = encode((kind, value))
        except (TypeError, msgspec.EncodeError, OverflowError) as exc:
            payload = encode(("not_plain_data", _cut(f"{type(exc).__name__}: {exc}")))
        replies.write(_HEADER.pack(len(payload)) + payload)
        replies.flush()

    try:
        spec = importlib.util.spec_from_file_location(f"student_{path.stem}", path)
        if spec is None or spec.loader is None:
            raise ImportError(f"{path.name} is not a Python module")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # as an import does: @dataclass looks its module up there
        spec.loader.exec_module(module)
    except BaseException as exc:  # noqa: BLE001 (anything a file does at import is the student's)
        reply("unloadable", _cut(f"{path.name}: {type(exc).__name__}: {exc}"))
        return
    reply("ok", None)
    while True:
        try:
            header = requests.read(_HEADER.size)
            if len(header) < _HEADER.size:
                return
            function, args = pickle.loads(requests.read(_HEADER.unpack(header)[0]))
        except (OSError, EOFError):
            return
        target = getattr(module, function, None)
        if not callable(target):
            reply("missing", f"{path.name} has no function {function}()")
            continue
        try:
            result = target(*args)
        except NotImplementedError:
            reply("todo", "")
            continue
        except BaseException as exc:  # noqa: BLE001 (SystemExit too: a student's exit is an answer)
            reply("raised", _cut(f"{type(exc).__name__}: {exc}"))
            continue
        reply("ok", result)


def _cut(text: str) -> str:
    return text if len(text) <= DETAIL_LIMIT_CHARS else text[:DETAIL_LIMIT_CHARS] + "…"
