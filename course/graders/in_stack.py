"""What the actor labs' in-stack checkpoints share: the lab's [run] in a private stack with
the student's file plugged in, read back from calls.jsonl and the trace.

Data: the lab's [run] table (course/catalog.py), the student's file, the emails it names; the
stack's calls.jsonl (what ran, each call marked with the plug point that took part) and
its trace (each step's decision record, refusals under the actor's student.* rules).
Readers: course/graders/tool_identity.py, executor_checks.py, preconditions.py (in_the_stack).
Rationale: a checkpoint judges what ran and what each stage decided, never what a model
said. The stack is course.run.running's, the one `airlock lab run` shows a student (its rug pull
swaps a private copy of the catalog between two batches of emails). A run whose files hold a
record it cannot account for (course.provenance: an email it did not send, a call line the actor
did not log for an allowed step) fails before anything else is judged, each record named.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airlock import records, trace
from airlock.plugs import PLUG_POINTS
from course import provenance
from course.catalog import Lab, find
from course.grading import Failed, module_or_failed, todo
from course.run import EmailReport, running
from studentcode.student import StudentCode, StudentFailed

CHECKPOINT = "in-the-stack"
PROBE_TIMEOUT_S = 5.0
# How many arguments each plug point's function takes: the TODO probe calls it with Nones.
ARITY = {"check": 1, "bound_tool_choice": 2, "allowlist_problem": 2, "schema_problem": 2, "range_problem": 2,
         "decide": 5}


@dataclass
class Ran:
    """One in-stack run: every email as the run saw it, in order, which side of the rug pull
    it ran on, its trace lines and its calls.jsonl records (with their `student` mark)."""

    lab: Lab
    emails: list[EmailReport]
    after_rug_pull: set[str]
    events: dict[str, list[records.TraceRecord]]
    calls: dict[str, list[records.Call]]

    def name(self, email: EmailReport) -> str:
        return f"{email.file} (after the rug pull)" if email.id in self.after_rug_pull else email.file

    def refusal(self, email: EmailReport) -> records.Authorization | None:
        """The authorization record whose decision stopped this email, if one did."""
        for event in self.events.get(email.id, []):
            if isinstance(event, records.Authorization) and event.decision.get("verdict") != "allow":
                return event
        return None

    def catalog_file(self, email: EmailReport) -> Path | None:
        """The catalog the actor read for this email (None: the shipped one)."""
        paths = self.lab.run_paths()
        assert paths is not None  # run_lab returns a Ran only for a lab with [run]
        return paths.rug_pull if email.id in self.after_rug_pull else paths.catalog


def student_rule(event: records.Authorization) -> dict[str, Any] | None:
    """The first student.* rule in a decision record."""
    rules = event.decision.get("rules") or []
    return next((r for r in rules if str(r.get("rule", "")).startswith("student.")), None)


def where(event: records.Authorization) -> str:
    return f"step {event.step} {event.server}/{event.tool}"


def run_lab(lab_id: str, student_dir: Path) -> Ran | Failed:
    """The lab's [run] with the student's file plugged in, or the Failed verdict saying why not."""
    lab = find(lab_id)
    if lab.run is None:
        return Failed(CHECKPOINT, "lab.toml", f"lab {lab_id} has no [run] table")
    functions = PLUG_POINTS[lab.run.plug][1]
    module = module_or_failed(CHECKPOINT, student_dir, lab.run.file, functions[0])
    if isinstance(module, Failed):
        return module
    stopped = _probe((student_dir / lab.run.file).resolve(), functions, lab_id)
    if stopped is not None:
        return stopped
    with tempfile.TemporaryDirectory(prefix="airlock-lab-stack-") as scratch:
        with running(lab, student_dir, Path(scratch) / "run") as (stack, report):
            events = stack.trace_events([email.id for email in report.emails])
            calls: dict[str, list[records.Call]] = {}
            for call in trace.read_calls(stack.calls_path):
                calls.setdefault(call.message_id, []).append(call)
    if report.foreign.total:  # judged once the stack stopped (course.run.running)
        return foreign_records(report.foreign)
    if report.stragglers:
        names = ", ".join(Path(name).name for name in report.stragglers)
        return Failed(CHECKPOINT, names, "these emails reached no outcome in the stack within its deadline: "
                                         "does your code hang? (each call is stopped after a few seconds)")
    split = report.rug_pull_after if lab.run.rug_pull else len(report.emails)
    return Ran(lab, report.emails, {email.id for email in report.emails[split:]}, events, calls)


def foreign_records(found: provenance.Audit) -> Failed:
    """The verdict on a run whose files hold records it cannot account for: each named."""
    return Failed(CHECKPOINT, "the run's trace and calls.jsonl",
                  "the run is not clean, whatever your code did: " + "; ".join(found.problems()))


def _probe(path: Path, functions: tuple[str, ...], lab_id: str) -> Failed | None:
    """A TODO or missing function fails at once, before a stack is started for nothing."""
    code = StudentCode(path, PROBE_TIMEOUT_S)
    try:
        for function in functions:
            answer = code.call(function, *[None] * ARITY[function])
            if isinstance(answer, StudentFailed) and answer.kind == "todo":
                return todo(CHECKPOINT, function, lab_id)
            if isinstance(answer, StudentFailed) and answer.kind in ("missing", "unloadable"):
                return Failed(CHECKPOINT, path.name, answer.describe())
            if isinstance(answer, StudentFailed) and answer.kind in ("timeout", "crashed"):
                # every step would wait for it in turn: say so now, not after the wall-clock limit
                return Failed(CHECKPOINT, f"{function}() called with None for each argument", answer.describe())
    finally:
        code.close()
    return None
