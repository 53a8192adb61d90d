"""A phased lab run: the student's emails through more than one private stack, each phase's
task and emails built by the lab's grader from the student's folder.

A lab with no plug point (red-and-blue: the student writes emails and a guard, not a
service's function) names two functions in its [run] table (course/catalog.py). This module
owns their contract:

    phases(student_dir: Path, folder: Path) -> list[Phase]
        every phase built from the student's files, in the order they run; it may write
        task files into `folder` (the run's data folder). A student file that is still a
        TODO or cannot be used raises PhaseProblem, in the student's terms.
    judge(email: PhaseEmail, result: harness.score.EmailResult) -> Judged
        what one email did, from its calls (calls.jsonl), never from what a model said:
        the grader's own scoring, so `lab run` shows what `lab check` judges.

The builder calls the student's code, so build() runs it in a child process with a time
limit: a student function that hangs, prints or exits is a PhaseProblem (exit 2), never a
hung `lab run` or a report with a student's print inside it. Its result crosses back as
JSON and is decoded strictly, like any other input. The judge reads only what ran, and
runs in the caller's process.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import tempfile
from pathlib import Path

import msgspec

from airlock.errors import UsageError
from airlock.interpreter import python_command
from course.catalog import CHECKOUT

BUILD_TIMEOUT_S = 30.0  # the student's functions return a few dicts; longer is a loop
RESULT_MAX_BYTES = 4 * 1024 * 1024  # a few phases of a dozen emails each, base64 in JSON
_ID = re.compile(r"\A[a-z0-9]+(?:-[a-z0-9]+)*\Z")

# Runs in the child: the builder's print()s go to stderr, its result to a file the parent names.
_BUILD = """
import importlib, sys
from pathlib import Path
import msgspec
from course.phases import Built, PhaseProblem
spec, student_dir, folder, out = sys.argv[1:5]
module, function = spec.split(":")
builder = getattr(importlib.import_module(module), function)
sys.stdout = sys.stderr
try:
    built = Built(phases=builder(Path(student_dir), Path(folder)))
except PhaseProblem as exc:
    built = Built(problem=str(exc) or "the lab's phases builder refused your files")
Path(out).write_bytes(msgspec.json.encode(built))
"""


class PhaseProblem(UsageError):
    """The student's files cannot make a phased run (a TODO, a bad return value, a hang);
    the message says which file and what to do."""


class PhaseEmail(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One email of a phase, as the intake receives it."""

    name: str  # the student's name for it, or the corpus file's: the report's key across phases
    sender: str  # the address the intake vouches for
    raw: bytes  # the .eml
    benign: bool  # an honest email: a holding phase must answer it; otherwise an attack
    expect: str = ""  # for an honest email, the value its sender really asks about


class Phase(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One private stack's worth: a task file and the emails run through it."""

    id: str  # e.g. "unguarded", "guarded": lower-case letters, digits and '-'
    title: str  # one line for the report: what this phase runs
    task: str  # an absolute path to the task file the stack loads
    emails: list[PhaseEmail]
    holds: bool  # True: no attack may get through and every honest email is answered, or
    #              the run is not clean; False: the phase shows what happens without the defence


class Judged(msgspec.Struct, frozen=True):
    """The judge's reading of one email's calls."""

    harm: list[str]  # what it did that an attack aims at, one phrase each; empty: no harm
    answered: bool  # an honest email got what it asked for


class Built(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What the child hands back: the phases, or the problem with the student's files."""

    phases: list[Phase] | None = None
    problem: str | None = None


def build(builder: str, student_dir: Path, folder: Path, timeout_s: float = BUILD_TIMEOUT_S) -> list[Phase]:
    """The lab's phases for this student's folder, built in a child process; PhaseProblem
    when the student's files cannot make them."""
    made = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    try:
        return _build(builder, student_dir, folder, timeout_s)
    except PhaseProblem:
        if made and not any(folder.iterdir()):  # no stack ran: leave no empty run folder behind
            folder.rmdir()
        raise


def _build(builder: str, student_dir: Path, folder: Path, timeout_s: float) -> list[Phase]:
    with tempfile.TemporaryDirectory(prefix="airlock-lab-phases-") as scratch:
        out = Path(scratch) / "built.json"
        process = subprocess.Popen(python_command("-c", _BUILD, builder, str(student_dir.absolute()),
                                    str(folder.absolute()), str(out)), cwd=scratch, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                   start_new_session=True, env=_environment())
        try:
            _, stderr = process.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            raise PhaseProblem(f"your files did not return within {timeout_s:g} s (does a function of yours "
                               f"loop or wait for input?)") from None
        _kill_group(process)  # whatever the student's code started dies with the build
        if process.returncode != 0 or not out.is_file():
            last = (stderr.strip().splitlines() or [f"exit code {process.returncode}"])[-1]
            raise PhaseProblem(f"your files could not be run: {last}")
        if out.stat().st_size > RESULT_MAX_BYTES:
            raise PhaseProblem(f"your files made more than {RESULT_MAX_BYTES} bytes of emails")
        try:
            built = msgspec.json.decode(out.read_bytes(), type=Built)
        except msgspec.ValidationError as exc:  # the lab's builder broke this contract: say where
            raise UsageError(f"the lab's phases builder {builder} returned no list of Phase: {exc}") from None
    if built.problem is not None:
        raise PhaseProblem(built.problem)
    return checked(builder, built.phases or [])


def checked(builder: str, phases: list[Phase]) -> list[Phase]:
    """Rules the types cannot state: at least one phase, ids unique, tasks that exist,
    email names unique within a phase (they key the report)."""
    problems = [] if phases else ["no phases"]
    ids = [phase.id for phase in phases]
    for phase in phases:
        if not _ID.match(phase.id) or ids.count(phase.id) > 1:
            problems.append(f"phase id {phase.id!r} is not a unique slug")
        if not Path(phase.task).is_absolute() or not Path(phase.task).is_file():
            problems.append(f"phase {phase.id!r}: task {phase.task!r} is not an absolute path to a file")
        names = [email.name for email in phase.emails]
        if len(set(names)) != len(names):
            problems.append(f"phase {phase.id!r}: an email name is used twice")
    if problems:
        raise UsageError(f"the lab's phases builder {builder}: {'; '.join(problems)}")
    return phases


def _environment() -> dict[str, str]:
    """The project's packages importable from the scratch folder, wherever it is installed or not;
    no __pycache__ left in the student's folder."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTHON")}
    return {**env, "PYTHONPATH": str(CHECKOUT), "PYTHONDONTWRITEBYTECODE": "1"}


def _kill_group(process: subprocess.Popen[str]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if process.stderr is not None:  # after a timeout nobody reads it any more
        process.stderr.close()
    process.wait()
