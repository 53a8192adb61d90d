"""`airlock lab run ID --dir D`: the student's code in a private stack, run on the lab's emails.

The lab's [run] table (course/catalog.py) says which plug point the student's file takes, the
task, the emails and the model. The stack is harness.stack's: `airlock up` on free ports with
AIRLOCK_STUDENT_CODE set, so the student's function runs inside the one service whose piece
it replaces, behind studentcode.student's process boundary, with the kernel's own check after it.

Everything reported is read from what ran: the outcome of each email, calls.jsonl (which
tools ran, with which values) and the trace (which stage decided, and whether that was the
student's code), never from what a model said. The in-stack checkpoints grade from the same
Report, so `lab run` shows a student exactly what their checkpoint judged.

A run is clean when every email reached its outcome, no call ran outside the plan, no
non-narrow value reached a tool, the kernel never had to overrule or stand in for the
student's code (a rule student.* other than student.refused: the student's function failed,
or passed what the kernel refuses), and both files hold only what the stack wrote for the
run's own emails (course.provenance: no email the run did not send, no call line the actor did
not log for an allowed step, no trace line that is no record). The files are judged again
once the stack has stopped, so a line written after the report still counts.
"""

from __future__ import annotations

import contextlib
import shutil
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airlock import records, task as task_module
from airlock.errors import UsageError
from airlock.plugs import Plug
from course import provenance
from course.catalog import Lab
from course.context import lab_path, page_missing, trace_command
from course.runner import STATE_FOLDER
from harness import campaign
from harness.campaign import CampaignEmail
from harness.score import Scorer
from harness.stack import Stack, StackRun, lab_stack
from studentcode.student import START_TIMEOUT_S, StudentCode, StudentFailed

OUTCOMES = ("completed", "rejected", "refused", "escalated", "failed")
# A student rule that is the student being stricter than the kernel: a refusal (the
# validator's student.refused, the actor's student.checks). Any other student.* rule means
# the kernel overruled the student's code, or stood in for it.
STUDENT_REFUSED = "student.refused"
STUDENTS_OWN_REFUSALS = (STUDENT_REFUSED, "student.checks")

class StudentFileProblem(UsageError):
    """The student's file is missing, does not load, or lacks a function its plug point needs."""


@dataclass
class EmailReport:
    """One email as the run saw it: its outcome, the calls that ran, the student's part."""

    file: str
    id: str
    answer: str | None  # the reader's answer, only to name a value in a message, never to judge
    category: str
    benign: bool
    expect: str | None
    outcome: str
    reason: str
    value: Any
    calls: list[dict[str, Any]]
    outside_plan: int
    non_narrow: int
    student: list[str]  # the plug points whose student code took part in this email
    student_rules: list[str]  # student.* rules of its verdicts and refusals, in order

    @property
    def overruled(self) -> list[str]:
        """The student.* rules where the kernel overruled the student's code or stood in for it."""
        return [rule for rule in self.student_rules if rule not in STUDENTS_OWN_REFUSALS]


@dataclass
class Report:
    lab: str
    model: str
    plug: str
    data_dir: Path
    trace_path: Path
    calls_path: Path
    page_url: str | None
    emails: list[EmailReport]
    stragglers: list[str] = field(default_factory=list)
    rug_pull_after: int = 0
    foreign: provenance.Audit = field(default_factory=provenance.Audit)  # records the run cannot account for

    @property
    def sent(self) -> list[str]:
        """The message ids of the emails this run submitted (the broker gave each back)."""
        return [email.id for email in self.emails]

    @property
    def totals(self) -> dict[str, int]:
        outcomes = Counter(e.outcome for e in self.emails)
        return {**{outcome: outcomes.get(outcome, 0) for outcome in OUTCOMES},
                "emails": len(self.emails),
                "calls_outside_plan": sum(e.outside_plan for e in self.emails),
                "non_narrow_at_a_tool": sum(e.non_narrow for e in self.emails),
                "student_decisions": sum(bool(e.student) for e in self.emails),
                "student_overruled": sum(bool(e.overruled) for e in self.emails),
                "no_outcome": len(self.stragglers),
                "foreign_records": self.foreign.total}

    @property
    def problems(self) -> list[str]:
        """Why the run is not clean, one line each; empty when it is."""
        totals, problems = self.totals, []
        if totals["calls_outside_plan"]:
            problems.append(f"{totals['calls_outside_plan']} call(s) outside the plan (must be 0)")
        if totals["non_narrow_at_a_tool"]:
            problems.append(f"{totals['non_narrow_at_a_tool']} non-narrow value(s) at a tool (must be 0)")
        if totals["student_overruled"]:
            problems.append(f"{totals['student_overruled']} email(s) where the kernel overruled or stood in for "
                            "your code (marked !)")
        if totals["no_outcome"]:
            problems.append(f"{totals['no_outcome']} email(s) with no outcome in time")
        return problems + self.foreign.problems()


