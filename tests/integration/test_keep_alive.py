"""Links that go quiet across hosts (airlock/transport.py keep_alive): every socket airlock
makes carries ZMTP heartbeats and TCP keepalive, and a heartbeat finds a link that something
in between dropped without a word, as Swarm's overlay load balancer does after 900 s idle."""

from __future__ import annotations

import socket
import threading
import time

import pytest
import zmq
from zmq.utils.monitor import recv_monitor_message

from airlock import transport
from ops.ports import free_ports


def test_every_socket_kind_airlock_makes_keeps_its_links_alive() -> None:
    ctx = zmq.Context()
    try:
        (port,) = free_ports(1)
        sockets = [transport.router(ctx, f"tcp://127.0.0.1:{port}", 1024),
                   transport.unconnected_dealer(ctx, 1024)]
        for sock in sockets:
            assert sock.getsockopt(zmq.HEARTBEAT_IVL) == transport.HEARTBEAT_IVL_MS
            assert sock.getsockopt(zmq.HEARTBEAT_TIMEOUT) == transport.HEARTBEAT_TIMEOUT_MS
            assert sock.getsockopt(zmq.TCP_KEEPALIVE) == 1
        assert transport.HEARTBEAT_IVL_MS * 10 < 900_000  # many pings inside the overlay's idle cut
    finally:
        ctx.destroy(linger=0)


def test_the_publisher_and_the_pages_subscriber_call_it() -> None:
    """The trace stream's two ends are made outside transport.py: both call keep_alive."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    for path in ("broker/endpoints.py", "dashboard/feed.py"):
        assert "keep_alive(" in (root / path).read_text(), path


class BlackHole:
    """A TCP relay that, once `drop()` is called, stops carrying bytes either way and closes
    nothing: what a load balancer does to a connection it has forgotten."""

    def __init__(self, target: int) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.target, self.dropped = target, threading.Event()
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.target))
            self.held += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        while True:
            try:
                data = source.recv(65536)
            except OSError:
                return
            if not data:
                return
            if not self.dropped.is_set():
                sink.sendall(data)

    def drop(self) -> None:
        self.dropped.set()

    def close(self) -> None:
        self.listener.close()
        for s in self.held:
            s.close()


@pytest.fixture
def fast_heartbeats(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transport, "HEARTBEAT_IVL_MS", 100)
    monkeypatch.setattr(transport, "HEARTBEAT_TIMEOUT_MS", 400)


def disconnected_within(seconds: float, heartbeats: bool) -> bool:
    """A DEALER through a relay that goes silent: does it notice the link is dead?"""
    ctx = zmq.Context()
    (port,) = free_ports(1)
    hole = BlackHole(port)
    try:
        router = transport.router(ctx, f"tcp://127.0.0.1:{port}", 1024)
        dealer = transport.unconnected_dealer(ctx, 1024)
        if not heartbeats:
            dealer.setsockopt(zmq.HEARTBEAT_IVL, 0)
            router.setsockopt(zmq.HEARTBEAT_IVL, 0)
        monitor = dealer.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        dealer.connect(f"tcp://127.0.0.1:{hole.port}")
        dealer.send(b"hello")
        assert router.poll(5000), "the relay did not carry the first message"
        router.recv_multipart()
        hole.drop()
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if monitor.poll(100):
                return recv_monitor_message(monitor)["event"] == zmq.EVENT_DISCONNECTED
        return False
    finally:
        hole.close()
        ctx.destroy(linger=0)


def test_a_heartbeat_finds_a_link_dropped_in_between(fast_heartbeats: None) -> None:
    """With heartbeats the DEALER closes the dead link (and reconnects); without them it
    waits on it forever: the proof that the option, not luck, finds it."""
    assert disconnected_within(5.0, heartbeats=True)
    assert not disconnected_within(2.0, heartbeats=False)
