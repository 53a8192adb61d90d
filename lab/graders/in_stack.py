"""What the actor labs' in-stack checkpoints share: the lab's [run] in a private stack with
the student's file plugged in, read back from calls.jsonl and the trace.

Data: the lab's [run] table (lab/catalog.py), the student's file, the emails it names; the
stack's calls.jsonl (what ran, each call marked with the plug point that took part) and
its trace (each step's decision record, refusals under the actor's student.* rules).
Readers: lab/graders/tool_identity.py, executor_checks.py, preconditions.py (in_the_stack).
Rationale: a checkpoint judges what ran and what each stage decided, never what a model
said. A rug pull swaps a private copy of the catalog between two batches of emails, so the
lab's own files never change and the swap falls between emails, never inside one.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airlock import campaign, trace
from airlock.score import EmailResult
from airlock.student import PLUG_POINTS, Plug, StudentCode, StudentFailed
from lab.catalog import LABS_ROOT, Lab, Run, find
from lab.grading import Failed, module_or_failed, todo
from lab.stack import lab_stack

ROOT = LABS_ROOT.parent
CHECKPOINT = "in-the-stack"
PROBE_TIMEOUT_S = 5.0
# How many arguments each plug point's function takes: the TODO probe calls it with Nones.
ARITY = {"check": 1, "bound_tool_choice": 2, "allowlist_problem": 2, "schema_problem": 2, "range_problem": 2,
         "decide": 5}


@dataclass
class Ran:
    """One in-stack run: every email's result in order, which side of the rug pull it ran on,
    its trace lines and its calls.jsonl records (with their `student` mark)."""

    lab: Lab
    results: list[EmailResult]
    after_rug_pull: set[str]
    events: dict[str, list[dict[str, Any]]]
    calls: dict[str, list[dict[str, Any]]]

    def name(self, result: EmailResult) -> str:
        shown = Path(result.email.file).name
        return f"{shown} (after the rug pull)" if result.id in self.after_rug_pull else shown

    def refusal(self, result: EmailResult) -> dict[str, Any] | None:
        """The authorization line whose decision stopped this email, if one did."""
        for event in self.events.get(result.id, []):
            if event.get("event") == "authorization" and (event.get("decision") or {}).get("verdict") != "allow":
                return event
        return None

    def catalog_file(self, result: EmailResult) -> Path:
        run = self.lab.run
        assert run is not None  # run_lab returns a Ran only for a lab with [run]
        return lab_path(self.lab, run.rug_pull if result.id in self.after_rug_pull else run.catalog)


def lab_path(lab: Lab, text: str) -> Path:
    """A [run] path: "./x" is the lab folder's x, anything else the checkout's."""
    return lab.folder / text[2:] if text.startswith("./") else ROOT / text


def student_rule(event: dict[str, Any]) -> dict[str, Any] | None:
    """The first student.* rule in a decision record."""
    rules = (event.get("decision") or {}).get("rules") or []
    return next((r for r in rules if str(r.get("rule", "")).startswith("student.")), None)


def where(event: dict[str, Any]) -> str:
    return f"step {event.get('step')} {event.get('server')}/{event.get('tool')}"


def run_lab(lab_id: str, student_dir: Path) -> Ran | Failed:
    """The lab's [run] with the student's file plugged in, or the Failed verdict saying why not."""
    lab = find(lab_id)
    run = lab.run
    if run is None:
        return Failed(CHECKPOINT, "lab.toml", f"lab {lab_id} has no [run] table")
    functions = PLUG_POINTS[run.plug][1]
    module = module_or_failed(CHECKPOINT, student_dir, run.file, functions[0])
    if isinstance(module, Failed):
        return module
    path = (student_dir / run.file).resolve()
    stopped = _probe(path, functions, lab_id)
    if stopped is not None:
        return stopped
    return _in_stack(lab, run, Plug(run.plug, path))


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


def _in_stack(lab: Lab, run: Run, plug: Plug) -> Ran | Failed:
    emails = campaign.load([str(lab_path(lab, name)) for name in run.emails])
    split = run.rug_pull_after if run.rug_pull else len(emails)
    with tempfile.TemporaryDirectory(prefix="airlock-lab-stack-") as scratch:
        catalog: Path | None = None
        if run.catalog:  # a private copy: the rug pull replaces it, never the lab's own file
            catalog = Path(scratch) / "catalog.toml"
            shutil.copyfile(lab_path(lab, run.catalog), catalog)
        with lab_stack(Path(scratch) / "data", lab_path(lab, run.task), model=run.model, plug=plug,
                       catalog=catalog) as stack:
            first = stack.run(emails[:split])
            results, stragglers, events = first.results, first.stragglers, first.events
            after: set[str] = set()
            if run.rug_pull and catalog is not None and emails[split:]:
                swapped = Path(scratch) / "rug-pull.toml"
                shutil.copyfile(lab_path(lab, run.rug_pull), swapped)
                os.replace(swapped, catalog)  # one atomic swap: the actor reads one catalog or the other
                second = stack.run(emails[split:])
                results, stragglers = results + second.results, stragglers + second.stragglers
                events = {**events, **second.events}
                after = {result.id for result in second.results}
            calls: dict[str, list[dict[str, Any]]] = {}
            for record in trace.read(stack.calls_path):
                calls.setdefault(str(record.get("message_id")), []).append(record)
    if stragglers:
        names = ", ".join(Path(name).name for name in stragglers)
        return Failed(CHECKPOINT, names, "these emails reached no outcome in the stack within its deadline: "
                                         "does your code hang? (each call is stopped after a few seconds)")
    return Ran(lab, results, after, events, calls)
