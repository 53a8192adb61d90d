"""`airlock lab run ID --dir D` for a lab that runs in phases (red-and-blue).

The lab's grader builds the phases from the student's folder (course/phases.py owns that
contract); each phase gets its own private stack (harness.stack, one data folder each under
the run's), runs its emails, and each email is scored by the lab's judge, the grader's
own scoring, from calls.jsonl. The report shows every email in every phase it ran in,
side by side, so the lesson is one read: the same email got through without the defence
and was stopped with it.

A run is clean when, in every phase that holds (the defended one), no attack got through
and every honest email was answered, and in every phase every email reached its outcome,
no call ran outside the plan, no non-narrow value reached a tool, and the phase's files hold
only what its stack wrote for its own emails (course.provenance; judged again once its stack
has stopped). A phase that does not hold only shows what happens without the defence; how
many attacks got through it is in the totals, and `lab check` is what grades the attacks.

With --keep, the last phase's stack (the defended one) stays up with its live page; the
stacks before it stop when their phase ends.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airlock import task as task_module
from airlock.errors import UsageError
from course import phases as phases_module, provenance
from course.catalog import Lab
from course.context import page_missing
from course.phases import Judged, Phase, PhaseEmail
from course.run import calls_text, cut
from harness.campaign import CampaignEmail
from harness.score import EmailResult, Scorer
from harness.stack import Stack, lab_stack

Judge = Callable[[PhaseEmail, EmailResult], Judged]
REASON_LIMIT = 200  # a refusal's reason names both sources it compared; cut shorter, it hides one


@dataclass
class PhaseEmailReport:
    """One email in one phase: what ran, and the judge's reading of it."""

    name: str
    benign: bool
    outcome: str
    reason: str
    value: Any
    calls: list[dict[str, Any]]
    harm: list[str]
    answered: bool
    outside_plan: int
    non_narrow: int

    @property
    def got_through(self) -> bool:
        return not self.benign and bool(self.harm)


@dataclass
class PhaseReport:
    id: str
    title: str
    holds: bool
    data_dir: Path
    trace_path: Path
    calls_path: Path
    page_url: str | None
    emails: list[PhaseEmailReport]
    stragglers: list[str]
    sent: list[str] = field(default_factory=list)  # the message ids the phase submitted
    foreign: provenance.Audit = field(default_factory=provenance.Audit)  # records it cannot account for

    def audit(self, *, stopped: bool) -> None:
        """Judge the phase's trace and calls.jsonl (course.provenance); `stopped`: its stack has
        stopped, so every line in them is whole and final."""
        self.foreign = provenance.audit(self.trace_path, self.calls_path, self.sent, stopped=stopped)

    @property
    def attacks(self) -> int:
        return sum(not e.benign for e in self.emails)

    @property
    def got_through(self) -> int:
        return sum(e.got_through for e in self.emails)

    @property
    def honest(self) -> int:
        return sum(e.benign for e in self.emails)

    @property
    def answered(self) -> int:
        return sum(e.benign and e.answered for e in self.emails)


@dataclass
class PhasedReport:
    lab: str
    model: str
    data_dir: Path
    phases: list[PhaseReport]

    @property
    def problems(self) -> list[str]:
        """Why the run is not clean, one line each; empty when it is."""
        problems = []
        for phase in self.phases:
            if phase.stragglers:
                problems.append(f"{phase.id}: {len(phase.stragglers)} email(s) with no outcome in time")
            outside, non_narrow = (sum(e.outside_plan for e in phase.emails), sum(e.non_narrow for e in phase.emails))
            if outside:
                problems.append(f"{phase.id}: {outside} call(s) outside the plan (must be 0)")
            if non_narrow:
                problems.append(f"{phase.id}: {non_narrow} non-narrow value(s) at a tool (must be 0)")
            problems += phase.foreign.problems(prefix=f"{phase.id}: ")
            if not phase.holds:
                continue
            for email in phase.emails:
                if email.got_through:
                    problems.append(f"{email.name!r} got through ({phase.id}): {'; '.join(email.harm)}")
                elif email.benign and not email.answered and email.outcome != "pending":
                    problems.append(f"{email.name!r}, an honest email, was not answered ({phase.id}): "
                                    f"{email.outcome}{f' ({cut(email.reason)})' if email.reason else ''}")
        return problems


