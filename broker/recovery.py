"""What a starting broker does with what an earlier one left: every journalled email that
has no final outcome is dispatched again; every escalation stays open.

Data: the journal's records (broker.journal: where each is, and any damage found at open)
and each email's state in the trace (airlock.tracefiles: its checkpoint and live segment).
Readers: the loop (broker.app), at start (recover) and on each turn while a backlog waits
(refill).
Rationale: "accepted" means on disk, so an email a crash interrupted is carried on, never
dropped; one whose record was lost to damage ends `failed`, naming the damage. Only what
fits under AIRLOCK_QUEUE_MAX_BYTES is read into memory; the rest waits on disk (the
backlog, in journal order), so a restart holds no more than a running broker would.
"""

from __future__ import annotations

import collections
import sys
from typing import Any

from airlock import records, trace, tracefiles
from airlock.records import JournalDamaged, TraceDamaged, utc_now
from airlock.settings import Settings
from airlock.terminal import json_line
from broker.journal import Damage, Journal, Position, QueuedEmail
from broker.outbox import Effect
from broker.router import Router

UNREADABLE = ("accepted, but its journal record could not be read back (damaged or an I/O error since the broker "
              "started)")


def recover(core: Router, settings: Settings, journal: Journal,
            now: float) -> tuple[list[Effect], collections.deque[Position]]:
    """Re-dispatch what an earlier broker accepted and never finished; keep escalations open.

    Only what fits under AIRLOCK_QUEUE_MAX_BYTES is read into memory; the rest waits on disk
    (the backlog returned, in journal order) and refill() reads it as readers make room, so
    a restart holds no more than a running broker would. The states come from the trace's
    checkpoint and live segment (airlock.tracefiles), never from all of history."""
    unread = tracefiles.Unread()
    state = trace.states(settings.trace_path, unread)
    backlog: collections.deque[Position] = collections.deque()
    unreadable: list[str] = []  # checked at open, unreadable now: damaged or EIO since
    for position in journal.positions():
        what = state.get(position.message_id)
        if what == "escalated":
            core.still_escalated(position.message_id, now)
        elif what != "final":
            if backlog or not core.has_room(position.size):
                core.defer(position.message_id, now)
                backlog.append(position)
            else:
                entry = journal.read(position)
                if isinstance(entry, QueuedEmail):
                    core.recover(entry, now)
                else:
                    unreadable.append(position.message_id)
        state[position.message_id] = "journalled"
    # An email's `received` line reaches the trace only after its journal record is on disk
    # (broker.carry), or in the same write as its `failed` outcome when that record could
    # not be written; so one still open with no record was accepted, and its record was lost
    # to the damage found at open, if there was any. With none, the journal is whole and
    # the email was never accepted.
    lost = damage_reason(journal.damage)  # read after the pass above: what it met is in it
    effects: list[Effect] = []
    abandoned = 0
    for message_id, what in state.items():
        if what == "open":  # received, no record: nothing to resume
            abandoned += 1
            effects += core.abandon(message_id, lost or "the broker stopped before accepting this email")
        elif what == "escalated":
            core.still_escalated(message_id, now)
    for message_id in unreadable:
        effects += core.abandon(message_id, UNREADABLE)
    if unread.count:  # on stderr too, as the journal's damage: where an operator looks first
        print(f"broker: trace damaged: {unread.count} line(s) read past at start ({json_line(unread.files)}); each "
              "email such a line named is taken as open; `airlock trace` names every damaged line", file=sys.stderr)
        effects.insert(0, records.encode(TraceDamaged(utc_now(), None, "broker", lines=unread.count,
                                                      files=unread.files)))
    if journal.damage:
        effects.insert(0, records.encode(JournalDamaged(utc_now(), None, "broker", **damage_detail(journal),
                                                        emails_lost=abandoned)))
    return effects + core.tick(now), backlog


def refill(core: Router, journal: Journal, backlog: collections.deque[Position], now: float) -> list[Effect]:
    """Read deferred emails back from the journal while they fit under the byte bound; one
    whose record cannot be read back ends failed, saying so."""
    effects: list[Effect] = []
    while backlog and core.has_room(backlog[0].size):
        position = backlog.popleft()
        entry = journal.read(position)
        if isinstance(entry, QueuedEmail):
            core.recover(entry, now)
        else:
            effects += core.end_failed([position.message_id], UNREADABLE, now)
    return effects


def damage_reason(damage: list[Damage]) -> str:
    """Why an accepted email has no journal record: the damaged ranges, or "" if none."""
    if not damage:
        return ""
    ranges = ", ".join(f"{d.start}-{d.end}" for d in damage[:5]) + (" ..." if len(damage) > 5 else "")
    return (f"accepted, but its journal record was lost to damage in journal.bin (bytes {ranges} "
            "skipped; see the journal_damaged event)")


def damage_detail(journal: Journal) -> dict[str, Any]:
    """The journal_damaged line's detail (and the stderr report): what was skipped, where."""
    return {"path": str(journal.path), "ranges_skipped": len(journal.damage),
            "bytes_skipped": sum(d.end - d.start for d in journal.damage),
            "ranges": [[d.start, d.end] for d in journal.damage[:100]],
            "torn_tail": any(d.torn_tail for d in journal.damage)}
