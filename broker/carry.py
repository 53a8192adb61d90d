"""Carrying out a turn's effects, in the order that makes the guarantees hold.

Data: the effects the Router decided (broker.outbox: sends, trace lines, journal records).
Readers: the loop (broker.app), once a turn and at start and stop.
Rationale: journal entries are written and fsynced once for the whole turn (group commit)
before any Accepted leaves, so "accepted" always means "on disk"; work goes to the workers
before that fsync, so a reader starts on an email while it reaches the disk. What goes to
one peer in a turn leaves as one batch frame (wire.frames), and the turn's trace lines in
as few published frames as fit. A failed sync or trace flush is a state (broker.storage),
never a crash: those Accepted leave as Refused disk_full and their emails end failed.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import zmq

from airlock import published, trace
from airlock.settings import Settings
from airlock.wire import Accepted, batch_limit, frames, grouped
from broker.endpoints import Endpoints
from broker.journal import Journal, QueuedEmail
from broker.outbox import Effect, Send
from broker.router import Router
from broker.storage import Storage, refusal


def trace_chunks(lines: list[bytes], max_frame_bytes: int) -> list[bytes]:
    """Whole trace lines joined into chunks a subscriber's frame cap takes: one PUB frame each."""
    return [b"".join(group) for group in grouped(lines, batch_limit(max_frame_bytes))]


def unkept(send: Send, refused: set[str], why: str) -> Send:
    """An Accepted for an email whose journal record did not reach the disk, as the Refused
    disk_full it is (broker.storage); any other reply as it was."""
    message = send.message
    if isinstance(message, Accepted) and message.message_id in refused:
        return Send(send.role, send.identity, refusal(message.ref, why))
    return send


class CarryOut:
    def __init__(self, settings: Settings, core: Router, endpoints: Endpoints, journal: Journal,
                 writer: trace.TraceWriter, storage: Storage) -> None:
        self.settings, self.core, self.endpoints = settings, core, endpoints
        self.journal, self.writer, self.storage = journal, writer, storage

    def __call__(self, effects: Sequence[Effect]) -> None:
        core, journal = self.core, self.journal
        lines: list[bytes] = []
        outgoing: dict[tuple[str, bytes], list[Send]] = {}  # per peer, in order: one batch each
        for effect in effects:
            if isinstance(effect, QueuedEmail):
                journal.append(effect)
            elif isinstance(effect, bytes):
                lines.append(effect)
            else:
                outgoing.setdefault((effect.role, effect.identity), []).append(effect)
        # Work goes to the workers first, before the fsync, so a reader starts on an email
        # while it reaches the disk; only the intake's replies (an Accepted promises the
        # email is kept) wait for it. A crash in between leaves an email received but never
        # accepted: recovery gives it the outcome `failed` (see broker.recovery). The trace
        # lines come last: they reach the file at the end of the turn either way, and every
        # message that waits for them waits at every hop. If the sync fails (a full disk, an
        # I/O error), nothing of it was kept: those Accepted leave as Refused disk_full and
        # each of those emails ends failed in this turn's lines (broker.storage).
        later: list[Effect] = []
        for (role, identity), sends in outgoing.items():
            if role != "intake":
                later += self.send_to(role, identity, sends)
        failed = journal.sync()
        refuse: set[str] = set()
        if failed is not None:  # none of them kept: refused, and each ends failed (Router.end_failed)
            later += self.storage.failed("journal", failed.error, time.monotonic())
            core.disk_full = self.storage.reason()
            core.counters["refused.disk_full"] += len(failed.message_ids)
            later += core.end_failed(failed.message_ids, "not accepted: its journal record could not be "
                                     f"written ({failed.error})", time.monotonic())
            refuse = set(failed.message_ids)
        for (role, identity), sends in outgoing.items():
            if role == "intake":
                later += self.send_to(role, identity, [unkept(send, refuse, core.disk_full)
                                                       for send in sends] if refuse else sends)
        max_frame_bytes = self.settings.max_frame_bytes
        for chunk in trace_chunks(lines, max_frame_bytes):
            self.writer.write(chunk)
        # Subscribers get each line as airlock.published shows it (no customer data); the
        # file keeps the whole record. They split a frame at its newlines. With none, no line
        # is made public (broker.endpoints: the XPUB says who listens).
        if self.endpoints.watched:
            for chunk in trace_chunks([published.line(line) for line in lines], max_frame_bytes):
                self.endpoints.publisher.send(chunk)
        if later:  # what a refused send led to comes after this turn's lines, as it happened
            self(later)

    def send_now(self, effects: Sequence[Effect]) -> list[Effect]:
        """Send these messages at once, ahead of the turn's other effects (the Router's
        greetings to new connections); the Router's effects for what the socket refused,
        and anything that was not a message, to carry out with the turn's."""
        later: list[Effect] = []
        for effect in effects:
            if isinstance(effect, Send):
                later += self.send_to(effect.role, effect.identity, [effect])
            else:
                later.append(effect)
        return later

    def send_to(self, role: str, identity: bytes, sends: list[Send]) -> list[Effect]:
        """Send in batches; the Router's effects for what the socket refused."""
        sock, sent = self.endpoints.sockets[role], 0
        refused: list[Effect] = []
        for count, frame in frames([send.message for send in sends], self.settings.max_frame_bytes):
            try:
                sock.send(identity, zmq.SNDMORE | zmq.NOBLOCK)
                sock.send(frame, zmq.NOBLOCK)
            except zmq.ZMQError:  # EHOSTUNREACH or full: the peer is gone or not reading
                # One client_gone line, however many answers it missed; a worker is lost at
                # once, and what was refused here never reached it, so is not a delivery.
                unsent = [send.message.message_id for send in sends[sent:] if hasattr(send.message, "message_id")]
                return refused + self.core.undeliverable(sends[sent], time.monotonic(), count=len(sends) - sent,
                                                         unsent=unsent)
            sent += count
        return refused

    def flush_trace(self) -> None:
        """Write the turn's trace lines; a failure or a recovery changes the storage state."""
        storage, writer = self.storage, self.writer
        now = time.monotonic()
        if "journal" in storage.failing and storage.due("journal", now) and self.journal.probe() is None:
            self(storage.recovered("journal", now))
        error = writer.flush()
        if error is not None:
            self(storage.failed("trace", error, now))
        elif "trace" in storage.failing:
            self(storage.recovered("trace", now, lines_dropped=writer.dropped))
            writer.flush()
        self.core.disk_full = storage.reason()
