"""`airlock lab` (alias: python -m lab): list, start, check, run, compose, hint, notes, reset, progress, wrong,
grade and mutants.

Everything a student's code or a lab file produced is printed through airlock.terminal
(shown for text, json_line for --json), so a case holding an ESC sequence or a bidi
control cannot rewrite the terminal it is shown on.

Exit codes: 0 done (for `check`: every checkpoint passed; for `run`: the run was clean); 1 a
checkpoint failed, or the run was not clean (a call outside the plan, a non-narrow value at
a tool, the kernel overruling the student's code, an email with no outcome; for a phased run
(red-and-blue): an attack that got through, or an honest email not answered, where the phase
holds), or for `mutants` a lab under 95%, a stale equivalent entry or a solution that fails
its own checkpoints; 2 a usage error (unknown lab, a folder that holds work and no --force, a
hint level not 1-3, a lab with no [run] table, a student file that does not load or is still
a TODO a phased run needs, a grade's history inside its class folder); 3 the lab's stack could
not start; 78 a broken lab.toml or mutants.toml, or the graders' packages not installed; 130
Ctrl-C. `grade` exits 0 once the class's table is written, whatever the students' results.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import msgspec

from airlock.errors import AirlockError, ConfigError, UsageError
from airlock.terminal import json_line, shown
from cli.handling import handled
from course import class_grades
from course.catalog import LABS_ROOT, Lab, LabFormatError, UnknownLab, build_wrong_solution, find, load_all
from course.context import (
    CONTAINER_COMMAND,
    for_student,
    in_container,
    lab_command,
    lab_path,
    page_missing,
    require_grader_modules,
)
from course.grading import Failed
from course.runner import (
    STATE_FOLDER,
    Limits,
    Progress,
    ProgressNotSaved,
    ProgressUnreadable,
    check,
    load_progress,
    progress_path,
)

MAX_TIME_LIMIT_S = 3600.0
STACK_FAILED = 3  # `airlock lab run`: the lab's own stack could not start (the docstring's table)
PROGRESS_SEARCH_DEPTH = 3  # CLASS/student/lab: deep enough for a class folder, never the whole disk


def say(lines: Sequence[str]) -> None:
    """Print lines for a person, each `airlock lab` command in them as the student types it
    where they are; lab text and paths are shown escaped, like all CLI output."""
    for line in lines:
        print(shown(for_student(line)))


def summary(lab: Lab) -> dict[str, object]:
    return {"id": lab.id, "order": lab.order, "title": lab.title, "seed": lab.seed, "languages": lab.languages,
            "minutes": lab.minutes, "student_files": lab.student_files,
            "checkpoints": [{"id": c.id, "title": c.title} for c in lab.checkpoints]}


def cmd_list(args: argparse.Namespace) -> int:
    labs = load_all(args.labs_root)
    if args.json:
        print(json_line([summary(lab) for lab in labs]))
        return 0
    width = max((len("+".join(lab.languages)) for lab in labs), default=0)
    for lab in labs:
        languages = "+".join(lab.languages)
        print(shown(f"{lab.order}. {lab.id:16} seed {lab.seed}  {languages:{width}} {lab.minutes:3} min  "
                    f"{len(lab.checkpoints)} checkpoint(s)  {lab.title}"))
    return 0


def cmd_start(args: argparse.Namespace) -> int:
    lab = find(args.id, args.labs_root)
    target = Path(args.dir)
    present = _student_files_in(lab, target)
    if present and not args.force:
        raise UsageError(f"{target} already holds {', '.join(present)}: your work is kept. "
                         f"`{lab_command(f'check {lab.id} --dir {target}')}` grades it; --force replaces it with "
                         f"the starter (`{lab_command(f'reset {lab.id} --dir {target}')}` does the same and keeps "
                         f"a backup)")
    target.mkdir(parents=True, exist_ok=True)
    _copy_starter(lab, target)
    lines = [lab.title, f"the starter is in {target}: write {', '.join(lab.student_files)}, then run",
             f"  {lab_command(f'check {lab.id} --dir {target}')}",
             f"the lesson: {lab_path(lab.folder / 'README.md')}" + "".join(
                 f" ({lang}: README.{lang}.md)" for lang in lab.languages if lang != "en")]
    say(lines)
    return 0


def _student_folder(lab: Lab, given: str) -> Path:
    """The student's folder for `check` and `run`; a bad usage naming `start` if it is none."""
    student_dir = Path(given)
    if not student_dir.is_dir():
        raise UsageError(f"{student_dir} is not a folder; `{lab_command(f'start {lab.id} --dir {student_dir}')}` "
                         f"makes it")
    return student_dir


