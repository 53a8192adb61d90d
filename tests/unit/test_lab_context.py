"""course.context: every line that tells a student what to type or open names the command and
the path of where they are (a checkout, or the compose `lab` container), and a missing
grader dependency stops every lab command with the one install line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cli import lab as commands
from course import context
from course.catalog import LABS_ROOT, find
from course.grading import Failed, Passed
from course.runner import CheckpointResult, Progress
from tests.conftest import ROOT

HOST: dict[str, str] = {}
CONTAINER = {context.CONTAINER_VARIABLE: "1"}


def test_a_lab_command_is_the_line_typed_where_the_student_is() -> None:
    """On the host `airlock lab ...`; in the container the `docker compose run ... lab ...` line."""
    assert context.lab_command("check separation --dir d", HOST) == "airlock lab check separation --dir d"
    assert context.lab_command("check separation --dir d", CONTAINER) == (
        'docker compose run --rm -u "$(id -u):$(id -g)" lab check separation --dir d')
    assert context.in_container({context.CONTAINER_VARIABLE: "0"}) is False


def test_a_labs_own_text_names_the_containers_commands_in_the_container() -> None:
    """A hint's or a grader's `airlock lab X` becomes the container's line there, and stays on the host."""
    text = "run `airlock lab run separation --dir <your folder>` and read its line"
    assert context.for_student(text, HOST) == text
    assert context.for_student(text, CONTAINER) == (
        f"run `{context.CONTAINER_COMMAND} run separation --dir <your folder>` and read its line")
    assert "airlock lab" not in context.for_student("Write it (airlock lab hint separation 1)", CONTAINER)


def test_a_lesson_is_the_repositorys_path_in_the_container(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The image's /app/labs/<id>/README.md is labs/<id>/README.md to the student; a file
    under the working folder is relative to it; other paths and the host's stay as they are."""
    lesson = LABS_ROOT / "separation" / "README.md"
    assert context.lab_path(lesson, HOST) == str(lesson)
    assert context.lab_path(lesson, CONTAINER) == "labs/separation/README.md"
    monkeypatch.chdir(tmp_path)
    assert context.lab_path(tmp_path / "me" / ".airlock-lab" / "runs", CONTAINER) == "me/.airlock-lab/runs"
    assert context.lab_path(Path("/elsewhere/x"), CONTAINER) == "/elsewhere/x"


def test_the_trace_page_and_install_hints_name_each_places_way() -> None:
    """`airlock trace`, the live page and the install line: a host command on the host, the
    container's (or the image's rebuild) in the container; none names pip there."""
    data = Path("/work/me/.airlock-lab/runs/1")
    assert context.trace_command(data, HOST) == f"AIRLOCK_DATA_DIR={data} airlock trace"
    assert context.trace_command(data, CONTAINER).startswith(f"{context.CONTAINER_RUN} -e AIRLOCK_DATA_DIR={data} ")
    assert context.INSTALL_LINE in context.page_missing(HOST)
    assert "pip" not in context.page_missing(CONTAINER) and context.CONTAINER_COMMAND in context.page_missing(CONTAINER)
    assert context.install_line(HOST) == "pip install -e '.[lab]'"
    assert context.install_line(CONTAINER) == "docker compose build lab"


def test_a_missing_grader_module_is_named_with_the_install_line() -> None:
    """hypothesis and dkim not found: one error naming their distributions and `pip install -e '.[lab]'`."""
    def find_spec(name: str) -> object:
        return None if name in ("hypothesis", "dkim") else object()

    with pytest.raises(context.GraderDependencyMissing) as missing:
        context.require_grader_modules(find_spec, HOST)
    assert str(missing.value).count("\n") == 0
    assert "hypothesis, dkimpy" in str(missing.value) and context.INSTALL_LINE in str(missing.value)
    context.require_grader_modules(lambda name: object(), HOST)  # all present: no error


@pytest.mark.parametrize("argv", [["list"], ["check", "separation", "--dir", "."], ["hint", "separation", "1"]])
def test_every_lab_command_stops_at_once_without_the_graders(monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str],
                                                            argv: list[str]) -> None:
    """Any lab command with hypothesis missing: exit 78 and one line with the install line, nothing run."""
    monkeypatch.delenv(context.CONTAINER_VARIABLE, raising=False)
    monkeypatch.setattr(context.importlib.util, "find_spec", lambda name, *a: None if name == "hypothesis" else 1)
    code = commands.main(argv)
    out, err = capsys.readouterr()
    assert code == 78 and out == "" and err.count("\n") == 1
    assert "hypothesis" in err and context.INSTALL_LINE in err


