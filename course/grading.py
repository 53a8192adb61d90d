"""What a checkpoint's grader returns, and how it calls the student's code.

A grader is a plain function `grade(student_dir: Path) -> Verdict`, named in the lab's
`lab.toml` as "module:function". It judges behaviour only: what the student's functions
return or raise on cases (hidden ones generated where a contract has many edges), or what
ran in a private stack, read from calls.jsonl and the trace, never from what a model said.

The grader never imports a student's file. `student_module` gives a StudentModule whose
functions run in a confined child process (studentcode.student in "shapes" mode, behind
studentcode.sandbox and a warden); what they return crosses back as plain values with their
shape kept (studentcode.shapes), what they raise arrives as a StudentRaised named after the
student's exception, and a hang, a crash or an answer that is not data as StudentStopped.
A callable the grader passes in the arguments stays in the grader and runs there when the
student's code calls it, so what it counts is the grader's own memory. The verdict is
built in the grader's process, which the student's code cannot reach.
"""

from __future__ import annotations

import builtins
import functools
import importlib.util
import keyword
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import msgspec

from studentcode import sandbox
from studentcode.student import StudentCode, StudentFailed

CALL_TIMEOUT_S = 10.0  # one call of a student's function; the checkpoint's own limit is the runner's


class Passed(msgspec.Struct, frozen=True, tag=True):
    checkpoint: str


class Failed(msgspec.Struct, frozen=True, tag=True):
    checkpoint: str
    case: str  # the failing case in the student's terms, e.g. "Arabic-Indic digits '٤٤١١'"
    message: str  # what was expected and what the student's code did


Verdict = Passed | Failed


class GraderReport(msgspec.Struct, frozen=True):
    """What course.grade hands the runner over its pipe: the verdict, and the boundaries the
    student's processes said were in force (studentcode.sandbox), one text per process kind."""

    verdict: Verdict
    sandbox: list[str] = []


class StudentCodeMissing(Exception):
    """The student's file is not in their folder."""


class StudentRaised(Exception):
    """The student's function raised: `type(exc).__name__` is the student's exception's
    class name, `str(exc)` its message. SystemExit arrives as one too."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class StudentStopped(Exception):
    """The student's function gave no answer: no return within the deadline, its process
    ended (a signal, os._exit), or what it returned is not plain data or too large."""


@functools.lru_cache(maxsize=256)
def _raised_class(name: str) -> type[StudentRaised]:
    """The exception the grader sees: named like the student's, and an instance of the
    built-in of that name too where there is one (`except ValueError` in a grader works)."""
    safe = name if name.isidentifier() and not keyword.iskeyword(name) and not name.startswith("__") else "Exception"
    builtin = getattr(builtins, safe, None)
    if isinstance(builtin, type) and issubclass(builtin, Exception) and builtin is not Exception:
        try:
            return type(safe, (StudentRaised, builtin), {})
        except TypeError:  # a built-in whose layout cannot be mixed in
            pass
    return type(safe, (StudentRaised,), {})


def _as_exception(failed: StudentFailed) -> Exception:
    if failed.kind == "todo":
        return NotImplementedError(f"{failed.function}() is still a TODO")
    if failed.kind == "raised":
        name, message = (failed.exception, failed.message) if failed.exception else ("Exception", failed.detail)
        try:
            return _raised_class(name)(message)
        except TypeError:  # a built-in that wants more than a message (UnicodeDecodeError)
            return type(_raised_class(name).__name__, (StudentRaised,), {})(message)
    return StudentStopped(failed.describe())


class _Limits:
    """The caps for every student process this grader starts (set by course.grade)."""

    limits = sandbox.Limits()
    opened: list[StudentCode] = []  # noqa: RUF012  one process-wide list, closed by course.grade at the end


def configure(limits: sandbox.Limits) -> None:
    _Limits.limits = limits


def close_all() -> list[str]:
    """Stop every student process this grader started; what each said was in force."""
    said = []
    for code in _Limits.opened:
        if code.confinement and code.confinement not in said:
            said.append(code.confinement)
        code.close()
    _Limits.opened.clear()
    return said


class RemoteFunction:
    """One of the student's functions, called in the student's process."""

    def __init__(self, code: StudentCode, name: str) -> None:
        self._code, self.__name__ = code, name

    def __call__(self, *args: Any) -> Any:
        answer = self._code.call(self.__name__, *args)
        if isinstance(answer, StudentFailed):
            raise _as_exception(answer)
        return answer

    def __repr__(self) -> str:
        return f"<the student's {self.__name__}()>"


class StudentModule:
    """A student's file, loaded in its own confined process: its functions as attributes."""

    __file__: str
    _code: StudentCode
    functions: frozenset[str]

    def __init__(self, path: Path, code: StudentCode, functions: frozenset[str]) -> None:
        object.__setattr__(self, "__file__", str(path))
        object.__setattr__(self, "_code", code)
        object.__setattr__(self, "functions", functions)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"the student's functions run in their own process: to put the reference's {name} "
                             "in place, use use_reference()")

    def __getattr__(self, name: str) -> RemoteFunction:
        if name.startswith("_") or name not in self.functions:
            raise AttributeError(f"{Path(self.__file__).name} has no function {name}()")
        return RemoteFunction(self._code, name)

    def use_reference(self, names: list[str], reference: Path) -> None:
        """In the student's process, these functions become the reference solution's."""
        self._code.use_reference(names, reference)

    @property
    def confinement(self) -> str:
        return self._code.confinement


