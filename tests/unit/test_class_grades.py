"""course.class_grades: a class's rerun results as a terminal table, JSON and JUnit XML (the
students' text escaped in each), the trainer's history of attempts, and student folders
that cannot be graded as rows, never as a crash. No student code runs here."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import msgspec
import pytest

from airlock.errors import UsageError
from airlock.terminal import json_line
from cli import lab as commands
from course import class_grades
from course.catalog import find
from course.class_grades import Row
from course.grading import Failed, Passed
from course.runner import CheckpointResult, Limits, Progress

SEPARATION = find("separation")
HOSTILE = "\x1b]0;pwned\x07<b>&'\"\ud800\u202e"  # an OSC title, XML's specials, a lone surrogate, a bidi override


def progress(*verdicts: Failed | Passed) -> Progress:
    results = [CheckpointResult(v.checkpoint, f"the {v.checkpoint} title", v) for v in verdicts]
    return Progress(lab="separation", checked_at="2026-01-01T00:00:00+00:00",
                    passed=sum(isinstance(v, Passed) for v in verdicts), total=len(verdicts), checkpoints=results)


def rows() -> list[Row]:
    return [Row("ana", Path("class/ana"), progress(Passed("contract"), Passed("in-the-stack")), attempts=2),
            Row(class_grades.student_name(Path(f"class/ben{HOSTILE}")), Path("class/ben"),
                progress(Failed("contract", f"case {HOSTILE}", f"returned {HOSTILE}"), Passed("in-the-stack")),
                attempts=1)]


def test_the_table_shows_each_students_result_and_attempts_escaped() -> None:
    """One line per student with passed / total and the attempt count, a FAIL line per failed
    checkpoint with its case and message; nothing the student wrote reaches the terminal raw."""
    lines = class_grades.table(SEPARATION, rows())
    text = "\n".join(lines)
    assert "1 with every checkpoint" in lines[0]
    assert any(line.split() == ["ana", "2", "/", "2", "attempt", "2"] for line in lines)
    assert "2 / 2" not in next(line for line in lines if "ben" in line)
    assert "FAIL contract: case " in text and "\\x1b]0;pwned\\x07" in text and "\\ud800" in text
    assert all(line.isprintable() for line in lines)


def test_a_long_message_is_cut_on_the_terminal_only() -> None:
    """The terminal shows the first MESSAGE_CHARS of a message; JSON keeps all of it."""
    long = "x" * (class_grades.MESSAGE_CHARS + 50)
    row = Row("cem", Path("c"), progress(Failed("contract", "c", long)))
    assert max(len(line) for line in class_grades.table(SEPARATION, [row])) < class_grades.MESSAGE_CHARS + 40
    assert class_grades.records([row])[0]["checkpoints"][0]["message"] == long


def test_json_records_carry_the_student_attempts_and_every_checkpoint() -> None:
    """--json: per student its name, attempts, totals and each checkpoint's pass or case and message."""
    ana, ben = class_grades.records(rows())
    assert ana["student"] == "ana" and ana["attempts"] == 2 and (ana["passed"], ana["total"]) == (2, 2)
    assert ben["checkpoints"][0] == {"id": "contract", "title": "the contract title", "passed": False,
                                     "case": f"case {HOSTILE}", "message": f"returned {HOSTILE}"}
    assert ben["checkpoints"][1] == {"id": "in-the-stack", "title": "the in-the-stack title", "passed": True}
    assert ben["student"].isprintable() and json_line(ben["student"]).isascii()  # a name that is no UTF-8 too