def test_a_correct_solution_without_the_graders_is_an_install_line_not_a_score(tmp_path: Path) -> None:
    """`python -m lab check separation` on the solution where hypothesis and dkim cannot be
    imported (as after `pip install -e .` alone): exit 78 and the install line, no "0 / 2"."""
    (tmp_path / "checker.py").write_bytes((LABS_ROOT / "separation" / "solution" / "checker.py").read_bytes())
    hidden = ("import runpy, sys; sys.modules.update(hypothesis=None, dkim=None); "
              "runpy.run_module('lab', run_name='__main__')")
    env = {k: v for k, v in os.environ.items() if k != context.CONTAINER_VARIABLE} | {"PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-P", "-c", hidden, "check", "separation", "--dir", str(tmp_path)],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 78, done.stderr
    assert done.stdout == "" and done.stderr.count("\n") == 1
    assert context.INSTALL_LINE in done.stderr and "hypothesis, dkimpy" in done.stderr


def test_start_in_the_container_names_the_containers_check_and_the_repositorys_lesson(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """`lab start` in the container: the next step is the `docker compose run` line and the
    lesson is labs/separation/README.md; no host command, no /app path."""
    monkeypatch.setenv(context.CONTAINER_VARIABLE, "1")
    assert commands.main(["start", "separation", "--dir", str(tmp_path / "me")]) == 0
    out = capsys.readouterr().out
    assert f"{context.CONTAINER_COMMAND} check separation --dir {tmp_path / 'me'}" in out
    assert "the lesson: labs/separation/README.md" in out
    assert "airlock lab" not in out and str(ROOT) not in out.replace(str(tmp_path), "")


def test_start_on_the_host_names_airlock_lab_and_the_lessons_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """`lab start` on the host: `airlock lab check ...` and the lesson's full path."""
    monkeypatch.delenv(context.CONTAINER_VARIABLE, raising=False)
    assert commands.main(["start", "separation", "--dir", str(tmp_path / "me")]) == 0
    out = capsys.readouterr().out
    assert f"airlock lab check separation --dir {tmp_path / 'me'}" in out
    assert f"the lesson: {LABS_ROOT / 'separation' / 'README.md'}" in out


@pytest.mark.parametrize(("environ", "expected"), [
    pytest.param(HOST, "airlock lab hint separation 1", id="host"),
    pytest.param(CONTAINER, f"{context.CONTAINER_COMMAND} hint separation 1", id="container")])
def test_a_failed_checks_advice_names_the_command_of_where_it_ran(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        environ: dict[str, str], expected: str) -> None:
    """The report's "stuck?" line and a grader's message that names a lab command, rendered for the place."""
    monkeypatch.delenv(context.CONTAINER_VARIABLE, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    lab = find("separation")
    progress = Progress(lab="separation", checked_at="now", passed=1, total=2, checkpoints=[
        CheckpointResult("contract", "c", Failed("contract", "still a TODO",
                                                 "Write it (airlock lab hint separation 1 for a nudge)")),
        CheckpointResult("in-the-stack", "s", Passed("in-the-stack"))])
    commands._print_check(lab, progress)
    out = capsys.readouterr().out
    assert out.count(expected) == 2
    assert ("airlock lab" in out) == (environ == HOST)
