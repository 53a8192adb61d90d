"""python -m lab.grade LAB CHECKPOINT DIR --verdict FILE: one checkpoint, in its own process.

The runner (lab/runner.py) starts this with a time limit and a memory cap. The verdict goes
to FILE, never to stdout: the student's code runs in this process and may print anything,
including text that looks like a verdict, and that text is only ever captured, never read
as one. Whatever the student's code does (raise, call sys.exit, print), this process ends
with a verdict in FILE; only a hang, os._exit or a crash of Python itself leaves none, and
the runner names those.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path

import msgspec

from lab.catalog import LABS_ROOT, find
from lab.grading import Failed, Passed, StudentCodeMissing, Verdict

_encode = msgspec.json.Encoder().encode


def grade(lab_id: str, checkpoint_id: str, student_dir: Path, root: Path) -> Verdict:
    checkpoint = find(lab_id, root).checkpoint(checkpoint_id)
    grader = getattr(importlib.import_module(checkpoint.grader_module), checkpoint.grader_function)
    try:
        verdict = grader(student_dir)
    except SystemExit as exc:
        return Failed(checkpoint.id, "sys.exit",
                      f"the code called sys.exit({exc.code!r}); a function returns its answer, it never ends the program")
    except StudentCodeMissing as exc:
        return Failed(checkpoint.id, "missing file", str(exc))
    except Exception as exc:  # a grader that did not turn the student's error into a case
        return Failed(checkpoint.id, "the grader", f"stopped on {type(exc).__name__}: {exc}")
    if not isinstance(verdict, Passed | Failed) or verdict.checkpoint != checkpoint.id:
        return Failed(checkpoint.id, "the grader", f"returned {verdict!r}, not a verdict for {checkpoint.id}")
    return verdict


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.grade", description=__doc__.splitlines()[0])
    parser.add_argument("lab", help="the lab's id")
    parser.add_argument("checkpoint", help="the checkpoint's id")
    parser.add_argument("dir", type=Path, help="the student's folder")
    parser.add_argument("--verdict", type=Path, required=True, help="file the JSON verdict is written to")
    parser.add_argument("--labs-root", type=Path, default=LABS_ROOT, help="folder holding the labs")
    args = parser.parse_args(argv)
    # Opened before any student code runs, so code that changes directory or closes files
    # cannot stop the verdict from being written.
    out = os.open(args.verdict, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    verdict = grade(args.lab, args.checkpoint, args.dir.resolve(), args.labs_root)
    os.write(out, _encode(verdict))
    os.close(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
