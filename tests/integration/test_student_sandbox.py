"""studentcode.student behind studentcode.sandbox and studentcode.warden: what a hostile student's file can no
longer reach, what it cannot leave behind, and what crosses back to a grader."""

from __future__ import annotations

import errno
import math
import os
import signal
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from studentcode.student import StudentCode, StudentFailed

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox's boundaries are Linux's")

HOSTILE = '''
import ctypes, os, signal, socket, time
from dataclasses import dataclass

LIBC = ctypes.CDLL(None, use_errno=True)  # libc straight: Python's audit events never see these calls

def raw(call, *args):
    """A system call through libc: 0 when the kernel allowed it, else its errno."""
    ctypes.set_errno(0)
    return ctypes.get_errno() if getattr(LIBC, call)(*args) < 0 else 0

def raw_open(path, write):
    flags = os.O_WRONLY | os.O_CREAT if write else os.O_RDONLY
    return raw("open", path.encode(), flags, 0o600)

def raw_socket(family):
    return raw("socket", {"inet": socket.AF_INET, "inet6": socket.AF_INET6, "unix": socket.AF_UNIX}[family],
               socket.SOCK_STREAM, 0)

def raw_kill(pid):
    return raw("kill", pid, 0)

def raw_setown(pid):
    """Aim SIGIO at another process through a pipe's owner (no kill() involved)."""
    import fcntl
    read_end, write_end = os.pipe()
    try:
        fcntl.fcntl(read_end, fcntl.F_SETOWN, pid)
    except OSError as exc:
        return exc.errno
    finally:
        os.close(read_end)
        os.close(write_end)
    return 0

def raw_prlimit(pid):
    class Limit(ctypes.Structure):
        _fields_ = [("soft", ctypes.c_uint64), ("hard", ctypes.c_uint64)]
    return raw("prlimit", pid, 7, ctypes.byref(Limit(3, 3)), None)

def run_own_program():
    """A program written into the workspace, made executable, and run through libc."""
    with open("mine", "wb") as out:
        out.write(b"#!/bin/sh\\nexit 0\\n")
    os.chmod("mine", 0o755)
    return raw("execve", b"mine", None, None)

def silence_the_watch(path):
    """Replace what the sandbox module would look up, then try a secret."""
    from studentcode import sandbox
    sandbox._inside = lambda *args: True
    sandbox._short = lambda *args: ""
    return read(path)

def raw_tiocsti():
    return raw("ioctl", 2, 0x5412, ctypes.c_char_p(b"x"))

def flood(tool):
    import threading
    for _ in range(40):
        threading.Thread(target=tool, args=({},), daemon=True).start()
    time.sleep(1)
    return "flooded"

def caught(path):
    """A correct answer after a quiet try at a secret: the try is what counts."""
    try:
        read(path)
    except OSError:
        pass
    return "4411"

@dataclass(frozen=True)
class Error:
    kind: str
    detail: str

def read(path):
    with open(path, "rb") as file:
        return file.read()

def write(path):
    with open(path, "w") as file:
        file.write("written by the student")
    return "written"

def parent_environ():
    return read(f"/proc/{os.getppid()}/environ")

def connect(family):
    kinds = {"inet": socket.AF_INET, "inet6": socket.AF_INET6, "unix": socket.AF_UNIX}
    socket.socket(kinds[family], socket.SOCK_STREAM)
    return "a socket"

def signal_process(pid):
    os.kill(pid, signal.SIGKILL)
    return "sent"

def escape():
    """Double-fork and setsid: the grandchild leaves the process group and reports its pid."""
    read_end, write_end = os.pipe()
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.write(write_end, str(os.getpid()).encode())
            time.sleep(600)
            os._exit(0)
        os._exit(0)
    os.close(write_end)
    time.sleep(0.2)
    return int(os.read(read_end, 32))

def realtime_signal():
    os.kill(os.getpid(), signal.SIGRTMIN + 6)

def shapes():
    return (1, "a"), {2}, frozenset({3}), Error("range", "too big"), {("shop", "x"): 1}, 2 ** 80, math_nan()

def math_nan():
    return float("nan")

def run_tool(tool, args):
    first = tool(args)
    return [first, tool(args)]

def give_up(tool):
    import threading
    worker = threading.Thread(target=tool, args=({},), daemon=True)
    worker.start()
    worker.join(0.2)
    return "gave up" if worker.is_alive() else "waited"

def catch(tool):
    try:
        tool({})
    except ValueError as exc:
        return f"caught {exc}"
    return "nothing raised"

def evil_text():
    class Liar(str):
        def __eq__(self, other):
            return True
        __hash__ = str.__hash__
    return Liar("no")

def stderr_identity():
    st = os.fstat(2)
    return [st.st_dev, st.st_ino]

def print_hostile(size):
    import sys
    sys.stderr.write("colour \\x1b[31mred\\u202e gone\\n")
    os.write(2, b"x" * size + b"\\n")
    return "printed"
'''


