"""The broker's process: sockets in, Router decisions, then journal, sockets and trace out.

One turn (Broker.turn): read up to BATCH messages per socket (broker.endpoints), greet each
new worker connection (one gone already is buried before it can be given work), read back
what the journal's backlog has room for (broker.recovery), tick the Router, carry out the
turn's effects in the order that makes the guarantees hold (broker.carry: journal fsynced
once for the turn before any Accepted leaves, trace lines flushed at the end), then the
housekeeping that keeps files and memory bounded (broker.housekeeping). At start, what an
earlier broker left is dispatched again (broker.recovery); a full disk is a state, not a
crash (broker.storage).
"""

from __future__ import annotations

import collections
import sys
import threading
import time
from dataclasses import dataclass, field

import zmq
from zmq.auth.thread import ThreadAuthenticator

from airlock import keys, locks, records, trace
from airlock.errors import EX_TEMPFAIL, ConfigError
from airlock.records import Started, Stopped, utc_now
from airlock.settings import Settings
from airlock.terminal import json_line
from broker import auth, ids
from broker.carry import CarryOut
from broker.endpoints import Endpoints
from broker.folding import Folder
from broker.housekeeping import checkpoint, compact, compaction_due
from broker.journal import Journal, Position
from broker.recovery import damage_detail, recover, refill
from broker.router import Router
from broker.stall import StallWatch
from broker.storage import Storage

IDLE_POLL_S = 0.1  # the longest a turn waits for a frame: ticks (heartbeats, deadlines) need turns


def serve(settings: Settings, task: object, stop: threading.Event) -> None:
    """Run until `stop` is set. The broker needs no task: it routes by message type only.
    One broker per data dir, whoever started it: a second raises LockHeld (exit 78) naming
    the first, before any port opens (airlock.locks). A `subnet:` or `default-route` bind
    host (a swarm, with no static addresses) becomes this host's address there first, or ConfigError."""
    settings = settings.with_bind_hosts_resolved()
    with locks.hold(settings.data_dir / locks.BROKER_LOCK, "broker", "stop it first, or set another AIRLOCK_DATA_DIR"):
        _serve(settings, stop)


def _serve(settings: Settings, stop: threading.Event) -> None:
    secure = auth.required(settings)  # ConfigError before any port opens: no keys, no switch
    ctx = zmq.Context()
    authenticator, server = auth.start(ctx, settings) if secure else (None, None)
    try:
        endpoints = Endpoints(ctx, settings, server)
    except ConfigError:  # a port in use stays in use: exit EX_CONFIG (never restarted), naming it
        _abort(ctx, authenticator)
        raise
    journal = _open_journal(settings, ctx, authenticator)
    boot = _take_boot(settings, journal, ctx, authenticator)
    writer = trace.TraceWriter(settings.trace_path, settings.trace_segment_bytes)
    # Without keys (AIRLOCK_INSECURE) no key is proven, so neither a decision nor a sender proof is taken.
    folder = settings.keys_folder if server is not None else None
    core = Router(settings, boot=boot, approvers=keys.approvers(folder) if folder is not None else {},
                  smtp_keys=keys.smtp_keys(folder) if folder is not None else (),
                  client_roles=keys.client_roles(folder) if folder is not None else {})
    endpoints.listen()
    watch = StallWatch().start()  # tells a stopped broker's dropped handshakes from refusals
    carry_out = CarryOut(settings, core, endpoints, journal, writer, Storage(core.counters))
    broker = Broker(settings, core, endpoints, journal, writer, carry_out, watch, Folder(settings))
    broker.start(secure=server is not None)
    try:
        while not stop.is_set():
            broker.turn()
    finally:
        broker.stop()
        if authenticator is not None:
            authenticator.stop()
        watch.stop()
        ctx.term()


def _abort(ctx: zmq.Context, authenticator: ThreadAuthenticator | None) -> None:
    """Undo a start that cannot go on: every socket closed, the one that failed included."""
    if authenticator is not None:
        authenticator.stop()
    ctx.destroy(linger=0)


def _open_journal(settings: Settings, ctx: zmq.Context, authenticator: ThreadAuthenticator | None) -> Journal:
    path = settings.data_dir / "journal.bin"
    try:
        return Journal(path, settings.journal_compact_bytes)
    except OSError as exc:  # a full disk or an I/O error before it could start its journal
        _abort(ctx, authenticator)
        print(f"broker: cannot open {path}: {exc}; exiting 75 (EX_TEMPFAIL) to be started again",
              file=sys.stderr, flush=True)
        raise SystemExit(EX_TEMPFAIL) from None


