"""`airlock lab grade ID --class CLASS`: a trainer's grades, by rerunning every student's code.

A student's folder holds what the student wrote, and what the student's own tools wrote
there, .airlock-lab/progress.json among them: it can say anything, so nothing here reads it.
Each folder directly under CLASS is one student (the folder's name is the student's), rerun
through the students' own runner, course.runner.check (every checkpoint in its own process),
with save=False: nothing is written into a student's folder. A folder missing the lab's
files, or whose code crashes, is that student's row with its failure, never the end of the
class's grading.

Each rerun is one attempt per student, kept in a history file the trainer owns (one JSON
line per student per run, an Attempt; by default ./airlock-grades/<lab>.jsonl, never inside
CLASS), from which the table counts each student's attempts.

Three renderings of the same rows: terminal lines (every name, case and message escaped:
they are the student's), one JSON array, and JUnit XML (one testsuite per student, one
testcase per checkpoint, a failure's message its case and message) for a course's CI.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec

from airlock.errors import UsageError
from airlock.terminal import shown
from course.catalog import LABS_ROOT, Lab
from course.grading import Failed
from course.runner import CheckpointResult, Limits, Progress, check

HISTORY_FOLDER = Path("airlock-grades")  # under the trainer's working folder
MESSAGE_CHARS = 300  # of a failure's message on the terminal; JSON and JUnit keep it whole


class Row(msgspec.Struct, frozen=True):
    """One student's result in one rerun."""

    student: str  # the folder's name under CLASS, escaped (student_name): safe to print and to encode
    folder: Path
    progress: Progress
    attempts: int = 0  # this rerun included, from the history; 0 when none is kept


class Attempt(msgspec.Struct, frozen=True):
    """One line of the history file. Add fields with defaults; never rename one."""

    at: str
    lab: str
    student: str
    passed: int
    total: int
    failing: list[str]  # the checkpoints that failed, in the lab's order


_attempt = msgspec.json.Decoder(Attempt)


# --- grading ------------------------------------------------------------------------------


def student_folders(class_dir: Path) -> list[Path]:
    """Every student's folder: the folders directly under CLASS, by name; hidden folders and
    links (which could lead anywhere) are no student's."""
    if not class_dir.is_dir():
        raise UsageError(f"{class_dir} is not a folder (--class names the folder that holds one folder per student)")
    return sorted(p for p in class_dir.iterdir() if p.is_dir() and not p.is_symlink() and not p.name.startswith("."))


def student_name(folder: Path) -> str:
    """The student's name: the folder's, every hidden character escaped as on a terminal
    (a folder's name can hold anything, even bytes that are no UTF-8, which no JSON holds)."""
    return shown(folder.name)


def failed_everywhere(lab: Lab, case: str, message: str) -> Progress:
    """A result in which every checkpoint failed for one reason (the folder, not the code)."""
    results = [CheckpointResult(c.id, c.title, Failed(c.id, case, message)) for c in lab.checkpoints]
    return Progress(lab=lab.id, checked_at=_now(), passed=0, total=len(results), checkpoints=results)


def grade_student(lab: Lab, folder: Path, limits: Limits, root: Path = LABS_ROOT) -> Progress:
    """The student's folder rerun, nothing written into it; a folder without the lab's files
    or one the runner cannot grade is a result with that failure."""
    missing = [name for name in lab.student_files if not (folder / name).is_file()]
    if missing:
        return failed_everywhere(lab, "missing files", f"{', '.join(missing)} not in the student's folder")
    try:
        return check(lab, folder, limits, root, save=False)
    except Exception as exc:  # noqa: BLE001 - one student's folder never stops the class's grading
        return failed_everywhere(lab, "not graded", f"{type(exc).__name__}: {exc}")


def grade_class(lab: Lab, class_dir: Path, limits: Limits, root: Path = LABS_ROOT,
                graded: Callable[[Row], None] = lambda row: None) -> list[Row]:
    """Every student under CLASS rerun, one after another (each check runs its checkpoints
    side by side); `graded` hears of each row as it is done."""
    rows = []
    for folder in student_folders(class_dir):
        row = Row(student_name(folder), folder, grade_student(lab, folder, limits, root))
        graded(row)
        rows.append(row)
    return rows


# --- the history of attempts --------------------------------------------------------------


def default_history(lab_id: str) -> Path:
    return HISTORY_FOLDER / f"{lab_id}.jsonl"


def refuse_history_inside(history: Path, class_dir: Path) -> None:
    """UsageError when the history would live in the class's folder, where students write."""
    if history.resolve().is_relative_to(class_dir.resolve()):
        raise UsageError(f"--history {history} is inside the class folder {class_dir}, which the students "
                         f"write: keep the grades' history outside it (default {default_history('<lab>')})")