def cmd_check(args: argparse.Namespace) -> int:
    lab = find(args.id, args.labs_root)
    student_dir = _student_folder(lab, args.dir)
    limits = _limits(args)
    lab = _only(lab, args.only)
    try:
        progress = check(lab, student_dir, limits, args.labs_root, save=not args.only)
    except ProgressNotSaved as exc:
        progress = exc.progress
        print(f"airlock lab: progress not saved ({shown(str(exc))}); the result below stands", file=sys.stderr)
    if args.junit:
        row = class_grades.Row(student_dir.resolve().name, student_dir, progress)
        _write(Path(args.junit), class_grades.junit(lab, [row]))
    if args.json:
        print(json_line(class_grades.progress_record(student_dir, progress)))
    else:
        _print_check(lab, progress)
    return 0 if progress.passed == progress.total else 1


def cmd_grade(args: argparse.Namespace) -> int:
    """For a trainer: every student folder under --class rerun, nothing read from or written
    into them; the class's table, and one attempt per student in the trainer's history."""
    lab = _only(find(args.id, args.labs_root), args.only)
    class_dir = Path(args.class_dir)
    history = Path(args.history) if args.history else class_grades.default_history(lab.id)
    class_grades.refuse_history_inside(history, class_dir)
    limits = _limits(args)
    folders = class_grades.student_folders(class_dir)
    print(shown(f"airlock lab: grading {len(folders)} student folder(s) under {class_dir}, "
                f"{len(lab.checkpoints)} checkpoint(s) each"), file=sys.stderr, flush=True)
    rows = class_grades.grade_class(lab, class_dir, limits, args.labs_root, graded=lambda row: print(
        f"  {row.student}: {row.progress.passed} / {row.progress.total}", file=sys.stderr, flush=True))
    rows = class_grades.record_attempts(history, rows)
    if args.junit:
        _write(Path(args.junit), class_grades.junit(lab, rows))
    if args.json:
        print(json_line(class_grades.records(rows)))
    else:
        for line in class_grades.table(lab, rows):
            print(line)
        print(shown(f"history: {history} (one line per student per run)"))
    return 0


def _limits(args: argparse.Namespace) -> Limits:
    if not 0 < args.time_limit <= MAX_TIME_LIMIT_S:
        raise UsageError(f"--time-limit is seconds per checkpoint, more than 0 and at most {MAX_TIME_LIMIT_S:g}")
    return Limits(wall_s=args.time_limit, cpu_s=int(args.time_limit) + 1)


def _only(lab: Lab, checkpoint_ids: list[str] | None) -> Lab:
    """The lab with only the named checkpoints, in the lab's order (all of them for none)."""
    if not checkpoint_ids:
        return lab
    known = [c.id for c in lab.checkpoints]
    unknown = [c for c in checkpoint_ids if c not in known]
    if unknown:
        raise UsageError(f"--only {', '.join(unknown)}: {lab.id} has the checkpoints {', '.join(known)}")
    return msgspec.structs.replace(lab, checkpoints=[c for c in lab.checkpoints if c.id in checkpoint_ids])


def _write(path: Path, data: bytes) -> None:
    """A report file, whole or not at all (a CI reading it mid-write never sees half)."""
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_bytes(data)
    temporary.replace(path)


