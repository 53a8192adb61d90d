"""The lab format: `labs/<id>/lab.toml` and the folder around it, loaded and checked once.

This module owns the format; nothing else parses a lab.toml. A lab that breaks any rule
below fails at load with a `LabFormatError` naming the file and the key, never later.

Folder layout (one lab each):

    labs/<id>/
      lab.toml              the lab's single source (below)
      README.md             the lesson in English
      README.<lang>.md      the lesson in the seed's own language (nl, de, ru or tr),
                            one for every entry of `languages` other than "en"
      starter/              the student's files: TODO functions raising NotImplementedError;
                            every function can be checked while the others are still TODO
      solution/             the reference, the same file names as starter/
      wrong/<checkpoint>-<what>.toml
                            a deliberately wrong solution, written as a mutation of the
                            reference (below), that must fail checkpoint <checkpoint> (and
                            pass the others) with a Failed verdict whose `case` names what
                            is wrong: the words of <what> ('-' read as a space, case
                            ignored) appear in `case`, e.g. wrong/contract-arabic-indic.toml
                            fails "contract" with case "Arabic-Indic digits '٤٤١١'";
                            tests/labs/test_labs.py holds every lab to this

A wrong solution is the solution's files with a few exact edits, so a change to the
solution reaches every wrong one, and a reader sees the one defect and nothing else:

    # wrong/contract-arabic-indic.toml
    why = "str.isdigit() accepts every Unicode decimal digit, so Arabic-Indic ٤٤١١ passes"
    case = "Arabic-Indic digits '٤٤١١'"   # optional: the exact case the grader names;
                                          # left out where hypothesis finds the case
    also_fails = ["in-the-stack"]         # optional: other checkpoints that grade the same
                                          # code (an in-stack one runs it) and must fail too
    [[change]]                            # at least one, applied in order
    file = "checker.py"                   # one of student_files
    find = '''text that occurs exactly once in solution/checker.py'''
    replace = '''the wrong text'''        # ''' strings: TOML reads code as written

Each `find` must occur exactly once in the file as the changes before it left it, and
`replace` must differ from it: an edit of the solution that moves a `find` is then an
error at load, never a wrong solution that silently became right. `why` must not be
empty; `build_wrong_solution` writes one into a folder, as a student's folder holds it
(`airlock lab wrong ID NAME --dir D`).

lab.toml, every key required unless marked (unknown keys are errors):

    id = "separation"                 # the folder's name; [a-z0-9-]
    order = 1                         # its place in the course: 1, 2, ...; unique among the labs
    title = "Separation: the checker between reader and actor"
    seed = "002"                      # the course lesson it teaches (../shared/seeds/002_*)
    languages = ["en", "de"]          # "en" first, then the seed's language
    minutes = 40                      # expected time for a student
    objectives = ["...", "..."]       # what the student can do afterwards, at least one
    student_files = ["checker.py"]    # the files the student writes, in starter/ and solution/

    [[checkpoints]]                   # at least one, ids unique, in the order they are graded
    id = "contract"                   # [a-z0-9-]
    title = "check() keeps exactly 1-6 ASCII digits"
    grader = "course.graders.separation:contract"   # "module:function", module under course.graders

    [[hints]]                         # levels 1, 2 and 3 each at least once, in that order
    level = 1                         # 1 a nudge, 2 the idea, 3 nearly the answer
    text = "..."

    [instructor]
    minutes = 40                      # expected time, as an instructor plans a session
    mistakes = ["...", "..."]         # the common mistakes, at least one
    reading_the_report = "..."        # how to read the student's `airlock lab check` output

    [run]                             # optional: how `airlock lab run` and an in-stack
                                      # checkpoint run the lab in a private stack
    plug = "validator.check"          # a key of airlock.plugs.PLUG_POINTS
    file = "checker.py"               # the student's file that plugs in (one of student_files)
    task = "tasks/order_status.toml"  # paths: relative to the checkout; "./x" to the lab folder
    catalog = ""                      # optional: the actor's catalog (the same path rule)
    emails = ["corpus/handmade"]      # files or folders for harness.campaign.load, at least one
    model = "hostile"                 # "hostile" (the default) or "recorded": both offline
    rug_pull = ""                     # optional: a catalog whose content replaces `catalog`'s
    rug_pull_after = 0                #   in place after this many emails (at least 1 with one)

    [run]                             # or, for a lab with no plug point (red-and-blue): phases,
                                      # each its own private stack, built from the student's folder
    phases = "course.graders.red_and_blue:run_phases"  # (student_dir, folder) -> list[course.phases.Phase]
    judge = "course.graders.red_and_blue:run_judge"    # (PhaseEmail, EmailResult) -> course.phases.Judged
    model = "hostile"                 # as above; plug, file, task, emails, catalog and rug_pull
                                      # are refused beside phases: the builder gives each phase
                                      # its task and emails (course/phases.py owns that contract)

A grader is `grade(student_dir: Path) -> course.grading.Verdict` (see course/grading.py); the
runner (course/runner.py) calls it in its own process, so a grader may simply call the
student's functions.
"""

