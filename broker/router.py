"""The broker's logic: where each message may go, and the one outcome of each email.

`Router.handle(role, identity, message, now)` is pure bookkeeping: it returns effects
(messages to send, trace lines to write) and never touches a socket. The rules:

- Email -> a reader, Reading -> the validator, Passed -> the actor; nothing else moves.
  What a role may send is fixed by its endpoint's decoder (wire.INBOUND); anything else
  arrives here as a Violation and is recorded and dropped.
- Work is pulled, not pushed: a worker's Hello grants credit, each result returns one, and
  the broker never sends a worker more than its credit. So a ROUTER's high-water mark is
  never what limits a queue, and nothing is dropped there.
- Every accepted email gets an id and exactly one `outcome` line; a stage that does not
  answer before its deadline ends the email as `failed`, and a late answer is recorded but
  changes nothing.
"""

from __future__ import annotations

import collections
import heapq
import time
from dataclasses import dataclass, field
from typing import Any

import msgspec

from airlock import trace
from airlock.settings import Settings
from airlock.wire import (
    Accepted, Await, Decide, Decision, Done, Email, Event, Hello, Malformed, Message, Notice, Outcome,
    Passed, Ping, Reading, Refused, Rejected, Result, Status, Submit, Unreadable, Violation,
)

MAX_QUEUED = 100_000  # emails waiting for a reader; past this, intake answers Refused
MAX_REMEMBERED = 100_000  # finished outcomes kept to answer Await for recent emails
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
    assigned: set[str] = field(default_factory=set)


@dataclass
class Flight:
    message_id: str
    stage: str  # the role that holds it now: reader, validator or actor; or escalated
    started: float
    sender: str = ""  # what the intake vouched for; given to the actor, never to the reader
    worker: bytes | None = None
    epoch: int = 0  # bumps at each hand-off, so an old deadline cannot fail a later stage
    waiters: list[tuple[bytes, int]] = field(default_factory=list)


