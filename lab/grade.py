"""python -m lab.grade LAB CHECKPOINT DIR --verdict FILE: one checkpoint, in its own process.

The runner (lab/runner.py) starts this with a time limit and a memory cap. The verdict goes
to FILE, never to stdout: the student's code runs in this process and may print anything,
including text that looks like a verdict, and that text is only ever captured, never read
as one. Whatever the student's code does (raise, call sys.exit, print), this process ends
with a verdict in FILE; only a hang, os._exit, closed file descriptors or a crash of Python
itself leaves none, and the runner names those.

The CPU, memory and file-size caps are set here, by this process on itself, before the
student's code is imported: the runner starts this from worker threads, where a
preexec_fn could deadlock the child.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
from pathlib import Path

import msgspec

from lab.catalog import LABS_ROOT, find
from lab.grading import Failed, Passed, StudentCodeMissing, Verdict

_encode = msgspec.json.Encoder().encode


def grade(lab_id: str, checkpoint_id: str, student_dir: Path, root: Path) -> Verdict:
    checkpoint = find(lab_id, root).checkpoint(checkpoint_id)
    grader = checkpoint.load_grader()
    try:
        verdict: object = grader(student_dir)  # a grader's code may return anything: checked below
    except SystemExit as exc:
        return Failed(checkpoint.id, "sys.exit",
                      f"the code called sys.exit({exc.code!r}); "
                      "a function returns its answer, it never ends the program")
    except StudentCodeMissing as exc:
        return Failed(checkpoint.id, "missing file", str(exc))
    except Exception as exc:  # noqa: BLE001  a grader that did not turn the student's error into a case
        return Failed(checkpoint.id, "the grader", f"stopped on {type(exc).__name__}: {exc}")
    if not isinstance(verdict, Passed | Failed) or verdict.checkpoint != checkpoint.id:
        return Failed(checkpoint.id, "the grader", f"returned {verdict!r}, not a verdict for {checkpoint.id}")
    return verdict


def apply_limits(cpu_s: int, memory_bytes: int, file_bytes: int) -> None:
    """Cap this process: SIGXCPU after cpu_s, MemoryError past memory_bytes, no core file."""
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    resource.setrlimit(resource.RLIMIT_FSIZE, (file_bytes, file_bytes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.grade", description=__doc__.splitlines()[0])
    parser.add_argument("lab", help="the lab's id")
    parser.add_argument("checkpoint", help="the checkpoint's id")
    parser.add_argument("dir", type=Path, help="the student's folder")
    parser.add_argument("--verdict", type=Path, required=True, help="file the JSON verdict is written to")
    parser.add_argument("--labs-root", type=Path, default=LABS_ROOT, help="folder holding the labs")
    parser.add_argument("--cpu-s", type=int, required=True, help="CPU seconds before SIGXCPU")
    parser.add_argument("--memory-bytes", type=int, required=True, help="address-space cap")
    parser.add_argument("--file-bytes", type=int, required=True, help="largest file the code may write")
    args = parser.parse_args(argv)
    apply_limits(args.cpu_s, args.memory_bytes, args.file_bytes)
    # Opened before any student code runs, so code that changes directory cannot stop the
    # verdict. Code that closes file descriptors can: the write then fails, no verdict is
    # written, and the runner reports a failed checkpoint naming that as a possible cause.
    out = os.open(args.verdict, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    verdict = grade(args.lab, args.checkpoint, args.dir.resolve(), args.labs_root)
    os.write(out, _encode(verdict))
    os.close(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
