"""The intake protocol: what a client may ask the broker, and the one answer each gets.

Data: Submit (an email to keep), Await (ids to hear the outcome of), Decide (a person's
decision on an escalated email), Ping (a Status) from the intake endpoint, with the CURVE
key the authenticator proved each came with.
Readers: the CLI, the SMTP intake, the supervisor and the page (airlock.wire's intake side).
Rationale: every answer is typed (Accepted, Result, Refused with a code, Status) and every
client-driven cost is bounded before anything is kept: the raw bytes waiting for a reader
(`queue_max_bytes`, code queue_full), the ids of one Await (`await_max_ids`) and the ids
one client waits on (`await_max_waiters`). A decision is taken only from a person's own
key and only in that person's name; a sender proof only from the SMTP intake's key.
"""

from __future__ import annotations

import collections
from collections.abc import Collection

from airlock.records import DecisionRefused, DecisionTaken, Received, Violation, utc_now
from airlock.settings import Settings
from airlock.wire import Accepted, Await, Decide, Decision, Ping, Read, Refused, Result, Status, Submit
from broker.journal import QueuedEmail
from broker.lifecycle import Flight, Lifecycle
from broker.outbox import Outbox
from broker.storage import refusal
from broker.unserved import Unserved
from broker.workers import Workers