def _take_boot(settings: Settings, journal: Journal, ctx: zmq.Context,
               authenticator: ThreadAuthenticator | None) -> int:
    """This start's boot number, above every one the data dir has taken (broker.ids), on disk
    before any id is handed out. The journal's ids count always; the trace's and the call
    log's (their ends) only when the saved number is missing (a data dir an older broker made)."""
    seen: list[str] = list(journal.sizes)
    if ids.last_boot(settings.data_dir) is None:
        seen += ids.held_in_history(settings.trace_path, settings.calls_path)
    try:
        return ids.take_boot(settings.data_dir, seen)
    except ids.BootUnsaved as exc:
        journal.close()
        _abort(ctx, authenticator)
        print(f"broker: {exc.strerror}; exiting 75 (EX_TEMPFAIL) to be started again", file=sys.stderr, flush=True)
        raise SystemExit(EX_TEMPFAIL) from None


@dataclass
class Broker:
    """The running broker's parts, and the steps of its life: start, turn, stop."""

    settings: Settings
    core: Router
    endpoints: Endpoints
    journal: Journal
    writer: trace.TraceWriter
    carry_out: CarryOut
    watch: StallWatch
    folder: Folder  # folds closed trace segments into the checkpoint, off the loop
    # Journalled emails still on disk, waiting for room (broker.recovery).
    backlog: collections.deque[Position] = field(default_factory=collections.deque)

    def start(self, secure: bool) -> None:
        """Say so, fold what a crash left unfolded, then dispatch again what an earlier
        broker accepted and never finished."""
        self.carry_out([self._started_line(secure)])
        self.carry_out.flush_trace()  # on disk before recovery reads the trace: a slow start shows how far it got
        # A segment closed at start (an old single-file trace) or left unfolded by a crash is
        # folded into the checkpoint first, so it is read once, and recovery reads the rest.
        self.carry_out(checkpoint(self.settings, self.writer, self.journal))
        recovered, self.backlog = recover(self.core, self.settings, self.journal, time.monotonic())
        if self.journal.damage:  # on stderr too: the supervisor's log is where an operator looks first
            print(f"broker: journal damaged, skipped: {json_line(damage_detail(self.journal))}; "
                  "emails it cost end failed, naming it", file=sys.stderr, flush=True)
        if self.writer.repaired is not None:  # a crash mid-line: cut off at open (airlock.appendlog)
            cut = self.writer.repaired
            print(f"broker: {self.settings.trace_path.name} ended in a partial line (a crash mid-write): "
                  f"its last {cut.end - cut.start} bytes were cut off at open", file=sys.stderr, flush=True)
        self.carry_out(recovered)
        self.carry_out.flush_trace()

    def turn(self) -> None:
        core = self.core
        deadline = core.next_deadline()
        wait_s = IDLE_POLL_S if deadline is None else max(0.0, min(IDLE_POLL_S, deadline - time.monotonic()))
        effects = self.endpoints.read(core, self.watch, wait_s)
        # Sent now: a connection gone already is buried before any work goes to it; what that
        # leads to (worker_lost) is carried out with the turn's effects, after its worker_joined.
        effects += self.carry_out.send_now(core.greetings())
        if self.backlog:
            effects += refill(core, self.journal, self.backlog, time.monotonic())
        effects += core.tick(time.monotonic())
        self.carry_out(effects)
        self.carry_out.flush_trace()
        self.housekeep()

    def housekeep(self) -> None:
        """Have a closed trace segment folded (on the folder's thread: here, a copy of the
        journal's ids), write what finished folds say; compact the journal when it is worth it."""
        if self.writer.rotated:
            self.writer.rotated = False
            self.folder.ask(self.journal.sizes.keys())
        if folded := self.folder.take():
            self.carry_out(folded)
        # Not while a fold runs: a compaction first fsyncs the segments closed since the trace's
        # last sync (TraceWriter.sync), which the fold does on its thread; after it, that is quick.
        if not self.folder.busy and compaction_due(self.core, self.journal, self.carry_out.storage, self.backlog):
            self.carry_out(compact(self.core, self.journal, self.writer))
            self.carry_out.flush_trace()

    def stop(self) -> None:
        self.carry_out(self.folder.stop())  # a fold under way finishes (the next start does one not begun)
        self.carry_out([records.encode(Stopped(utc_now(), None, "broker", in_flight=len(self.core.flights)))])
        if self.writer.close() is not None:  # the journal keeps their emails: the next start redoes them
            print(f"broker: stopped with trace lines unwritten ({self.writer.failing}); the journal keeps "
                  "every email they were about", file=sys.stderr, flush=True)
        self.journal.close()
        self.endpoints.close()

    def _started_line(self, secure: bool) -> bytes:
        settings = self.settings
        return records.encode(Started(
            utc_now(), None, "broker",
            endpoints={name: " ".join(settings.bind_endpoints(name)) for name in settings.ports},
            trace=str(settings.trace_path),
            authentication="CURVE, one key per role, ZAP allow lists" if secure else auth.OFF,
            sender_proofs=("kept from the SMTP intake's key only" if self.core.smtp_keys
                           else "none kept (no SMTP intake key): every sender is unverified"),
            insecure=not secure))