def _print_check(lab: Lab, progress: Progress) -> None:
    print(shown(f"{lab.id}: checkpoints {progress.passed} / {progress.total}"))
    for result in progress.checkpoints:
        mark = "FAIL" if isinstance(result.verdict, Failed) else "ok  "
        print(shown(f"  {mark} {result.id}: {result.title}"))
        if isinstance(result.verdict, Failed):
            print("       case: " + shown(result.verdict.case))
            print("       " + shown(for_student(result.verdict.message)))
            for line in result.printed.splitlines():
                print("       printed: " + shown(line))
    print(shown(f"sandbox: {sandbox_in_force(progress)}"))
    if progress.passed < progress.total:
        print(shown(f"stuck? {lab_command(f'hint {lab.id} 1')} (levels 1 to 3)"))


def sandbox_in_force(progress: Progress) -> str:
    """The boundaries the student's processes reported (studentcode.sandbox), in one line."""
    said = list(dict.fromkeys(text for result in progress.checkpoints for text in result.sandbox))
    if not said:
        return "no student process was started (nothing was loaded)"
    return " | ".join(said) + "; a warden kills every process your code starts when it ends"


def cmd_run(args: argparse.Namespace) -> int:
    """The student's code in a private stack on the lab's emails; the report from what ran."""
    from course import run as lab_run  # the stack's imports (zmq, the attack harness) only for `run`

    lab = find(args.id, args.labs_root)
    student_dir = _student_folder(lab, args.dir)
    if args.model is not None and args.model not in ("hostile", "recorded") and "://" not in args.model:
        raise UsageError(f"--model is hostile, recorded or a model's URL (http://...), not {args.model!r}")
    page = _page_available()
    if not page and not args.json:
        print(f"airlock lab: no live page ({page_missing()}); running without it", file=sys.stderr)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    data_dir = Path(args.data) if args.data else lab_run.run_data_dir(student_dir, stamp)
    try:
        if lab.run is not None and lab.run.phased:
            return _run_phased(lab, student_dir, data_dir, args, page)
        with lab_run.running(lab, student_dir, data_dir, model=args.model, page=page) as (_stack, report):
            shown_problems = _show_kept(args, lab_run, report)
    except AirlockError as exc:
        if isinstance(exc, UsageError):
            raise
        print(f"airlock lab: the lab's stack failed: {shown(str(exc))}", file=sys.stderr)
        return STACK_FAILED
    return _stopped(args, lab_run, report, shown_problems)


def cmd_compose(args: argparse.Namespace) -> int:
    """The compose lab's override for the student's folder, written, and the line that uses it."""
    from course import compose_override

    lab = find(args.id, args.labs_root)
    path, lines = compose_override.write(lab, Path(args.dir))
    plug = lab.plug(Path(args.dir))
    say([f"wrote {path}: your folder, read-only, in the {plug.service if plug else '?'} container only "
         f"({plug.point if plug else '?'}); start the compose lab with it (from the repository's folder):",
         *(f"  {line}" for line in lines),
         "then inject an email (docker compose run --rm inject samples/seed_4411_de.eml) and watch the live "
         "page: the steps that ran your code are marked \"student code\"",
         f"(`airlock verify`{', on a host with Python,' if in_container() else ''} names the extra mounts: "
         f"{compose_override.STUDENT_MOUNT} and the lab's own files)"])
    return 0


def _run_phased(lab: Lab, student_dir: Path, data_dir: Path, args: argparse.Namespace, page: bool) -> int:
    """A lab with no plug point (red-and-blue): its phases, each in its own stack."""
    from course import phased_run

    with phased_run.running_phases(lab, student_dir, data_dir, model=args.model, page=page) as report:
        shown_problems = _show_kept(args, phased_run, report)
    return _stopped(args, phased_run, report, shown_problems)