@pytest.fixture
def student(tmp_path: Path) -> Iterator[StudentCode]:
    """The hostile file in a student's folder, in shapes mode (as a grader calls it)."""
    folder = tmp_path / "student"
    folder.mkdir()
    (folder / "hostile.py").write_text(HOSTILE)
    code = StudentCode(folder / "hostile.py", timeout_s=10.0, mode="shapes")
    yield code
    code.close()


def refused(answer: object, *words: str) -> str:
    """The answer is the sandbox's refusal, naming what was tried."""
    assert isinstance(answer, StudentFailed) and answer.kind == "sandbox", answer
    assert all(word in answer.detail for word in words), answer.detail
    return answer.detail


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_the_child_says_which_boundaries_are_in_force(student: StudentCode) -> None:
    """The first answer reports Landlock, seccomp and the rlimits as applied."""
    assert student.call("math_nan") != student.call("math_nan")  # nan, and the child is up
    assert "landlock ABI" in student.confinement and "seccomp" in student.confinement
    assert "rlimits" in student.confinement and "not in force" not in student.confinement


def test_another_processes_environment_cannot_be_read(student: StudentCode) -> None:
    """/proc/<parent>/environ, where the run's keys were: the kernel refuses it, and the try is named."""
    refused(student.call("parent_environ"), "read", "/proc/", "/environ")
    assert student.call("raw_open", f"/proc/{os.getpid()}/environ", False) == errno.EACCES


def test_only_the_students_own_files_can_be_read(student: StudentCode, tmp_path: Path) -> None:
    """Its own file reads; keys in a subfolder, a neighbour's file and the project's root do not."""
    folder = tmp_path / "student"
    keys = folder / ".airlock-lab" / "runs" / "1" / "keys"
    keys.mkdir(parents=True)
    (keys / "smtp.key").write_text("secret")
    neighbour = tmp_path / "another-student"
    neighbour.mkdir()
    (neighbour / "checker.py").write_text("def check(a): return a\n")
    assert student.call("read", str(folder / "hostile.py")) == HOSTILE.encode()
    for path in (keys / "smtp.key", neighbour / "checker.py", Path(__file__).resolve().parents[2] / "pyproject.toml"):
        refused(student.call("read", str(path)), "read", path.name)
        assert student.call("raw_open", str(path), False) == errno.EACCES, path


def test_a_symbolic_link_beside_the_file_opens_nothing(student: StudentCode, tmp_path: Path) -> None:
    """A link in the student's folder to a secret elsewhere is not among the files it may read."""
    secret = tmp_path / "secret.key"
    secret.write_text("secret")
    (tmp_path / "student" / "key.txt").symlink_to(secret)
    student.close()  # the next start sees the link
    assert student.call("raw_open", str(tmp_path / "student" / "key.txt"), False) == errno.EACCES


def test_no_keystrokes_into_the_inherited_terminal(student: StudentCode) -> None:
    """TIOCSTI on the stderr it inherited is refused, whatever that stderr is."""
    assert student.call("raw_tiocsti") == errno.EPERM


def test_the_childs_stderr_is_not_the_callers(student: StudentCode) -> None:
    """The student's process writes its print into a pipe of its own, never into the
    descriptor its caller (a grader, a service) writes to."""
    mine = os.fstat(2)
    assert student.call("stderr_identity") != [mine.st_dev, mine.st_ino]


