"""The life of each email in the broker: queued, held by a worker, sent again, escalated,
finished with its one outcome.

Data: each accepted email's Flight (the stage that holds it, who holds it, what it was
sent), its stage deadline, the raw bytes the broker holds for it, and who awaits it.
Readers: the Router (results move a flight on), broker.dispatch (takes work from the
lanes), broker.intake (admits, awaits, decides), broker.unserved (ends the unserved).
Rationale: every email reaches exactly one recorded outcome. Delivery is at least once: a
hand-off is acknowledged by its result, and work a worker lost or held past its stage
deadline is sent again, up to `max_attempts`, then ends `failed`. Each hand-off bumps the
flight's epoch, so an old deadline cannot fail a later stage. A redelivery waits in its
own lane (`retry`), never ahead of ordinary work: a poison email that kills each worker it
reaches must not make ordinary mail wait for every one of its deliveries.
"""

from __future__ import annotations

import collections
import heapq
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field

from airlock.records import OutcomeLine, Recovered, Redelivery, utc_now
from airlock.settings import Settings
from airlock.wire import Decision, Outcome, Passed, Read, Reading, Result
from broker.journal import QueuedEmail
from broker.outbox import Outbox
from broker.recent import Recent

# What a worker is sent: each names the email it carries (message_id).
Work = Read | Reading | Passed | Decision


@dataclass
class Flight:
    message_id: str
    stage: str  # the role that holds it now: reader, validator or actor; or escalated
    started: float
    sender: str = ""  # what the intake vouched for; given to the actor, never to the reader
    sender_proof: str = "none"  # what proved it (airlock/senders.py); with the sender, to the actor
    worker: bytes | None = None
    epoch: int = 0  # bumps at each hand-off, so an old deadline cannot fail a later stage
    waiters: list[tuple[bytes, int]] = field(default_factory=list)
    message: Work | None = None  # what the current stage was (or will be) sent, to send again
    attempts: int = 0  # deliveries to the current stage
    waiting_for: str = ""  # why it waits for a person (the actor's reason), told to whoever awaits it
    held_bytes: int = 0  # raw email bytes the broker holds for it until a reader has read it
    retry_since: float = 0.0  # when it last joined the retry lane (see broker.dispatch)
    queued_at: float = 0.0  # when it last began to wait for a worker of its stage (see broker.unserved)


