"""python -m course.grade LAB CHECKPOINT DIR --verdict-fd N: one checkpoint, in its own process.

The runner (course/runner.py) starts this with a time limit. The grader runs here, and the
student's code never does: every student function the grader calls runs in a child process
of its own, confined (studentcode.sandbox) under a warden that kills whatever it started
(studentcode.warden), with the CPU, memory and file caps given here. The verdict is built in this
process's memory and written to the pipe the runner passed (fd N), which no student
process inherits; a student's print goes to this process's stderr, which the runner shows
as printed lines and never reads as a verdict.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import msgspec

from course import grading
from course.catalog import LABS_ROOT, find
from course.grading import Failed, GraderReport, Passed, StudentCodeMissing, StudentStopped, Verdict
from studentcode import sandbox

_encode = msgspec.json.Encoder().encode


def grade(lab_id: str, checkpoint_id: str, student_dir: Path, root: Path) -> Verdict:
    checkpoint = find(lab_id, root).checkpoint(checkpoint_id)
    grader = checkpoint.load_grader()
    try:
        verdict: object = grader(student_dir)  # a grader's code may return anything: checked below
    except StudentCodeMissing as exc:
        return Failed(checkpoint.id, "missing file", str(exc))
    except StudentStopped as exc:
        return Failed(checkpoint.id, "the student's code", str(exc))
    except Exception as exc:  # noqa: BLE001  a grader that did not turn the student's error into a case
        return Failed(checkpoint.id, "the grader", f"stopped on {type(exc).__name__}: {exc}")
    if not isinstance(verdict, Passed | Failed) or verdict.checkpoint != checkpoint.id:
        return Failed(checkpoint.id, "the grader", f"returned {verdict!r}, not a verdict for {checkpoint.id}")
    return verdict


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course.grade", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("lab", help="the lab's id")
    parser.add_argument("checkpoint", help="the checkpoint's id")
    parser.add_argument("dir", type=Path, help="the student's folder")
    parser.add_argument("--verdict-fd", type=int, required=True, help="the pipe the verdict is written to")
    parser.add_argument("--labs-root", type=Path, default=LABS_ROOT, help="folder holding the labs")
    parser.add_argument("--cpu-s", type=int, required=True, help="CPU seconds of each student process")
    parser.add_argument("--memory-bytes", type=int, required=True, help="address-space cap of each student process")
    parser.add_argument("--file-bytes", type=int, required=True, help="largest file a student process may write")
    args = parser.parse_args(argv)
    grading.configure(sandbox.Limits(args.cpu_s, args.memory_bytes, args.file_bytes))
    try:
        verdict = grade(args.lab, args.checkpoint, args.dir.resolve(), args.labs_root)
    finally:
        said = grading.close_all()
    with open(args.verdict_fd, "wb") as out:
        out.write(_encode(GraderReport(verdict, said)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