def check_student_file(plug: Plug, functions: tuple[str, ...]) -> None:
    """Raise StudentFileProblem unless the file exists, loads, and defines `functions`."""
    path = plug.path
    if not path.is_file():
        raise StudentFileProblem(f"{path} does not exist (`airlock lab start` copies the starter there)")
    code = StudentCode(path, START_TIMEOUT_S)  # the same confined child the service will start
    try:
        loaded = code.load()
    finally:
        code.close()
    if isinstance(loaded, StudentFailed):
        why = loaded.detail.removeprefix(f"{path.name}: ") or loaded.describe()
        raise StudentFileProblem(f"{path.name} does not load: {why}")
    missing = [name for name in functions if name not in loaded]
    if missing:
        raise StudentFileProblem(f"{path.name} has no function {', '.join(missing)}() "
                                 f"(the plug point {plug.point} calls it)")


def run_data_dir(student_dir: Path, stamp: str) -> Path:
    """A fresh data folder per run, in the student's folder: a stack recovers what an old
    trace left open, so a run never reuses one."""
    return student_dir / STATE_FOLDER / "runs" / stamp


@contextlib.contextmanager
def running(lab: Lab, student_dir: Path, data_dir: Path, *, model: str | None = None, page: bool = False,
            emails: list[CampaignEmail] | None = None) -> Iterator[tuple[Stack, Report]]:
    """Start the lab's stack with the student's file plugged in, run its emails (the rug
    pull after the [run] table's count, if it has one), yield the stack (still up) and the
    report; the stack stops when the block ends."""
    if lab.run is None:
        raise UsageError(f"lab {lab.id} does not run in the stack (its lab.toml has no [run] table)")
    if lab.run.phased:
        raise UsageError(f"lab {lab.id} runs in phases (course.phased_run), not with a plug point")
    paths, plug = lab.run_paths(), lab.plug(student_dir)
    assert paths is not None and plug is not None  # both exist with lab.run
    check_student_file(plug, plug.functions)
    emails = emails if emails is not None else campaign.load([str(p) for p in paths.emails])
    data_dir.mkdir(parents=True, exist_ok=True)
    catalog = None
    if paths.catalog is not None:  # a copy: the rug pull rewrites it, never the lab's own file
        catalog = shutil.copyfile(paths.catalog, data_dir / "run-catalog.toml")
    split = lab.run.rug_pull_after if paths.rug_pull is not None else len(emails)
    with lab_stack(data_dir, paths.task, model=model or lab.run.model, plug=plug, catalog=catalog,
                   page=page) as stack:
        first = stack.run(emails[:split])
        runs = [first]
        if paths.rug_pull is not None and catalog is not None and emails[split:]:
            shutil.copyfile(paths.rug_pull, catalog)
            runs.append(stack.run(emails[split:]))
        report = build_report(lab, stack, runs, task_module.load(paths.task), data_dir)
        yield stack, report
    audit(report, stopped=True)


def audit(report: Report, *, stopped: bool) -> None:
    """Judge the run's trace and calls.jsonl for records it cannot account for (course.provenance);
    `stopped`: the stack has stopped, so every line in them is whole and final."""
    report.foreign = provenance.audit(report.trace_path, report.calls_path, report.sent, stopped=stopped)


def build_report(lab: Lab, stack: Stack, runs: list[StackRun], task: task_module.Task, data_dir: Path) -> Report:
    scorer = Scorer(task)
    emails = []
    for run in runs:
        for result in run.results:
            judged = scorer.judge(result)
            lines = run.events.get(result.id, [])
            points, rules = _student_part(lines)
            answers = [line.answer for line in lines if isinstance(line, records.ModelAnswer)]
            emails.append(EmailReport(
                file=Path(result.email.file).name, id=result.id, answer=answers[-1] if answers else None,
                category=result.email.category, benign=result.email.benign,
                expect=result.email.expect, outcome=result.outcome, reason=result.reason, value=result.value,
                calls=result.calls, outside_plan=judged["calls_outside_plan"], non_narrow=judged["calls_non_narrow"],
                student=points, student_rules=rules))
    assert lab.run is not None
    report = Report(lab=lab.id, model=stack.model, plug=lab.run.plug, data_dir=data_dir,
                    trace_path=stack.trace_path, calls_path=stack.calls_path, page_url=stack.page_url,
                    emails=emails, stragglers=[s for run in runs for s in run.stragglers],
                    rug_pull_after=lab.run.rug_pull_after)
    audit(report, stopped=False)
    return report