def attempts_so_far(history: Path, lab_id: str) -> Counter[str]:
    """Each student's attempts at this lab in the history; a line that is not an Attempt
    (a hand edit, a torn last line) counts for nobody."""
    counted: Counter[str] = Counter()
    try:
        lines = history.read_bytes().splitlines()
    except FileNotFoundError:
        return counted
    for line in lines:
        try:
            attempt = _attempt.decode(line)
        except msgspec.DecodeError:
            continue
        if attempt.lab == lab_id:
            counted[attempt.student] += 1
    return counted


def record_attempts(history: Path, rows: Sequence[Row]) -> list[Row]:
    """Append one Attempt per row to the history (its folder made if missing) and return the
    rows with their attempt counts, this one included."""
    if not rows:
        return []
    before = attempts_so_far(history, rows[0].progress.lab)
    history.parent.mkdir(parents=True, exist_ok=True)
    lines = b"".join(msgspec.json.encode(Attempt(
        at=row.progress.checked_at, lab=row.progress.lab, student=row.student, passed=row.progress.passed,
        total=row.progress.total, failing=[r.id for r in row.progress.checkpoints if isinstance(r.verdict, Failed)]))
        + b"\n" for row in rows)
    with open(history, "ab") as out:
        out.write(lines)
    return [msgspec.structs.replace(row, attempts=before[row.student] + 1) for row in rows]


# --- renderings ---------------------------------------------------------------------------


def table(lab: Lab, rows: Sequence[Row]) -> list[str]:
    """Terminal lines, every name, case and message escaped."""
    if not rows:
        return [shown(f"{lab.id}: no student folder to grade")]
    width = max(len(row.student) for row in rows)
    passed_all = sum(row.progress.passed == row.progress.total for row in rows)
    lines = [shown(f"{lab.id}: {len(rows)} student(s), {passed_all} with every checkpoint; "
                   f"rerun here, no progress file read")]
    for row in rows:
        attempts = f"  attempt {row.attempts}" if row.attempts else ""
        lines.append(f"  {row.student:<{width}}  {row.progress.passed} / {row.progress.total}{attempts}")
        for result in row.progress.checkpoints:
            if isinstance(result.verdict, Failed):
                message = result.verdict.message
                cut = message if len(message) <= MESSAGE_CHARS else message[:MESSAGE_CHARS] + "..."
                lines.append(f"      FAIL {shown(result.id)}: {shown(result.verdict.case)}: {shown(cut)}")
    return lines


def progress_record(folder: Path, progress: Progress) -> dict[str, Any]:
    """One folder's result as plain data, for --json."""
    return {"dir": str(folder), "lab": progress.lab, "checked_at": progress.checked_at,
            "passed": progress.passed, "total": progress.total,
            "checkpoints": [{"id": r.id, "title": r.title, "passed": not isinstance(r.verdict, Failed),
                             **({"case": r.verdict.case, "message": r.verdict.message}
                                if isinstance(r.verdict, Failed) else {})}
                            for r in progress.checkpoints]}


def records(rows: Sequence[Row]) -> list[dict[str, Any]]:
    """The rows as plain data: each student's name, attempts and result (airlock.terminal.json_line escapes)."""
    return [{"student": row.student, "attempts": row.attempts} | progress_record(row.folder, row.progress)
            for row in rows]


def junit(lab: Lab, rows: Sequence[Row]) -> bytes:
    """JUnit XML: one testsuite per student, one testcase per checkpoint; a failed checkpoint's
    failure message is its case and message. Every text is escaped as on a terminal first
    (XML 1.0 cannot hold a control character at all), then as XML by ElementTree."""
    suites = ET.Element("testsuites", name=shown(lab.id), tests=str(sum(r.progress.total for r in rows)),
                        failures=str(sum(r.progress.total - r.progress.passed for r in rows)))
    for row in rows:
        suite = ET.SubElement(suites, "testsuite", name=row.student, tests=str(row.progress.total),
                              failures=str(row.progress.total - row.progress.passed),
                              timestamp=row.progress.checked_at)
        for result in row.progress.checkpoints:
            case = ET.SubElement(suite, "testcase", classname=f"{shown(lab.id)}.{row.student}",
                                 name=shown(result.id))
            if isinstance(result.verdict, Failed):
                failure = ET.SubElement(case, "failure", message=shown(f"{result.verdict.case}: "
                                                                       f"{result.verdict.message}"))
                failure.text = shown(result.title)
    return ET.tostring(suites, encoding="utf-8", xml_declaration=True) + b"\n"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")

