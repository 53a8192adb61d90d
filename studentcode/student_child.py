"""The student's side of studentcode.student: the warden, then the confined process that loads
the student's file and answers calls over its standard input and output.

    python -P -c "from studentcode.student_child import main; main()" FILE MODE WORKSPACE LIFELINE CPU MEMORY FILES \
        [REFERENCE ...]

The process first becomes the warden (studentcode.warden) and forks the student's process.
That one writes its replies to a copy of standard output, points standard output at
standard error (a student's print reaches the log, never the reply pipe), moves into its
workspace, imports the project packages a student may use, confines itself
(studentcode.sandbox) and only then reads the student's file. Its first reply says which
boundaries are in force.

Requests arrive pickled (the parent's own values); a callable the parent passed arrives as
a stub whose every call is sent back to the parent, which runs it in its own memory and
sends the result. Replies are msgpack: plain (the services read them as maps) or, in the
graders' "shapes" mode, with tuples, sets and dataclasses kept (studentcode.shapes).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import itertools
import os
import pickle
import queue
import struct
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, BinaryIO

import msgspec

from studentcode import sandbox, shapes, warden

_HEADER = struct.Struct(">I")
DETAIL_LIMIT_CHARS = 300
MESSAGE_LIMIT_CHARS = 2000
IMPORTABLE = ("airlock", "actor", "validator")  # the lesson's types; imported before the walls go up


def main() -> None:
    path, mode, workspace, lifeline = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3]), int(sys.argv[4])
    limits = sandbox.Limits(int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7]))
    references = [Path(p) for p in sys.argv[8:]]  # the project's own solutions a grader puts in place
    warden.become_subreaper()
    warden.run(lambda: _student(path, mode, workspace, limits, references), lifeline)


def cut(text: str, limit: int = DETAIL_LIMIT_CHARS) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


class _Replies:
    """The reply pipe, shared by the serving loop and the stubs' threads."""

    def __init__(self, pipe: BinaryIO, mode: str) -> None:
        self._pipe, self._lock = pipe, threading.Lock()
        self._plain = msgspec.msgpack.Encoder().encode
        self.shapes = mode == "shapes"

    def send(self, kind: str, value: Any) -> None:
        try:
            payload = shapes.encode([kind, value]) if self.shapes else self._plain((kind, value))
        except (shapes.NotPlain, TypeError, msgspec.EncodeError, OverflowError, ValueError) as exc:
            payload = self._encoded_failure(exc)
        with self._lock:
            self._pipe.write(_HEADER.pack(len(payload)) + payload)
            self._pipe.flush()

    def _encoded_failure(self, exc: Exception) -> bytes:
        detail = cut(f"{type(exc).__name__}: {exc}" if not isinstance(exc, shapes.NotPlain) else f"it holds {exc}")
        return shapes.encode(["not_plain_data", detail]) if self.shapes else self._plain(("not_plain_data", detail))

    def callback(self, message: list[Any]) -> None:
        payload = shapes.encode(["callback", message])  # NotPlain goes to the stub's caller
        with self._lock:
            self._pipe.write(_HEADER.pack(len(payload)) + payload)
            self._pipe.flush()


