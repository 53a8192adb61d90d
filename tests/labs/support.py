"""What the per-lab tests share: grading one checkpoint in this process (faster than the
runner's own process, for tests that poke at a grader), and a student's folder holding the
reference with a few edits, the way a wrong/<name>.toml describes one."""

from __future__ import annotations

from pathlib import Path

from lab.catalog import Lab
from lab.grading import Verdict


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
