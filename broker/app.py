"""The broker's loop: sockets in, Router decisions, then journal, sockets and trace out.

Each turn reads up to BATCH messages per socket, then carries out the turn's effects in an
order that makes the guarantees hold: journal entries are written and fsynced once for the
whole turn (group commit) before any Accepted reply leaves, and trace lines are flushed at
the end of the turn. What goes to one peer in a turn leaves as one batch frame (wire.frames),
and the turn's trace lines in as few published frames as fit.
"""

from __future__ import annotations

import collections
import ctypes
import errno
import os
import sys
import threading
import time
from collections.abc import Sequence

import zmq
from zmq.utils.monitor import recv_monitor_message

from airlock import keys, locks, published, trace, tracefiles
from airlock.errors import EX_TEMPFAIL, ConfigError
from airlock.settings import PORT_IN_USE_HINT, Settings
from airlock.terminal import json_line
from airlock.transport import LINGER_MS, router, serve_curve
from airlock.wire import (
    ROLES,
    Accepted,
    Malformed,
    Refused,
    batch_limit,
    frames,
    grouped,
    inbound_decoder,
)
from broker import auth
from broker import journal as journal_module
from broker.journal import Entry, Journal, Position
from broker.router import Router, Send
from broker.stall import StallWatch
from broker.storage import Storage

BATCH = 1024  # messages read from one socket per turn, so no endpoint starves the others
TURN_BYTES = 8 * 1024 * 1024  # frame bytes read from one socket per turn: a turn's copies stay small
# Frames libzmq holds per intake connection before TCP pushes back on the client. Clients
# may send hundreds of 256 KiB emails at once; unread they would sit in the broker's memory,
# past AIRLOCK_QUEUE_MAX_BYTES, which counts only what the broker has taken.
INTAKE_RCVHWM = 16
IDLE_POLL_S = 0.1


def _chunks(lines: list[bytes], max_frame_bytes: int) -> list[bytes]:
    """Whole trace lines joined into chunks a subscriber's frame cap takes: one PUB frame each."""
    return [b"".join(group) for group in grouped(lines, batch_limit(max_frame_bytes))]


def recv_routed(sock: zmq.Socket, signed: bool = False) -> tuple[bytes, bytes | None, str]:
    """Read one routed message (identity, payload, key) without blocking.

    Explicit frame calls are several times cheaper than recv_multipart. A message with other
    than exactly one payload frame returns payload None, after draining its frames. With
    `signed`, `key` is the sender's CURVE public key (z85) as the authenticator proved it
    (the ZAP user id), "" without CURVE: what a decision is checked against.
    """
    identity = sock.recv(zmq.NOBLOCK)
    if not sock.getsockopt(zmq.RCVMORE):
        return identity, None, ""
    frame = sock.recv(copy=not signed)
    if sock.getsockopt(zmq.RCVMORE):
        while sock.getsockopt(zmq.RCVMORE):
            sock.recv()
        return identity, None, ""
    if not signed:
        return identity, frame, ""
    try:
        key = frame.get("User-Id") or ""
    except zmq.ZMQError:  # no ZAP handler: nobody was authenticated
        key = ""
    return identity, frame.bytes, key


HANDSHAKE_FAILURES = (zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
                      | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL)
_EVENT_NAMES = {zmq.EVENT_HANDSHAKE_FAILED_AUTH: "key not allowed on this endpoint",
                zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL: "handshake protocol error (e.g. a peer without CURVE)",
                zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL: "handshake failed"}


def _handshake_failures(core: Router, monitor: zmq.Socket, role: str, watch: StallWatch) -> list[Send | bytes | Entry]:
    """Trace each failed handshake as what it was. A key the authenticator denied, or a
    peer that failed CURVE (a protocol error: no CURVE, bad crypto), is `auth_refused`; so
    is a handshake that ended with no verdict (errno only), as a peer without CURVE often
    does by hanging up on the broker's greeting. But one that ended so while the broker
    itself was stopped, or just after (broker.stall: SIGSTOP, a paused container), is the
    stop's doing: the stack's own services gave up waiting and reconnected. That is
    `handshake_failed`, with its errno and the stop's length, counted apart."""
    effects: list[Send | bytes | Entry] = []
    while True:
        try:
            event = recv_monitor_message(monitor, zmq.NOBLOCK)
        except zmq.Again:
            return effects
        peer = event["endpoint"].decode(errors="replace")
        stalled_s = watch.stalled(time.monotonic())
        if event["event"] == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL and stalled_s:
            value = event["value"]
            core.counters[f"handshake_failed.{role}"] += 1
            effects.append(trace.line("broker", "handshake_failed", None, {
                "endpoint": role, "peer": peer, "errno": errno.errorcode.get(value, str(value)),
                "stalled_s": round(stalled_s, 1),
                "reason": f"the handshake ended with no verdict ({os.strerror(value)}) as the broker was stopped "
                          f"for {stalled_s:.0f} s: its peers gave up waiting; not a refusal"}))
            continue
        core.counters[f"auth_refused.{role}"] += 1
        effects.append(trace.line("broker", "auth_refused", None, {
            "endpoint": role, "reason": _EVENT_NAMES.get(event["event"], str(event["event"])), "peer": peer}))