def test_what_the_child_prints_reaches_the_callers_stderr_escaped_marked_and_bounded(
        student: StudentCode, capfd: pytest.CaptureFixture[str]) -> None:
    """An ESC sequence and a bidi override arrive escaped, each line marked with the file's
    name; a flood of 4 MiB is cut at the limit and the call still answers."""
    from studentcode.student import PRINTED_LIMIT_BYTES
    assert student.call("print_hostile", 4 * 1024 * 1024) == "printed"
    student.close()  # the relay has read to the end once the child's session is gone
    deadline = time.monotonic() + 10
    err = ""
    while time.monotonic() < deadline and "not shown" not in err:
        time.sleep(0.1)
        err += capfd.readouterr().err
    assert "hostile.py: colour \\x1b[31mred\\u202e gone" in err and "\x1b" not in err and "\u202e" not in err
    assert len(err) < PRINTED_LIMIT_BYTES + 16 * 1024 and "more bytes printed, not shown]" in err


def test_a_flood_of_calls_back_stops_the_child_not_the_caller(student: StudentCode) -> None:
    """Forty simultaneous calls to a grader's callable: the child is stopped, named."""
    release = threading.Event()
    try:
        answer = student.call("flood", lambda args: release.wait(5.0))
    finally:
        release.set()
    assert isinstance(answer, StudentFailed) and answer.kind == "crashed", answer
    assert threading.active_count() < 60


def test_no_signal_through_a_files_owner(student: StudentCode) -> None:
    """F_SETOWN would aim SIGIO at any process without kill(): refused."""
    assert student.call("raw_setown", os.getpid()) == errno.EPERM


def test_no_other_processes_limits(student: StudentCode) -> None:
    """prlimit on this test's process (the runner's place) is refused."""
    assert student.call("raw_prlimit", os.getpid()) == errno.EPERM


def test_no_program_of_its_own(student: StudentCode) -> None:
    """A binary copied into the workspace and made executable does not run."""
    assert student.call("run_own_program") == errno.EPERM


def test_patching_the_sandbox_module_does_not_silence_the_watch(student: StudentCode) -> None:
    """The watch's state and helpers are bound in its closure: the try is still named."""
    refused(student.call("silence_the_watch", f"/proc/{os.getpid()}/environ"), "environ")


def test_a_folder_on_the_callers_path_is_not_readable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A PYTHONPATH entry of the caller's (any folder) is not among what the child may read."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "secret.txt").write_text("secret")
    folder = tmp_path / "student"
    folder.mkdir()
    (folder / "hostile.py").write_text(HOSTILE)
    monkeypatch.syspath_prepend(str(elsewhere))
    code = StudentCode(folder / "hostile.py", timeout_s=10.0, mode="shapes")
    try:
        assert code.call("raw_open", str(elsewhere / "secret.txt"), False) == errno.EACCES
    finally:
        code.close()


def test_a_caught_try_still_voids_the_answer(student: StudentCode, tmp_path: Path) -> None:
    """A function that tries a secret, catches the refusal and answers well gets no credit."""
    refused(student.call("caught", f"/proc/{os.getpid()}/environ"), "environ")


def test_writes_land_only_in_the_private_workspace(student: StudentCode, tmp_path: Path) -> None:
    """A relative path is the workspace's; the student's folder and /tmp are refused."""
    assert student.call("write", "notes.txt") == "written"
    for path in (tmp_path / "student" / "progress.json", tmp_path / "owned.txt"):
        refused(student.call("write", str(path)), "write", path.name)
        assert student.call("raw_open", str(path), True) == errno.EACCES
        assert not path.exists()


@pytest.mark.parametrize("family", ["inet", "inet6", "unix"])
def test_no_socket_of_any_kind(student: StudentCode, family: str) -> None:
    """No network and no local service: socket() itself is refused."""
    refused(student.call("connect", family), "socket")
    assert student.call("raw_socket", family) == errno.EACCES


def test_no_signal_to_another_process(student: StudentCode) -> None:
    """A signal to this test's process (the grader's place) is refused; the test lives on."""
    refused(student.call("signal_process", os.getpid()), "signal", str(os.getpid()))
    assert student.call("raw_kill", os.getpid()) == errno.EPERM


