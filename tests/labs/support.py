"""What the per-lab tests share: grading one checkpoint in this process (faster than the
runner's own process, for tests that poke at a grader), and a student's folder holding the
reference with a few edits, the way a wrong/<name>.toml describes one, and a `lab run --keep`
held open while a test looks at its page."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from course.catalog import Lab
from course.grading import Verdict
from tests.conftest import ROOT

KEPT_RUN_UP_S = 120.0


def grade_in_process(lab: Lab, checkpoint_id: str, student_dir: Path) -> Verdict:
    checkpoint = lab.checkpoint(checkpoint_id)
    return checkpoint.load_grader()(student_dir)


def solution_with(lab: Lab, folder: Path, replace: dict[str, str] | None = None, append: str = "") -> Path:
    """`folder` holding the lab's one student file: the reference, each `replace` key (which
    must occur exactly once) replaced by its value, and `append` added at the end."""
    [name] = lab.student_files
    text = (lab.solution / name).read_text(encoding="utf-8")
    for old, new in (replace or {}).items():
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    (folder / name).write_text(text + append, encoding="utf-8")
    return folder


@contextlib.contextmanager
def kept_lab_run(argv: list[str], until: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """`python -m lab *argv` (a `run ... --keep`): yields the process and its report up to the
    first line holding `until`; the test stops it (Ctrl-C) and checks its exit code. Whatever
    is still running on the way out is killed, its pipe closed."""
    process = subprocess.Popen([sys.executable, "-m", "lab", *argv], stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True, cwd=ROOT, stdin=subprocess.DEVNULL)
    assert process.stdout is not None  # piped
    try:
        out, deadline = "", time.monotonic() + KEPT_RUN_UP_S
        while until not in out:
            assert process.poll() is None and time.monotonic() < deadline, out
            out += process.stdout.readline()
        yield process, out
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stdout.close()