def open_student(student_dir: Path, filename: str) -> StudentModule:
    """The student's file, loaded behind the sandbox: StudentCodeMissing when it is not
    there, StudentStopped (or StudentRaised) when it does not load."""
    path = student_dir / filename
    if not path.is_file():
        raise StudentCodeMissing(f"{path} does not exist (airlock lab start copies the starter there)")
    code = StudentCode(path.resolve(), CALL_TIMEOUT_S, mode="shapes", limits=_Limits.limits,
                       printed_as_is=True)  # the lab runner shows this process's output escaped
    _Limits.opened.append(code)
    loaded = code.load()
    if isinstance(loaded, StudentFailed):
        if loaded.kind == "unloadable":
            raise StudentStopped(loaded.detail)
        raise _as_exception(loaded)
    return StudentModule(path, code, frozenset(loaded))


def load_student(student_dir: Path, filename: str) -> StudentModule:
    """The student's file behind the sandbox (open_student); the name graders know."""
    return open_student(student_dir, filename)


def load_reference(path: Path) -> ModuleType:
    """Import the project's own reference solution by path, fresh each time, under a
    private module name. Never a student's file: those are opened with open_student."""
    if not path.is_file():
        raise StudentCodeMissing(f"{path} does not exist")
    name = f"_airlock_reference_{path.stem}"
    sys.modules.pop(name, None)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None  # a .py path always has a loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# --- helpers a grader uses to call the student's code and name the failing case --------

SHOWN_VALUE_LIMIT = 80


class CaseFailed(Exception):
    """Raised inside a grader at the first failing case; `graded` turns it into Failed."""

    def __init__(self, case: str, message: str) -> None:
        super().__init__(f"{case}: {message}")
        self.case = case
        self.message = message


def shown_value(value: object, limit: int = SHOWN_VALUE_LIMIT) -> str:
    """A value as Python writes it, cut to `limit` characters; hidden characters are
    escaped again when the runner prints, so this only has to stay short."""
    try:
        text = repr(value)
    except Exception as exc:  # noqa: BLE001  a student's object whose repr raises is still shown
        text = f"<{type(value).__name__} whose repr raised {type(exc).__name__}>"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def student_module(student_dir: Path, filename: str) -> StudentModule:
    """The student's file loaded behind the sandbox, or CaseFailed naming the file and what went wrong."""
    try:
        return open_student(student_dir, filename)
    except StudentCodeMissing as exc:
        raise CaseFailed(filename, str(exc)) from None
    except Exception as exc:  # noqa: BLE001  SyntaxError, NameError at import, ...: the student's to fix
        raise CaseFailed(f"importing {filename}", f"{type(exc).__name__}: {exc}") from None


