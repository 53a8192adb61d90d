"""The actor labs' in-stack checkpoints (tool-identity, executor-checks, preconditions): the
student's code in the actor of a private airlock, judged from calls.jsonl and the trace.
Starter, reference and wrong solutions are graded by test_labs.py; these are the edges."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from course import catalog
from course.grading import Failed, Passed
from tests.labs.support import grade_in_process, solution_with

SELECTION = "def bound_tool_choice(catalog, requested):\n"


@pytest.mark.parametrize(("body", "said"), [
    pytest.param("    while True:\n        pass\n", "did not return in time", id="hangs"),
    pytest.param("    import os\n    os._exit(3)\n", "ended its process", id="exits"),
])
def test_a_selection_that_hangs_or_exits_fails_the_checkpoint_with_its_reason(tmp_path: Path, body: str,
                                                                           said: str) -> None:
    """A bound_tool_choice that never returns, or ends its process, is a failed checkpoint
    naming why, quickly, never a hung or crashed grader."""
    lab = catalog.find("tool-identity")
    folder = solution_with(lab, tmp_path, append="\n\n" + SELECTION + body)
    started = time.monotonic()
    verdict = grade_in_process(lab, "in-the-stack", folder)
    assert isinstance(verdict, Failed) and said in verdict.message, verdict
    assert time.monotonic() - started < 20


def test_printing_in_the_selection_changes_nothing(tmp_path: Path) -> None:
    """print() in the student's code goes to the log, never into the actor's answer."""
    lab = catalog.find("tool-identity")
    source = (lab.solution / "selection.py").read_text()
    folder = solution_with(lab, tmp_path, {"    wanted = _request(requested)\n":
                                           "    wanted = _request(requested)\n    print('chose', wanted)\n"})
    assert "print('chose'" in (folder / "selection.py").read_text() != source
    assert grade_in_process(lab, "in-the-stack", folder) == Passed("in-the-stack")


def test_a_wrong_selection_after_the_rug_pull_is_named_with_it(tmp_path: Path) -> None:
    """A selection that follows a marker only for the same tool name passes before the rug
    pull and fails after it: the case says '(after the rug pull)' and names the marker's pair."""
    lab = catalog.find("tool-identity")
    wrong = lab.wrong_solution("in-the-stack-marker")
    folder = catalog.build_wrong_solution(wrong, tmp_path / "student")
    verdict = grade_in_process(lab, "in-the-stack", folder)
    assert isinstance(verdict, Failed)
    assert "(after the rug pull)" in verdict.case and "[[tool:relay/send-status]]" in verdict.case


def test_lab_run_counts_the_students_own_refusals_as_clean(tmp_path: Path) -> None:
    """`lab run executor-checks` with the reference: its checks refuse the over-range order and
    the rug-pulled call themselves (student.checks), which is the student's code deciding, not
    the kernel overruling it: the run is clean (exit 0). A range check without its maximum is
    overruled (student.missed): not clean (exit 1)."""
    from tests.labs.test_lab_run import lab_run

    lab = catalog.find("executor-checks")
    (tmp_path / "good").mkdir()
    good = solution_with(lab, tmp_path / "good")
    done = lab_run("executor-checks", "--dir", str(good))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "student.checks" in done.stdout and "overruled by the kernel       0" in done.stdout
    bad = catalog.build_wrong_solution(lab.wrong_solution("in-the-stack-over-the-range"), tmp_path / "bad")
    done = lab_run("executor-checks", "--dir", str(bad))
    assert done.returncode == 1 and "student.missed" in done.stdout, done.stdout