def _show_kept(args: argparse.Namespace, kind: ModuleType, report: Any) -> list[str] | None:
    """With --keep, while the stack is still up: the report, then wait for Ctrl-C; the
    problems it showed. Without it, nothing yet (None): the report waits for the stack to stop."""
    if not args.keep:
        return None
    _show_report(args, kind, report)
    _wait_for_interrupt()
    return list(report.problems)


def _stopped(args: argparse.Namespace, kind: ModuleType, report: Any, shown_problems: list[str] | None) -> int:
    """The stack has stopped and the run's files were judged again (course.provenance): the
    report, or after --keep what was found since it was shown; exit 0 only when clean."""
    if shown_problems is None:
        _show_report(args, kind, report)
    elif report.problems != shown_problems:
        if args.json:
            print(json_line(kind.report_record(report)), flush=True)
        else:
            say([f"NOT CLEAN (found once the stack stopped): {problem}" for problem in report.problems
                 if problem not in shown_problems])
    return 0 if not report.problems else 1


def _show_report(args: argparse.Namespace, kind: ModuleType, report: Any) -> None:
    """A run's report as one JSON object or as lines (`kind`: lab.run or course.phased_run, which
    both write it)."""
    if args.json:
        print(json_line(kind.report_record(report)), flush=True)
    else:
        say(kind.report_lines(report, args.keep))
        sys.stdout.flush()


def _page_available() -> bool:
    import importlib.util

    return all(importlib.util.find_spec(name) is not None for name in ("starlette", "uvicorn"))


def _wait_for_interrupt() -> None:
    """--keep: the stack and its page stay up until Ctrl-C (or SIGTERM), then stop."""
    import signal
    import threading

    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print("the stack stays up; press Ctrl-C to stop it", file=sys.stderr, flush=True)
    try:
        while not stop.wait(1.0):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)


def cmd_hint(args: argparse.Namespace) -> int:
    lab = find(args.id, args.labs_root)
    if args.level not in (1, 2, 3):
        raise UsageError(f"hint levels are 1 (a nudge), 2 (the idea) and 3 (nearly the answer), not {args.level}")
    for text in lab.hints_at(args.level):
        print(shown(f"hint {args.level}/3: {for_student(text)}"))
    return 0


def cmd_notes(args: argparse.Namespace) -> int:
    lab = find(args.id, args.labs_root)
    lines = [f"{lab.title} (seed {lab.seed}, {'+'.join(lab.languages)})",
             f"expected time: {lab.instructor.minutes} min",
             "objectives:", *(f"  - {o}" for o in lab.objectives),
             "checkpoints:", *(f"  - {c.id}: {c.title}" for c in lab.checkpoints),
             "common mistakes:", *(f"  - {m}" for m in lab.instructor.mistakes),
             "reading the report:", f"  {lab.instructor.reading_the_report}"]
    say(lines)
    return 0


def cmd_reset(args: argparse.Namespace) -> int:
    lab = find(args.id, args.labs_root)
    target = Path(args.dir)
    present = _student_files_in(lab, target)
    backup = None
    if present:
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
        backup = target / STATE_FOLDER / f"backup-{stamp}"
        backup.mkdir(parents=True)
        for name in present:
            shutil.copy2(target / name, backup / name)
    target.mkdir(parents=True, exist_ok=True)
    _copy_starter(lab, target)
    print(shown(f"{target} holds the starter of {lab.id} again"
                + (f"; your files are in {backup}" if backup else "")))
    return 0


def cmd_wrong(args: argparse.Namespace) -> int:
    """For a trainer: the deliberately wrong solutions, or one written into a folder to run
    `lab check` on, so the class sees what a failed checkpoint looks like."""
    lab = find(args.id, args.labs_root)
    if args.name is None:
        for wrong in lab.wrong_solutions():
            print(shown(f"{wrong.name}: fails {wrong.checkpoint.id}; {wrong.why}"))
        return 0
    wrong = lab.wrong_solution(args.name)
    if args.dir is None:
        raise UsageError(f"--dir D names the folder to write {wrong.name} into")
    target = Path(args.dir)
    present = _student_files_in(lab, target)
    if present and not args.force:
        raise UsageError(f"{target} already holds {', '.join(present)}: kept; --force replaces it")
    build_wrong_solution(wrong, target)
    for line in (f"{target} holds {lab.id}'s wrong solution {wrong.name}: {wrong.why}",
                 f"  {lab_command(f'check {lab.id} --dir {target}')}   fails checkpoint {wrong.checkpoint.id}"):
        print(shown(line))
    return 0


