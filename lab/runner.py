"""Run a lab's checkpoints, each in its own process with limits, and keep the progress.

Each checkpoint runs as `python -m lab.grade` (lab/grade.py) in a fresh process, so one
student function that hangs, eats memory, exits or crashes costs only its own checkpoint,
and the grader's state never leaks from one checkpoint into the next. The process gets:
- a wall-clock limit; its whole process group is killed when it runs over, and also when
  it ends, so a process the student's code started never outlives the checkpoint;
- a CPU-time limit, an address-space cap and a file-size cap, which lab.grade sets on
  itself (resource.setrlimit) before it imports the student's code: the runner starts
  graders from worker threads, where a preexec_fn can deadlock the child;
- stdin from /dev/null (input() ends at once), stdout and stderr into files that are
  never read as a verdict (a student's print cannot forge one);
- a private temporary working folder, so the student's code writes there (hypothesis
  keeps only its Unicode tables, in the user's cache folder).
Its verdict is read from a file the runner names, and must decode as exactly one Verdict.

Progress: a student's `check` writes <dir>/.airlock-lab/progress.json, the last result per
checkpoint, which `airlock lab progress` shows. It is the student's own file and can say
anything: a trainer grades by rerunning (lab/class_grades.py, check(save=False)).
"""

from __future__ import annotations

import os
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

from lab.catalog import LABS_ROOT, Checkpoint, Lab
from lab.grading import Failed, Passed, Verdict

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


class Progress(msgspec.Struct, frozen=True):
    """<dir>/.airlock-lab/progress.json. Add fields with defaults; never rename one."""

    lab: str
    checked_at: str
    passed: int
    total: int
    checkpoints: list[CheckpointResult]


_verdict = msgspec.json.Decoder(Verdict)
_progress = msgspec.json.Decoder(Progress)


def check(lab: Lab, student_dir: Path, limits: Limits = Limits(), root: Path = LABS_ROOT,
          save: bool = True) -> Progress:
    """Every checkpoint. With save (a student's own check) the result is also saved as the
    folder's progress; without it nothing is written into the folder (a trainer's rerun)."""
    graded = _in_parallel(lab, student_dir, limits, root)
    results = [CheckpointResult(c.id, c.title, g.verdict, g.printed)
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


def run_checkpoint(lab: Lab, checkpoint: Checkpoint, student_dir: Path, limits: Limits = Limits(),
                   root: Path = LABS_ROOT) -> Verdict:
    return grade_checkpoint(lab, checkpoint, student_dir, limits, root).verdict


def grade_checkpoint(lab: Lab, checkpoint: Checkpoint, student_dir: Path, limits: Limits = Limits(),
                     root: Path = LABS_ROOT) -> Graded:
    with tempfile.TemporaryDirectory(prefix="airlock-lab-") as work:
        workdir = Path(work)
        verdict_path = workdir / "verdict.json"
        command = [sys.executable, "-m", "lab.grade", lab.id, checkpoint.id, str(student_dir.resolve()),
                   "--verdict", str(verdict_path), "--labs-root", str(root.resolve()), *_limit_options(limits)]
        with open(workdir / "stdout", "wb") as out, open(workdir / "stderr", "wb") as err:
            started = time.monotonic()
            process = subprocess.Popen(command, cwd=workdir, env=_environment(), stdin=subprocess.DEVNULL,
                                       stdout=out, stderr=err, start_new_session=True)
            try:
                code = process.wait(timeout=limits.wall_s)
            except subprocess.TimeoutExpired:
                _kill_group(process)
                return Graded(Failed(checkpoint.id, "time limit",
                                     f"the code did not finish within {limits.wall_s:g} s: a loop that never "
                                     f"ends, or a wait for input that never comes"), _printed(workdir / "stdout"))
            elapsed = time.monotonic() - started
            _kill_group(process)  # what the student's code started (a `sleep 1d`) ends with it
        return Graded(_read_verdict(checkpoint, verdict_path, code, elapsed, limits, workdir),
                      _printed(workdir / "stdout"))


def _read_verdict(checkpoint: Checkpoint, path: Path, code: int, elapsed: float, limits: Limits,
                  workdir: Path) -> Verdict:
    raw = path.read_bytes()[:VERDICT_MAX_BYTES + 1] if path.is_file() else b""
    if raw:
        try:
            verdict = _verdict.decode(raw)
        except msgspec.DecodeError as exc:
            return Failed(checkpoint.id, "the grader", f"wrote no readable verdict ({exc})")
        if verdict.checkpoint != checkpoint.id:
            return Failed(checkpoint.id, "the grader", f"wrote a verdict for {verdict.checkpoint!r}")
        return verdict
    if code < 0:
        signal_name = signal.Signals(-code).name
        why = {"SIGXCPU": f"used more than {limits.cpu_s} s of CPU time",
               "SIGKILL": "was killed, most likely for using more memory than allowed"}.get(signal_name, "")
        return Failed(checkpoint.id, "crash", f"the process ended on {signal_name} {why}".rstrip())
    tail = _tail(workdir / "stderr")
    if "MemoryError" in tail:
        return Failed(checkpoint.id, "memory limit",
                      f"the code used more than {limits.memory_bytes // 1024**2} MiB of memory")
    detail = f"; last output: {tail}" if tail else ""
    return Failed(checkpoint.id, "exit",
                  f"the process ended with exit code {code} after {elapsed:.1f} s without a verdict "
                  f"(os._exit, closed file descriptors, or a crash inside Python){detail}")


def _environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "HYPOTHESIS"))}
    env["PYTHONPATH"] = str(PROJECT_ROOT)  # the lab package, wherever the grader's cwd is
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
    a second per checkpoint); no example database is kept (lab.grading.hidden_cases), so
    the hidden cases stay the same on every run. None when no cache folder can be made."""
    folder = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "airlock-lab" / "hypothesis"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return folder


def _limit_options(limits: Limits) -> list[str]:
    """The caps lab.grade sets on itself (lab.grade.apply_limits)."""
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