def bind_error(name: str, endpoint: str, exc: zmq.ZMQError) -> ConfigError:
    """The one line a bind failure becomes: which endpoint, why, and which setting moves it."""
    hint = PORT_IN_USE_HINT if exc.errno == zmq.EADDRINUSE else f"check AIRLOCK_{name.upper()}_BIND_HOST"
    return ConfigError(f"cannot listen on {endpoint} ({name}, AIRLOCK_{name.upper()}_PORT): {exc.strerror}; {hint}")


def _unkept(send: Send, refused: set[str], why: str) -> Send:
    """An Accepted for an email whose journal record did not reach the disk, as the Refused
    disk_full it is (broker.storage); any other reply as it was."""
    message = send.message
    if isinstance(message, Accepted) and message.message_id in refused:
        return Send(send.role, send.identity, Refused(
            ref=message.ref, code="disk_full",
            reason=f"not accepted: disk full ({why}); nothing was kept, send it again later"))
    return send


def recover(core: Router, settings: Settings, journal: Journal,
            now: float) -> tuple[list[Send | bytes | Entry], collections.deque[Position]]:
    """Re-dispatch what an earlier broker accepted and never finished; keep escalations open.

    Only what fits under AIRLOCK_QUEUE_MAX_BYTES is read into memory; the rest waits on disk
    (the backlog returned, in journal order) and refill() reads it as readers make room, so
    a restart holds no more than a running broker would. The states come from the trace's
    checkpoint and live segment (airlock.tracefiles), never from all of history."""
    state = trace.states(settings.trace_path)
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
                if isinstance(entry, Entry):
                    core.recover(entry, now)
                else:
                    unreadable.append(position.message_id)
        state[position.message_id] = "journalled"
    # An email's `received` line reaches the trace only after its journal record is on disk
    # (carry_out), or in the same write as its `failed` outcome when that record could not
    # be written; so one still open with no record was accepted, and its record was lost
    # to the damage found at open, if there was any. With none, the journal is whole and
    # the email was never accepted.
    lost = damage_reason(journal.damage)  # read after the pass above: what it met is in it
    effects: list[Send | bytes | Entry] = []
    abandoned = 0
    for message_id, what in state.items():
        if what == "open":  # received, no record: nothing to resume
            abandoned += 1
            effects += core.abandon(message_id, lost or "the broker stopped before accepting this email")
        elif what == "escalated":
            core.still_escalated(message_id, now)
    for message_id in unreadable:
        effects += core.abandon(message_id, UNREADABLE)
    if journal.damage:
        effects.insert(0, trace.line("broker", "journal_damaged", None, {
            **damage_detail(journal), "emails_lost": abandoned}))
    return effects + core.tick(now), backlog


try:  # glibc's: hand the heap's free pages back to the kernel (absent on musl or macOS)
    _malloc_trim = ctypes.CDLL("libc.so.6").malloc_trim
except (OSError, AttributeError):
    _malloc_trim = None


def give_back_memory() -> None:
    """After a fold or a compaction, which free many objects at once (a segment's states, a
    journal index): hand glibc's free pages back rather than keep them. A walk of the heap,
    a few ms, every ~20,000 emails. Measured with `airlock bench --soak 10 --rate 400`
    (2026-11-30) it lowered the broker's late growth from 12.95 to 9.57 MiB per 100,000
    emails; that growth itself was the memory of finished outcomes stepping up once at
    ~175,000 emails (see broker.recent), not the allocator."""
    if _malloc_trim is not None:
        _malloc_trim(0)


