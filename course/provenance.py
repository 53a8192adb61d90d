"""Whether a lab run's files hold only what its own stack wrote for its own emails.

A lab run judges the student's code from two files (course/run.py): calls.jsonl, which only the
actor appends to, and the trace, which only the broker writes. The student's code runs in a
child process of one of the stack's services; code that got past that process's walls
(studentcode.sandbox) could append to either file, or submit an email of its own with a key it
read from the stack. This module is the second wall: it reads both files once the run's
emails have their outcomes and names every record the run cannot account for. Any finding
makes the run not clean, whatever else the run showed.

Data: the message ids the harness submitted (the broker gives each back on submit), the
trace (every closed segment, then the live file) and calls.jsonl.
Checked:
- every email the trace names is one the run sent; one received that the run did not send
  is named with its sender, origin and claimed proof, as the broker recorded them;
- each of the run's emails has at most one `received` line and one final outcome, as the
  broker writes them;
- every trace line decodes to a record this version knows (records.decode already reads a
  known event from a stage that may not say it as a damaged line);
- every calls.jsonl line decodes, names one of the run's emails, is the only line of its
  kind for its step, and matches a step the trace says was allowed and ran with the same
  server, tool and arguments: an intent (the claim made before the tool ran) whatever
  became of the step, a call only if its tool returned (one that failed or overran
  leaves its intent alone).
Not checkable, so not checked: neither file carries an authentication (no signature, no key
per role; a trace line's `stage` is stamped by the broker, not proven in the line). A line
written straight into the trace with the right stage, about one of the run's emails, reads
as the broker's own; a call line that copies a step the trace holds and that has no line
yet (a step whose tool returned an oversized result) reads as the actor's. Such lines are
caught only where they contradict the rest. A line deleted or rewritten in place leaves
nothing to find.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airlock import records, tracefiles
from airlock.records import (
    Authorization,
    Call,
    Damaged,
    Intent,
    OutcomeLine,
    Received,
    Recovered,
    TraceRecord,
    Unrecognized,
)

TRACE, CALLS = "trace", "calls.jsonl"
SAID_LIMIT = 200  # characters of a foreign record a finding keeps
KEPT = 20  # findings kept per run; the rest are counted
SHOWN = 5  # findings a report names one by one; the rest as a count
# A step whose tool returned, as the actor logs it (actor/executor.py logs a call once the
# tool has answered): ok, a replay of a call already logged, or an answer over the size cap.
LOGGED_STATUSES = ("ok", "replayed")
LOGGED_ERROR = "result_too_large"
NOT_SENT = "an email this run did not send reached the stack"


@dataclass(frozen=True)
class Foreign:
    """One record the run cannot account for: its file and line (1 = the first; the trace's
    closed segments count first), why, and what it said. `said` came from the record: whoever
    prints it shows it escaped (airlock.terminal)."""

    file: str
    line: int
    why: str
    said: str

    def describe(self) -> str:
        return f"{self.why} ({self.file} line {self.line}): {self.said}"

    def as_record(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "why": self.why, "said": self.said}


@dataclass
class Audit:
    """The findings of one run (the first KEPT, in file order) and how many there were."""

    found: list[Foreign] = field(default_factory=list)
    total: int = 0

    def add(self, finding: Foreign) -> None:
        self.total += 1
        if len(self.found) < KEPT:
            self.found.append(finding)

    def problems(self, prefix: str = "") -> list[str]:
        """One line per finding, up to SHOWN, then one line counting the rest."""
        lines = [prefix + finding.describe() for finding in self.found[:SHOWN]]
        if self.total > SHOWN:
            lines.append(f"{prefix}{self.total - SHOWN} more record(s) this run did not write")
        return lines


def audit(trace_path: Path, calls_path: Path, sent: Collection[str], *, stopped: bool) -> Audit:
    """Every trace and calls.jsonl record the run with these emails cannot account for.
    `stopped`: the stack has stopped, so an unterminated last line is foreign, not a line
    still being written."""
    found = Audit()
    steps = _trace(trace_path, set(sent), stopped, found)
    _calls(calls_path, set(sent), steps, stopped, found)
    return found


@dataclass
class _Step:
    """What the trace says of one step of one email: allowed, and the call if it ran."""

    allowed: bool = False
    ran: list[Call] = field(default_factory=list)


@dataclass
class _Unsent:
    """An email the trace names that the run did not send: where it first appears, what
    the broker recorded on receiving it, and how many lines name it."""

    line: int
    received: Received | Recovered | None = None
    lines: set[int] = field(default_factory=set)


def _trace(path: Path, sent: set[str], stopped: bool, found: Audit) -> dict[tuple[str, int], _Step]:
    """Check the trace's lines; return what it says of each step of the run's emails."""
    steps: dict[tuple[str, int], _Step] = {}
    unsent: dict[str, _Unsent] = {}
    once: set[tuple[str, str]] = set()  # (event, message id) of the lines the broker writes once per email
    for number, raw in _numbered(tracefiles.History(path, whole_only=not stopped)):
        for record in records.expand(records.decode(raw)):
            if isinstance(record, Damaged):
                found.add(Foreign(TRACE, number, "a trace line that is no record",
                                  _said(f"{record.reason}: {record.text}")))
                continue
            if isinstance(record, Unrecognized):
                found.add(Foreign(TRACE, number, "a trace line of an event this version does not know",
                                  _said(raw.decode("utf-8", "replace"))))
                continue
            message_id = record.message_id
            if message_id is None:
                continue
            if message_id not in sent:
                email = unsent.setdefault(message_id, _Unsent(number))
                email.lines.add(number)  # a step line holds three records
                if isinstance(record, (Received, Recovered)) and email.received is None:
                    email.received = record
                continue
            if isinstance(record, Authorization):
                step = steps.setdefault((message_id, record.step), _Step())
                step.allowed = step.allowed or record.decision.get("verdict") == "allow"
            elif isinstance(record, Call):
                steps.setdefault((message_id, record.step), _Step()).ran.append(record)
            elif _once_per_email(record):
                event = "received" if isinstance(record, Received) else "final outcome"
                if (event, message_id) in once:
                    found.add(Foreign(TRACE, number, f"a second {event} line for one email",
                                      _said(f"{message_id}: {raw.decode('utf-8', 'replace')}")))
                once.add((event, message_id))
    for message_id, email in unsent.items():
        found.add(Foreign(TRACE, email.line, NOT_SENT, _said(_unsent_text(message_id, email))))
    return steps


def _once_per_email(record: TraceRecord) -> bool:
    """A line the broker writes once per email: its receipt, and its final outcome (an
    `escalated` outcome waits for a person and is followed by another)."""
    return isinstance(record, Received) or (isinstance(record, OutcomeLine) and record.outcome != "escalated")


def _unsent_text(message_id: str, email: _Unsent) -> str:
    lines = f"{len(email.lines)} trace line(s) about it"
    received = email.received
    if isinstance(received, Received):
        return (f"{message_id} from {received.sender} via {received.origin} (sender proof "
                f"{received.sender_proof or 'none'}), {lines}")
    if isinstance(received, Recovered):
        return f"{message_id} recovered from the journal ({received.origin}), {lines}"
    return f"{message_id}, never received, {lines}"


def _calls(path: Path, sent: set[str], steps: dict[tuple[str, int], _Step], stopped: bool, found: Audit) -> None:
    """Check each calls.jsonl line against the run's emails and the trace's steps."""
    seen: set[tuple[str, int]] = set()
    claimed: set[tuple[str, int]] = set()
    for number, raw in _numbered(tracefiles.lines_of(path)):
        if not stopped and not raw.endswith(b"\n"):
            break  # the actor may be writing it: only a stopped stack's files are whole
        call = records.decode_call(raw)
        if isinstance(call, Damaged):
            found.add(Foreign(CALLS, number, "a call line that does not decode", _said(f"{call.reason}: {call.text}")))
            continue
        said = _said(_call_text(call))
        key = (call.message_id, call.step)
        if call.message_id not in sent:
            if key not in claimed and key not in seen:  # its intent and its call are one call: named once
                found.add(Foreign(CALLS, number, "a call for an email this run did not send", said))
        elif isinstance(call, Intent):
            if key in claimed:
                found.add(Foreign(CALLS, number, "a second intent line for one step", said))
            elif not _claimed(call, steps.get(key)):
                found.add(Foreign(CALLS, number, "an intent the trace has no allowed step that ran for", said))
        elif key in seen:
            found.add(Foreign(CALLS, number, "a second call line for one step", said))
        elif not _logged(call, steps.get(key)):
            found.add(Foreign(CALLS, number, "a call the trace has no allowed step that ran for", said))
        (claimed if isinstance(call, Intent) else seen).add(key)


def _claimed(intent: Intent, step: _Step | None) -> bool:
    """Whether the trace holds the allowed step that ran (whatever became of it) on this call."""
    if step is None or not step.allowed:
        return False
    return any((ran.server, ran.tool, ran.args) == (intent.server, intent.tool, intent.args) for ran in step.ran)


def _logged(call: Call, step: _Step | None) -> bool:
    """Whether the trace holds the allowed step that ran, whose call the actor logged as this one."""
    if step is None or not step.allowed:
        return False
    return any((ran.server, ran.tool, ran.args) == (call.server, call.tool, call.args)
               and (ran.status in LOGGED_STATUSES
                    or (ran.status == "error" and (ran.error or "").startswith(LOGGED_ERROR)))
               for ran in step.ran)


def _call_text(call: Call | Intent) -> str:
    args = ", ".join(f"{name}={value!r}" for name, value in call.args.items())
    return f"{call.message_id} step {call.step} {call.server}/{call.tool}({args})"


def _numbered(lines: Iterable[bytes]) -> Iterator[tuple[int, bytes]]:
    for number, raw in enumerate(lines, start=1):
        if raw.strip():  # a blank line says nothing
            yield number, raw


def _said(text: str) -> str:
    return text if len(text) <= SAID_LIMIT else text[: SAID_LIMIT - 1] + "…"