def test_junit_is_one_testsuite_per_student_and_one_testcase_per_checkpoint() -> None:
    """The XML parses back: suites named for the students, a testcase per checkpoint, the failure's
    message its case and message; the hostile text escaped, so the document stays well formed."""
    root = ET.fromstring(class_grades.junit(SEPARATION, rows()))
    assert root.tag == "testsuites" and (root.get("tests"), root.get("failures")) == ("4", "1")
    ana, ben = root.findall("testsuite")
    assert ana.get("name") == "ana" and ana.get("failures") == "0"
    assert [case.get("name") for case in ana.findall("testcase")] == ["contract", "in-the-stack"]
    assert ana.find("testcase/failure") is None
    escaped = "\\x1b]0;pwned\\x07<b>&'\"\\ud800\\u202e"
    assert ben.get("name") == f"ben{escaped}"
    [failure] = ben.findall("testcase/failure")
    assert failure.get("message") == f"case {escaped}: returned {escaped}"
    assert ben.findall("testcase")[0].get("classname") == ben.findall("testcase")[1].get("classname")


def test_the_history_counts_each_students_attempts(tmp_path: Path) -> None:
    """Every run appends one line per student; the count includes this run, is per lab, and a
    line that is not an attempt counts for nobody."""
    history = tmp_path / "grades" / "separation.jsonl"
    first = class_grades.record_attempts(history, rows())
    assert [row.attempts for row in first] == [1, 1]
    with open(history, "ab") as out:
        out.write(b'{"torn": \n' + msgspec.json.encode(class_grades.Attempt(
            at="t", lab="tool-identity", student="ana", passed=0, total=3, failing=[])) + b"\n")
    second = class_grades.record_attempts(history, rows()[:1])
    assert [row.attempts for row in second] == [2]
    lines = history.read_bytes().splitlines()
    assert len(lines) == 5
    attempt = msgspec.json.decode(lines[1], type=class_grades.Attempt)
    assert attempt.student == class_grades.student_name(Path(f"ben{HOSTILE}"))
    assert attempt.failing == ["contract"] and attempt.total == 2


def test_the_history_is_never_inside_the_class_folder(tmp_path: Path) -> None:
    """A history under CLASS (where students write) is a usage error; beside it is fine."""
    (tmp_path / "class").mkdir()
    with pytest.raises(UsageError, match="inside the class folder"):
        class_grades.refuse_history_inside(tmp_path / "class" / "ana" / "h.jsonl", tmp_path / "class")
    class_grades.refuse_history_inside(tmp_path / "grades" / "h.jsonl", tmp_path / "class")


def test_student_folders_are_the_class_folders_own_and_nothing_else(tmp_path: Path) -> None:
    """Subfolders by name; files, hidden folders and links are no student's."""
    for name in ("ben", "ana", ".git"):
        (tmp_path / name).mkdir()
    (tmp_path / "notes.txt").write_text("")
    (tmp_path / "elsewhere").symlink_to(tmp_path / "ana")
    assert [p.name for p in class_grades.student_folders(tmp_path)] == ["ana", "ben"]
    with pytest.raises(UsageError):
        class_grades.student_folders(tmp_path / "missing")


def test_a_folder_without_the_labs_files_is_a_failed_row_without_running(tmp_path: Path) -> None:
    """No checker.py: every checkpoint failed with "missing files", no grader started."""
    result = class_grades.grade_student(SEPARATION, tmp_path, Limits())
    assert result.passed == 0 and result.total == 2
    assert {r.verdict.case for r in result.checkpoints if isinstance(r.verdict, Failed)} == {"missing files"}


def test_a_folder_the_runner_cannot_grade_is_a_failed_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An error out of the runner (a folder it cannot read) is that student's row, not the command's end."""
    (tmp_path / "checker.py").write_text("")

    def broken(*args: object, **kwargs: object) -> Progress:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(class_grades, "check", broken)
    result = class_grades.grade_student(SEPARATION, tmp_path, Limits())
    assert result.passed == 0 and all(isinstance(r.verdict, Failed) and r.verdict.case == "not graded"
                                      for r in result.checkpoints)


def test_only_keeps_the_named_checkpoints_and_refuses_unknown_ones() -> None:
    """--only contract: the lab with that checkpoint alone; an unknown id names the known ones."""
    assert [c.id for c in commands._only(SEPARATION, ["contract"]).checkpoints] == ["contract"]
    assert commands._only(SEPARATION, None) is SEPARATION
    with pytest.raises(UsageError, match="contract, in-the-stack"):
        commands._only(SEPARATION, ["nope"])