def cmd_mutants(args: argparse.Namespace) -> int:
    """For a trainer: how many of cosmic-ray's mutants of each reference solution the lab's
    checkpoints kill (course/mutants.py), and each survivor."""
    from course import mutants  # cosmic-ray, only for this command

    if args.sample is not None and args.sample < 1:
        raise UsageError("--sample must be at least 1")
    if args.jobs < 1:
        raise UsageError("--jobs must be at least 1")
    labs = [find(i, args.labs_root) for i in args.ids] if args.ids else load_all(args.labs_root)
    results = []
    for lab in labs:
        result = mutants.measure(lab, args.sample, args.seed, args.jobs, mutants.to_stderr)
        results.append(result)
        if not args.json:
            say(mutants.report_lines(result))
            sys.stdout.flush()
    if args.json:
        print(json_line({"target": mutants.TARGET, "seed": args.seed, "sample": args.sample,
                         "labs": [mutants.record(r) for r in results]}))
    else:
        say(mutants.table_lines(results))
    return 0 if all(r.passed for r in results) else 1


def cmd_progress(args: argparse.Namespace) -> int:
    records: list[dict[str, Any]] = [class_grades.progress_record(folder, progress) if isinstance(progress, Progress)
               else {"dir": str(folder), "error": progress} for folder, progress in _collect(Path(args.dir))]
    if args.json:
        print(json_line(records))
        return 0
    if not records:
        print(shown(f"no checked lab under {args.dir} "
                    f"(a check saves {STATE_FOLDER}/progress.json in the student's folder)"))
    for record in records:
        if "error" in record:
            print(shown(f"{record['dir']}  unreadable: {record['error']}"))
            continue
        failing = [c["id"] for c in record["checkpoints"] if not c["passed"]]
        print(shown(f"{record['dir']}  {record['lab']}  {record['passed']} / {record['total']}  "
                    f"{record['checked_at']}" + (f"  failing: {', '.join(failing)}" if failing else "")))
    return 0


def _collect(root: Path) -> list[tuple[Path, Progress | str]]:
    """Every student folder at most PROGRESS_SEARCH_DEPTH below root that was checked, with
    its progress or why that cannot be read (a trainer should see the folder either way)."""
    found: list[tuple[Path, Progress | str]] = []
    level = [root]
    for _ in range(PROGRESS_SEARCH_DEPTH + 1):
        following: list[Path] = []
        for folder in level:
            if progress_path(folder).is_file():
                try:
                    progress = load_progress(folder)
                except ProgressUnreadable as exc:
                    found.append((folder, str(exc)))
                else:
                    if progress is not None:
                        found.append((folder, progress))
            try:
                following += sorted(p for p in folder.iterdir()
                                    if p.is_dir() and not p.is_symlink() and p.name != STATE_FOLDER)
            except OSError:
                continue  # a folder we may not read is not a student's
        level = following
    return found


def _student_files_in(lab: Lab, target: Path) -> list[str]:
    return [name for name in lab.student_files if (target / name).exists()]


