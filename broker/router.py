"""The broker's logic: where each message may go, and the one outcome of each email.

`Router.handle(role, identity, message, now)` is pure bookkeeping: it returns effects
(messages to send, trace lines to write) and never touches a socket. The rules:

- Email -> a reader, Reading -> the validator, Passed -> the actor; nothing else moves.
  What a role may send is fixed by its endpoint's decoder (wire.INBOUND); anything else
  arrives here as a Violation and is recorded and dropped.
- Work is pulled, not pushed: a worker's Hello grants credit, each result returns one, and
  the broker never sends a worker more than its credit. So a ROUTER's high-water mark is
  never what limits a queue, and nothing is dropped there.
- Every accepted email gets an id, is journalled (the loop fsyncs the journal before any
  Accepted leaves), and gets exactly one final `outcome` line.
- Delivery is at least once: a hand-off is acknowledged by its result. Work held by a
  worker that goes silent (no heartbeat for `liveness` intervals) or that misses its stage
  deadline is sent again, to any worker of that role, up to `max_attempts`; then the email
  ends `failed`. A late or duplicate answer is recorded as `late_result` and changes nothing
  (no verdict or answer line a page could read), and the actor's idempotency keys make a
  redelivered step a replay, not a second side effect.
- A redelivered email may be what killed its worker (a memory bomb): it waits in its own
  lane, goes alone to a worker holding nothing, and such suspects hold at most half of a
  role's workers, so ordinary mail never waits behind them (see _dispatch).
- No email waits for ever for a stage nobody serves: one that has waited
  `no_worker_wait_s` (AIRLOCK_NO_WORKER_WAIT_S) for a stage with no worker connected, or
  none heard from (a paused one), ends `failed`, saying so; while a worker of the stage is
  heard from, however busy, deadlines judge what it holds and the rest waits its turn.
  An escalated email waits for a person, not a worker, and is never ended so. Status
  shows what waits that way, per stage, and what waits to be sent again (see _waiting).
- Memory is bounded in bytes and counts: the raw emails held before a reader has read them
  (`queue_max_bytes`; past it intake hears Refused code queue_full), the ids of one Await
  (`await_max_ids`) and the ids one client waits on (`await_max_waiters`).
- A worker's own Event is written as `worker.<name>`, its name checked and its details
  escaped, so no worker can write a line that reads as the broker's.
- A decision on an escalated email is taken only from a person's own key (`approvers`:
  public key -> name) and only in that person's name; a service's key never decides.
- A Submit's sender_proof is kept only when it comes with the SMTP intake's key
  (`smtp_keys`): the CLI's, the supervisor's and the page's keys share the intake endpoint
  but check no signature, so a proof they claim is recorded as "none", with a violation.
"""

from __future__ import annotations

import collections
import heapq
import time
import typing
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

import msgspec

from airlock import trace
from airlock.settings import Settings
from airlock.wire import (
    INBOUND, Accepted, Await, Decide, Decision, Done, Email, Event, Heartbeat, Hello, Malformed, Message, Notice,
    Outcome, Passed, Ping, Reading, Refused, Rejected, Result, Status, Submit, Unreadable, Violation, Waiting,
)
from broker import events
from broker.journal import Entry
from broker.recent import Recent

MAX_QUEUED = 100_000  # emails waiting for a reader; past this, intake answers Refused
MAX_REMEMBERED = 100_000  # at least this many finished outcomes kept to answer Await (broker.recent)
TRACE_TEXT_LIMIT = 2000  # characters of model answer kept in the trace
PARSE_RULES = (".empty", ".length", ".syntax", ".pattern")  # text that is not even the right shape


@dataclass(frozen=True)
class Send:
    role: str
    identity: bytes
    message: Message


@dataclass
class Worker:
    identity: bytes
    credit: int
    last_seen: float = 0.0
    assigned: set[str] = field(default_factory=set)
    suspect: str | None = None  # a redelivered email it holds alone (see _dispatch_suspects)


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
    message: Message | None = None  # what the current stage was (or will be) sent, to send again
    attempts: int = 0  # deliveries to the current stage
    waiting_for: str = ""  # why it waits for a person (the actor's reason), told to whoever awaits it
    held_bytes: int = 0  # raw email bytes the broker holds for it until a reader has read it
    retry_since: float = 0.0  # when it last joined the retry lane (see _dispatch_suspects)
    queued_at: float = 0.0  # when it last began to wait for a worker of its stage (see _end_unserved)


