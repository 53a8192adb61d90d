"""What a checkpoint's grader returns, and how it loads the student's code.

A grader is a plain function `grade(student_dir: Path) -> Verdict`, named in the lab's
`lab.toml` as "module:function". It judges behaviour only: what the student's functions
return or raise on cases (hidden ones generated where a contract has many edges), or what
ran in a private stack, read from calls.jsonl and the trace, never from what a model said.
The lab runner calls each grader in its own process with a time limit, so a student
function that crashes, hangs or prints is a Failed verdict, never a crashed grader.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import msgspec


class Passed(msgspec.Struct, frozen=True, tag=True):
    checkpoint: str


class Failed(msgspec.Struct, frozen=True, tag=True):
    checkpoint: str
    case: str  # the failing case in the student's terms, e.g. "Arabic-Indic digits '٤٤١١'"
    message: str  # what was expected and what the student's code did


Verdict = Passed | Failed


class StudentCodeMissing(Exception):
    """The student's file is not in their folder."""


def load_student(student_dir: Path, filename: str) -> ModuleType:
    """Import one of the student's files by path, fresh each time (never from a cache), under
    a private module name so it cannot shadow or be shadowed by a project module."""
    path = student_dir / filename
    if not path.is_file():
        raise StudentCodeMissing(f"{path} does not exist (airlock lab start copies the starter there)")
    name = f"_airlock_student_{path.stem}"
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


def student_module(student_dir: Path, filename: str) -> ModuleType:
    """The student's file imported, or CaseFailed naming the file and what went wrong."""
    try:
        return load_student(student_dir, filename)
    except StudentCodeMissing as exc:
        raise CaseFailed(filename, str(exc)) from None
    except Exception as exc:  # noqa: BLE001  SyntaxError, NameError at import, ...: the student's to fix
        raise CaseFailed(f"importing {filename}", f"{type(exc).__name__}: {exc}") from None


def student_function(module: ModuleType, name: str) -> Callable[..., Any]:
    function = getattr(module, name, None)
    if not callable(function):
        raise CaseFailed(f"{name}()", f"{Path(module.__file__ or '?').name} has no function {name}")
    return function


def student_call(case: str, function: Callable[..., Any], *args: Any) -> Any:
    """Call one student function on one case. A TODO or any exception is CaseFailed naming
    the case; SystemExit is left to the grade process, which names it."""
    try:
        return function(*args)
    except NotImplementedError:
        raise CaseFailed(case, f"{function.__name__} is still a TODO: it raises NotImplementedError") from None
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


def module_or_failed(checkpoint: str, student_dir: Path, filename: str, function: str) -> ModuleType | Failed:
    """The student's module holding `function`, or the Failed verdict saying why it cannot
    be graded (missing, not importable, or without that function)."""
    try:
        module = load_student(student_dir, filename)
    except Exception as exc:  # noqa: BLE001  missing or not importable: the student's problem, named
        return Failed(checkpoint, filename, f"{filename} cannot be loaded: {type(exc).__name__}: {exc}")
    if not callable(getattr(module, function, None)):
        return Failed(checkpoint, function, f"{filename} has no function {function}()")
    return module