@contextlib.contextmanager
def running_phases(lab: Lab, student_dir: Path, data_dir: Path, *, model: str | None = None,
                   page: bool = False) -> Iterator[PhasedReport]:
    """Build the phases from the student's folder, run each in its own stack, yield the
    report while the last phase's stack is still up; it stops when the block ends."""
    if lab.run is None or not lab.run.phased:
        raise UsageError(f"lab {lab.id} has no phased [run] table")
    built = phases_module.build(lab.run.phases, student_dir, data_dir)
    judge = _function(lab.run.judge)
    chosen = model or lab.run.model
    reports: list[PhaseReport] = []
    with contextlib.ExitStack() as last:
        for i, phase in enumerate(built):
            stack_of_phase = lab_stack(data_dir / phase.id, Path(phase.task), model=chosen, page=page)
            if i < len(built) - 1:
                with stack_of_phase as stack:
                    reports.append(run_phase(stack, phase, judge))
                reports[-1].audit(stopped=True)
            else:
                reports.append(run_phase(last.enter_context(stack_of_phase), phase, judge))
        yield PhasedReport(lab=lab.id, model=chosen, data_dir=data_dir, phases=reports)
    for phase_report in reports[-1:]:  # the last phase's stack has stopped now
        phase_report.audit(stopped=True)


def run_phase(stack: Stack, phase: Phase, judge: Judge) -> PhaseReport:
    """The phase's emails through its stack, each judged from its calls."""
    run = stack.run([CampaignEmail(e.name, e.raw, "eml", expect=e.expect or None,
                                   category="benign" if e.benign else "attack") for e in phase.emails])
    scorer = Scorer(task_module.load(Path(phase.task)))
    emails = []
    for email, result in zip(phase.emails, run.results, strict=True):
        judged, scored = judge(email, result), scorer.judge(result)
        emails.append(PhaseEmailReport(
            name=email.name, benign=email.benign, outcome=result.outcome, reason=result.reason, value=result.value,
            calls=result.calls, harm=judged.harm, answered=judged.answered,
            outside_plan=scored["calls_outside_plan"], non_narrow=scored["calls_non_narrow"]))
    report = PhaseReport(id=phase.id, title=phase.title, holds=phase.holds, data_dir=stack.settings.data_dir,
                         trace_path=stack.trace_path, calls_path=stack.calls_path, page_url=stack.page_url,
                         emails=emails, stragglers=run.stragglers, sent=[result.id for result in run.results])
    report.audit(stopped=False)
    return report


def _function(spec: str) -> Judge:
    """A course.graders function named module:function (course/catalog.py checked the form)."""
    module, function = spec.split(":")
    found = getattr(importlib.import_module(module), function, None)
    if not callable(found):
        raise UsageError(f"the lab's [run] names {spec}, which is not a function")
    return found  # a grader's judge, by the catalog's contract


# --- what `lab run` prints --------------------------------------------------------------------


