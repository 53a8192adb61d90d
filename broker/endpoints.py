"""The broker's sockets: one ROUTER per role, the trace's XPUB, and what a turn reads.

Data: frames from every peer, each with the identity ZeroMQ gave its connection and, on
the intake endpoint, the CURVE key the authenticator proved (the ZAP user id).
Readers: the loop (broker.app) reads a turn's messages here; broker.carry sends on these
sockets and publishes the trace.
Rationale: a turn reads up to BATCH messages and TURN_BYTES per socket, so no endpoint
starves the others and a turn's copies stay small; every frame is decoded by its
endpoint's own decoder (wire.inbound_decoder), so what a role may send is fixed here,
before the Router sees it. A port that cannot be bound is a configuration error naming
the endpoint and the setting that moves it. The trace is published on an XPUB socket, which
hands the broker each subscription, so it knows whether anyone watches: with no subscriber
(most runs, every benchmark) the turn's lines are not made public at all, which was a sixth
of the broker's CPU, for lines ZeroMQ would have dropped anyway.
"""

from __future__ import annotations

import time

import zmq

from airlock.errors import ConfigError
from airlock.keys import Pair
from airlock.settings import PORT_IN_USE_HINT, Settings
from airlock.transport import LINGER_MS, keep_alive, router, serve_curve
from airlock.wire import ROLES, Malformed, RoleDecoder, inbound_decoder
from broker import handshakes
from broker.outbox import Effect
from broker.router import Router
from broker.stall import StallWatch

BATCH = 1024  # messages read from one socket per turn, so no endpoint starves the others
TURN_BYTES = 8 * 1024 * 1024  # frame bytes read from one socket per turn: a turn's copies stay small
# Frames libzmq holds per intake connection before TCP pushes back on the client. Clients
# may send hundreds of 256 KiB emails at once; unread they would sit in the broker's memory,
# past AIRLOCK_QUEUE_MAX_BYTES, which counts only what the broker has taken.
INTAKE_RCVHWM = 16


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
    if signed:  # a Frame, which carries the ZAP user id
        frame = sock.recv(copy=False)
        payload, key = frame.bytes, _proven_key(frame)
    else:
        payload, key = sock.recv(), ""
    if sock.getsockopt(zmq.RCVMORE):
        while sock.getsockopt(zmq.RCVMORE):
            sock.recv()
        return identity, None, ""
    return identity, payload, key


def _proven_key(frame: zmq.Frame) -> str:
    """The CURVE public key (z85) the authenticator proved for the frame's sender; "" without CURVE."""
    try:
        key = frame.get("User-Id")  # a property pyzmq gives as text (options are numbers)
    except zmq.ZMQError:  # no ZAP handler: nobody was authenticated
        return ""
    return key if isinstance(key, str) else ""


def bind_error(name: str, endpoint: str, exc: zmq.ZMQError) -> ConfigError:
    """The one line a bind failure becomes: which endpoint, why, and which setting moves it."""
    hint = PORT_IN_USE_HINT if exc.errno == zmq.EADDRINUSE else f"check AIRLOCK_{name.upper()}_BIND_HOST"
    return ConfigError(f"cannot listen on {endpoint} ({name}, AIRLOCK_{name.upper()}_PORT): {exc.strerror}; {hint}")


class Endpoints:
    def __init__(self, ctx: zmq.Context, settings: Settings, server: Pair | None) -> None:
        """Bind every endpoint; ConfigError (bind_error) if one cannot be. The caller then
        destroys `ctx`, which closes every socket, the one whose bind failed included."""
        self.server = server
        self.sockets: dict[str, zmq.Socket] = {}
        self.publisher = ctx.socket(zmq.XPUB)
        self.publisher.setsockopt(zmq.LINGER, 0)
        keep_alive(self.publisher)  # a subscriber may hear nothing for hours: see airlock/transport.py
        self.topics: set[bytes] = set()  # what subscribers asked for (XPUB tells each topic's first and last)
        serve_curve(self.publisher, server, "trace")  # only the dashboard's key may read the trace stream
        for name in (*ROLES, "trace"):
            first, *more = settings.bind_endpoints(name)  # more: a swarm's published port (bindhosts)
            endpoint = first
            try:
                if name == "trace":
                    self.publisher.bind(first)
                    sock = self.publisher
                else:
                    sock = self.sockets[name] = router(ctx, first, settings.max_frame_bytes, server, name,
                                                       **({"rcvhwm": INTAKE_RCVHWM} if name == "intake" else {}))
                for endpoint in more:
                    sock.bind(endpoint)
            except zmq.ZMQError as exc:
                # A port in use stays in use: exit EX_CONFIG (never restarted), naming the port.
                raise bind_error(name, endpoint, exc) from None
        self.roles = {sock: role for role, sock in self.sockets.items()}
        self.decoders: dict[str, RoleDecoder] = {role: inbound_decoder(role) for role in ROLES}
        self.poller = zmq.Poller()
        self.monitors: dict[zmq.Socket, str] = {}  # handshake monitor -> role (see listen)

    def listen(self) -> None:
        """Poll every endpoint; with CURVE, watch each one's handshakes too: peers refused
        there never send a frame, and the monitor is how the broker still counts them."""
        for sock in (*self.sockets.values(), self.publisher):
            self.poller.register(sock, zmq.POLLIN)
        self.monitors = {sock.get_monitor_socket(handshakes.FAILURES): role
                         for role, sock in self.sockets.items()} if self.server is not None else {}
        for monitor in self.monitors:
            self.poller.register(monitor, zmq.POLLIN)

    def read(self, core: Router, watch: StallWatch, wait_s: float) -> list[Effect]:
        """Wait up to `wait_s` for frames; hand each message read to the Router, each failed
        handshake to broker.handshakes; their effects, in the order they came. The queues
        are served after, once, by the Router's tick: every Hello of the turn is in by then,
        so no work goes to a connection a newer one of its worker replaces (broker.workers)."""
        effects: list[Effect] = []
        for sock, _ in self.poller.poll(int(wait_s * 1000)):
            if sock is self.publisher:
                self.subscriptions()
                continue
            if sock in self.monitors:
                effects += handshakes.failures(core.counters, sock, self.monitors[sock], watch)
                continue
            role = self.roles[sock]
            decode = self.decoders[role]
            taken = taken_bytes = 0
            while taken < BATCH and taken_bytes < TURN_BYTES:
                try:
                    identity, payload, key = recv_routed(sock, signed=role == "intake")
                except zmq.Again:
                    break
                taken_bytes += len(payload) if payload is not None else 0
                messages = decode.frame(payload) if payload is not None else [Malformed(
                    reason="expected exactly one frame", size=0)]
                effects += core.handle_frame(role, identity, messages, time.monotonic(), key, serve=False)
                taken += len(messages)
        return effects

    def subscriptions(self) -> None:
        """Take what subscribers said: b"\\x01" + topic to subscribe, b"\\x00" + topic to leave
        (also said for a subscriber that disconnects). Anything else is not a subscription."""
        while True:
            try:
                said = self.publisher.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            if said[:1] == b"\x01":
                self.topics.add(said[1:])
            elif said[:1] == b"\x00":
                self.topics.discard(said[1:])

    @property
    def watched(self) -> bool:
        """Whether any subscriber is connected to the trace stream now."""
        return bool(self.topics)

    def close(self) -> None:
        for sock in self.sockets.values():
            if self.server is not None:
                sock.disable_monitor()
        for sock in (*self.monitors, *self.sockets.values(), self.publisher):
            sock.close(linger=LINGER_MS)