def test_a_double_forked_setsid_grandchild_dies_with_the_code(student: StudentCode) -> None:
    """The warden is a subreaper: what left the process group is killed all the same."""
    grandchild = student.call("escape")
    assert isinstance(grandchild, int) and alive(grandchild)
    student.close()
    deadline = time.monotonic() + 5.0
    while alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        assert not alive(grandchild), "a process the student's code started outlived it"
    finally:
        if alive(grandchild):
            os.kill(grandchild, signal.SIGKILL)


def test_a_realtime_signal_is_a_crash_named_by_its_signal(student: StudentCode) -> None:
    """SIGRTMIN+6 has no name in signal.Signals: the failure names it anyway."""
    answer = student.call("realtime_signal")
    assert isinstance(answer, StudentFailed) and answer.kind == "crashed"
    assert answer.detail == "signal SIGRTMIN+6"


def test_shapes_cross_back_as_plain_values(student: StudentCode) -> None:
    """Tuples, sets, a dataclass's class name and fields, big ints and nan keep their shape."""
    answer = student.call("shapes")
    assert not isinstance(answer, StudentFailed), answer
    pair, numbers, frozen, error, keyed, big, nan = answer
    assert pair == (1, "a") and type(pair) is tuple and numbers == {2} and frozen == frozenset({3})
    assert type(error).__name__ == "Error" and error.kind == "range" and error.fields["detail"] == "too big"
    assert keyed == {("shop", "x"): 1} and big == 2**80 and math.isnan(nan)


def test_a_str_subclass_arrives_as_its_characters(student: StudentCode) -> None:
    """A str whose __eq__ says yes to everything is judged by what it holds."""
    answer = student.call("evil_text")
    assert type(answer) is str and answer == "no" and answer != "yes"


def test_a_callable_in_the_arguments_runs_in_the_caller(student: StudentCode) -> None:
    """The tool's counter is this process's memory: two calls by the student, two here."""
    seen: list[dict[str, object]] = []

    def tool(args: dict[str, object]) -> dict[str, int]:
        seen.append(args)
        return {"runs": len(seen)}

    assert student.call("run_tool", tool, {"order_id": "1"}) == [{"runs": 1}, {"runs": 2}]
    assert seen == [{"order_id": "1"}, {"order_id": "1"}] and threading.current_thread().is_alive()


def test_a_callables_exception_reaches_the_student_as_itself(student: StudentCode) -> None:
    """A tool that raises ValueError here raises ValueError in the student's code."""
    def failing(args: dict[str, object]) -> None:
        raise ValueError("the tool broke")

    assert student.call("catch", failing) == "caught the tool broke"


def test_a_slow_callable_does_not_hold_the_answer(student: StudentCode) -> None:
    """The student's code may stop waiting for a slow tool; its answer still arrives."""
    release = threading.Event()
    try:
        started = time.monotonic()
        assert student.call("give_up", lambda args: release.wait(5.0)) == "gave up"
        assert time.monotonic() - started < 3.0
    finally:
        release.set()


def test_plain_mode_still_gives_maps(tmp_path: Path) -> None:
    """The services' mode is unchanged: a dataclass arrives as a map."""
    path = tmp_path / "plug.py"
    path.write_text(textwrap.dedent("""
        from dataclasses import dataclass
        @dataclass
        class Verdict:
            verdict: str
        def decide():
            return Verdict("allow")
    """))
    code = StudentCode(path, timeout_s=10.0)
    try:
        assert code.call("decide") == {"verdict": "allow"}
    finally:
        code.close()


def test_a_reference_put_in_place_is_readable_and_used(tmp_path: Path) -> None:
    """use_reference: the project's own solution, outside the student's folder, replaces a
    function of the student's inside the student's process."""
    folder, elsewhere = tmp_path / "student", tmp_path / "reference"
    folder.mkdir()
    elsewhere.mkdir()
    (folder / "mine.py").write_text("def helper():\n    return 'student'\n\ndef outer():\n    return helper()\n")
    (elsewhere / "solution.py").write_text("def helper():\n    return 'reference'\n")
    code = StudentCode(folder / "mine.py", timeout_s=10.0, mode="shapes")
    try:
        assert code.call("outer") == "student"
        code.use_reference(["helper"], elsewhere / "solution.py")
        assert code.call("outer") == "reference"
    finally:
        code.close()