def _student_part(lines: list[records.TraceRecord]) -> tuple[list[str], list[str]]:
    """From one email's trace records: the plug points whose student code ran, and the
    student.* rules its verdicts and refusals carry (a rule, or a decision record's)."""
    points: list[str] = []
    rules: list[str] = []
    for line in lines:
        point = getattr(line, "student", "") if isinstance(line, records.Record) else ""
        if point and point not in points:
            points.append(point)
        decision = line.decision if isinstance(line, records.Authorization) else {}
        own = line.rule if isinstance(line, (records.Verdict, records.OutcomeLine, records.Unreadable)) else ""
        for rule in (own, decision.get("rule"), decision.get("refused_by")):
            if isinstance(rule, str) and rule.startswith("student.") and rule not in rules:
                rules.append(rule)
    return points, rules


# --- what `lab run` prints --------------------------------------------------------------------


def report_lines(report: Report, keep: bool) -> list[str]:
    """The report for a person, one line per email. Callers print it through
    airlock.terminal.shown: file names, values, arguments and reasons came from emails."""
    lines = [f"{report.lab}: your code at {report.plug}, {len(report.emails)} emails, model {report.model}",
             "  (* your code decided this step; ! the kernel overruled it or stood in for it)"]
    width = min(36, max((len(e.file) for e in report.emails), default=10))
    for i, email in enumerate(report.emails):
        if report.rug_pull_after and i == report.rug_pull_after:
            lines.append(f"  --- rug pull: the catalog was replaced after {report.rug_pull_after} emails ---")
        lines.append("  " + _email_line(email, width))
    totals = report.totals
    lines += [
        "totals: " + ", ".join(f"{totals[o]} {o}" for o in OUTCOMES),
        f"  calls outside the plan        {totals['calls_outside_plan']}  (must be 0)",
        f"  non-narrow values at a tool   {totals['non_narrow_at_a_tool']}  (must be 0)",
        f"  emails your code decided      {totals['student_decisions']} of {totals['emails']}",
        f"  overruled by the kernel       {totals['student_overruled']}",
        f"  records not this run's own    {totals['foreign_records']}  (must be 0)",
    ]
    if totals["no_outcome"]:
        lines.append(f"  no outcome in time            {totals['no_outcome']}")
    lines += [f"data: {lab_path(report.data_dir)}",
              f"  trace: {lab_path(report.trace_path)}  ({trace_command(report.data_dir)})",
              f"  calls: {lab_path(report.calls_path)}"]
    if report.page_url is None:
        lines.append(f"live page: not started ({page_missing()})")
    elif keep:
        lines.append(f"live page: {report.page_url}  (up until Ctrl-C)")
    else:
        lines.append(f"live page: {report.page_url} was up during the run; --keep keeps it up to look at")
    lines += [f"NOT CLEAN: {problem}" for problem in report.problems] or ["clean: every email has its outcome, "
                                                                          "nothing ran that should not have, "
                                                                          "every record is this run's own"]
    return lines


def _email_line(email: EmailReport, width: int) -> str:
    mark = "!" if email.overruled else "*" if email.student else " "
    value = "" if email.value is None else f" value {email.value!r}"
    calls = calls_text(email.calls)
    why = f"  {', '.join(email.student_rules)}" if email.student_rules else ""
    reason = f": {cut(email.reason)}" if email.outcome != "completed" and email.reason else ""
    return f"{mark} {email.file:<{width}} {email.outcome:<9}{value}  {calls}{why}{reason}"


def calls_text(calls: list[dict[str, Any]]) -> str:
    """The calls of one email, as calls.jsonl has them: server/tool(arg=value, ...)."""
    return " ".join(f"{c['server']}/{c['tool']}({_args(c['args'])})" for c in calls) or "no calls"


def _args(args: Any) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in args.items()) if isinstance(args, dict) else repr(args)


def cut(text: str, limit: int = 100) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def report_record(report: Report) -> dict[str, Any]:
    """The report as one JSON object (`lab run --json`)."""
    return {"lab": report.lab, "plug": report.plug, "model": report.model, "clean": not report.problems,
            "problems": report.problems, "totals": report.totals, "data_dir": str(report.data_dir),
            "trace": str(report.trace_path), "calls": str(report.calls_path), "page": report.page_url,
            "stragglers": report.stragglers, "foreign": [finding.as_record() for finding in report.foreign.found],
            "emails": [{"file": e.file, "category": e.category, "benign": e.benign, "outcome": e.outcome,
                        "reason": e.reason, "value": e.value, "calls": e.calls, "outside_plan": e.outside_plan,
                        "non_narrow": e.non_narrow, "student": e.student, "student_rules": e.student_rules}
                       for e in report.emails]}