class _Callbacks:
    """The stubs' calls waiting for the parent's answer, by call number."""

    def __init__(self, replies: _Replies) -> None:
        self._replies, self._numbers = replies, itertools.count(1)
        self._waiting: dict[int, tuple[threading.Event, list[Any]]] = {}
        self._lock = threading.Lock()

    def call(self, index: int, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        number, done, box = next(self._numbers), threading.Event(), list[tuple[bool, Any]]()
        with self._lock:
            self._waiting[number] = (done, box)
        self._replies.callback([number, index, list(args), kwargs])
        done.wait()
        ok, value = box[0]
        if ok:
            return value
        raise value

    def answered(self, number: int, ok: bool, value: Any) -> None:
        with self._lock:
            waiting = self._waiting.pop(number, None)
        if waiting is not None:
            waiting[1].append((ok, value))
            waiting[0].set()

    def abandon(self) -> None:
        with self._lock:
            waiting, self._waiting = list(self._waiting.values()), {}
        for done, box in waiting:
            box.append((False, EOFError("the grader stopped")))
            done.set()


class _Stub:
    """A callable of the parent's: calling it runs the real one in the parent."""

    def __init__(self, callbacks: _Callbacks, index: int) -> None:
        self._callbacks, self._index = callbacks, index

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._callbacks.call(self._index, args, kwargs)

    def __repr__(self) -> str:
        return f"<the grader's callable #{self._index}>"


class _Unpickler(pickle.Unpickler):
    def __init__(self, data: BinaryIO, callbacks: _Callbacks) -> None:
        super().__init__(data)
        self._callbacks = callbacks

    def persistent_load(self, pid: Any) -> Any:
        kind, index = pid
        if kind != "callable":
            raise pickle.UnpicklingError(f"unknown persistent id {kind!r}")
        return _Stub(self._callbacks, index)


def _read_frame(pipe: BinaryIO) -> bytes | None:
    header = pipe.read(_HEADER.size)
    if len(header) < _HEADER.size:
        return None
    body = pipe.read(_HEADER.unpack(header)[0])
    return body


def _reader(pipe: BinaryIO, calls: queue.Queue[Any], callbacks: _Callbacks) -> None:
    """Every request from the parent: calls to the serving loop, results to the stubs."""
    import io

    try:
        while (frame := _read_frame(pipe)) is not None:
            message = _Unpickler(io.BytesIO(frame), callbacks).load()
            if message[0] == "result":
                callbacks.answered(message[1], message[2], message[3])
            else:
                calls.put(message)
    except Exception:  # noqa: BLE001  a request this process cannot read (a class it cannot import) ends it
        pass
    finally:
        calls.put(None)
        callbacks.abandon()


def _student(path: Path, mode: str, workspace: Path, limits: sandbox.Limits, references: list[Path]) -> None:
    replies = _Replies(os.fdopen(os.dup(1), "wb"), mode)
    requests = os.fdopen(os.dup(0), "rb")
    os.dup2(2, 1)  # the student's print() goes to stderr, never into the reply pipe
    sys.stdout = sys.stderr
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)  # input() meets end of file, never the requests
    os.close(null)
    sys.stdin = open(os.devnull, encoding="utf-8")  # noqa: SIM115  the process's stdin for its whole life
    os.chdir(workspace)
    for package in IMPORTABLE:
        with contextlib.suppress(ImportError):
            importlib.import_module(package)
    readable = [path, *references] + [p for p in _files_beside(path) if p != path]
    sandbox.narrow_import_path()
    confinement = sandbox.confine(workspace, readable, limits)
    take_attempt = sandbox.watch(workspace, readable)
    callbacks = _Callbacks(replies)
    calls: queue.Queue[Any] = queue.Queue()
    try:
        module = _load(path, f"student_{path.stem}")
    except BaseException as exc:  # noqa: BLE001 (anything a file does at import is the student's)
        replies.send("unloadable", cut(f"{path.name}: {type(exc).__name__}: {exc}"))
        return
    if (attempt := take_attempt()) is not None:
        replies.send("sandbox", cut(f"{path.name}, when loaded, tried to {attempt}"))
        return
    threading.Thread(target=_reader, args=(requests, calls, callbacks), daemon=True).start()
    functions = sorted(name for name, value in vars(module).items() if callable(value) and not name.startswith("_"))
    replies.send("ok", [confinement.describe(), functions])
    while (message := calls.get()) is not None:
        if message[0] == "use_reference":
            _use_reference(module, message[1], Path(message[2]), replies)
        else:
            _serve(module, path, message[1], message[2], replies, take_attempt)


def _files_beside(path: Path) -> list[Path]:
    """The student's other files in the same folder (never a subfolder: the lab's runs,
    with their keys, live in one; never a symbolic link, which would open its target)."""
    try:
        return [p for p in path.parent.iterdir() if p.is_file() and not p.is_symlink() and not p.name.startswith(".")]
    except OSError:
        return []


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path.name} is not a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # as an import does: @dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


def _use_reference(module: ModuleType, names: list[str], reference: Path, replies: _Replies) -> None:
    """Put the reference solution's functions in the student's module (a grader judging one
    function alone, whatever state the others are in)."""
    try:
        source = _load(reference, f"reference_{reference.stem}")
        for name in names:
            setattr(module, name, getattr(source, name))
    except BaseException as exc:  # noqa: BLE001 (reported to the grader, which stops)
        replies.send("unloadable", cut(f"{reference.name}: {type(exc).__name__}: {exc}"))
        return
    replies.send("ok", None)


def _serve(module: ModuleType, path: Path, function: str, args: tuple[Any, ...], replies: _Replies,
           take_attempt: Callable[[], str | None]) -> None:
    target = getattr(module, function, None)
    if not callable(target):
        replies.send("missing", f"{path.name} has no function {function}()")
        return
    take_attempt()  # an attempt belongs to the call it happened in
    failure: BaseException | None = None
    result: Any = None
    try:
        result = target(*args)
    except BaseException as exc:  # noqa: BLE001 (SystemExit too: a student's exit is an answer)
        failure = exc
    attempt = take_attempt()
    if attempt is not None:  # whatever the code did after it, caught or not
        replies.send("sandbox", cut(f"tried to {attempt}"))
    elif failure is None:
        replies.send("ok", result)
    elif isinstance(failure, NotImplementedError):
        replies.send("todo", "")
    elif replies.shapes:
        replies.send("raised", [type(failure).__name__, cut(_text(failure), MESSAGE_LIMIT_CHARS)])
    else:
        replies.send("raised", cut(f"{type(failure).__name__}: {_text(failure)}"))


def _text(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception as inner:  # noqa: BLE001  an exception whose __str__ raises is still named
        return f"<its message raised {type(inner).__name__}>"
