"""The labs: every lab.toml, its starter, solution and wrong solutions, graded the way a
student's code is (one process per checkpoint); the runner's limits; the lab commands."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from cli import lab as commands
from course import catalog
from course.catalog import Lab, LabFormatError, WrongSolution, build_wrong_solution
from course.grading import Failed, Passed
from course.runner import Limits, grade_all, load_progress, run_checkpoint
from tests.conftest import ROOT
from tests.labs.support import grade_in_process

LABS = catalog.load_all()
LAB_FOLDERS = sorted(p.parent.name for p in (ROOT / "labs").glob("*/lab.toml"))
WRONG = [pytest.param(lab, wrong, id=f"{lab.id}/{wrong.name}") for lab in LABS for wrong in lab.wrong_solutions()]
# Labs whose every wrong solution pins the exact case it is caught on (`case` in its .toml).
CASE_PINNED = ("executor-checks", "preconditions", "red-and-blue")
SEPARATION = catalog.find("separation")
TEST_LIMITS = Limits(wall_s=30.0, cpu_s=30)
ALL = len(SEPARATION.checkpoints)  # separation's checkpoints, each passed by the reference
IN_THE_STACK = "in-the-stack"  # a lab's checkpoint that runs the student's code in a private stack
# Labs whose wrong solutions name in `also_fails` every other checkpoint they fail: held to
# exactly that set; in the others an in-stack checkpoint may pass or fail with a named case.
EXACT_ALSO_FAILS = {lab.id for lab in LABS if any(wrong.also_fails for wrong in lab.wrong_solutions())}


def by_id(labs: list[Lab]) -> list[object]:  # pytest.param values, for parametrize
    return [pytest.param(lab, id=lab.id) for lab in labs]


def student_copy(source: Path, target: Path) -> Path:
    """A student's folder holding a copy of `source`, so grading never writes into labs/."""
    shutil.copytree(source, target)
    return target


def wrong_copy(lab: Lab, name: str, target: Path) -> Path:
    """A student's folder holding one wrong solution, built from the reference and its changes."""
    return build_wrong_solution(lab.wrong_solution(name), target)


def with_checker(tmp_path: Path, code: str) -> Path:
    folder = tmp_path / "student"
    folder.mkdir()
    (folder / "checker.py").write_text(code)
    return folder


def grade_contract(folder: Path, limits: Limits = TEST_LIMITS) -> Passed | Failed:
    return run_checkpoint(SEPARATION, SEPARATION.checkpoint("contract"), folder, limits)


# --- the format -----------------------------------------------------------------------------


def test_the_labs_come_in_the_courses_order() -> None:
    """The course's order: separation, tool-identity, executor-checks, preconditions, red-and-blue,
    from lab.toml's `order`, in `lab list` and `lab list --json` alike."""
    course = ["separation", "tool-identity", "executor-checks", "preconditions", "red-and-blue"]
    assert [lab.id for lab in LABS] == course and [lab.order for lab in LABS] == [1, 2, 3, 4, 5]
    listed = subprocess.run([sys.executable, "-m", "lab", "list", "--json"], capture_output=True, text=True,
                            cwd=ROOT, check=True)
    assert [entry["id"] for entry in json.loads(listed.stdout)] == course


def test_two_labs_in_one_place_are_refused(tmp_path: Path) -> None:
    for lab in LABS[:2]:
        shutil.copytree(lab.folder, tmp_path / lab.id)
    toml = tmp_path / LABS[1].id / "lab.toml"
    toml.write_text(toml.read_text().replace(f"order = {LABS[1].order}", f"order = {LABS[0].order}", 1))
    with pytest.raises(LabFormatError, match=f"order = {LABS[0].order} is also {LABS[0].id}'s"):
        catalog.load_all(tmp_path)


def test_every_lab_folder_loads() -> None:
    """Every labs/*/lab.toml loads and checks; the two core labs are among them."""
    assert [lab.id for lab in LABS] and sorted(lab.id for lab in LABS) == LAB_FOLDERS
    assert {"separation", "tool-identity"} <= set(LAB_FOLDERS)


@pytest.mark.parametrize("lab", by_id(LABS))
def test_lab_has_its_lessons_files_and_graders(lab: Lab) -> None:
    """A README per language (English and the seed's), the same files in starter and solution,
    three hint levels, and a grader that imports for every checkpoint."""
    assert lab.languages[0] == "en" and len(lab.languages) >= 2
    for lang in lab.languages:
        assert (lab.folder / ("README.md" if lang == "en" else f"README.{lang}.md")).read_text().strip()
    assert sorted(p.name for p in lab.starter.glob("*.py")) == sorted(lab.student_files)
    assert sorted(p.name for p in lab.solution.glob("*.py")) == sorted(lab.student_files)
    assert {hint.level for hint in lab.hints} == {1, 2, 3}
    assert lab.instructor.mistakes and lab.instructor.reading_the_report
    for checkpoint in lab.checkpoints:
        assert callable(checkpoint.load_grader())
    assert list(lab.wrong_solutions()), "every lab ships deliberately wrong solutions"