from __future__ import annotations

import importlib
import itertools
import re
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, TypeVar

import msgspec

from airlock.plugs import PLUG_POINTS, Plug
from course.grading import Verdict

T = TypeVar("T")

CHECKOUT = Path(__file__).resolve().parent.parent  # where a [run] table's plain paths start
LABS_ROOT = CHECKOUT / "labs"
RUN_MODELS = ("hostile", "recorded")
LESSON_LANGUAGES = frozenset({"en", "nl", "de", "ru", "tr"})
HINT_LEVELS = (1, 2, 3)
_SLUG = re.compile(r"\A[a-z0-9]+(?:-[a-z0-9]+)*\Z")
_GRADER = re.compile(r"\Acourse\.graders\.[a-z_][a-z0-9_]*:[a-z_][a-z0-9_]*\Z")
_SEED = re.compile(r"\A[0-9]{3}\Z")


class LabFormatError(Exception):
    """A lab folder or its lab.toml breaks the format; the message names the file and key."""


class UnknownLab(Exception):
    """No lab has this id; the message lists the ones that exist."""


class _Strict(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A typo in lab.toml (`titel`, `grade`) is an error at load, never a silently
    ignored key."""


class Checkpoint(_Strict, frozen=True):
    id: str
    title: str
    grader: str

    @property
    def grader_module(self) -> str:
        return self.grader.split(":", 1)[0]

    @property
    def grader_function(self) -> str:
        return self.grader.split(":", 1)[1]

    def load_grader(self) -> Callable[[Path], Verdict]:
        """The grader function itself, imported now (in the grade process, not at load)."""
        return getattr(importlib.import_module(self.grader_module), self.grader_function)


class Hint(_Strict, frozen=True):
    level: int
    text: str


class Instructor(_Strict, frozen=True):
    minutes: int
    mistakes: list[str]
    reading_the_report: str


class Run(_Strict, frozen=True):
    """[run]: the lab in a private stack, either the student's file in one service's place
    (plug, file, task, emails), or phases that the lab's grader builds from the student's
    folder (phases, judge). _run_problems holds a table to exactly one of the two."""

    plug: str = ""
    file: str = ""
    task: str = ""
    emails: list[str] = []
    catalog: str = ""
    model: str = "hostile"
    rug_pull: str = ""
    rug_pull_after: int = 0
    phases: str = ""
    judge: str = ""

    @property
    def phased(self) -> bool:
        return bool(self.phases)


class RunPaths(msgspec.Struct, frozen=True):
    """A [run] table's paths resolved against the checkout and the lab folder."""

    task: Path
    emails: list[Path]
    catalog: Path | None
    rug_pull: Path | None


class Lab(_Strict, frozen=True):
    id: str
    order: Annotated[int, msgspec.Meta(ge=1)]
    title: str
    seed: str
    languages: list[str]
    minutes: int
    objectives: list[str]
    student_files: list[str]
    checkpoints: list[Checkpoint]
    hints: list[Hint]
    instructor: Instructor
    run: Run | None = None
    location: str = ""  # the lab's folder, set by load(); a lab.toml that sets it is refused

    @property
    def folder(self) -> Path:
        return Path(self.location)

    @property
    def starter(self) -> Path:
        return self.folder / "starter"

    @property
    def solution(self) -> Path:
        return self.folder / "solution"

    def run_paths(self) -> RunPaths | None:
        """The [run] table's files, resolved (load() checked that each one exists)."""
        if self.run is None or self.run.phased:
            return None
        optional = {key: self.resolve(value) if value else None
                    for key, value in (("catalog", self.run.catalog), ("rug_pull", self.run.rug_pull))}
        return RunPaths(task=self.resolve(self.run.task), emails=[self.resolve(e) for e in self.run.emails],
                        **optional)

    def plug(self, student_dir: Path) -> Plug | None:
        """The student's file in its plug point, as AIRLOCK_STUDENT_CODE names it."""
        if self.run is None or self.run.phased:
            return None
        return Plug(self.run.plug, (student_dir / self.run.file).absolute())

    def resolve(self, path: str) -> Path:
        """A [run] path: "./x" is in the lab folder, anything else in the checkout."""
        return (self.folder / path[2:]) if path.startswith("./") else CHECKOUT / path

    def checkpoint(self, checkpoint_id: str) -> Checkpoint:
        for checkpoint in self.checkpoints:
            if checkpoint.id == checkpoint_id:
                return checkpoint
        known = ", ".join(c.id for c in self.checkpoints)
        raise UnknownLab(f"lab {self.id} has no checkpoint {checkpoint_id!r} (it has: {known})")

    def hints_at(self, level: int) -> list[str]:
        return [hint.text for hint in self.hints if hint.level == level]

    @property
    def wrong_folder(self) -> Path:
        return self.folder / "wrong"

    def wrong_solutions(self) -> list[WrongSolution]:
        """wrong/<checkpoint>-<what>.toml, sorted by name, each parsed and checked."""
        return [load_wrong_solution(self, path) for path in self._wrong_files()]

    def wrong_solution(self, name: str) -> WrongSolution:
        path = self.wrong_folder / f"{name}.toml"
        if not _SLUG.match(name) or not path.is_file():
            known = ", ".join(p.stem for p in self._wrong_files()) or "none"
            raise UnknownLab(f"lab {self.id} has no wrong solution {name!r} (it has: {known})")
        return load_wrong_solution(self, path)

    def _wrong_files(self) -> list[Path]:
        return sorted(self.wrong_folder.glob("*.toml")) if self.wrong_folder.is_dir() else []


class Change(_Strict, frozen=True):
    """One exact edit of a solution file: `find` is replaced by `replace`."""

    file: str
    find: str
    replace: str


class _WrongSolutionFile(_Strict, frozen=True):
    """wrong/<checkpoint>-<what>.toml as written; WrongSolution is what it means."""

    why: str
    change: list[Change]
    case: str = ""
    also_fails: list[str] = []


class WrongSolution(msgspec.Struct, frozen=True):
    """A checked wrong solution: the checkpoint it must fail, the words its case must hold,
    and the solution's files with its changes applied."""

    name: str  # <checkpoint>-<what>, the file's name without .toml
    checkpoint: Checkpoint
    why: str
    case: str  # the exact case the grader names, "" when not pinned
    changes: list[Change]
    files: dict[str, str]  # every student file, as this wrong solution holds it
    also_fails: list[str] = []  # other checkpoints that grade the same code and must fail too

    @property
    def what(self) -> str:
        """The words of <what>, as they must appear in the failed case."""
        return self.name[len(self.checkpoint.id) + 1:].replace("-", " ")


def _decode(path: Path, kind: type[T]) -> T:
    """A TOML file as `kind`, or LabFormatError naming the file (and msgspec's key path)."""
    try:
        return msgspec.toml.decode(path.read_bytes(), type=kind)
    except OSError as exc:
        raise LabFormatError(f"{path}: cannot read ({exc.strerror})") from exc
    except msgspec.ValidationError as exc:
        raise LabFormatError(f"{path}: {exc}") from exc
    except msgspec.DecodeError as exc:
        raise LabFormatError(f"{path}: not valid TOML ({exc})") from exc


def load_wrong_solution(lab: Lab, path: Path) -> WrongSolution:
    """One wrong/<checkpoint>-<what>.toml, checked against the lab and its solution; a
    LabFormatError names the file and the key."""
    raw = _decode(path, _WrongSolutionFile)
    checkpoint = _wrong_checkpoint(lab, path.stem)
    if checkpoint is None:
        raise LabFormatError(f"{path}: the name is <checkpoint>-<what>; "
                             f"checkpoints: {', '.join(c.id for c in lab.checkpoints)}")
    if not raw.why.strip():
        raise LabFormatError(f"{path}: why: say what the mistake is")
    if not raw.change:
        raise LabFormatError(f"{path}: change: at least one is needed")
    ids = [c.id for c in lab.checkpoints]
    for i, other in enumerate(raw.also_fails):
        if other not in ids or other == checkpoint.id:
            raise LabFormatError(f"{path}: also_fails[{i}]: {other!r} is not another checkpoint of {lab.id} "
                                 f"({', '.join(ids)})")
    files = _mutated(lab, path, raw.change)
    return WrongSolution(name=path.stem, checkpoint=checkpoint, why=raw.why, case=raw.case,
                         changes=raw.change, files=files, also_fails=raw.also_fails)


def _wrong_checkpoint(lab: Lab, name: str) -> Checkpoint | None:
    """The longest checkpoint id the name starts with, followed by '-' and some <what>."""
    if not _SLUG.match(name):
        return None
    matches = [c for c in lab.checkpoints if name.startswith(c.id + "-")]
    return max(matches, key=lambda c: len(c.id)) if matches else None


def _mutated(lab: Lab, path: Path, changes: list[Change]) -> dict[str, str]:
    """The solution's files with the changes applied in order. Each `find` must occur exactly
    once in the text it edits, so an edit of the solution that moves it is an error here,
    never a wrong solution that silently stopped being wrong."""
    files = {name: (lab.solution / name).read_text(encoding="utf-8") for name in lab.student_files
             if (lab.solution / name).is_file()}
    for i, change in enumerate(changes):
        key = f"change[{i}]"
        if change.file not in lab.student_files:
            raise LabFormatError(f"{path}: {key}.file: {change.file!r} is none of student_files {lab.student_files}")
        if change.file not in files:
            raise LabFormatError(f"{path}: {key}.file: solution/{change.file} is missing")
        text = files[change.file]
        if not change.find:
            raise LabFormatError(f"{path}: {key}.find: is empty; it is text that occurs exactly once "
                                 f"in solution/{change.file}")
        found = text.count(change.find)
        if found != 1:
            how = "is not found" if not found else f"is found {found} times"
            raise LabFormatError(f"{path}: {key}.find: {how} in solution/{change.file}"
                                 + (" (after the changes before it)" if i else "") + "; it must occur exactly once")
        if change.replace == change.find:
            raise LabFormatError(f"{path}: {key}.replace: the same as find, so nothing changes")
        files[change.file] = text.replace(change.find, change.replace, 1)
    return files


def build_wrong_solution(wrong: WrongSolution, target: Path) -> Path:
    """The wrong solution's files written into `target` (made if missing), as a student's
    folder holds them: for the tests, and for a trainer who wants to see one run."""
    target.mkdir(parents=True, exist_ok=True)
    for name, text in wrong.files.items():
        (target / name).write_text(text, encoding="utf-8")
    return target


def load(folder: Path) -> Lab:
    """One lab folder, checked in full (see the module docstring)."""
    path = folder / "lab.toml"
    lab = _decode(path, Lab)
    if lab.location:
        raise LabFormatError(f"{path}: location: not a lab.toml key (it is where the file lies)")
    lab = msgspec.structs.replace(lab, location=str(folder))
    for problem in _problems(lab):
        raise LabFormatError(f"{path}: {problem}")
    lab.wrong_solutions()  # each one checked at load too, naming its own file
    return lab


def load_all(root: Path = LABS_ROOT) -> list[Lab]:
    """Every lab under root, in the course's order (lab.toml's `order`, unique)."""
    folders = sorted(p for p in root.iterdir() if (p / "lab.toml").is_file()) if root.is_dir() else []
    labs = sorted((load(folder) for folder in folders), key=lambda lab: lab.order)
    for before, after in itertools.pairwise(labs):
        if before.order == after.order:
            raise LabFormatError(f"{after.folder / 'lab.toml'}: order = {after.order} is also {before.id}'s; "
                                 "each lab has its own place in the course")
    return labs


def find(lab_id: str, root: Path = LABS_ROOT) -> Lab:
    folder = root / lab_id
    if not _SLUG.match(lab_id) or not (folder / "lab.toml").is_file():
        known = ", ".join(lab.id for lab in load_all(root)) or "none"
        raise UnknownLab(f"no lab {lab_id!r} (labs: {known})")
    return load(folder)


def _problems(lab: Lab) -> list[str]:
    """Every rule the types alone cannot state, as "key: what is wrong"."""
    problems: list[str] = []
    if lab.id != lab.folder.name:
        problems.append(f"id: {lab.id!r} is not the folder's name {lab.folder.name!r}")
    if not _SLUG.match(lab.id):
        problems.append(f"id: {lab.id!r} is not lower-case letters, digits and '-'")
    if not _SEED.match(lab.seed):
        problems.append(f"seed: {lab.seed!r} is not three digits, e.g. \"002\"")
    if lab.languages[:1] != ["en"]:
        problems.append("languages: the first language is \"en\"")
    for i, lang in enumerate(lab.languages):
        if lang not in LESSON_LANGUAGES:
            problems.append(f"languages[{i}]: {lang!r} is none of {sorted(LESSON_LANGUAGES)}")
        readme = lab.folder / ("README.md" if lang == "en" else f"README.{lang}.md")
        if not readme.is_file():
            problems.append(f"languages[{i}]: {readme.name} is missing")
    if len(set(lab.languages)) != len(lab.languages):
        problems.append("languages: a language is listed twice")
    for key, minutes in (("minutes", lab.minutes), ("instructor.minutes", lab.instructor.minutes)):
        if not 1 <= minutes <= 600:
            problems.append(f"{key}: {minutes} is not 1-600")
    for key, items in (("objectives", lab.objectives), ("student_files", lab.student_files),
                       ("checkpoints", lab.checkpoints), ("instructor.mistakes", lab.instructor.mistakes)):
        if not items:
            problems.append(f"{key}: at least one is needed")
    for i, name in enumerate(lab.student_files):
        if Path(name).name != name or not name.endswith(".py"):
            problems.append(f"student_files[{i}]: {name!r} is not a plain .py file name")
    ids = [c.id for c in lab.checkpoints]
    for i, checkpoint in enumerate(lab.checkpoints):
        if not _SLUG.match(checkpoint.id):
            problems.append(f"checkpoints[{i}].id: {checkpoint.id!r} is not lower-case letters, digits and '-'")
        if ids.count(checkpoint.id) > 1:
            problems.append(f"checkpoints[{i}].id: {checkpoint.id!r} is listed twice")
        if not _GRADER.match(checkpoint.grader):
            problems.append(f"checkpoints[{i}].grader: {checkpoint.grader!r} "
                            f"is not \"course.graders.<module>:<function>\"")
    if lab.run is not None:
        problems += _run_problems(lab, lab.run)
    levels = [hint.level for hint in lab.hints]
    if levels != sorted(levels) or set(levels) != set(HINT_LEVELS):
        problems.append(f"hints: levels {levels} are not 1, 2 and 3, each at least once, in order")
    for folder in (lab.starter, lab.solution):
        have = sorted(p.name for p in folder.glob("*.py")) if folder.is_dir() else []
        if have != sorted(lab.student_files):
            where = folder.relative_to(lab.folder)
            problems.append(f"student_files: {where}/ holds {have}, not {sorted(lab.student_files)}")
    if lab.wrong_folder.is_dir():
        # a folder or stray file left in wrong/ would be a wrong solution nobody checks
        for other in sorted(p for p in lab.wrong_folder.iterdir() if p.suffix != ".toml" or not p.is_file()):
            problems.append(f"wrong/{other.name}: a wrong solution is a <checkpoint>-<what>.toml file")
    return problems


def _run_problems(lab: Lab, run: Run) -> list[str]:
    """[run]: a known model, then either a plug table or a phased one, never a mix."""
    problems: list[str] = []
    if run.model not in RUN_MODELS:
        problems.append(f"run.model: {run.model!r} is none of {list(RUN_MODELS)} (a URL is given to `lab run --model`)")
    if run.phased or run.judge:
        return problems + _phased_problems(run)
    return problems + _plug_problems(lab, run)


def _phased_problems(run: Run) -> list[str]:
    """phases and judge, each a function under course.graders; none of a plug table's keys,
    which would be silently ignored: the builder gives each phase its task and emails."""
    problems: list[str] = []
    for key, value in (("phases", run.phases), ("judge", run.judge)):
        if not _GRADER.match(value):
            problems.append(f"run.{key}: {value!r} is not \"course.graders.<module>:<function>\" "
                            f"(a phased run needs both phases and judge)")
        elif not (CHECKOUT / "course" / "graders" / f"{value.split(':')[0].split('.')[-1]}.py").is_file():
            problems.append(f"run.{key}: {value!r}: there is no module {value.split(':')[0]}")
    for key, given in (("plug", run.plug), ("file", run.file), ("task", run.task), ("emails", run.emails),
                       ("catalog", run.catalog), ("rug_pull", run.rug_pull), ("rug_pull_after", run.rug_pull_after)):
        if given:
            problems.append(f"run.{key}: not with phases (the phases builder gives each phase its task and emails)")
    return problems


def _plug_problems(lab: Lab, run: Run) -> list[str]:
    """A known plug point, one of the student's files, files that exist, and a rug pull only
    with a catalog to pull and an email count to pull it after."""
    problems: list[str] = []
    if not run.plug:
        problems.append("run.plug: required, or phases and judge for a lab with no plug point")
    elif run.plug not in PLUG_POINTS:
        problems.append(f"run.plug: {run.plug!r} is none of {sorted(PLUG_POINTS)}")
    if run.file not in lab.student_files:
        problems.append(f"run.file: {run.file!r} is none of student_files {lab.student_files}")
    if not run.emails:
        problems.append("run.emails: at least one file or folder is needed")
    if not run.task:
        problems.append("run.task: required with a plug (the task file the stack runs)")
    paths = [*((("run.task", run.task),) if run.task else ()),
             *((f"run.emails[{i}]", e) for i, e in enumerate(run.emails)),
             *((key, value) for key, value in (("run.catalog", run.catalog), ("run.rug_pull", run.rug_pull)) if value)]
    for key, value in paths:
        if Path(value).is_absolute() or ".." in Path(value).parts:
            problems.append(f"run.{key[4:]}: {value!r} must be relative, inside the checkout or the lab folder")
        elif not lab.resolve(value).exists():
            problems.append(f"{key}: {value!r} does not exist ({lab.resolve(value)})")
    if run.rug_pull and not run.catalog:
        problems.append("run.rug_pull: a rug pull replaces run.catalog, which is not set")
    if bool(run.rug_pull) != (run.rug_pull_after > 0):
        problems.append(f"run.rug_pull_after: {run.rug_pull_after} must be at least 1 with a rug_pull, 0 without")
    return problems
