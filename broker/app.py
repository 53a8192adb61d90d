"""The broker's loop: sockets in, Router decisions, sockets and trace file out."""

from __future__ import annotations

import threading
import time

import zmq

from airlock import trace
from airlock.settings import Settings
from airlock.transport import LINGER_MS, recv_routed, router
from airlock.wire import ROLES, Malformed, encode, inbound_decoder
from broker.router import Router, Send

BATCH = 256  # frames read from one socket per turn, so no endpoint starves the others
IDLE_POLL_S = 0.1


def serve(settings: Settings, task: object, stop: threading.Event) -> None:
    """Run until `stop` is set. The broker needs no task: it routes by message type only."""
    ctx = zmq.Context()
    sockets = {role: router(ctx, settings.endpoint(role, bind=True), settings.max_frame_bytes)
               for role in ROLES}
    publisher = ctx.socket(zmq.PUB)
    publisher.setsockopt(zmq.LINGER, 0)
    publisher.bind(settings.endpoint("trace", bind=True))
    roles_by_socket = {sock: role for role, sock in sockets.items()}
    decoders = {role: inbound_decoder(role) for role in ROLES}
    writer = trace.TraceWriter(settings.trace_path)
    core = Router(settings)
    poller = zmq.Poller()
    for sock in sockets.values():
        poller.register(sock, zmq.POLLIN)

    def apply(effects: list[Send | bytes]) -> None:
        for effect in effects:
            if isinstance(effect, bytes):
                writer.write(effect)
                publisher.send(effect)
                continue
            try:
                sock = sockets[effect.role]
                sock.send(effect.identity, zmq.SNDMORE | zmq.NOBLOCK)
                sock.send(encode(effect.message), zmq.NOBLOCK)
            except zmq.ZMQError:  # EHOSTUNREACH or full: the peer is gone or not reading
                apply(core.undeliverable(effect, time.monotonic()))

    apply([trace.line("broker", "started", None, {
        "endpoints": {name: settings.endpoint(name, bind=True) for name in settings.ports},
        "trace": str(settings.trace_path)})])
    # Until intake is journalled, an email a dead broker held cannot be resumed; it must
    # still end with exactly one recorded outcome, so it ends here as failed.
    lost, escalated = trace.unfinished(settings.trace_path)
    for message_id in lost:
        apply(core.abandon(message_id, "the broker restarted before this email finished"))
    for message_id in escalated:
        core.still_escalated(message_id, time.monotonic())
    writer.flush()
    try:
        while not stop.is_set():
            deadline = core.next_deadline()
            wait_s = IDLE_POLL_S if deadline is None else max(0.0, min(IDLE_POLL_S, deadline - time.monotonic()))
            for sock, _ in poller.poll(int(wait_s * 1000)):
                role, decode = roles_by_socket[sock], decoders[roles_by_socket[sock]]
                for _ in range(BATCH):
                    try:
                        identity, payload = recv_routed(sock)
                    except zmq.Again:
                        break
                    message = decode(payload) if payload is not None else Malformed(
                        reason="expected exactly one frame", size=0)
                    apply(core.handle(role, identity, message, time.monotonic()))
            apply(core.tick(time.monotonic()))
            writer.flush()
    finally:
        apply([trace.line("broker", "stopped", None, {"in_flight": len(core.flights)})])
        writer.close()
        for sock in (*sockets.values(), publisher):
            sock.close(linger=LINGER_MS)
        ctx.term()