class Lifecycle:
    def __init__(self, settings: Settings, roles: Iterable[str], out: Outbox,
                 counters: collections.Counter[str], remember: int) -> None:
        self.settings = settings
        self.out, self.counters = out, counters
        self.flights: dict[str, Flight] = {}
        self.finished: Recent[tuple[Outcome, str]] = Recent(remember)  # to answer an Await later
        roles = tuple(roles)
        self.pending: dict[str, collections.deque[Work]] = {r: collections.deque() for r in roles}
        # Redeliveries wait here, apart from ordinary work, never ahead of it (see broker.dispatch).
        self.retry: dict[str, collections.deque[Work]] = {r: collections.deque() for r in roles}
        self.queued_bytes = 0  # the sum of every flight's held_bytes
        self.waiting: collections.Counter[bytes] = collections.Counter()  # Await waiters per client
        self.deadline_s = {"reader": settings.read_deadline_s, "validator": settings.validate_deadline_s,
                           "actor": settings.act_deadline_s}
        self._deadlines: list[tuple[float, str, int]] = []

    # --- bytes held ------------------------------------------------------------------------

    def hold(self, flight: Flight, size: int) -> None:
        self.queued_bytes += size - flight.held_bytes
        flight.held_bytes = size

    def has_room(self, size: int) -> bool:
        """Whether `size` more raw bytes fit under queue_max_bytes (one email always fits an
        empty queue, so a limit below max_email_bytes cannot wedge it)."""
        return self.queued_bytes == 0 or self.queued_bytes + size <= self.settings.queue_max_bytes

    # --- moving on ---------------------------------------------------------------------------

    def to_reader(self, flight: Flight, email: Read) -> None:
        """A new email, its journal record queued: it waits for a reader, its raw bytes held."""
        flight.message = email
        self.hold(flight, len(email.raw))
        self.pending["reader"].append(email)

    def hand_off(self, flight: Flight, stage: str, message: Work, now: float) -> None:
        flight.stage, flight.worker, flight.message, flight.attempts = stage, None, message, 0
        flight.queued_at = now
        flight.epoch += 1
        self.hold(flight, 0)  # past the reader, the broker holds a short Reading, not the raw email
        self.pending[stage].append(message)

    def delivered(self, flight: Flight, stage: str, identity: bytes, now: float) -> None:
        """A worker took it: its stage deadline starts now."""
        flight.worker = identity
        flight.epoch += 1
        flight.attempts += 1
        heapq.heappush(self._deadlines, (now + self.deadline_s[stage], flight.message_id, flight.epoch))

    def next_deadline(self) -> float | None:
        return self._deadlines[0][0] if self._deadlines else None

    def missed_deadlines(self, now: float) -> None:
        """Send again what a worker held past its stage deadline (the epoch tells a deadline
        that still counts from one a later hand-off left behind)."""
        while self._deadlines and self._deadlines[0][0] <= now:
            _, message_id, epoch = heapq.heappop(self._deadlines)
            flight = self.flights.get(message_id)
            if flight is not None and flight.epoch == epoch:
                self.redeliver(flight, f"no answer from the {flight.stage} in time", now)

    def redeliver(self, flight: Flight, why: str, now: float, counted: bool = True) -> None:
        """Send it again, up to max_attempts deliveries. Not `counted`: that delivery says
        nothing against the email (it was never sent, or its worker is alive and reconnected),
        so it is not one of them."""
        if not counted:
            flight.attempts = max(0, flight.attempts - 1)
        if flight.attempts >= self.settings.max_attempts:
            self.finish(flight, "failed", f"{why}; gave up after {flight.attempts} deliveries", now)
            return
        self.counters[f"redelivered.{flight.stage}"] += 1
        self.out.trace(Redelivery(utc_now(), flight.message_id, "broker", to=flight.stage, reason=why,
                                  attempt=flight.attempts + 1))
        flight.worker = None
        flight.epoch += 1  # the old deadline and the old holder's answer no longer count
        # Its own lane, not the front of the queue: a poison email that kills each worker it
        # reaches must not make ordinary mail wait for every one of its deliveries.
        flight.retry_since = flight.queued_at = now
        assert flight.message is not None, "a flight a worker held was sent its message first (delivered)"
        self.retry[flight.stage].append(flight.message)

    # --- ends ---------------------------------------------------------------------------

    def escalate(self, flight: Flight, reason: str, now: float) -> None:
        """Record `escalated` and park the email until a person decides (no deadline)."""
        flight.stage, flight.worker, flight.waiting_for = "escalated", None, reason
        flight.epoch += 1
        self.counters["outcome.escalated"] += 1
        self.out.trace(OutcomeLine(utc_now(), flight.message_id, "broker", outcome="escalated", reason=reason,
                                   ended_at="actor", final=False, ms=round((now - flight.started) * 1000, 3)))
        self._tell_waiters(flight, "escalated", reason)
        flight.waiters.clear()

    def finish(self, flight: Flight, outcome: Outcome, reason: str, now: float, rule: str = "",
               no_worker_s: float | None = None) -> None:
        """The email's one final outcome: traced, remembered for Await, told to its waiters.
        `rule`: the rule that rejected it, when one did; `no_worker_s`: how long it waited
        for a worker of its stage, when none came (broker.unserved)."""
        del self.flights[flight.message_id]
        self.hold(flight, 0)
        self.finished.add(flight.message_id, (outcome, reason))
        self.counters[f"outcome.{outcome}"] += 1
        self.out.trace(OutcomeLine(utc_now(), flight.message_id, "broker", outcome=outcome, reason=reason,
                                   ended_at=flight.stage, final=True, ms=round((now - flight.started) * 1000, 3),
                                   rule=rule, no_worker_s=no_worker_s))
        self._tell_waiters(flight, outcome, reason)

    def _tell_waiters(self, flight: Flight, outcome: Outcome, reason: str) -> None:
        """Each client awaiting `flight` hears `outcome`, and waits on one email fewer."""
        for identity, _ in flight.waiters:
            if self.waiting[identity] > 1:
                self.waiting[identity] -= 1
            else:
                self.waiting.pop(identity, None)
            self.out.send("intake", identity, Result(message_id=flight.message_id, outcome=outcome, reason=reason))

    # --- what an earlier broker left (broker.recovery) -----------------------------------------

    def recover(self, entry: QueuedEmail, now: float) -> None:
        """Queue a journalled email that an earlier broker accepted but never finished."""
        deferred = self.flights.get(entry.message_id)  # see defer: its waiters stay
        flight = Flight(entry.message_id, "reader", now, sender=entry.sender, sender_proof=entry.sender_proof,
                        queued_at=now)
        if deferred is not None:
            flight.waiters, flight.started = deferred.waiters, deferred.started
        self.flights[entry.message_id] = flight
        self.out.trace(Recovered(utc_now(), entry.message_id, "broker", origin=entry.origin, bytes=len(entry.raw),
                                 waited_on_disk=deferred is not None))
        self.to_reader(flight, Read(message_id=entry.message_id, raw=entry.raw, format=entry.format))

    def defer(self, message_id: str, now: float) -> None:
        """A journalled email that does not fit under queue_max_bytes yet: known (an Await
        on it waits), but its raw email stays on disk until recover() is called with it."""
        self.flights[message_id] = Flight(message_id, "reader", now, queued_at=now)

    def still_escalated(self, message_id: str, now: float) -> None:
        """An email an earlier broker left waiting for a decision keeps waiting here."""
        self.flights[message_id] = Flight(message_id, "escalated", now)

    def abandon(self, message_id: str, reason: str) -> None:
        """Give an email a previous broker accepted but never finished its one outcome."""
        self.counters["outcome.failed"] += 1
        self.out.trace(OutcomeLine(utc_now(), message_id, "broker", outcome="failed", reason=reason, ended_at="broker"))

    def end_failed(self, message_ids: Collection[str], reason: str, now: float) -> None:
        """End `failed` each of these the broker still holds (see Router.end_failed)."""
        for message_id in message_ids:
            flight = self.flights.get(message_id)
            if flight is not None:
                self.finish(flight, "failed", reason, now)