def _copy_starter(lab: Lab, target: Path) -> None:
    for name in lab.student_files:
        shutil.copyfile(lab.starter / name, target / name)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="airlock lab", description="hands-on labs: write the piece of "
                                     "code a lesson is about, and have it graded by what it does")
    parser.add_argument("--labs-root", type=Path, default=LABS_ROOT, help=argparse.SUPPRESS)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, handler: object, text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=text, description=text)
        sub.set_defaults(handler=handler)
        return sub

    listing = command("list", cmd_list, "list the labs, in the course's order")
    listing.add_argument("--json", action="store_true",
                         help='one JSON array: '
                              '{"id", "title", "seed", "languages", "minutes", "student_files", "checkpoints"}')
    start = command("start", cmd_start, "copy a lab's starter files into your folder")
    start.add_argument("id", help="the lab's id, from `lab list`")
    start.add_argument("--dir", required=True, help="your folder for this lab (made if missing)")
    start.add_argument("--force", action="store_true",
                       help="replace your files with the starter (no backup; see reset)")
    checking = command("check", cmd_check, "grade your code against every checkpoint of a lab")
    checking.add_argument("id", help="the lab's id, from `lab list`")
    checking.add_argument("--dir", required=True, help="your folder for this lab")
    checking.add_argument("--json", action="store_true",
                          help='one JSON object: {"dir", "lab", "checked_at", "passed", "total", "checkpoints"}')
    checking.add_argument("--time-limit", type=float, default=60.0,
                          help="seconds each checkpoint may run before it fails (default 60)")
    checking.add_argument("--only", action="append", metavar="CHECKPOINT",
                          help="run only this checkpoint (repeatable); a partial check saves no progress")
    checking.add_argument("--junit", metavar="FILE",
                          help="also write the result as JUnit XML (a course's CI): one testcase per checkpoint")
    running = command("run", cmd_run, "run your code in a private airlock on the lab's emails, with the live "
                      "page, and report what ran")
    running.add_argument("id", help="the lab's id, from `lab list`")
    running.add_argument("--dir", required=True, help="your folder for this lab")
    running.add_argument("--model", help="hostile (obeys the email, offline), recorded (the reader's recorded "
                         "answers) or a model's URL, e.g. the lab's SmolLM2; default: the lab's own")
    running.add_argument("--keep", action="store_true", help="keep the stack and the live page up after the "
                         "report, until Ctrl-C (without it the run stops after the report)")
    running.add_argument("--json", action="store_true",
                         help='one JSON object: {"lab", "clean", "problems", "totals", "emails", "data_dir", ...}')
    running.add_argument("--data", help=f"the stack's data folder (default: {STATE_FOLDER}/runs/<time> in --dir)")
    composing = command("compose", cmd_compose, "write the override that plugs your folder (read-only) into the "
                        "compose lab's one container whose piece it replaces, and print the line that starts it")
    composing.add_argument("id", help="the lab's id, from `lab list` (a lab with a plug point)")
    composing.add_argument("--dir", required=True, help=f"your folder for this lab (the override goes to "
                           f"{STATE_FOLDER}/compose.yaml in it)")
    hint = command("hint", cmd_hint, "show a lab's hints at one level")
    hint.add_argument("id", help="the lab's id, from `lab list`")
    hint.add_argument("level", type=int, help="1 a nudge, 2 the idea, 3 nearly the answer")
    notes = command("notes", cmd_notes, "the instructor notes: time, objectives, common mistakes, reading a report")
    notes.add_argument("id", help="the lab's id, from `lab list`")
    reset = command("reset", cmd_reset, "put the starter back, keeping a backup of your files")
    reset.add_argument("id", help="the lab's id, from `lab list`")
    reset.add_argument("--dir", required=True,
                       help=f"your folder for this lab (backup in {STATE_FOLDER}/backup-<time>/)")
    progress = command("progress", cmd_progress, "show the last check every student folder saved under a "
                       "folder (the students' own files: `lab grade` reruns their code instead)")
    progress.add_argument("--dir", default=".", help="a student's folder or a class folder (default: here)")
    progress.add_argument("--json", action="store_true",
                          help='one JSON array: {"dir", "lab", "checked_at", "passed", "total", "checkpoints"}, '
                               'or {"dir", "error"} for a progress file that cannot be read')
    wrong = command("wrong", cmd_wrong, "for a trainer: list a lab's deliberately wrong solutions, or write one "
                    "into a folder to check")
    wrong.add_argument("id", help="the lab's id, from `lab list`")
    wrong.add_argument("name", nargs="?", help="a wrong solution's name, from `lab wrong ID`; none lists them")
    wrong.add_argument("--dir", help="the folder to write it into (made if missing)")
    wrong.add_argument("--force", action="store_true", help="replace the lab's files already in that folder")
    grading = command("grade", cmd_grade, "for a trainer: rerun every student folder under a class folder and "
                      "write the class's table (never reading or writing a student's files)")
    grading.add_argument("id", help="the lab's id, from `lab list`")
    grading.add_argument("--class", dest="class_dir", required=True, metavar="CLASS",
                         help="the class folder: one folder per student, named for the student, holding the "
                              "lab's files")
    grading.add_argument("--json", action="store_true",
                         help='one JSON array: {"student", "attempts", "dir", "lab", "checked_at", "passed", '
                              '"total", "checkpoints"}')
    grading.add_argument("--junit", metavar="FILE",
                         help="also write JUnit XML: one testsuite per student, one testcase per checkpoint")
    grading.add_argument("--history", metavar="FILE",
                         help=f"the attempts' history, one JSON line per student per run (default "
                              f"{class_grades.HISTORY_FOLDER}/<lab>.jsonl here; never inside CLASS)")
    grading.add_argument("--only", action="append", metavar="CHECKPOINT",
                         help="rerun only this checkpoint (repeatable)")
    grading.add_argument("--time-limit", type=float, default=60.0,
                         help="seconds each checkpoint may run before it fails (default 60)")
    mutating = command("mutants", cmd_mutants, "for a trainer: mutation-test each lab's reference solution "
                       "with its own checkpoints (cosmic-ray) and list the mutants that survive")
    mutating.add_argument("ids", nargs="*", metavar="ID", help="the labs (default: every lab)")
    mutating.add_argument("--sample", type=int, metavar="N", help="grade only N mutants of each lab, chosen by --seed "
                          "(default: every mutant)")
    mutating.add_argument("--seed", type=int, default=0, metavar="S", help="the sample's seed (default 0)")
    mutating.add_argument("--jobs", type=int, default=1, metavar="J", help="mutants graded at once (default 1)")
    mutating.add_argument("--json", action="store_true", help='one JSON object: {"target", "seed", "sample", '
                          '"labs": [{"lab", "total", "annotation", "equivalent", "killed", "survived", "score", '
                          '"survivors", "stale", ...}]}')
    return parser


