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
      wrong/<checkpoint>-<what>/
                            a deliberately wrong solution, the same file names, that must
                            fail checkpoint <checkpoint> (and pass the others) with a Failed
                            verdict whose `case` names what is wrong: the words of <what>
                            ('-' read as a space, case ignored) appear in `case`, e.g.
                            wrong/contract-arabic-indic/checker.py fails "contract" with
                            case "Arabic-Indic digits '٤٤١١'"; tests/labs/test_labs.py
                            holds every lab to this

lab.toml, every key required unless marked (unknown keys are errors):

    id = "separation"                 # the folder's name; [a-z0-9-]
    title = "Separation: the checker between reader and actor"
    seed = "002"                      # the course lesson it teaches (../shared/seeds/002_*)
    languages = ["en", "de"]          # "en" first, then the seed's language
    minutes = 40                      # expected time for a student
    objectives = ["...", "..."]       # what the student can do afterwards, at least one
    student_files = ["checker.py"]    # the files the student writes, in starter/ and solution/

    [[checkpoints]]                   # at least one, ids unique, in the order they are graded
    id = "contract"                   # [a-z0-9-]
    title = "check() keeps exactly 1-6 ASCII digits"
    grader = "lab.graders.separation:contract"   # "module:function", module under lab.graders

    [[hints]]                         # levels 1, 2 and 3 each at least once, in that order
    level = 1                         # 1 a nudge, 2 the idea, 3 nearly the answer
    text = "..."

    [instructor]
    minutes = 40                      # expected time, as an instructor plans a session
    mistakes = ["...", "..."]         # the common mistakes, at least one
    reading_the_report = "..."        # how to read the student's `airlock lab check` output

A grader is `grade(student_dir: Path) -> lab.grading.Verdict` (see lab/grading.py); the
runner (lab/runner.py) calls it in its own process, so a grader may simply call the
student's functions.
"""

from __future__ import annotations

import re
from pathlib import Path

import msgspec

LABS_ROOT = Path(__file__).resolve().parent.parent / "labs"
LESSON_LANGUAGES = frozenset({"en", "nl", "de", "ru", "tr"})
HINT_LEVELS = (1, 2, 3)
_SLUG = re.compile(r"\A[a-z0-9]+(?:-[a-z0-9]+)*\Z")
_GRADER = re.compile(r"\Alab\.graders\.[a-z_][a-z0-9_]*:[a-z_][a-z0-9_]*\Z")
_SEED = re.compile(r"\A[0-9]{3}\Z")


class LabFormatError(Exception):
    """A lab folder or its lab.toml breaks the format; the message names the file and key."""


class UnknownLab(Exception):
    """No lab has this id; the message lists the ones that exist."""


class _Strict(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A typo in lab.toml (`titel`, `grade`) is an error at load, never a silently
    ignored key."""


class Checkpoint(_Strict):
    id: str
    title: str
    grader: str

    @property
    def grader_module(self) -> str:
        return self.grader.split(":", 1)[0]

    @property
    def grader_function(self) -> str:
        return self.grader.split(":", 1)[1]


class Hint(_Strict):
    level: int
    text: str


class Instructor(_Strict):
    minutes: int
    mistakes: list[str]
    reading_the_report: str


class Lab(_Strict):
    id: str
    title: str
    seed: str
    languages: list[str]
    minutes: int
    objectives: list[str]
    student_files: list[str]
    checkpoints: list[Checkpoint]
    hints: list[Hint]
    instructor: Instructor
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

    def checkpoint(self, checkpoint_id: str) -> Checkpoint:
        for checkpoint in self.checkpoints:
            if checkpoint.id == checkpoint_id:
                return checkpoint
        known = ", ".join(c.id for c in self.checkpoints)
        raise UnknownLab(f"lab {self.id} has no checkpoint {checkpoint_id!r} (it has: {known})")

    def hints_at(self, level: int) -> list[str]:
        return [hint.text for hint in self.hints if hint.level == level]

    def wrong_solutions(self) -> list[Path]:
        """wrong/<checkpoint>-<what>/ folders, sorted by name."""
        wrong = self.folder / "wrong"
        return sorted(p for p in wrong.iterdir() if p.is_dir()) if wrong.is_dir() else []

    def wrong_checkpoint(self, wrong_dir: Path) -> Checkpoint:
        """The checkpoint a wrong/<checkpoint>-<what>/ folder must fail: the longest
        checkpoint id its name starts with, followed by '-'."""
        matches = [c for c in self.checkpoints if wrong_dir.name.startswith(c.id + "-")]
        if not matches:
            raise LabFormatError(f"{wrong_dir}: a wrong solution's folder is <checkpoint>-<what>; "
                                 f"checkpoints: {', '.join(c.id for c in self.checkpoints)}")
        return max(matches, key=lambda c: len(c.id))


def load(folder: Path) -> Lab:
    """One lab folder, checked in full (see the module docstring)."""
    path = folder / "lab.toml"
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise LabFormatError(f"{path}: cannot read ({exc.strerror})") from exc
    try:
        lab = msgspec.toml.decode(raw, type=Lab)
    except msgspec.ValidationError as exc:
        raise LabFormatError(f"{path}: {exc}") from exc
    except msgspec.DecodeError as exc:
        raise LabFormatError(f"{path}: not valid TOML ({exc})") from exc
    if lab.location:
        raise LabFormatError(f"{path}: location: not a lab.toml key (it is where the file lies)")
    lab = msgspec.structs.replace(lab, location=str(folder))
    for problem in _problems(lab):
        raise LabFormatError(f"{path}: {problem}")
    return lab


def load_all(root: Path = LABS_ROOT) -> list[Lab]:
    """Every lab under root, in the course's order (by seed, then id)."""
    folders = sorted(p for p in root.iterdir() if (p / "lab.toml").is_file()) if root.is_dir() else []
    return sorted((load(folder) for folder in folders), key=lambda lab: (lab.seed, lab.id))


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
            problems.append(f"checkpoints[{i}].grader: {checkpoint.grader!r} is not \"lab.graders.<module>:<function>\"")
    levels = [hint.level for hint in lab.hints]
    if levels != sorted(levels) or set(levels) != set(HINT_LEVELS):
        problems.append(f"hints: levels {levels} are not 1, 2 and 3, each at least once, in order")
    for folder in (lab.starter, lab.solution, *lab.wrong_solutions()):
        have = sorted(p.name for p in folder.glob("*.py")) if folder.is_dir() else []
        if have != sorted(lab.student_files):
            where = folder.relative_to(lab.folder)
            problems.append(f"student_files: {where}/ holds {have}, not {sorted(lab.student_files)}")
    for wrong in lab.wrong_solutions():
        try:
            lab.wrong_checkpoint(wrong)
        except LabFormatError as exc:
            problems.append(f"wrong/{wrong.name}: {exc}")
    return problems