class Router:
    def __init__(self, settings: Settings, boot: int | None = None) -> None:
        self.settings = settings
        # Ids are <boot ms in hex>-<counter>: unique across broker restarts on this clock.
        self._prefix = f"{boot if boot is not None else time.time_ns() // 1_000_000:x}"
        self._counter = 0
        self.flights: dict[str, Flight] = {}
        self.finished: collections.OrderedDict[str, tuple[Outcome, str]] = collections.OrderedDict()
        self.workers: dict[str, dict[bytes, Worker]] = {"reader": {}, "validator": {}, "actor": {}}
        self._ready: dict[str, collections.deque[bytes]] = {r: collections.deque() for r in self.workers}
        self._pending: dict[str, collections.deque[Message]] = {r: collections.deque() for r in self.workers}
        self._deadlines: list[tuple[float, str, int]] = []
        self.counters: collections.Counter[str] = collections.Counter()
        self._deadline_s = {
            "reader": settings.read_deadline_s,
            "validator": settings.validate_deadline_s,
            "actor": settings.act_deadline_s,
        }
        self.out: list[Send | bytes] = []

    # --- entry points -------------------------------------------------------------------

    def handle(self, role: str, identity: bytes, message: Message | Malformed | Violation,
               now: float) -> list[Send | bytes]:
        match message:
            case Malformed(reason=reason, size=size):
                self.counters[f"malformed.{role}"] += 1
                self._trace("broker", "malformed_frame", None, endpoint=role, reason=reason, bytes=size)
            case Violation(kind=kind, reason=reason):
                self.counters[f"violation.{role}"] += 1
                self._trace("broker", "violation", None, endpoint=role, kind=kind, reason=reason)
            case Hello(credit=credit):
                self._hello(role, identity, credit)
            case Event(event=event, message_id=message_id, detail=detail):
                self._trace(role, event, message_id, detail)
            case _:
                getattr(self, f"_on_{type(message).__name__.lower()}")(role, identity, message, now)
        self._dispatch(now)
        return self._take()

    def tick(self, now: float) -> list[Send | bytes]:
        """Expire deadlines and hand out queued work."""
        while self._deadlines and self._deadlines[0][0] <= now:
            _, message_id, epoch = heapq.heappop(self._deadlines)
            flight = self.flights.get(message_id)
            if flight is not None and flight.epoch == epoch:
                self._finish(flight, "failed", f"no answer from the {flight.stage} in time", now)
        self._dispatch(now)
        return self._take()

    def undeliverable(self, send: Send, now: float) -> list[Send | bytes]:
        """The socket refused a message (peer gone): forget the peer, requeue the work."""
        if send.role == "intake":
            self._trace("broker", "client_gone", getattr(send.message, "message_id", None))
            return self._take()
        worker = self.workers[send.role].pop(send.identity, None)
        message_id = getattr(send.message, "message_id")
        self._trace("broker", "worker_gone", message_id, role=send.role)
        flight = self.flights.get(message_id)
        if flight is not None and flight.stage == send.role:
            flight.worker = None
            self._pending[send.role].appendleft(send.message)
        if worker is not None:
            worker.assigned.discard(message_id)
        self._dispatch(now)
        return self._take()

    def still_escalated(self, message_id: str, now: float) -> None:
        """An email an earlier broker left waiting for a decision keeps waiting here."""
        self.flights[message_id] = Flight(message_id, "escalated", now)

    def abandon(self, message_id: str, reason: str) -> list[Send | bytes]:
        """Give an email a previous broker accepted but never finished its one outcome."""
        self.counters["outcome.failed"] += 1
        self._trace("broker", "outcome", message_id, outcome="failed", reason=reason, ended_at="broker")
        return self._take()

    def next_deadline(self) -> float | None:
        return self._deadlines[0][0] if self._deadlines else None

    # --- intake ---------------------------------------------------------------------------

    def _on_submit(self, role: str, identity: bytes, message: Submit, now: float) -> None:
        if len(self._pending["reader"]) >= MAX_QUEUED:
            self.out.append(Send(role, identity, Refused(ref=message.ref, reason="queue full, retry later")))
            return
        self._counter += 1
        message_id = f"{self._prefix}-{self._counter}"
        flight = Flight(message_id, "reader", now, sender=message.sender)
        self.flights[message_id] = flight
        self.out.append(Send(role, identity, Accepted(ref=message.ref, message_id=message_id)))
        self._trace("broker", "received", message_id, origin=message.origin, format=message.format,
                    bytes=len(message.raw), sender=message.sender)
        if len(message.raw) > self.settings.max_email_bytes:
            reason = f"email is {len(message.raw)} bytes, over the {self.settings.max_email_bytes}-byte limit"
            self._finish(flight, "rejected", reason, now, rule="intake.too_large")
            return
        self._pending["reader"].append(Email(message_id=message_id, raw=message.raw, format=message.format))

    def _on_await(self, role: str, identity: bytes, message: Await, now: float) -> None:
        for message_id in message.ids:
            if message_id in self.finished:
                outcome, reason = self.finished[message_id]
                self.out.append(Send(role, identity, Result(message_id=message_id, outcome=outcome, reason=reason)))
            elif message_id in self.flights and self.flights[message_id].stage == "escalated":
                self.out.append(Send(role, identity, Result(message_id=message_id, outcome="escalated",
                                                            reason="waiting for a person's decision")))
            elif message_id in self.flights:
                self.flights[message_id].waiters.append((identity, message.ref))
            else:
                self.out.append(Send(role, identity, Refused(ref=message.ref, reason=f"unknown message id {message_id}")))

    def _on_decide(self, role: str, identity: bytes, message: Decide, now: float) -> None:
        flight = self.flights.get(message.message_id)
        if flight is None or flight.stage != "escalated":
            self.out.append(Send(role, identity, Refused(ref=message.ref, reason=f"{message.message_id} is not waiting for a decision")))
            return
        self._trace("broker", "decision", message.message_id, layer="authorization", approve=message.approve,
                    role=message.role, by=message.by)
        self.out.append(Send(role, identity, Accepted(ref=message.ref, message_id=message.message_id)))
        self._hand_off(flight, "actor", Decision(message_id=message.message_id, approve=message.approve,
                                                 role=message.role, by=message.by), now)

    def _on_ping(self, role: str, identity: bytes, message: Ping, now: float) -> None:
        workers = {r: len(ws) for r, ws in self.workers.items()}
        self.out.append(Send(role, identity, Status(
            ref=message.ref, workers=workers, queued=len(self._pending["reader"]),
            in_flight=len(self.flights))))

    def _on_notice(self, role: str, identity: bytes, message: Notice, now: float) -> None:
        self._trace("supervisor", message.event, None, message.detail)

    # --- results from workers -------------------------------------------------------------

    def _on_reading(self, role: str, identity: bytes, message: Reading, now: float) -> None:
        flight = self._result(role, identity, message.message_id, "model_answer")
        answer = message.answer
        self._trace("reader", "model_answer", message.message_id, message.notes, layer="model_output",
                    answer=answer[:TRACE_TEXT_LIMIT], answer_chars=len(answer),
                    source=message.source, truncated=message.truncated)
        if flight is not None:
            self._hand_off(flight, "validator", msgspec.structs.replace(message, notes={}), now)

    def _on_unreadable(self, role: str, identity: bytes, message: Unreadable, now: float) -> None:
        flight = self._result(role, identity, message.message_id, "unreadable")
        self._trace("reader", "unreadable", message.message_id, message.notes, layer="parser",
                    rule=message.rule, reason=message.reason)
        if flight is not None:
            self._finish(flight, "rejected", message.reason, now, rule=message.rule)

    def _on_passed(self, role: str, identity: bytes, message: Passed, now: float) -> None:
        flight = self._result(role, identity, message.message_id, "verdict")
        self._trace("validator", "verdict", message.message_id, layer="validator", verdict="passed", value=message.value)
        if flight is not None:
            # The sender comes from the intake, whatever the validator put there.
            self._hand_off(flight, "actor", msgspec.structs.replace(message, sender=flight.sender), now)

    def _on_rejected(self, role: str, identity: bytes, message: Rejected, now: float) -> None:
        flight = self._result(role, identity, message.message_id, "verdict")
        layer = "parser" if message.rule.endswith(PARSE_RULES) else "validator"
        self._trace("validator", "verdict", message.message_id, layer=layer, verdict="rejected",
                    rule=message.rule, reason=message.reason)
        if flight is not None:
            self._finish(flight, "rejected", message.reason, now, rule=message.rule)

    def _on_done(self, role: str, identity: bytes, message: Done, now: float) -> None:
        flight = self._result(role, identity, message.message_id, "done")
        for call in message.calls:
            where = {"step": call.step, "server": call.server, "tool": call.tool}
            self._trace("actor", "authorization", message.message_id, layer="authorization", **where,
                        key=call.key, decision=call.decision)
            if call.status in ("refused", "escalated"):
                continue
            self._trace("actor", "call", message.message_id, layer="execution", **where, args=call.args,
                        status=call.status, error=call.error, key=call.key)
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
        flight = self.flights.get(message_id)
        if flight is None or flight.stage != role or flight.worker != identity:
            self.counters[f"late.{role}"] += 1
            self._trace("broker", "late_result", message_id, endpoint=role, result=event)
            return None
        return flight

    # --- moving work ----------------------------------------------------------------------

    def _hello(self, role: str, identity: bytes, credit: int) -> None:
        if identity in self.workers[role]:
            return  # an idle worker's keep-alive; its credit is already counted
        credit = max(1, min(credit, 10_000))
        self.workers[role][identity] = Worker(identity, credit)
        self._ready[role].extend([identity] * credit)
        self._trace("broker", "worker_joined", None, role=role, credit=credit)

    def _hand_off(self, flight: Flight, stage: str, message: Message, now: float) -> None:
        flight.stage, flight.worker = stage, None
        flight.epoch += 1
        self._pending[stage].append(message)

    def _dispatch(self, now: float) -> None:
        for role, pending in self._pending.items():
            ready, workers = self._ready[role], self.workers[role]
            while pending and ready:
                identity = ready.popleft()
                worker = workers.get(identity)
                if worker is None:
                    continue  # a token left by a worker that has gone
                message = pending.popleft()
                flight = self.flights.get(message.message_id)
                if flight is None or flight.stage != role:
                    ready.appendleft(identity)
                    continue
                flight.worker = identity
                flight.epoch += 1
                worker.assigned.add(message.message_id)
                heapq.heappush(self._deadlines, (now + self._deadline_s[role], message.message_id, flight.epoch))
                self.out.append(Send(role, identity, message))

    def _escalate(self, flight: Flight, reason: str, now: float) -> None:
        """Record `escalated` and park the email until a person decides (no deadline)."""
        flight.stage, flight.worker = "escalated", None
        flight.epoch += 1
        self.counters["outcome.escalated"] += 1
        self._trace("broker", "outcome", flight.message_id, outcome="escalated", reason=reason,
                    ended_at="actor", final=False, ms=round((now - flight.started) * 1000, 3))
        for identity, _ in flight.waiters:
            self.out.append(Send("intake", identity, Result(
                message_id=flight.message_id, outcome="escalated", reason=reason)))
        flight.waiters.clear()

    def _finish(self, flight: Flight, outcome: Outcome, reason: str, now: float, **detail: Any) -> None:
        del self.flights[flight.message_id]
        self.finished[flight.message_id] = (outcome, reason)
        if len(self.finished) > MAX_REMEMBERED:
            self.finished.popitem(last=False)
        self.counters[f"outcome.{outcome}"] += 1
        self._trace("broker", "outcome", flight.message_id, outcome=outcome, reason=reason,
                    ended_at=flight.stage, final=True, ms=round((now - flight.started) * 1000, 3), **detail)
        for identity, _ in flight.waiters:
            self.out.append(Send("intake", identity, Result(
                message_id=flight.message_id, outcome=outcome, reason=reason)))

    def _trace(self, stage: str, event: str, message_id: str | None,
               untrusted: dict[str, Any] | None = None, **fields: Any) -> None:
        """Queue one trace line. `untrusted` details come from a worker: they never
        override the broker's own fields, nor (in trace.line) at/message_id/stage/event."""
        for key, value in (untrusted or {}).items():
            fields.setdefault(key, value)
        self.out.append(trace.line(stage, event, message_id, fields))

    def _take(self) -> list[Send | bytes]:
        out, self.out = self.out, []
        return out
