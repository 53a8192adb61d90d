"""What a peer may write into the trace, and how it appears there.

Data: a worker's Event (reader, validator, actor) or an intake client's Notice: a name and
a flat detail, both from a process that may be compromised (the reader reads hostile text).
Readers: recovery, the scorer, the page and `airlock trace`, which key on (stage, event).
Rationale: a forged `outcome` would make recovery skip an email, a forged `violation` or
`verdict` would put words in the broker's mouth, and control characters in a name or a
value would rewrite a trainer's terminal. So a peer's name must match EVENT_NAME and not
be one of the broker's own; a worker's line is written as `worker.<name>` under its
endpoint's stage, where no broker event lives; every text in its detail is escaped.
And who may write at all is the key's role (WRITES): a supervisor line says a service
died and was restarted, which the page, the SMTP intake or the CLI have no way to know, so
a compromised one could only lie to the room with it.
"""

from __future__ import annotations

import re
from typing import Any

from airlock import keys, records
from airlock.records import SUPERVISOR
from airlock.terminal import shown

# The stages each client key's role may write trace lines under, as itself: the supervisor's
# Notice (service_restarted) under "supervisor", a worker's Event under its own endpoint's
# stage. The intake's clients write none: the broker writes what it made of their messages,
# under its own stage. A key of no role here (a person's, an unknown one) writes nothing.
WRITES: dict[str, frozenset[str]] = {
    keys.SUPERVISOR_ROLE: frozenset({SUPERVISOR}),
    "reader": frozenset({"reader"}),
    "validator": frozenset({"validator"}),
    "actor": frozenset({"actor"}),
    "intake": frozenset(),  # the CLI (`airlock inject`)
    keys.SMTP_ROLE: frozenset(),
    "dashboard": frozenset(),
}

# The events the broker writes from what it checked itself: every typed record's name
# (airlock.records). A client's Notice (stage "supervisor", not namespaced: the page reads
# service_restarted) may not take these names.
BROKER_EVENTS = records.EVENT_NAMES
# What a worker reports about frames the broker sent it (airlock.service): written, as any
# worker event, as worker.violation / worker.malformed_frame, never as the broker's own.
WORKER_REPORTS = frozenset({"violation", "malformed_frame"})
EVENT_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")  # no control characters, no case tricks, short


def refusal(event: str, role: str, namespaced: bool) -> str:
    """Why a peer on `role`'s endpoint may not write `event` ("" if it may), the name escaped.
    `namespaced`: a worker's Event, written under WORKER_PREFIX."""
    taken = BROKER_EVENTS - WORKER_REPORTS if namespaced else BROKER_EVENTS
    if event in taken or not EVENT_NAME.fullmatch(event):
        return f"a peer on the {role} endpoint may not write the trace event '{shown(event[:100])}'"
    return ""


def writer_refusal(roles: dict[str, str], key: str, stage: str) -> str:
    """Why the client proven by `key` may not write a line under `stage` ("" if it may).
    `roles`: each known key's role (keys.client_roles). With authentication off no key is
    proven ("") and any peer may write, as any peer may do anything then (AIRLOCK_INSECURE)."""
    if not key:
        return ""
    role = roles.get(key)
    if role is not None and stage in WRITES.get(role, frozenset()):
        return ""
    owners = sorted(name for name, stages in WRITES.items() if stage in stages)
    who = f"the {role} key" if role is not None else "an unknown key"
    return (f"{who} may not write {stage} lines into the trace (only the "
            f"{' or '.join(owners) or 'broker'} key{'s' if len(owners) > 1 else ''} may)")


def escaped(detail: dict[str, Any]) -> dict[str, Any]:
    """A peer's trace detail with every text in it (keys too) escaped for a terminal: JSON
    escapes control characters but leaves bidi and format characters raw."""
    return {shown(str(key)): _one(value) for key, value in detail.items()}


def _one(value: Any) -> Any:
    if isinstance(value, str):
        return shown(value)
    if isinstance(value, list):
        return [_one(v) for v in value]
    if isinstance(value, dict):
        return escaped(value)
    return value