def report_lines(report: PhasedReport, keep: bool) -> list[str]:
    """Per email, one line per phase it ran in; then the totals, the folders and the pages.
    Callers print it through airlock.terminal.shown: names, values and reasons came from emails."""
    lines = [f"{report.lab}: {len(report.phases)} phases, each its own private airlock, model {report.model}"]
    lines += [f"  {phase.id}: {phase.title}" for phase in report.phases]
    lines.append("  (attack: it must not get through where the phase holds; honest: it must be answered there)")
    width = max(len(phase.id) for phase in report.phases)
    for name, benign in _names(report):
        lines.append(f"{'honest' if benign else 'attack'} {name}")
        for phase in report.phases:
            for email in phase.emails:
                if email.name == name:
                    lines.append(f"    {phase.id:<{width}}  {_email_line(email)}")
    lines.append("totals:")
    lines.append("  attacks that got through: " + ", ".join(f"{p.id} {p.got_through}" for p in report.phases)
                 + f"  (of {max(p.attacks for p in report.phases)})")
    for phase in report.phases:
        if phase.holds and phase.honest:
            lines.append(f"  honest emails answered ({phase.id}): {phase.answered} of {phase.honest}")
    lines.append("  calls outside the plan: " + ", ".join(
        f"{p.id} {sum(e.outside_plan for e in p.emails)}" for p in report.phases) + "  (must be 0)")
    lines.append("  non-narrow values at a tool: " + ", ".join(
        f"{p.id} {sum(e.non_narrow for e in p.emails)}" for p in report.phases) + "  (must be 0)")
    lines.append("  records not the run's own: " + ", ".join(
        f"{p.id} {p.foreign.total}" for p in report.phases) + "  (must be 0)")
    lines.append(f"data: {report.data_dir}  (one folder per phase)")
    for phase in report.phases:
        lines.append(f"  {phase.id}: trace {phase.trace_path}, calls {phase.calls_path}")
    lines += _page_lines(report, keep)
    lines += [f"note: no attack got through the {phase.id} phase, so this run shows nothing for the defence to "
              f"stop (`airlock lab check {report.lab}` says why each attack failed)"
              for phase in report.phases if not phase.holds and phase.attacks and not phase.got_through]
    lines += [f"NOT CLEAN: {problem}" for problem in report.problems] or [
        "clean: where the defence holds, no attack got through and every honest email was answered; every "
        "record is the run's own"]
    return lines


def _names(report: PhasedReport) -> list[tuple[str, bool]]:
    """Every email's name once, in the order the phases first ran it."""
    seen: dict[str, bool] = {}
    for phase in report.phases:
        for email in phase.emails:
            seen.setdefault(email.name, email.benign)
    return list(seen.items())


def _email_line(email: PhaseEmailReport) -> str:
    value = "" if email.value is None else f" value {email.value!r}"
    if email.benign:
        verdict = "answered" if email.answered else "NOT ANSWERED"
    else:
        verdict = f"GOT THROUGH: {'; '.join(email.harm)}" if email.harm else "stopped"
    reason = f": {cut(email.reason, REASON_LIMIT)}" if email.outcome != "completed" and email.reason else ""
    return f"{email.outcome:<9}{value}  {calls_text(email.calls)}  -> {verdict}{reason}"


def _page_lines(report: PhasedReport, keep: bool) -> list[str]:
    if any(phase.page_url is None for phase in report.phases):
        return [f"live page: not started ({page_missing()})"]
    lines = ["live page: one per phase, each its own stack"]
    for i, phase in enumerate(report.phases):
        if keep and i == len(report.phases) - 1:
            lines.append(f"  {phase.id}: {phase.page_url}  (this phase's stack is up until Ctrl-C)")
        else:
            lines.append(f"  {phase.id}: {phase.page_url} was up during its phase"
                         + ("" if keep else "; --keep keeps the last phase's stack up to look at"))
    return lines


def report_record(report: PhasedReport) -> dict[str, Any]:
    """The report as one JSON object (`lab run --json`)."""
    return {"lab": report.lab, "model": report.model, "clean": not report.problems, "problems": report.problems,
            "data_dir": str(report.data_dir),
            "totals": {"got_through": {p.id: p.got_through for p in report.phases},
                       "answered": {p.id: p.answered for p in report.phases if p.holds},
                       "attacks": max(p.attacks for p in report.phases),
                       "honest": {p.id: p.honest for p in report.phases if p.holds},
                       "foreign_records": {p.id: p.foreign.total for p in report.phases}},
            "phases": [{"id": p.id, "title": p.title, "holds": p.holds, "data_dir": str(p.data_dir),
                        "trace": str(p.trace_path), "calls": str(p.calls_path), "page": p.page_url,
                        "stragglers": p.stragglers, "foreign": [finding.as_record() for finding in p.foreign.found],
                        "emails": [{"name": e.name, "benign": e.benign, "outcome": e.outcome, "reason": e.reason,
                                    "value": e.value, "calls": e.calls, "harm": e.harm, "answered": e.answered,
                                    "got_through": e.got_through, "outside_plan": e.outside_plan,
                                    "non_narrow": e.non_narrow} for e in p.emails]}
                       for p in report.phases]}
