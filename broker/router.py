"""The broker's logic: where each message may go, and the one outcome of each email.

`Router.handle(role, identity, message, now)` is pure bookkeeping: it returns effects
(messages to send, trace lines to write, journal records: broker.outbox) and never touches
a socket. It owns the routing rules and composes the parts, each testable alone:

- broker.workers: each worker's credit and liveness (work is pulled: a Hello grants
  credit, each result returns one; a silent idle worker is gone).
- broker.lifecycle: the life of each email (hand-offs, stage deadlines, redelivery up to
  `max_attempts`, escalation, the one final outcome).
- broker.dispatch: which worker takes which email; suspects (redeliveries) alone.
- broker.unserved: no email waits for ever for a stage nobody serves.
- broker.intake: the client protocol (Submit, Await, Decide, Ping), its bounds and proofs.
- broker.tracing: what each worker's result becomes in the trace.

The rules kept here:

- Read -> a reader, Reading -> the validator, Passed -> the actor; nothing else moves.
  What a role may send is fixed by its endpoint's decoder (wire.INBOUND); anything else
  arrives here as a Violation and is recorded and dropped.
- Every accepted email gets an id, is journalled (the loop fsyncs the journal before any
  Accepted leaves), and gets exactly one final `outcome` line.
- A late or duplicate answer is recorded as `late_result` and changes nothing (no verdict
  or answer line a page could read), and the actor's idempotency keys make a redelivered
  step a replay, not a second side effect.
- A worker's own Event is written as `worker.<name>`, its name checked and its details
  escaped, so no worker can write a line that reads as the broker's.
- A person's key may decide, await and ask status, nothing else; a decision is taken only
  from a person's own key (`approvers`: public key -> name) and only in that person's name.
- A Submit's sender_proof is kept only when it comes with the SMTP intake's key
  (`smtp_keys`): the CLI's, the supervisor's and the page's keys share the intake endpoint
  but check no signature, so a proof they claim is recorded as "none", with a violation.
- A peer writes a trace line of its own (a Notice, an Event) only under a stage its key's
  role may write (`client_roles`: public key -> role; broker.events.WRITES): supervisor
  lines from the supervisor's key alone. Any other is a recorded violation, not a line.
"""

from __future__ import annotations

import collections
import typing
from collections.abc import Callable, Collection, Iterable

import msgspec

from airlock import records
from airlock.records import (
    SUPERVISOR,
    WORKER_PREFIX,
    ClientGone,
    LateResult,
    MalformedFrame,
    PeerFact,
    WorkerJoined,
    WorkerLost,
    utc_now,
)
from airlock.settings import Settings
from airlock.wire import (
    INBOUND,
    Await,
    Decide,
    Done,
    Event,
    Heartbeat,
    Hello,
    Malformed,
    Message,
    Notice,
    Passed,
    Ping,
    Reading,
    Rejected,
    Submit,
    Unreadable,
    Violation,
)
from broker import events, ids, tracing
from broker.dispatch import Dispatch
from broker.intake import Intake
from broker.journal import QueuedEmail
from broker.lifecycle import Flight, Lifecycle
from broker.outbox import Effect, Outbox, Send
from broker.unserved import Unserved
from broker.workers import Connection, Workers

__all__ = ["Effect", "Router", "Send"]

WORKER_ROLES = ("reader", "validator", "actor")
MAX_QUEUED = 100_000  # emails waiting for a reader; past this, intake answers Refused
MAX_REMEMBERED = 100_000  # at least this many finished outcomes kept to answer Await (broker.recent)


