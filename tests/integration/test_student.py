"""studentcode.student: a student's function runs in a child process; every failure is a value."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from airlock import settings as settings_module
from airlock.errors import SettingsError
from airlock.plugs import Plug, parse_plug
from studentcode.student import StudentCode, StudentFailed

STUDENT = '''
import os, sys, time

def check(answer):
    return answer if answer == "4411" else None

def shout(text):
    print("printed by the student", text)
    return {"said": text, "list": [1, 2.5, None, True]}

def todo(x):
    raise NotImplementedError

def boom(x):
    return 1 / 0

def bye(x):
    sys.exit(3)

def vanish(x):
    os._exit(9)

def hang(x):
    while True:
        time.sleep(0.01)

def odd(x):
    return object()

def greedy(x):
    return "x" * (2 * 1024 * 1024)

def hog(x):
    blocks = []
    while True:
        blocks.append(bytearray(64 * 1024 * 1024))
'''


def running(folder: Path, source: str) -> Iterator[StudentCode]:
    """`source` as a student's file in `folder`, behind a StudentCode with a 1 s deadline."""
    path = folder / "student.py"
    path.write_text(source)
    code = StudentCode(path, timeout_s=1.0)
    yield code
    code.close()


@pytest.fixture
def student(tmp_path: Path) -> Iterator[StudentCode]:
    yield from running(tmp_path, STUDENT)


def test_a_plain_answer_comes_back_as_plain_data(student: StudentCode) -> None:
    """Values and None cross back; a print goes to stderr, not into the reply."""
    assert student.call("check", "4411") == "4411"
    assert student.call("check", "٤٤١١") is None
    assert student.call("shout", "hi") == {"said": "hi", "list": [1, 2.5, None, True]}


@pytest.mark.parametrize(("function", "kind"), [
    pytest.param("todo", "todo", id="not-implemented"),
    pytest.param("boom", "raised", id="exception"),
    pytest.param("bye", "raised", id="sys-exit"),
    pytest.param("odd", "not_plain_data", id="object"),
    pytest.param("nowhere", "missing", id="missing"),
    pytest.param("greedy", "too_large", id="too-large"),
])
def test_each_failure_is_a_typed_value_and_the_next_call_still_works(student: StudentCode, function: str,
                                                                     kind: str) -> None:
    """A failing call is a StudentFailed of its kind; the child (or a new one) answers the next."""
    failed = student.call(function, "x")
    assert isinstance(failed, StudentFailed) and failed.kind == kind, failed
    assert failed.describe().startswith(f"your {function}()")
    assert student.call("check", "4411") == "4411"


def test_a_hang_is_stopped_at_the_deadline(student: StudentCode) -> None:
    """A function that never returns costs one timeout, then the child is replaced."""
    started = time.monotonic()
    failed = student.call("hang", "x")
    assert isinstance(failed, StudentFailed) and failed.kind == "timeout"
    assert time.monotonic() - started < 5
    assert student.call("check", "4411") == "4411"


def test_a_process_that_dies_is_a_crash(student: StudentCode) -> None:
    failed = student.call("vanish", "x")
    assert isinstance(failed, StudentFailed) and failed.kind == "crashed" and "9" in failed.detail
    assert student.call("check", "4411") == "4411"


def test_memory_is_bounded_in_the_child(student: StudentCode) -> None:
    """A runaway allocation fails in the child (MemoryError or killed), never in the service."""
    failed = student.call("hog", "x")
    assert isinstance(failed, StudentFailed) and failed.kind in ("raised", "crashed", "timeout")


@pytest.mark.parametrize("source", ["def check(:\n", "raise RuntimeError('at import')\n", "import os; os._exit(2)\n"])
def test_a_file_that_does_not_load_is_unloadable(tmp_path: Path, source: str) -> None:
    path = tmp_path / "broken.py"
    path.write_text(source)
    code = StudentCode(path, timeout_s=1.0)
    try:
        failed = code.call("check", "1")
        assert isinstance(failed, StudentFailed) and failed.kind == "unloadable", failed
        assert "broken.py" in failed.detail
    finally:
        code.close()


def test_the_setting_names_a_plug_point_and_a_file(tmp_path: Path) -> None:
    plug = parse_plug(f"validator.check={tmp_path}/checker.py")
    assert plug == Plug("validator.check", tmp_path / "checker.py")
    assert plug.service == "validator" and plug.functions == ("check",)
    assert parse_plug("") is None
    loaded = settings_module.load({"AIRLOCK_STUDENT_CODE": f"actor.decide={tmp_path}/p.py"})
    assert loaded.student_code == Plug("actor.decide", tmp_path / "p.py")
    assert settings_module.load({}).student_code is None