def checkpoint(settings: Settings, writer: trace.TraceWriter, journal: Journal) -> list[Send | bytes | Entry]:
    """Once the trace closed a segment (or a crash left one unfolded): fold it into the
    checkpoint, so the next restart reads the checkpoint and the live segment only. The
    journal says which final emails must stay in it (airlock.tracefiles)."""
    writer.rotated = False
    try:
        taken = tracefiles.write_checkpoint(settings.trace_path, journal.sizes.keys(), settings.trace_keep_segments)
    except OSError as exc:  # a full disk: the old checkpoint stands; the next restart reads more
        return [trace.line("broker", "trace_checkpoint_failed", None, {"error": str(exc)})]
    give_back_memory()
    if taken is None:
        return []
    return [trace.line("broker", "trace_checkpoint", None, {"through_segment": taken.through,
                                                              "emails": len(taken.states)})]


def damage_reason(damage: list[journal_module.Damage]) -> str:
    """Why an accepted email has no journal record: the damaged ranges, or "" if none."""
    if not damage:
        return ""
    ranges = ", ".join(f"{d.start}-{d.end}" for d in damage[:5]) + (" ..." if len(damage) > 5 else "")
    return (f"accepted, but its journal record was lost to damage in journal.bin (bytes {ranges} "
            "skipped; see the journal_damaged event)")


def damage_detail(journal: Journal) -> dict[str, object]:
    """The journal_damaged line's detail (and the stderr report): what was skipped, where."""
    return {"path": str(journal.path), "ranges_skipped": len(journal.damage),
            "bytes_skipped": sum(d.end - d.start for d in journal.damage),
            "ranges": [[d.start, d.end] for d in journal.damage[:100]],
            "torn_tail": any(d.torn_tail for d in journal.damage)}


UNREADABLE = "accepted, but its journal record could not be read back (damaged or an I/O error since the broker started)"


def refill(core: Router, journal: Journal, backlog: collections.deque[Position],
           now: float) -> list[Send | bytes | Entry]:
    """Read deferred emails back from the journal while they fit under the byte bound; one
    whose record cannot be read back ends failed, saying so."""
    effects: list[Send | bytes | Entry] = []
    while backlog and core.has_room(backlog[0].size):
        position = backlog.popleft()
        entry = journal.read(position)
        if isinstance(entry, Entry):
            core.recover(entry, now)
        else:
            effects += core.end_failed([position.message_id], UNREADABLE, now)
    return effects


def compact(core: Router, journal: Journal, writer: trace.TraceWriter) -> list[Send | bytes | Entry]:
    """Drop final emails from the journal once it is big and mostly final (broker.journal).
    The trace goes to disk first: it is what says those emails are final."""
    error = writer.sync()
    if error is not None or writer.dropped:  # the outcomes that free those records are not on disk
        return [trace.line("broker", "journal_compaction_failed", None, {
            "error": f"the trace is not on disk: {error or f'{writer.dropped} lines were dropped'}",
            "bytes": journal.size})]
    size = journal.size
    try:
        freed = journal.compact(core.flights.keys())
    except OSError as exc:  # a full disk: the old journal is whole; say so and carry on
        return [trace.line("broker", "journal_compaction_failed", None, {"error": str(exc), "bytes": size})]
    give_back_memory()
    return [trace.line("broker", "journal_compacted", None, {
        "bytes_before": size, "bytes_after": journal.size, "freed": freed, "live": len(journal.sizes)})]


def serve(settings: Settings, task: object, stop: threading.Event) -> None:
    """Run until `stop` is set. The broker needs no task: it routes by message type only.
    One broker per data dir, whoever started it: a second raises LockHeld (exit 78) naming
    the first, before any port opens (airlock.locks)."""
    with locks.hold(settings.data_dir / locks.BROKER_LOCK, "broker", "stop it first, or set another AIRLOCK_DATA_DIR"):
        _serve(settings, task, stop)


