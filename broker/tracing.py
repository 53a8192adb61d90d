"""How the broker writes what workers told it into trace lines.

Data: a worker's result (Reading, Unreadable, Passed, Rejected, Done) and its notes, which
come from a process that may be compromised (the reader reads hostile text).
Readers: recovery, the scorer, the page and `airlock trace`, which key on (stage, event)
and on the fields written here; the formats are a contract (see airlock.trace).
Rationale: one place says what each result becomes in the trace, so a format changes in
one module; the Router decides where an email goes next and calls these to say so. A
worker's own fields never override the broker's (see line).
"""

from __future__ import annotations

from typing import Any

from airlock import trace
from airlock.wire import Done, Passed, Reading, Rejected, Unreadable

TRACE_TEXT_LIMIT = 2000  # characters of model answer kept in the trace
PARSE_RULES = (".empty", ".length", ".syntax", ".pattern")  # text that is not even the right shape


def line(stage: str, event: str, message_id: str | None, untrusted: dict[str, Any] | None,
         fields: dict[str, Any]) -> bytes:
    """One trace line. `untrusted` details come from a worker: they never override the
    broker's own `fields`, nor (in trace.line) at/message_id/stage/event."""
    if untrusted:
        fields = {**fields, **untrusted, **fields}  # the broker's own fields first, and they win
    return trace.line(stage, event, message_id, fields)


def model_answer(message: Reading) -> bytes:
    answer = message.answer
    return line("reader", "model_answer", message.message_id, message.notes, {
        "layer": "model_output", "answer": answer[:TRACE_TEXT_LIMIT], "answer_chars": len(answer),
        "source": message.source, "truncated": message.truncated})


def unreadable(message: Unreadable) -> bytes:
    return line("reader", "unreadable", message.message_id, message.notes, {
        "layer": "parser", "rule": message.rule, "reason": message.reason})


def passed(message: Passed) -> bytes:
    return line("validator", "verdict", message.message_id, None, {
        "layer": "validator", "verdict": "passed", "value": message.value, **student(message.student)})


def rejected(message: Rejected) -> bytes:
    """A rule that finds the text not even the right shape is the parser's layer."""
    layer = "parser" if message.rule.endswith(PARSE_RULES) else "validator"
    return line("validator", "verdict", message.message_id, None, {
        "layer": layer, "verdict": "rejected", "rule": message.rule, "reason": message.reason,
        **student(message.student)})


def calls(message: Done) -> list[bytes]:
    """Each call's authorization line; and, for one that ran, its call and observation."""
    lines: list[bytes] = []
    # Each call line names the plan it ran under (see wire.Done), when the actor said it.
    ran_under: dict[str, Any] = {"task": message.task, "plan": message.plan} if message.plan else {}
    for call in message.calls:
        # A lab: `student` when this step's decision ran student code (absent otherwise).
        where = {"step": call.step, "server": call.server, "tool": call.tool, **student(call.student)}
        lines.append(trace.line("actor", "authorization", message.message_id, {
            "layer": "authorization", **where, "key": call.key, "decision": call.decision}))
        if call.status in ("refused", "escalated"):
            continue
        lines.append(trace.line("actor", "call", message.message_id, {
            "layer": "execution", **where, "args": call.args, "status": call.status, "error": call.error,
            "key": call.key, **ran_under}))
        lines.append(trace.line("actor", "observation", message.message_id, {
            "layer": "observation", **where, "result": call.result}))
    return lines


def student(point: str) -> dict[str, str]:
    """`student` on a trace line only when a lab's student code took part (wire.Passed):
    a line without it reads as before, and old traces stay what they were."""
    return {"student": point} if point else {}
