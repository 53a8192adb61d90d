"""What the broker's logic asks the loop to do: the effects of one message or one tick.

Data: messages to send (Send), trace lines (typed records, airlock.records, encoded) and journal
records (broker.journal.QueuedEmail), in the order they were decided.
Readers: the loop (broker.app, broker.carry), which carries them out in an order that
keeps the guarantees (the journal on disk before any Accepted leaves).
Rationale: the Router and its parts (workers, lifecycle, dispatch, intake) never touch a
socket or a file; each appends here, and the Router hands the list over at the end of a
handle() or tick(). One shared outbox keeps the effects of one message in the order they
happened, whichever part decided them.
"""

from __future__ import annotations

from dataclasses import dataclass

from airlock import records
from airlock.wire import Message
from broker.journal import QueuedEmail


@dataclass(frozen=True)
class Send:
    role: str
    identity: bytes
    message: Message


Effect = Send | bytes | QueuedEmail


class Outbox:
    __slots__ = ("items",)

    def __init__(self) -> None:
        self.items: list[Effect] = []

    def send(self, role: str, identity: bytes, message: Message) -> None:
        self.items.append(Send(role, identity, message))

    def trace(self, record: records.Record | records.PeerFact) -> None:
        """Queue one trace line, encoded now (the record is not kept)."""
        self.items.append(records.encode(record))

    def lines(self, *lines: bytes) -> None:
        """Queue trace lines formatted already (broker.tracing)."""
        self.items.extend(lines)

    def journal(self, entry: QueuedEmail) -> None:
        """Queue a journal record: the loop writes and fsyncs it before any Accepted leaves."""
        self.items.append(entry)

    def take(self) -> list[Effect]:
        """Everything queued since the last take, in order; the outbox is empty after."""
        taken, self.items = self.items, []
        return taken