@pytest.mark.parametrize("lab", by_id(LABS))
def test_every_reference_solution_runs_clean_through_lab_run(lab: Lab, tmp_path: Path) -> None:
    """Every lab has a [run] table, and `airlock lab run` with its reference solution (a real
    `python -m lab run` process, a private stack) exits 0: what the lesson asks, in the pipeline."""
    assert lab.run is not None, f"{lab.id} has no [run] table"
    folder = shutil.copytree(lab.solution, tmp_path / "mine")
    done = subprocess.run([sys.executable, "-m", "lab", "run", lab.id, "--dir", str(folder)], capture_output=True,
                          text=True, timeout=300, cwd=ROOT, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "NOT CLEAN" not in done.stdout


def broken_copy(tmp_path: Path, edit: str, old: str = "") -> Path:
    folder = tmp_path / "separation"
    shutil.copytree(SEPARATION.folder, folder)
    toml = folder / "lab.toml"
    text = toml.read_text()
    toml.write_text(text.replace(old, edit, 1) if old else edit + text)  # top-level keys go first
    return folder


@pytest.mark.parametrize(("edit", "old", "named"), [
    pytest.param('titel = "typo"\n', "", "titel", id="unknown-key"),
    pytest.param('grader = "course.graders.separation"', 'grader = "course.graders.separation:contract"',
                 "checkpoints[0].grader", id="grader-without-function"),
    pytest.param('grader = "os:system"', 'grader = "course.graders.separation:contract"',
                 "checkpoints[0].grader", id="grader-outside-lab-graders"),
    pytest.param('languages = ["en", "tr"]', 'languages = ["en", "de"]', "README.tr.md", id="missing-readme"),
    pytest.param('languages = ["de", "en"]', 'languages = ["en", "de"]', "languages", id="english-not-first"),
    pytest.param('seed = "2"', 'seed = "002"', "seed", id="seed-not-three-digits"),
    pytest.param('minutes = "40"', "minutes = 40", "minutes", id="minutes-not-int"),
    pytest.param('id = "other"', 'id = "separation"', "id", id="id-not-folder"),
    pytest.param('level = 4', 'level = 3', "hints", id="hint-level-4"),
    pytest.param('location = "/etc"\n', "", "location", id="location-set-in-toml"),
])
def test_a_broken_lab_toml_names_file_and_key(tmp_path: Path, edit: str, old: str, named: str) -> None:
    """A lab.toml that breaks the format fails at load, naming the file and the key."""
    if old:
        assert old in (SEPARATION.folder / "lab.toml").read_text()
    folder = broken_copy(tmp_path, edit, old)
    with pytest.raises(LabFormatError) as caught:
        catalog.load(folder)
    assert str(folder / "lab.toml") in str(caught.value) and named in str(caught.value)


MUTATION = '''why = "a deliberately broken mutation"
[[change]]
file = "checker.py"
find = 'return None'
replace = 'return answer'
'''


@pytest.mark.parametrize(("name", "text", "named"), [
    pytest.param("contract-ok", MUTATION, "", id="well-formed"),
    pytest.param("contract-missing", MUTATION.replace("'return None'", "'return Nothing'"),
                 "change[0].find: is not found in solution/checker.py", id="find-not-found"),
    pytest.param("contract-ambiguous", MUTATION.replace("'return None'", "'return'"),
                 "change[0].find: is found 2 times in solution/checker.py", id="find-ambiguous"),
    pytest.param("contract-empty-find", MUTATION.replace("'return None'", "''"),
                 "change[0].find: is empty", id="find-empty"),
    pytest.param("contract-other-file", MUTATION.replace('"checker.py"', '"other.py"'),
                 "change[0].file: 'other.py' is none of student_files", id="unknown-file"),
    pytest.param("contract-no-change", 'why = "nothing changes"\nchange = []\n',
                 "change: at least one is needed", id="empty-change-list"),
    pytest.param("contract-same", MUTATION.replace("'return answer'", "'return None'"),
                 "change[0].replace: the same as find", id="replace-equals-find"),
    pytest.param("contract-typo", MUTATION.replace("replace =", "replcae ="), "replcae", id="unknown-key"),
    pytest.param("contract-no-why", MUTATION.replace('why = "a deliberately broken mutation"', ""),
                 "why", id="missing-why"),
    pytest.param("nosuch-thing", MUTATION, "<checkpoint>-<what>", id="checkpoint-prefix-unknown"),
    pytest.param("contract-", MUTATION, "<checkpoint>-<what>", id="what-missing"),
    pytest.param("contract-also", 'also_fails = ["nosuch"]\n' + MUTATION, "also_fails[0]", id="also-fails-unknown"),
    pytest.param("contract-also", 'also_fails = ["contract"]\n' + MUTATION, "also_fails[0]", id="also-fails-itself"),
])
def test_a_broken_wrong_solution_names_file_and_key(tmp_path: Path, name: str, text: str, named: str) -> None:
    """wrong/<checkpoint>-<what>.toml names a checkpoint, and each change names a student
    file and a `find` that occurs exactly once: anything else fails the lab's load,
    naming the .toml and the key."""
    folder = broken_copy(tmp_path, "")
    path = folder / "wrong" / f"{name}.toml"
    path.write_text(text)
    if not named:
        wrong = catalog.load(folder).wrong_solution(name)
        assert "return answer" in wrong.files["checker.py"] and wrong.checkpoint.id == "contract"
        return
    with pytest.raises(LabFormatError) as caught:
        catalog.load(folder)
    assert str(path) in str(caught.value) and named in str(caught.value)


def test_a_solution_edit_that_moves_a_find_breaks_the_load(tmp_path: Path) -> None:
    """A wrong solution whose `find` no longer occurs in the edited reference fails at load,
    instead of silently turning into a copy of the reference that passes."""
    folder = broken_copy(tmp_path, "")
    checker = folder / "solution" / "checker.py"
    checker.write_text(checker.read_text().replace("[0-9]{1,6}", "[0-9]{1,6}?"))
    with pytest.raises(LabFormatError, match=r"wrong/contract-[a-z-]+\.toml: change\[0\]\.find: is not found"):
        catalog.load(folder)


def test_a_folder_left_in_wrong_is_an_error(tmp_path: Path) -> None:
    """A wrong/ folder (the old format) or a stray file would be a wrong solution nobody checks."""
    folder = broken_copy(tmp_path, "")
    (folder / "wrong" / "contract-empty").mkdir()
    with pytest.raises(LabFormatError, match="wrong/contract-empty: a wrong solution is a"):
        catalog.load(folder)


# --- grading the shipped code ---------------------------------------------------------------


@pytest.mark.parametrize("lab", by_id(LABS))
def test_starter_fails_each_checkpoint_as_a_todo(lab: Lab, tmp_path: Path) -> None:
    """The untouched starter fails every checkpoint, each saying its function is a TODO."""
    folder = student_copy(lab.starter, tmp_path / "student")
    for checkpoint, verdict in zip(lab.checkpoints, grade_all(lab, folder, TEST_LIMITS), strict=True):
        assert isinstance(verdict, Failed), checkpoint.id
        assert verdict.checkpoint == checkpoint.id and "is still a TODO" in verdict.message, verdict


@pytest.mark.parametrize("lab", by_id(LABS))
def test_solution_passes_every_checkpoint(lab: Lab, tmp_path: Path) -> None:
    """The reference solution passes every checkpoint."""
    folder = student_copy(lab.solution, tmp_path / "student")
    assert grade_all(lab, folder, TEST_LIMITS) == [Passed(c.id) for c in lab.checkpoints]


@pytest.mark.parametrize(("lab", "wrong"), WRONG)
def test_wrong_solution_fails_its_checkpoint_naming_the_case(lab: Lab, wrong: WrongSolution, tmp_path: Path) -> None:
    """wrong/<checkpoint>-<what>.toml fails exactly <checkpoint> (and the checkpoints its
    `also_fails` names, which grade the same code), its case names <what> (and is the `case`
    the file pins, where it pins one), and the others pass."""
    folder = build_wrong_solution(wrong, tmp_path / "student")
    for checkpoint, verdict in zip(lab.checkpoints, grade_all(lab, folder, TEST_LIMITS), strict=True):
        if checkpoint.id in wrong.also_fails:
            assert isinstance(verdict, Failed), f"{wrong.name} passed {checkpoint.id}, which also_fails names"
            continue
        if (checkpoint.id != wrong.checkpoint.id and IN_THE_STACK in (checkpoint.id, wrong.checkpoint.id)
                and lab.id not in EXACT_ALSO_FAILS):
            # The in-stack checkpoint runs all of the student's code in the pipeline: a contract
            # defect that reaches it fails it too, and the defect it shows fails the contract.
            # Either way it is a named case, never a TODO or a crashed grader.
            assert verdict == Passed(checkpoint.id) or (isinstance(verdict, Failed) and verdict.case
                                                        and "TODO" not in verdict.message), verdict
            continue
        if checkpoint.id != wrong.checkpoint.id:
            assert verdict == Passed(checkpoint.id), f"{wrong.name} should pass {checkpoint.id}: {verdict}"
            continue
        assert isinstance(verdict, Failed), f"{wrong.name} passed {checkpoint.id}"
        assert wrong.what.lower() in verdict.case.replace("-", " ").lower(), verdict
        assert not wrong.case or verdict.case == wrong.case, verdict
        assert verdict.message and "TODO" not in verdict.message


@pytest.mark.parametrize("lab_id", CASE_PINNED)
def test_every_wrong_solution_pins_its_case(lab_id: str) -> None:
    """In these labs each wrong solution names the exact case it must be caught on; one
    added without it would be held only to the words of <what>."""
    assert all(wrong.case for wrong in catalog.find(lab_id).wrong_solutions())


@pytest.mark.parametrize("lab", by_id(LABS))
@pytest.mark.parametrize("content", ["", "def broken(:\n"], ids=["missing", "syntax-error"])
def test_a_missing_or_broken_file_fails_every_checkpoint_naming_it(lab: Lab, tmp_path: Path, content: str) -> None:
    """No student file, or one that does not import, fails every checkpoint with the file's
    name; each grader says so itself (graded here in this process, no runner around it)."""
    if content:
        for name in lab.student_files:
            (tmp_path / name).write_text(content)
    for checkpoint in lab.checkpoints:
        verdict = grade_in_process(lab, checkpoint.id, tmp_path)
        assert isinstance(verdict, Failed) and verdict.checkpoint == checkpoint.id
        assert any(name in verdict.message + verdict.case for name in lab.student_files), verdict


def test_hidden_cases_are_the_same_on_every_run(tmp_path: Path) -> None:
    """Grading is deterministic: the generated case that catches a wrong checker is the same twice."""
    folder = wrong_copy(SEPARATION, "contract-generated", tmp_path / "student")
    first, second = grade_contract(folder), grade_contract(folder)
    assert isinstance(first, Failed) and first == second


def test_one_function_is_graded_while_the_other_is_a_todo(tmp_path: Path) -> None:
    """tool-identity: bound_tool_choice written, naive still TODO gives checkpoints 1 / 2."""
    lab = catalog.find("tool-identity")
    folder = student_copy(lab.starter, tmp_path / "student")
    starter = (folder / "selection.py").read_text()
    solution = (lab.solution / "selection.py").read_text()
    bound = solution[solution.index("def bound_tool_choice"):solution.index("# --- given helpers")]
    start, end = starter.index("def bound_tool_choice"), starter.index("# --- given helpers")
    (folder / "selection.py").write_text(starter[:start] + bound + starter[end:])
    verdicts = {c.id: run_checkpoint(lab, c, folder, TEST_LIMITS) for c in lab.checkpoints}
    assert verdicts["bound"] == Passed("bound")
    assert isinstance(verdicts["naive"], Failed) and "TODO" in verdicts["naive"].message


# --- the runner: a student's code that misbehaves is a Failed checkpoint with its reason ------


def test_a_crash_is_a_failed_checkpoint_naming_the_error(tmp_path: Path) -> None:
    """A check() that raises fails the checkpoint with the exception and the case."""
    verdict = grade_contract(with_checker(tmp_path, "def check(answer):\n    return 1 // 0\n"))
    assert isinstance(verdict, Failed) and "ZeroDivisionError" in verdict.message
    assert "4411" in verdict.case


def test_a_file_that_does_not_import_is_a_failed_checkpoint(tmp_path: Path) -> None:
    """A syntax error in the student's file fails the checkpoint, naming the file."""
    verdict = grade_contract(with_checker(tmp_path, "def check(answer)\n    return None\n"))
    assert isinstance(verdict, Failed) and verdict.case == "importing checker.py"
    assert "SyntaxError" in verdict.message


def test_a_missing_file_is_a_failed_checkpoint(tmp_path: Path) -> None:
    """An empty student folder fails, saying the file is missing and how to get it."""
    (tmp_path / "student").mkdir()
    verdict = grade_contract(tmp_path / "student")
    assert isinstance(verdict, Failed) and "lab start" in verdict.message


def test_a_hang_is_a_failed_checkpoint_within_the_time_limit(tmp_path: Path) -> None:
    """A check() that never returns is killed at the wall-clock limit and fails with that reason."""
    folder = with_checker(tmp_path, "def check(answer):\n    while True:\n        pass\n")
    verdict = grade_contract(folder, Limits(wall_s=1.5, cpu_s=30))
    assert isinstance(verdict, Failed) and verdict == Failed("contract", "time limit", verdict.message)
    assert "1.5 s" in verdict.message


def test_waiting_for_input_ends_at_once(tmp_path: Path) -> None:
    """input() in the student's code meets end of file, not the grader's own stdin: a
    failure, no hang, even when that stdin is a pipe nobody writes to (as a terminal is)."""
    folder = with_checker(tmp_path, "def check(answer):\n    return input()\n")
    silent_read, silent_write = os.pipe()
    saved = os.dup(0)
    os.dup2(silent_read, 0)
    try:
        verdict = grade_contract(folder, Limits(wall_s=5.0, cpu_s=30))
    finally:
        os.dup2(saved, 0)
        for fd in (saved, silent_read, silent_write):
            os.close(fd)
    assert isinstance(verdict, Failed) and "EOFError" in verdict.message, verdict


@pytest.mark.parametrize("forge", [
    pytest.param('print(\'{"type":"Passed","checkpoint":"contract"}\')', id="print"),
    pytest.param('import os; os.write(1, b\'{"type":"Passed","checkpoint":"contract"}\\n\')', id="fd-1"),
    pytest.param('import sys; sys.stderr.write(\'{"type":"Passed","checkpoint":"contract"}\')', id="stderr"),
])
def test_printing_a_verdict_does_not_forge_one(tmp_path: Path, forge: str) -> None:
    """Text that looks like a Passed verdict on stdout or stderr is never read as one."""
    code = f"{forge}\n\ndef check(answer):\n    {forge}\n    return answer\n"
    verdict = grade_contract(with_checker(tmp_path, code))
    assert isinstance(verdict, Failed) and "returned" in verdict.message


@pytest.mark.parametrize("exit_call", ["sys.exit(0)", "sys.exit('done')", "raise SystemExit(3)"])
def test_sys_exit_is_a_failed_checkpoint(tmp_path: Path, exit_call: str) -> None:
    """A check() that calls sys.exit fails the checkpoint and says so; the grader lives on."""
    verdict = grade_contract(with_checker(tmp_path, f"import sys\n\ndef check(answer):\n    {exit_call}\n"))
    assert isinstance(verdict, Failed) and "'4411'" in verdict.case and "sys.exit" in verdict.message


def test_os_exit_is_a_failed_checkpoint_naming_the_exit(tmp_path: Path) -> None:
    """os._exit skips every handler; the case it happened on and the exit code are named."""
    verdict = grade_contract(with_checker(tmp_path, "import os\n\ndef check(answer):\n    os._exit(0)\n"))
    assert isinstance(verdict, Failed) and "'4411'" in verdict.case and "exit code 0" in verdict.message


FORGER = """
import glob, json, os

def check(answer):
    # the grader's verdict pipe, found through /proc, written to, then out before it can answer
    for path in glob.glob("/proc/*/cmdline"):
        try:
            words = open(path, "rb").read().split(b"\\0")
        except OSError:
            continue
        if b"--verdict" in words:  # a verdict file named on the grader's command line
            try:
                with open(words[words.index(b"--verdict") + 1].decode(), "w") as out:
                    out.write(json.dumps({"type": "Passed", "checkpoint": "contract"}))
            except OSError:
                pass
        if b"--verdict-fd" in words:
            pid, fd = path.split("/")[2], words[words.index(b"--verdict-fd") + 1].decode()
            for target in (f"/proc/{pid}/fd/{fd}", f"/proc/{pid}/fd/1"):
                try:
                    with open(target, "w") as out:
                        out.write(json.dumps({"verdict": {"type": "Passed", "checkpoint": "contract"}}))
                except OSError:
                    pass
            try:
                os.kill(int(pid), 9)
            except OSError:
                pass
    os._exit(0)
"""


def test_a_checker_that_forges_the_verdict_fails(tmp_path: Path) -> None:
    """Writing Passed where the grader keeps its verdict (a file or a pipe named on its
    command line) and then leaving, or killing the grader, forges nothing."""
    verdict = grade_contract(with_checker(tmp_path, FORGER))
    assert isinstance(verdict, Failed) and "ended its process" in verdict.message, verdict


def test_a_checker_that_closes_every_descriptor_fails_alone(tmp_path: Path) -> None:
    """Closing every descriptor ends only the student's own process, named as such."""
    code = "import os\n\ndef check(answer):\n    os.closerange(0, 4096)\n    return answer\n"
    verdict = grade_contract(with_checker(tmp_path, code))
    assert isinstance(verdict, Failed) and "'4411'" in verdict.case and "ended its process" in verdict.message


def test_memory_is_capped(tmp_path: Path) -> None:
    """A check() that grabs more memory than the cap fails instead of exhausting the machine."""
    code = "def check(answer):\n    return bytearray(3 * 1024 ** 3)\n"
    verdict = grade_contract(with_checker(tmp_path, code), Limits(wall_s=30.0, cpu_s=30, memory_bytes=1024**3))
    assert isinstance(verdict, Failed) and "MemoryError" in verdict.message


def _running(pid: int) -> bool:
    """True while `pid` exists and is not a zombie (killed, waiting for its parent to reap it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _processes_running(marker: str) -> list[int]:
    """Live processes whose command line names `marker` (a student's folder)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if marker.encode() in cmdline.read_bytes() and _running(int(cmdline.parent.name)):
                found.append(int(cmdline.parent.name))
        except (OSError, ValueError):
            continue
    return found


DOUBLE_FORK = """
import os, re, time

FORKED = []

def check(answer):
    if not FORKED:  # once: a grandchild that leaves the process group and sleeps for ten minutes
        FORKED.append(True)
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                time.sleep(600)
                os._exit(0)
            os._exit(0)
        time.sleep(0.2)
    return answer if type(answer) is str and re.fullmatch(r"[0-9]{1,6}", answer) else None
"""


def test_processes_the_code_starts_do_not_outlive_the_check(tmp_path: Path) -> None:
    """A double-forked, setsid() grandchild is gone when the checkpoint ends."""
    folder = with_checker(tmp_path, DOUBLE_FORK)
    seen: list[int] = []

    def look() -> None:
        while not stop.is_set():
            seen.extend(pid for pid in _processes_running(str(folder)) if pid not in seen)
            time.sleep(0.05)

    stop = threading.Event()
    watcher = threading.Thread(target=look)
    watcher.start()
    try:
        verdict = grade_contract(folder)
    finally:
        stop.set()
        watcher.join()
    assert isinstance(verdict, Passed) and len(seen) >= 2, (verdict, seen)  # the forking process and its grandchild
    deadline = time.monotonic() + 5.0  # SIGKILL is sent before grading returns; delivery is asynchronous
    while _processes_running(str(folder)) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = _processes_running(str(folder))
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, "a process the student's code started outlived the check"


def test_a_realtime_signal_is_a_failed_checkpoint_and_progress_is_saved(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A checker that kills itself with SIGRTMIN+6: one line names the signal, progress is kept."""
    folder = with_checker(tmp_path, "import os, signal\n\ndef check(answer):\n"
                                    "    os.kill(os.getpid(), signal.SIGRTMIN + 6)\n")
    code, out, err = run_lab(capsys, "check", "separation", "--dir", str(folder), "--time-limit", "30")
    progress = load_progress(folder)
    assert code == 1 and "SIGRTMIN+6" in out and "Traceback" not in out + err
    assert progress is not None and progress.passed == 0


def test_the_check_says_which_boundaries_are_in_force(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The check's output names the sandbox the student's code ran in."""
    folder = student_copy(SEPARATION.solution, tmp_path / "good")
    code, out, _ = run_lab(capsys, "check", "separation", "--dir", str(folder))
    line = next(line for line in out.splitlines() if line.startswith("sandbox:"))
    assert code == 0 and "landlock" in line and "seccomp" in line and "warden" in line


# --- the commands ---------------------------------------------------------------------------


def run_lab(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = commands.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_every_lab_option_has_help() -> None:
    """`airlock lab CMD --help` explains every option and argument; none is left bare."""
    def walk(parser: argparse.ArgumentParser):
        yield parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    yield from walk(sub)
    bare = [f"{parser.prog} {action.option_strings or action.dest}" for parser in walk(commands.build_parser())
            for action in parser._actions
            if not isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)) and not action.help]
    assert not bare


def test_list_json_has_every_lab_with_its_fields(capsys: pytest.CaptureFixture[str]) -> None:
    """`lab list --json` is one array, each lab an object with id, title, seed, languages, minutes, checkpoints."""
    code, out, _ = run_lab(capsys, "list", "--json")
    listed = json.loads(out)
    assert code == 0 and [item["id"] for item in listed] == [lab.id for lab in LABS]
    for item in listed:
        assert {"id", "title", "seed", "languages", "minutes", "checkpoints"} <= set(item)
        assert all({"id", "title"} <= set(c) for c in item["checkpoints"])


def test_start_never_overwrites_without_force(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """`lab start` copies the starter; over a student's work it refuses (exit 2) unless --force."""
    folder = tmp_path / "me"
    assert run_lab(capsys, "start", "separation", "--dir", str(folder))[0] == 0
    assert (folder / "checker.py").read_text() == (SEPARATION.starter / "checker.py").read_text()
    (folder / "checker.py").write_text("my work")
    code, _, err = run_lab(capsys, "start", "separation", "--dir", str(folder))
    assert code == 2 and "checker.py" in err and (folder / "checker.py").read_text() == "my work"
    assert run_lab(capsys, "start", "separation", "--dir", str(folder), "--force")[0] == 0
    assert (folder / "checker.py").read_text() == (SEPARATION.starter / "checker.py").read_text()


def test_a_folder_it_may_not_write_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A folder this user may not write (the compose `lab` tool run without -u) is one line naming
    it and the -u fix, exit 1, not a traceback."""
    def refused(*_: object, **__: object) -> None:
        raise PermissionError(13, "Permission denied", str(tmp_path / "me"))

    monkeypatch.setattr(Path, "mkdir", refused)
    code, _, err = run_lab(capsys, "start", "separation", "--dir", str(tmp_path / "me"))
    assert code == 1 and len(err.splitlines()) == 1
    assert str(tmp_path / "me") in err and '-u "$(id -u):$(id -g)"' in err


def test_reset_keeps_a_backup(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """`lab reset` puts the starter back and keeps the student's file under .airlock-lab/backup-*."""
    folder = tmp_path / "me"
    folder.mkdir()
    (folder / "checker.py").write_text("my work")
    code, out, _ = run_lab(capsys, "reset", "separation", "--dir", str(folder))
    backups = list((folder / ".airlock-lab").glob("backup-*/checker.py"))
    assert code == 0 and [b.read_text() for b in backups] == ["my work"] and str(backups[0].parent) in out
    assert (folder / "checker.py").read_text() == (SEPARATION.starter / "checker.py").read_text()


def test_check_exit_code_progress_line_and_case(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """`lab check` exits 0 only when all pass, prints "checkpoints N / M" and names a failed case."""
    good = student_copy(SEPARATION.solution, tmp_path / "good")
    code, out, _ = run_lab(capsys, "check", "separation", "--dir", str(good))
    assert code == 0 and f"checkpoints {ALL} / {ALL}" in out
    bad = wrong_copy(SEPARATION, "contract-arabic-indic", tmp_path / "bad")
    code, out, _ = run_lab(capsys, "check", "separation", "--dir", str(bad))
    assert code == 1 and f"checkpoints 0 / {ALL}" in out and "Arabic-Indic digits" in out and "hint" in out


def test_check_json_and_progress_for_a_class(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """`check --json` is one object; `progress --dir CLASS --json` collects every student's last check."""
    ana = student_copy(SEPARATION.solution, tmp_path / "class" / "ana")
    ben = student_copy(SEPARATION.starter, tmp_path / "class" / "ben")
    code, out, _ = run_lab(capsys, "check", "separation", "--dir", str(ana), "--json")
    assert code == 0 and json.loads(out)["passed"] == ALL
    assert run_lab(capsys, "check", "separation", "--dir", str(ben))[0] == 1
    progress = load_progress(ben)
    assert progress is not None and progress.passed == 0
    code, out, _ = run_lab(capsys, "progress", "--dir", str(tmp_path / "class"), "--json")
    records = {Path(r["dir"]).name: r for r in json.loads(out)}
    assert code == 0 and set(records) == {"ana", "ben"}
    assert (records["ana"]["passed"], records["ben"]["passed"], records["ben"]["total"]) == (ALL, 0, ALL)
    assert records["ben"]["checkpoints"][0]["passed"] is False and "TODO" in records["ben"]["checkpoints"][0]["message"]


def test_a_folder_where_progress_cannot_be_saved_is_still_graded(capsys: pytest.CaptureFixture[str],
                                                                  tmp_path: Path) -> None:
    """When progress.json cannot be written (a read-only mount), check still grades and says so."""
    folder = student_copy(SEPARATION.solution, tmp_path / "student")
    (folder / ".airlock-lab").write_text("a file where the state folder would go")
    code, out, err = run_lab(capsys, "check", "separation", "--dir", str(folder))
    assert code == 0 and f"checkpoints {ALL} / {ALL}" in out and "progress not saved" in err


def test_an_unreadable_progress_file_is_named_not_skipped(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A hand-edited progress.json shows up in `progress` with why it cannot be read."""
    state = tmp_path / "class" / "cem" / ".airlock-lab"
    state.mkdir(parents=True)
    (state / "progress.json").write_text('{"lab": "separation"')
    code, out, _ = run_lab(capsys, "progress", "--dir", str(tmp_path / "class"), "--json")
    [record] = json.loads(out)
    assert code == 0 and Path(record["dir"]).name == "cem" and "progress.json" in record["error"]


def test_student_text_is_escaped_on_the_terminal(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """An ESC sequence or bidi control in a student's exception reaches the terminal escaped."""
    folder = with_checker(tmp_path, "def check(answer):\n    raise ValueError('\\x1b[2J\\u202egone')\n")
    code, out, _ = run_lab(capsys, "check", "separation", "--dir", str(folder))
    assert code == 1 and "\x1b" not in out and "\u202e" not in out and "\\x1b[2J\\u202egone" in out


def test_what_the_student_printed_is_shown_escaped_and_kept(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A failed checkpoint shows the last lines the student's code printed, escaped, and
    progress.json keeps them; printing is help for debugging, never a verdict."""
    folder = with_checker(tmp_path, "def check(answer):\n    print('debug', repr(answer), '\\x1b[2J')\n"
                                    "    return answer\n")
    code, out, _ = run_lab(capsys, "check", "separation", "--dir", str(folder))
    assert code == 1 and "printed: debug '4411' \\x1b[2J" in out and "\x1b" not in out
    progress = load_progress(folder)
    assert progress is not None and "debug ''" in progress.checkpoints[0].printed


def test_wrong_lists_and_writes_a_wrong_solution(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """`lab wrong ID` lists each wrong solution with its checkpoint and why; `lab wrong ID
    NAME --dir D` writes it there, and over existing files only with --force."""
    code, out, _ = run_lab(capsys, "wrong", "separation")
    wrongs = SEPARATION.wrong_solutions()
    assert code == 0 and all(f"{w.name}: fails {w.checkpoint.id}; {w.why}" in out for w in wrongs)
    folder = tmp_path / "demo"
    code, out, _ = run_lab(capsys, "wrong", "separation", "contract-arabic-indic", "--dir", str(folder))
    written = (folder / "checker.py").read_text()
    assert code == 0 and "isdigit()" in written and written != (SEPARATION.solution / "checker.py").read_text()
    assert run_lab(capsys, "wrong", "separation", "contract-none", "--dir", str(folder))[0] == 2
    assert (folder / "checker.py").read_text() == written
    assert run_lab(capsys, "wrong", "separation", "contract-none", "--dir", str(folder), "--force")[0] == 0
    code, _, err = run_lab(capsys, "wrong", "separation", "contract-nosuch", "--dir", str(folder))
    assert code == 2 and "contract-arabic-indic" in err


@pytest.mark.parametrize("lab", by_id(LABS))
def test_notes_show_the_instructor_notes(capsys: pytest.CaptureFixture[str], lab: Lab) -> None:
    """`lab notes ID` prints the expected time, every common mistake and how to read a report."""
    code, out, _ = run_lab(capsys, "notes", lab.id)
    assert code == 0 and f"{lab.instructor.minutes} min" in out
    assert all(mistake[:40] in out for mistake in lab.instructor.mistakes)


@pytest.mark.parametrize(("level", "code"), [(1, 0), (3, 0), (0, 2), (4, 2)])
def test_hint_levels(capsys: pytest.CaptureFixture[str], level: int, code: int) -> None:
    """`lab hint ID N` prints level N's hint for 1-3 and refuses any other level."""
    got, out, err = run_lab(capsys, "hint", "separation", str(level))
    assert got == code
    if code == 0:
        assert SEPARATION.hints_at(level)[0] in out
    else:
        assert "1" in err and "3" in err


@pytest.mark.parametrize("limit", ["0", "-1", "nan", "inf"])
def test_a_time_limit_that_is_no_limit_is_a_usage_error(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                         limit: str) -> None:
    """--time-limit must be a positive, finite number of seconds."""
    code, _, err = run_lab(capsys, "check", "separation", "--dir", str(tmp_path), "--time-limit", limit)
    assert code == 2 and "--time-limit" in err


def test_an_unknown_lab_is_a_usage_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """An id that names no lab exits 2 and lists the labs there are."""
    code, _, err = run_lab(capsys, "start", "../etc", "--dir", str(tmp_path))
    assert code == 2 and "separation" in err


def test_airlock_lab_runs_lab_in_its_own_process() -> None:
    """`airlock lab ...` reaches python -m lab, and importing the kernel's CLI imports nothing of lab."""
    probe = "import sys, cli.runtime; print(sorted(m for m in sys.modules if m == 'lab' or m.startswith('lab.')))"
    imported = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert imported.stdout.strip() == "[]"
    listed = subprocess.run([sys.executable, "-c", "import sys; from cli.runtime import main; "
                             "sys.exit(main(['lab', 'list', '--json']))"],
                            capture_output=True, text=True, cwd=ROOT, check=True)
    assert [item["id"] for item in json.loads(listed.stdout)] == [lab.id for lab in LABS]
