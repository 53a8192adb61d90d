"""broker.endpoints: the trace's XPUB tells the broker whether anyone subscribes, with real
ZeroMQ sockets (inproc), so the broker makes lines public only while someone watches."""

from __future__ import annotations

import time

import zmq

from broker.endpoints import Endpoints


def _took(endpoints: Endpoints, want: bool) -> bool:
    """Read subscriptions until `watched` is `want` (they cross a thread in libzmq), or 2 s."""
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        endpoints.subscriptions()
        if endpoints.watched is want:
            return True
        time.sleep(0.005)
    return False


def test_watched_follows_subscribers_coming_and_going() -> None:
    ctx = zmq.Context()
    endpoints = Endpoints.__new__(Endpoints)  # only the publisher: no ROUTER needed for this
    endpoints.publisher, endpoints.topics = ctx.socket(zmq.XPUB), set()
    endpoints.publisher.bind("inproc://trace")
    try:
        endpoints.subscriptions()
        assert endpoints.watched is False
        first, second = ctx.socket(zmq.SUB), ctx.socket(zmq.SUB)
        first.connect("inproc://trace")
        first.setsockopt(zmq.SUBSCRIBE, b"")
        assert _took(endpoints, True)
        endpoints.publisher.send(b"a line\n")
        assert first.poll(2000) and first.recv() == b"a line\n"
        second.connect("inproc://trace")
        second.setsockopt(zmq.SUBSCRIBE, b"")
        first.close(linger=0)  # one of two leaves: still watched
        time.sleep(0.05)
        endpoints.subscriptions()
        assert endpoints.watched is True
        second.close(linger=0)  # the last one goes (a page closed): no one watches
        assert _took(endpoints, False)
        third = ctx.socket(zmq.SUB)
        third.connect("inproc://trace")
        third.setsockopt(zmq.SUBSCRIBE, b"")
        assert _took(endpoints, True)
        third.setsockopt(zmq.UNSUBSCRIBE, b"")  # or says it no longer wants the lines
        assert _took(endpoints, False)
        third.close(linger=0)
    finally:
        endpoints.publisher.close(linger=0)
        ctx.term()
