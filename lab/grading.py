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
from pathlib import Path
from types import ModuleType

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