def student_function(module: StudentModule, name: str) -> Callable[..., Any]:
    function = getattr(module, name, None)
    if not callable(function):
        raise CaseFailed(f"{name}()", f"{Path(module.__file__ or '?').name} has no function {name}")
    return function


def student_call(case: str, function: Callable[..., Any], *args: Any) -> Any:
    """Call one student function on one case. A TODO, an exception, a sys.exit, a crash or a
    hang is CaseFailed naming the case."""
    try:
        return function(*args)
    except NotImplementedError:
        raise CaseFailed(case, f"{function.__name__} is still a TODO: it raises NotImplementedError") from None
    except StudentStopped as exc:
        raise CaseFailed(case, f"{exc}: a function returns its answer") from None
    except StudentRaised as exc:
        if type(exc).__name__ == "SystemExit":
            raise CaseFailed(case, f"{function.__name__} called sys.exit({exc}); a function returns its answer, "
                                   "it never ends the program") from None
        raise CaseFailed(case, f"{function.__name__} raised {type(exc).__name__}: {exc}") from None
    except Exception as exc:  # noqa: BLE001  the student's function: any error is a failed case, named
        raise CaseFailed(case, f"{function.__name__} raised {type(exc).__name__}: {exc}") from None


def graded(checkpoint: str, body: Callable[[], None]) -> Verdict:
    """Run a grader's body: Passed if it returns, Failed at the first CaseFailed."""
    try:
        body()
    except CaseFailed as failed:
        return Failed(checkpoint, failed.case, failed.message)
    return Passed(checkpoint)


def hidden_cases(strategy: Any, check: Callable[[Any], None], *, max_examples: int = 300) -> None:
    """`check` on cases drawn by hypothesis, the same ones on every run (derandomized, no
    example database), so a student cannot pass by listing the visible examples. The first
    failure is shrunk to its simplest case and raised as CaseFailed."""
    from hypothesis import HealthCheck, Phase, Verbosity, given, settings

    @settings(max_examples=max_examples, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck), print_blob=False, report_multiple_bugs=False,
              phases=[Phase.explicit, Phase.generate, Phase.shrink],
              verbosity=Verbosity.quiet)  # what is printed is the student's alone
    @given(strategy)
    def run(case: Any) -> None:
        check(case)

    run()


# For the graders that find a student's first wrong answer with hypothesis.find: the same
# cases on every run (derandomized, no database), quiet, whatever the student's code costs.
def find_settings(max_examples: int = 200) -> Any:
    from hypothesis import HealthCheck, Verbosity, settings

    return settings(derandomize=True, database=None, max_examples=max_examples, deadline=None,
                    verbosity=Verbosity.quiet, suppress_health_check=list(HealthCheck))


class StillTodo(Exception):
    """The student's function still raises NotImplementedError (args: its name)."""


def todo(checkpoint: str, function: str, lab_id: str) -> Failed:
    return Failed(checkpoint, "the TODO", f"{function}() is still a TODO: it raises NotImplementedError. "
                                          f"Write it (airlock lab hint {lab_id} 1 for a nudge)")


def unstable(checkpoint: str, function: str, exc: Exception) -> Failed:
    """hypothesis could not replay the student's failure: an answer that changes between calls."""
    return Failed(checkpoint, "hidden cases", f"the hidden cases could not be judged ({type(exc).__name__}): "
                                              f"does {function} give the same answer every time for the same input?")


def module_or_failed(checkpoint: str, student_dir: Path, filename: str, function: str) -> StudentModule | Failed:
    """The student's module holding `function`, or the Failed verdict saying why it cannot
    be graded (missing, not importable, or without that function)."""
    try:
        module = open_student(student_dir, filename)
    except Exception as exc:  # noqa: BLE001  missing or not importable: the student's problem, named
        return Failed(checkpoint, filename, f"{filename} cannot be loaded: {type(exc).__name__}: {exc}")
    if not callable(getattr(module, function, None)):
        return Failed(checkpoint, function, f"{filename} has no function {function}()")
    return module