def _serve(settings: Settings, task: object, stop: threading.Event) -> None:
    secure = auth.required(settings)  # ConfigError before any port opens: no keys, no switch
    ctx = zmq.Context()
    authenticator, server = auth.start(ctx, settings) if secure else (None, None)
    sockets: dict[str, zmq.Socket] = {}
    publisher = ctx.socket(zmq.PUB)
    publisher.setsockopt(zmq.LINGER, 0)
    serve_curve(publisher, server, "trace")  # only the dashboard's key may read the trace stream
    try:
        for name in (*ROLES, "trace"):
            endpoint = settings.endpoint(name, bind=True)
            if name == "trace":
                publisher.bind(endpoint)
            else:
                sockets[name] = router(ctx, endpoint, settings.max_frame_bytes, server, name,
                                       **({"rcvhwm": INTAKE_RCVHWM} if name == "intake" else {}))
    except zmq.ZMQError as exc:
        # A port in use stays in use: exit EX_CONFIG (never restarted), naming the port.
        if authenticator is not None:
            authenticator.stop()
        ctx.destroy(linger=0)  # closes every socket, the one whose bind failed included
        raise bind_error(name, endpoint, exc) from None
    roles_by_socket = {sock: role for role, sock in sockets.items()}
    decoders = {role: inbound_decoder(role) for role in ROLES}
    try:
        journal = Journal(settings.data_dir / "journal.bin", settings.journal_compact_bytes)
    except OSError as exc:  # a full disk or an I/O error before it could start its journal
        if authenticator is not None:
            authenticator.stop()
        ctx.destroy(linger=0)
        print(f"broker: cannot open {settings.data_dir / 'journal.bin'}: {exc}; exiting 75 (EX_TEMPFAIL) "
              "to be started again", file=sys.stderr, flush=True)
        raise SystemExit(EX_TEMPFAIL) from None
    writer = trace.TraceWriter(settings.trace_path, settings.trace_segment_bytes)
    # Without keys (AIRLOCK_INSECURE) no key is proven, so neither a decision nor a sender proof is taken.
    core = Router(settings, approvers=keys.approvers(settings.keys_folder) if server is not None else {},
                  smtp_keys=keys.smtp_keys(settings.keys_folder) if server is not None else ())
    poller = zmq.Poller()
    for sock in sockets.values():
        poller.register(sock, zmq.POLLIN)
    # Peers refused at the CURVE handshake never send a frame; the socket monitor is how
    # the broker still counts and records them.
    monitors = {sock.get_monitor_socket(HANDSHAKE_FAILURES): role for role, sock in sockets.items()} \
        if server is not None else {}
    for monitor in monitors:
        poller.register(monitor, zmq.POLLIN)
    watch = StallWatch().start()  # tells a stopped broker's dropped handshakes from refusals

    def carry_out(effects: Sequence[Send | bytes | Entry]) -> None:
        lines: list[bytes] = []
        outgoing: dict[tuple[str, bytes], list[Send]] = {}  # per peer, in order: one batch each
        for effect in effects:
            if isinstance(effect, Entry):
                journal.append(effect)
            elif isinstance(effect, bytes):
                lines.append(effect)
            else:
                outgoing.setdefault((effect.role, effect.identity), []).append(effect)
        # Work goes to the workers first, before the fsync, so a reader starts on an email
        # while it reaches the disk; only the intake's replies (an Accepted promises the
        # email is kept) wait for it. A crash in between leaves an email received but never
        # accepted: recovery gives it the outcome `failed` (see recover). The trace lines
        # come last: they reach the file at the end of the turn either way, and every
        # message that waits for them waits at every hop. If the sync fails (a full disk, an
        # I/O error), nothing of it was kept: those Accepted leave as Refused disk_full and
        # each of those emails ends failed in this turn's lines (broker.storage).
        later: list[Send | bytes | Entry] = []
        for (role, identity), sends in outgoing.items():
            if role != "intake":
                later += send_to(role, identity, sends)
        failed = journal.sync()
        refuse: set[str] = set()
        if failed is not None:  # none of them kept: refused, and each ends failed (Router.end_failed)
            later += storage.failed("journal", failed.error, time.monotonic())
            core.disk_full = storage.reason()
            core.counters["refused.disk_full"] += len(failed.message_ids)
            later += core.end_failed(failed.message_ids, "not accepted: its journal record could not be "
                                     f"written ({failed.error})", time.monotonic())
            refuse = set(failed.message_ids)
        for (role, identity), sends in outgoing.items():
            if role == "intake":
                later += send_to(role, identity, [_unkept(send, refuse, core.disk_full)
                                                  for send in sends] if refuse else sends)
        for chunk in _chunks(lines, settings.max_frame_bytes):
            writer.write(chunk)
        # Subscribers get each line as airlock.published shows it (no customer data); the
        # file keeps the whole record. They split a frame at its newlines.
        for chunk in _chunks([published.line(line) for line in lines], settings.max_frame_bytes):
            publisher.send(chunk)
        if later:  # what a refused send led to comes after this turn's lines, as it happened
            carry_out(later)

    def send_to(role: str, identity: bytes, sends: list[Send]) -> list[Send | bytes | Entry]:
        """Send in batches; the Router's effects for what the socket refused."""
        sock, sent, refused = sockets[role], 0, []
        for count, frame in frames([send.message for send in sends], settings.max_frame_bytes):
            try:
                sock.send(identity, zmq.SNDMORE | zmq.NOBLOCK)
                sock.send(frame, zmq.NOBLOCK)
            except zmq.ZMQError:  # EHOSTUNREACH or full: the peer is gone or not reading
                if role == "intake":  # one client_gone line, however many answers it missed
                    return refused + core.undeliverable(sends[sent], time.monotonic(), count=len(sends) - sent)
                for send in sends[sent:sent + count]:
                    refused += core.undeliverable(send, time.monotonic())
            sent += count
        return refused

    def flush_trace() -> None:
        """Write the turn's trace lines; a failure or a recovery changes the storage state."""
        now = time.monotonic()
        if "journal" in storage.failing and storage.due("journal", now) and journal.probe() is None:
            carry_out(storage.recovered("journal", now))
        error = writer.flush()
        if error is not None:
            carry_out(storage.failed("trace", error, now))
        elif "trace" in storage.failing:
            carry_out(storage.recovered("trace", now, lines_dropped=writer.dropped))
            writer.flush()
        core.disk_full = storage.reason()

    storage = Storage(core.counters)
    carry_out([trace.line("broker", "started", None, {
        "endpoints": {name: settings.endpoint(name, bind=True) for name in settings.ports},
        "trace": str(settings.trace_path),
        "authentication": "CURVE, one key per role, ZAP allow lists" if server else auth.OFF,
        "sender_proofs": ("kept from the SMTP intake's key only" if core.smtp_keys
                          else "none kept (no SMTP intake key): every sender is unverified"),
        **({} if server else {"insecure": True})})])
    flush_trace()  # on disk before recovery reads the trace: a slow start shows how far it got
    # A segment closed at start (an old single-file trace) or left unfolded by a crash is
    # folded into the checkpoint first, so it is read once, and recovery reads the rest.
    carry_out(checkpoint(settings, writer, journal))
    recovered, backlog = recover(core, settings, journal, time.monotonic())
    if journal.damage:  # on stderr too: the supervisor's log is where an operator looks first
        print(f"broker: journal damaged, skipped: {json_line(damage_detail(journal))}; "
              "emails it cost end failed, naming it", file=sys.stderr, flush=True)
    carry_out(recovered)
    flush_trace()
    try:
        while not stop.is_set():
            deadline = core.next_deadline()
            wait_s = IDLE_POLL_S if deadline is None else max(0.0, min(IDLE_POLL_S, deadline - time.monotonic()))
            effects: list[Send | bytes | Entry] = []
            for sock, _ in poller.poll(int(wait_s * 1000)):
                if sock in monitors:
                    effects += _handshake_failures(core, sock, monitors[sock], watch)
                    continue
                role, decode = roles_by_socket[sock], decoders[roles_by_socket[sock]]
                taken = taken_bytes = 0
                while taken < BATCH and taken_bytes < TURN_BYTES:
                    try:
                        identity, payload, key = recv_routed(sock, signed=role == "intake")
                    except zmq.Again:
                        break
                    taken_bytes += len(payload) if payload is not None else 0
                    messages = decode.frame(payload) if payload is not None else [Malformed(
                        reason="expected exactly one frame", size=0)]
                    now = time.monotonic()
                    for message in messages:
                        effects += core.handle(role, identity, message, now, key)
                    taken += len(messages)
            if backlog:
                effects += refill(core, journal, backlog, time.monotonic())
            effects += core.tick(time.monotonic())
            carry_out(effects)
            flush_trace()
            if writer.rotated:
                carry_out(checkpoint(settings, writer, journal))
            # Offsets in the backlog point into this file: no rewrite until it is read. Nor
            # while a write fails: a copy of the journal needs space the disk has not got.
            if not backlog and not storage.failing and journal.worth_compacting(core.flights.keys(),
                                                                                 time.monotonic()):
                carry_out(compact(core, journal, writer))
                flush_trace()
    finally:
        carry_out([trace.line("broker", "stopped", None, {"in_flight": len(core.flights)})])
        if writer.close() is not None:  # the journal keeps their emails: the next start redoes them
            print(f"broker: stopped with trace lines unwritten ({writer.failing}); the journal keeps "
                  "every email they were about", file=sys.stderr, flush=True)
        journal.close()
        for sock in sockets.values():
            if server is not None:
                sock.disable_monitor()
        for sock in (*monitors, *sockets.values(), publisher):
            sock.close(linger=LINGER_MS)
        if authenticator is not None:
            authenticator.stop()
        watch.stop()
        ctx.term()