@pytest.mark.parametrize(("value", "words"), [
    ("checker.py", "expected <point>=<file.py>"),
    ("reader.model=/x.py", "unknown plug point 'reader.model'"),
    ("validator.check=/x.txt", "not a Python file"),
])
def test_a_bad_setting_is_refused_by_name(value: str, words: str) -> None:
    with pytest.raises(SettingsError, match="AIRLOCK_STUDENT_CODE") as caught:
        settings_module.load({"AIRLOCK_STUDENT_CODE": value})
    assert words in str(caught.value)


ROGUE = '''
import os, sys, time

def ext(x):
    import msgspec
    return msgspec.msgpack.Ext(1, b"")

def odd_keys(x):
    return {(0,): 0}

def forged(x, how):
    """Write into the reply pipe itself, as a student's code in the child can."""
    replies = sys._getframe(1).f_locals["replies"]._pipe
    payload = {"garbage": b"\\xc1\\xc1\\xc1", "deep": b"\\x91" * 100_000, "three": b"\\x93\\xa2ok\\x01\\x02",
               "unknown-kind": b"\\x92\\xa5weird\\x01"}[how]
    replies.write(len(payload).to_bytes(4, "big") + payload)
    replies.flush()
    return "after the forged reply"

def environment(x):
    return sorted(key for key in os.environ if key.startswith("AIRLOCK_"))

def fork_and_hang(marker):
    pid = os.fork()
    if pid == 0:
        while True:
            time.sleep(0.05)
    print(marker, pid, file=sys.stderr, flush=True)  # the only way out of the sandbox: its log
    while True:
        time.sleep(0.05)

def echo(x):
    return x
'''


@pytest.fixture
def rogue(tmp_path: Path) -> Iterator[StudentCode]:
    yield from running(tmp_path, ROGUE)


@pytest.mark.parametrize("function", ["ext", "odd_keys"])
def test_an_answer_that_is_not_plain_data_is_a_typed_failure(rogue: StudentCode, function: str) -> None:
    failed = rogue.call(function, "x")
    assert isinstance(failed, StudentFailed) and failed.kind == "not_plain_data", failed
    assert rogue.call("echo", "4411") == "4411"


@pytest.mark.parametrize("how", ["garbage", "deep", "three", "unknown-kind"])
def test_a_forged_reply_is_a_crashed_child_never_an_exception(rogue: StudentCode, how: str) -> None:
    """The student's code can write into the reply pipe; whatever it writes, the service
    gets a StudentFailed and a fresh child answers the next call."""
    failed = rogue.call("forged", "x", how)
    assert isinstance(failed, StudentFailed) and failed.kind == "crashed", failed
    failed.describe()
    assert rogue.call("echo", "4411") == "4411"


def test_the_child_gets_none_of_the_services_settings(rogue: StudentCode, monkeypatch) -> None:
    monkeypatch.setenv("AIRLOCK_KEYS", "/secret/keys")
    monkeypatch.setenv("AIRLOCK_DATA_DIR", "/data")
    assert rogue.call("environment", "x") == []


def test_a_stop_kills_what_the_students_code_started(rogue: StudentCode, capfd: pytest.CaptureFixture[str]) -> None:
    """A function that forks a spinning process and hangs: at its deadline both are gone."""
    import os

    failed = rogue.call("fork_and_hang", "forked:")
    assert isinstance(failed, StudentFailed) and failed.kind == "timeout"
    grandchild = int(capfd.readouterr().err.split("forked:")[1].split()[0])
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(grandchild, 0)
            if Path(f"/proc/{grandchild}/stat").read_text().split()[2] == "Z":  # dead, not yet reaped by init
                break
        except (ProcessLookupError, FileNotFoundError):
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"the student's forked process {grandchild} still runs")


def test_a_request_to_a_child_that_stopped_reading_keeps_the_deadline() -> None:
    """Sending never blocks past the call's deadline, however full the pipe."""
    import subprocess

    from studentcode import student

    child = subprocess.Popen(["sleep", "10"], stdin=subprocess.PIPE)
    assert child.stdin is not None  # piped
    try:
        started = time.monotonic()
        with pytest.raises(student._Timeout):
            student._send(child, b"x" * (1024 * 1024), time.monotonic() + 0.5)
        assert time.monotonic() - started < 3
    finally:
        child.kill()
        child.wait()
        child.stdin.close()
