"""Escalated emails as the trace tells them: what waits for a person, and whether a
person's decision was taken. Read by `airlock pending`, `approve` and `deny`; the trace is
the only source, so nothing new goes on the wire for them."""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path

from airlock import records, trace, tracefiles
from airlock.records import Authorization, DecisionTaken, OutcomeLine, Received, Verdict

TRACE_POLL_S = 0.05  # how often decision_refused looks for the broker's outcome line


def waiting(path: Path, damage: trace.Damage | None = None) -> list[dict[str, object]]:
    """Each escalated email with no decision yet, as the trace tells it: the step and tool
    waiting, the role it needs and why, the value the validator passed, the sender the
    intake vouched for and where the email came from. One pass over the trace; for each
    field the last record wins (a refused decision escalates the same step again). Each
    fact comes from the stage that may state it (a typed record: airlock.records). Damaged
    lines met are noted in `damage`, for the caller to report."""
    _, escalated = trace.unfinished(path)
    found: dict[str, dict[str, object]] = {message_id: {"id": message_id} for message_id in escalated}
    for record in trace.read(path, damage=damage):
        entry = found.get(trace.about(record) or "")
        if entry is None:
            continue
        match record:
            case Received(sender=sender, origin=origin):
                entry.update(sender=sender, file=origin)
            case Verdict(verdict="passed", value=value):
                entry["value"] = value
            case Authorization(decision=decision) if decision.get("verdict") == "escalate":
                entry.update(step=record.step, tool=f"{record.server}/{record.tool}",
                             needs=decision.get("escalated_to"), reason=decision.get("reason"))
    return list(found.values())


UNKNOWN_STEP = "worker.call_unknown"  # the actor's word for a step called and never recorded


def unknown_steps(path: Path, damage: trace.Damage | None = None) -> list[dict[str, object]]:
    """Each step whose effect nobody knows, as the actor said it (`worker.call_unknown`): it
    claimed the step and called its tool, and no result was ever recorded (a crash after
    the call, a tool that failed or overran). It never runs again; a person checks the
    tool's own records. One entry per email and step, in the order first said."""
    found: dict[tuple[str, object], dict[str, object]] = {}
    for record in trace.read(path, damage=damage):
        if isinstance(record, records.PeerFact) and record.event == UNKNOWN_STEP and record.message_id:
            detail = record.detail
            found.setdefault((record.message_id, detail.get("step")), {
                "id": record.message_id, "step": detail.get("step"),
                "tool": f"{detail.get('server')}/{detail.get('tool')}", "key": detail.get("key")})
    return list(found.values())


def decision_refused(path: Path, message_id: str, timeout_s: float = 5.0) -> str:
    """Why a person's decision did not move this escalated email, or '' if it did.

    The approval rule records the decision it was given; an escalation that read one was
    not satisfied by it (a person not listed in the role, or the wrong role). A later
    step's own escalation reads none. The broker answers before it writes the turn's
    trace lines, so this waits for the outcome line that follows the decision."""
    deadline = time.monotonic() + timeout_s
    history = tracefiles.History(path, whole_only=True)  # all segments once, then what follows
    about = _about(history, message_id)
    while True:
        last_decision = max((i for i, r in enumerate(about) if isinstance(r, DecisionTaken)), default=None)
        after = about[last_decision + 1:] if last_decision is not None else []
        if any(isinstance(r, OutcomeLine) for r in after) or time.monotonic() > deadline:
            break
        time.sleep(TRACE_POLL_S)
        appended, history.since = tracefiles.read_since(path, history.since)
        about += _about(appended, message_id)
    for record in reversed(after):
        if isinstance(record, Authorization):
            decision = record.decision
            given = [rule for rule in decision.get("rules", []) if isinstance(rule, dict)
                     and rule.get("rule") == "approval" and (rule.get("read") or {}).get("approval")]
            return str(decision.get("reason", "")) if decision.get("verdict") == "escalate" and given else ""
    return "" if after else f"{path} holds no record of the decision"


def _about(raw_lines: Iterable[bytes], message_id: str) -> list[records.TraceRecord]:
    return [record for raw in raw_lines for record in records.expand(records.decode(raw))
            if trace.about(record) == message_id]
