"""Run a lab's checkpoints, each in its own process with limits, and keep the progress.

Each checkpoint runs as `python -m course.grade` (course/grade.py) in a fresh process, so the
grader's state never leaks from one checkpoint into the next. The grader never runs the
student's code itself: each student function runs in a confined child of its own
(studentcode.student, studentcode.sandbox), with the CPU, memory and file caps passed here, under a
warden that kills every process it started. The grader process gets:
- a wall-clock limit; its whole process group is killed when it runs over, and also when
  it ends (the wardens, in sessions of their own, see their lifeline close and clean up);
- stdin from /dev/null, stdout and stderr into a file: a student's print lands there and
  is shown as printed lines, never read as a verdict;
- a pipe of its own for the verdict, which no student process inherits, read with a bound.
Its verdict must decode as exactly one GraderReport for this checkpoint.

Progress: a student's `check` writes <dir>/.airlock-lab/progress.json, the last result per
checkpoint, which `airlock lab progress` shows. It is the student's own file and can say
anything: a trainer grades by rerunning (course/class_grades.py, check(save=False)).
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

import msgspec

from course.catalog import LABS_ROOT, Checkpoint, Lab
from course.grading import Failed, GraderReport, Passed, Verdict
from studentcode import warden

PROJECT_ROOT = Path(__file__).resolve().parent.parent
STATE_FOLDER = ".airlock-lab"
PROGRESS_FILE = "progress.json"
OUTPUT_TAIL_CHARS = 400
PRINTED_TAIL_CHARS = 2000
PRINTED_TAIL_LINES = 10
VERDICT_MAX_BYTES = 64 * 1024


@dataclass(frozen=True)
class Limits:
    wall_s: float = 60.0
    cpu_s: int = 60
    memory_bytes: int = 2 * 1024**3
    file_bytes: int = 64 * 1024**2


class CheckpointResult(msgspec.Struct, frozen=True):
    id: str
    title: str
    verdict: Verdict
    printed: str = ""  # the last lines the student's code printed
    sandbox: list[str] = []  # the boundaries the student's processes said were in force


class Progress(msgspec.Struct, frozen=True):
    """<dir>/.airlock-lab/progress.json. Add fields with defaults; never rename one."""

    lab: str
    checked_at: str
    passed: int
    total: int
    checkpoints: list[CheckpointResult]


_report = msgspec.json.Decoder(GraderReport)
_progress = msgspec.json.Decoder(Progress)


def check(lab: Lab, student_dir: Path, limits: Limits = Limits(), root: Path = LABS_ROOT,
          save: bool = True) -> Progress:
    """Every checkpoint. With save (a student's own check) the result is also saved as the
    folder's progress; without it nothing is written into the folder (a trainer's rerun)."""
    graded = _in_parallel(lab, student_dir, limits, root)
    results = [CheckpointResult(c.id, c.title, g.verdict, g.printed, g.sandbox)
               for c, g in zip(lab.checkpoints, graded, strict=True)]
    progress = Progress(lab=lab.id, checked_at=datetime.now(UTC).isoformat(timespec="seconds"),
                        passed=sum(isinstance(r.verdict, Passed) for r in results),
                        total=len(results), checkpoints=results)
    if not save:
        return progress
    try:
        save_progress(student_dir, progress)
    except OSError as exc:  # a folder mounted read-only (the container lab) is graded all the same
        raise ProgressNotSaved(progress, f"{progress_path(student_dir)}: {exc.strerror or exc}") from exc
    return progress


def grade_all(lab: Lab, student_dir: Path, limits: Limits = Limits(), root: Path = LABS_ROOT) -> list[Verdict]:
    """Every checkpoint's verdict, in the lab's order. The checkpoints are independent
    processes, so they run side by side, one per CPU (each waits on its child, not the CPU)."""
    return [graded.verdict for graded in _in_parallel(lab, student_dir, limits, root)]


def _in_parallel(lab: Lab, student_dir: Path, limits: Limits, root: Path) -> list[Graded]:
    workers = max(1, min(len(lab.checkpoints), os.cpu_count() or 1))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda c: grade_checkpoint(lab, c, student_dir, limits, root), lab.checkpoints))


class Graded(NamedTuple):
    verdict: Verdict
    printed: str  # the last lines the code wrote to stdout: shown to help, never read as a verdict
    sandbox: list[str] = []  # noqa: RUF012  a NamedTuple's default, never mutated


def run_checkpoint(lab: Lab, checkpoint: Checkpoint, student_dir: Path, limits: Limits = Limits(),
                   root: Path = LABS_ROOT) -> Verdict:
    return grade_checkpoint(lab, checkpoint, student_dir, limits, root).verdict


def grade_checkpoint(lab: Lab, checkpoint: Checkpoint, student_dir: Path, limits: Limits = Limits(),
                     root: Path = LABS_ROOT) -> Graded:
    with tempfile.TemporaryDirectory(prefix="airlock-lab-") as work:
        workdir = Path(work)
        verdict_in, verdict_out = os.pipe()
        command = [sys.executable, "-P", "-m", "course.grade", lab.id, checkpoint.id, str(student_dir.resolve()),
                   "--verdict-fd", str(verdict_out), "--labs-root", str(root.resolve()), *_limit_options(limits)]
        try:
            with open(workdir / "output", "wb") as out:
                process = subprocess.Popen(command, cwd=workdir, env=_environment(), stdin=subprocess.DEVNULL,
                                           stdout=out, stderr=out, start_new_session=True, pass_fds=(verdict_out,))
        finally:
            os.close(verdict_out)
        started = time.monotonic()
        try:
            raw = _read_bounded(verdict_in, VERDICT_MAX_BYTES + 1, started + limits.wall_s)
            code = process.wait(timeout=max(0.0, started + limits.wall_s - time.monotonic()))
        except subprocess.TimeoutExpired:
            _kill_group(process)
            return Graded(Failed(checkpoint.id, "time limit",
                                 f"the code did not finish within {limits.wall_s:g} s: a loop that never "
                                 f"ends, or a wait for input that never comes"), _printed(workdir / "output"))
        finally:
            os.close(verdict_in)
        elapsed = time.monotonic() - started
        _kill_group(process)
        verdict, sandbox = _read_verdict(checkpoint, raw, code, elapsed, workdir)
        return Graded(verdict, _printed(workdir / "output"), sandbox)


def _read_bounded(fd: int, limit: int, deadline: float) -> bytes:
    """At most `limit` bytes from the verdict pipe, until it closes or the deadline passes
    (subprocess.TimeoutExpired, as a wait would raise)."""
    chunks, got = [], 0
    while got < limit:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise subprocess.TimeoutExpired("course.grade", 0)
        chunk = os.read(fd, min(65536, limit - got))
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _read_verdict(checkpoint: Checkpoint, raw: bytes, code: int, elapsed: float,
                  workdir: Path) -> tuple[Verdict, list[str]]:
    if len(raw) > VERDICT_MAX_BYTES:
        return Failed(checkpoint.id, "the grader", f"wrote a verdict over {VERDICT_MAX_BYTES} bytes"), []
    if raw:
        try:
            report = _report.decode(raw)
        except msgspec.DecodeError as exc:
            return Failed(checkpoint.id, "the grader", f"wrote no readable verdict ({exc})"), []
        if report.verdict.checkpoint != checkpoint.id:
            return Failed(checkpoint.id, "the grader", f"wrote a verdict for {report.verdict.checkpoint!r}"), []
        return report.verdict, report.sandbox
    if code < 0:  # the grader's own process: the student's limits are its children's, not its own
        return Failed(checkpoint.id, "crash", f"the grader's process ended on {warden.signal_name(-code)}"), []
    tail = _tail(workdir / "output")
    detail = f"; last output: {tail}" if tail else ""
    return Failed(checkpoint.id, "exit", f"the grader's process ended with exit code {code} after {elapsed:.1f} s "
                                         f"without a verdict{detail}"), []


def _environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "HYPOTHESIS"))}
    env["PYTHONPATH"] = str(PROJECT_ROOT)  # the project's packages, wherever the grader's cwd is
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # no __pycache__ left in the student's folder
    env["PYTHONHASHSEED"] = "0"  # the same hidden cases in the same order on every run
    cache = _hypothesis_cache()
    if cache is not None:
        env["HYPOTHESIS_STORAGE_DIRECTORY"] = str(cache)
    for threads in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env[threads] = "1"  # numpy's thread pools reserve address space the cap would refuse
    return env


def _hypothesis_cache() -> Path | None:
    """Where hypothesis keeps its Unicode tables between checks (building them costs about
    a second per checkpoint); no example database is kept (course.grading.hidden_cases), so
    the hidden cases stay the same on every run. None when no cache folder can be made."""
    folder = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "airlock-lab" / "hypothesis"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return folder


def _limit_options(limits: Limits) -> list[str]:
    """The caps course.grade gives every student process it starts (studentcode.sandbox.Limits)."""
    return ["--cpu-s", str(limits.cpu_s), "--memory-bytes", str(limits.memory_bytes),
            "--file-bytes", str(limits.file_bytes)]


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL to the grader's process group (its own session), then reap the grader.

    After a normal exit the grader is already reaped, but the group id stays taken while
    any process the student's code started is still in it, so the signal reaches those and
    no one else; an empty group is ProcessLookupError."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def _printed(path: Path) -> str:
    text = path.read_bytes()[-PRINTED_TAIL_CHARS:].decode("utf-8", "replace")
    return "\n".join(text.splitlines()[-PRINTED_TAIL_LINES:])


def _tail(path: Path) -> str:
    text = path.read_bytes()[-OUTPUT_TAIL_CHARS:].decode("utf-8", "replace").strip()
    return " | ".join(line for line in text.splitlines()[-3:])


# --- progress ---------------------------------------------------------------------------


def progress_path(student_dir: Path) -> Path:
    return student_dir / STATE_FOLDER / PROGRESS_FILE


def save_progress(student_dir: Path, progress: Progress) -> None:
    path = progress_path(student_dir)
    path.parent.mkdir(exist_ok=True)  # FileExistsError (an OSError) if a file has the name
    temporary = path.with_suffix(".tmp")
    temporary.write_bytes(msgspec.json.encode(progress))
    temporary.replace(path)  # a trainer collecting mid-check never reads half a file


class ProgressNotSaved(Exception):
    """The check ran but its progress could not be written; `progress` holds the result."""

    def __init__(self, progress: Progress, why: str) -> None:
        super().__init__(why)
        self.progress = progress


class ProgressUnreadable(Exception):
    """A progress.json that is not one Progress record (hand-edited, or from another tool)."""


def load_progress(student_dir: Path) -> Progress | None:
    """The folder's last check, None if it was never checked."""
    path = progress_path(student_dir)
    try:
        return _progress.decode(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, msgspec.DecodeError) as exc:
        raise ProgressUnreadable(f"{path}: {exc}") from exc
