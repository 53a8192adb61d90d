"""One board shared by every open page, fanned out as server-sent events.

Everything here runs on the app's event loop (the feed thread hands records over with
call_soon_threadsafe), so the board needs no lock. A page that connects gets, in one
step, a `snapshot` event and a queue of what follows, so nothing falls between the two.
Then, per trace record: a plain `data:` line holding the record itself (JSON, for any
consumer), and, when the record changed a card, a `card` event with that card and the
counters. Facts about no one email come as `system` events, the naive pane's runs as
`naive` events.

What a page costs is bounded: at most `max_streams` streams are open at once, and one
client (one peer address; one /64 for IPv6) may hold at most `max_streams_per_client` of
them, so a client that opens stream after stream is refused its own, never another's (a
refused page retries). At most `buffer_bytes` of events wait for one page, and its first
event, the snapshot, is held to the same budget (dashboard.snapshot). A page too slow to
keep up is dropped; its browser reconnects and starts again from a fresh snapshot. A
connection that takes nothing at all is closed by the server
(dashboard.__main__.stall_guard), which ends its stream here too.
"""

from __future__ import annotations

import asyncio
import collections
import ipaddress
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from airlock import published
from dashboard import snapshot
from dashboard.config import MAX_STREAMS, MAX_STREAMS_PER_CLIENT, STREAM_BUFFER_BYTES
from dashboard.state import Board

RETRY_MS = 1000  # how soon a dropped or disconnected page reconnects
SNAPSHOT_HEAD = f"retry: {RETRY_MS}\nevent: snapshot\ndata: "  # what a first event holds besides the JSON
IPV6_CLIENT_PREFIX = 64  # one host may hold a whole /64 (privacy addresses): one client

_json = msgspec.json.Encoder()


def sse(event: str | None, data: Any) -> str:
    """One event. JSON escapes newlines, so `data:` is always a single line."""
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {_json.encode(data).decode()}\n\n"


@dataclass(frozen=True)
class Refused:
    """No stream for this page now: all `max_streams` are open, or its client holds its
    whole share (`per_client`). The page tries again after Retry-After."""

    reason: str
    per_client: bool


def client_of(host: str | None) -> str:
    """Who holds a stream, for the per-client share: the peer's IP address, an IPv4 address
    mapped into IPv6 as itself, an IPv6 address as its /64; anything else as it came ("" for
    none, as on a Unix socket)."""
    try:
        address = ipaddress.ip_address(host or "")
    except ValueError:
        return host or ""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.ip_network(f"{address}/{IPV6_CLIENT_PREFIX}", strict=False))
    return str(address)


class Subscriber:
    """One page's queue, bounded in bytes (a count bound let one slow page hold megabytes)."""

    def __init__(self, buffer_bytes: int = STREAM_BUFFER_BYTES, client: str = "") -> None:
        self.client = client
        self.queue: asyncio.Queue[tuple[str, int] | None] = asyncio.Queue()
        self.buffer_bytes = buffer_bytes
        self.queued_bytes = 0

    def put(self, message: str, size: int) -> bool:
        """Queue `message` (`size` bytes in UTF-8), or False if it would pass the budget."""
        if self.queued_bytes + size > self.buffer_bytes:
            return False
        self.queued_bytes += size
        self.queue.put_nowait((message, size))
        return True

    async def get(self) -> str | None:
        """The next event for this page, or None: the stream ends."""
        item = await self.queue.get()
        if item is None:
            return None
        self.queued_bytes -= item[1]
        return item[0]

    def end(self) -> None:
        """Drop what waits and end the stream: a dropped page starts again from a snapshot."""
        while not self.queue.empty():
            self.queue.get_nowait()
        self.queued_bytes = 0
        self.queue.put_nowait(None)


class Hub:
    def __init__(self, board: Board, extra: Callable[[], dict[str, Any]] = dict, *,
                 max_streams: int = MAX_STREAMS, max_streams_per_client: int = MAX_STREAMS_PER_CLIENT,
                 buffer_bytes: int = STREAM_BUFFER_BYTES) -> None:
        self.board = board
        self.extra = extra  # what else a snapshot carries (naive pane, samples, sources)
        self.subscribers: set[Subscriber] = set()  # pages that are sent what happens
        self.open: set[Subscriber] = set()  # streams not ended yet, dropped ones included
        self.held: collections.Counter[str] = collections.Counter()  # open streams per client
        self.max_streams, self.max_streams_per_client = max_streams, max_streams_per_client
        self.buffer_bytes = buffer_bytes
        self.closed = False

    def state(self) -> bytes:
        """The snapshot as JSON, within one page's byte budget: GET /api/state."""
        return snapshot.bounded(self.board, self.extra(), self.buffer_bytes)

    def snapshot(self) -> dict[str, Any]:
        """The snapshot as state() sends it, decoded."""
        decoded: dict[str, Any] = msgspec.json.decode(self.state())
        return decoded

    def subscribe(self, host: str | None = None) -> tuple[Subscriber, str] | Refused:
        """A new page's queue and first event (the snapshot, within its byte budget), or why
        not. A dropped page's stream counts, for the total and its client's share, until its
        connection ends: a page that reads nothing holds its slot until the server closes
        the connection (stall_guard)."""
        client = client_of(host)
        if not self.closed:
            if len(self.open) >= self.max_streams:
                return Refused(f"{self.max_streams} event streams are open; try again shortly", per_client=False)
            if self.held[client] >= self.max_streams_per_client:
                return Refused(f"this client holds {self.max_streams_per_client} event streams, its share; "
                               "close a page or try again shortly", per_client=True)
        subscriber = Subscriber(self.buffer_bytes, client)
        if self.closed:
            subscriber.end()
        else:
            self.subscribers.add(subscriber)
            self.open.add(subscriber)
            self.held[client] += 1
        budget = self.buffer_bytes - len(SNAPSHOT_HEAD) - len("\n\n")
        return subscriber, SNAPSHOT_HEAD + snapshot.bounded(self.board, self.extra(), budget).decode() + "\n\n"

    def unsubscribe(self, subscriber: Subscriber) -> None:
        self.subscribers.discard(subscriber)
        if subscriber in self.open:
            self.open.discard(subscriber)
            self.held[subscriber.client] -= 1
            if self.held[subscriber.client] <= 0:
                del self.held[subscriber.client]

    def publish(self, records: list[dict[str, Any]]) -> None:
        for record in map(published.public, records):  # whatever the source, a page sees no customer data
            card = self.board.apply(record)
            self._send(sse(None, record))
            if card is not None:
                self._send(sse("card", {"card": card, "counters": self.board.counters}))
            elif not isinstance(record.get("message_id"), str) and isinstance(record.get("event"), str):
                self._send(sse("system", self.board.system[-1]))

    def publish_naive(self, entry: dict[str, Any]) -> None:
        run = self.board.naive_update(entry)
        self._send(sse("naive", {"run": run, "counters": dict(self.board.naive_counters)}))

    def publish_naive_pane(self, described: dict[str, Any]) -> None:
        """The naive pane's state changed (the service said which model it has): tell every page."""
        self._send(sse("naive_pane", described))

    def close(self) -> None:
        """End every open stream (shutdown): pages see the server go, then reconnect."""
        self.closed = True
        for subscriber in list(self.subscribers):
            subscriber.end()
        self.subscribers.clear()

    def _send(self, message: str) -> None:
        size = len(message.encode())  # once: every page's queue holds this same string
        for subscriber in list(self.subscribers):
            if not subscriber.put(message, size):
                self.subscribers.discard(subscriber)
                subscriber.end()