class CannotWrite(AirlockError):
    """A lab command may not write where it must (most often the compose `lab` tool run without -u)."""


def main(argv: Sequence[str] | None = None) -> int:
    """Parse and run one lab command through the one handler every airlock command uses
    (cli/handling.py: one escaped line on stderr, airlock.errors' exit codes), its messages
    worded for where the student is (course.context.for_student)."""
    args = build_parser().parse_args(argv)
    return handled(lambda: _run(args), prefix="airlock lab", wording=for_student)


def _run(args: argparse.Namespace) -> int:
    """The command, its own errors translated into airlock's at this edge, so the one handler
    (cli/handling.py) prints them and its one table gives their exit codes."""
    try:
        require_grader_modules()
        return args.handler(args)
    except UnknownLab as exc:
        raise UsageError(str(exc)) from exc
    except LabFormatError as exc:
        raise ConfigError(str(exc)) from exc
    except PermissionError as exc:  # most often the compose `lab` tool run without -u
        how = (f"run the lab container as yourself: {CONTAINER_COMMAND} ..." if in_container() else
               f"in the container lab, run it as yourself: {CONTAINER_COMMAND} ...")
        raise CannotWrite(f"cannot write {exc.filename}: permission denied; this user "
                          f"(uid {os.getuid()}) may not write there ({how})") from exc