class Router:
    def __init__(self, settings: Settings, boot: int | None = None, approvers: dict[str, str] | None = None,
                 smtp_keys: Collection[str] = ()) -> None:
        self.settings = settings
        # The SMTP intake's public key(s) (z85, keys.smtp_keys): only a Submit proven to come
        # with one keeps its sender_proof; from any other key a proof is recorded as "none".
        self.smtp_keys = frozenset(smtp_keys)
        # Whose each person's key is (z85 public key -> name, keys.approvers): a decision is
        # taken only from one of these keys, and only in that person's name.
        self.approvers = dict(approvers or {})
        # Ids are <boot ms in hex>-<counter>: unique across broker restarts on this clock.
        self._prefix = f"{boot if boot is not None else time.time_ns() // 1_000_000:x}"
        self._counter = 0
        self.flights: dict[str, Flight] = {}
        self.finished: Recent[tuple[Outcome, str]] = Recent(MAX_REMEMBERED)
        self.workers: dict[str, dict[bytes, Worker]] = {"reader": {}, "validator": {}, "actor": {}}
        self._ready: dict[str, collections.deque[bytes]] = {r: collections.deque() for r in self.workers}
        self._pending: dict[str, collections.deque[Message]] = {r: collections.deque() for r in self.workers}
        # Redeliveries wait here, apart from ordinary work, never ahead of it (see _dispatch).
        self._retry: dict[str, collections.deque[Message]] = {r: collections.deque() for r in self.workers}
        # The worker of each role that takes no ordinary work until it holds nothing, for a suspect.
        self._draining: dict[str, bytes | None] = {r: None for r in self.workers}
        self.queued_bytes = 0  # the sum of every flight's held_bytes
        # Why the broker cannot keep an email now ("" while it can: broker.storage): each
        # Submit meanwhile is refused, code disk_full, before it gets an id.
        self.disk_full = ""
        self.waiting: collections.Counter[bytes] = collections.Counter()  # Await waiters per client
        self._deadlines: list[tuple[float, str, int]] = []
        # When each role's last worker left (0.0: none yet, so an email's own queued_at is
        # the later), and when _end_unserved looks next (see _unserved_since).
        self._left_at: dict[str, float] = {r: 0.0 for r in self.workers}
        self._next_unserved_check = 0.0
        self.counters: collections.Counter[str] = collections.Counter()
        self._deadline_s = {
            "reader": settings.read_deadline_s,
            "validator": settings.validate_deadline_s,
            "actor": settings.act_deadline_s,
        }
        self.out: list[Send | bytes | Entry] = []
        self._last_heartbeat = 0.0
        self._handlers = {
            Submit: self._on_submit, Await: self._on_await, Decide: self._on_decide, Ping: self._on_ping,
            Notice: self._on_notice, Reading: self._on_reading, Unreadable: self._on_unreadable,
            Passed: self._on_passed, Rejected: self._on_rejected, Done: self._on_done,
        }
        # Every message a peer may send has its handler: checked here, at start, not on the
        # first such message (Hello and Event are handled in handle() itself).
        missing = {kind for union in INBOUND.values() for kind in typing.get_args(union)} - {Hello, Event}
        missing -= self._handlers.keys()
        if missing:
            raise RuntimeError(f"the broker has no handler for {sorted(kind.__name__ for kind in missing)}")

    # --- entry points -------------------------------------------------------------------

    def handle(self, role: str, identity: bytes, message: Message | Malformed | Violation,
               now: float, key: str = "") -> list[Send | bytes | Entry]:
        """`key`: the sender's CURVE public key as the authenticator proved it ("" unknown)."""
        worker = self.workers.get(role, {}).get(identity)
        if worker is not None:
            worker.last_seen = now  # any frame is a sign of life
        match message:
            case Malformed(reason=reason, size=size):
                self.counters[f"malformed.{role}"] += 1
                self._trace("broker", "malformed_frame", None, endpoint=role, reason=reason, bytes=size)
            case Violation(kind=kind, reason=reason):
                self.counters[f"violation.{role}"] += 1
                self._trace("broker", "violation", None, endpoint=role, kind=kind, reason=reason)
            case Hello(credit=credit):
                self._hello(role, identity, credit, now)
            case Submit() | Notice() if key in self.approvers:
                self.counters[f"violation.{role}"] += 1
                self._trace("broker", "violation", None, endpoint=role, kind=type(message).__name__.lower(),
                            reason=f"{self.approvers[key]}'s key may decide, await and ask status, nothing else")
            case Decide():
                self._on_decide(role, identity, message, now, key)
            case Submit():
                self._on_submit(role, identity, message, now, key)
            case Event(event=event) | Notice(event=event) if (refusal := events.refusal(event, role, isinstance(message, Event))):
                self.counters[f"violation.{role}"] += 1
                self._trace("broker", "violation", None, endpoint=role, kind=type(message).__name__.lower(),
                            reason=refusal)
            case Event(event=event, message_id=message_id, detail=detail):
                self._trace(role, events.WORKER_PREFIX + event, message_id, events.escaped(detail))
            case _:
                self._handlers[type(message)](role, identity, message, now)
        self._dispatch(now)
        return self._take()

    def tick(self, now: float) -> list[Send | bytes | Entry]:
        """Heartbeats out, silent workers buried, missed deadlines redelivered, queues served."""
        interval = self.settings.heartbeat_interval_s
        if now - self._last_heartbeat >= interval:
            self._last_heartbeat = now
            for role, workers in self.workers.items():
                self.out.extend(Send(role, identity, Heartbeat()) for identity in workers)
        # A silent idle worker is gone. A silent busy one may be inside a slow model call:
        # its stage deadline judges it, and a crashed one is caught sooner, when the next
        # heartbeat to it finds its connection closed.
        silent_after = interval * self.settings.heartbeat_liveness
        for role, workers in self.workers.items():
            for identity in [i for i, w in workers.items() if now - w.last_seen > silent_after and not w.assigned]:
                self._bury(role, identity, f"no heartbeat for {silent_after:.1f} s", now)
        while self._deadlines and self._deadlines[0][0] <= now:
            _, message_id, epoch = heapq.heappop(self._deadlines)
            flight = self.flights.get(message_id)
            if flight is not None and flight.epoch == epoch:
                self._redeliver(flight, f"no answer from the {flight.stage} in time", now)
        self._end_unserved(now)
        self._dispatch(now)
        return self._take()

    def recover(self, entry: Entry, now: float) -> None:
        """Queue a journalled email that an earlier broker accepted but never finished."""
        deferred = self.flights.get(entry.message_id)  # see defer: its waiters stay
        flight = Flight(entry.message_id, "reader", now, sender=entry.sender, sender_proof=entry.sender_proof)
        if deferred is not None:
            flight.waiters, flight.started = deferred.waiters, deferred.started
        self.flights[entry.message_id] = flight
        self._trace("broker", "recovered", entry.message_id, origin=entry.origin, bytes=len(entry.raw),
                    **({"waited_on_disk": True} if deferred is not None else {}))
        self._hand_off(flight, "reader", Email(message_id=entry.message_id, raw=entry.raw, format=entry.format), now)
        self._hold(flight, len(entry.raw))

    def defer(self, message_id: str, now: float) -> None:
        """A journalled email that does not fit under queue_max_bytes yet: known (an Await
        on it waits), but its raw email stays on disk until recover() is called with it."""
        self.flights[message_id] = Flight(message_id, "reader", now, queued_at=now)

    def has_room(self, size: int) -> bool:
        """Whether `size` more raw bytes fit under queue_max_bytes (one email always fits an
        empty queue, so a limit below max_email_bytes cannot wedge it)."""
        return self.queued_bytes == 0 or self.queued_bytes + size <= self.settings.queue_max_bytes

    def undeliverable(self, send: Send, now: float, count: int = 1) -> list[Send | bytes | Entry]:
        """The socket refused a message (peer gone): forget the peer, send its work again.
        `count`: how many messages to that client were refused with it (one line for all)."""
        if send.role == "intake":
            self._trace("broker", "client_gone", getattr(send.message, "message_id", None), messages=count)
            self.waiting.pop(send.identity, None)  # its waiters will find no one: stop counting them
            return self._take()
        self._bury(send.role, send.identity, "its connection is gone", now)
        self._dispatch(now)
        return self._take()

    def _bury(self, role: str, identity: bytes, why: str, now: float) -> None:
        worker = self.workers[role].pop(identity, None)
        if worker is None:
            return
        if not self.workers[role]:
            self._left_at[role] = now
        self.counters[f"worker_lost.{role}"] += 1
        self._trace("broker", "worker_lost", None, role=role, reason=why, held=len(worker.assigned))
        for message_id in sorted(worker.assigned):
            flight = self.flights.get(message_id)
            if flight is not None and flight.stage == role and flight.worker == identity:
                self._redeliver(flight, f"the {role} holding it was lost ({why})", now)

    def _redeliver(self, flight: Flight, why: str, now: float) -> None:
        if flight.attempts >= self.settings.max_attempts:
            self._finish(flight, "failed", f"{why}; gave up after {flight.attempts} deliveries", now)
            return
        self.counters[f"redelivered.{flight.stage}"] += 1
        self._trace("broker", "redelivery", flight.message_id, to=flight.stage, reason=why,
                    attempt=flight.attempts + 1)
        flight.worker = None
        flight.epoch += 1  # the old deadline and the old holder's answer no longer count
        # Its own lane, not the front of the queue: a poison email that kills each worker it
        # reaches must not make ordinary mail wait for every one of its deliveries.
        flight.retry_since = flight.queued_at = now
        self._retry[flight.stage].append(flight.message)

    def still_escalated(self, message_id: str, now: float) -> None:
        """An email an earlier broker left waiting for a decision keeps waiting here."""
        self.flights[message_id] = Flight(message_id, "escalated", now)

    def abandon(self, message_id: str, reason: str) -> list[Send | bytes | Entry]:
        """Give an email a previous broker accepted but never finished its one outcome."""
        self.counters["outcome.failed"] += 1
        self._trace("broker", "outcome", message_id, outcome="failed", reason=reason, ended_at="broker")
        return self._take()

    def end_failed(self, message_ids: Collection[str], reason: str, now: float) -> list[Send | bytes | Entry]:
        """Emails the broker holds and cannot carry on: received this turn with journal
        records that never reached the disk (their client hears Refused disk_full: the loop
        swaps the Accepted), or deferred ones whose record is unreadable now. Each ends
        here, `failed`, and a reader's late answer for it changes nothing."""
        for message_id in message_ids:
            flight = self.flights.get(message_id)
            if flight is not None:
                self._finish(flight, "failed", reason, now)
        return self._take()

    def next_deadline(self) -> float | None:
        return self._deadlines[0][0] if self._deadlines else None

    # --- intake ---------------------------------------------------------------------------

    def _on_submit(self, role: str, identity: bytes, message: Submit, now: float, key: str = "") -> None:
        if self.disk_full:
            self.counters["refused.disk_full"] += 1
            self.out.append(Send(role, identity, Refused(
                ref=message.ref, code="disk_full",
                reason=f"not accepted: disk full ({self.disk_full}); nothing was kept, send it again later")))
            return
        if len(self._pending["reader"]) >= MAX_QUEUED or not self.has_room(min(len(message.raw),
                                                                            self.settings.max_email_bytes)):
            self.counters["refused.queue_full"] += 1
            self.out.append(Send(role, identity, Refused(
                ref=message.ref, code="queue_full",
                reason=f"queue full ({self.queued_bytes} bytes waiting for a reader, limit "
                       f"{self.settings.queue_max_bytes}, AIRLOCK_QUEUE_MAX_BYTES); retry later")))
            return
        self._counter += 1
        message_id = f"{self._prefix}-{self._counter}"
        proof = message.sender_proof if self._vouches(key, message) else "none"
        flight = Flight(message_id, "reader", now, sender=message.sender, sender_proof=proof, queued_at=now)
        self.flights[message_id] = flight
        self._trace("broker", "received", message_id, origin=message.origin, format=message.format,
                    bytes=len(message.raw), sender=message.sender, sender_proof=proof)
        if proof != message.sender_proof:  # the claim itself is traced, under the email's id
            self.counters[f"violation.{role}"] += 1
            who = "an unauthenticated client (authentication is off)" if not key else "a key other than the SMTP intake's"
            self._trace("broker", "violation", message_id, endpoint=role, kind="sender_proof",
                        reason=f"{who} claimed sender_proof {message.sender_proof!r}; only the SMTP intake's key "
                               "may vouch for a sender, so it is recorded as 'none'")
        if len(message.raw) > self.settings.max_email_bytes:
            reason = f"email is {len(message.raw)} bytes, over the {self.settings.max_email_bytes}-byte limit"
            self.out.append(Send(role, identity, Accepted(ref=message.ref, message_id=message_id)))
            self._finish(flight, "rejected", reason, now, rule="intake.too_large")
            return
        # The journal entry is queued before the Accepted: the loop fsyncs it before sending.
        self.out.append(Entry(message_id, message.raw, message.format, message.origin, message.sender, proof))
        self.out.append(Send(role, identity, Accepted(ref=message.ref, message_id=message_id)))
        email = Email(message_id=message_id, raw=message.raw, format=message.format)
        flight.message = email
        self._hold(flight, len(message.raw))
        self._pending["reader"].append(email)

    def _vouches(self, key: str, message: Submit) -> bool:
        """Whether the key a Submit came with may vouch for its sender_proof.

        Data: the Submit's sender_proof and the CURVE key the authenticator proved it came with.
        Readers: the actor, which lets only a proven sender corroborate a record.
        Rationale: the intake endpoint takes the CLI's, the supervisor's and the page's keys
        too, and none of them checks a signature; a proof is worth only the key behind it,
        so it is kept from the SMTP intake's key alone. Another's claim is recorded as "none"
        (not refused: the email still gets its one outcome, as an unverified sender's)."""
        return message.sender_proof == "none" or key in self.smtp_keys

    def _on_await(self, role: str, identity: bytes, message: Await, now: float) -> None:
        # Data: ids from a client. Rationale: each id may become a waiter and a reply, so a
        # few frames of 250,000 ids each made 2 million of both; both are bounded here, the
        # whole request refused with one typed answer before any waiter is made.
        limit = self.settings.await_max_ids
        if len(message.ids) > limit:
            self.out.append(Send(role, identity, Refused(
                ref=message.ref, code="too_many_ids",
                reason=f"an Await may name at most {limit} ids (AIRLOCK_AWAIT_MAX_IDS), this one named "
                       f"{len(message.ids)}")))
            return
        ids = list(dict.fromkeys(message.ids))  # the same id twice is one waiter and one answer
        new = sum(1 for i in ids if i in self.flights and self.flights[i].stage != "escalated"
                  and not any(w == identity for w, _ in self.flights[i].waiters))
        cap = self.settings.await_max_waiters
        if self.waiting[identity] + new > cap:
            self.out.append(Send(role, identity, Refused(
                ref=message.ref, code="too_many_waiters",
                reason=f"this client already waits on {self.waiting[identity]} emails; at most {cap} "
                       f"(AIRLOCK_AWAIT_MAX_WAITERS): await fewer at a time")))
            return
        for message_id in ids:
            if (remembered := self.finished.get(message_id)) is not None:
                outcome, reason = remembered
                self.out.append(Send(role, identity, Result(message_id=message_id, outcome=outcome, reason=reason)))
            elif message_id in self.flights and self.flights[message_id].stage == "escalated":
                reason = self.flights[message_id].waiting_for or "waiting for a person's decision"
                self.out.append(Send(role, identity, Result(message_id=message_id, outcome="escalated",
                                                            reason=reason)))
            elif message_id in self.flights:
                waiters = self.flights[message_id].waiters
                if not any(w == identity for w, _ in waiters):
                    waiters.append((identity, message.ref))
                    self.waiting[identity] += 1
            else:
                self.out.append(Send(role, identity, Refused(ref=message.ref, reason=f"unknown message id {message_id}",
                                                            message_id=message_id, code="unknown_id")))

    def _on_decide(self, role: str, identity: bytes, message: Decide, now: float, key: str) -> None:
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
            self._trace("broker", "decision_refused", message.message_id, layer="authorization",
                        claimed_by=message.by, role=message.role, reason=reason)
            self.out.append(Send(role, identity, Refused(ref=message.ref, reason=reason)))
            return
        flight = self.flights.get(message.message_id)
        if flight is None or flight.stage != "escalated":
            self.out.append(Send(role, identity, Refused(ref=message.ref, code="not_escalated",
                                                         reason=f"{message.message_id} is not waiting for a decision")))
            return
        self._trace("broker", "decision", message.message_id, layer="authorization", approve=message.approve,
                    role=message.role, by=person, key=key, proven="CURVE key")
        self.out.append(Send(role, identity, Accepted(ref=message.ref, message_id=message.message_id)))
        self._hand_off(flight, "actor", Decision(message_id=message.message_id, approve=message.approve,
                                                 role=message.role, by=person, key=key), now)

    def _on_ping(self, role: str, identity: bytes, message: Ping, now: float) -> None:
        workers = {r: len(ws) for r, ws in self.workers.items()}
        self.out.append(Send(role, identity, Status(
            ref=message.ref, workers=workers, queued=len(self._pending["reader"]),
            in_flight=len(self.flights), counters=dict(self.counters), waiting=self._waiting(now))))

    def _waiting(self, now: float) -> dict[str, Waiting]:
        """Per stage, the emails no worker holds that are stuck: no worker of the stage is
        connected or heard from (_unserved_since), or they wait to be sent again. A stage with neither is left out, so
        while mail flows the Status carries none (wire.Status). One pass over the flights:
        a Ping is an operator's question, not a per-message cost."""
        found: dict[str, dict[str, float]] = {}
        since = {role: self._unserved_since(role, now) for role in self.workers}
        copies = self._copies_held()
        for flight in self.flights.values():
            if flight.worker is not None or flight.stage not in self.workers or flight.message is None:
                continue  # held, escalated, or still on disk (a recovery backlog, see defer)
            unserved = since[flight.stage] if flight.message_id not in copies else None
            if unserved is None and not flight.attempts:
                continue  # ordinary mail in the queue of a served stage
            counts = found.setdefault(flight.stage, collections.defaultdict(float))
            if unserved is not None:
                counts["no_worker"] += 1
                counts["no_worker_s"] = max(counts["no_worker_s"], now - max(unserved, flight.queued_at))
            if flight.attempts:
                counts["redelivery"] += 1
                counts["redelivery_s"] = max(counts["redelivery_s"], now - flight.retry_since)
        limit = self.settings.no_worker_wait_s
        return {stage: Waiting(no_worker=int(c["no_worker"]), no_worker_s=round(c["no_worker_s"], 3),
                               limit_s=limit if c["no_worker"] else 0.0, redelivery=int(c["redelivery"]),
                               redelivery_s=round(c["redelivery_s"], 3))
                for stage, c in sorted(found.items())}

    def _copies_held(self) -> set[str]:
        """Ids a worker still registered holds a delivery of, its deadline passed or not: a
        silent worker (paused) may still act on it when it runs again."""
        return {message_id for workers in self.workers.values() for worker in workers.values()
                for message_id in worker.assigned}

    def _unserved_since(self, role: str, now: float) -> float | None:
        """Since when no worker of `role` has been heard from: when its last one left, or
        the last frame of any, once that is older than heartbeat liveness (a worker that
        silent, holding work so never buried, is paused or hung: as good as gone). None
        while one is heard from. A worker in a slow call is silent too, but answers or
        says Hello well within AIRLOCK_NO_WORKER_WAIT_S, and that starts the wait again."""
        workers = self.workers[role]
        if not workers:
            return self._left_at[role]
        heard = max(w.last_seen for w in workers.values())
        silent_after = self.settings.heartbeat_interval_s * self.settings.heartbeat_liveness
        return heard if now - heard > silent_after else None

    def _end_unserved(self, now: float) -> None:
        """End `failed` each email that has waited no_worker_wait_s for a stage with no
        worker connected or heard from (_unserved_since).

        Data: the flights no worker holds, the roles with no worker heard from, the setting.
        Rationale: such an email has no deadline (a deadline starts when a worker takes
        it), so a killed actor that nothing restarts left emails with no outcome and no
        sign of one (issue 15). A stage with a worker heard from is never judged here: a
        busy worker's emails wait their turn and its deadlines judge what it holds. Nor
        is an email a registered worker still holds a delivery of, its deadline passed
        (_copies_held): ended now, it could still act when that worker runs again, after
        its outcome; it waits, shown, to be sent again. An escalated email waits for a
        person. One still on disk (a recovery backlog) is judged once read back. Looked
        at once a heartbeat interval at most, and not before the first email could be
        due, so a stage with no worker costs a pass over the flights only once one is
        (measured: under 50 ms a pass with 100,000 waiting)."""
        wait = self.settings.no_worker_wait_s
        if not wait or now < self._next_unserved_check:
            return
        self._next_unserved_check = now + self.settings.heartbeat_interval_s
        since = {role: self._unserved_since(role, now) for role in self.workers}
        unserved = {role: at for role, at in since.items() if at is not None}
        if not unserved:
            return
        # When the next email could be due: one at an unserved stage no sooner than its
        # stage's `since` plus the wait; one at a stage served now (heard from within
        # liveness) no sooner than `soonest`. Until then no pass over the flights is needed.
        soonest = now + wait - self.settings.heartbeat_interval_s * self.settings.heartbeat_liveness
        earliest = min(unserved.values()) + wait
        if now < earliest:
            self._next_unserved_check = max(self._next_unserved_check, min(earliest, soonest))
            return
        copies = self._copies_held()
        for flight in [f for f in self.flights.values() if f.stage in unserved and f.worker is None
                       and f.message is not None and f.message_id not in copies]:
            waited = now - max(unserved[flight.stage], flight.queued_at)
            if waited < wait:
                soonest = min(soonest, now + wait - waited)
                continue
            before = (f"; delivered {flight.attempts} times before (its {flight.stage} was lost or missed its "
                      "deadline)" if flight.attempts else "")
            self.counters[f"no_worker.{flight.stage}"] += 1
            self._finish(flight, "failed", f"no {flight.stage} was connected, or heard from, to take it for "
                                           f"{waited:.0f} s (AIRLOCK_NO_WORKER_WAIT_S is {wait:g} s){before}", now,
                         no_worker_s=round(waited, 3))
        self._next_unserved_check = max(self._next_unserved_check, soonest)

    def _on_notice(self, role: str, identity: bytes, message: Notice, now: float) -> None:
        self._trace("supervisor", message.event, None, events.escaped(message.detail))

    # --- results from workers -------------------------------------------------------------

    def _on_reading(self, role: str, identity: bytes, message: Reading, now: float) -> None:
        flight = self._result(role, identity, message.message_id, "model_answer")
        if flight is None:
            return  # late: the late_result line is all it writes (see _result)
        answer = message.answer
        self._trace("reader", "model_answer", message.message_id, message.notes, layer="model_output",
                    answer=answer[:TRACE_TEXT_LIMIT], answer_chars=len(answer),
                    source=message.source, truncated=message.truncated)
        self._hand_off(flight, "validator", msgspec.structs.replace(message, notes={}), now)

    def _on_unreadable(self, role: str, identity: bytes, message: Unreadable, now: float) -> None:
        flight = self._result(role, identity, message.message_id, "unreadable")
        if flight is None:
            return
        self._trace("reader", "unreadable", message.message_id, message.notes, layer="parser",
                    rule=message.rule, reason=message.reason)
        self._finish(flight, "rejected", message.reason, now, rule=message.rule)

    def _on_passed(self, role: str, identity: bytes, message: Passed, now: float) -> None:
        flight = self._result(role, identity, message.message_id, "verdict")
        if flight is None:
            return  # a late Passed may not put a verdict on a finished email's page
        self._trace("validator", "verdict", message.message_id, layer="validator", verdict="passed", value=message.value,
                    **_student(message.student))
        # The sender and its proof come from the intake, whatever the validator put there.
        self._hand_off(flight, "actor", msgspec.structs.replace(message, sender=flight.sender,
                                                                   sender_proof=flight.sender_proof), now)

    def _on_rejected(self, role: str, identity: bytes, message: Rejected, now: float) -> None:
        flight = self._result(role, identity, message.message_id, "verdict")
        if flight is None:
            return
        layer = "parser" if message.rule.endswith(PARSE_RULES) else "validator"
        self._trace("validator", "verdict", message.message_id, layer=layer, verdict="rejected",
                    rule=message.rule, reason=message.reason, **_student(message.student))
        self._finish(flight, "rejected", message.reason, now, rule=message.rule)

    def _on_done(self, role: str, identity: bytes, message: Done, now: float) -> None:
        # A late Done still records its calls: they ran (the call log has them), and the
        # page lists a call after an outcome as late. It changes no outcome.
        flight = self._result(role, identity, message.message_id, "done")
        # Each call line names the plan it ran under (see wire.Done), when the actor said it.
        ran_under: dict[str, Any] = {"task": message.task, "plan": message.plan} if message.plan else {}
        for call in message.calls:
            # A lab: `student` when this step's decision ran student code (absent otherwise).
            where = {"step": call.step, "server": call.server, "tool": call.tool, **_student(call.student)}
            self._trace("actor", "authorization", message.message_id, layer="authorization", **where,
                        key=call.key, decision=call.decision)
            if call.status in ("refused", "escalated"):
                continue
            self._trace("actor", "call", message.message_id, layer="execution", **where, args=call.args,
                        status=call.status, error=call.error, key=call.key, **ran_under)
            self._trace("actor", "observation", message.message_id, layer="observation", **where,
                        result=call.result)
        if flight is None:
            return
        if message.outcome == "escalated":
            self._escalate(flight, message.reason, now)
        else:
            self._finish(flight, message.outcome, message.reason, now)

    def _result(self, role: str, identity: bytes, message_id: str, event: str) -> Flight | None:
        """Return the flight this result moves on, or None (late, unknown or not assigned)."""
        worker = self.workers[role].get(identity)
        if worker is not None and message_id in worker.assigned:
            worker.assigned.discard(message_id)
            self._ready[role].append(identity)
            if worker.suspect == message_id:
                worker.suspect = None
        flight = self.flights.get(message_id)
        if flight is None or flight.stage != role or flight.worker != identity:
            self.counters[f"late.{role}"] += 1
            self._trace("broker", "late_result", message_id, endpoint=role, result=event)
            return None
        return flight

    # --- moving work ----------------------------------------------------------------------

    def _hello(self, role: str, identity: bytes, credit: int, now: float) -> None:
        if identity in self.workers[role]:
            return  # a heartbeat; its credit is already counted
        credit = max(1, min(credit, 10_000))
        self.workers[role][identity] = Worker(identity, credit, last_seen=now)
        self._ready[role].extend([identity] * credit)
        self._trace("broker", "worker_joined", None, role=role, credit=credit)

    def _hand_off(self, flight: Flight, stage: str, message: Message, now: float) -> None:
        flight.stage, flight.worker, flight.message, flight.attempts = stage, None, message, 0
        flight.queued_at = now
        flight.epoch += 1
        self._hold(flight, 0)  # past the reader, the broker holds a short Reading, not the raw email
        self._pending[stage].append(message)

    def _hold(self, flight: Flight, size: int) -> None:
        self.queued_bytes += size - flight.held_bytes
        flight.held_bytes = size

    def _dispatch(self, now: float) -> None:
        for role, pending in self._pending.items():
            ready, workers = self._ready[role], self.workers[role]
            if ready and (self._retry[role] or self._draining[role] is not None):
                self._dispatch_suspects(role, now)
            if not (pending and ready):
                continue  # the usual case, on every message: keep it cheap
            passed_over: list[bytes] = []
            while pending and ready:
                identity = ready.popleft()
                worker = workers.get(identity)
                if worker is None:
                    continue  # a token left by a worker that has gone
                flight = self.flights.get(pending[0].message_id)
                if flight is None or flight.stage != role:
                    pending.popleft()  # stale: that email moved on or ended meanwhile
                    ready.appendleft(identity)
                    continue
                if worker.suspect is not None or identity == self._draining[role]:
                    passed_over.append(identity)  # it holds a suspect, or empties for one
                    continue
                self._send_work(role, worker, pending.popleft(), flight, now)
            ready.extendleft(reversed(passed_over))

    def _dispatch_suspects(self, role: str, now: float) -> None:
        """Redelivered work, each alone to a worker holding nothing, which gets nothing more
        until it answers: one poisonous email then fails alone, not with a whole credit of
        others. Suspects hold at most half the role's workers that are alive now, rounded
        down, so the others keep serving ordinary mail while a poison email kills its way
        to `max_attempts`. A lone worker takes a suspect when no ordinary mail waits, or
        once the suspect has waited a stage deadline: under a steady flood it is not
        starved. If no worker is empty, the least busy stops taking ordinary work until it
        is (draining)."""
        retry, ready, workers = self._retry[role], self._ready[role], self.workers[role]
        holding = sum(1 for w in workers.values() if w.suspect is not None)
        while retry:
            flight = self.flights.get(retry[0].message_id)
            if flight is None or flight.stage != role or flight.worker is not None:
                retry.popleft()  # stale: it ended (or moved on) while it waited
                continue
            waited = now - flight.retry_since >= self._deadline_s[role]
            if holding >= (len(workers) // 2 or (0 if self._pending[role] and not waited else 1)):
                break
            idle = next((w for w in workers.values() if not w.assigned and w.suspect is None
                         and w.identity in ready), None)
            if idle is None:
                if self._draining[role] not in workers:
                    free = [w for w in workers.values() if w.suspect is None]
                    self._draining[role] = min(free, key=lambda w: len(w.assigned)).identity if free else None
                return
            ready.remove(idle.identity)
            self._send_work(role, idle, retry.popleft(), flight, now, suspect=True)
            holding += 1
        self._draining[role] = None  # nothing more to place now: no worker should idle for it

    def _send_work(self, role: str, worker: Worker, message: Message, flight: Flight, now: float,
                   suspect: bool = False) -> None:
        flight.worker = worker.identity
        flight.epoch += 1
        flight.attempts += 1
        worker.assigned.add(message.message_id)
        if suspect:
            worker.suspect = message.message_id
        heapq.heappush(self._deadlines, (now + self._deadline_s[role], message.message_id, flight.epoch))
        self.out.append(Send(role, worker.identity, message))

    def _escalate(self, flight: Flight, reason: str, now: float) -> None:
        """Record `escalated` and park the email until a person decides (no deadline)."""
        flight.stage, flight.worker, flight.waiting_for = "escalated", None, reason
        flight.epoch += 1
        self.counters["outcome.escalated"] += 1
        self._trace("broker", "outcome", flight.message_id, outcome="escalated", reason=reason,
                    ended_at="actor", final=False, ms=round((now - flight.started) * 1000, 3))
        for identity, _ in flight.waiters:
            self._answered(identity)
            self.out.append(Send("intake", identity, Result(
                message_id=flight.message_id, outcome="escalated", reason=reason)))
        flight.waiters.clear()

    def _answered(self, identity: bytes) -> None:
        if self.waiting[identity] > 1:
            self.waiting[identity] -= 1
        else:
            self.waiting.pop(identity, None)

    def _finish(self, flight: Flight, outcome: Outcome, reason: str, now: float, **detail: Any) -> None:
        del self.flights[flight.message_id]
        self._hold(flight, 0)
        self.finished.add(flight.message_id, (outcome, reason))
        self.counters[f"outcome.{outcome}"] += 1
        self._trace("broker", "outcome", flight.message_id, outcome=outcome, reason=reason,
                    ended_at=flight.stage, final=True, ms=round((now - flight.started) * 1000, 3), **detail)
        for identity, _ in flight.waiters:
            self._answered(identity)
            self.out.append(Send("intake", identity, Result(
                message_id=flight.message_id, outcome=outcome, reason=reason)))

    def _trace(self, stage: str, event: str, message_id: str | None,
               untrusted: dict[str, Any] | None = None, **fields: Any) -> None:
        """Queue one trace line. `untrusted` details come from a worker: they never
        override the broker's own fields, nor (in trace.line) at/message_id/stage/event."""
        if untrusted:
            fields = {**fields, **untrusted, **fields}  # the broker's own fields first, and they win
        self.out.append(trace.line(stage, event, message_id, fields))

    def _take(self) -> list[Send | bytes | Entry]:
        out, self.out = self.out, []
        return out


def _student(point: str) -> dict[str, str]:
    """`student` on a trace line only when a lab's student code took part (wire.Passed):
    a line without it reads as before, and old traces stay what they were."""
    return {"student": point} if point else {}