class Router:
    def __init__(self, settings: Settings, boot: int | None = None, approvers: dict[str, str] | None = None,
                 smtp_keys: Collection[str] = (), client_roles: dict[str, str] | None = None) -> None:
        self.settings = settings
        self.counters: collections.Counter[str] = collections.Counter()
        self.out = Outbox()
        self.crew = Workers(WORKER_ROLES, settings.heartbeat_interval_s * settings.heartbeat_liveness)
        self.lifecycle = Lifecycle(settings, WORKER_ROLES, self.out, self.counters, MAX_REMEMBERED)
        self.dispatch = Dispatch(self.crew, self.lifecycle, self.out)
        self.unserved = Unserved(self.lifecycle, self.crew)
        # Ids are <boot in hex>-<counter>; the loop passes a boot number no start on this data
        # dir took before (broker.ids), so no id repeats; without one, the clock's.
        prefix = f"{boot if boot is not None else ids.clock_ms():x}"
        # The SMTP intake's public key(s) (z85, keys.smtp_keys): only a Submit proven to come
        # with one keeps its sender_proof; from any other key a proof is recorded as "none".
        # Whose each person's key is (z85 public key -> name, keys.approvers): a decision is
        # taken only from one of these keys, and only in that person's name.
        self.intake = Intake(settings, self.lifecycle, self.crew, self.unserved, self.out, self.counters,
                             prefix, MAX_QUEUED, dict(approvers or {}), smtp_keys)
        # The parts' state, as callers and tests read it.
        self.workers = self.crew.of
        self.flights = self.lifecycle.flights
        self.waiting = self.lifecycle.waiting
        self.approvers, self.smtp_keys = self.intake.approvers, self.intake.smtp_keys
        # Whose each client key is (z85 public key -> role, keys.client_roles): what trace
        # lines of its own it may write (broker.events.WRITES).
        self.client_roles = dict(client_roles or {})
        self._last_heartbeat = 0.0
        self._joined: list[tuple[str, bytes]] = []  # new connections not greeted yet (greetings)
        # Keyed by the message's type, so each handler is given the type it takes.
        self._handlers: dict[type[Message], Callable[[str, bytes, typing.Any, float], None]] = {
            Await: self.intake.await_, Ping: self.intake.ping, Notice: self._on_notice, Reading: self._on_reading,
            Unreadable: self._on_unreadable, Passed: self._on_passed, Rejected: self._on_rejected, Done: self._on_done,
        }
        # Every message a peer may send has its handler: checked here, at start, not on the
        # first such message (Hello, Event, and Submit and Decide, which need the sender's
        # key, are handled in handle() itself).
        missing = {kind for union in INBOUND.values() for kind in typing.get_args(union)}
        missing -= {Hello, Event, Submit, Decide, *self._handlers}
        if missing:
            raise RuntimeError(f"the broker has no handler for {sorted(kind.__name__ for kind in missing)}")

    @property
    def queued_bytes(self) -> int:
        """Raw email bytes held for emails no reader has read yet (AIRLOCK_QUEUE_MAX_BYTES)."""
        return self.lifecycle.queued_bytes

    @property
    def disk_full(self) -> str:
        """Why the broker cannot keep an email now ("" while it can: broker.storage)."""
        return self.intake.disk_full

    @disk_full.setter
    def disk_full(self, reason: str) -> None:
        self.intake.disk_full = reason

    # --- entry points -------------------------------------------------------------------

    def handle(self, role: str, identity: bytes, message: Message | Malformed | Violation,
               now: float, key: str = "") -> list[Effect]:
        """`key`: the sender's CURVE public key as the authenticator proved it ("" unknown)."""
        return self.handle_frame(role, identity, (message,), now, key)

    def handle_frame(self, role: str, identity: bytes, messages: Iterable[Message | Malformed | Violation],
                     now: float, key: str = "", serve: bool = True) -> list[Effect]:
        """The messages of one frame (a worker's batch of answers), in order, then the queues
        served once: what they freed (credit, a stage done) is placed together, as it would
        be message by message, at a sixteenth of the dispatch passes. Not `serve`: the
        caller serves them later (the loop's tick, once every frame of its turn is read, so
        a worker's connections met in one turn are sorted out before any gets work)."""
        self.crew.seen(role, identity, now)  # any frame is a sign of life
        for message in messages:
            self._take(role, identity, message, now, key)
        if serve:
            self.dispatch(now)
        return self.out.take()

    def _take(self, role: str, identity: bytes, message: Message | Malformed | Violation, now: float,
              key: str) -> None:
        match message:
            case Malformed(reason=reason, size=size):
                self.counters[f"malformed.{role}"] += 1
                self.out.trace(MalformedFrame(utc_now(), None, "broker", endpoint=role, reason=reason, bytes=size))
            case Violation(kind=kind, reason=reason):
                self._violation(role, kind, reason)
            case Hello():
                self._hello(role, identity, message, now)
            case Submit() | Notice() if key in self.approvers:
                self._violation(role, type(message).__name__.lower(),
                                f"{self.approvers[key]}'s key may decide, await and ask status, nothing else")
            case Decide():
                self.intake.decide(role, identity, message, now, key)
            case Submit():
                self.intake.submit(role, identity, message, now, key)
            case Event() | Notice() if (refusal := events.writer_refusal(
                    self.client_roles, key, role if isinstance(message, Event) else SUPERVISOR)):
                self._violation(role, type(message).__name__.lower(), refusal)
            case Event(event=event) | Notice(event=event) if (
                    refusal := events.refusal(event, role, isinstance(message, Event))):
                self._violation(role, type(message).__name__.lower(), refusal)
            case Event(event=event, message_id=message_id, detail=detail):
                self.out.trace(PeerFact(utc_now(), message_id, role, WORKER_PREFIX + event, events.escaped(detail)))
            case _:
                self._handlers[type(message)](role, identity, message, now)

    def _violation(self, role: str, kind: str, reason: str) -> None:
        """A message a peer on `role`'s endpoint may not send: counted, recorded, dropped."""
        self.counters[f"violation.{role}"] += 1
        self.out.trace(records.Violation(utc_now(), None, "broker", endpoint=role, kind=kind, reason=reason))

    def tick(self, now: float) -> list[Effect]:
        """Heartbeats out, silent workers buried, missed deadlines redelivered, queues served."""
        if now - self._last_heartbeat >= self.settings.heartbeat_interval_s:
            self._last_heartbeat = now
            for role, identity in self.crew.everyone():
                self.out.send(role, identity, Heartbeat())
        for role, identity in self.crew.silent_idle(now):
            self._bury(role, identity, f"no heartbeat for {self.crew.silent_after_s:.1f} s", now)
        self.lifecycle.missed_deadlines(now)
        self.unserved.end(now)
        self.dispatch(now)
        return self.out.take()

    def undeliverable(self, send: Send, now: float, count: int = 1, unsent: Collection[str] = ()) -> list[Effect]:
        """The socket refused a message (peer gone): forget the peer, send its work again.
        `count`: how many messages to that client were refused with it (one line for all);
        `unsent`: the ids of the work refused with it, which never reached the worker and so
        is not counted as a delivery (nor is the work `send` carries)."""
        if send.role == "intake":
            self.out.trace(ClientGone(utc_now(), getattr(send.message, "message_id", None), "broker", messages=count))
            self.waiting.pop(send.identity, None)  # its waiters will find no one: stop counting them
            return self.out.take()
        refused = getattr(send.message, "message_id", None)
        self._bury(send.role, send.identity, "its connection is gone", now,
                   unsent={*unsent, refused} if isinstance(refused, str) else unsent)
        self.dispatch(now)
        return self.out.take()

    def next_deadline(self) -> float | None:
        return self.lifecycle.next_deadline()

    # --- what an earlier broker left (broker.recovery) -------------------------------------------

    def recover(self, entry: QueuedEmail, now: float) -> None:
        """Queue a journalled email that an earlier broker accepted but never finished."""
        self.lifecycle.recover(entry, now)

    def defer(self, message_id: str, now: float) -> None:
        """Known, its raw email still on disk (Lifecycle.defer)."""
        self.lifecycle.defer(message_id, now)

    def has_room(self, size: int) -> bool:
        return self.lifecycle.has_room(size)

    def still_escalated(self, message_id: str, now: float) -> None:
        self.lifecycle.still_escalated(message_id, now)

    def abandon(self, message_id: str, reason: str) -> list[Effect]:
        """Give an email a previous broker accepted but never finished its one outcome."""
        self.lifecycle.abandon(message_id, reason)
        return self.out.take()

    def end_failed(self, message_ids: Collection[str], reason: str, now: float) -> list[Effect]:
        """Emails the broker holds and cannot carry on: received this turn with journal
        records that never reached the disk (their client hears Refused disk_full: the loop
        swaps the Accepted), or deferred ones whose record is unreadable now. Each ends
        here, `failed`, and a reader's late answer for it changes nothing."""
        self.lifecycle.end_failed(message_ids, reason, now)
        return self.out.take()

    # --- workers ------------------------------------------------------------------------

    def _hello(self, role: str, identity: bytes, hello: Hello, now: float) -> None:
        """A heartbeat from a worker known here; else a new connection: a worker new here, its
        worker's newer connection (the older one is dropped, its work sent again), or an
        older one, whose Hello waited here while its worker reconnected: nothing is kept of
        it, so nothing is ever sent to it (broker.workers)."""
        connection = Connection()  # a heartbeat (known) or a worker new here
        if identity not in self.crew.of[role]:
            connection = self.crew.connect(role, identity, hello.worker, hello.connection)
            if connection.stale:
                self.counters[f"stale_connection.{role}"] += 1
                return
            if connection.replaces is not None:  # the same worker: no worker_joined, no worker_lost
                self.counters[f"reconnected.{role}"] += 1
                self._bury(role, connection.replaces, "its worker connected again: the newer connection replaces it",
                           now, replaced=True)
        granted = self.crew.join(role, identity, hello.credit, now, hello.worker)
        if granted is not None:
            self._joined.append((role, identity))
            if connection.replaces is None:
                self.out.trace(WorkerJoined(utc_now(), None, "broker", role=role, credit=granted))

    def greetings(self) -> list[Effect]:
        """A Heartbeat to each connection that joined since the last call, still known. The
        loop sends these before the queues are served: a connection its worker closed after
        its Hello (the Hello waited here) is refused by the socket and buried, so no work is
        sent to it."""
        for role, identity in self._joined:
            if identity in self.crew.of[role]:
                self.out.send(role, identity, Heartbeat())
        self._joined.clear()
        return self.out.take()

    def _bury(self, role: str, identity: bytes, why: str, now: float, replaced: bool = False,
              unsent: Collection[str] = ()) -> None:
        """Forget a worker and send again what it held. A delivery counts toward max_attempts
        only if it says something against the email: not one in `unsent` (the socket refused
        it, so no worker saw it), nor any of a connection its own worker `replaced` (alive, it
        connected again). A replaced connection is no worker lost: a line only if it held work."""
        worker = self.crew.lose(role, identity, now)
        if worker is None:
            return
        if not replaced:
            self.counters[f"worker_lost.{role}"] += 1
        if not replaced or worker.assigned:
            self.out.trace(WorkerLost(utc_now(), None, "broker", role=role, reason=why, held=len(worker.assigned)))
        for message_id in sorted(worker.assigned):
            flight = self.flights.get(message_id)
            if flight is not None and flight.stage == role and flight.worker == identity:
                self.lifecycle.redeliver(flight, f"the {role} holding it was lost ({why})", now,
                                         counted=not replaced and message_id not in unsent)

    def _on_notice(self, role: str, identity: bytes, message: Notice, now: float) -> None:
        self.out.trace(PeerFact(utc_now(), None, SUPERVISOR, message.event, events.escaped(message.detail)))

    # --- results from workers: each moves its email on, or is late -------------------------

    def _on_reading(self, role: str, identity: bytes, message: Reading, now: float) -> None:
        flight = self._result(role, identity, message.message_id, "model_answer")
        if flight is None:
            return  # late: the late_result line is all it writes (see _result)
        self.out.lines(tracing.model_answer(message))
        self.lifecycle.hand_off(flight, "validator", msgspec.structs.replace(message, notes={}), now)

    def _on_unreadable(self, role: str, identity: bytes, message: Unreadable, now: float) -> None:
        flight = self._result(role, identity, message.message_id, "unreadable")
        if flight is None:
            return
        self.out.lines(tracing.unreadable(message))
        self.lifecycle.finish(flight, "rejected", message.reason, now, rule=message.rule)

    def _on_passed(self, role: str, identity: bytes, message: Passed, now: float) -> None:
        flight = self._result(role, identity, message.message_id, "verdict")
        if flight is None:
            return  # a late Passed may not put a verdict on a finished email's page
        self.out.lines(tracing.passed(message))
        # The sender and its proof come from the intake, whatever the validator put there.
        self.lifecycle.hand_off(flight, "actor", msgspec.structs.replace(message, sender=flight.sender,
                                                                        sender_proof=flight.sender_proof), now)

    def _on_rejected(self, role: str, identity: bytes, message: Rejected, now: float) -> None:
        flight = self._result(role, identity, message.message_id, "verdict")
        if flight is None:
            return
        self.out.lines(tracing.rejected(message))
        self.lifecycle.finish(flight, "rejected", message.reason, now, rule=message.rule)

    def _on_done(self, role: str, identity: bytes, message: Done, now: float) -> None:
        # A late Done still records its calls: they ran (the call log has them), and the
        # page lists a call after an outcome as late. It changes no outcome.
        flight = self._result(role, identity, message.message_id, "done")
        self.out.lines(*tracing.calls(message))
        if flight is None:
            return
        if message.outcome == "escalated":
            self.lifecycle.escalate(flight, message.reason, now)
        else:
            self.lifecycle.finish(flight, message.outcome, message.reason, now)

    def _result(self, role: str, identity: bytes, message_id: str, event: str) -> Flight | None:
        """Return the flight this result moves on, or None (late, unknown or not assigned)."""
        self.crew.returned(role, identity, message_id)
        flight = self.flights.get(message_id)
        if flight is None or flight.stage != role or flight.worker != identity:
            self.counters[f"late.{role}"] += 1
            self.out.trace(LateResult(utc_now(), message_id, "broker", endpoint=role, result=event))
            return None
        return flight
