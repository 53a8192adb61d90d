"""How the broker writes what workers told it into trace lines.

Data: a worker's result (Reading, Unreadable, Passed, Rejected, Done) and its notes, which
come from a process that may be compromised (the reader reads hostile text).
Readers: recovery, the scorer, the page and `airlock trace`, which read the records
(airlock.records) written here; their types are the contract.
Rationale: one place says what each result becomes in the trace, so a format changes in
one module; the Router decides where an email goes next and calls these to say so. A
worker's notes go into the note fields of its line (records.notes), so none can stand
for a field the broker sets.
"""

from __future__ import annotations

import msgspec

from airlock import records
from airlock.records import ModelAnswer, Step, Verdict, utc_now
from airlock.wire import Done, Passed, Reading, Rejected, Unreadable

TRACE_TEXT_LIMIT = 2000  # characters of model answer kept in the trace
PARSE_RULES = (".empty", ".length", ".syntax", ".pattern")  # text that is not even the right shape


def model_answer(message: Reading) -> bytes:
    answer = message.answer
    return records.encode(ModelAnswer(
        utc_now(), message.message_id, "reader", **records.notes(message.notes), layer="model_output",
        answer=answer[:TRACE_TEXT_LIMIT], answer_chars=len(answer), source=message.source,
        truncated=message.truncated, grounded=message.grounded))


def unreadable(message: Unreadable) -> bytes:
    return records.encode(records.Unreadable(
        utc_now(), message.message_id, "reader", **records.notes(message.notes), layer="parser",
        rule=message.rule, reason=message.reason))


def passed(message: Passed) -> bytes:
    return records.encode(Verdict(utc_now(), message.message_id, "validator", layer="validator", verdict="passed",
                                  value=message.value, student=message.student))


def rejected(message: Rejected) -> bytes:
    """A rule that finds the text not even the right shape is the parser's layer."""
    layer = "parser" if message.rule.endswith(PARSE_RULES) else "validator"
    return records.encode(Verdict(utc_now(), message.message_id, "validator", layer=layer, verdict="rejected",
                                  rule=message.rule, reason=message.reason, student=message.student))


def calls(message: Done) -> list[bytes]:
    """One Step line per plan step: its decision record; and, for a step that ran, its call
    (naming the plan it ran under, when the actor said it: see wire.Done) and what the tool
    returned. `student` is set when the step's decision ran a lab's student code."""
    at, message_id = utc_now(), message.message_id
    task = message.task if message.plan else ""
    lines: list[bytes] = []
    for call in message.calls:
        decided = Step(at=at, message_id=message_id, stage="actor", step=call.step, server=call.server, tool=call.tool,
                       key=call.key, decision=call.decision, student=call.student)
        if call.status in ("refused", "escalated"):
            lines.append(records.encode(decided))  # it did not run: its decision is all there is
        else:
            lines.append(records.encode(msgspec.structs.replace(
                decided, status=call.status, args=call.args, error=call.error, task=task, plan=message.plan,
                result=call.result)))
    return lines
