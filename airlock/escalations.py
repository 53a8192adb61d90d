"""Escalated emails as the trace tells them: what waits for a person, and whether a
person's decision was taken. Read by `airlock pending`, `approve` and `deny`; the trace is
the only source, so nothing new goes on the wire for them."""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from airlock import trace, tracefiles

TRACE_POLL_S = 0.05  # how often decision_refused looks for the broker's outcome line


def waiting(path: Path) -> list[dict[str, object]]:
    """Each escalated email with no decision yet, as the trace tells it: the step and tool
    waiting, the role it needs and why, the value the validator passed, the sender the
    intake vouched for and where the email came from. One pass over the trace; for each
    field the last record wins (a refused decision escalates the same step again)."""
    _, escalated = trace.unfinished(path)
    found: dict[str, dict[str, object]] = {message_id: {"id": message_id} for message_id in escalated}
    for record in trace.read(path):
        entry = found.get(str(record.get("message_id")))
        if entry is None:
            continue
        # The broker stamps `stage` from the endpoint a line came from: each fact is taken
        # only from the stage that may state it.
        where, event, decision = record.get("stage"), record.get("event"), record.get("decision")
        if (where, event) == ("broker", "received"):
            entry.update(sender=record.get("sender", ""), file=record.get("origin", ""))
        elif (where, event) == ("validator", "verdict") and record.get("verdict") == "passed":
            entry["value"] = record.get("value")
        elif ((where, event) == ("actor", "authorization") and isinstance(decision, dict)
              and decision.get("verdict") == "escalate"):
            entry.update(step=record.get("step"), tool=f"{record.get('server')}/{record.get('tool')}",
                         needs=decision.get("escalated_to"), reason=decision.get("reason"))
    return list(found.values())


def decision_refused(path: Path, message_id: str, timeout_s: float = 5.0) -> str:
    """Why a person's decision did not move this escalated email, or '' if it did.

    The approval rule records the decision it was given; an escalation that read one was
    not satisfied by it (a person not listed in the role, or the wrong role). A later
    step's own escalation reads none. The broker answers before it writes the turn's
    trace lines, so this waits for the outcome line that follows the decision."""
    deadline = time.monotonic() + timeout_s
    history = tracefiles.History(path, whole_only=True)  # all segments once, then what follows
    records = _about(history, message_id)
    while True:
        last_decision = max((i for i, r in enumerate(records) if (r.get("stage"), r.get("event")) == ("broker", "decision")),
                            default=None)
        after = records[last_decision + 1:] if last_decision is not None else []
        if any(r.get("event") == "outcome" for r in after) or time.monotonic() > deadline:
            break
        time.sleep(TRACE_POLL_S)
        appended, history.since = tracefiles.read_since(path, history.since)
        records += _about(appended, message_id)
    for record in reversed(after):
        decision = record.get("decision")
        if (record.get("stage"), record.get("event")) == ("actor", "authorization") and isinstance(decision, dict):
            given = [rule for rule in decision.get("rules", []) if isinstance(rule, dict)
                     and rule.get("rule") == "approval" and (rule.get("read") or {}).get("approval")]
            return str(decision.get("reason", "")) if decision.get("verdict") == "escalate" and given else ""
    return "" if after else f"{path} holds no record of the decision"


def _about(raw_lines: Iterable[bytes], message_id: str) -> list[dict[str, Any]]:
    return [record for record in map(trace.decode_line, raw_lines)
            if record is not None and record.get("message_id") == message_id]
