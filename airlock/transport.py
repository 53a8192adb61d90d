"""How services talk: a tiny Channel interface, its ZeroMQ form and an in-memory double.

A worker (reader, validator, actor) holds one Channel to the broker: send a message, receive
a frame with a timeout. The broker side uses ROUTER sockets directly (see broker/endpoints.py).
Socket options that matter for safety are set here, once, with the reason:

- ROUTER_MANDATORY: a ROUTER silently drops a message to an unknown or full peer; with it
  the send raises, and the broker records what it could not deliver.
- MAXMSGSIZE: a peer that sends a frame over the limit is disconnected by libzmq before the
  frame is ever allocated in Python.
- LINGER: bounded, so closing never hangs on a peer that went away.
- High-water marks are set well above any credit window, so credit, not the HWM, limits
  how much is queued (see broker/workers.py).
- A CURVE client that a broker refuses at the handshake never receives a frame: libzmq
  only says so on the socket's monitor. A channel that watches its handshake turns that
  into KeyRefused, so a client with the wrong keys hears why, not a timeout.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from typing import Protocol

import zmq
from zmq.utils.monitor import recv_monitor_message

from airlock import keys
from airlock.errors import KeyRefused
from airlock.keys import Pair
from airlock.settings import Settings
from airlock.wire import Message, encode, frames

LINGER_MS = 1000
HWM = 100_000
# What a refused CURVE handshake looks like from the client's side (libzmq >= 4.3):
# the broker's ZAP handler denied the key (ERROR 400): the client key is not allowed;
# the broker closed the connection mid-handshake: most likely it could not read the HELLO,
# so the broker key this client holds is not the running broker's, but a broker going down
# mid-handshake looks the same; a protocol error: the peer does not speak CURVE at all.
# libzmq reconnects and fails again each time, so a failure without detail counts once it
# repeats, and is worded as the guess it is. The monitor is attached before the socket
# connects, so the first success is never missed: after it, nothing is counted.
HANDSHAKE_EVENTS = (zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_HANDSHAKE_FAILED_AUTH
                    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL)
HANDSHAKE_REFUSALS: dict[int, str] = {
    zmq.EVENT_HANDSHAKE_FAILED_AUTH: "the broker does not allow this client key",
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL: ("the broker closed the handshake: most likely the broker key here "
                                           "is not the running broker's, or the broker went down mid-handshake"),
    zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL: "the broker does not speak CURVE with this key"}
REPEATS_BEFORE_REFUSED = 2


class Channel(Protocol):
    def send(self, message: Message) -> None: ...
    def send_all(self, messages: list[Message]) -> None: ...
    def recv(self, timeout_s: float) -> bytes | None: ...
    def close(self) -> None: ...


# Across hosts a connection can go quiet for long (a trace subscriber while no email flows),
# and what sits between the hosts may drop it without a word: Docker Swarm's overlay load
# balancer forgets a TCP connection idle for 900 s (IPVS), a NAT or cloud load balancer
# sooner. libzmq then never learns the peer is gone, and the link is dead until the process
# restarts. ZMTP heartbeats (a PING every 30 s, the connection closed and re-made when no
# PONG comes within 90 s) keep every link busy well inside 900 s and find a dead one, and the
# kernel's TCP keepalive (after 60 s idle) covers a peer that cannot answer PINGs.
HEARTBEAT_IVL_MS = 30_000
HEARTBEAT_TIMEOUT_MS = 90_000
TCP_KEEPALIVE_IDLE_S = 60


def keep_alive(sock: zmq.Socket) -> None:
    """ZMTP heartbeats and TCP keepalive on `sock` (set before bind or connect)."""
    sock.setsockopt(zmq.HEARTBEAT_IVL, HEARTBEAT_IVL_MS)
    sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, HEARTBEAT_TIMEOUT_MS)
    sock.setsockopt(zmq.HEARTBEAT_TTL, HEARTBEAT_TIMEOUT_MS)
    sock.setsockopt(zmq.TCP_KEEPALIVE, 1)
    sock.setsockopt(zmq.TCP_KEEPALIVE_IDLE, TCP_KEEPALIVE_IDLE_S)


def router(ctx: zmq.Context, endpoint: str, max_frame_bytes: int, server: Pair | None = None,
           domain: str = "", rcvhwm: int = HWM) -> zmq.Socket:
    """A broker endpoint; with a key pair it is a CURVE server whose ZAP domain names the
    endpoint, so the authenticator can allow each role's key on its own endpoint only.
    `rcvhwm`: frames libzmq buffers per connection before it stops reading the peer (TCP
    then pushes back on the sender); set before bind, as a listener copies it then."""
    sock = ctx.socket(zmq.ROUTER)
    serve_curve(sock, server, domain)
    keep_alive(sock)
    sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
    sock.setsockopt(zmq.MAXMSGSIZE, max_frame_bytes)
    sock.setsockopt(zmq.LINGER, LINGER_MS)
    sock.setsockopt(zmq.SNDHWM, HWM)
    sock.setsockopt(zmq.RCVHWM, rcvhwm)
    sock.bind(endpoint)
    return sock


def serve_curve(sock: zmq.Socket, server: Pair | None, domain: str) -> None:
    """Make `sock` a CURVE server whose ZAP domain names its endpoint (no pair: plain)."""
    if server is not None:
        sock.curve_secretkey, sock.curve_publickey = server.secret, server.public
        sock.curve_server = True
        sock.zap_domain = domain.encode()


def use_curve(sock: zmq.Socket, client: Pair | None, server_key: bytes | None) -> None:
    """Make `sock` a CURVE client of the server with `server_key` (no keys: plain)."""
    if client is not None and server_key is not None:
        sock.curve_secretkey, sock.curve_publickey, sock.curve_serverkey = client.secret, client.public, server_key


def dealer(ctx: zmq.Context, endpoint: str, max_frame_bytes: int, client: Pair | None = None,
           server_key: bytes | None = None) -> zmq.Socket:
    """A connected DEALER to `endpoint`."""
    sock = unconnected_dealer(ctx, max_frame_bytes, client, server_key)
    sock.connect(endpoint)
    return sock


def unconnected_dealer(ctx: zmq.Context, max_frame_bytes: int, client: Pair | None = None,
                       server_key: bytes | None = None) -> zmq.Socket:
    """A DEALER with every option set, not yet connected: a monitor attached now sees
    every event of its first connection."""
    sock = ctx.socket(zmq.DEALER)
    use_curve(sock, client, server_key)
    keep_alive(sock)
    sock.setsockopt(zmq.MAXMSGSIZE, max_frame_bytes)
    sock.setsockopt(zmq.LINGER, LINGER_MS)
    sock.setsockopt(zmq.SNDHWM, HWM)
    sock.setsockopt(zmq.RCVHWM, HWM)
    sock.setsockopt(zmq.RECONNECT_IVL, 100)
    sock.setsockopt(zmq.RECONNECT_IVL_MAX, 2000)  # backoff doubles up to this cap
    return sock


class ZmqChannel:
    """A DEALER socket to one broker endpoint, one message per frame.

    With `watch_handshake` (a CURVE client only), recv raises KeyRefused when the broker
    refuses this client's keys, until the first handshake succeeds; then the monitor is
    dropped and recv costs what it did."""

    def __init__(self, ctx: zmq.Context, endpoint: str, max_frame_bytes: int, client: Pair | None = None,
                 server_key: bytes | None = None, watch_handshake: bool = False) -> None:
        self.endpoint, self.max_frame_bytes = endpoint, max_frame_bytes
        self._sock = unconnected_dealer(ctx, max_frame_bytes, client, server_key)
        self._monitor: zmq.Socket | None = None
        self._failures = 0
        if watch_handshake and client is not None:
            # Watched before it connects: a success missed here would leave the monitor on
            # for the socket's life, and two drops in a later broker restart would then
            # read as a refused key.
            self._monitor = self._sock.get_monitor_socket(HANDSHAKE_EVENTS)
            self._poller = zmq.Poller()
            self._poller.register(self._sock, zmq.POLLIN)
            self._poller.register(self._monitor, zmq.POLLIN)
        self._sock.connect(endpoint)

    def send(self, message: Message) -> None:
        self._sock.send(encode(message))

    def send_all(self, messages: list[Message]) -> None:
        """In order, batched into as few frames as wire.frames allows."""
        for _, frame in frames(messages, self.max_frame_bytes):
            self._sock.send(frame)

    def recv(self, timeout_s: float) -> bytes | None:
        if not self._ready(timeout_s):
            return None
        frame = self._sock.recv()
        if self._sock.getsockopt(zmq.RCVMORE):
            while self._sock.getsockopt(zmq.RCVMORE):
                self._sock.recv()
            return b""  # more than one frame is not a message: it decodes as Malformed
        return frame

    def _ready(self, timeout_s: float) -> bool:
        """Wait for a frame; with a monitor, read handshake events meanwhile."""
        deadline = time.monotonic() + timeout_s
        while self._monitor is not None:
            ready = dict(self._poller.poll(max(0, int((deadline - time.monotonic()) * 1000))))
            if self._monitor in ready:
                self._handshake_events()
            if self._sock in ready:
                return True
            if not ready:
                return False
        return bool(self._sock.poll(max(0, int((deadline - time.monotonic()) * 1000))))

    def _handshake_events(self) -> None:
        while self._monitor is not None:
            try:
                event = recv_monitor_message(self._monitor, zmq.NOBLOCK)["event"]
            except zmq.Again:
                return
            if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                self._failures = 0  # earlier drops were the broker's, not this key's
                self._unwatch()
                return
            self._failures += 1
            if event == zmq.EVENT_HANDSHAKE_FAILED_AUTH or self._failures >= REPEATS_BEFORE_REFUSED:
                raise KeyRefused(HANDSHAKE_REFUSALS.get(event, "the CURVE handshake failed"))

    def _unwatch(self) -> None:
        if self._monitor is not None:
            self._sock.disable_monitor()
            self._monitor.close(linger=0)
            self._monitor = None

    def may_have_delivered(self) -> bool:
        """Whether anything sent may have reached the broker: False only for a watched
        channel whose handshake never succeeded, as libzmq sends nothing before it."""
        if self._monitor is None:
            return True
        try:
            self._handshake_events()
        except KeyRefused:
            return False
        return self._monitor is None

    def close(self) -> None:
        # A watched channel that never got through its handshake drops what it queued at
        # once, so nothing a caller was told "not sent" reaches a broker that wakes up later.
        linger = LINGER_MS if self.may_have_delivered() else 0
        self._unwatch()
        self._sock.close(linger=linger)


def client_keys(settings: Settings, role: str) -> tuple[Pair | None, bytes | None]:
    """This role's pair and the broker's public key, when the settings name a keys folder."""
    folder = settings.keys_folder
    if folder is None:
        return None, None
    return keys.load(folder, role), keys.load(folder, "broker", secret=False).public


def connector(settings: Settings, role: str, given: Channel | None = None) -> Callable[[], Channel]:
    """How a worker gets a fresh channel to its endpoint (each call: a new socket, so a new
    identity to the broker). A test may pass one channel instead: it is reused."""
    if given is not None:
        return lambda: given
    client, server_key = client_keys(settings, role)  # read once: a bad key fails at start
    return lambda: ZmqChannel(zmq.Context.instance(), settings.endpoint(role), settings.max_frame_bytes,
                              client, server_key)


class MemoryChannel:
    """One end of an in-process pipe carrying encoded frames, for tests without sockets."""

    def __init__(self, inbox: collections.deque[bytes], outbox: collections.deque[bytes],
                 ready: threading.Condition) -> None:
        self._inbox, self._outbox, self._ready = inbox, outbox, ready

    @classmethod
    def pair(cls) -> tuple[MemoryChannel, MemoryChannel]:
        ready = threading.Condition()
        left: collections.deque[bytes] = collections.deque()
        right: collections.deque[bytes] = collections.deque()
        return cls(left, right, ready), cls(right, left, ready)

    def send(self, message: Message) -> None:
        self.send_frame(encode(message))

    def send_all(self, messages: list[Message]) -> None:
        for _, frame in frames(messages):
            self.send_frame(frame)

    def send_frame(self, frame: bytes) -> None:
        with self._ready:
            self._outbox.append(frame)
            self._ready.notify_all()

    def recv(self, timeout_s: float) -> bytes | None:
        with self._ready:
            if not self._inbox and not self._ready.wait_for(lambda: bool(self._inbox), timeout_s):
                return None
            return self._inbox.popleft()

    def close(self) -> None:
        pass