class Intake:
    def __init__(self, settings: Settings, lifecycle: Lifecycle, workers: Workers, unserved: Unserved,
                 out: Outbox, counters: collections.Counter[str], prefix: str, max_queued: int,
                 approvers: dict[str, str], smtp_keys: Collection[str]) -> None:
        self.settings, self.lifecycle, self.workers, self.unserved = settings, lifecycle, workers, unserved
        self.out, self.counters = out, counters
        self.approvers, self.smtp_keys = approvers, frozenset(smtp_keys)
        self._prefix, self._counter = prefix, 0  # ids are <prefix>-<counter>
        self.max_queued = max_queued  # emails waiting for a reader; past this, Refused queue_full
        # Why the broker cannot keep an email now ("" while it can: broker.storage): each
        # Submit meanwhile is refused, code disk_full, before it gets an id.
        self.disk_full = ""

    def submit(self, role: str, identity: bytes, message: Submit, now: float, key: str = "") -> None:
        settings, lifecycle = self.settings, self.lifecycle
        if self.disk_full:
            self.counters["refused.disk_full"] += 1
            self.out.send(role, identity, refusal(message.ref, self.disk_full))
            return
        if len(lifecycle.pending["reader"]) >= self.max_queued or not lifecycle.has_room(
                min(len(message.raw), settings.max_email_bytes)):
            self.counters["refused.queue_full"] += 1
            self.out.send(role, identity, Refused(
                ref=message.ref, code="queue_full",
                reason=f"queue full ({lifecycle.queued_bytes} bytes waiting for a reader, limit "
                       f"{settings.queue_max_bytes}, AIRLOCK_QUEUE_MAX_BYTES); retry later"))
            return
        message_id = self._next_id()
        proof = message.sender_proof if self._vouches(key, message) else "none"
        flight = Flight(message_id, "reader", now, sender=message.sender, sender_proof=proof, queued_at=now)
        lifecycle.flights[message_id] = flight
        self.out.trace(Received(utc_now(), message_id, "broker", origin=message.origin, format=message.format,
                                bytes=len(message.raw), sender=message.sender, sender_proof=proof))
        if proof != message.sender_proof:  # the claim itself is traced, under the email's id
            self.counters[f"violation.{role}"] += 1
            who = ("an unauthenticated client (authentication is off)" if not key
                   else "a key other than the SMTP intake's")
            self.out.trace(Violation(
                utc_now(), message_id, "broker", endpoint=role, kind="sender_proof",
                reason=f"{who} claimed sender_proof {message.sender_proof!r}; only the SMTP intake's key "
                       "may vouch for a sender, so it is recorded as 'none'"))
        if len(message.raw) > settings.max_email_bytes:
            reason = f"email is {len(message.raw)} bytes, over the {settings.max_email_bytes}-byte limit"
            self.out.send(role, identity, Accepted(ref=message.ref, message_id=message_id))
            lifecycle.finish(flight, "rejected", reason, now, rule="intake.too_large")
            return
        # The journal entry is queued before the Accepted: the loop fsyncs it before sending.
        self.out.journal(QueuedEmail(message_id, message.raw, message.format, message.origin, message.sender, proof))
        self.out.send(role, identity, Accepted(ref=message.ref, message_id=message_id))
        lifecycle.to_reader(flight, Read(message_id=message_id, raw=message.raw, format=message.format))

    def _next_id(self) -> str:
        """A new id. The boot number is one no start on this data dir took (broker.ids), so
        none repeats; an id this broker still knows (in flight, or recently finished) is
        skipped all the same, so a new email never takes the place of another."""
        while True:
            self._counter += 1
            message_id = f"{self._prefix}-{self._counter}"
            if message_id not in self.lifecycle.flights and message_id not in self.lifecycle.finished:
                return message_id

    def _vouches(self, key: str, message: Submit) -> bool:
        """Whether the key a Submit came with may vouch for its sender_proof.

        Data: the Submit's sender_proof and the CURVE key the authenticator proved it came with.
        Readers: the actor, which lets only a proven sender corroborate a record.
        Rationale: the intake endpoint takes the CLI's, the supervisor's and the page's keys
        too, and none of them checks a signature; a proof is worth only the key behind it,
        so it is kept from the SMTP intake's key alone. Another's claim is recorded as "none"
        (not refused: the email still gets its one outcome, as an unverified sender's)."""
        return message.sender_proof == "none" or key in self.smtp_keys

    def await_(self, role: str, identity: bytes, message: Await, now: float) -> None:
        # Data: ids from a client. Rationale: each id may become a waiter and a reply, so a
        # few frames of 250,000 ids each made 2 million of both; both are bounded here, the
        # whole request refused with one typed answer before any waiter is made.
        limit = self.settings.await_max_ids
        if len(message.ids) > limit:
            self.out.send(role, identity, Refused(
                ref=message.ref, code="too_many_ids",
                reason=f"an Await may name at most {limit} ids (AIRLOCK_AWAIT_MAX_IDS), this one named "
                       f"{len(message.ids)}"))
            return
        flights, waiting = self.lifecycle.flights, self.lifecycle.waiting
        ids = list(dict.fromkeys(message.ids))  # the same id twice is one waiter and one answer
        new = sum(1 for i in ids if i in flights and flights[i].stage != "escalated"
                  and not any(w == identity for w, _ in flights[i].waiters))
        cap = self.settings.await_max_waiters
        if waiting[identity] + new > cap:
            self.out.send(role, identity, Refused(
                ref=message.ref, code="too_many_waiters",
                reason=f"this client already waits on {waiting[identity]} emails; at most {cap} "
                       f"(AIRLOCK_AWAIT_MAX_WAITERS): await fewer at a time"))
            return
        for message_id in ids:
            if (remembered := self.lifecycle.finished.get(message_id)) is not None:
                outcome, reason = remembered
                self.out.send(role, identity, Result(message_id=message_id, outcome=outcome, reason=reason))
            elif message_id in flights and flights[message_id].stage == "escalated":
                reason = flights[message_id].waiting_for or "waiting for a person's decision"
                self.out.send(role, identity, Result(message_id=message_id, outcome="escalated", reason=reason))
            elif message_id in flights:
                waiters = flights[message_id].waiters
                if not any(w == identity for w, _ in waiters):
                    waiters.append((identity, message.ref))
                    waiting[identity] += 1
            else:
                self.out.send(role, identity, Refused(ref=message.ref, reason=f"unknown message id {message_id}",
                                                      message_id=message_id, code="unknown_id"))

    def decide(self, role: str, identity: bytes, message: Decide, now: float, key: str) -> None:
        """A decision counts only when its sender proved, by key, to be the person it names.
        Data: the Decide, the key the authenticator proved, the people's keys.
        Rationale: `by` is a string anyone on the intake endpoint could write; the intake's
        and the page's keys belong to services, not to a person, so they never decide."""
        person = self.approvers.get(key)
        if person is None or person != message.by:
            reason = (f"this key is {person}'s, not {message.by}'s" if person is not None else
                      "a decision must be sent with the approver's own key (airlock keys --person NAME); "
                      "a service's key cannot decide")
            self.counters["decision_refused"] += 1
            self.out.trace(DecisionRefused(utc_now(), message.message_id, "broker", layer="authorization",
                                           claimed_by=message.by, role=message.role, reason=reason))
            self.out.send(role, identity, Refused(ref=message.ref, reason=reason))
            return
        flight = self.lifecycle.flights.get(message.message_id)
        if flight is None or flight.stage != "escalated":
            self.out.send(role, identity, Refused(ref=message.ref, code="not_escalated",
                                                  reason=f"{message.message_id} is not waiting for a decision"))
            return
        self.out.trace(DecisionTaken(utc_now(), message.message_id, "broker", layer="authorization",
                                     approve=message.approve, role=message.role, by=person, key=key,
                                     proven="CURVE key"))
        self.out.send(role, identity, Accepted(ref=message.ref, message_id=message.message_id))
        self.lifecycle.hand_off(flight, "actor", Decision(message_id=message.message_id, approve=message.approve,
                                                          role=message.role, by=person, key=key), now)

    def ping(self, role: str, identity: bytes, message: Ping, now: float) -> None:
        self.out.send(role, identity, Status(
            ref=message.ref, workers=self.workers.counts(), queued=len(self.lifecycle.pending["reader"]),
            in_flight=len(self.lifecycle.flights), counters=dict(self.counters),
            waiting=self.unserved.waiting(now)))
